/* libFuzzer target: state.json of a whole-format checkpoint (older dtrain) in a step-0 folder
 * whose model.safetensors and optim.safetensors are valid for the tiny model: dt_ckpt_load
 * parses the state, checks it against the folder, then loads weights and moments. Must never
 * crash, hang or read out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

static char folder[128];

static void setup(dt_model *g, float *zeros) {
    char path[192], names[2][128];
    snprintf(folder, sizeof folder, "%s/step-0", fuzz_dir());
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    dt_st_writer *wr = NULL;
    dt_status st = dt_mkdirs(folder);
    if (st == DT_OK)
        st = dt_model_save(g, zeros, path);
    if (st == DT_OK)
        st = dt_st_writer_init(&wr);
    int np = dt_model_n_full_params(g);
    for (int i = 0; st == DT_OK && i < np; i++) { /* the writer copies names, borrows data */
        const dt_param *p = dt_model_full_param(g, i);
        snprintf(names[0], sizeof names[0], "exp_avg.%s", p->name);
        snprintf(names[1], sizeof names[1], "exp_avg_sq.%s", p->name);
        st = dt_st_writer_add(wr, names[0], DT_ST_F32, p->ndim, p->shape, zeros + p->offset);
        if (st == DT_OK)
            st = dt_st_writer_add(wr, names[1], DT_ST_F32, p->ndim, p->shape, zeros + p->offset);
    }
    snprintf(path, sizeof path, "%s/optim.safetensors", folder);
    if (st == DT_OK)
        st = dt_st_writer_commit(wr, path);
    dt_st_writer_free(wr);
    if (st != DT_OK) {
        fprintf(stderr, "fuzz_state set-up: %s\n", dt_err_msg());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_model *g;
    static dt_mem *mem;
    static dt_ckpt_arenas a;
    if (!g) {
        g = fuzz_tiny_model(&mem);
        size_t bytes = (size_t)dt_model_full_numel(g) * sizeof(float);
        a.w = calloc(1, bytes), a.m = malloc(bytes), a.v = malloc(bytes);
        setup(g, a.w);
    }
    char path[192];
    snprintf(path, sizeof path, "%s/state.json", folder);
    fuzz_write(path, data, size);
    dt_train_state s = {0};
    (void)dt_ckpt_load(folder, g, &a, &s);
    return 0;
}
