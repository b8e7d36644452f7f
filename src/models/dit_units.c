/* The DiT's passes by unit range and micro-batch slot (see dit.h): the embedders (unit 0:
 * patches, timestep and label into the residual stream and the conditioning silu(c), the
 * text into its sequences, dit_text.c), the
 * blocks (dit_fwd.c), the final layer (unit L+1) and the loss; the boundary tensors a
 * pipeline stage sends and receives; and the one-process calls built on them.
 *
 * A slot's residual position l holds this rank's rows [Nr, C] and, after them, silu(c)
 * [B, C]: the conditioning the later blocks and the final layer read, so a stage without
 * unit 0 receives it with the residual; with text, then the text sequences and their token
 * counts. Its gradient travels the same way: the slot's dres holds d residual, then d silu(c)
 * (and d y), which every block and the final layer accumulate into and unit 0 turns into the
 * embedders' gradients.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/reduce.h"
#include "models/dit_impl.h"

static dt_status enter(dt_dit *d, int global_unit, dt_model_phase ph) {
    return d->hooks.enter ? d->hooks.enter(d->hooks.ctx, d->unit_local[global_unit], ph) : DT_OK;
}

static dt_status leave(dt_dit *d, int global_unit, dt_model_phase ph) {
    return d->hooks.leave ? d->hooks.leave(d->hooks.ctx, d->unit_local[global_unit], ph) : DT_OK;
}

/* A (slot, block)'s saved set is in use from its forward until its backward has read it; the
 * accountant's timeline shows the arena filling and emptying. */
static void mark_saved(dt_dit *d, int slot, int l, bool live) {
    size_t k = (size_t)slot * d->cfg.n_layer + l;
    dt_mem_mark_saved(d->mem, "dit.block", slot, l, d->saved_bytes[k], &d->saved_live[k], live);
}

void dt_dit_drop_saved(dt_dit *d) {
    for (int s = 0; s < d->n_slots; s++)
        for (int l = 0; l < d->cfg.n_layer; l++)
            if (dt_dit_holds(d, l + 1))
                mark_saved(d, s, l, false);
}

static float *res_at(const dt_dit *d, int slot, int position) {
    return d->slots[slot].res + (size_t)d->pos_index[position] * d->pos_stride;
}

/* ---- the clip layout ---------------------------------------------------------------------- */

/* Where element j of token `tok` lives in one clip [frames, channels, height, width]: a
 * token's patch is flattened (channel, dt, dh, dw) as a Conv3d weight is. */
static size_t clip_at(const dt_dit *d, int tok, int j) {
    const dt_dit_config *c = &d->cfg;
    int tt = tok / (d->Th * d->Tw), hh = tok / d->Tw % d->Th, ww = tok % d->Tw;
    int f = j % c->pw, e = j / c->pw % c->ph, a = j / (c->pw * c->ph) % c->pt;
    int ch = j / (c->pw * c->ph * c->pt);
    size_t fr = (size_t)tt * c->pt + a;
    return ((fr * c->channels + ch) * c->height + hh * c->ph + e) * c->width + ww * c->pw + f;
}

/* This rank's rows of B clips (clip b at clips + b * stride) -> tokens [Nr, P]. */
static void patchify(const dt_dit *d, float *tok, const float *clips, int64_t stride, int B) {
    int64_t r0 = dt_dit_row0(d, B), Nr = dt_dit_rows(d, B);
    int Sc = d->S / d->n_chunks; /* a ring rank's local token t is clip token t_full */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < Nr; i++) {
        int64_t r = r0 + i, b = r / d->S;
        int tl = (int)(r % d->S), t = d->chunk[tl / Sc] * Sc + tl % Sc;
        for (int j = 0; j < d->P; j++)
            tok[i * d->P + j] = clips[b * stride + clip_at(d, t, j)];
    }
}

