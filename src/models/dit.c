/* The DiT's unit views, arenas and life cycle (see dit.h). The parameter tables and split
 * checks are in dit_tables.c, a block's forward and backward in dit_fwd.c, the unit-range
 * passes in dit_units.c.
 *
 * Arenas, through the memory accountant: "dit.weights" (params), "dit.weights.bf16" /
 * "dit.weights.fp16" (params, 16-bit matmuls), "dit.grads" (grads) unless the caller binds
 * them; "dit.activations" (activations: what the slots keep for backward, the position table,
 * the shared recompute set) and "dit.transients" (temporaries shared by every block).
 */
#include "models/dit_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/gemm.h"

static void set_dims(dt_dit *d, int k);

/* ---- views ------------------------------------------------------------------------------ */

/* A unit's storage: element `first` of the arena lives at w[0] (g[0], lp[0]). */
typedef struct unit_store {
    float *w, *g;
    dt_bf16 *lp;
    int64_t first;
} unit_store;

/* the tensor of the unit's named `prefix` + `what` (the tables name every tensor) */
static const dt_param *unit_tensor(const dt_dit *d, int lu, const char *prefix, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    for (int i = d->unit_param[lu]; i < d->unit_param[lu + 1]; i++)
        if (!strcmp(d->params[i].name, name))
            return &d->params[i];
    DT_ASSERT(!"a DiT unit lacks a tensor its wiring names");
    return NULL;
}

static float *at(float *base, const unit_store *u, const dt_param *p) {
    return base ? base + (p->offset - u->first) : NULL;
}

/* the linear `prefix` (.weight, .bias unless it has none) of unit lu */
static dt_linear linear_view(const dt_dit *d, int lu, const unit_store *u, const char *prefix,
                             bool bias) {
    const dt_param *wp = unit_tensor(d, lu, prefix, "weight");
    const dt_param *bp = bias ? unit_tensor(d, lu, prefix, "bias") : NULL;
    return (dt_linear){.out = (int)wp->shape[0],
                       .in = (int)wp->shape[1],
                       .w = at(u->w, u, wp),
                       .b = bp ? at(u->w, u, bp) : NULL,
                       .dw = at(u->g, u, wp),
                       .db = bp ? at(u->g, u, bp) : NULL,
                       .w_lp = u->lp ? u->lp + (wp->offset - u->first) : NULL};
}

/* the table `prefix`.`what` of unit lu: its weights and gradients */
static void table_view(const dt_dit *d, int lu, const unit_store *u, const char *prefix,
                       const char *what, float **w, float **g) {
    const dt_param *p = unit_tensor(d, lu, prefix, what);
    *w = at(u->w, u, p);
    *g = at(u->g, u, p);
}

/* the text embedder's linears and tables */
static void wire_text(dt_dit *d, int lu, const unit_store *u) {
    d->y_fc1 = linear_view(d, lu, u, DT_DIT_EMBED[DIT_Y_FC1].name, true);
    d->y_fc2 = linear_view(d, lu, u, DT_DIT_EMBED[DIT_Y_FC2].name, true);
    table_view(d, lu, u, "y_embedder", "y_embedding", &d->null_y, &d->dnull_y);
    if (d->cfg.text_dim > 0)
        return;
    table_view(d, lu, u, "y_embedder.byte_embedding", "weight", &d->byte_tab, &d->dbyte_tab);
    table_view(d, lu, u, "y_embedder.pos_embedding", "weight", &d->tpos_tab, &d->dtpos_tab);
}

