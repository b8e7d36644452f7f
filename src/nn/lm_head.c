/* Chunked, vocabulary-parallel LM head + cross-entropy. See lm_head.h. */
#include "nn/lm_head.h"

#include "kernels/cast.h"
#include "kernels/xent.h"

/* The all-gather's per-rank counts live on the stack (no malloc in a collective). */
#define MAX_TP 1024

/* A chunk's logits take 32-64 MiB: 128-256 rows at GPT-2's vocabulary, enough rows for the
 * matmuls (and the K of the weight-gradient product) to run near peak (the same step time at
 * 128 and 256 rows, 124M bf16, 2 threads), while the full [N, V] logits PyTorch would hold
 * are several times larger. */
int dt_lm_head_chunk_rows(int V, int N, int64_t floats) {
    int64_t r = floats / (V > 0 ? V : 1);
    int rows = r > N ? N : (int)r;
    if (rows < 64)
        rows = 64;
    if (rows >= N)
        return N;
    /* equal chunks: 1024 rows in 4 x 256, not 3 x 333 and a slow 25-row tail */
    int n_chunks = (N + rows - 1) / rows;
    return (N + n_chunks - 1) / n_chunks;
}

/* The 16-bit gradient rows, written over the fp32 logits they come from, at a stride of whole
 * 64-element blocks: the weight-gradient product reads them transposed, and with GPT-2's odd
 * 50257 (rows not 16-byte aligned) oneDNN ran it at 290 GFLOP/s instead of 380 (2 threads,
 * bf16, chunks of 256 rows). A row of under 32 columns has no room for that in its fp32 bytes;
 * each 16-bit row then starts where its fp32 row does. The fp32 logits stay dense: given a
 * padded output stride, oneDNN 2.6 left its brgemm kernel for gemm:jit. */
static int64_t grad16_ld(int V) {
    int64_t blocks = ((int64_t)V + 63) / 64 * 64;
    return blocks <= 2 * (int64_t)V ? blocks : 2 * (int64_t)V;
}

/* [size][3][chunk] gathered statistics (this rank's block is filled in place and all-gathered)
 * and the [chunk] gradient factors. */
int64_t dt_lm_head_stats_count(const dt_lm_head *h) {
    return (int64_t)h->chunk * (3 * (int64_t)h->tp->size + 1);
}

static const void *operand(const dt_nn_ctx *ctx, const float *f32, const dt_bf16 *lp) {
    return ctx->mm_type != DT_F32 ? (const void *)lp : (const void *)f32;
}

/* Columns of this rank's rows that are real tokens: global ids [vocab_first, vocab_size). */
static int valid_rows(const dt_lm_head *h) {
    int64_t v = (int64_t)h->vocab_size - h->vocab_first;
    return v <= 0 ? 0 : v >= h->V ? h->V : (int)v;
}

