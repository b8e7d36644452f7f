/* nn/lm_head with the vocabulary split over ranks, under mpirun (np 1, 2, 4), and again on a
 * size-1 local comm on each rank. A full head is generated on every rank (vocabularies of 9,
 * 37 and 50 rows: none divides by 2 or 4, and 9 at np 4 leaves the last rank nothing but
 * padding); each rank takes rows [r V, (r + 1) V) with V = ceil(vocab / p), zero-padded.
 * Against a double-precision reference computed here: the losses on every rank (and
 * bit-identical across ranks), the sum over ranks of the dx partials, each rank's dW slice
 * (padding rows exactly 0, on a pre-filled gradient: backward accumulates), the loss-only path
 * and the local logits; with several chunks and with one, in fp32 and in bf16 (bf16
 * tolerance), and exactly one all-gather per chunk. Rank 0 prints the "N passed, M failed"
 * line summed over ranks; every rank exits nonzero on a failure. Named mpi_test_*.c so the
 * tests/ glob skips it (tests.cmake registers it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "harness.h"
#include "kernels/cast.h"
#include "nn/lm_head.h"

enum { N = 10, C = 16 };

typedef struct head_ref {
    int vocab;
    float *w, *x, *dw0; /* [vocab, C], [N, C], [vocab, C] gradient pre-fill */
    int32_t tg[N];
    double loss[N], *dx, *dw, *z; /* [N], [N, C], [vocab, C] (without the pre-fill), [N, vocab] */
} head_ref;

/* The reference in double, straight from the definition, grad_scale 1. */
static void reference(head_ref *R, int vocab) {
    R->vocab = vocab;
    R->w = malloc(sizeof(float) * vocab * C);
    R->x = malloc(sizeof(float) * N * C);
    R->dw0 = malloc(sizeof(float) * vocab * C);
    R->dx = calloc(N * C, sizeof(double));
    R->dw = calloc((size_t)vocab * C, sizeof(double));
    R->z = calloc((size_t)N * vocab, sizeof(double));
    dt_test_fill(R->w, (int64_t)vocab * C, 100 + vocab, 0.5f);
    dt_test_fill(R->x, N * C, 200 + vocab, 1.0f);
    dt_test_fill(R->dw0, (int64_t)vocab * C, 300 + vocab, 1.0f);
    for (int i = 0; i < N; i++) /* row 3 ignored; rows 0 and 1 hit the last real token */
        R->tg[i] = i == 3 ? -1 : i < 2 ? vocab - 1 : (int32_t)((i * 7919u) % (unsigned)vocab);
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < vocab; v++) {
            double z = 0;
            for (int k = 0; k < C; k++)
                z += (double)R->x[i * C + k] * R->w[v * C + k];
            R->z[i * vocab + v] = z;
            mx = fmax(mx, z);
        }
        if (R->tg[i] < 0) {
            R->loss[i] = 0;
            continue;
        }
        for (int v = 0; v < vocab; v++)
            sum += exp(R->z[i * vocab + v] - mx);
        R->loss[i] = mx + log(sum) - R->z[i * vocab + R->tg[i]];
        for (int v = 0; v < vocab; v++) {
            double g = exp(R->z[i * vocab + v] - mx) / sum - (v == R->tg[i]);
            for (int k = 0; k < C; k++) {
                R->dx[i * C + k] += g * R->w[v * C + k];
                R->dw[v * C + k] += g * R->x[i * C + k];
            }
        }
    }
}

static void reference_free(head_ref *R) {
    free(R->w), free(R->x), free(R->dw0), free(R->dx), free(R->dw), free(R->z);
}

/* max |got - want| / max |want|: a normwise error, so elements that cancel to ~0 do not
 * dominate (a sharding bug moves whole terms and shows at O(0.1..1)) */
static double err(const float *got, const double *want, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        d = e > d || isnan(e) ? (isnan(e) ? INFINITY : e) : d;
        m = fmax(m, fabs(want[i]));
    }
    return d / (m > 0 ? m : 1);
}

