/* A booster's state on disk: weights to start from, exports, sharded checkpoints (saved,
 * found, loaded into any layout) and sampling from the gathered weights. See
 * include/dtrain/booster.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "train/booster_impl.h"
#include "train/finite.h"
#include "train/trainer.h"

/* rank 0 reads, everyone receives: no shared filesystem needed for weights or checkpoints */
static dt_status broadcast_floats(dt_comm *c, float *x, int64_t n) {
    const int64_t chunk = 1 << 28;
    for (int64_t i = 0; i < n; i += chunk)
        DT_TRY(dt_comm_broadcast(c, x + i, (n - i < chunk ? n - i : chunk) * 4, 0));
    return DT_OK;
}

/* whole-arena copies of the state, as temporaries */
static dt_status arenas_alloc(dt_booster *b, dt_ckpt_arenas *a, bool with_optim) {
    size_t bytes = (size_t)dt_model_full_numel(b->model) * sizeof(float);
    memset(a, 0, sizeof *a);
    DT_TRY(dt_mem_alloc(b->mem, DT_MEM_TEMP, "state.weights", bytes, (void **)&a->w));
    if (!with_optim)
        return DT_OK;
    DT_TRY(dt_mem_alloc(b->mem, DT_MEM_TEMP, "state.exp_avg", bytes, (void **)&a->m));
    return dt_mem_alloc(b->mem, DT_MEM_TEMP, "state.exp_avg_sq", bytes, (void **)&a->v);
}

static void arenas_free(dt_booster *b, dt_ckpt_arenas *a) {
    dt_mem_release(b->mem, a->v);
    dt_mem_release(b->mem, a->m);
    dt_mem_release(b->mem, a->w);
}

/* The load checks model.init's sizes and tensors against the run's model; its other metadata
 * (max_seq_len, norm_eps, rope_theta) is then validated as a config's would be: a file whose
 * metadata is impossible was not written by a sound run. */
static dt_status load_init(dt_booster *b, float *w, const char *path) {
    DT_TRY(dt_model_load(b->model, w, path));
    dt_model_config fc = *dt_model_cfg(b->model);
    DT_TRY(dt_model_config_from_file(path, &fc));
    return dt_config_validate_model(&fc, path);
}

dt_status dt_booster__load_weights(dt_booster *b, const char *path) {
    dt_ckpt_arenas a;
    dt_status st = arenas_alloc(b, &a, false);
    if (st == DT_OK && dt_booster__is_root(b))
        st = load_init(b, a.w, path);
    st = dt_comm_agree(b->world, st);
    if (st == DT_OK)
        st = broadcast_floats(b->world, a.w, dt_model_full_numel(b->model));
    if (st == DT_OK)
        st = dt_engine_scatter_state(b->engine, a.w, NULL, NULL);
    arenas_free(b, &a);
    return st;
}

/* ---- state on disk ---------------------------------------------------------------------- */

/* The weights' average's file beside the weights': ".ema" before the extension */
void dt_booster_ema_path(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash))
        dot = path + strlen(path);
    snprintf(out, n, "%.*s.ema%s", (int)(dot - path), path, dot);
}

/* collective: export gathers the weights (and their average, beside them) on every rank and
 * rank 0 writes them */
static dt_status export_weights(dt_booster *b, const char *path) {
    DT_TRY(dt_finite_check_weights(b->engine, b->world, b->state.step, b->plugin.grad_clip,
                                   "exporting"));
    dt_ckpt_arenas a;
    dt_mem_set_context(b->mem, (int)b->state.step, DT_MEM_PHASE_EXPORT, -1);
    dt_status st = arenas_alloc(b, &a, false);
    if (st == DT_OK)
        st = dt_engine_gather_state(b->engine, a.w, NULL, NULL);
    if (st == DT_OK && dt_booster__is_root(b))
        st = dt_model_save(b->model, a.w, path);
    if (st == DT_OK && dt_engine_has_ema(b->engine)) {
        char ema[4200];
        dt_booster_ema_path(path, ema, sizeof ema);
        st = dt_engine_gather_ema(b->engine, a.w);
        if (st == DT_OK && dt_booster__is_root(b))
            st = dt_model_save(b->model, a.w, ema);
    }
    arenas_free(b, &a);
    return dt_comm_agree(b->world, st);
}

/* the layout, for the manifest */
static void layout_text(const dt_booster *b, char *out, size_t n) {
    const dt_layout *l = &b->lay;
    snprintf(out, n, "world=%d dp=%d tp=%d pp=%d sp=%d zero=%d microbatches=%d precision=%s",
             l->world, l->dp, l->tp, l->pp, l->sp, l->zero, l->n_mb,
             dt_precision_name(l->precision));
}

