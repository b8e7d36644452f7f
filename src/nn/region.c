/* Region operators (see region.h): each op's forward and its adjoint, written next to each
 * other so the pairing is visible in one place, plus the table that names them.
 * Forwards overwrite y; backwards accumulate into dx, so where the collective must run in a
 * buffer of its own (all-reduce is in place, all-gather and reduce-scatter land in a fresh
 * range) it runs in the caller's `work` and is then added. No allocation, no MPI: dt_comm only.
 * Stateless and reentrant; the comm is the only shared object.
 */
#include "nn/region.h"

#include <limits.h>
#include <stdbool.h>
#include <string.h>

/* The per-rank counts of the v-collectives live on the stack (no malloc in a collective). */
#define MAX_RANKS 1024

enum { DIV_ROWS = 1, DIV_COLS = 2, DIV_HEADS = 4 };

/* Validate a shape for an op on `c`. Every rank sees the same shape and comm size, so every
 * rank fails the same way and none is left waiting in the collective. */
static dt_status check(const char *op, dt_comm *c, const dt_region_shape *s, int div,
                       const float *work, int64_t n_work) {
    int p = c->size;
    if (s->rows < 0 || s->cols < 0)
        return dt_err_set(DT_ERR_ARG, "%s: negative shape [%lld, %lld]", op, (long long)s->rows,
                          (long long)s->cols);
    if (p > MAX_RANKS)
        return dt_err_set(DT_ERR_UNSUPPORTED, "%s: %d ranks, at most %d supported", op, p,
                          MAX_RANKS);
    if ((div & DIV_ROWS) && s->rows % p != 0)
        return dt_err_set(DT_ERR_ARG, "%s: %lld rows not divisible by %d ranks", op,
                          (long long)s->rows, p);
    if ((div & DIV_COLS) && s->cols % p != 0)
        return dt_err_set(DT_ERR_ARG, "%s: %lld cols not divisible by %d ranks", op,
                          (long long)s->cols, p);
    if (div & DIV_HEADS) {
        if (s->heads <= 0 || s->cols % s->heads != 0)
            return dt_err_set(DT_ERR_ARG, "%s: %lld cols is not heads (%d) x head_size", op,
                              (long long)s->cols, s->heads);
        if (s->heads % p != 0)
            return dt_err_set(DT_ERR_ARG, "%s: %d heads not divisible by %d ranks", op,
                              s->heads, p);
    }
    /* the largest single count handed to a collective is one rank's share (or all of it) */
    if (s->rows * s->cols > INT_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: %lld elements, at most INT_MAX per call", op,
                          (long long)(s->rows * s->cols));
    if (n_work > 0 && work == NULL)
        return dt_err_set(DT_ERR_ARG, "%s: needs %lld floats of work, got NULL", op,
                          (long long)n_work);
    return DT_OK;
}

static void fill_counts(int *counts, int p, int64_t each) {
    for (int r = 0; r < p; r++)
        counts[r] = (int)each;
}

static void add(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static int64_t full(const dt_region_shape *s) { return s->rows * s->cols; }

/* ---- copy: identity / all-reduce. The p copies of x feed p different shards, so the
 * gradient of x is the sum of the p shards' gradients (Megatron _CopyToModelParallelRegion). */

dt_status dt_region_copy_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                 float *work) {
    DT_TRY(check("copy_forward", c, s, 0, work, 0));
    memcpy(y, x, (size_t)full(s) * sizeof *y);
    return DT_OK;
}

dt_status dt_region_copy_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                  float *dx, float *work) {
    DT_TRY(check("copy_backward", c, s, 0, work, full(s)));
    memcpy(work, dy, (size_t)full(s) * sizeof *work);
    DT_TRY(dt_comm_allreduce_f32(c, work, full(s), NULL));
    add(dx, work, full(s));
    return DT_OK;
}

/* ---- reduce: all-reduce / identity (_ReduceFromModelParallelRegion). y is replicated, so dy
 * is too, and each partial sum x_r contributed to y with weight 1. */

