/* Region operators (see region.h): each op's forward and its adjoint, written next to each
 * other so the pairing is visible in one place, plus the table that names them.
 * Forwards overwrite y. An adjoint is two halves, post (start the collective, if any) and
 * finish (accumulate into dx), which dt_region_backward_begin/_end call with other work in
 * between; the blocking backwards are begin + end. Backwards accumulate, so the collective runs
 * in place in dy where it can (all-reduce) and otherwise lands in the caller's `work` (all-gather,
 * reduce-scatter, all-to-all) and is then added. No allocation, no MPI: dt_comm only.
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
static dt_status check(const char *name, const char *dir, dt_comm *c, const dt_region_shape *s,
                       int div, const float *work, int64_t n_work) {
    int p = c->size;
    if (s->rows < 0 || s->cols < 0)
        return dt_err_set(DT_ERR_ARG, "%s_%s: negative shape [%lld, %lld]", name, dir,
                          (long long)s->rows, (long long)s->cols);
    if (p > MAX_RANKS)
        return dt_err_set(DT_ERR_UNSUPPORTED, "%s_%s: %d ranks, at most %d supported", name, dir, p,
                          MAX_RANKS);
    if ((div & DIV_ROWS) && s->rows % p != 0)
        return dt_err_set(DT_ERR_ARG, "%s_%s: %lld rows not divisible by %d ranks", name, dir,
                          (long long)s->rows, p);
    if ((div & DIV_COLS) && s->cols % p != 0)
        return dt_err_set(DT_ERR_ARG, "%s_%s: %lld cols not divisible by %d ranks", name, dir,
                          (long long)s->cols, p);
    if (div & DIV_HEADS) {
        if (s->heads <= 0 || s->cols % s->heads != 0)
            return dt_err_set(DT_ERR_ARG, "%s_%s: %lld cols is not heads (%d) x head_size", name,
                              dir, (long long)s->cols, s->heads);
        if (s->heads % p != 0)
            return dt_err_set(DT_ERR_ARG, "%s_%s: %d heads not divisible by %d ranks", name, dir,
                              s->heads, p);
    }
    /* the largest single count handed to a collective is one rank's share (or all of it) */
    if (s->rows * s->cols > INT_MAX)
        return dt_err_set(DT_ERR_ARG, "%s_%s: %lld elements, at most INT_MAX per call", name, dir,
                          (long long)(s->rows * s->cols));
    if (n_work > 0 && work == NULL)
        return dt_err_set(DT_ERR_ARG, "%s_%s: needs %lld floats of work, got NULL", name, dir,
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

/* The blocking backward of op k: begin + end (defined after the table). */
static dt_status backward(dt_region_kind k, dt_comm *c, const dt_region_shape *s, const float *dy,
                          float *dx, float *work);

/* Each op's adjoint is split in two. post starts the collective on `req` (with req NULL it
 * blocks), reading dy and writing either dy (in place) or work; finish adds the result (`src`:
 * dy or work, chosen in dt_region_backward_begin) into dx. Ops whose adjoint moves no data have
 * no post (NULL in the table below) and finish straight from dy. Shapes are checked once, in
 * begin. The count arrays of the v-collectives live on post's stack: dt_comm copies them when
 * it posts (MPI needs them until completion; dist/mpi_comm.c keeps them in the request slot). */
typedef dt_status (*post_fn)(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                             dt_comm_req *req);
typedef void (*finish_fn)(const dt_comm *c, const dt_region_shape *s, const float *src, float *dx);

static void finish_add_full(const dt_comm *c, const dt_region_shape *s, const float *src,
                            float *dx) {
    (void)c;
    add(dx, src, full(s));
}

/* ---- copy: identity / all-reduce. The p copies of x feed p different shards, so the
 * gradient of x is the sum of the p shards' gradients (Megatron _CopyToModelParallelRegion).
 * The all-reduce runs in place in dy: the caller's partial dx (typically a matmul output it
 * owns) is reduced where it lies, and end adds it into dx. */

dt_status dt_region_copy_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                 float *work) {
    DT_TRY(check("copy", "forward", c, s, 0, work, 0));
    memcpy(y, x, (size_t)full(s) * sizeof *y);
    return DT_OK;
}

