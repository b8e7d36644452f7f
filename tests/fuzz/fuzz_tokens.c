/* libFuzzer target: a token shard (llm.c / nanoGPT format) through the loader: open with a
 * vocabulary of 256, sequential and shuffled batches over a few steps, and seeks to positions
 * taken from the input. Must never crash, hang or read out of bounds. */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "train/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/in.bin", fuzz_dir());
    fuzz_write(path, data, size);
    enum { B = 2, T = 4 };
    int32_t in[B * T], tg[B * T];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        dt_loader ld;
        if (dt_loader_open(&ld, path, 256, B, T, shuffle, 7, NULL) != DT_OK)
            continue;
        for (int step = 0; step < 3; step++) {
            (void)dt_loader_rows(&ld, 0, B, in, tg);
            dt_loader_advance(&ld);
        }
        int64_t pos = 0;
        if (size >= 1032)
            memcpy(&pos, data + size - 8, sizeof pos); /* a hostile saved position */
        if (dt_loader_seek(&ld, pos, 1) == DT_OK)
            (void)dt_loader_rows(&ld, 0, B, in, tg);
        dt_loader_close(&ld);
    }
    return 0;
}