dt_status dt_region_reduce_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work) {
    DT_TRY(check("reduce_forward", c, s, 0, work, 0));
    memcpy(y, x, (size_t)full(s) * sizeof *y);
    return dt_comm_allreduce_f32(c, y, full(s), NULL);
}

dt_status dt_region_reduce_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work) {
    DT_TRY(check("reduce_backward", c, s, 0, work, 0));
    add(dx, dy, full(s));
    return DT_OK;
}

/* ---- scatter / gather along the last dim. The all-gather of [rows, cols/p] pieces lands
 * rank-major ([p][rows][cols/p]), not row-major, so it goes through `work` and is
 * interleaved back into [rows, cols]. */

dt_status dt_region_scatter_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                    float *y, float *work) {
    DT_TRY(check("scatter_forward", c, s, DIV_COLS, work, 0));
    int64_t cl = s->cols / c->size, off = c->rank * cl;
    for (int64_t i = 0; i < s->rows; i++)
        memcpy(y + i * cl, x + i * s->cols + off, (size_t)cl * sizeof *y);
    return DT_OK;
}

/* dx [rows, cols] += the cols-gather of dy [rows, cols/p] */
static dt_status gather_cols_add(dt_comm *c, const dt_region_shape *s, const float *part,
                                 float *dst, float *work, bool accumulate) {
    int p = c->size, counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    int64_t cl = s->cols / p;
    fill_counts(counts, p, s->rows * cl);
    DT_TRY(dt_comm_allgather_f32(c, part, work, counts, NULL));
    for (int r = 0; r < p; r++) {
        const float *blk = work + (int64_t)r * s->rows * cl;
        for (int64_t i = 0; i < s->rows; i++) {
            float *d = dst + i * s->cols + r * cl;
            if (accumulate)
                add(d, blk + i * cl, cl);
            else
                memcpy(d, blk + i * cl, (size_t)cl * sizeof *d);
        }
    }
    return DT_OK;
}

dt_status dt_region_scatter_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                     float *dx, float *work) {
    DT_TRY(check("scatter_backward", c, s, DIV_COLS, work, full(s)));
    return gather_cols_add(c, s, dy, dx, work, true);
}

dt_status dt_region_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work) {
    DT_TRY(check("gather_forward", c, s, DIV_COLS, work, full(s)));
    return gather_cols_add(c, s, x, y, work, false);
}

dt_status dt_region_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work) {
    DT_TRY(check("gather_backward", c, s, DIV_COLS, work, 0));
    int64_t cl = s->cols / c->size, off = c->rank * cl;
    for (int64_t i = 0; i < s->rows; i++)
        add(dx + i * cl, dy + i * s->cols + off, cl);
    return DT_OK;
}

/* ---- sequence ops on [T, C] rows. A row shard is contiguous, so the all-gather and the
 * reduce-scatter of rows need no packing. Megatron-SP (Korthikanti et al. 2022, sec. 4.2.2):
 * g = all-gather forward / reduce-scatter backward, ḡ = reduce-scatter / all-gather. */

static int64_t rows_local(dt_comm *c, const dt_region_shape *s) {
    return s->rows / c->size * s->cols;
}

static dt_status allgather_rows(dt_comm *c, const dt_region_shape *s, const float *x, float *y) {
    int counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    fill_counts(counts, c->size, rows_local(c, s));
    return dt_comm_allgather_f32(c, x, y, counts, NULL);
}

static dt_status reduce_scatter_rows(dt_comm *c, const dt_region_shape *s, const float *x,
                                     float *y) {
    int counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    fill_counts(counts, c->size, rows_local(c, s));
    return dt_comm_reduce_scatter_f32(c, x, y, counts, NULL);
}

dt_status dt_region_seq_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work) {
    DT_TRY(check("seq_gather_forward", c, s, DIV_ROWS, work, 0));
    return allgather_rows(c, s, x, y);
}

