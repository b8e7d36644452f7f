/* nn/region under mpirun (np 1, 2, 4), and every op again on a size-1 local comm on each rank.
 * For every op in the table: forward against a reference built from all ranks' inputs (each
 * rank regenerates every rank's deterministic input), the adjoint identity <A x, y> =
 * <x, A^T y> with random x and y, backward accumulation (two calls give twice one), and shape
 * errors; then the split backward (begin/end) against the blocking one, bitwise, with other
 * work and a second pending op in between, and its buffer rules (what happens to dy, p).
 * Every rank runs every check; rank 0 prints the "N passed, M failed" line summed over
 * ranks and every rank exits nonzero when any failed. Named mpi_test_*.c so the tests/ glob
 * does not register it without mpirun (tests.cmake does).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "harness.h"
#include "nn/region.h"

static float *fbuf(int64_t n) {
    return calloc((size_t)(n > 0 ? n : 1), sizeof(float));
}

/* Rank r's local piece of a tensor in `layout`. A REPLICATED tensor is one logical tensor, so
 * its data ignores r; every other layout holds independent values on each rank. */
static void gen(dt_region_layout layout, const dt_region_shape *s, int size, int r,
                uint64_t seed, float *out) {
    uint64_t sd = layout == DT_REGION_LAYOUT_REPLICATED ? seed : seed * 1000 + 1 + (uint64_t)r;
    dt_test_fill(out, dt_region_count(layout, s, size), sd, 1.0f);
}

/* The inner product on one side of an op, taken over the whole (logical) tensor:
 *   REPLICATED: every rank holds the same single tensor, so the local dot IS the inner
 *               product; summing over ranks would count it p times.
 *   PER_RANK:   the p full-size copies are p independent tensors (the space is their direct
 *               sum), so the inner product is the sum over ranks of the local dots.
 *   ROWS/COLS/HEADS: the shards partition one tensor, so again the sum of the local dots.
 * With these, copy's adjoint is an all-reduce (x replicated, y per rank), gather's is keep own
 * slice (x sharded, y replicated), and so on: the identity checks each pairing's bookkeeping. */
static double inner(dt_comm *c, dt_region_layout layout, const float *a, const float *b,
                    int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        d += (double)a[i] * b[i];
    if (layout != DT_REGION_LAYOUT_REPLICATED && dt_comm_allreduce_f64(c, &d, 1) != DT_OK)
        return 0.0 / 0.0; /* NaN fails the comparison */
    return d;
}

/* Expected forward output on rank `me`, from every rank's input regenerated here. */
static void reference(dt_region_kind k, const dt_region_shape *s, int p, int me, uint64_t seed,
                      float *y) {
    const dt_region_op *op = dt_region_op_get(k);
    int64_t n_in = dt_region_count(op->in, s, p), n_out = dt_region_count(op->out, s, p);
    int64_t R = s->rows, C = s->cols, tl = R / p, cl = C / p;
    float *x = fbuf(n_in);
    memset(y, 0, (size_t)n_out * sizeof *y);
    for (int r = 0; r < p; r++) {
        gen(op->in, s, p, r, seed, x);
        switch (k) {
        case DT_REGION_KIND_COPY:
            if (r == me)
                memcpy(y, x, (size_t)n_out * sizeof *y);
            break;
        case DT_REGION_KIND_REDUCE:
            for (int64_t i = 0; i < n_out; i++)
                y[i] += x[i];
            break;
        case DT_REGION_KIND_SCATTER:
            if (r == me)
                for (int64_t i = 0; i < R; i++)
                    memcpy(y + i * cl, x + i * C + me * cl, (size_t)cl * sizeof *y);
            break;
        case DT_REGION_KIND_GATHER:
            for (int64_t i = 0; i < R; i++)
                memcpy(y + i * C + r * cl, x + i * cl, (size_t)cl * sizeof *y);
            break;
        case DT_REGION_KIND_SEQ_GATHER:
        case DT_REGION_KIND_SEQ_GATHER_SPLIT:
            memcpy(y + r * tl * C, x, (size_t)(tl * C) * sizeof *y);
            break;
        case DT_REGION_KIND_SEQ_REDUCE_SCATTER:
            for (int64_t i = 0; i < n_out; i++)
                y[i] += x[me * tl * C + i];
            break;
        case DT_REGION_KIND_SEQ_SPLIT:
            if (r == me)
                memcpy(y, x + me * tl * C, (size_t)(tl * C) * sizeof *y);
            break;
        case DT_REGION_KIND_ALL_TO_ALL: {
            /* y[t, h, :] (t over all T, h over my H/p heads) = rank t/tl's x[t % tl, me*hl+h, :] */
            int64_t H = s->heads, hs = C / H, hl = H / p;
            for (int64_t t = r * tl; t < (r + 1) * tl; t++)
                for (int64_t h = 0; h < hl; h++)
                    memcpy(y + (t * hl + h) * hs, x + ((t - r * tl) * H + me * hl + h) * hs,
                           (size_t)hs * sizeof *y);
            break;
        }
        default:
            break;
        }
    }
    free(x);
}