static void wire_unit(dt_dit *d, int lu) {
    int64_t first, count;
    dt_dit_unit_range(d, lu, &first, &count);
    unit_store u = {.w = d->unit_w[lu], .g = d->unit_g[lu], .lp = d->unit_lp[lu], .first = first};
    int gu = d->unit_global[lu], L = d->cfg.n_layer;
    if (gu == 0) {
        dt_linear *lin[DIT_EMBED_ROWS] = {[DIT_X_EMB] = &d->x_emb,
                                          [DIT_T_FC1] = &d->t_fc1,
                                          [DIT_T_FC2] = &d->t_fc2,
                                          [DIT_Y_FC1] = &d->y_fc1,
                                          [DIT_Y_FC2] = &d->y_fc2};
        for (int i = 0; i < DIT_EMBED_ROWS; i++)
            if (!DT_DIT_EMBED[i].text)
                *lin[i] = linear_view(d, lu, &u, DT_DIT_EMBED[i].name, true);
        if (d->cfg.n_classes > 0) {
            const dt_param *y = unit_tensor(d, lu, "y_embedder.embedding_table", "weight");
            d->y_table = at(u.w, &u, y);
            d->dy_table = at(u.g, &u, y);
        }
        if (d->Lt > 0)
            wire_text(d, lu, &u);
    } else if (gu <= L) {
        dt_dit_block *b = &d->blocks[gu - 1];
        dt_linear *lin[DIT_BLOCK_ROWS] = {
            [DIT_ADA] = &b->ada,     [DIT_QKV] = &b->qkv, [DIT_PROJ] = &b->proj,
            [DIT_XQ] = &b->xq,       [DIT_XK] = &b->xk,   [DIT_XV] = &b->xv,
            [DIT_XPROJ] = &b->xproj, [DIT_FC1] = &b->fc1, [DIT_FC2] = &b->fc2};
        char name[96];
        for (int i = 0; i < DIT_BLOCK_ROWS; i++) {
            if (DT_DIT_BLOCK[i].text && d->Lt == 0)
                continue;
            snprintf(name, sizeof name, "blocks.%d.%s", gu - 1, DT_DIT_BLOCK[i].name);
            *lin[i] = linear_view(d, lu, &u, name, !DT_DIT_BLOCK[i].no_bias);
        }
    } else {
        dt_linear *lin[DIT_FINAL_ROWS] = {
            [DIT_FINAL_ADA] = &d->final_ada, [DIT_FINAL_LIN] = &d->final_lin};
        for (int i = 0; i < DIT_FINAL_ROWS; i++)
            *lin[i] = linear_view(d, lu, &u, DT_DIT_FINAL[i].name, true);
    }
}

void dt_dit_bind_unit(dt_dit *d, int unit, float *w, float *grad, dt_bf16 *w_lp) {
    DT_ASSERT(unit >= 0 && unit < d->n_units);
    if (w)
        d->unit_w[unit] = w;
    if (grad && d->training)
        d->unit_g[unit] = grad;
    if (w_lp && d->ctx.mm_type != DT_F32)
        d->unit_lp[unit] = w_lp;
    wire_unit(d, unit);
}

int dt_dit_n_units(const dt_dit *d) { return d->n_units; }
int dt_dit_unit_local(const dt_dit *d, int global_unit) { return d->unit_local[global_unit]; }

void dt_dit_unit_range(const dt_dit *d, int unit, int64_t *first, int64_t *count) {
    DT_ASSERT(unit >= 0 && unit < d->n_units);
    dt_param_tables t = dt_dit_tables(d);
    dt_param_unit_range(&t, unit, first, count);
}

void dt_dit_set_hooks(dt_dit *d, const dt_model_hooks *hooks) {
    d->hooks = hooks ? *hooks : (dt_model_hooks){0};
}

/* ---- activations ------------------------------------------------------------------------ */

static bool holds_final(const dt_dit *d) { return dt_dit_holds(d, d->cfg.n_layer + 1); }

/* Residual positions a slot keeps: each held block's input and output, the embedders'
 * output, the final layer's input; numbered within their chunk (position p sits after unit p
 * and before unit p + 1), a slot having room for the most of one chunk. */
static void plan_positions(dt_dit *d) {
    int L = d->cfg.n_layer;
    for (int l = 0; l <= L; l++)
        d->pos_index[l] = -1;
    for (int l = 0; l < L; l++)
        if (dt_dit_holds(d, l + 1))
            d->pos_index[l] = d->pos_index[l + 1] = 0;
    if (dt_dit_holds(d, 0))
        d->pos_index[0] = 0;
    if (holds_final(d))
        d->pos_index[L] = 0;
    d->n_pos = 0;
    for (int p = 0, n = 0; p <= L; p++) {
        if (d->pos_index[p] != 0)
            continue;
        if (!dt_dit_holds(d, p)) /* kept, so the input of a chunk's first unit */
            n = 0;
        d->pos_index[p] = n++;
        d->n_pos = n > d->n_pos ? n : d->n_pos;
    }
}

/* The "dit.activations" arena: per slot its positions, its conditioning, what its held
 * blocks keep and what the final layer keeps; then the positions table and the shared set. */