/* the run's configuration as INI text for the manifest (rank 0), or NULL; with the
 * pipeline's split in use (train.rebalance_every may have moved it from the config's) */
static char *config_text(const dt_booster *b, const dt_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    if (!cfg || !dt_booster__is_root(b))
        return NULL;
    dt_config now = *cfg;
    snprintf(now.plugin.pp_layers, sizeof now.plugin.pp_layers, "%s", b->plugin.pp_layers);
    FILE *f = open_memstream(&text, &len);
    if (f) {
        dt_config_print(&now, f);
        fclose(f);
    }
    return text;
}

/* collective: every rank writes what it owns (checkpoint.h's sharded format); async: from a
 * background thread after a copy to the staging buffer, once the save before it is done */
dt_status dt_booster_save_checkpoint(dt_booster *b, const char *dir, const dt_config *cfg) {
    DT_TRY(dt_booster_wait_checkpoint(b)); /* at most one save in flight */
    dt_mem_set_context(b->mem, (int)b->state.step, DT_MEM_PHASE_CHECKPOINT, -1);
    /* gradients were checked by the step */
    DT_TRY(dt_finite_check_weights(b->engine, b->world, b->state.step, b->plugin.grad_clip,
                                   "saving a checkpoint"));
    bool async = cfg && cfg->checkpoint.async;
    void *io = NULL;
    char *config = config_text(b, cfg), layout[256];
    dt_engine_view v = {0};
    dt_status st =
        async ? DT_OK : dt_mem_alloc(b->mem, DT_MEM_TEMP, "ckpt.io", DT_CKPT_IO_BYTES, &io);
    layout_text(b, layout, sizeof layout);
    if (st == DT_OK)
        st = dt_engine_view_begin(b->engine, false, &v);
    st = dt_comm_agree(b->world, st);
    dt_ckpt_meta meta = {.state = &b->state,
                         .adam_steps = dt_engine_adam_steps(b->engine),
                         .layout = layout,
                         .config = config,
                         .ema = v.ema != NULL};
    if (st == DT_OK && async)
        st = dt_ckpt_async_start(dir, b->world, b->model, &v, &meta, b->mem, &b->saving);
    else if (st == DT_OK)
        st = dt_ckpt_save_sharded(dir, b->world, b->model, &v, &meta, io, DT_CKPT_IO_BYTES);
    if (st == DT_OK && !async)
        b->saved_step = b->state.step;
    dt_engine_view_end(b->engine, &v, false);
    free(config);
    dt_mem_release(b->mem, io);
    return st;
}

int64_t dt_booster_last_checkpoint(const dt_booster *b) { return b->saved_step; }

dt_status dt_booster_export(dt_booster *b, const char *path) { return export_weights(b, path); }

/* rank 0 only: a one-process copy of the model (no tp, sp or pipeline) from the full weights */
static dt_status sample_on_root(dt_booster *b, const float *full, const int32_t *prompt,
                                int n_prompt, int n_new, float temperature, uint64_t seed,
                                int32_t *out) {
    dt_model_opts o = {.B = 1, .T = b->lay.T, .precision = b->plugin.precision};
    dt_model *g = NULL;
    DT_TRY(dt_model_create(dt_model_cfg(b->model), &o, b->mem, &g));
    memcpy(dt_model_weights(g), full, (size_t)dt_model_numel(g) * sizeof(float));
    dt_model_sync_lp(g);
    dt_status st = dt_sample_tokens(g, b->lay.T, prompt, n_prompt, n_new, temperature, seed, out);
    dt_model_free(g);
    return st;
}

dt_status dt_booster_sample(dt_booster *b, const int32_t *prompt, int n_prompt, int n_new,
                            float temperature, uint64_t seed, int32_t *out) {
    dt_ckpt_arenas a;
    dt_status st = arenas_alloc(b, &a, false);
    if (st == DT_OK)
        st = dt_engine_gather_state(b->engine, a.w, NULL, NULL);
    if (st == DT_OK && dt_booster__is_root(b))
        st = sample_on_root(b, a.w, prompt, n_prompt, n_new, temperature, seed, out);
    arenas_free(b, &a);
    DT_TRY(dt_comm_agree(b->world, st));
    return dt_comm_broadcast(b->world, out, (int64_t)n_new * sizeof *out, 0);
}

