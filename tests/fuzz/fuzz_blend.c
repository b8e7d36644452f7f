/* libFuzzer target: a weighted blend of two token files through the batch source. The input's
 * first two bytes are the weights (1..256 each), the third splits the rest into the two
 * files (shards, raw nanoGPT ids, or neither). Opened with a vocabulary of 256, sequential and
 * shuffled, a few steps read, advanced and sought back. Must never crash, hang, read out of
 * bounds or allocate what a file claims. */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "train/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3)
        return 0;
    size_t rest = size - 3, n_a = (size_t)data[2] * rest / 255;
    char a[128], b[128], spec[400];
    snprintf(a, sizeof a, "%s/a.bin", fuzz_dir());
    snprintf(b, sizeof b, "%s/b.bin", fuzz_dir());
    fuzz_write(a, data + 3, n_a);
    fuzz_write(b, data + 3 + n_a, rest - n_a);
    snprintf(spec, sizeof spec, "%d %s %d %s", data[0] + 1, a, data[1] + 1, b);
    enum { B = 3, T = 4 };
    int32_t in[B * T], tg[B * T];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        dt_source *s = NULL;
        if (dt_source_open_tokens(spec, 256, B, T, shuffle, 7, NULL, &s) != DT_OK)
            continue;
        for (int step = 0; step < 4; step++) {
            (void)dt_source_rows(s, 0, B, in, tg);
            dt_source_advance(s);
        }
        (void)dt_source_seek(s, 2 * B, 2);
        (void)dt_source_rows(s, 1, 2, in, tg);
        dt_source_close(s);
    }
    return 0;
}
