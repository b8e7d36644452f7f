/* The DiT's forward and hand-written backward (see dit.h), from dtrain's layers and kernels:
 * dt_linear for every matmul, dt_layernorm for the norms, the flash attention kernel,
 * tanh-GELU, and the row gather/scatter and position kernels.
 *
 * adaLN-Zero (DiT section 3.2): each block's norms have no weights; per clip b the block
 * regresses (shift, scale, gate) x 2 from silu(c_b) and computes
 *     x2  = x  + gate1_b * attn(LN(x) (1 + scale1_b) + shift1_b)
 *     out = x2 + gate2_b * mlp(LN(x2) (1 + scale2_b) + shift2_b).
 * LN(x)(1 + scale) + shift IS a LayerNorm whose affine weight is 1 + scale_b and bias shift_b,
 * so dt_layernorm_forward/backward over one clip's rows does the modulation and its gradient
 * (the kernel's dw, db are d scale_b and d shift_b). Zero modulation weights give gate = 0: the
 * block is the identity at initialisation.
 *
 * Attention layout. Tokens are ordered (frame, row, column) per clip. Full attention runs B
 * sequences of S tokens. Spatial attention (even blocks of spatial_temporal) runs B Tt
 * sequences of Th Tw tokens: the rows are already in that order. Temporal attention (odd
 * blocks) runs B Th Tw sequences of Tt tokens: q|k|v rows are permuted (b, t, s) -> (b, s, t)
 * before the kernel and the output back after, so one kernel serves all three as batches of
 * shorter sequences.
 */
#include <math.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/reduce.h"
#include "models/dit_impl.h"

#define DIT_NORM_EPS 1e-6f

typedef enum { ATTN_FULL, ATTN_SPATIAL, ATTN_TEMPORAL } attn_kind;

static attn_kind block_kind(const dt_dit *d, int l) {
    if (d->cfg.attn == DT_DIT_ATTN_FULL)
        return ATTN_FULL;
    return l % 2 == 0 ? ATTN_SPATIAL : ATTN_TEMPORAL;
}

static dt_attn_shape attn_shape(const dt_dit *d, attn_kind k, int B) {
    int hw = d->Th * d->Tw;
    int Bs = k == ATTN_FULL ? B : k == ATTN_SPATIAL ? B * d->Tt : B * hw;
    int T = k == ATTN_FULL ? d->S : k == ATTN_SPATIAL ? hw : d->Tt;
    int hs = d->C / d->NH;
    return (dt_attn_shape){.B = Bs, .T = T, .NH = d->NH, .NKV = d->NH, .hs = hs,
                           .q_stride = 3 * d->C, .kv_stride = 3 * d->C,
                           .scale = 1.0f / sqrtf((float)hs)};
}

/* Rows of `width` floats between token order (b, t, s) and temporal order (b, s, t), s over
 * the Th Tw positions of a frame. to_temporal: dst[(b, s, t)] = src[(b, t, s)]; else back. */
static void permute_rows(const dt_dit *d, float *dst, const float *src, int width, int B,
                         bool to_temporal) {
    int Tt = d->Tt, hw = d->Th * d->Tw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tt; t++)
            for (int s = 0; s < hw; s++) {
                size_t r = ((size_t)b * Tt + t) * hw + s, p = ((size_t)b * hw + s) * Tt + t;
                size_t to = to_temporal ? p : r, from = to_temporal ? r : p;
                memcpy(dst + to * width, src + from * width, (size_t)width * sizeof *dst);
            }
}

/* Where element j of token `tok` of clip b lives in the clip tensor [B, frames, channels,
 * height, width]: a token's patch is flattened (channel, dt, dh, dw) as a Conv3d weight is. */