static dt_status copy_post(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                           dt_comm_req *req) {
    (void)work;
    return dt_comm_allreduce_f32(c, dy, full(s), req);
}

dt_status dt_region_copy_backward(dt_comm *c, const dt_region_shape *s, const float *dy, float *dx,
                                  float *work) {
    return backward(DT_REGION_KIND_COPY, c, s, dy, dx, work);
}

/* ---- reduce: all-reduce / identity (_ReduceFromModelParallelRegion). y is replicated, so dy
 * is too, and each partial sum x_r contributed to y with weight 1. Backward: finish_add_full. */

dt_status dt_region_reduce_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work) {
    DT_TRY(check("reduce", "forward", c, s, 0, work, 0));
    memcpy(y, x, (size_t)full(s) * sizeof *y);
    return dt_comm_allreduce_f32(c, y, full(s), NULL);
}

dt_status dt_region_reduce_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work) {
    return backward(DT_REGION_KIND_REDUCE, c, s, dy, dx, work);
}

/* ---- scatter / gather along the last dim. The all-gather of [rows, cols/p] pieces lands
 * rank-major ([p][rows][cols/p]), not row-major, so it goes through `work` and is
 * interleaved back into [rows, cols]. */

static dt_status allgather_cols(dt_comm *c, const dt_region_shape *s, const float *part,
                                float *work, dt_comm_req *req) {
    int counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    fill_counts(counts, c->size, s->rows * (s->cols / c->size));
    return dt_comm_allgather_f32(c, part, work, counts, req);
}

/* dst [rows, cols] (+)= the rank-major gathered blocks in `gathered` */
static void interleave_cols(const dt_comm *c, const dt_region_shape *s, const float *gathered,
                            float *dst, bool accumulate) {
    int64_t cl = s->cols / c->size;
    for (int r = 0; r < c->size; r++) {
        const float *blk = gathered + (int64_t)r * s->rows * cl;
        for (int64_t i = 0; i < s->rows; i++) {
            float *d = dst + i * s->cols + r * cl;
            if (accumulate)
                add(d, blk + i * cl, cl);
            else
                memcpy(d, blk + i * cl, (size_t)cl * sizeof *d);
        }
    }
}

dt_status dt_region_scatter_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                    float *work) {
    DT_TRY(check("scatter", "forward", c, s, DIV_COLS, work, 0));
    int64_t cl = s->cols / c->size, off = c->rank * cl;
    for (int64_t i = 0; i < s->rows; i++)
        memcpy(y + i * cl, x + i * s->cols + off, (size_t)cl * sizeof *y);
    return DT_OK;
}

static dt_status scatter_post(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                              dt_comm_req *req) {
    return allgather_cols(c, s, dy, work, req);
}

static void scatter_finish(const dt_comm *c, const dt_region_shape *s, const float *src,
                           float *dx) {
    interleave_cols(c, s, src, dx, true);
}

dt_status dt_region_scatter_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                     float *dx, float *work) {
    return backward(DT_REGION_KIND_SCATTER, c, s, dy, dx, work);
}

dt_status dt_region_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work) {
    DT_TRY(check("gather", "forward", c, s, DIV_COLS, work, full(s)));
    DT_TRY(allgather_cols(c, s, x, work, NULL));
    interleave_cols(c, s, work, y, false);
    return DT_OK;
}

static void gather_finish(const dt_comm *c, const dt_region_shape *s, const float *src, float *dx) {
    int64_t cl = s->cols / c->size, off = c->rank * cl;
    for (int64_t i = 0; i < s->rows; i++)
        add(dx + i * cl, src + i * s->cols + off, cl);
}