/* the inverse over all rows of a one-process model: tokens [B S, P] -> clips [B, clip] */
static void unpatchify(const dt_dit *d, float *clips, const float *tok, int B) {
    int64_t clip = dt_dit_clip_numel(&d->cfg);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < d->S; t++)
            for (int j = 0; j < d->P; j++)
                clips[b * clip + clip_at(d, t, j)] = tok[((size_t)b * d->S + t) * d->P + j];
}

/* ---- unit 0: the embedders ------------------------------------------------------------------ */

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* y = silu(x) over n values; the adjoint dx = dy silu'(x) (overwrites dx). */
static void silu(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * sigmoidf(x[i]);
}
static void silu_backward(float *dx, const float *x, const float *dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float s = sigmoidf(x[i]);
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* DiT's timestep features of t in [0, 1] scaled to 0..1000: cos(1000 t w_i) then
 * sin(1000 t w_i), w_i = 10000^(-i / 128), i < 128; t of clip b at t[b * stride]. */
static void timestep_features(float *out, const float *t, int64_t stride, int B) {
    int half = DT_DIT_FREQ_DIM / 2;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < half; i++) {
            double a = 1000.0 * t[b * stride] * exp(-log(10000.0) * i / half);
            out[(size_t)b * DT_DIT_FREQ_DIM + i] = (float)cos(a);
            out[(size_t)b * DT_DIT_FREQ_DIM + half + i] = (float)sin(a);
        }
}

/* Where a micro-batch's clips and timesteps are: clip b at x + b * x_stride, its t at
 * t[b * t_stride]; the labels are already in the slot. */
typedef struct clip_in {
    const float *x, *t;
    int64_t x_stride, t_stride;
} clip_in;

/* conditioning c = mlp(timestep features) + label embedding, silu(c) for the blocks; the
 * tokens: patch embedding plus the fixed 3-D positions */
static dt_status embed_forward(dt_dit *d, int slot, int B, const clip_in *in, float *out) {
    dt_dit_slot *s = &d->slots[slot];
    int C = d->C, Nr = dt_dit_rows(d, B);
    timestep_features(s->tfreq, in->t, in->t_stride, B);
    DT_TRY(dt_dit_linear_forward(d, &d->t_fc1, s->tfreq, B, s->th));
    silu(s->ts, s->th, (int64_t)B * C);
    DT_TRY(dt_dit_linear_forward(d, &d->t_fc2, s->ts, B, s->c));
    if (d->cfg.n_classes > 0)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < C; j++)
                s->c[(size_t)b * C + j] += d->y_table[(size_t)s->labels[b] * C + j];
    silu(s->sc, s->c, (int64_t)B * C);
    if (d->Lt > 0)
        DT_TRY(dt_dit_text_forward(d, slot, B));
    patchify(d, s->patches, in->x, in->x_stride, B);
    DT_TRY(dt_dit_linear_forward(d, &d->x_emb, s->patches, Nr, out));
    dt_rows_add_positions(out, d->pos, dt_dit_row0(d, B), d->S, Nr, C, d->n_chunks, d->chunk);
    return DT_OK;
}

/* The embedders' gradients from d residual and d silu(c) (the positions are fixed). */
static dt_status embed_backward(dt_dit *d, int slot, int B, const float *dres, const float *dsc,
                                float *dy) {
    dt_dit_slot *s = &d->slots[slot];
    int C = d->C, Nr = dt_dit_rows(d, B);
    size_t BC = (size_t)B * C;
    if (d->Lt > 0)
        DT_TRY(dt_dit_text_backward(d, slot, B, dy));
    DT_TRY(dt_dit_rows_linear_backward(d, &d->x_emb, s->patches, dres, Nr, NULL));
    silu_backward(d->dc, s->c, dsc, (int64_t)BC);
    if (d->cfg.n_classes > 0)
        dt_rows_scatter_add(d->dy_table, d->dc, s->labels, 0, d->cfg.n_classes + 1, B, C);
    memset(d->dts, 0, BC * sizeof *d->dts);
    DT_TRY(dt_dit_linear_backward(d, &d->t_fc2, s->ts, d->dc, B, d->dts));
    silu_backward(d->dth, s->th, d->dts, (int64_t)BC);
    return dt_dit_linear_backward(d, &d->t_fc1, s->tfreq, d->dth, B, NULL);
}