static size_t clip_at(const dt_dit *d, int b, int tok, int j) {
    const dt_dit_config *c = &d->cfg;
    int tt = tok / (d->Th * d->Tw), hh = tok / d->Tw % d->Th, ww = tok % d->Tw;
    int f = j % c->pw, e = j / c->pw % c->ph, a = j / (c->pw * c->ph) % c->pt;
    int ch = j / (c->pw * c->ph * c->pt);
    size_t fr = (size_t)b * c->frames + tt * c->pt + a;
    return ((fr * c->channels + ch) * c->height + hh * c->ph + e) * c->width + ww * c->pw + f;
}

/* clip [B, frames, channels, height, width] -> tokens [B S, P] */
static void patchify(const dt_dit *d, float *tok, const float *clip, int B) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < d->S; t++)
            for (int j = 0; j < d->P; j++)
                tok[((size_t)b * d->S + t) * d->P + j] = clip[clip_at(d, b, t, j)];
}

/* the adjoint (and inverse): tokens [B S, P] -> clip */
static void unpatchify(const dt_dit *d, float *clip, const float *tok, int B) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < d->S; t++)
            for (int j = 0; j < d->P; j++)
                clip[clip_at(d, b, t, j)] = tok[((size_t)b * d->S + t) * d->P + j];
}

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
 * sin(1000 t w_i), w_i = 10000^(-i / 128), i < 128. */
static void timestep_features(float *out, const float *t, int B) {
    int half = DT_DIT_FREQ_DIM / 2;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < half; i++) {
            double a = 1000.0 * t[b] * exp(-log(10000.0) * i / half);
            out[(size_t)b * DT_DIT_FREQ_DIM + i] = (float)cos(a);
            out[(size_t)b * DT_DIT_FREQ_DIM + half + i] = (float)sin(a);
        }
}

/* Per clip LayerNorm with affine (w_b, b_b) = aff[b*stride .. + C], aff[b*stride + C ..]. */
static void ln_clips(const dt_dit *d, float *y, float *mean, float *rstd, const float *x,
                     const float *aff, int stride, int B) {
    size_t S = (size_t)d->S, C = (size_t)d->C;
    for (int b = 0; b < B; b++)
        dt_layernorm_forward(y + b * S * C, mean + b * S, rstd + b * S, x + b * S * C,
                             aff + (size_t)b * stride, aff + (size_t)b * stride + C, (int)S,
                             (int)C, DIT_NORM_EPS);
}

/* The adjoint, accumulating into dx, d scale_b (dmod + b*mstride + scale_off) and d shift_b. */
static void ln_clips_backward(const dt_dit *d, float *dx, float *dmod, int mstride,
                              int scale_off, int shift_off, const float *dy, const float *x,
                              const float *aff, int stride, const float *mean,
                              const float *rstd, int B) {
    size_t S = (size_t)d->S, C = (size_t)d->C;
    for (int b = 0; b < B; b++)
        dt_layernorm_backward(dx + b * S * C, dmod + (size_t)b * mstride + scale_off,
                              dmod + (size_t)b * mstride + shift_off, dy + b * S * C,
                              x + b * S * C, aff + (size_t)b * stride, mean + b * S,
                              rstd + b * S, (int)S, (int)C);
}

/* (1 + scale, shift) of one norm as its LN affine: aff[b] = [1 + mod[b, scale], mod[b, shift]]. */
static void make_affine(float *aff, int astride, const float *mod, int mstride, int shift_off,
                        int scale_off, int B, int C) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < C; j++) {
            aff[(size_t)b * astride + j] = 1.0f + mod[(size_t)b * mstride + scale_off + j];
            aff[(size_t)b * astride + C + j] = mod[(size_t)b * mstride + shift_off + j];
        }
}

/* out = x + gate_b * v per row (gate = mod[b * 6C + off]); out may alias x. */
static void gate_add(const dt_dit *d, float *out, const float *x, const float *v,
                     const float *mod, int off, int B) {
    int S = d->S, C = d->C;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < (int64_t)B * S; n++) {
        const float *g = mod + (n / S) * 6 * C + off;
        for (int j = 0; j < C; j++)
            out[n * C + j] = x[n * C + j] + g[j] * v[n * C + j];
    }
}

