/* Linear layer y = x W^T + b, weights in nn.Linear layout [out, in].
 *
 * The layer holds borrowed views into the model's parameter and gradient arenas. With bf16
 * matmuls the forward rounds its input to bf16 into `x_lp`, which the caller keeps for the
 * backward (the weight gradient needs it), so the fp32 input need not be kept for this layer.
 * Backward ACCUMULATES into dx, dw, db (the llm.c convention: the caller zeroes them), except
 * that dw and db are OVERWRITTEN when `grad_set` is true: the model sets it for the first
 * backward of a step, so the gradient arena need not be zeroed every step.
 */
#ifndef DT_NN_LINEAR_H
#define DT_NN_LINEAR_H

#include <stdbool.h>

#include "nn/ctx.h"

typedef struct dt_linear {
    int in, out;
    float *w, *b;        /* [out, in], [out] or NULL (borrowed) */
    float *dw, *db;      /* same shapes (borrowed); NULL when no gradients are kept */
    const dt_bf16 *w_lp; /* bf16 copy of w kept by the optimizer; NULL for fp32 matmuls */
    bool grad_set;       /* backward writes dw = x^T dy and db = colsum(dy) (the same bits as
                          * accumulating onto zeros) instead of adding them */
} dt_linear;

/* x: [N, in], y: [N, out] (overwritten). x_lp: [N, in] bf16, written when ctx is bf16. */
dt_status dt_linear_forward(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                            dt_bf16 *x_lp, int N, float *y);
/* The same in 16-bit modes when the input exists only rounded: x_lp [N, in] of the ctx's type
 * (made by a producer that rounds as dt_cast_f32_to_lp does), so the results are the bits of
 * dt_linear_forward on the fp32 input. DT_ERR_ARG in fp32 mode. */
dt_status dt_linear_forward_lp(const dt_nn_ctx *ctx, const dt_linear *l, const dt_bf16 *x_lp,
                               int N, float *y);
/* bf16 mode only (DT_ERR_ARG otherwise): input x_lp [N, in] bf16, output y [N, out] in bf16,
 * the fp32 sum plus bias rounded once (autocast's bf16 linear output). */
dt_status dt_linear_forward_bf16_out(const dt_nn_ctx *ctx, const dt_linear *l,
                                     const dt_bf16 *x_lp, int N, dt_bf16 *y);
/* dy: [N, out]; dx: [N, in] or NULL (input needs no gradient). x (fp32) is read in fp32 mode,
 * x_lp in bf16 mode. dy_lp: [N, out] bf16 scratch, used in bf16 mode. */
dt_status dt_linear_backward(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                             const dt_bf16 *x_lp, const float *dy, dt_bf16 *dy_lp, int N,
                             float *dx);
/* The same, but dx is OVERWRITTEN (dx = dy W) rather than accumulated, so the caller need not
 * zero it first; dw and db as in dt_linear_backward. dx must not be NULL. */
dt_status dt_linear_backward_set_dx(const dt_nn_ctx *ctx, const dt_linear *l, const float *x,
                                    const dt_bf16 *x_lp, const float *dy, dt_bf16 *dy_lp, int N,
                                    float *dx);

#endif
