/* Transformer block forward and backward. See block.h for the math and the conventions.
 * Scratch gradients are zeroed right before the layer that accumulates into them, so one
 * scratch set serves every block. RoPE rotates q and k in place inside the fused qkv buffer;
 * its backward (the inverse rotation) turns the rotated gradients back into qkv gradients. */
#include "nn/block.h"

#include <math.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

int dt_block_qkv_width(const dt_block_dims *d) { return (d->NH + 2 * d->NKV) * d->hs; }

static void zero(float *p, int64_t n) { memset(p, 0, (size_t)n * sizeof *p); }

static void add_inplace(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static dt_attn_shape attn_shape(const dt_block_dims *d, int B, int T) {
    int64_t w = dt_block_qkv_width(d);
    return (dt_attn_shape){.B = B, .T = T, .NH = d->NH, .NKV = d->NKV, .hs = d->hs,
                           .q_stride = w, .kv_stride = w, .scale = 1.0f / sqrtf((float)d->hs),
                           .causal = true};
}

void dt_block_norm_forward(dt_block_kind kind, const dt_norm_params *p, const float *x, int N,
                           int C, float eps, float *y, float *mean, float *rstd) {
    if (kind == DT_BLOCK_GPT2)
        dt_layernorm_forward(y, mean, rstd, x, p->w, p->b, N, C, eps);
    else
        dt_rmsnorm_forward(y, rstd, x, p->w, N, C, eps);
}

void dt_block_norm_backward(dt_block_kind kind, const dt_norm_params *p, const float *x,
                            const float *dy, const float *mean, const float *rstd, int N, int C,
                            float *dx) {
    if (kind == DT_BLOCK_GPT2)
        dt_layernorm_backward(dx, p->dw, p->db, dy, x, p->w, mean, rstd, N, C);
    else
        dt_rmsnorm_backward(dx, p->dw, dy, x, p->w, rstd, N, C);
}

static void rope_apply(const dt_block_dims *d, const dt_rope_cache *rope, float *qkv, int B,
                       int T, bool inverse) {
    if (!rope->cos_t)
        return;
    int64_t w = dt_block_qkv_width(d);
    void (*rot)(float *, int, int, int, int, int64_t, const float *, const float *) =
        inverse ? dt_rope_backward : dt_rope_forward;
    rot(qkv, B, T, d->NH, d->hs, w, rope->cos_t, rope->sin_t);
    rot(qkv + (int64_t)d->NH * d->hs, B, T, d->NKV, d->hs, w, rope->cos_t, rope->sin_t);
}

static dt_status mlp_forward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                             int N, dt_block_acts *a, float *out) {
    int64_t nf = (int64_t)N * d->F;
    DT_TRY(dt_linear_forward(ctx, &blk->fc, a->ln2, a->ln2_lp, N, a->h));
    if (d->kind == DT_BLOCK_GPT2) {
        dt_gelu_forward(a->g, a->h, nf);
    } else {
        DT_TRY(dt_linear_forward(ctx, &blk->up, a->ln2, a->ln2_lp, N, a->u));
        dt_swiglu_forward(a->g, a->h, a->u, nf);
    }
    return dt_linear_forward(ctx, &blk->down, a->g, a->g_lp, N, out);
}

dt_status dt_block_forward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                           const dt_rope_cache *rope, const float *x, int B, int T,
                           dt_block_acts *a, float *out) {
    int N = B * T, C = d->C;
    dt_block_norm_forward(d->kind, &blk->ln1, x, N, C, d->norm_eps, a->ln1, a->ln1_mean,
                          a->ln1_rstd);
    DT_TRY(dt_linear_forward(ctx, &blk->qkv, a->ln1, a->ln1_lp, N, a->qkv));
    rope_apply(d, rope, a->qkv, B, T, false);
    dt_attn_shape as = attn_shape(d, B, T);
    const float *q = a->qkv, *k = q + (int64_t)d->NH * d->hs, *v = k + (int64_t)d->NKV * d->hs;
    dt_attention_forward(&as, a->att, a->lse, q, k, v);
    DT_TRY(dt_linear_forward(ctx, &blk->proj, a->att, a->att_lp, N, a->x2));
    add_inplace(a->x2, x, (int64_t)N * C);
    dt_block_norm_forward(d->kind, &blk->ln2, a->x2, N, C, d->norm_eps, a->ln2, a->ln2_mean,
                          a->ln2_rstd);
    DT_TRY(mlp_forward(ctx, d, blk, N, a, out));
    add_inplace(out, a->x2, (int64_t)N * C);
    return DT_OK;
}