/* Adjoint of gate_add's branch: dv = gate_b * dy (overwritten), dgate_b += sum_rows dy * v. */
static void gate_backward(const dt_dit *d, float *dv, float *dmod, const float *dy,
                          const float *v, const float *mod, int off, int B) {
    int S = d->S, C = d->C;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < (int64_t)B * S; n++) {
        const float *g = mod + (n / S) * 6 * C + off;
        for (int j = 0; j < C; j++)
            dv[n * C + j] = g[j] * dy[n * C + j];
    }
    for (int b = 0; b < B; b++) {
#pragma omp parallel for schedule(static)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int n = b * S; n < (b + 1) * S; n++)
                s += (double)dy[(size_t)n * C + j] * v[(size_t)n * C + j];
            dmod[(size_t)b * 6 * C + off + j] += (float)s;
        }
    }
}

/* ---- one block ---------------------------------------------------------------------------- */

static dt_status block_forward(dt_dit *d, int l, const float *x, int B, float *out) {
    const dt_dit_block *blk = &d->blocks[l];
    dt_dit_acts *a = &d->acts[l];
    int C = d->C, N = B * d->S;
    attn_kind k = block_kind(d, l);
    DT_TRY(dt_linear_forward(&d->ctx, &blk->ada, d->sc, NULL, B, a->mod));
    make_affine(a->aff, 4 * C, a->mod, 6 * C, 0, C, B, C);
    make_affine(a->aff + 2 * C, 4 * C, a->mod, 6 * C, 3 * C, 4 * C, B, C);
    ln_clips(d, a->m1, a->mean1, a->rstd1, x, a->aff, 4 * C, B);
    float *qkv_out = k == ATTN_TEMPORAL ? d->qkv_rows : a->qkv;
    DT_TRY(dt_linear_forward(&d->ctx, &blk->qkv, a->m1, NULL, N, qkv_out));
    if (k == ATTN_TEMPORAL)
        permute_rows(d, a->qkv, d->qkv_rows, 3 * C, B, true);
    dt_attn_shape s = attn_shape(d, k, B);
    dt_attention_forward(&s, a->y, a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C);
    const float *att = a->y;
    if (k == ATTN_TEMPORAL) {
        permute_rows(d, d->att_rows, a->y, C, B, false);
        att = d->att_rows;
    }
    DT_TRY(dt_linear_forward(&d->ctx, &blk->proj, att, NULL, N, a->a));
    gate_add(d, a->x2, x, a->a, a->mod, 2 * C, B);
    ln_clips(d, a->m2, a->mean2, a->rstd2, a->x2, a->aff + 2 * C, 4 * C, B);
    DT_TRY(dt_linear_forward(&d->ctx, &blk->fc1, a->m2, NULL, N, a->h));
    dt_gelu_forward(d->gel, a->h, (int64_t)N * d->F);
    DT_TRY(dt_linear_forward(&d->ctx, &blk->fc2, d->gel, NULL, N, a->f));
    gate_add(d, out, a->x2, a->f, a->mod, 5 * C, B);
    return DT_OK;
}

/* dres: [N, C], the gradient of the block's output in, of its input x out. Accumulates the
 * block's weight gradients and d silu(c) into d->dsc. */