static dt_status check_args(const dt_lm_head *h, int N) {
    if (!h->tp || !h->stats || !h->logits || h->chunk < 1 || h->V < 1 || N < 0 ||
        h->vocab_first < 0 || h->vocab_size < 1 || h->tp->size > MAX_TP ||
        (int64_t)h->chunk * 3 * h->tp->size > INT32_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: bad head (tp %p, stats %p, chunk %d, V %d, "
                          "vocab_first %d, vocab_size %d, N %d)", __func__, (void *)h->tp,
                          (void *)h->stats, h->chunk, h->V, h->vocab_first, h->vocab_size, N);
    return DT_OK;
}

/* Per chunk, the softmax over the whole (split) vocabulary needs only each rank's max and sum
 * of exps per row, never the [n, vocab] logits (Shoeybi et al., "Megatron-LM", 2019,
 * section 3: fuse the parallel output GEMM with the cross-entropy so only per-row scalars
 * move). Megatron's vocab-parallel cross-entropy all-reduces the max, then the target logit,
 * then the sum of exps: three collectives. Gathering each rank's (max, sum, target logit) and
 * rescaling every sum to the global max (kernels/xent.c) needs one, and since every rank then
 * combines the same gathered floats in the same order, all ranks hold bit-identical losses. */
dt_status dt_lm_head_loss(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                          dt_bf16 *x_lp, const int32_t *targets, int N, float grad_scale,
                          bool backward, float *losses, float *dx) {
    DT_TRY(check_args(h, N));
    if (ctx->mm_type != DT_F32)
        dt_cast_f32_to_lp(ctx->mm_type, x_lp, x, (int64_t)N * h->C);
    const void *w = operand(ctx, h->w, h->w_lp);
    const int p = h->tp->size, me = h->tp->rank, nv = valid_rows(h);
    int counts[MAX_TP] = {0}; /* zeroed: the compiler cannot see p <= MAX_TP */
    for (int r0 = 0; r0 < N; r0 += h->chunk) {
        int n = N - r0 < h->chunk ? N - r0 : h->chunk;
        const int32_t *tg = targets + r0;
        const void *xc = ctx->mm_type != DT_F32 ? (const void *)(x_lp + (int64_t)r0 * h->C)
                                                 : (const void *)(x + (int64_t)r0 * h->C);
        dt_gemm_shape fwd = {.M = n, .N = h->V, .K = h->C, .trans_b = true,
                             .dtype = ctx->mm_type};
        DT_TRY(dt_gemm_run(ctx->gemm, &fwd, xc, w, NULL, h->logits));
        /* this rank's block of [p][3][n] stats, gathered in place */
        float *all = h->stats, *mine = all + (int64_t)me * 3 * n;
        float *scale = all + (int64_t)p * 3 * n; // [n]
        if (backward)
            dt_xent_row_stats_exp(h->logits, h->V, n, nv, h->vocab_first, tg, mine, mine + n,
                                  mine + 2 * n);
        else
            dt_xent_row_stats(h->logits, h->V, n, nv, h->vocab_first, tg, mine, mine + n,
                              mine + 2 * n);
        for (int k = 0; k < p; k++)
            counts[k] = 3 * n;
        DT_TRY(dt_comm_allgather_f32(h->tp, mine, all, counts, NULL));
        dt_xent_combine(all, p, me, n, tg, h->vocab_size, grad_scale, losses + r0,
                        backward ? scale : NULL);
        if (!backward)
            continue;
        const void *g = h->logits;
        int64_t ldg = h->V;
        if (ctx->mm_type != DT_F32) { /* the 16-bit gradient rows over the dense fp32 logits */
            ldg = grad16_ld(h->V);
            dt_xent_grad_lp(h->logits, h->V, n, nv, h->V, h->vocab_first, tg, scale, grad_scale,
                            ctx->mm_type, (uint16_t *)h->logits, ldg);
        } else {
            dt_xent_grad(h->logits, h->V, n, nv, h->V, h->vocab_first, tg, scale, grad_scale);
        }
        dt_gemm_shape dxs = {.M = n, .N = h->C, .K = h->V, .dtype = ctx->mm_type, .lda = ldg};
        DT_TRY(dt_gemm_run(ctx->gemm, &dxs, g, w, NULL, dx + (int64_t)r0 * h->C));
        if (h->dw) {
            dt_gemm_shape dws = {.M = h->V,
                                 .N = h->C,
                                 .K = n,
                                 .trans_a = true,
                                 .accumulate = r0 > 0 || !h->dw_set,
                                 .dtype = ctx->mm_type,
                                 .lda = ldg};
            DT_TRY(dt_gemm_run(ctx->gemm, &dws, g, xc, NULL, h->dw));
        }
    }
    return DT_OK;
}

dt_status dt_lm_head_logits(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                            dt_bf16 *x_lp, int N, float *logits) {
    if (ctx->mm_type != DT_F32)
        dt_cast_f32_to_lp(ctx->mm_type, x_lp, x, (int64_t)N * h->C);
    dt_gemm_shape s = {.M = N, .N = h->V, .K = h->C, .trans_b = true, .dtype = ctx->mm_type};
    return dt_gemm_run(ctx->gemm, &s, operand(ctx, x, x_lp), operand(ctx, h->w, h->w_lp), NULL,
                       logits);
}