static void carve_acts(dt_dit *d, dt_dit_carver *cv) {
    size_t B = (size_t)d->B, Nr = (size_t)d->Nr, C = (size_t)d->C, P = (size_t)d->P;
    size_t f4 = sizeof(float), T = B * (size_t)d->Lt;
    for (int s = 0; s < d->n_slots; s++) {
        dt_dit_slot *sl = &d->slots[s];
        sl->res = dt_dit_carve(cv, (size_t)d->n_pos * d->pos_stride * f4);
        sl->sc = dt_dit_carve(cv, B * C * f4);
        if (T) {
            sl->y = dt_dit_carve(cv, T * C * f4);
            sl->tn = dt_dit_carve(cv, B * sizeof(int32_t));
        }
        if (T && dt_dit_holds(d, 0)) {
            sl->tfeat = dt_dit_carve(cv, T * (size_t)d->Din * f4);
            sl->th_y = dt_dit_carve(cv, T * C * f4);
            sl->ttok = d->cfg.text_dim ? NULL : dt_dit_carve(cv, T * sizeof(int32_t));
        }
        if (dt_dit_holds(d, 0)) {
            sl->patches = dt_dit_carve(cv, Nr * P * f4);
            sl->tfreq = dt_dit_carve(cv, B * DT_DIT_FREQ_DIM * f4);
            sl->th = dt_dit_carve(cv, B * C * f4);
            sl->ts = dt_dit_carve(cv, B * C * f4);
            sl->c = dt_dit_carve(cv, B * C * f4);
            sl->labels = dt_dit_carve(cv, B * sizeof(int32_t));
        }
        if (holds_final(d)) {
            sl->modf = dt_dit_carve(cv, B * 2 * C * f4);
            sl->afff = dt_dit_carve(cv, B * 2 * C * f4);
            sl->meanf = dt_dit_carve(cv, Nr * f4);
            sl->rstdf = dt_dit_carve(cv, Nr * f4);
            sl->mf = dt_dit_carve(cv, Nr * C * f4);
        }
    }
    dt_dit_carve_block_acts(d, cv);
    d->pos = dt_dit_carve(cv, (size_t)d->S_full * C * f4);
    if (holds_final(d))
        d->out = dt_dit_carve(cv, B * (size_t)dt_dit_clip_numel(&d->cfg) * f4);
}

/* The "dit.transients" arena: shared by every block and slot, not kept between calls (the
 * slots' gradients of the boundary and of the loss are here too: a pipeline stage receives
 * and sends them). */