/* ---- unit L+1: the final layer --------------------------------------------------------------- */

/* adaLN (shift, scale) -> linear: d->tok_out [Nr, P] */
static dt_status final_forward(dt_dit *d, int slot, int B, const float *x, const float *sc) {
    dt_dit_slot *s = &d->slots[slot];
    int C = d->C;
    DT_TRY(dt_dit_linear_forward(d, &d->final_ada, sc, B, s->modf));
    dt_dit_make_affine(s->afff, 2 * C, s->modf, 2 * C, 0, C, B, C);
    dt_dit_ln_rows(d, s->mf, s->meanf, s->rstdf, x, s->afff, 2 * C, B);
    return dt_dit_linear_forward(d, &d->final_lin, s->mf, dt_dit_rows(d, B), d->tok_out);
}

/* from the slot's dtok: dres = d x (overwritten), dsc += d silu(c) */
static dt_status final_backward(dt_dit *d, int slot, int B, const float *x, const float *sc,
                                float *dres, float *dsc) {
    dt_dit_slot *s = &d->slots[slot];
    int C = d->C, Nr = dt_dit_rows(d, B);
    memset(d->dA, 0, (size_t)Nr * C * sizeof *d->dA);
    DT_TRY(dt_dit_rows_linear_backward(d, &d->final_lin, s->mf, s->dtok, Nr, d->dA));
    memset(d->dmod, 0, (size_t)B * 2 * C * sizeof *d->dmod);
    memset(dres, 0, (size_t)Nr * C * sizeof *dres);
    dt_dit_ln_rows_backward(d, dres, d->dmod, 2 * C, C, 0, d->dA, x, s->afff, 2 * C, s->meanf,
                            s->rstdf, B);
    if (d->par.rows->size > 1) /* the modulation saw only this rank's rows */
        DT_TRY(dt_comm_allreduce_f32(d->par.rows, d->dmod, (int64_t)B * 2 * C, NULL));
    return dt_dit_linear_backward(d, &d->final_ada, sc, d->dmod, B, dsc);
}

/* ---- passes by unit range ----------------------------------------------------------------------
 */

static dt_status check_batch(const dt_dit *d, int B, int T) {
    if (B < 1 || B > d->B || T != d->S)
        return dt_err_set(DT_ERR_ARG,
                          "dit: a micro-batch of %d clips x %d tokens, the model "
                          "holds 1..%d clips of %d tokens",
                          B, T, d->B, d->S);
    return DT_OK;
}

static dt_status check_units(const dt_dit *d, int slot, int u0, int u1) {
    if (slot < 0 || slot >= d->n_slots || u0 < 0 || u1 > d->cfg.n_layer + 2 || u0 >= u1)
        return dt_err_set(DT_ERR_ARG, "dit: slot %d (of %d), units [%d, %d) out of range", slot,
                          d->n_slots, u0, u1);
    for (int u = u0; u < u1; u++)
        if (!dt_dit_holds(d, u))
            return dt_err_set(DT_ERR_ARG, "dit: unit %d is not held by this rank", u);
    return DT_OK;
}

/* labels[b] of the slot: given (checked), else the null class; with text the clips' text
 * (rows, or NULL: none) */
static dt_status set_labels(dt_dit *d, int slot, const int32_t *given, const float *rows,
                            int64_t stride, int B) {
    int n = d->cfg.n_classes;
    for (int b = 0; b < B; b++) {
        double v = given ? given[b] : rows && n > 0 ? rows[b * stride] : n;
        if (v != floor(v) || v < 0 || v > n)
            return dt_err_set(DT_ERR_ARG,
                              "dit: label %g of clip %d is outside 0..%d (%d = no "
                              "label)",
                              v, b, n, n);
        d->slots[slot].labels[b] = (int32_t)v;
    }
    return DT_OK;
}

