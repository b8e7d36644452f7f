/* libFuzzer target: a Megatron indexed dataset (PREFIX.idx + PREFIX.bin) through the loader.
 * The input's first two bytes give the index's length; the index is the next bytes, .bin the
 * rest. Opened with a vocabulary of 256, a few sequential and shuffled batches read. Must never
 * crash, hang, read out of bounds or allocate what a header claims. */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "train/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    size_t n_idx = (size_t)(data[0] | data[1] << 8);
    n_idx = n_idx < size - 2 ? n_idx : size - 2;
    char prefix[128], idx[160], bin[160];
    snprintf(prefix, sizeof prefix, "%s/ds", fuzz_dir());
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    fuzz_write(idx, data + 2, n_idx);
    fuzz_write(bin, data + 2 + n_idx, size - 2 - n_idx);
    enum { B = 2, T = 4 };
    int32_t in[B * T], tg[B * T];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        dt_loader ld;
        if (dt_loader_open(&ld, prefix, 256, B, T, shuffle, 7, NULL) != DT_OK)
            continue;
        for (int step = 0; step < 3; step++) {
            (void)dt_loader_rows(&ld, 0, B, in, tg);
            dt_loader_advance(&ld);
        }
        dt_loader_close(&ld);
    }
    return 0;
}