dt_status dt_region_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work) {
    return backward(DT_REGION_KIND_GATHER, c, s, dy, dx, work);
}

/* ---- sequence ops on [T, C] rows. A row shard is contiguous, so the all-gather and the
 * reduce-scatter of rows need no packing. Megatron-SP (Korthikanti et al. 2022, sec. 4.2.2):
 * g = all-gather forward / reduce-scatter backward, ḡ = reduce-scatter / all-gather.
 * A reduce-scatter cannot land in its own input, and dx accumulates, so seq_gather's adjoint
 * reduce-scatters dy into work (rows/p of it) and end adds. */

static int64_t rows_local(const dt_comm *c, const dt_region_shape *s) {
    return s->rows / c->size * s->cols;
}

static dt_status allgather_rows(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                dt_comm_req *req) {
    int counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    fill_counts(counts, c->size, rows_local(c, s));
    return dt_comm_allgather_f32(c, x, y, counts, req);
}

static dt_status reduce_scatter_rows(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                     dt_comm_req *req) {
    int counts[MAX_RANKS] = {0}; /* zeroed: the compiler cannot see p <= MAX_RANKS */
    fill_counts(counts, c->size, rows_local(c, s));
    return dt_comm_reduce_scatter_f32(c, x, y, counts, req);
}

/* the adjoint of the row splits (seq_reduce_scatter, seq_split): all-gather dy's rows */
static dt_status allgather_rows_post(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                                     dt_comm_req *req) {
    return allgather_rows(c, s, dy, work, req);
}

dt_status dt_region_seq_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work) {
    DT_TRY(check("seq_gather", "forward", c, s, DIV_ROWS, work, 0));
    return allgather_rows(c, s, x, y, NULL);
}

static dt_status seq_gather_post(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                                 dt_comm_req *req) {
    return reduce_scatter_rows(c, s, dy, work, req);
}

static void seq_gather_finish(const dt_comm *c, const dt_region_shape *s, const float *src,
                              float *dx) {
    add(dx, src, rows_local(c, s));
}

dt_status dt_region_seq_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work) {
    return backward(DT_REGION_KIND_SEQ_GATHER, c, s, dy, dx, work);
}

dt_status dt_region_seq_reduce_scatter_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                               float *y, float *work) {
    DT_TRY(check("seq_reduce_scatter", "forward", c, s, DIV_ROWS, work, 0));
    return reduce_scatter_rows(c, s, x, y, NULL);
}

dt_status dt_region_seq_reduce_scatter_backward(dt_comm *c, const dt_region_shape *s,
                                                const float *dy, float *dx, float *work) {
    return backward(DT_REGION_KIND_SEQ_REDUCE_SCATTER, c, s, dy, dx, work);
}

/* Open-Sora's split_forward_gather_backward / gather_forward_split_backward: the same
 * collectives as above, but the full side is replicated (one logical tensor), so the split's
 * adjoint is an all-gather (not a reduce) and the gather's adjoint is keep-own-rows. */

dt_status dt_region_seq_split_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                      float *y, float *work) {
    DT_TRY(check("seq_split", "forward", c, s, DIV_ROWS, work, 0));
    int64_t n = rows_local(c, s);
    memcpy(y, x + c->rank * n, (size_t)n * sizeof *y);
    return DT_OK;
}

dt_status dt_region_seq_split_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                       float *dx, float *work) {
    return backward(DT_REGION_KIND_SEQ_SPLIT, c, s, dy, dx, work);
}

dt_status dt_region_seq_gather_split_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                             float *y, float *work) {
    DT_TRY(check("seq_gather_split", "forward", c, s, DIV_ROWS, work, 0));
    return allgather_rows(c, s, x, y, NULL);
}

static void seq_gather_split_finish(const dt_comm *c, const dt_region_shape *s, const float *src,
                                    float *dx) {
    int64_t n = rows_local(c, s);
    add(dx, src + c->rank * n, n);
}

