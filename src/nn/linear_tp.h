/* Tensor-parallel linear layers (Megatron-LM, Shoeybi et al. 2019, section 3): column-parallel
 * (weight rows split, output features sharded) and row-parallel (weight columns split, input
 * features sharded). Each is region op -> unchanged dt_linear -> region op (STYLE.md, Layers);
 * a column layer followed by a row layer costs one all-reduce forward and one backward.
 * Every call is collective over `c` (the tp comm); degree 1 is the same code on a size-1 comm.
 * No allocation: the caller passes work buffers. Backward ACCUMULATES into dx and l->dw/db.
 * A dt_comm is used by one thread at a time; the layers hold no state of their own.
 */
#ifndef DT_NN_LINEAR_TP_H
#define DT_NN_LINEAR_TP_H

#include "core/comm.h"
#include "core/status.h"
#include "nn/ctx.h"
#include "nn/linear.h"

/* Column-parallel: full layer [out, in]; this rank (r of p = c->size) holds l->w = rows
 * [r*out/p, (r+1)*out/p) of W, so l->in = in, l->out = out/p, and l->b / l->db the same slice
 * of the bias. Entering the region is Megatron's copy (forward identity, backward all-reduce).
 *   x: [N, in] REPLICATED, y_local: [N, out/p] (overwritten). x_lp: [N, in] bf16 (bf16 mode).
 * Collective over c (no data moves forward; it is listed so callers treat it as such). */
dt_status dt_linear_col_forward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                const float *x, dt_bf16 *x_lp, int N, float *y_local);
/* dy_local: [N, out/p]; dx: [N, in] REPLICATED, dx += sum over ranks of dy_r W_r (the copy's
 * adjoint), or NULL when x needs no gradient (then no collective is made: every rank must pass
 * NULL alike). l->dw [out/p, in] += dy_local^T x, l->db [out/p] += colsum(dy_local).
 * work: N*in floats (the dx partial, all-reduced in place), unused when dx is NULL.
 * dy_lp: [N, out/p] bf16 scratch (bf16 mode). The dx all-reduce is posted non-blocking before
 * dW is computed and waited for afterwards. Errors: DT_ERR_ARG (bad sizes, NULL work with a
 * dx), DT_ERR_MPI; the request is always completed before returning. */
dt_status dt_linear_col_backward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                 const float *x, const dt_bf16 *x_lp, const float *dy_local,
                                 dt_bf16 *dy_lp, int N, float *dx, float *work);

/* Row-parallel: full layer [out, in]; this rank holds l->w = columns [r*in/p, (r+1)*in/p) of
 * W as a row-major [out, in/p] block, so l->in = in/p, l->out = out. l->b, l->db: the FULL
 * bias [out] (a replicated parameter, identical on every rank). Leaving the region is
 * Megatron's reduce (forward all-reduce, backward identity).
 *   x_local: [N, in/p] (this rank's columns of the full x), y: [N, out] REPLICATED
 *   (overwritten). x_lp: [N, in/p] bf16 (bf16 mode). The bias is added once, after the
 *   all-reduce. Collective over c (one all-reduce of N*out floats). */
dt_status dt_linear_row_forward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                const float *x_local, dt_bf16 *x_lp, int N, float *y);
/* dy: [N, out] REPLICATED; dx_local: [N, in/p] += dy W_local, or NULL. l->dw [out, in/p] +=
 * dy^T x_local; l->db [out] += colsum(dy), the same on every rank (no reduction needed).
 * dy_lp: [N, out] bf16 scratch (bf16 mode). No data moves (the reduce's adjoint is the
 * identity); collective over c only in that every rank must call it. */
dt_status dt_linear_row_backward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                 const float *x_local, const dt_bf16 *x_lp, const float *dy,
                                 dt_bf16 *dy_lp, int N, float *dx_local);

#endif
