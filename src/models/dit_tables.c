/* The DiT's shape and split checks, its parameter tables (the single process's and this
 * rank's: the tensors of the units it holds, packed), the whole-arena gathers across
 * pipeline stages, and the FLOPs count (see dit.h).
 *
 * Parameter names follow the DiT / Open-Sora PyTorch modules (x_embedder.proj, t_embedder.mlp,
 * y_embedder.embedding_table, blocks.N.{adaLN_modulation.1, attn.qkv, attn.proj, mlp.fc1,
 * mlp.fc2}, final_layer.{adaLN_modulation.1, linear}); the patch embedding's Conv3d weight
 * [C, channels, pt, ph, pw] is stored flattened as a linear [C, channels pt ph pw]. Under tp a
 * block's attn.qkv (q, k, v sections), attn.proj (columns), mlp.fc1 (rows) and mlp.fc2
 * (columns) are split; everything else is whole on every tp rank.
 */
#include "models/dit_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status dt_dit_check_config(const dt_dit_config *c) {
    const struct {
        const char *name;
        int v;
    } pos[] = {{"frames", c->frames}, {"channels", c->channels}, {"height", c->height},
               {"width", c->width},   {"pt", c->pt},             {"ph", c->ph},
               {"pw", c->pw},         {"n_layer", c->n_layer},   {"n_head", c->n_head},
               {"n_embd", c->n_embd}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return dt_err_set(DT_ERR_ARG, "dit: %s = %d must be positive", pos[i].name,
                              pos[i].v);
    const struct {
        const char *dim, *patch;
        int n, p;
    } div[] = {{"frames", "pt", c->frames, c->pt},
               {"height", "ph", c->height, c->ph},
               {"width", "pw", c->width, c->pw}};
    for (int i = 0; i < 3; i++)
        if (div[i].n % div[i].p)
            return dt_err_set(DT_ERR_ARG, "dit: %s = %d is not a multiple of the patch %s = %d",
                              div[i].dim, div[i].n, div[i].patch, div[i].p);
    if (c->n_embd % c->n_head)
        return dt_err_set(DT_ERR_ARG, "dit: n_embd = %d is not a multiple of n_head = %d",
                          c->n_embd, c->n_head);
    if (c->n_embd < 6)
        return dt_err_set(DT_ERR_ARG,
                          "dit: n_embd = %d is too small for the 3-D position code (>= 6)",
                          c->n_embd);
    if (c->n_classes < 0)
        return dt_err_set(DT_ERR_ARG, "dit: n_classes = %d must be >= 0", c->n_classes);
    if (!(c->shift >= 0 && c->shift <= DT_DIT_MAX_SHIFT))
        return dt_err_set(DT_ERR_ARG, "dit: timestep shift = %g must be in 0..%g (0, 1: none)",
                          (double)c->shift, (double)DT_DIT_MAX_SHIFT);
    if (c->text_len < 0 || c->text_len > DT_DIT_MAX_TEXT)
        return dt_err_set(DT_ERR_ARG, "dit: text_len = %d is not in 0..%d", c->text_len,
                          DT_DIT_MAX_TEXT);
    if (c->text_dim < 0 || c->text_dim > DT_DIT_MAX_TEXT_DIM)
        return dt_err_set(DT_ERR_ARG, "dit: text_dim = %d is not in 0..%d", c->text_dim,
                          DT_DIT_MAX_TEXT_DIM);
    if ((unsigned)c->attn >= DT_DIT_ATTN_COUNT)
        return dt_err_set(DT_ERR_ARG, "dit: attn = %d is not full or spatial_temporal",
                          (int)c->attn);
    int64_t tokens = (int64_t)(c->frames / c->pt) * (c->height / c->ph) * (c->width / c->pw);
    if (tokens > (1 << 24))
        return dt_err_set(DT_ERR_ARG, "dit: %lld tokens per clip is more than 2^24",
                          (long long)tokens);
    return DT_OK;
}