static void test_op(dt_comm *c, dt_region_kind k) {
    const dt_region_op *op = dt_region_op_get(k);
    int p = c->size;
    /* rows and heads divisible by p; cols = heads * 3 */
    dt_region_shape s = {.rows = 3 * p, .cols = 6 * p, .heads = 2 * p};
    int64_t n_in = dt_region_count(op->in, &s, p), n_out = dt_region_count(op->out, &s, p);
    int64_t n_work = dt_region_work_count(k, &s, p);
    int64_t cap = 32 * (int64_t)p * p + 64; /* room for the bad shapes below (never touched) */
    float *x = fbuf(cap), *y = fbuf(cap), *ref = fbuf(n_out), *dy = fbuf(cap);
    float *dx = fbuf(cap), *dx2 = fbuf(n_in), *work = n_work ? fbuf(n_work) : NULL;

    /* (1) forward against the reference */
    gen(op->in, &s, p, c->rank, 11, x);
    DT_CHECK_OK(op->forward(c, &s, x, y, work));
    reference(k, &s, p, c->rank, 11, ref);
    double err = dt_test_max_rel(y, ref, n_out, 1e-6);
    DT_CHECK(err <= 1e-5, "%s np%d rank %d forward: max rel err %g", op->name, p, c->rank, err);

    /* (2) adjoint: <A x, y> over the output side equals <x, A^T y> over the input side.
     * dy must be generated in the output layout (replicated where y is replicated). */
    gen(op->in, &s, p, c->rank, 21, x);
    gen(op->out, &s, p, c->rank, 22, dy);
    DT_CHECK_OK(op->forward(c, &s, x, y, work));
    memset(dx, 0, (size_t)n_in * sizeof *dx);
    DT_CHECK_OK(op->backward(c, &s, dy, dx, work));
    double lhs = inner(c, op->out, y, dy, n_out), rhs = inner(c, op->in, x, dx, n_in);
    DT_CHECK(fabs(lhs - rhs) <= 1e-5 * fabs(rhs) + 1e-9, "%s np%d rank %d adjoint: %.9g vs %.9g",
             op->name, p, c->rank, lhs, rhs);

    /* (3) backward accumulates: a second call on top of the first gives twice one call */
    memcpy(dx2, dx, (size_t)n_in * sizeof *dx);
    DT_CHECK_OK(op->backward(c, &s, dy, dx, work));
    for (int64_t i = 0; i < n_in; i++)
        dx2[i] *= 2;
    err = dt_test_max_rel(dx, dx2, n_in, 1e-6);
    DT_CHECK(err <= 1e-6, "%s np%d rank %d backward does not accumulate: %g", op->name, p,
             c->rank, err);

    /* (4) shape errors, same on every rank (so no rank waits in a collective) */
    dt_region_shape neg = {.rows = -2, .cols = 6 * p, .heads = 2 * p};
    DT_CHECK(op->forward(c, &neg, x, y, work) == DT_ERR_ARG, "%s negative rows accepted",
             op->name);
    DT_CHECK(op->backward(c, &neg, dy, dx, work) == DT_ERR_ARG, "%s negative rows accepted",
             op->name);
    bool by_rows = op->in == DT_REGION_LAYOUT_ROWS || op->out == DT_REGION_LAYOUT_ROWS;
    bool by_cols = op->in == DT_REGION_LAYOUT_COLS || op->out == DT_REGION_LAYOUT_COLS;
    if (p > 1 && (by_rows || by_cols)) {
        dt_region_shape bad = s;
        long long n_bad = by_rows ? (bad.rows = 3 * p + 1) : (bad.cols = 6 * p + 1);
        char want[96];
        snprintf(want, sizeof want, "%lld %s not divisible by %d ranks", n_bad,
                 by_rows ? "rows" : "cols", p);
        dt_status st = op->forward(c, &bad, x, y, work);
        DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), want) &&
                     strstr(dt_err_msg(), op->name),
                 "%s forward bad shape: %s '%s' (want '%s')", op->name, dt_status_str(st),
                 dt_err_msg(), want);
        st = op->backward(c, &bad, dy, dx, work);
        DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), want),
                 "%s backward bad shape: %s '%s'", op->name, dt_status_str(st), dt_err_msg());
    }
    if (k == DT_REGION_KIND_ALL_TO_ALL) {
        dt_region_shape bad = {.rows = 3 * p, .cols = 3 * (2 * p + 1), .heads = 2 * p + 1};
        if (p > 1) { /* at p = 1 every head count divides */
            dt_status st = op->forward(c, &bad, x, y, work);
            DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "heads not divisible"),
                     "all_to_all %d heads on %d ranks: %s '%s'", bad.heads, p,
                     dt_status_str(st), dt_err_msg());
        }
        bad.cols = 7; /* not heads x head_size for any p */
        dt_status st = op->backward(c, &bad, dy, dx, work);
        DT_CHECK(st == DT_ERR_ARG, "all_to_all cols 7 with %d heads: %s", bad.heads,
                 dt_status_str(st));
    }
    if (n_work > 0) {
        dt_status st = op->forward(c, &s, x, y, NULL);
        dt_status st2 = op->backward(c, &s, dy, dx, NULL);
        DT_CHECK(st == DT_ERR_ARG || st2 == DT_ERR_ARG, "%s accepted a NULL work buffer",
                 op->name);
    }
    free(x);
    free(y);
    free(ref);
    free(dy);
    free(dx);
    free(dx2);
    free(work);
}