static void carve_scratch(dt_dit *d, dt_dit_carver *cv) {
    size_t B = (size_t)d->B, Nr = (size_t)d->Nr, Nt = (size_t)d->Nt, C = (size_t)d->C;
    size_t F = (size_t)d->F, Ct = (size_t)d->Ct, Ft = (size_t)d->Ft, P = (size_t)d->P;
    size_t f4 = sizeof(float), h2 = sizeof(dt_bf16), T = B * (size_t)d->Lt;
    bool text0 = T && dt_dit_holds(d, 0);
    bool sp = d->par.sp->size > 1, tp = d->par.tp->size > 1, seq = d->par.rows->size > 1;
    bool lp = d->ctx.mm_type != DT_F32;
    d->qkv_rows = dt_dit_carve(cv, Nt * 3 * Ct * f4);
    d->packed = sp ? dt_dit_carve(cv, Nt * 3 * Ct * f4) : NULL;
    d->qkvh = sp ? dt_dit_carve(cv, Nt * 3 * Ct * f4) : NULL;
    d->att_rows = dt_dit_carve(cv, Nt * Ct * f4);
    d->atth = dt_dit_carve(cv, Nt * Ct * f4);
    d->gel = dt_dit_carve(cv, Nt * Ft * f4);
    d->part = tp ? dt_dit_carve(cv, Nt * C * f4) : NULL;
    d->ln_full = seq ? dt_dit_carve(cv, Nt * C * f4) : NULL;
    d->tok_out = holds_final(d) ? dt_dit_carve(cv, Nr * P * f4) : NULL;
    d->tok_tgt = holds_final(d) ? dt_dit_carve(cv, Nr * P * f4) : NULL;
    /* the all-to-alls' local size, the COPY adjoint's and SEQ_REDUCE_SCATTER's rows x cols */
    size_t work = sp || tp ? Nt * (3 * Ct > C ? 3 * Ct : C) : 0;
    size_t ring = (size_t)dt_dit_ring_work_count(d);
    work = work > ring ? work : ring;
    d->work = work ? dt_dit_carve(cv, work * f4) : NULL;
    /* 16-bit operands: the widest input (C, 4C, P or the timestep features) and output
     * (6C, 4C or P) of a matmul over Nt >= B rows */
    size_t in = C > F ? C : F, out = 6 * C > F ? 6 * C : F;
    in = in > P ? in : P;
    in = in > DT_DIT_FREQ_DIM ? in : DT_DIT_FREQ_DIM;
    out = out > P ? out : P;
    /* the text's matmuls: B Lt rows of Din (or C) in, C out */
    size_t lp_in = Nt * in > T * (size_t)d->Din ? Nt * in : T * (size_t)d->Din;
    lp_in = lp_in > T * C ? lp_in : T * C;
    size_t lp_out = Nt * out > T * C ? Nt * out : T * C;
    d->x_lp = lp ? dt_dit_carve(cv, lp_in * h2) : NULL;
    d->dy_lp = lp && d->training ? dt_dit_carve(cv, lp_out * h2) : NULL;
    d->ty_gel = text0 ? dt_dit_carve(cv, T * C * f4) : NULL;
    d->xkt = T ? dt_dit_carve(cv, 2 * T * Ct * f4) : NULL;
    d->xkeys = T ? dt_dit_carve(cv, B * sizeof(int32_t)) : NULL;
    if (!d->training)
        return;
    d->dres = dt_dit_carve(cv, (size_t)d->n_grads * (size_t)d->pos_stride * f4);
    for (int s = 0; s < d->n_slots; s++)
        d->slots[s].dtok = holds_final(d) ? dt_dit_carve(cv, Nr * P * f4) : NULL;
    /* the widest weight gradient summed over split rows: the patch embedding's or the final
     * linear's [C, P] (the biases, C or P, fit too) */
    d->pgrad = seq ? dt_dit_carve(cv, C * P * f4) : NULL;
    d->dA = dt_dit_carve(cv, Nt * C * f4);
    d->dB = dt_dit_carve(cv, Nt * C * f4);
    d->dg = dt_dit_carve(cv, Nt * Ft * f4);
    d->dh = dt_dit_carve(cv, Nt * Ft * f4);
    d->dqkv = dt_dit_carve(cv, Nt * 3 * Ct * f4);
    d->dqkvp = dt_dit_carve(cv, Nt * 3 * Ct * f4);
    d->dattp = dt_dit_carve(cv, Nt * Ct * f4);
    d->dmod = dt_dit_carve(cv, B * 6 * C * f4);
    d->dc = dt_dit_carve(cv, B * C * f4);
    d->dts = dt_dit_carve(cv, B * C * f4);
    d->dth = dt_dit_carve(cv, B * C * f4);
    d->dxq = T ? dt_dit_carve(cv, Nt * Ct * f4) : NULL;
    d->dxk = T ? dt_dit_carve(cv, T * Ct * f4) : NULL;
    d->dxv = T ? dt_dit_carve(cv, T * Ct * f4) : NULL;
    d->dty = text0 ? dt_dit_carve(cv, 2 * T * C * f4) : NULL;
    d->dtfeat = text0 && !d->cfg.text_dim ? dt_dit_carve(cv, T * (size_t)d->Din * f4) : NULL;
}

/* An arena as large as the largest of the shapes needs, carved for the shape in use. */
static dt_status alloc_carved(dt_dit *d, dt_mem_cat cat, const char *name,
                              void (*plan)(dt_dit *, dt_dit_carver *), void **arena) {
    size_t most = 0;
    int in_use = d->shape;
    for (int k = 0; k < d->n_shapes; k++) {
        set_dims(d, k);
        dt_dit_carver cv = {0};
        plan(d, &cv);
        most = cv.used > most ? cv.used : most;
    }
    set_dims(d, in_use);
    DT_TRY(dt_mem_alloc(d->mem, cat, name, most, arena));
    dt_dit_carver cv = {.base = *arena};
    plan(d, &cv);
    return DT_OK;
}

