/* Column- and row-parallel linear layers (see linear_tp.h): Megatron's copy / reduce region
 * ops wrapped around the unchanged dt_linear. The copy's backward all-reduce is issued
 * non-blocking here (the region ops are blocking) so it overlaps the dW matmul, as in
 * Megatron's async_grad_allreduce (LinearWithGradAccumulationAndAsyncCommunication).
 * No allocation, no MPI: dt_comm only. Stateless and reentrant; the comm is the only shared
 * object.
 */
#include "nn/linear_tp.h"

#include <limits.h>
#include <string.h>

/* Sizes are the same on every rank, so every rank fails alike and none waits in a collective. */
static dt_status check(const char *fn, const dt_linear *l, int N) {
    if (N < 0 || l->in <= 0 || l->out <= 0)
        return dt_err_set(DT_ERR_ARG, "%s: bad shape N %d, in %d, out %d", fn, N, l->in, l->out);
    if ((int64_t)N * l->in > INT_MAX || (int64_t)N * l->out > INT_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: N %d x width above INT_MAX elements", fn, N);
    return DT_OK;
}

/* Column-parallel forward. The copy region's forward is the identity, so x feeds the local
 * layer directly (dt_region_copy_forward would only memcpy it): y_r = x W_r^T + b_r. */
dt_status dt_linear_col_forward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                const float *x, dt_bf16 *x_lp, int N, float *y_local) {
    (void)c;
    DT_TRY(check("linear_col_forward", l, N));
    return dt_linear_forward(ctx, l, x, x_lp, N, y_local);
}

/* Column-parallel backward. x was copied to p shards, so dx = sum_r dy_r W_r (the copy's
 * adjoint). Order: local dx partial into work, post its all-reduce, compute dW_r and db_r
 * (which do not depend on it) while it is in flight, then wait and accumulate into dx. */
dt_status dt_linear_col_backward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                 const float *x, const dt_bf16 *x_lp, const float *dy_local,
                                 dt_bf16 *dy_lp, int N, float *dx, float *work) {
    DT_TRY(check("linear_col_backward", l, N));
    if (dx == NULL) /* no input gradient: no collective, only dW, db */
        return dt_linear_backward(ctx, l, x, x_lp, dy_local, dy_lp, N, NULL);
    if (work == NULL)
        return dt_err_set(DT_ERR_ARG, "linear_col_backward: needs %lld floats of work, got NULL",
                          (long long)N * l->in);
    int64_t n = (int64_t)N * l->in;

    /* dx partial: the local layer with its gradients detached, into a zeroed work (linear
     * backward accumulates). */
    dt_linear only_dx = *l;
    only_dx.dw = NULL;
    only_dx.db = NULL;
    memset(work, 0, (size_t)n * sizeof *work);
    DT_TRY(dt_linear_backward(ctx, &only_dx, x, x_lp, dy_local, dy_lp, N, work));

    dt_comm_req req = {0};
    DT_TRY(dt_comm_allreduce_f32(c, work, n, &req));

    /* dW_r += dy_r^T x, db_r += colsum(dy_r) while the all-reduce runs. dx = NULL: skipped.
     * In bf16 mode this casts dy to dy_lp a second time (dy_lp is not part of the request). */
    dt_status st = dt_linear_backward(ctx, l, x, x_lp, dy_local, dy_lp, N, NULL);
    /* always complete the request: it must not outlive this frame */
    dt_status st_wait = dt_comm_wait(c, &req);
    if (st != DT_OK)
        return st;
    if (st_wait != DT_OK)
        return st_wait;
    for (int64_t i = 0; i < n; i++)
        dx[i] += work[i];
    return DT_OK;
}

/* Row-parallel forward. y = sum_r x_r W_r^T + b. The local product is a partial sum; the
 * reduce region's forward all-reduces it. That is done in place on y (dt_region_reduce_forward
 * takes non-overlapping in/out and would need an [N, out] buffer and a memcpy for the same
 * collective). The bias is added once, after the reduction, on every rank: adding it on rank 0
 * before would give the same sum, but it would be a rank-dependent branch in the layer and
 * would put b through the reduction's rounding; after, every rank does the same work and y is
 * exactly the reduced product plus b. */
dt_status dt_linear_row_forward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                const float *x_local, dt_bf16 *x_lp, int N, float *y) {
    DT_TRY(check("linear_row_forward", l, N));
    dt_linear no_bias = *l;
    no_bias.b = NULL;
    DT_TRY(dt_linear_forward(ctx, &no_bias, x_local, x_lp, N, y));
    DT_TRY(dt_comm_allreduce_f32(c, y, (int64_t)N * l->out, NULL));
    if (l->b)
        for (int i = 0; i < N; i++) {
            float *row = y + (int64_t)i * l->out;
            for (int o = 0; o < l->out; o++)
                row[o] += l->b[o];
        }
    return DT_OK;
}

/* Row-parallel backward. The reduce's adjoint is the identity, so the replicated dy feeds the
 * local layer directly: dx_r += dy W_r, dW_r += dy^T x_r, and db += colsum(dy), which is the
 * full bias gradient on every rank already (y depends on b once, not once per rank). */
dt_status dt_linear_row_backward(const dt_nn_ctx *ctx, dt_comm *c, const dt_linear *l,
                                 const float *x_local, const dt_bf16 *x_lp, const float *dy,
                                 dt_bf16 *dy_lp, int N, float *dx_local) {
    (void)c;
    DT_TRY(check("linear_row_backward", l, N));
    return dt_linear_backward(ctx, l, x_local, x_lp, dy, dy_lp, N, dx_local);
}