static dt_status forward_run(dt_dit *d, int slot, int u0, int u1, int B, const clip_in *in) {
    dt_dit_slot *s = &d->slots[slot];
    int L = d->cfg.n_layer;
    size_t tail = (size_t)dt_dit_rows(d, B) * d->C, BC = (size_t)B * d->C;
    if (u0 == 0) {
        DT_TRY(enter(d, 0, DT_PHASE_FORWARD));
        DT_TRY(embed_forward(d, slot, B, in, res_at(d, slot, 0)));
        DT_TRY(leave(d, 0, DT_PHASE_FORWARD));
    } else { /* the conditioning (and the text) came with the input residual */
        memcpy(s->sc, res_at(d, slot, u0 - 1) + tail, BC * sizeof *s->sc);
        if (d->Lt > 0)
            dt_dit_text_load(d, slot, B, res_at(d, slot, u0 - 1) + tail + BC);
    }
    for (int u = u0 > 1 ? u0 : 1; u < u1 && u <= L; u++) {
        int l = u - 1;
        DT_TRY(enter(d, u, DT_PHASE_FORWARD));
        DT_TRY(
            dt_dit_block_forward(d, slot, l, res_at(d, slot, l), s->sc, B, res_at(d, slot, l + 1)));
        mark_saved(d, slot, l, true);
        DT_TRY(leave(d, u, DT_PHASE_FORWARD));
    }
    if (u1 < L + 2) { /* the chunk's output: its residual, and the conditioning with it */
        memcpy(res_at(d, slot, u1 - 1) + tail, s->sc, BC * sizeof *s->sc);
        if (d->Lt > 0)
            dt_dit_text_save(d, slot, B, res_at(d, slot, u1 - 1) + tail + BC);
        return DT_OK;
    }
    DT_TRY(enter(d, L + 1, DT_PHASE_FORWARD));
    DT_TRY(final_forward(d, slot, B, res_at(d, slot, L), s->sc));
    return leave(d, L + 1, DT_PHASE_FORWARD);
}

dt_status dt_dit_forward_units(dt_dit *d, int slot, int u0, int u1, const dt_batch *b) {
    DT_TRY(check_batch(d, b->B, b->T));
    DT_TRY(check_units(d, slot, u0, u1));
    int64_t clip = dt_dit_clip_numel(&d->cfg), stride = dt_dit_input_floats(&d->cfg);
    const float *rows = b->input;
    if (u0 == 0)
        DT_TRY(set_labels(d, slot, NULL, rows + clip + 1, stride, b->B));
    if (u0 == 0 && d->Lt > 0)
        DT_TRY(dt_dit_text_read(d, slot, rows + clip + 2, stride, b->B));
    clip_in in = {.x = rows, .t = rows + clip, .x_stride = stride, .t_stride = stride};
    return forward_run(d, slot, u0, u1, b->B, &in);
}

/* Per token: the mean over its patch of (pred - target)^2; the gradient of grad_scale times
 * their sum, 2 grad_scale (pred - target) / P, into the slot's dtok. */