static void test_head(dt_gemm *gemm, dt_comm *c, const head_ref *R, int chunk, dt_dtype mm) {
    const int p = c->size, r = c->rank, vocab = R->vocab, V = (vocab + p - 1) / p, v0 = r * V;
    const bool bf16 = mm == DT_BF16;
    const double tol = bf16 ? 2e-2 : 1e-5;
    dt_nn_ctx ctx = {.gemm = gemm, .mm_type = mm};
    float *w = calloc((size_t)V * C, sizeof(float)), *dw = calloc((size_t)V * C, sizeof(float));
    float *dx = calloc(N * C, sizeof(float)), *lg = malloc(sizeof(float) * N * V);
    float losses[N], losses2[N], root[N];
    dt_bf16 *w_lp = malloc(sizeof(dt_bf16) * V * C), *x_lp = malloc(sizeof(dt_bf16) * N * C);
    for (int v = 0; v < V && v0 + v < vocab; v++) { /* rows past vocab stay 0: padding */
        memcpy(w + v * C, R->w + (v0 + v) * C, sizeof(float) * C);
        memcpy(dw + v * C, R->dw0 + (v0 + v) * C, sizeof(float) * C);
    }
    dt_cast_f32_to_bf16(w_lp, w, (int64_t)V * C);
    dt_lm_head h = {.C = C, .V = V, .w = w, .dw = dw, .w_lp = bf16 ? w_lp : NULL, .tp = c,
                    .vocab_first = v0, .vocab_size = vocab, .chunk = chunk};
    h.logits = malloc(sizeof(float) * chunk * V);
    h.stats = malloc(sizeof(float) * (size_t)dt_lm_head_stats_count(&h));
    const int n_chunks = (N + chunk - 1) / chunk;
    char what[96];
    snprintf(what, sizeof what, "np%d rank %d vocab %d chunk %d %s", p, r, vocab, chunk,
             bf16 ? "bf16" : "fp32");

    uint64_t ag0 = c->stats.calls[DT_COMM_ALLGATHER];
    DT_CHECK_OK(dt_lm_head_loss(&ctx, &h, R->x, x_lp, R->tg, N, 1.0f, true, losses, dx));
    uint64_t ag1 = c->stats.calls[DT_COMM_ALLGATHER];
    DT_CHECK(ag1 - ag0 == (uint64_t)n_chunks, "%s: %llu all-gathers for %d chunks", what,
             (unsigned long long)(ag1 - ag0), n_chunks);
    double el = 0;
    for (int i = 0; i < N; i++)
        el = fmax(el, fabs(losses[i] - R->loss[i]) / fmax(fabs(R->loss[i]), 1.0));
    DT_CHECK(el <= tol, "%s: loss rel err %.3g", what, el);
    DT_CHECK(losses[3] == 0.0f, "%s: ignored row loss %g", what, losses[3]);
    memcpy(root, losses, sizeof root); /* every rank holds rank 0's bits */
    DT_CHECK_OK(dt_comm_broadcast(c, root, sizeof root, 0));
    DT_CHECK(memcmp(root, losses, sizeof root) == 0, "%s: losses differ from rank 0's", what);

    /* dx partials summed over ranks (the caller's all-reduce) */
    DT_CHECK_OK(dt_comm_allreduce_f32(c, dx, N * C, NULL));
    double edx = err(dx, R->dx, N * C);
    DT_CHECK(edx <= tol, "%s: dx (summed) err %.3g", what, edx);
    /* this rank's dW slice minus its pre-fill; padding rows exactly 0 */
    double *want = calloc((size_t)V * C, sizeof(double));
    float *got = malloc(sizeof(float) * V * C);
    bool pad_zero = true;
    for (int v = 0; v < V; v++)
        for (int k = 0; k < C; k++) {
            bool real = v0 + v < vocab;
            got[v * C + k] = real ? dw[v * C + k] - R->dw0[(v0 + v) * C + k] : dw[v * C + k];
            want[v * C + k] = real ? R->dw[(v0 + v) * C + k] : 0.0;
            pad_zero = pad_zero && (real || dw[v * C + k] == 0.0f);
        }
    double edw = err(got, want, (int64_t)V * C);
    DT_CHECK(edw <= tol * 4, "%s: dW slice err %.3g", what, edw); /* minus an O(1) pre-fill */
    DT_CHECK(pad_zero, "%s: padding rows of dW are not exactly 0", what);
    if (c->rank == 0)
        printf("lm_head %s: loss %.2g dx %.2g dW %.2g\n", what, el, edx, edw);

    /* loss only: the same losses, one all-gather per chunk, no gradient written */
    memcpy(got, dw, sizeof(float) * V * C);
    DT_CHECK_OK(dt_lm_head_loss(&ctx, &h, R->x, x_lp, R->tg, N, 1.0f, false, losses2, NULL));
    DT_CHECK(memcmp(losses, losses2, sizeof losses) == 0, "%s: loss-only losses differ", what);
    DT_CHECK(memcmp(got, dw, sizeof(float) * V * C) == 0, "%s: loss-only wrote dW", what);
    DT_CHECK(c->stats.calls[DT_COMM_ALLGATHER] - ag1 == (uint64_t)n_chunks,
             "%s: loss-only all-gathers", what);

    /* dw_set: dW overwritten, bit for bit the accumulation onto zeros; dx is overwritten
     * whatever it held (both filled with garbage first) */
    float *dw_acc = calloc((size_t)V * C, sizeof(float)), *dx_acc = malloc(sizeof(float) * N * C);
    h.dw = dw_acc;
    DT_CHECK_OK(dt_lm_head_loss(&ctx, &h, R->x, x_lp, R->tg, N, 1.0f, true, losses2, dx_acc));
    dt_test_fill(dw, (int64_t)V * C, 77, 1e3f);
    dt_test_fill(dx, (int64_t)N * C, 78, 1e3f);
    h.dw = dw;
    h.dw_set = true;
    DT_CHECK_OK(dt_lm_head_loss(&ctx, &h, R->x, x_lp, R->tg, N, 1.0f, true, losses2, dx));
    h.dw_set = false;
    DT_CHECK(memcmp(dw, dw_acc, sizeof(float) * V * C) == 0, "%s: dw_set differs from "
             "accumulating onto zeros", what);
    DT_CHECK(memcmp(dx, dx_acc, sizeof(float) * N * C) == 0, "%s: dx not overwritten", what);
    free(dw_acc), free(dx_acc);

    /* local logits: this rank's columns, padding included */
    DT_CHECK_OK(dt_lm_head_logits(&ctx, &h, R->x, x_lp, N, lg));
    double *zl = calloc((size_t)N * V, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int v = 0; v < V && v0 + v < vocab; v++)
            zl[i * V + v] = R->z[i * vocab + v0 + v];
    double ez = err(lg, zl, (int64_t)N * V);
    DT_CHECK(ez <= tol, "%s: local logits err %.3g", what, ez);

    free(w), free(dw), free(dx), free(lg), free(w_lp), free(x_lp), free(want), free(got);
    free(zl), free(h.logits), free(h.stats);
}