/* Fixed 3-D sinusoidal positions: n_embd splits into three groups of 2k channels (k =
 * n_embd / 6) for the token's frame, row and column index; each group holds sin(p w_i) then
 * cos(p w_i), w_i = 10000^(-i/k) (the Transformer's code per axis, as DiT's 2-D one);
 * channels past 6k stay 0. */
static void fill_positions(dt_dit *d) {
    int C = d->C, k = C / 6;
    for (int tt = 0; tt < d->Tt_full; tt++)
        for (int hh = 0; hh < d->Th; hh++)
            for (int ww = 0; ww < d->Tw; ww++) {
                float *row = d->pos + ((size_t)(tt * d->Th + hh) * d->Tw + ww) * C;
                memset(row, 0, (size_t)C * sizeof *row);
                int p3[3] = {tt, hh, ww};
                for (int a = 0; a < 3; a++)
                    for (int i = 0; i < k; i++) {
                        double w = pow(10000.0, -(double)i / k);
                        row[2 * k * a + i] = (float)sin(p3[a] * w);
                        row[2 * k * a + k + i] = (float)cos(p3[a] * w);
                    }
            }
}

/* ---- life cycle ------------------------------------------------------------------------- */

/* The splits (o's comms, or size-1 ones) and the ring's chunks of every clip, whose tokens and
 * time tokens are then 1/cp of a clip's (dt_dit_check_split checks that they cut). */
static dt_status setup_par(dt_dit *d, const dt_model_opts *o) {
    DT_TRY(
        dt_block_par_make(o->tp, o->sp, o->sequence_tp, o->cp, o->cp_zigzag, d->own_comm, &d->par));
    const dt_comm *cp = d->par.ring.cp;
    d->n_chunks = 1;
    d->chunk[0] = 0;
    if (cp->size > 1)
        d->n_chunks = dt_ring_chunks(cp->size, o->cp_zigzag, cp->rank, d->chunk);
    return DT_OK;
}

/* Shape k's sizes: the clip, its tokens (a ring rank's: 1/cp of them) and the rows of its
 * largest micro-batch on this rank. */
static void set_dims(dt_dit *d, int k) {
    const dt_model_shape *sh = &d->shapes[k];
    dt_dit_config *c = &d->cfg;
    c->frames = sh->frames;
    c->height = sh->height;
    c->width = sh->width;
    d->Tt_full = c->frames / c->pt;
    d->Th = c->height / c->ph;
    d->Tw = c->width / c->pw;
    d->S_full = dt_dit_tokens(c);
    d->S = d->S_full / d->par.ring.cp->size;
    d->Tt = d->Tt_full / d->par.ring.cp->size;
    d->B = sh->B;
    d->Nt = dt_dit_rows_tp(d, d->B);
    d->Nr = dt_dit_rows(d, d->B);
    d->pos_stride = /* 64-byte aligned */
        (((int64_t)d->Nr + d->B) * d->C + dt_dit_text_boundary(d, d->B) + 15) / 16 * 16;
    d->shape = k;
}

/* The shapes: the caller's, or the config's with o->B clips. */
static dt_status copy_shapes(dt_dit *d, const dt_model_opts *o) {
    d->n_shapes = o->n_shapes > 0 ? o->n_shapes : 1;
    d->shapes = malloc((size_t)d->n_shapes * sizeof *d->shapes);
    if (!d->shapes)
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    if (o->n_shapes > 0)
        memcpy(d->shapes, o->shapes, (size_t)d->n_shapes * sizeof *d->shapes);
    else
        d->shapes[0] = (dt_model_shape){d->cfg.frames, d->cfg.height, d->cfg.width, o->B};
    return DT_OK;
}

static dt_status check_shape(const dt_dit *d, const dt_model_opts *o) {
    const dt_model_shape *sh = &d->shapes[d->shape];
    if (sh->B <= 0)
        return dt_err_set(DT_ERR_ARG, "dit: B = %d clips per forward must be positive", sh->B);
    DT_TRY(dt_dit_check_config(&d->cfg));
    if (o->n_shapes == 0 && o->T != d->S && d->par.ring.cp->size > 1)
        return dt_err_set(DT_ERR_ARG,
                          "dit: a clip is %d tokens, %d on each of %d ring ranks; "
                          "the model was asked for T = %d",
                          d->S_full, d->S, d->par.ring.cp->size, o->T);
    if (o->n_shapes == 0 && o->T != d->S)
        return dt_err_set(DT_ERR_ARG,
                          "dit: a clip is %d tokens, the model was asked for "
                          "T = %d (train.seq_len must be the clip's tokens)",
                          d->S, o->T);
    dt_model_split s = {.tp = d->par.tp->size,
                        .sp = d->par.sp->size,
                        .cp = d->par.ring.cp->size,
                        .cp_chunks = d->n_chunks,
                        .sequence_tp = o->sequence_tp,
                        .seq_len = d->S_full};
    dt_status st = dt_dit_check_split(&d->cfg, &s);
    if (st != DT_OK && o->n_shapes > 0)
        return dt_err_wrap(st, "clips of %dx%dx%d: ", sh->frames, sh->height, sh->width);
    return st;
}

