/* The DiT's matmuls in the run's precision and across tp (see dit_impl.h): the 16-bit
 * operand copies, the COPY / REDUCE regions around column- and row-parallel matmuls (SEQ_GATHER
 * / SEQ_REDUCE_SCATTER under Megatron-SP), and the gradients of what is applied to split
 * rows, summed over them. A weight gradient may be deferred to the split backward's weight
 * pass (its output gradient kept). Single-threaded control; collectives over the tp comm.
 */
#include <string.h>

#include "kernels/cast.h"
#include "kernels/reduce.h"
#include "models/dit_impl.h"
#include "nn/region.h"

/* ---- matmuls in the run's precision --------------------------------------------------------- */

dt_status dt_dit_linear_forward(dt_dit *d, const dt_linear *l, const float *x, int N,
                                float *y) {
    return dt_linear_forward(&d->ctx, l, x, d->x_lp, N, y);
}

/* The 16-bit copy of x the weight gradient reads is rebuilt here, into the one buffer every
 * matmul shares: the same cast of the same values as the forward's, so the same bits. */
dt_status dt_dit_linear_backward(dt_dit *d, const dt_linear *l, const float *x,
                                 const float *dy, int N, float *dx) {
    if (d->ctx.mm_type != DT_F32)
        dt_cast_f32_to_lp(d->ctx.mm_type, d->x_lp, x, (int64_t)N * l->in);
    return dt_linear_backward(&d->ctx, l, x, d->x_lp, dy, d->dy_lp, N, dx);
}

dt_status dt_dit_sum_rows(dt_dit *d, float *g, float *part, int64_t n) {
    if (d->par.rows->size > 1)
        DT_TRY(dt_comm_allreduce_f32(d->par.rows, part, n, NULL));
    dt_add_inplace(g, part, n);
    return DT_OK;
}

/* A norm output [Nr, C] entering the tp region: itself (COPY's forward is the identity), or
 * under Megatron-SP all Nt rows gathered into d->ln_full. */
dt_status dt_dit_enter_rows(dt_dit *d, const float *x, int B, const float **full) {
    *full = x;
    if (d->par.rows->size == 1)
        return DT_OK;
    DT_TRY(dt_region_op_get(DT_REGION_KIND_SEQ_GATHER)
               ->forward(d->par.tp, &(dt_region_shape){dt_dit_rows_tp(d, B), d->C, 0}, x,
                         d->ln_full, d->work));
    *full = d->ln_full;
    return DT_OK;
}

/* A row-parallel matmul (proj, fc2) on x [Nt, in/tp]: y [Nr, C] = the sum over tp of
 * x_r W_r^T (REDUCE, or SEQ_REDUCE_SCATTER under Megatron-SP), then + b once. Over one tp
 * rank the plain matmul with its bias. */
dt_status dt_dit_row_forward(dt_dit *d, const dt_linear *l, const float *x, int B, float *y) {
    int Nt = dt_dit_rows_tp(d, B), Nr = dt_dit_rows(d, B);
    if (d->par.tp->size == 1)
        return dt_dit_linear_forward(d, l, x, Nt, y);
    dt_linear nb = *l;
    nb.b = nb.db = NULL;
    DT_TRY(dt_dit_linear_forward(d, &nb, x, Nt, d->part));
    DT_TRY(dt_region_op_get(d->par.leave)
               ->forward(d->par.tp, &(dt_region_shape){Nt, d->C, 0}, d->part, y, d->work));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < Nr; n++)
        for (int j = 0; j < d->C; j++)
            y[n * d->C + j] += l->b[j];
    return DT_OK;
}

/* The weight gradient of a matmul's output gradient dy [N, out]: now, or (keep) copied there
 * for the split backward's weight pass. */
static dt_linear defer(const dt_linear *l, const float *dy, int64_t N, float *keep) {
    dt_linear r = *l;
    if (keep) {
        memcpy(keep, dy, (size_t)N * l->out * sizeof *keep);
        r.dw = NULL;
    }
    return r;
}