dt_status dt_dit_loss_slot(dt_dit *d, int slot, const dt_batch *b, float grad_scale, bool backward,
                           double *loss_sum) {
    DT_TRY(check_batch(d, b->B, b->T));
    DT_TRY(check_units(d, slot, d->cfg.n_layer + 1, d->cfg.n_layer + 2));
    if (backward && !d->training)
        return dt_err_set(DT_ERR_ARG, "dit: built for inference, cannot compute gradients");
    if (!b->target)
        return dt_err_set(DT_ERR_ARG, "dit: a loss needs the batch's target velocities");
    int L = d->cfg.n_layer, P = d->P, Nr = dt_dit_rows(d, b->B);
    DT_TRY(enter(d, L + 1, DT_PHASE_HEAD));
    float *tgt = d->tok_tgt;
    patchify(d, tgt, b->target, dt_dit_target_floats(&d->cfg), b->B);
    float *dtok = backward ? d->slots[slot].dtok : NULL;
    double sum = 0;
    for (int64_t i = 0; i < Nr; i++) {
        double row = 0;
        for (int j = 0; j < P; j++) {
            double e = (double)d->tok_out[i * P + j] - tgt[i * P + j];
            row += e * e;
            if (dtok)
                dtok[i * P + j] = (float)(2.0 * grad_scale * e / P);
        }
        sum += row / P;
    }
    if (d->par.rows->size > 1) /* every tp rank reports its rows' tp group's loss, as GPT's head */
        DT_TRY(dt_comm_allreduce_f64(d->par.rows, &sum, 1));
    *loss_sum = sum;
    return leave(d, L + 1, DT_PHASE_HEAD);
}

dt_status dt_dit_backward_units(dt_dit *d, int slot, int grad, int u0, int u1, const dt_batch *b,
                                bool split) {
    DT_TRY(check_batch(d, b->B, b->T));
    DT_TRY(check_units(d, slot, u0, u1));
    if (grad < 0 || grad >= d->n_grads)
        return dt_err_set(DT_ERR_ARG, "dit: gradient buffer %d (of %d) out of range", grad,
                          d->n_grads);
    if (!d->training)
        return dt_err_set(DT_ERR_ARG, "dit: backward of a model built without training");
    if (split && !d->wgrad)
        return dt_err_set(DT_ERR_ARG, "dit: split backward needs a model built for it");
    dt_dit_slot *s = &d->slots[slot];
    int L = d->cfg.n_layer, B = b->B;
    float *dres = d->dres + (size_t)grad * d->pos_stride,
          *dsc = dres + (size_t)dt_dit_rows(d, B) * d->C;
    float *dy = dsc + (size_t)B * d->C;
    if (u1 == L + 2) {
        memset(dsc, 0, ((size_t)B * d->C + dt_dit_text_boundary(d, B)) * sizeof *dsc);
        DT_TRY(enter(d, L + 1, DT_PHASE_BACKWARD));
        DT_TRY(final_backward(d, slot, B, res_at(d, slot, L), s->sc, dres, dsc));
        DT_TRY(leave(d, L + 1, DT_PHASE_BACKWARD));
    }
    for (int u = u1 <= L ? u1 - 1 : L; u >= 1 && u >= u0; u--) {
        int l = u - 1;
        DT_TRY(enter(d, u, DT_PHASE_BACKWARD));
        DT_TRY(
            dt_dit_block_backward(d, slot, l, res_at(d, slot, l), s->sc, B, dres, dsc, dy, split));
        if (!split)
            mark_saved(d, slot, l, false);
        DT_TRY(leave(d, u, DT_PHASE_BACKWARD));
    }
    if (u0 > 0)
        return DT_OK;
    DT_TRY(enter(d, 0, DT_PHASE_BACKWARD));
    DT_TRY(embed_backward(d, slot, B, dres, dsc, dy));
    return leave(d, 0, DT_PHASE_BACKWARD);
}

/* The embedders' and the final layer's weight gradients came with the backward (cheap next
 * to the blocks'); the blocks' matmuls make theirs here. */