dt_status dt_region_seq_gather_split_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                              float *dx, float *work) {
    return backward(DT_REGION_KIND_SEQ_GATHER_SPLIT, c, s, dy, dx, work);
}

/* ---- Ulysses all-to-all (Jacobs et al. 2023). Forward: block d of the send buffer is this
 * rank's rows with destination d's heads, [T/p, H/p, hs]; rank d receives block r from each
 * rank r in rank order, which is row order, so its receive buffer is already [T, H/p, hs].
 * The map is a permutation, so its adjoint is its inverse: send dy's row block d back to rank
 * d, and scatter the received [T/p, H/p, hs] blocks into their head slots of dx. */

dt_status dt_region_all_to_all_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work) {
    DT_TRY(check("all_to_all", "forward", c, s, DIV_ROWS | DIV_HEADS, work, full(s) / c->size));
    int p = c->size;
    int64_t tl = s->rows / p, hs = s->cols / s->heads, hl = s->heads / p;
    for (int d = 0; d < p; d++)
        for (int64_t t = 0; t < tl; t++)
            memcpy(work + (d * tl + t) * hl * hs, x + (t * s->heads + d * hl) * hs,
                   (size_t)(hl * hs) * sizeof *work);
    return dt_comm_alltoall_f32(c, work, y, tl * hl * hs, NULL);
}

static dt_status all_to_all_post(dt_comm *c, const dt_region_shape *s, float *dy, float *work,
                                 dt_comm_req *req) {
    int p = c->size;
    int64_t tl = s->rows / p, hs = s->cols / s->heads, hl = s->heads / p;
    return dt_comm_alltoall_f32(c, dy, work, tl * hl * hs, req);
}

static void all_to_all_finish(const dt_comm *c, const dt_region_shape *s, const float *src,
                              float *dx) {
    int p = c->size;
    int64_t tl = s->rows / p, hs = s->cols / s->heads, hl = s->heads / p;
    for (int r = 0; r < p; r++)
        for (int64_t t = 0; t < tl; t++)
            add(dx + (t * s->heads + r * hl) * hs, src + (r * tl + t) * hl * hs, hl * hs);
}

dt_status dt_region_all_to_all_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work) {
    return backward(DT_REGION_KIND_ALL_TO_ALL, c, s, dy, dx, work);
}

/* ---- the tables */

/* .forward_comm / .backward_comm: which direction moves data; .backward_in_place: copy's
 * all-reduce runs in dy itself. */
#define COMM(fwd, bwd, in_place)                                                                   \
    .forward_comm = fwd, .backward_comm = bwd, .backward_in_place = in_place
/* Scratch, in units of the full tensor: the blocking ops' (the larger of forward and backward,
 * copy staging dy for its in-place all-reduce) and dt_region_backward_begin's. */
#define WORK(blocking, begin)                                                                      \
    .work = DT_REGION_WORK_##blocking, .backward_work = DT_REGION_WORK_##begin