dt_status dt_dit_check_split(const dt_dit_config *c, const dt_model_split *s) {
    int tp = s->tp, sp = s->sp, cp = s->cp, chunks = cp * s->cp_chunks;
    bool sequence_tp = s->sequence_tp;
    if (tp < 1 || sp < 1 || cp < 1 || s->cp_chunks < 1)
        return dt_err_set(DT_ERR_ARG, "tp_size=%d, sp_size=%d and cp_size=%d must be >= 1", tp, sp,
                          cp);
    int S = dt_dit_tokens(c), Tt = c->frames / c->pt;
    if (cp > 1 && S % chunks)
        return dt_err_set(DT_ERR_ARG,
                          "the dit's %d tokens per clip do not cut into the %d "
                          "chunks of plugin.cp_size=%d",
                          S, chunks, cp);
    if (cp > 1 && c->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL && Tt % chunks)
        return dt_err_set(DT_ERR_ARG,
                          "the dit's %d time tokens (model.frames=%d / patch_t=%d) "
                          "do not cut into the %d chunks of plugin.cp_size=%d (attn="
                          "spatial_temporal keeps whole frames on each ring rank); use a "
                          "cp_size whose chunks divide %d",
                          Tt, c->frames, c->pt, chunks, cp, Tt);
    S /= cp, Tt /= cp; /* what a ring rank holds, and tp and sp split */
    if (c->n_head % tp)
        return dt_err_set(DT_ERR_ARG, "model.n_head=%d is not divisible by plugin.tp_size=%d "
                          "(tensor parallelism splits heads across tp ranks); use a tp_size "
                          "that divides %d", c->n_head, tp, c->n_head);
    if (S % sp)
        return dt_err_set(DT_ERR_ARG, "the dit's %d tokens per clip are not divisible by "
                          "plugin.sp_size=%d; use an sp_size that divides %d", S, sp, S);
    if ((c->n_head / tp) % sp)
        return dt_err_set(DT_ERR_ARG, "the %d heads of each tp rank (model.n_head=%d / "
                          "tp_size=%d) are not divisible by plugin.sp_size=%d (Ulysses splits "
                          "heads across sp ranks); use an sp_size that divides %d",
                          c->n_head / tp, c->n_head, tp, sp, c->n_head / tp);
    if (sequence_tp && (S / sp) % tp)
        return dt_err_set(DT_ERR_ARG, "the %d tokens of each sp rank (the dit's %d tokens per "
                          "clip / sp_size=%d) are not divisible by plugin.tp_size=%d "
                          "(sp_mode=split_gather splits them over the tp ranks); use a tp_size "
                          "that divides %d", S / sp, S, sp, tp, S / sp);
    if (c->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL && Tt % sp)
        return dt_err_set(DT_ERR_ARG, "the dit's %d time tokens (model.frames=%d / patch_t=%d) "
                          "are not divisible by plugin.sp_size=%d (attn=spatial_temporal keeps "
                          "whole frames on each sp rank); use an sp_size that divides %d", Tt,
                          c->frames, c->pt, sp, Tt);
    return DT_OK;
}

int dt_dit_tokens(const dt_dit_config *c) {
    return (c->frames / c->pt) * (c->height / c->ph) * (c->width / c->pw);
}
int dt_dit_patch_dim(const dt_dit_config *c) { return c->channels * c->pt * c->ph * c->pw; }
int64_t dt_dit_clip_numel(const dt_dit_config *c) {
    return (int64_t)c->frames * c->channels * c->height * c->width;
}
int64_t dt_dit_text_floats(const dt_dit_config *c) {
    return c->text_len > 0 ? 1 + (int64_t)c->text_len * (c->text_dim > 0 ? c->text_dim : 1) : 0;
}
int64_t dt_dit_input_floats(const dt_dit_config *c) {
    return dt_dit_clip_numel(c) + 2 + dt_dit_text_floats(c);
}
int64_t dt_dit_target_floats(const dt_dit_config *c) { return dt_dit_clip_numel(c); }

