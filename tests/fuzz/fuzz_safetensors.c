/* libFuzzer target: a safetensors file (header length, JSON header, data) through
 * dt_st_open, every tensor read as float, the model config from its metadata, and a load
 * into the tiny model. Must never crash, hang or read out of bounds, whatever the bytes. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_model *g;
    static dt_mem *mem;
    static float *w;
    if (!g) {
        g = fuzz_tiny_model(&mem);
        w = malloc((size_t)dt_model_full_numel(g) * sizeof *w);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/in.safetensors", fuzz_dir());
    fuzz_write(path, data, size);
    dt_st_file *f = NULL;
    if (dt_st_open(path, &f) == DT_OK) {
        for (int i = 0; i < dt_st_count(f); i++) {
            const dt_st_tensor *t = dt_st_get(f, i);
            float *out = malloc(2 * t->nbytes + 4); /* 16-bit dtypes widen to 4 bytes */
            (void)dt_st_read_f32(f, t->name, t->ndim, t->shape, out);
            free(out);
        }
        dt_st_close(f);
    }
    dt_model_config c = *dt_model_cfg(g);
    (void)dt_model_config_from_file(path, &c);
    (void)dt_model_load(g, w, path);
    return 0;
}