static const dt_region_op OPS[DT_REGION_KIND_COUNT] = {
    [DT_REGION_KIND_COPY] = {"copy", dt_region_copy_forward, dt_region_copy_backward,
                             DT_REGION_LAYOUT_REPLICATED, DT_REGION_LAYOUT_PER_RANK,
                             COMM(false, true, true), WORK(FULL, NONE)},
    [DT_REGION_KIND_REDUCE] = {"reduce", dt_region_reduce_forward, dt_region_reduce_backward,
                               DT_REGION_LAYOUT_PER_RANK, DT_REGION_LAYOUT_REPLICATED,
                               COMM(true, false, false), WORK(NONE, NONE)},
    [DT_REGION_KIND_SCATTER] = {"scatter", dt_region_scatter_forward, dt_region_scatter_backward,
                                DT_REGION_LAYOUT_REPLICATED, DT_REGION_LAYOUT_COLS,
                                COMM(false, true, false), WORK(FULL, FULL)},
    [DT_REGION_KIND_GATHER] = {"gather", dt_region_gather_forward, dt_region_gather_backward,
                               DT_REGION_LAYOUT_COLS, DT_REGION_LAYOUT_REPLICATED,
                               COMM(true, false, false), WORK(FULL, NONE)},
    [DT_REGION_KIND_SEQ_GATHER] = {"seq_gather", dt_region_seq_gather_forward,
                                   dt_region_seq_gather_backward, DT_REGION_LAYOUT_ROWS,
                                   DT_REGION_LAYOUT_PER_RANK, COMM(true, true, false),
                                   WORK(SHARD, SHARD)},
    [DT_REGION_KIND_SEQ_REDUCE_SCATTER] = {"seq_reduce_scatter",
                                           dt_region_seq_reduce_scatter_forward,
                                           dt_region_seq_reduce_scatter_backward,
                                           DT_REGION_LAYOUT_PER_RANK, DT_REGION_LAYOUT_ROWS,
                                           COMM(true, true, false), WORK(FULL, FULL)},
    [DT_REGION_KIND_SEQ_SPLIT] = {"seq_split", dt_region_seq_split_forward,
                                  dt_region_seq_split_backward, DT_REGION_LAYOUT_REPLICATED,
                                  DT_REGION_LAYOUT_ROWS, COMM(false, true, false),
                                  WORK(FULL, FULL)},
    [DT_REGION_KIND_SEQ_GATHER_SPLIT] = {"seq_gather_split", dt_region_seq_gather_split_forward,
                                         dt_region_seq_gather_split_backward, DT_REGION_LAYOUT_ROWS,
                                         DT_REGION_LAYOUT_REPLICATED, COMM(true, false, false),
                                         WORK(NONE, NONE)},
    [DT_REGION_KIND_ALL_TO_ALL] = {"all_to_all", dt_region_all_to_all_forward,
                                   dt_region_all_to_all_backward, DT_REGION_LAYOUT_ROWS,
                                   DT_REGION_LAYOUT_HEADS, COMM(true, true, false),
                                   WORK(SHARD, SHARD)},
};

#undef COMM
#undef WORK

/* The adjoints' halves; post is NULL exactly where OPS[k].backward_comm is false. */
static const struct {
    post_fn post;
    finish_fn finish;
} ADJ[DT_REGION_KIND_COUNT] = {
    [DT_REGION_KIND_COPY] = {copy_post, finish_add_full},
    [DT_REGION_KIND_REDUCE] = {NULL, finish_add_full},
    [DT_REGION_KIND_SCATTER] = {scatter_post, scatter_finish},
    [DT_REGION_KIND_GATHER] = {NULL, gather_finish},
    [DT_REGION_KIND_SEQ_GATHER] = {seq_gather_post, seq_gather_finish},
    [DT_REGION_KIND_SEQ_REDUCE_SCATTER] = {allgather_rows_post, finish_add_full},
    [DT_REGION_KIND_SEQ_SPLIT] = {allgather_rows_post, finish_add_full},
    [DT_REGION_KIND_SEQ_GATHER_SPLIT] = {NULL, seq_gather_split_finish},
    [DT_REGION_KIND_ALL_TO_ALL] = {all_to_all_post, all_to_all_finish},
};

dt_region_kind dt_region_enter_kind(bool rows_split) {
    return rows_split ? DT_REGION_KIND_SEQ_GATHER : DT_REGION_KIND_COPY;
}

dt_region_kind dt_region_leave_kind(bool rows_split) {
    return rows_split ? DT_REGION_KIND_SEQ_REDUCE_SCATTER : DT_REGION_KIND_REDUCE;
}

const dt_region_op *dt_region_op_get(dt_region_kind k) {
    return (int)k >= 0 && k < DT_REGION_KIND_COUNT ? &OPS[k] : NULL;
}