dt_dit_config dt_dit_config_from_model(const dt_model_config *m) {
    return (dt_dit_config){.frames = m->frames,
                           .channels = m->channels,
                           .height = m->height,
                           .width = m->width,
                           .pt = m->patch_t,
                           .ph = m->patch_h,
                           .pw = m->patch_w,
                           .n_layer = m->n_layer,
                           .n_head = m->n_head,
                           .n_embd = m->n_embd,
                           .n_classes = m->n_classes,
                           .attn = m->attn,
                           .text_len = m->text_len,
                           .text_dim = m->text_dim,
                           .shift = m->timestep_shift};
}

/* ---- parameter tables -------------------------------------------------------------------- */

static dt_status add_param(dt_dit *d, const char *name, int64_t rows, int64_t cols,
                           dt_param_init init, float std) {
    dt_param *p;
    return dt_param_append(&d->params, &d->n_params, &d->cap_params, &d->n_total, name, rows,
                           cols, init, std, &p);
}

static void set_shard(dt_param *p, dt_shard_kind kind) {
    p->shard.kind = kind;
    if (kind == DT_SHARD_QKV)
        p->shard.sec[0] = p->shard.sec[1] = p->shard.sec[2] = p->shard.full_rows / 3;
}

/* A linear's weight and bias (unless !bias): Xavier's variance 2 / (in + out), or zeros. `split`:
 * how the weight splits over tp, as core/param.h names it: DT_SHARD_NONE (replicated),
 * DT_SHARD_ROWS (column-parallel: its output rows, and the bias with them), DT_SHARD_COLS
 * (row-parallel: its input columns; the bias stays whole, added after the sum), DT_SHARD_QKV (each
 * of q, k, v's output rows, as GPT-2's c_attn). */
static dt_status add_linear(dt_dit *d, const char *prefix, int out, int in, bool zero,
                            dt_shard_kind split, bool bias) {
    char name[96];
    if (snprintf(name, sizeof name, "%s.weight", prefix) >= (int)sizeof name)
        return dt_err_set(DT_ERR_ARG, "dit: tensor name %s.weight is too long", prefix);
    DT_TRY(add_param(d, name, out, in, zero ? DT_INIT_ZEROS : DT_INIT_NORMAL,
                     zero ? 0.0f : sqrtf(2.0f / (float)(in + out))));
    set_shard(&d->params[d->n_params - 1], split);
    if (!bias)
        return DT_OK;
    if (snprintf(name, sizeof name, "%s.bias", prefix) >= (int)sizeof name)
        return dt_err_set(DT_ERR_ARG, "dit: tensor name %s.bias is too long", prefix);
    DT_TRY(add_param(d, name, out, 0, DT_INIT_ZEROS, 0.0f));
    set_shard(&d->params[d->n_params - 1], split == DT_SHARD_COLS ? DT_SHARD_NONE : split);
    return DT_OK;
}

/* The linears of one table's rows, each named prefix + the row's name ("" prefix: as is). */
static dt_status add_rows(dt_dit *d, const dt_dit_row *rows, int n, const char *prefix) {
    const int size[DIT_SZ_COUNT] = {[DIT_SZ_C] = d->C,
                                    [DIT_SZ_2C] = 2 * d->C,
                                    [DIT_SZ_3C] = 3 * d->C,
                                    [DIT_SZ_6C] = 6 * d->C,
                                    [DIT_SZ_F] = d->F,
                                    [DIT_SZ_P] = d->P,
                                    [DIT_SZ_FREQ] = DT_DIT_FREQ_DIM,
                                    [DIT_SZ_DIN] = d->Din};
    char name[96];
    for (int i = 0; i < n; i++) {
        const dt_dit_row *r = &rows[i];
        if (r->text && d->Lt == 0)
            continue;
        if (snprintf(name, sizeof name, "%s%s", prefix, r->name) >= (int)sizeof name)
            return dt_err_set(DT_ERR_ARG, "dit: tensor name %s%s is too long", prefix, r->name);
        DT_TRY(add_linear(d, name, size[r->out], size[r->in], r->zero, r->split, !r->no_bias));
    }
    return DT_OK;
}

