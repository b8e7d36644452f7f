/* libFuzzer target: a sharded checkpoint's manifest.json (its checksum file rewritten to
 * match, as a hostile user would) over a real step-0 folder of the tiny model: verify, the
 * model config, the weights, and a whole one-process load (state, weights and moments).
 * Must never crash, hang or read out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "fuzz_common.h"
#include "io/crc32c.h"
#include "train/checkpoint.h"

static char folder[128];

static void setup(dt_model *g, float *w) {
    char hf[128], ck[128];
    memset(w, 0, (size_t)dt_model_full_numel(g) * sizeof *w);
    snprintf(hf, sizeof hf, "%s/w.safetensors", fuzz_dir());
    snprintf(ck, sizeof ck, "%s/ck", fuzz_dir());
    if (dt_model_save(g, w, hf) != DT_OK || dt_ckpt_convert_from_hf(hf, ck, 1) != DT_OK) {
        fprintf(stderr, "fuzz_manifest set-up: %s\n", dt_err_msg());
        abort();
    }
    snprintf(folder, sizeof folder, "%s/step-0", ck);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_model *g;
    static dt_mem *mem;
    static dt_comm *world;
    static float *w, *m, *v;
    static void *io;
    if (!g) {
        g = fuzz_tiny_model(&mem);
        size_t bytes = (size_t)dt_model_full_numel(g) * sizeof(float);
        w = malloc(bytes), m = malloc(bytes), v = malloc(bytes), io = malloc(1 << 16);
        setup(g, w);
        if (dt_comm_local_init("world", &world) != DT_OK)
            abort();
    }
    char path[192], hex[16];
    snprintf(path, sizeof path, "%s/manifest.json", folder);
    fuzz_write(path, data, size);
    /* the reader checksums the text up to its first NUL */
    snprintf(hex, sizeof hex, "%08x\n", dt_crc32c(0, data, strnlen((const char *)data, size)));
    snprintf(path, sizeof path, "%s/manifest.crc32c", folder);
    fuzz_write(path, hex, strlen(hex));
    (void)dt_ckpt_verify(folder, world, io, 1 << 16);
    dt_model_config c;
    (void)dt_ckpt_model_config(folder, &c);
    (void)dt_ckpt_load_weights(folder, g, true, w, NULL);
    int64_t n = dt_model_full_numel(g);
    dt_engine_view view = {.w_first = 0, .w_count = n, .m_first = 0, .m_count = n,
                           .w = w, .m = m, .v = v};
    dt_train_state s = {0};
    int adam_steps;
    (void)dt_ckpt_load_sharded(folder, g, &view, &s, &adam_steps, NULL, 0);
    return 0;
}