static dt_status alloc_arrays(dt_dit *d) {
    int L = d->cfg.n_layer, S = d->n_slots, U = d->n_units;
    d->blocks = calloc((size_t)L + 1, sizeof *d->blocks);
    d->slots = calloc((size_t)S, sizeof *d->slots);
    d->acts = calloc((size_t)S * L + 1, sizeof *d->acts);
    d->saved_bytes = calloc((size_t)S * L + 1, sizeof *d->saved_bytes);
    d->saved_live = calloc((size_t)S * L + 1, sizeof *d->saved_live);
    if (d->training && d->split && !(d->wgrad = calloc((size_t)S * L + 1, sizeof *d->wgrad)))
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    if (d->compress && !(d->q8 = calloc(((size_t)S * L + 1) * DT_DIT_N_Q8, sizeof *d->q8)))
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    d->pos_index = calloc((size_t)L + 1, sizeof *d->pos_index);
    d->unit_w = calloc((size_t)U, sizeof *d->unit_w);
    d->unit_g = calloc((size_t)U, sizeof *d->unit_g);
    d->unit_lp = calloc((size_t)U, sizeof *d->unit_lp);
    if (!d->blocks || !d->slots || !d->acts || !d->saved_bytes || !d->saved_live || !d->pos_index ||
        !d->unit_w || !d->unit_g || !d->unit_lp)
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    return DT_OK;
}

dt_status dt_dit_init_model(const dt_dit_config *cfg, const dt_model_opts *o, dt_mem *mem,
                            dt_dit **out) {
    *out = NULL;
    DT_TRY(dt_dit_check_config(cfg));
    dt_status st = DT_OK;
    dt_dit *d = calloc(1, sizeof *d);
    if (!d)
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    d->cfg = *cfg;
    d->mem = mem;
    d->training = o->training;
    d->P = dt_dit_patch_dim(cfg);
    d->C = cfg->n_embd;
    d->NH = cfg->n_head;
    d->F = DT_DIT_MLP_RATIO * cfg->n_embd;
    d->Lt = cfg->text_len;
    d->Din = cfg->text_dim > 0 ? cfg->text_dim : 3 * cfg->n_embd;
    d->pp = o->pp;
    DT_TRY_GOTO(copy_shapes(d, o));
    DT_TRY_GOTO(setup_par(d, o));
    d->Ct = d->C / d->par.tp->size;
    d->NHt = d->NH / d->par.tp->size;
    d->Ft = d->F / d->par.tp->size;
    for (int k = d->n_shapes - 1; k >= 0; k--) { /* ends at shape 0 */
        set_dims(d, k);
        DT_TRY_GOTO(check_shape(d, o));
    }
    d->n_slots = o->n_slots > 0 ? o->n_slots : 1;
    d->n_grads = o->n_grads > 0 ? o->n_grads : d->n_slots;
    d->split = o->split_backward;
    d->compress = o->act_compress == DT_ACT_COMPRESS_INT8;
    d->ac = o->ac;
    d->ac_every = o->ac_every > 0 ? o->ac_every : 1;
    d->unit_first = calloc((size_t)cfg->n_layer + 3, sizeof *d->unit_first);
    if (!d->unit_first) {
        st = dt_err_set(DT_ERR_OOM, "dit: out of memory");
        goto fail;
    }
    DT_TRY_GOTO(dt_dit_build_tables(d, o->units));
    DT_TRY_GOTO(alloc_arrays(d));
    DT_TRY_GOTO(dt_gemm_init(&d->gemm));
    d->ctx = (dt_nn_ctx){.gemm = d->gemm, .mm_type = dt_precision_mm_type(o->precision)};
    size_t n = (size_t)d->n_total;
    if (!o->external_weights)
        DT_TRY_GOTO(
            dt_mem_alloc(mem, DT_MEM_PARAMS, "dit.weights", n * sizeof(float), (void **)&d->w));
    if (d->training && !o->external_grads)
        DT_TRY_GOTO(
            dt_mem_alloc(mem, DT_MEM_GRADS, "dit.grads", n * sizeof(float), (void **)&d->g));
    if (d->ctx.mm_type != DT_F32 && !o->external_weights)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_PARAMS,
                                 d->ctx.mm_type == DT_F16 ? "dit.weights.fp16" : "dit.weights.bf16",
                                 n * sizeof(dt_bf16), (void **)&d->w_lp));
    plan_positions(d);
    for (int u = 0; u < d->n_units; u++) {
        int64_t first, count;
        dt_dit_unit_range(d, u, &first, &count);
        dt_dit_bind_unit(d, u, d->w ? d->w + first : NULL, d->g ? d->g + first : NULL,
                         d->w_lp ? d->w_lp + first : NULL);
    }
    DT_TRY_GOTO(alloc_carved(d, DT_MEM_ACTS, "dit.activations", carve_acts, &d->act_arena));
    DT_TRY_GOTO(alloc_carved(d, DT_MEM_TEMP, "dit.transients", carve_scratch, &d->tmp_arena));
    fill_positions(d);
    *out = d;
    return DT_OK;
