/* nn/linear_tp under mpirun (np 1, 2, 4), and again on a size-1 local comm on each rank: the
 * MLP y = row(gelu(col(x))) with weights generated in full on every rank and sliced per rank,
 * against plain dt_linear on the full weights (fp32). Checks y, dx and each rank's slice of
 * dW1, db1, dW2 and the replicated db2, on pre-filled gradients (backward accumulates), one
 * all-reduce forward and one backward per pair, the dx = NULL path and a NULL work error.
 * Rank 0 prints the "N passed, M failed" line summed over ranks; every rank exits nonzero on
 * a failure. Named mpi_test_*.c so the tests/ glob skips it (tests.cmake registers it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "harness.h"
#include "kernels/act.h"
#include "nn/linear.h"
#include "nn/linear_tp.h"

enum { N = 8, IN = 16, HID = 32, OUT = 12 };

/* 1e-5 relative, on a floor of 0.1: values and gradient pre-fills are O(1), and a different
 * summation order (a partial sum per rank, gemm blocking on a narrower slice) moves results
 * by an ulp or two of O(1) intermediates (~1.2e-7), which is large relative to an element
 * that happens to cancel to ~0.01. A sharding bug (missing or doubled term) is O(0.1..1). */
#define TOL 1e-5
#define FLOOR 0.1

typedef struct mlp_data {
    float x[N * IN], dy[N * OUT];
    float w1[HID * IN], b1[HID], w2[OUT * HID], b2[OUT];
    /* gradient pre-fills (backward must add to them) */
    float dx0[N * IN], dw10[HID * IN], db10[HID], dw20[OUT * HID], db20[OUT];
} mlp_data;

static void gen(mlp_data *d) {
    dt_test_fill(d->x, N * IN, 1, 1.0f);
    dt_test_fill(d->dy, N * OUT, 2, 1.0f);
    dt_test_fill(d->w1, HID * IN, 3, 0.5f);
    dt_test_fill(d->b1, HID, 4, 0.5f);
    dt_test_fill(d->w2, OUT * HID, 5, 0.5f);
    dt_test_fill(d->b2, OUT, 6, 0.5f);
    dt_test_fill(d->dx0, N * IN, 7, 1.0f);
    dt_test_fill(d->dw10, HID * IN, 8, 1.0f);
    dt_test_fill(d->db10, HID, 9, 1.0f);
    dt_test_fill(d->dw20, OUT * HID, 10, 1.0f);
    dt_test_fill(d->db20, OUT, 11, 1.0f);
}

typedef struct mlp_out {
    float y[N * OUT], dx[N * IN];
    float dw1[HID * IN], db1[HID], dw2[OUT * HID], db2[OUT];
} mlp_out;

/* the single-rank reference: plain dt_linear on the full weights */
static void reference(const dt_nn_ctx *ctx, const mlp_data *d, mlp_out *o) {
    static float h[N * HID], a[N * HID], da[N * HID], dh[N * HID];
    memcpy(o->dx, d->dx0, sizeof o->dx);
    memcpy(o->dw1, d->dw10, sizeof o->dw1);
    memcpy(o->db1, d->db10, sizeof o->db1);
    memcpy(o->dw2, d->dw20, sizeof o->dw2);
    memcpy(o->db2, d->db20, sizeof o->db2);
    dt_linear l1 = {
        .in = IN, .out = HID, .w = (float *)d->w1, .b = (float *)d->b1, .dw = o->dw1, .db = o->db1};
    dt_linear l2 = {.in = HID,
                    .out = OUT,
                    .w = (float *)d->w2,
                    .b = (float *)d->b2,
                    .dw = o->dw2,
                    .db = o->db2};
    DT_CHECK_OK(dt_linear_forward(ctx, &l1, d->x, NULL, N, h));
    dt_gelu_forward(a, h, N * HID);
    DT_CHECK_OK(dt_linear_forward(ctx, &l2, a, NULL, N, o->y));
    memset(da, 0, sizeof da);
    memset(dh, 0, sizeof dh);
    DT_CHECK_OK(dt_linear_backward(ctx, &l2, a, NULL, d->dy, NULL, N, da));
    dt_gelu_backward(dh, h, da, N * HID);
    DT_CHECK_OK(dt_linear_backward(ctx, &l1, d->x, NULL, dh, NULL, N, o->dx));
}

static void check_close(const char *what, const dt_comm *c, const float *got, const float *want,
                        int64_t n) {
    double e = dt_test_max_rel(got, want, n, FLOOR);
    DT_CHECK(e <= TOL, "%s np%d rank %d: max rel err %g", what, c->size, c->rank, e);
}

/* this rank's columns [c0, c0+w) of a row-major [rows, cols] matrix, into dst [rows, w] */
static void cols(float *dst, const float *src, int rows, int cols_, int c0, int w) {
    for (int i = 0; i < rows; i++)
        memcpy(dst + i * w, src + i * cols_ + c0, (size_t)w * sizeof *dst);
}