static dt_status block_backward(dt_dit *d, int l, const float *x, int B, float *dres) {
    const dt_dit_block *blk = &d->blocks[l];
    const dt_dit_acts *a = &d->acts[l];
    int C = d->C, N = B * d->S;
    size_t NC = (size_t)N * C, NF = (size_t)N * d->F;
    attn_kind k = block_kind(d, l);
    memset(d->dmod, 0, (size_t)B * 6 * C * sizeof *d->dmod);
    /* MLP branch: out = x2 + gate2 * fc2(gelu(fc1(m2))) */
    gate_backward(d, d->dA, d->dmod, dres, a->f, a->mod, 5 * C, B);
    dt_gelu_forward(d->gel, a->h, (int64_t)NF);
    memset(d->dg, 0, NF * sizeof *d->dg);
    DT_TRY(dt_linear_backward(&d->ctx, &blk->fc2, d->gel, NULL, d->dA, NULL, N, d->dg));
    memset(d->dh, 0, NF * sizeof *d->dh);
    dt_gelu_backward(d->dh, a->h, d->dg, (int64_t)NF);
    memset(d->dB, 0, NC * sizeof *d->dB);
    DT_TRY(dt_linear_backward(&d->ctx, &blk->fc1, a->m2, NULL, d->dh, NULL, N, d->dB));
    ln_clips_backward(d, dres, d->dmod, 6 * C, 4 * C, 3 * C, d->dB, a->x2, a->aff + 2 * C,
                      4 * C, a->mean2, a->rstd2, B);
    /* attention branch: x2 = x + gate1 * proj(attn(qkv(m1))); dres now holds d x2 */
    gate_backward(d, d->dA, d->dmod, dres, a->a, a->mod, 2 * C, B);
    const float *att = a->y;
    if (k == ATTN_TEMPORAL) {
        permute_rows(d, d->att_rows, a->y, C, B, false);
        att = d->att_rows;
    }
    memset(d->dB, 0, NC * sizeof *d->dB);
    DT_TRY(dt_linear_backward(&d->ctx, &blk->proj, att, NULL, d->dA, NULL, N, d->dB));
    const float *datt = d->dB;
    if (k == ATTN_TEMPORAL) {
        permute_rows(d, d->dattp, d->dB, C, B, true);
        datt = d->dattp;
    }
    float *dq = k == ATTN_TEMPORAL ? d->dqkvp : d->dqkv;
    memset(dq, 0, 3 * NC * sizeof *dq);
    dt_attn_shape s = attn_shape(d, k, B);
    dt_attention_backward(&s, dq, dq + C, dq + 2 * C, datt, a->y, a->lse, a->qkv, a->qkv + C,
                          a->qkv + 2 * C);
    if (k == ATTN_TEMPORAL)
        permute_rows(d, d->dqkv, d->dqkvp, 3 * C, B, false);
    memset(d->dA, 0, NC * sizeof *d->dA);
    DT_TRY(dt_linear_backward(&d->ctx, &blk->qkv, a->m1, NULL, d->dqkv, NULL, N, d->dA));
    ln_clips_backward(d, dres, d->dmod, 6 * C, C, 0, d->dA, x, a->aff, 4 * C, a->mean1,
                      a->rstd1, B);
    return dt_linear_backward(&d->ctx, &blk->ada, d->sc, NULL, d->dmod, NULL, B, d->dsc);
}

/* ---- the model ------------------------------------------------------------------------------ */