dt_status dt_dit_weight_units(dt_dit *d, int slot, int u0, int u1, const dt_batch *b) {
    DT_TRY(check_batch(d, b->B, b->T));
    DT_TRY(check_units(d, slot, u0, u1));
    if (!d->wgrad)
        return dt_err_set(DT_ERR_ARG, "dit: split backward needs a model built for it");
    int L = d->cfg.n_layer;
    for (int u = u1 <= L ? u1 - 1 : L; u >= 1 && u >= u0; u--) {
        int l = u - 1;
        DT_TRY(enter(d, u, DT_PHASE_WEIGHTS));
        DT_TRY(dt_dit_block_weights(d, slot, l, res_at(d, slot, l), d->slots[slot].sc, b->B));
        mark_saved(d, slot, l, false);
        DT_TRY(leave(d, u, DT_PHASE_WEIGHTS));
    }
    return DT_OK;
}

int64_t dt_dit_boundary_count(const dt_dit *d, int B) {
    return ((int64_t)dt_dit_rows(d, B) + B) * d->C + dt_dit_text_boundary(d, B);
}

float *dt_dit_boundary(dt_dit *d, int slot, int position, int B) {
    (void)B;
    return res_at(d, slot, position);
}

float *dt_dit_boundary_grad(dt_dit *d, int grad, int B) {
    (void)B;
    return d->dres + (size_t)grad * d->pos_stride;
}

/* ---- one process -------------------------------------------------------------------------------
 */

static dt_status check_whole(const dt_dit *d, const char *what) {
    if (d->par.sp->size > 1 || d->par.tp->size > 1 || d->n_units < d->cfg.n_layer + 2)
        return dt_err_set(DT_ERR_UNSUPPORTED,
                          "dit: %s runs on a one-process model (every "
                          "unit, no sp or tp split)",
                          what);
    return DT_OK;
}

dt_status dt_dit_forward(dt_dit *d, const float *x, const float *t, const int32_t *labels,
                         const float *text, int B) {
    DT_TRY(check_whole(d, "dt_dit_forward"));
    if (B <= 0 || B > d->B)
        return dt_err_set(DT_ERR_ARG, "dit: forward of B = %d clips, the model holds 1..%d", B,
                          d->B);
    if (labels && d->cfg.n_classes == 0)
        return dt_err_set(DT_ERR_ARG, "dit: labels given to a model without classes");
    DT_TRY(set_labels(d, 0, labels, NULL, 0, B));
    if (text && d->Lt == 0)
        return dt_err_set(DT_ERR_ARG, "dit: text given to a model without text");
    if (d->Lt > 0)
        DT_TRY(dt_dit_text_read(d, 0, text, dt_dit_text_floats(&d->cfg), B));
    clip_in in = {.x = x, .t = t, .x_stride = dt_dit_clip_numel(&d->cfg), .t_stride = 1};
    DT_TRY(forward_run(d, 0, 0, d->cfg.n_layer + 2, B, &in));
    unpatchify(d, d->out, d->tok_out, B);
    return DT_OK;
}

float *dt_dit_output(dt_dit *d) { return d->out; }

dt_status dt_dit_backward(dt_dit *d, const float *dout, int B) {
    if (!d->training)
        return dt_err_set(DT_ERR_ARG, "dit: backward of a model built without training");
    DT_TRY(check_whole(d, "dt_dit_backward"));
    if (B <= 0 || B > d->B)
        return dt_err_set(DT_ERR_ARG, "dit: backward of B = %d clips, the model holds 1..%d", B,
                          d->B);
    /* the gradient of the tokens is the adjoint of unpatchify: patchify */
    patchify(d, d->slots[0].dtok, dout, dt_dit_clip_numel(&d->cfg), B);
    return dt_dit_backward_units(d, 0, 0, 0, d->cfg.n_layer + 2, &(dt_batch){.B = B, .T = d->S},
                                 false);
}

dt_status dt_dit_predict(dt_dit *d, const dt_batch *b, float *out) {
    DT_TRY(check_whole(d, "predict"));
    DT_TRY(dt_dit_forward_units(d, 0, 0, d->cfg.n_layer + 2, b));
    unpatchify(d, out, d->tok_out, b->B);
    dt_dit_drop_saved(d);
    return DT_OK;
}