static void test_mlp(const dt_nn_ctx *ctx, dt_comm *c, const mlp_data *d, const mlp_out *ref) {
    int p = c->size, r = c->rank, hl = HID / p, h0 = r * hl;
    /* this rank's parameter and gradient slices (gradients pre-filled from the full pre-fill) */
    float *w1 = malloc(sizeof(float) * hl * IN), *b1 = malloc(sizeof(float) * hl);
    float *dw1 = malloc(sizeof(float) * hl * IN), *db1 = malloc(sizeof(float) * hl);
    float *w2 = malloc(sizeof(float) * OUT * hl), *dw2 = malloc(sizeof(float) * OUT * hl);
    float *want = malloc(sizeof(float) * (HID * IN > OUT * HID ? HID * IN : OUT * HID));
    float b2[OUT], db2[OUT], y[N * OUT], dx[N * IN], work[N * IN];
    float *h = malloc(sizeof(float) * N * hl), *a = malloc(sizeof(float) * N * hl);
    float *da = calloc((size_t)N * hl, sizeof(float)), *dh = calloc((size_t)N * hl, sizeof(float));
    memcpy(w1, d->w1 + h0 * IN, sizeof(float) * hl * IN); /* rows h0.. of W1 [HID, IN] */
    memcpy(b1, d->b1 + h0, sizeof(float) * hl);
    memcpy(dw1, d->dw10 + h0 * IN, sizeof(float) * hl * IN);
    memcpy(db1, d->db10 + h0, sizeof(float) * hl);
    cols(w2, d->w2, OUT, HID, h0, hl); /* columns h0.. of W2 [OUT, HID] */
    cols(dw2, d->dw20, OUT, HID, h0, hl);
    memcpy(b2, d->b2, sizeof b2);
    memcpy(db2, d->db20, sizeof db2);
    memcpy(dx, d->dx0, sizeof dx);
    dt_linear l1 = {.in = IN, .out = hl, .w = w1, .b = b1, .dw = dw1, .db = db1};
    dt_linear l2 = {.in = hl, .out = OUT, .w = w2, .b = b2, .dw = dw2, .db = db2};

    uint64_t ar0 = c->stats.calls[DT_COMM_ALLREDUCE];
    DT_CHECK_OK(dt_linear_col_forward(ctx, c, &l1, d->x, NULL, N, h));
    dt_gelu_forward(a, h, (int64_t)N * hl);
    DT_CHECK_OK(dt_linear_row_forward(ctx, c, &l2, a, NULL, N, y));
    uint64_t ar1 = c->stats.calls[DT_COMM_ALLREDUCE];
    DT_CHECK_OK(dt_linear_row_backward(ctx, c, &l2, a, NULL, d->dy, NULL, N, da));
    dt_gelu_backward(dh, h, da, (int64_t)N * hl);
    DT_CHECK_OK(dt_linear_col_backward(ctx, c, &l1, d->x, NULL, dh, NULL, N, dx, work));
    uint64_t ar2 = c->stats.calls[DT_COMM_ALLREDUCE];
    DT_CHECK(ar1 - ar0 == 1 && ar2 - ar1 == 1,
             "np%d: %llu all-reduces forward, %llu backward (want 1 and 1)", p,
             (unsigned long long)(ar1 - ar0), (unsigned long long)(ar2 - ar1));

    check_close("y", c, y, ref->y, N * OUT);
    check_close("dx", c, dx, ref->dx, N * IN);
    check_close("dW1 slice", c, dw1, ref->dw1 + h0 * IN, (int64_t)hl * IN);
    check_close("db1 slice", c, db1, ref->db1 + h0, hl);
    cols(want, ref->dw2, OUT, HID, h0, hl);
    check_close("dW2 slice", c, dw2, want, (int64_t)OUT * hl);
    check_close("db2 (replicated)", c, db2, ref->db2, OUT);

    /* dx = NULL: no collective, dW1 and db1 still accumulate (a second dose of the same) */
    memcpy(want, dw1, sizeof(float) * hl * IN);
    for (int i = 0; i < hl * IN; i++)
        want[i] += ref->dw1[h0 * IN + i] - d->dw10[h0 * IN + i];
    DT_CHECK_OK(dt_linear_col_backward(ctx, c, &l1, d->x, NULL, dh, NULL, N, NULL, NULL));
    check_close("dW1 slice after dx=NULL backward", c, dw1, want, (int64_t)hl * IN);
    DT_CHECK(c->stats.calls[DT_COMM_ALLREDUCE] == ar2, "np%d: dx=NULL made a collective", p);
    /* a dx with no work is refused on every rank, before any collective */
    dt_status st = dt_linear_col_backward(ctx, c, &l1, d->x, NULL, dh, NULL, N, dx, NULL);
    DT_CHECK(st == DT_ERR_ARG, "NULL work accepted: %s", dt_status_str(st));

    free(w1), free(b1), free(dw1), free(db1), free(w2), free(dw2), free(want);
    free(h), free(a), free(da), free(dh);
}

int main(int argc, char **argv) {
    dt_comm *w = NULL, *local = NULL;
    dt_gemm *g = NULL;
    dt_status st = dt_dist_init(&argc, &argv, &w);
    if (st != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK_OK(dt_gemm_init(&g));
    if (g) {
        static mlp_data d;
        static mlp_out ref;
        dt_nn_ctx ctx = {.gemm = g, .mm_type = DT_F32};
        gen(&d);
        reference(&ctx, &d, &ref);
        if (HID % w->size == 0)
            test_mlp(&ctx, w, &d, &ref);
        else
            DT_CHECK(false, "hidden %d not divisible by %d ranks", HID, w->size);
        /* degree 1: the same calls on a one-rank comm */
        DT_CHECK_OK(dt_comm_local_init("tp", &local));
        if (local)
            test_mlp(&ctx, local, &d, &ref);
        dt_comm_free(local);
    }
    dt_gemm_free(g);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