/* The divisibility an op's shape needs follows from its sharded layouts. */
static int divisors(const dt_region_op *op) {
    int div = 0;
    for (int side = 0; side < 2; side++) {
        dt_region_layout l = side ? op->out : op->in;
        div |= l == DT_REGION_LAYOUT_ROWS ? DIV_ROWS : 0;
        div |= l == DT_REGION_LAYOUT_COLS ? DIV_COLS : 0;
        div |= l == DT_REGION_LAYOUT_HEADS ? DIV_HEADS : 0;
    }
    return div;
}

/* ---- split backward */

dt_status dt_region_backward_begin(dt_region_kind k, dt_comm *c, const dt_region_shape *s,
                                   float *dy, float *dx, float *work, dt_region_pending *p) {
    const dt_region_op *op = dt_region_op_get(k);
    if (op == NULL)
        return dt_err_set(DT_ERR_ARG, "region_backward_begin: kind %d out of range", (int)k);
    if (p->active) /* zeroing it would leak its request */
        return dt_err_set(DT_ERR_ARG, "%s_backward: pending op still active; end it first",
                          op->name);
    DT_TRY(check(op->name, "backward", c, s, divisors(op), work,
                 dt_region_backward_work_count(k, s, c->size)));
    *p = (dt_region_pending){.kind = k, .shape = *s, .dx = dx};
    /* where end reads: the collective's output (work) unless it ran in place or there is none */
    p->src = op->backward_comm && !op->backward_in_place ? work : dy;
    if (ADJ[k].post) {
        dt_status st = ADJ[k].post(c, &p->shape, dy, work, &p->req);
        if (st != DT_OK) { /* nothing was posted */
            *p = (dt_region_pending){0};
            return st;
        }
    }
    p->active = true;
    return DT_OK;
}

dt_status dt_region_backward_test(dt_comm *c, dt_region_pending *p, bool *done) {
    return dt_comm_test(c, &p->req, done); /* done at once where nothing was posted */
}

dt_status dt_region_backward_end(dt_comm *c, dt_region_pending *p) {
    if (!p->active)
        return DT_OK;
    dt_status st = dt_comm_wait(c, &p->req);
    if (st == DT_OK)
        ADJ[p->kind].finish(c, &p->shape, p->src, p->dx);
    *p = (dt_region_pending){0};
    return st;
}

/* The blocking form keeps dy const (in is never written, region.h), so an op that reduces in
 * place first stages dy in the front of work; the rest of work is what begin needs. */
static dt_status backward(dt_region_kind k, dt_comm *c, const dt_region_shape *s, const float *dy,
                          float *dx, float *work) {
    const dt_region_op *op = &OPS[k];
    float *in = (float *)dy; /* begin writes dy only for backward_in_place ops, staged here */
    if (op->backward_in_place) {
        DT_TRY(check(op->name, "backward", c, s, divisors(op), work,
                     dt_region_work_count(k, s, c->size)));
        int64_t n = dt_region_count(op->out, s, c->size);
        memcpy(work, dy, (size_t)n * sizeof *work);
        in = work;
        work = dt_region_backward_work_count(k, s, c->size) > 0 ? work + n : NULL;
    }
    dt_region_pending pend = {0};
    DT_TRY(dt_region_backward_begin(k, c, s, in, dx, work, &pend));
    return dt_region_backward_end(c, &pend);
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

static int64_t work_floats(dt_region_work w, const dt_region_shape *s, int size) {
    return w == DT_REGION_WORK_FULL ? full(s) : w == DT_REGION_WORK_SHARD ? full(s) / size : 0;
}

int64_t dt_region_work_count(dt_region_kind k, const dt_region_shape *s, int size) {
    const dt_region_op *op = dt_region_op_get(k);
    return op ? work_floats(op->work, s, size) : 0;
}

int64_t dt_region_backward_work_count(dt_region_kind k, const dt_region_shape *s, int size) {
    const dt_region_op *op = dt_region_op_get(k);
    return op ? work_floats(op->backward_work, s, size) : 0;
}