dt_status dt_dit_forward(dt_dit *d, const float *x, const float *t, const int32_t *labels,
                         int B) {
    const dt_dit_config *cfg = &d->cfg;
    if (B <= 0 || B > d->B)
        return dt_err_set(DT_ERR_ARG, "dit: forward of B = %d clips, the model holds 1..%d", B,
                          d->B);
    if (labels && cfg->n_classes == 0)
        return dt_err_set(DT_ERR_ARG, "dit: labels given to a model without classes");
    for (int b = 0; b < B; b++) {
        int32_t y = labels ? labels[b] : cfg->n_classes;
        if (y < 0 || y > cfg->n_classes)
            return dt_err_set(DT_ERR_ARG,
                              "dit: label %d of clip %d is outside 0..%d (%d = no label)", y, b,
                              cfg->n_classes, cfg->n_classes);
        d->labels[b] = y;
    }
    int C = d->C, N = B * d->S, L = cfg->n_layer;
    size_t NC = (size_t)N * C;
    /* conditioning c = mlp(timestep features) + label embedding; silu(c) feeds every adaLN */
    timestep_features(d->tfreq, t, B);
    DT_TRY(dt_linear_forward(&d->ctx, &d->t_fc1, d->tfreq, NULL, B, d->th));
    silu(d->ts, d->th, (int64_t)B * C);
    DT_TRY(dt_linear_forward(&d->ctx, &d->t_fc2, d->ts, NULL, B, d->c));
    if (cfg->n_classes > 0)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < C; j++)
                d->c[(size_t)b * C + j] += d->y_table[(size_t)d->labels[b] * C + j];
    silu(d->sc, d->c, (int64_t)B * C);
    /* tokens: patch embedding plus the fixed 3-D positions */
    patchify(d, d->patches, x, B);
    DT_TRY(dt_linear_forward(&d->ctx, &d->x_emb, d->patches, NULL, N, d->res));
    dt_rows_add_positions(d->res, d->pos, 0, d->S, N, C);
    for (int l = 0; l < L; l++)
        DT_TRY(block_forward(d, l, d->res + l * NC, B, d->res + (l + 1) * NC));
    /* final layer: adaLN (shift, scale) -> linear -> unpatchify */
    DT_TRY(dt_linear_forward(&d->ctx, &d->final_ada, d->sc, NULL, B, d->modf));
    make_affine(d->afff, 2 * C, d->modf, 2 * C, 0, C, B, C);
    ln_clips(d, d->mf, d->meanf, d->rstdf, d->res + L * NC, d->afff, 2 * C, B);
    DT_TRY(dt_linear_forward(&d->ctx, &d->final_lin, d->mf, NULL, N, d->tok_out));
    unpatchify(d, d->out, d->tok_out, B);
    return DT_OK;
}

dt_status dt_dit_backward(dt_dit *d, const float *dout, int B) {
    if (!d->training)
        return dt_err_set(DT_ERR_ARG, "dit: backward of a model built without training");
    if (B <= 0 || B > d->B)
        return dt_err_set(DT_ERR_ARG, "dit: backward of B = %d clips, the model holds 1..%d",
                          B, d->B);
    const dt_dit_config *cfg = &d->cfg;
    int C = d->C, N = B * d->S, L = cfg->n_layer;
    size_t NC = (size_t)N * C, BC = (size_t)B * C;
    memset(d->dsc, 0, BC * sizeof *d->dsc);
    /* final layer */
    patchify(d, d->dtok, dout, B);
    memset(d->dA, 0, NC * sizeof *d->dA);
    DT_TRY(dt_linear_backward(&d->ctx, &d->final_lin, d->mf, NULL, d->dtok, NULL, N, d->dA));
    memset(d->dmod, 0, (size_t)B * 2 * C * sizeof *d->dmod);
    memset(d->dres, 0, NC * sizeof *d->dres);
    ln_clips_backward(d, d->dres, d->dmod, 2 * C, C, 0, d->dA, d->res + L * NC, d->afff, 2 * C,
                      d->meanf, d->rstdf, B);
    DT_TRY(dt_linear_backward(&d->ctx, &d->final_ada, d->sc, NULL, d->dmod, NULL, B, d->dsc));
    for (int l = L - 1; l >= 0; l--)
        DT_TRY(block_backward(d, l, d->res + l * NC, B, d->dres));
    /* embedders (the positions are fixed) */
    DT_TRY(dt_linear_backward(&d->ctx, &d->x_emb, d->patches, NULL, d->dres, NULL, N, NULL));
    silu_backward(d->dc, d->c, d->dsc, (int64_t)BC);
    if (cfg->n_classes > 0)
        dt_rows_scatter_add(d->dy_table, d->dc, d->labels, 0, cfg->n_classes + 1, B, C);
    memset(d->dts, 0, BC * sizeof *d->dts);
    DT_TRY(dt_linear_backward(&d->ctx, &d->t_fc2, d->ts, NULL, d->dc, NULL, B, d->dts));
    silu_backward(d->dth, d->th, d->dts, (int64_t)BC);
    return dt_linear_backward(&d->ctx, &d->t_fc1, d->tfreq, NULL, d->dth, NULL, B, NULL);
}