fail:
    dt_dit_free(d);
    return st;
}

dt_status dt_dit_init(const dt_dit_config *cfg, const dt_dit_opts *opts, dt_mem *mem,
                      dt_dit **out) {
    *out = NULL;
    DT_TRY(dt_dit_check_config(cfg));
    dt_model_opts o = {.B = opts->B, .T = dt_dit_tokens(cfg), .training = opts->training};
    return dt_dit_init_model(cfg, &o, mem, out);
}

void dt_dit_free(dt_dit *d) {
    if (!d)
        return;
    dt_mem_release(d->mem, d->tmp_arena);
    dt_mem_release(d->mem, d->act_arena);
    dt_mem_release(d->mem, d->w_lp);
    dt_mem_release(d->mem, d->g);
    dt_mem_release(d->mem, d->w);
    dt_gemm_free(d->gemm);
    free(d->unit_lp);
    free(d->unit_g);
    free(d->unit_w);
    free(d->pos_index);
    free(d->saved_live);
    free(d->saved_bytes);
    free(d->q8);
    free(d->wgrad);
    free(d->acts);
    free(d->slots);
    free(d->blocks);
    free(d->unit_param);
    free(d->unit_local);
    free(d->unit_global);
    free(d->local_full);
    free(d->unit_first);
    free(d->shapes);
    if (d->full != d->params)
        free(d->full);
    free(d->params);
    dt_block_par_free_own(d->own_comm);
    free(d);
}

dt_status dt_dit_use_shape(dt_dit *d, int k) {
    if (k < 0 || k >= d->n_shapes)
        return dt_err_set(DT_ERR_ARG, "dit: shape %d of %d", k, d->n_shapes);
    if (k == d->shape)
        return DT_OK;
    set_dims(d, k);
    dt_dit_carver acts = {.base = d->act_arena}, scratch = {.base = d->tmp_arena};
    carve_acts(d, &acts);
    carve_scratch(d, &scratch);
    fill_positions(d);
    return DT_OK;
}

const dt_dit_config *dt_dit_config_of(const dt_dit *d) { return &d->cfg; }
int dt_dit_max_batch(const dt_dit *d) { return d->B; }
dt_comm *dt_dit_tp(const dt_dit *d) { return d->par.tp; }

void dt_dit_init_weights(dt_dit *d, uint64_t seed) {
    DT_ASSERT(d->w);
    dt_param_init_range(d->params, d->n_params, seed, 0, d->n_total, d->w);
    dt_dit_sync_lp(d);
}

void dt_dit_sync_lp(dt_dit *d) {
    if (d->w_lp && d->w)
        dt_cast_f32_to_lp(d->ctx.mm_type, d->w_lp, d->w, d->n_total);
}

void dt_dit_zero_grad(dt_dit *d) {
    if (d->g)
        dt_zero_f32(d->g, d->n_total);
}
