/* Linear layer: three matmuls (y, dx, dW) and a column sum (db). See linear.h.
 * In bf16 (fp16) mode the operands of every matmul are bf16 (fp16) and accumulation is fp32,
 * as in PyTorch autocast; the fp32 master weights are only read by the optimizer. */
#include "nn/linear.h"

#include <stdbool.h>

#include "kernels/cast.h"
#include "kernels/reduce.h"

dt_status dt_linear_forward(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                            dt_bf16 *x_lp, int N, float *y) {
    dt_gemm_shape s = {.M = N, .N = l->out, .K = l->in, .trans_b = true, .dtype = ctx->mm_type};
    const void *a = x, *w = l->w;
    if (ctx->mm_type != DT_F32) {
        dt_cast_f32_to_lp(ctx->mm_type, x_lp, x, (int64_t)N * l->in);
        a = x_lp;
        w = l->w_lp;
    }
    return dt_gemm_run(ctx->gemm, &s, a, w, l->b, y);
}

dt_status dt_linear_forward_lp(const dt_nn_ctx *ctx, const dt_linear *l, const dt_bf16 *x_lp,
                               int N, float *y) {
    dt_gemm_shape s = {.M = N, .N = l->out, .K = l->in, .trans_b = true, .dtype = ctx->mm_type};
    if (ctx->mm_type == DT_F32)
        return dt_err_set(DT_ERR_ARG, "dt_linear_forward_lp: fp32 matmuls take fp32 inputs");
    return dt_gemm_run(ctx->gemm, &s, x_lp, l->w_lp, l->b, y);
}

dt_status dt_linear_forward_bf16_out(const dt_nn_ctx *ctx, const dt_linear *l,
                                     const dt_bf16 *x_lp, int N, dt_bf16 *y) {
    dt_gemm_shape s = {.M = N, .N = l->out, .K = l->in, .trans_b = true, .dtype = ctx->mm_type};
    if (ctx->mm_type != DT_BF16)
        return dt_err_set(DT_ERR_ARG, "dt_linear_forward_bf16_out: needs bf16 matmuls");
    return dt_gemm_run_bf16_out(ctx->gemm, &s, x_lp, l->w_lp, l->b, y);
}

/* dy is cast to 16 bits once and read by both matmuls (dx, then dW) while it is warm. The
 * bias gradient is summed first, while dy is warm from its producer; in bf16 mode in the pass
 * that casts dy (the same bits as the column sum on its own). */
static dt_status backward(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                          const dt_bf16 *x_lp, const float *dy, dt_bf16 *dy_lp, int N, float *dx,
                          bool accumulate_dx) {
    const void *g = dy, *a = x, *w = l->w;
    if (l->db && ctx->mm_type == DT_BF16) {
        dt_colsum_cast_bf16(l->db, !l->grad_set, dy_lp, dy, N, l->out);
    } else {
        if (l->db)
            (l->grad_set ? dt_colsum_set : dt_colsum_accumulate)(l->db, dy, N, l->out);
        if (ctx->mm_type != DT_F32)
            dt_cast_f32_to_lp(ctx->mm_type, dy_lp, dy, (int64_t)N * l->out);
    }
    if (ctx->mm_type != DT_F32) {
        g = dy_lp;
        a = x_lp;
        w = l->w_lp;
    }
    if (dx) {
        dt_gemm_shape s = {.M = N, .N = l->in, .K = l->out, .accumulate = accumulate_dx,
                           .dtype = ctx->mm_type};
        DT_TRY(dt_gemm_run(ctx->gemm, &s, g, w, NULL, dx));
    }
    if (l->dw) {
        dt_gemm_shape s = {.M = l->out, .N = l->in, .K = N, .trans_a = true,
                           .accumulate = !l->grad_set, .dtype = ctx->mm_type};
        DT_TRY(dt_gemm_run(ctx->gemm, &s, g, a, NULL, l->dw));
    }
    return DT_OK;
}

dt_status dt_linear_backward(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                             const dt_bf16 *x_lp, const float *dy, dt_bf16 *dy_lp, int N,
                             float *dx) {
    return backward(ctx, l, x, x_lp, dy, dy_lp, N, dx, true);
}

dt_status dt_linear_backward_set_dx(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                                    const dt_bf16 *x_lp, const float *dy, dt_bf16 *dy_lp, int N,
                                    float *dx) {
    if (!dx)
        return dt_err_set(DT_ERR_ARG, "dt_linear_backward_set_dx: dx is NULL");
    return backward(ctx, l, x, x_lp, dy, dy_lp, N, dx, false);
}