/* The text embedder's tables, unit vectors' scale N(0, 1/C): the bytes' and the positions'
 * embeddings (caption bytes only), the null text. */
static dt_status add_text_tables(dt_dit *d) {
    float std = 1.0f / sqrtf((float)d->C);
    if (d->cfg.text_dim == 0) {
        DT_TRY(add_param(d, "y_embedder.byte_embedding.weight", 256, d->C, DT_INIT_NORMAL, std));
        DT_TRY(add_param(d, "y_embedder.pos_embedding.weight", d->Lt, d->C, DT_INIT_NORMAL, std));
    }
    return add_param(d, "y_embedder.y_embedding", d->Lt, d->C, DT_INIT_NORMAL, std);
}

static dt_status build_full(dt_dit *d) {
    const dt_dit_config *c = &d->cfg;
    int L = c->n_layer;
    d->unit_first[0] = 0;
    DT_TRY(add_rows(d, DT_DIT_EMBED, DIT_EMBED_ROWS, ""));
    if (c->n_classes > 0)
        DT_TRY(add_param(d, "y_embedder.embedding_table.weight", c->n_classes + 1, d->C,
                         DT_INIT_NORMAL, 0.02f));
    if (d->Lt > 0)
        DT_TRY(add_text_tables(d));
    d->n_embed_params = d->n_params;
    char prefix[32];
    for (int l = 0; l < L; l++) {
        d->unit_first[l + 1] = d->n_params;
        snprintf(prefix, sizeof prefix, "blocks.%d.", l);
        DT_TRY(add_rows(d, DT_DIT_BLOCK, DIT_BLOCK_ROWS, prefix));
    }
    d->per_layer = d->unit_first[2] - d->unit_first[1];
    d->unit_first[L + 1] = d->n_params;
    DT_TRY(add_rows(d, DT_DIT_FINAL, DIT_FINAL_ROWS, ""));
    d->unit_first[L + 2] = d->n_params;
    return DT_OK;
}

/* This rank's table from the full one: the tensors of the units it holds, each its tp
 * shard, packed in unit order at the full table's 16-float alignment. */
dt_status dt_dit_build_tables(dt_dit *d, const bool *held) {
    DT_TRY(build_full(d));
    int U = d->cfg.n_layer + 2;
    d->full = d->params;
    d->n_full = d->n_total;
    d->n_full_params = d->n_params;
    d->params = malloc((size_t)d->n_full_params * sizeof *d->params);
    d->local_full = malloc((size_t)d->n_full_params * sizeof *d->local_full);
    d->unit_global = malloc((size_t)U * sizeof *d->unit_global);
    d->unit_local = malloc((size_t)U * sizeof *d->unit_local);
    d->unit_param = malloc((size_t)(U + 1) * sizeof *d->unit_param);
    if (!d->params || !d->local_full || !d->unit_global || !d->unit_local || !d->unit_param)
        return dt_err_set(DT_ERR_OOM, "dit: out of memory for the parameter table");
    d->n_params = d->n_units = 0;
    int64_t at = 0;
    for (int u = 0; u < U; u++) {
        d->unit_local[u] = -1;
        if (held && !held[u])
            continue;
        d->unit_local[u] = d->n_units;
        d->unit_global[d->n_units] = u;
        d->unit_param[d->n_units++] = d->n_params;
        for (int i = d->unit_first[u]; i < d->unit_first[u + 1]; i++) {
            dt_param *p = &d->params[d->n_params];
            *p = d->full[i];
            if (p->shard.kind != DT_SHARD_NONE) {
                p->shard.parts = d->par.tp->size;
                p->shard.index = d->par.tp->rank;
            }
            int64_t rows, cols;
            dt_shard_local_shape(&p->shard, &rows, &cols);
            p->shape[0] = rows;
            if (p->ndim == 2)
                p->shape[1] = cols;
            p->numel = rows * cols;
            p->offset = at;
            at += (p->numel + 15) / 16 * 16;
            d->local_full[d->n_params++] = i;
        }
    }
    d->unit_param[d->n_units] = d->n_params;
    if (d->n_units == 0)
        return dt_err_set(DT_ERR_ARG, "dit: this rank holds no unit of the model");
    d->n_total = at;
    return DT_OK;
}