/* The "other work" run between begin and end: a small matmul, polling the pending ops after
 * each row as a real dW loop would. out [M, M] = a [M, M] b [M, M]. */
enum { M = 24 };
static dt_status matmul_polling(dt_comm *c, const float *a, const float *b, float *out,
                                dt_region_pending **pend, int n_pend) {
    dt_status st = DT_OK;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < M; j++) {
            float acc = 0;
            for (int k = 0; k < M; k++)
                acc += a[i * M + k] * b[k * M + j];
            out[i * M + j] = acc;
        }
        for (int q = 0; q < n_pend && st == DT_OK; q++) {
            bool done = false;
            st = dt_region_backward_test(c, pend[q], &done);
        }
    }
    return st;
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Split backward of op k: begin + other work + end gives the blocking result bit for bit,
 * accumulates onto what dx held, leaves dy as documented, and works with two ops pending. */
static void test_split(dt_comm *c, dt_region_kind k) {
    const dt_region_op *op = dt_region_op_get(k);
    int p = c->size, me = c->rank;
    dt_region_shape s = {.rows = 3 * p, .cols = 6 * p, .heads = 2 * p};
    int64_t n_in = dt_region_count(op->in, &s, p), n_out = dt_region_count(op->out, &s, p);
    int64_t n_work = dt_region_work_count(k, &s, p), n_bw = dt_region_backward_work_count(k, &s, p);

    /* table bookkeeping: what begin needs fits in what the blocking form needs (plus the staged
     * copy of dy where it reduces in place), and only ops that communicate need scratch */
    DT_CHECK(n_work >= n_bw + (op->backward_in_place ? n_out : 0),
             "%s: work %lld < backward work %lld (+ staged dy)", op->name, (long long)n_work,
             (long long)n_bw);
    DT_CHECK(op->backward_comm || (n_bw == 0 && !op->backward_in_place),
             "%s: backward moves no data but needs work or runs in place", op->name);

    float *dy = fbuf(n_out), *dy2 = fbuf(n_out), *dy_keep = fbuf(n_out), *dy2_keep = fbuf(n_out);
    float *dx0 = fbuf(n_in), *ref = fbuf(n_in), *ref2 = fbuf(n_in), *at_dy = fbuf(n_in);
    float *dx = fbuf(n_in), *dx2 = fbuf(n_in);
    float *work = fbuf(n_work), *w1 = n_bw ? fbuf(n_bw) : NULL, *w2 = n_bw ? fbuf(n_bw) : NULL;
    float *a = fbuf(M * M), *b = fbuf(M * M), *mm = fbuf(M * M), *mm_ref = fbuf(M * M);
    gen(op->out, &s, p, me, 31, dy_keep);
    gen(op->out, &s, p, me, 32, dy2_keep);
    gen(op->in, &s, p, me, 33, dx0); /* nonzero: end must accumulate onto it */
    dt_test_fill(a, M * M, 34, 1.0f);
    dt_test_fill(b, M * M, 35, 1.0f);
    DT_CHECK_OK(matmul_polling(c, a, b, mm_ref, NULL, 0));

    /* blocking references: dx0 + A^T dy, dx0 + A^T dy2, and A^T dy alone */
    memcpy(ref, dx0, (size_t)n_in * sizeof *ref);
    memcpy(ref2, dx0, (size_t)n_in * sizeof *ref2);
    DT_CHECK_OK(op->backward(c, &s, dy_keep, ref, work));
    DT_CHECK_OK(op->backward(c, &s, dy2_keep, ref2, work));
    DT_CHECK_OK(op->backward(c, &s, dy_keep, at_dy, work));

    /* (1) one op pending while a matmul runs */
    memcpy(dy, dy_keep, (size_t)n_out * sizeof *dy);
    memcpy(dx, dx0, (size_t)n_in * sizeof *dx);
    dt_region_pending pa = {0};
    dt_region_pending *pend[2] = {&pa, NULL};
    DT_CHECK_OK(dt_region_backward_begin(k, c, &s, dy, dx, w1, &pa));
    DT_CHECK(pa.active, "%s: begin left p inactive", op->name);
    DT_CHECK_OK(matmul_polling(c, a, b, mm, pend, 1));
    DT_CHECK_OK(dt_region_backward_end(c, &pa));
    DT_CHECK(same_bits(dx, ref, n_in), "%s np%d rank %d: begin/end differs from blocking", op->name,
             p, me);
    DT_CHECK(same_bits(mm, mm_ref, M * M), "%s: work between begin and end changed", op->name);
    if (op->backward_in_place) /* dy now holds the reduced dy, which is A^T dy (copy) */
        DT_CHECK(n_in == n_out && same_bits(dy, at_dy, n_out),
                 "%s np%d rank %d: dy does not hold the reduced dy", op->name, p, me);
    else
        DT_CHECK(same_bits(dy, dy_keep, n_out), "%s np%d rank %d: begin/end wrote dy", op->name, p,
                 me);
    DT_CHECK(!pa.active && !pa.req.active && pa.dx == NULL, "%s: end did not clear p", op->name);
    DT_CHECK_OK(dt_region_backward_end(c, &pa)); /* second end: no-op */
    DT_CHECK(same_bits(dx, ref, n_in), "%s: a second end changed dx", op->name);

    /* (2) two ops pending at once, ended in reverse order; a begin on a pending p is refused
     * and leaves it pending */
    memcpy(dy, dy_keep, (size_t)n_out * sizeof *dy);
    memcpy(dy2, dy2_keep, (size_t)n_out * sizeof *dy2);
    memcpy(dx, dx0, (size_t)n_in * sizeof *dx);
    memcpy(dx2, dx0, (size_t)n_in * sizeof *dx2);
    dt_region_pending pb = {0};
    pend[1] = &pb;
    DT_CHECK_OK(dt_region_backward_begin(k, c, &s, dy, dx, w1, &pa));
    DT_CHECK_OK(dt_region_backward_begin(k, c, &s, dy2, dx2, w2, &pb));
    DT_CHECK(dt_region_backward_begin(k, c, &s, dy2, dx2, w2, &pb) == DT_ERR_ARG,
             "%s: begin on a pending p accepted", op->name);
    DT_CHECK(pb.active, "%s: refused begin cleared the pending p", op->name);
    DT_CHECK_OK(matmul_polling(c, a, b, mm, pend, 2));
    DT_CHECK_OK(dt_region_backward_end(c, &pb));
    DT_CHECK_OK(dt_region_backward_end(c, &pa));
    DT_CHECK(same_bits(dx, ref, n_in) && same_bits(dx2, ref2, n_in),
             "%s np%d rank %d: two pending ops differ from blocking", op->name, p, me);

    /* (3) errors: nothing posted, p stays inactive, end is a no-op */
    dt_region_shape neg = {.rows = -2, .cols = 6 * p, .heads = 2 * p};
    pa = (dt_region_pending){0};
    DT_CHECK(dt_region_backward_begin(k, c, &neg, dy, dx, w1, &pa) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), op->name) && strstr(dt_err_msg(), "backward"),
             "%s: begin with negative rows: '%s'", op->name, dt_err_msg());
    DT_CHECK(!pa.active, "%s: failed begin left p active", op->name);
    DT_CHECK_OK(dt_region_backward_end(c, &pa));
    if (n_bw > 0)
        DT_CHECK(dt_region_backward_begin(k, c, &s, dy, dx, NULL, &pa) == DT_ERR_ARG && !pa.active,
                 "%s: begin accepted a NULL work buffer", op->name);
    DT_CHECK(dt_region_backward_begin(DT_REGION_KIND_COUNT, c, &s, dy, dx, w1, &pa) == DT_ERR_ARG,
             "out-of-range kind accepted by begin");

    float *bufs[] = {dy,  dy2,  dy_keep, dy2_keep, dx0, ref, ref2, at_dy, dx,
                     dx2, work, w1,      w2,       a,   b,   mm,   mm_ref};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
}

static void test_table(void) {
    for (int k = 0; k < DT_REGION_KIND_COUNT; k++) {
        const dt_region_op *op = dt_region_op_get((dt_region_kind)k);
        DT_CHECK(op && op->name && op->forward && op->backward, "table entry %d incomplete", k);
    }
    DT_CHECK(dt_region_op_get(DT_REGION_KIND_COUNT) == NULL, "out-of-range kind accepted");
}

static void test_all(dt_comm *c) {
    for (int k = 0; k < DT_REGION_KIND_COUNT; k++) {
        test_op(c, (dt_region_kind)k);
        test_split(c, (dt_region_kind)k);
    }
}

int main(int argc, char **argv) {
    dt_comm *w = NULL, *local = NULL;
    dt_status st = dt_dist_init(&argc, &argv, &w);
    if (st != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    DT_TEST_BEGIN(argc, argv);
    test_table();
    test_all(w);
    /* degree 1: the same calls on a one-rank comm, as a layer with tp = 1 makes them */
    DT_CHECK_OK(dt_comm_local_init("tp", &local));
    if (local)
        test_all(local);
    dt_comm_free(local);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