/* Its backward from dy [Nr, C]: the leaving region's adjoint (the identity, or all Nt rows
 * gathered), the bias's gradient (summed over split rows), this rank's weight and input
 * gradients (dx [Nt, in/tp] accumulates; keep: see defer). */
dt_status dt_dit_row_backward(dt_dit *d, const dt_linear *l, const float *x, const float *dy,
                              int B, float *dx, float *keep) {
    int Nt = dt_dit_rows_tp(d, B), Nr = dt_dit_rows(d, B);
    if (d->par.tp->size == 1) {
        dt_linear w = defer(l, dy, Nt, keep);
        return dt_dit_linear_backward(d, &w, x, dy, Nt, dx);
    }
    dt_linear nb = *l;
    nb.b = nb.db = NULL;
    if (l->db && d->par.rows->size > 1) {
        dt_zero_f32(d->pgrad, d->C);
        dt_colsum_accumulate(d->pgrad, dy, Nr, d->C);
        DT_TRY(dt_dit_sum_rows(d, l->db, d->pgrad, d->C));
    } else if (l->db) {
        dt_colsum_accumulate(l->db, dy, Nr, d->C);
    }
    const float *dfull = dy;
    if (d->par.rows->size > 1) {
        dt_zero_f32(d->part, (int64_t)Nt * d->C);
        DT_TRY(dt_region_op_get(DT_REGION_KIND_SEQ_REDUCE_SCATTER)
                   ->backward(d->par.tp, &(dt_region_shape){Nt, d->C, 0}, dy, d->part, d->work));
        dfull = d->part;
    }
    nb = defer(&nb, dfull, Nt, keep);
    return dt_dit_linear_backward(d, &nb, x, dfull, Nt, dx);
}

/* A column-parallel matmul's (qkv, fc1) backward on x [Nt, C] (entered): its input gradient
 * is partial over tp, and the entering region's adjoint sums it into dx [Nr, C] (+=):
 * all-reduce, or reduce-scatter of the rows under Megatron-SP (keep: see defer). */
dt_status dt_dit_col_backward(dt_dit *d, const dt_linear *l, const float *x, const float *dy,
                              int B, float *dx, float *keep) {
    int Nt = dt_dit_rows_tp(d, B);
    dt_linear w = defer(l, dy, Nt, keep);
    if (d->par.tp->size == 1)
        return dt_dit_linear_backward(d, &w, x, dy, Nt, dx);
    dt_zero_f32(d->part, (int64_t)Nt * d->C);
    DT_TRY(dt_dit_linear_backward(d, &w, x, dy, Nt, d->part));
    return dt_region_op_get(d->par.enter)
        ->backward(d->par.tp, &(dt_region_shape){Nt, d->C, 0}, d->part, dx, d->work);
}

/* A replicated linear applied to this rank's residual rows (the patch embedding, the final
 * linear): under Megatron-SP its weight and bias gradients are partial over the rows comm
 * and summed there; dx (may be NULL) accumulates. */
dt_status dt_dit_rows_linear_backward(dt_dit *d, const dt_linear *l, const float *x,
                                      const float *dy, int N, float *dx) {
    if (d->par.rows->size == 1)
        return dt_dit_linear_backward(d, l, x, dy, N, dx);
    dt_linear t = *l;
    t.dw = d->pgrad;
    t.db = NULL;
    dt_zero_f32(d->pgrad, (int64_t)l->out * l->in);
    DT_TRY(dt_dit_linear_backward(d, &t, x, dy, N, dx));
    DT_TRY(dt_dit_sum_rows(d, l->dw, d->pgrad, (int64_t)l->out * l->in));
    dt_zero_f32(d->pgrad, l->out);
    dt_colsum_accumulate(d->pgrad, dy, N, l->out);
    return dt_dit_sum_rows(d, l->db, d->pgrad, l->out);
}