dt_status dt_region_seq_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work) {
    DT_TRY(check("seq_gather_backward", c, s, DIV_ROWS, work, rows_local(c, s)));
    DT_TRY(reduce_scatter_rows(c, s, dy, work));
    add(dx, work, rows_local(c, s));
    return DT_OK;
}

dt_status dt_region_seq_reduce_scatter_forward(dt_comm *c, const dt_region_shape *s,
                                               const float *x, float *y, float *work) {
    DT_TRY(check("seq_reduce_scatter_forward", c, s, DIV_ROWS, work, 0));
    return reduce_scatter_rows(c, s, x, y);
}

dt_status dt_region_seq_reduce_scatter_backward(dt_comm *c, const dt_region_shape *s,
                                                const float *dy, float *dx, float *work) {
    DT_TRY(check("seq_reduce_scatter_backward", c, s, DIV_ROWS, work, full(s)));
    DT_TRY(allgather_rows(c, s, dy, work));
    add(dx, work, full(s));
    return DT_OK;
}

/* Open-Sora's split_forward_gather_backward / gather_forward_split_backward: the same
 * collectives as above, but the full side is replicated (one logical tensor), so the split's
 * adjoint is an all-gather (not a reduce) and the gather's adjoint is keep-own-rows. */

dt_status dt_region_seq_split_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                      float *y, float *work) {
    DT_TRY(check("seq_split_forward", c, s, DIV_ROWS, work, 0));
    int64_t n = rows_local(c, s);
    memcpy(y, x + c->rank * n, (size_t)n * sizeof *y);
    return DT_OK;
}

dt_status dt_region_seq_split_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                       float *dx, float *work) {
    DT_TRY(check("seq_split_backward", c, s, DIV_ROWS, work, full(s)));
    DT_TRY(allgather_rows(c, s, dy, work));
    add(dx, work, full(s));
    return DT_OK;
}

dt_status dt_region_seq_gather_split_forward(dt_comm *c, const dt_region_shape *s,
                                             const float *x, float *y, float *work) {
    DT_TRY(check("seq_gather_split_forward", c, s, DIV_ROWS, work, 0));
    return allgather_rows(c, s, x, y);
}

dt_status dt_region_seq_gather_split_backward(dt_comm *c, const dt_region_shape *s,
                                              const float *dy, float *dx, float *work) {
    DT_TRY(check("seq_gather_split_backward", c, s, DIV_ROWS, work, 0));
    int64_t n = rows_local(c, s);
    add(dx, dy + c->rank * n, n);
    return DT_OK;
}

/* ---- Ulysses all-to-all (Jacobs et al. 2023). Forward: block d of the send buffer is this
 * rank's rows with destination d's heads, [T/p, H/p, hs]; rank d receives block r from each
 * rank r in rank order, which is row order, so its receive buffer is already [T, H/p, hs].
 * The map is a permutation, so its adjoint is its inverse: send dy's row block d back to rank
 * d, and scatter the received [T/p, H/p, hs] blocks into their head slots of dx. */

dt_status dt_region_all_to_all_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work) {
    DT_TRY(check("all_to_all_forward", c, s, DIV_ROWS | DIV_HEADS, work, full(s) / c->size));
    int p = c->size;
    int64_t tl = s->rows / p, hs = s->cols / s->heads, hl = s->heads / p;
    for (int d = 0; d < p; d++)
        for (int64_t t = 0; t < tl; t++)
            memcpy(work + (d * tl + t) * hl * hs, x + (t * s->heads + d * hl) * hs,
                   (size_t)(hl * hs) * sizeof *work);
    return dt_comm_alltoall_f32(c, work, y, tl * hl * hs, NULL);
}

dt_status dt_region_all_to_all_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work) {
    DT_TRY(check("all_to_all_backward", c, s, DIV_ROWS | DIV_HEADS, work, full(s) / c->size));
    int p = c->size;
    int64_t tl = s->rows / p, hs = s->cols / s->heads, hl = s->heads / p;
    DT_TRY(dt_comm_alltoall_f32(c, dy, work, tl * hl * hs, NULL));
    for (int r = 0; r < p; r++)
        for (int64_t t = 0; t < tl; t++)
            add(dx + (t * s->heads + r * hl) * hs, work + (r * tl + t) * hl * hs, hl * hs);
    return DT_OK;
}