/* In fp32 mode the norm outputs and the MLP activation are not kept per block (they are
 * cheap to recompute and are the block's largest activations after the MLP input): they are
 * rebuilt into the shared buffers just before the weight gradients that read them. In bf16
 * mode the matmuls read the saved bf16 copies instead, so nothing is recomputed. */
static void recompute_mlp_act(const dt_nn_ctx *ctx, const dt_block_dims *d,
                              const dt_block_acts *a, int64_t nf) {
    if (ctx->mm_type != DT_F32)
        return;
    if (d->kind == DT_BLOCK_GPT2)
        dt_gelu_forward(a->g, a->h, nf);
    else
        dt_swiglu_forward(a->g, a->h, a->u, nf);
}

static void recompute_norm(const dt_nn_ctx *ctx, const dt_block_dims *d,
                           const dt_norm_params *p, const float *x, int N, float *y, float *mean,
                           float *rstd) {
    if (ctx->mm_type == DT_F32)
        dt_block_norm_forward(d->kind, p, x, N, d->C, d->norm_eps, y, mean, rstd);
}

static dt_status mlp_backward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                              int N, const dt_block_acts *a, dt_block_scratch *s,
                              const float *dout) {
    int64_t nf = (int64_t)N * d->F;
    recompute_mlp_act(ctx, d, a, nf);
    recompute_norm(ctx, d, &blk->ln2, a->x2, N, a->ln2, a->ln2_mean, a->ln2_rstd);
    zero(s->dg, nf);
    DT_TRY(dt_linear_backward(ctx, &blk->down, a->g, a->g_lp, dout, s->dy_lp, N, s->dg));
    zero(s->dh, nf);
    zero(s->dln, (int64_t)N * d->C);
    if (d->kind == DT_BLOCK_GPT2) {
        dt_gelu_backward(s->dh, a->h, s->dg, nf);
    } else {
        zero(s->du, nf);
        dt_swiglu_backward(s->dh, s->du, a->h, a->u, s->dg, nf);
        DT_TRY(dt_linear_backward(ctx, &blk->up, a->ln2, a->ln2_lp, s->du, s->dy_lp, N, s->dln));
    }
    return dt_linear_backward(ctx, &blk->fc, a->ln2, a->ln2_lp, s->dh, s->dy_lp, N, s->dln);
}

dt_status dt_block_backward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                            const dt_rope_cache *rope, const float *x, int B, int T,
                            const dt_block_acts *a, dt_block_scratch *s, float *dres) {
    int N = B * T, C = d->C;
    /* MLP branch: dres is d(out); LN2's backward adds the branch's part, leaving d(x2) */
    DT_TRY(mlp_backward(ctx, d, blk, N, a, s, dres));
    dt_block_norm_backward(d->kind, &blk->ln2, a->x2, s->dln, a->ln2_mean, a->ln2_rstd, N, C,
                           dres);
    /* attention branch */
    zero(s->datt, (int64_t)N * d->NH * d->hs);
    DT_TRY(dt_linear_backward(ctx, &blk->proj, a->att, a->att_lp, dres, s->dy_lp, N, s->datt));
    int64_t w = dt_block_qkv_width(d);
    zero(s->dqkv, (int64_t)N * w);
    dt_attn_shape as = attn_shape(d, B, T);
    const float *q = a->qkv, *k = q + (int64_t)d->NH * d->hs, *v = k + (int64_t)d->NKV * d->hs;
    float *dq = s->dqkv, *dk = dq + (int64_t)d->NH * d->hs, *dv = dk + (int64_t)d->NKV * d->hs;
    dt_attention_backward(&as, dq, dk, dv, s->datt, a->att, a->lse, q, k, v);
    rope_apply(d, rope, s->dqkv, B, T, true);
    zero(s->dln, (int64_t)N * C);
    recompute_norm(ctx, d, &blk->ln1, x, N, a->ln1, a->ln1_mean, a->ln1_rstd);
    DT_TRY(dt_linear_backward(ctx, &blk->qkv, a->ln1, a->ln1_lp, s->dqkv, s->dy_lp, N, s->dln));
    dt_block_norm_backward(d->kind, &blk->ln1, x, s->dln, a->ln1_mean, a->ln1_rstd, N, C, dres);
    return DT_OK;
}