/* a checkpoint in the whole format (older dtrain): rank 0 reads, everyone gets it all */
static dt_status load_whole(dt_booster *b, const char *folder) {
    dt_ckpt_arenas a;
    dt_status st = arenas_alloc(b, &a, true);
    if (st == DT_OK && dt_booster__is_root(b))
        st = dt_ckpt_load(folder, b->model, &a, &b->state);
    st = dt_comm_agree(b->world, st);
    int64_t n = dt_model_full_numel(b->model);
    if (st == DT_OK)
        st = broadcast_floats(b->world, a.w, n);
    if (st == DT_OK)
        st = broadcast_floats(b->world, a.m, n);
    if (st == DT_OK)
        st = broadcast_floats(b->world, a.v, n);
    if (st == DT_OK)
        st = dt_comm_broadcast(b->world, &b->state, sizeof b->state, 0);
    if (st == DT_OK)
        st = dt_comm_broadcast(b->world, &a.adam_steps, sizeof a.adam_steps, 0);
    if (st == DT_OK) {
        st = dt_engine_scatter_state(b->engine, a.w, a.m, a.v);
        dt_engine_set_adam_steps(b->engine, a.adam_steps);
    }
    arenas_free(b, &a);
    return st;
}

/* a sharded checkpoint: each rank reads the slices its layout holds (offloaded moments
 * through the io buffer into their file) */
static dt_status load_sharded(dt_booster *b, const char *folder) {
    dt_engine_view v;
    int adam_steps = 0;
    void *io = NULL;
    dt_train_state s = b->state;
    dt_status st = dt_engine_view_begin(b->engine, true, &v);
    if (st == DT_OK && !v.m)
        st = dt_mem_alloc(b->mem, DT_MEM_TEMP, "ckpt.io", DT_CKPT_IO_BYTES, &io);
    if (st == DT_OK)
        st = dt_ckpt_load_sharded(folder, b->model, &v, &s, &adam_steps, io,
                                  io ? DT_CKPT_IO_BYTES : 0);
    dt_mem_release(b->mem, io);
    dt_status end = dt_engine_view_end(b->engine, &v, st == DT_OK);
    st = st != DT_OK ? st : end;
    if (st == DT_OK) {
        b->state = s;
        dt_engine_set_adam_steps(b->engine, adam_steps);
    }
    return st;
}

dt_status dt_booster_load_checkpoint(dt_booster *b, const char *folder) {
    dt_mem_set_context(b->mem, (int)b->state.step, DT_MEM_PHASE_CHECKPOINT, -1);
    bool kind = false;
    DT_TRY(dt_comm_agree(b->world,
                         dt_booster__is_root(b) ? dt_ckpt_folder_kind(folder, &kind) : DT_OK));
    int sharded = kind;
    DT_TRY(dt_comm_broadcast(b->world, &sharded, sizeof sharded, 0));
    dt_status st = sharded ? load_sharded(b, folder) : load_whole(b, folder);
    if (st == DT_OK &&
        (st = dt_source_seek(b->train, b->state.data_pos, b->state.data_step)) != DT_OK)
        dt_err_wrap(st, "checkpoint %s: ", folder);
    return dt_comm_agree(b->world, st); /* offloaded moments are written to files */
}

dt_status dt_booster_find_checkpoint(dt_booster *b, const char *dir, char *out, size_t n) {
    long long *steps = NULL;
    int count = 0, damaged = 0;
    dt_status st = dt_booster__is_root(b) ? dt_ckpt_list(dir, &steps, &count) : DT_OK;
    DT_TRY(dt_comm_agree(b->world, st));
    DT_TRY(dt_comm_broadcast(b->world, &count, sizeof count, 0));
    out[0] = 0;
    void *io = NULL;
    st = dt_comm_agree(b->world,
                       dt_mem_alloc(b->mem, DT_MEM_TEMP, "ckpt.io", DT_CKPT_IO_BYTES, &io));
    for (int i = count - 1; st == DT_OK && i >= 0 && !out[0]; i--) {
        long long step = dt_booster__is_root(b) ? steps[i] : 0;
        DT_TRY(dt_comm_broadcast(b->world, &step, sizeof step, 0));
        char folder[4096 + 32];
        snprintf(folder, sizeof folder, "%s/step-%lld", dir, step);
        int sharded = dt_booster__is_root(b) && dt_ckpt_is_sharded(folder);
        st = dt_comm_broadcast(b->world, &sharded, sizeof sharded, 0);
        dt_status ok =
            st == DT_OK && sharded ? dt_ckpt_verify(folder, b->world, io, DT_CKPT_IO_BYTES) : DT_OK;
        if (st == DT_OK && ok != DT_OK) {
            damaged++;
            if (dt_booster__is_root(b))
                dt_warn("resume=auto: skipping damaged checkpoint %s: %s", folder, dt_err_msg());
            continue;
        }
        if (st == DT_OK)
            snprintf(out, n, "%s", folder);
    }
    dt_mem_release(b->mem, io);
    free(steps);
    DT_TRY(st);
    if (!out[0] && damaged)
        return dt_err_set(DT_ERR_FORMAT,
                          "resume=auto: every checkpoint in %s is damaged (%d; "
                          "see the warnings above); remove them or set checkpoint.resume to a "
                          "folder",
                          dir, damaged);
    return DT_OK;
}