/* ---- the table */

static const dt_region_op OPS[DT_REGION_KIND_COUNT] = {
    [DT_REGION_KIND_COPY] = {"copy", dt_region_copy_forward, dt_region_copy_backward,
                             DT_REGION_LAYOUT_REPLICATED, DT_REGION_LAYOUT_PER_RANK},
    [DT_REGION_KIND_REDUCE] = {"reduce", dt_region_reduce_forward, dt_region_reduce_backward,
                               DT_REGION_LAYOUT_PER_RANK, DT_REGION_LAYOUT_REPLICATED},
    [DT_REGION_KIND_SCATTER] = {"scatter", dt_region_scatter_forward,
                                dt_region_scatter_backward, DT_REGION_LAYOUT_REPLICATED,
                                DT_REGION_LAYOUT_COLS},
    [DT_REGION_KIND_GATHER] = {"gather", dt_region_gather_forward, dt_region_gather_backward,
                               DT_REGION_LAYOUT_COLS, DT_REGION_LAYOUT_REPLICATED},
    [DT_REGION_KIND_SEQ_GATHER] = {"seq_gather", dt_region_seq_gather_forward,
                                   dt_region_seq_gather_backward, DT_REGION_LAYOUT_ROWS,
                                   DT_REGION_LAYOUT_PER_RANK},
    [DT_REGION_KIND_SEQ_REDUCE_SCATTER] = {"seq_reduce_scatter",
                                           dt_region_seq_reduce_scatter_forward,
                                           dt_region_seq_reduce_scatter_backward,
                                           DT_REGION_LAYOUT_PER_RANK, DT_REGION_LAYOUT_ROWS},
    [DT_REGION_KIND_SEQ_SPLIT] = {"seq_split", dt_region_seq_split_forward,
                                  dt_region_seq_split_backward, DT_REGION_LAYOUT_REPLICATED,
                                  DT_REGION_LAYOUT_ROWS},
    [DT_REGION_KIND_SEQ_GATHER_SPLIT] = {"seq_gather_split", dt_region_seq_gather_split_forward,
                                         dt_region_seq_gather_split_backward,
                                         DT_REGION_LAYOUT_ROWS, DT_REGION_LAYOUT_REPLICATED},
    [DT_REGION_KIND_ALL_TO_ALL] = {"all_to_all", dt_region_all_to_all_forward,
                                   dt_region_all_to_all_backward, DT_REGION_LAYOUT_ROWS,
                                   DT_REGION_LAYOUT_HEADS},
};

const dt_region_op *dt_region_op_get(dt_region_kind k) {
    return (int)k >= 0 && k < DT_REGION_KIND_COUNT ? &OPS[k] : NULL;
}

int64_t dt_region_count(dt_region_layout layout, const dt_region_shape *s, int size) {
    switch (layout) {
    case DT_REGION_LAYOUT_REPLICATED:
    case DT_REGION_LAYOUT_PER_RANK:
        return full(s);
    case DT_REGION_LAYOUT_ROWS:
    case DT_REGION_LAYOUT_COLS:
    case DT_REGION_LAYOUT_HEADS:
        return full(s) / size;
    default:
        return 0;
    }
}

int64_t dt_region_work_count(dt_region_kind k, const dt_region_shape *s, int size) {
    switch (k) {
    case DT_REGION_KIND_COPY:
    case DT_REGION_KIND_SCATTER:
    case DT_REGION_KIND_GATHER:
    case DT_REGION_KIND_SEQ_REDUCE_SCATTER:
    case DT_REGION_KIND_SEQ_SPLIT:
        return full(s);
    case DT_REGION_KIND_SEQ_GATHER:
    case DT_REGION_KIND_ALL_TO_ALL:
        return full(s) / size;
    default:
        return 0;
    }
}
