/* Chunked LM head + cross-entropy. See lm_head.h. */
#include "nn/lm_head.h"

#include "kernels/cast.h"
#include "kernels/xent.h"

/* A chunk's logits take up to 64 MiB: a few hundred rows at GPT-2's vocabulary, enough rows
 * for the matmuls (and the K of the weight-gradient product) to run near peak, while the full
 * [N, V] logits PyTorch would hold are several times larger. */
int dt_lm_head_chunk_rows(int V, int N) {
    int rows = (16 << 20) / (V > 0 ? V : 1);
    if (rows < 64)
        rows = 64;
    if (rows >= N)
        return N;
    /* equal chunks: 1024 rows in 4 x 256, not 3 x 333 and a slow 25-row tail */
    int n_chunks = (N + rows - 1) / rows;
    return (N + n_chunks - 1) / n_chunks;
}

static const void *operand(const dt_nn_ctx *ctx, const float *f32, const dt_bf16 *lp) {
    return ctx->mm_type == DT_BF16 ? (const void *)lp : (const void *)f32;
}

dt_status dt_lm_head_loss(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                          dt_bf16 *x_lp, const int32_t *targets, int N, float grad_scale,
                          bool backward, float *losses, float *dx) {
    if (ctx->mm_type == DT_BF16)
        dt_cast_f32_to_bf16(x_lp, x, (int64_t)N * h->C);
    const void *w = operand(ctx, h->w, h->w_lp);
    for (int r0 = 0; r0 < N; r0 += h->chunk) {
        int n = N - r0 < h->chunk ? N - r0 : h->chunk;
        const void *xc = ctx->mm_type == DT_BF16 ? (const void *)(x_lp + (int64_t)r0 * h->C)
                                                 : (const void *)(x + (int64_t)r0 * h->C);
        dt_gemm_shape fwd = {.M = n, .N = h->V, .K = h->C, .trans_b = true,
                             .dtype = ctx->mm_type};
        DT_TRY(dt_gemm_run(ctx->gemm, &fwd, xc, w, NULL, h->logits));
        dt_xent_forward_backward(h->logits, losses + r0, targets + r0, n, h->V, h->V,
                                 backward ? grad_scale : 0.0f);
        if (!backward)
            continue;
        const void *g = h->logits;
        if (ctx->mm_type == DT_BF16) {
            dt_cast_f32_to_bf16(h->logits_lp, h->logits, (int64_t)n * h->V);
            g = h->logits_lp;
        }
        dt_gemm_shape dxs = {.M = n, .N = h->C, .K = h->V, .accumulate = true,
                             .dtype = ctx->mm_type};
        DT_TRY(dt_gemm_run(ctx->gemm, &dxs, g, w, NULL, dx + (int64_t)r0 * h->C));
        if (h->dw) {
            dt_gemm_shape dws = {.M = h->V, .N = h->C, .K = n, .trans_a = true,
                                 .accumulate = true, .dtype = ctx->mm_type};
            DT_TRY(dt_gemm_run(ctx->gemm, &dws, g, xc, NULL, h->dw));
        }
    }
    return DT_OK;
}

dt_status dt_lm_head_logits(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                            dt_bf16 *x_lp, int N, float *logits) {
    if (ctx->mm_type == DT_BF16)
        dt_cast_f32_to_bf16(x_lp, x, (int64_t)N * h->C);
    dt_gemm_shape s = {.M = N, .N = h->V, .K = h->C, .trans_b = true, .dtype = ctx->mm_type};
    return dt_gemm_run(ctx->gemm, &s, operand(ctx, x, x_lp), operand(ctx, h->w, h->w_lp), NULL,
                       logits);
}