static void test_bad_args(dt_gemm *gemm, dt_comm *c) {
    dt_nn_ctx ctx = {.gemm = gemm, .mm_type = DT_F32};
    float w[C] = {0}, x[C] = {0}, lg[4], st[64], loss;
    int32_t tg = 0;
    dt_lm_head h = {.C = C, .V = 1, .w = w, .tp = NULL, .vocab_size = 1, .chunk = 1,
                    .logits = lg, .stats = st};
    dt_status s = dt_lm_head_loss(&ctx, &h, x, NULL, &tg, 1, 1.0f, false, &loss, NULL);
    DT_CHECK(s == DT_ERR_ARG, "NULL tp accepted: %s", dt_status_str(s));
    h.tp = c;
    h.stats = NULL;
    s = dt_lm_head_loss(&ctx, &h, x, NULL, &tg, 1, 1.0f, false, &loss, NULL);
    DT_CHECK(s == DT_ERR_ARG, "NULL stats accepted: %s", dt_status_str(s));
}

int main(int argc, char **argv) {
    dt_comm *world = NULL, *local = NULL;
    dt_gemm *g = NULL;
    dt_status st = dt_dist_init(&argc, &argv, &world);
    if (st != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK_OK(dt_gemm_init(&g));
    DT_CHECK_OK(dt_comm_local_init("tp", &local));
    if (g && local) {
        const int vocabs[] = {37, 50, 9};
        for (int iv = 0; iv < 3; iv++) {
            head_ref R;
            reference(&R, vocabs[iv]);
            for (int mm = 0; mm < 2; mm++) {
                dt_dtype t = mm ? DT_BF16 : DT_F32;
                test_head(g, world, &R, 3, t); /* 4 chunks: 3, 3, 3, 1 */
                test_head(g, world, &R, N, t); /* 1 chunk */
                test_head(g, local, &R, 4, t); /* degree 1 on every rank */
            }
            reference_free(&R);
        }
        test_bad_args(g, local);
    }
    dt_comm_free(local);
    dt_gemm_free(g);
    int rc = dt_test_end_collective(world);
    dt_dist_finalize(world);
    return rc;
}
