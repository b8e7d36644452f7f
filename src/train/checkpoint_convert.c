/* dtrain convert: sharded checkpoint <-> one HuggingFace safetensors file, in one process.
 * See checkpoint.h. */
#include "train/checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "dtrain/booster.h"
#include "plan/memory.h"

dt_status dt_ckpt_check_shape(const dt_model_config *c, const char *origin) {
    DT_TRY(dt_config_validate_model(c, origin));
    double need = 4 * dt_plan_param_count(c), have = dt_mem_physical_bytes();
    if (have > 0 && need > have)
        return dt_err_set(DT_ERR_ARG, "%s: the model (n_layer %d, n_embd %d) has %.4g "
                          "parameters: its weights need %.4g GiB, and this machine has %.1f GiB "
                          "of memory", origin, c->n_layer, c->n_embd, need / 4,
                          need / 1073741824.0, have / 1073741824.0);
    return DT_OK;
}

/* A one-process model (no splits, no training buffers) of the given shape. */
static dt_status one_process(const dt_model_config *c, const char *origin, dt_mem **mem,
                             dt_model **g) {
    DT_TRY(dt_ckpt_check_shape(c, origin));
    DT_TRY(dt_mem_init(mem));
    /* one position (a GPT's tables do not depend on it); a DiT's clip is its sequence */
    dt_model_opts o = {
        .B = 1, .T = c->arch == DT_ARCH_DIT ? c->max_seq_len : 1, .precision = DT_PREC_FP32};
    return dt_model_create(c, &o, *mem, g);
}

dt_status dt_ckpt_convert_to_hf(const char *folder, const char *out) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    DT_TRY(dt_ckpt_model_config(folder, &cfg.model));
    dt_mem *mem = NULL;
    dt_model *g = NULL;
    dt_status st = one_process(&cfg.model, folder, &mem, &g);
    if (st == DT_OK)
        st = dt_ckpt_load_weights(folder, g, false, dt_model_weights(g), NULL);
    if (st == DT_OK)
        st = dt_model_save(g, dt_model_weights(g), out);
    /* the weights' average, where the checkpoint holds one, beside them (as train.export) */
    bool averaged = false;
    if (st == DT_OK)
        st = dt_ckpt_load_weights(folder, g, true, dt_model_weights(g), &averaged);
    if (st == DT_OK && averaged) {
        char ema[4200];
        dt_booster_ema_path(out, ema, sizeof ema);
        st = dt_model_save(g, dt_model_weights(g), ema);
    }
    dt_model_free(g);
    dt_mem_free(mem);
    return st;
}

dt_status dt_ckpt_convert_from_hf(const char *file, const char *out, uint64_t seed) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    DT_TRY(dt_model_config_from_file(file, &cfg.model));
    cfg.train.seed = seed;
    dt_mem *mem = NULL;
    dt_model *g = NULL;
    dt_comm *self = NULL;
    float *zeros = NULL;
    dt_status st = one_process(&cfg.model, file, &mem, &g);
    if (st == DT_OK)
        st = dt_model_load(g, dt_model_weights(g), file);
    int64_t n = g ? dt_model_numel(g) : 0;
    if (st == DT_OK && !(zeros = calloc((size_t)n + 1, sizeof *zeros)))
        st = dt_err_set(DT_ERR_OOM, "convert: out of memory for the moments");
    void *io = NULL;
    if (st == DT_OK)
        st = dt_mem_alloc(mem, DT_MEM_TEMP, "ckpt.io", DT_CKPT_IO_BYTES, &io);
    if (st == DT_OK)
        st = dt_comm_local_init("convert", &self);
    if (st == DT_OK) {
        dt_train_state s = {.seed = seed};
        dt_loss_scale_init(&s.scaler, cfg.plugin.initial_scale, cfg.plugin.loss_scale_window);
        dt_engine_view v = {.w_count = n, .m_count = n, .w = dt_model_weights(g), .m = zeros,
                            .v = zeros};
        dt_ckpt_meta meta = {.state = &s, .layout = "converted from a HuggingFace file"};
        st = dt_ckpt_save_sharded(out, self, g, &v, &meta, io, DT_CKPT_IO_BYTES);
    }
    dt_comm_free(self);
    free(zeros);
    dt_model_free(g);
    dt_mem_free(mem);
    return st;
}