/* ---- whole arenas -------------------------------------------------------------------------- */

dt_param_tables dt_dit_tables(const dt_dit *d) {
    return (dt_param_tables){.full = d->full,
                             .local = d->params,
                             .n_full = d->n_full_params,
                             .n_local = d->n_params,
                             .local_full = d->local_full,
                             .full_numel = d->n_full,
                             .local_numel = d->n_total,
                             .skip = -1,
                             .n_units = d->n_units,
                             .unit_param = d->unit_param};
}

dt_status dt_dit_gather_full(dt_dit *d, const float *local, float *full) {
    dt_param_tables t = dt_dit_tables(d);
    return dt_param_gather_full(&t, d->par.tp, d->pp, d->mem, local, full);
}

/* ---- accessors ------------------------------------------------------------------------------ */

int dt_dit_n_params(const dt_dit *d) { return d->n_params; }
const dt_param *dt_dit_param(const dt_dit *d, int i) { return &d->params[i]; }
const dt_param *dt_dit_find_param(const dt_dit *d, const char *name) {
    dt_param_tables t = dt_dit_tables(d);
    return dt_param_find(&t, name);
}
int dt_dit_n_full_params(const dt_dit *d) { return d->n_full_params; }
const dt_param *dt_dit_full_param(const dt_dit *d, int i) { return &d->full[i]; }
int64_t dt_dit_numel(const dt_dit *d) { return d->n_total; }
int64_t dt_dit_full_numel(const dt_dit *d) { return d->n_full; }
float *dt_dit_weights(dt_dit *d) { return d->w; }
float *dt_dit_grads(dt_dit *d) { return d->g; }
dt_bf16 *dt_dit_weights_lp(dt_dit *d) { return d->w_lp; }

double dt_dit_flops_per_sample(const dt_dit *d) {
    double S = d->S_full, C = d->C, P = d->P, F = d->F, L = d->cfg.n_layer, Lt = d->Lt;
    double tokens = P * C + L * (3 * C * C + C * C + 2 * C * F) + C * P; /* MACs per token */
    double clip = DT_DIT_FREQ_DIM * C + C * C + L * 6 * C * C + 2 * C * C; /* per clip */
    /* text: a token's query and output projections and its products with all Lt keys; a
     * clip's keys and values in every block and the embedder's two matmuls per text token */
    if (Lt > 0) {
        tokens += L * (2 * C * C + 2 * Lt * C);
        clip += L * 2 * Lt * C * C + Lt * (d->Din * C + C * C);
    }
    double attn = 0; /* QK^T and PV: 2 T' C MACs per token, T' the sequence length seen */
    for (int l = 0; l < d->cfg.n_layer; l++) {
        bool st = d->cfg.attn == DT_DIT_ATTN_SPATIAL_TEMPORAL;
        double Tl = !st ? S : l % 2 == 0 ? (double)d->Th * d->Tw : d->Tt_full;
        attn += 2 * Tl * C;
    }
    return 3.0 * 2.0 * (S * (tokens + attn) + clip);
}
