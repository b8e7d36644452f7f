/* Tests for kernels/norm.h: LayerNorm and RMSNorm forward/backward against their _ref twins
 * (NMSE), against a double-precision forward written here, against central finite differences
 * of sum(dy * y) in double, the += contract, and bit-identical results for 1 and 3 threads. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/cast.h"
#include "kernels/norm.h"

enum { LN, RMS };

static void fwd_double(int kind, double *y, const double *x, const double *w, const double *b,
                       int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (int64_t)n * C;
        double mu = 0, var = 0;
        if (kind == LN) {
            for (int i = 0; i < C; i++)
                mu += xr[i];
            mu /= C;
        }
        for (int i = 0; i < C; i++)
            var += (xr[i] - mu) * (xr[i] - mu);
        double rs = 1 / sqrt(var / C + eps);
        for (int i = 0; i < C; i++)
            y[(int64_t)n * C + i] = (xr[i] - mu) * rs * w[i] + (kind == LN ? b[i] : 0);
    }
}

static double *widen(const float *x, int64_t n) {
    double *d = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static double loss(int kind, const double *dy, const double *x, const double *w, const double *b,
                   int N, int C, double eps, double *ytmp) {
    fwd_double(kind, ytmp, x, w, b, N, C, eps);
    double s = 0;
    for (int64_t i = 0; i < (int64_t)N * C; i++)
        s += dy[i] * ytmp[i];
    return s;
}

/* d loss / d p[i] by central differences, for every element of p (which aliases x, w or b). */
static void fd_grad(int kind, double *grad, double *p, int64_t np, const double *dy,
                    const double *x, const double *w, const double *b, int N, int C, double eps) {
    double *ytmp = malloc(sizeof(double) * N * C);
    for (int64_t i = 0; i < np; i++) {
        double keep = p[i], h = 1e-5 * fmax(1.0, fabs(keep));
        p[i] = keep + h;
        double lp = loss(kind, dy, x, w, b, N, C, eps, ytmp);
        p[i] = keep - h;
        double lm = loss(kind, dy, x, w, b, N, C, eps, ytmp);
        p[i] = keep;
        grad[i] = (lp - lm) / (2 * h);
    }
    free(ytmp);
}

static void run_fwd(int kind, bool ref, float *y, float *mean, float *rstd, const float *x,
                    const float *w, const float *b, int N, int C, float eps) {
    if (kind == LN)
        (ref ? dt_layernorm_forward_ref : dt_layernorm_forward)(y, mean, rstd, x, w, b, N, C,
                                                                 eps);
    else
        (ref ? dt_rmsnorm_forward_ref : dt_rmsnorm_forward)(y, rstd, x, w, N, C, eps);
}

static void run_bwd(int kind, bool ref, float *dx, float *dw, float *db, const float *dy,
                    const float *x, const float *w, const float *mean, const float *rstd, int N,
                    int C) {
    if (kind == LN)
        (ref ? dt_layernorm_backward_ref : dt_layernorm_backward)(dx, dw, db, dy, x, w, mean,
                                                                   rstd, N, C);
    else
        (ref ? dt_rmsnorm_backward_ref : dt_rmsnorm_backward)(dx, dw, dy, x, w, rstd, N, C);
}

static float *alloc_fill(int64_t n, uint64_t seed, float scale, float offset) {
    float *p = malloc(sizeof(float) * n);
    dt_test_fill(p, n, seed, scale);
    for (int64_t i = 0; i < n; i++)
        p[i] += offset;
    return p;
}

static float *copy(const float *p, int64_t n) {
    float *q = malloc(sizeof(float) * n);
    memcpy(q, p, sizeof(float) * n);
    return q;
}

static void check(int kind, int N, int C, uint64_t seed) {
    const char *name = kind == LN ? "layernorm" : "rmsnorm";
    float eps = 1e-5f;
    int64_t NC = (int64_t)N * C;
    float *x = alloc_fill(NC, seed, 2.0f, 0.5f), *w = alloc_fill(C, seed + 1, 0.5f, 1.0f);
    float *b = alloc_fill(C, seed + 2, 0.5f, 0.0f), *dy = alloc_fill(NC, seed + 3, 1.0f, 0.0f);
    float *y = malloc(sizeof(float) * NC), *y_r = malloc(sizeof(float) * NC);
    float *mean = calloc(N, sizeof(float)), *mean_r = calloc(N, sizeof(float));
    float *rstd = malloc(sizeof(float) * N), *rstd_r = malloc(sizeof(float) * N);
    run_fwd(kind, false, y, mean, rstd, x, w, b, N, C, eps);
    run_fwd(kind, true, y_r, mean_r, rstd_r, x, w, b, N, C, eps);
    double tol = 1e-11;
    DT_CHECK(dt_test_nmse(y, y_r, NC) < tol && dt_test_nmse(rstd, rstd_r, N) < tol &&
                 dt_test_nmse(mean, mean_r, N) < tol,
             "%s fwd %dx%d vs ref: nmse y %.3g rstd %.3g mean %.3g", name, N, C,
             dt_test_nmse(y, y_r, NC), dt_test_nmse(rstd, rstd_r, N),
             dt_test_nmse(mean, mean_r, N));
    double *xd = widen(x, NC), *wd = widen(w, C), *bd = widen(b, C), *dyd = widen(dy, NC);
    double *yd = malloc(sizeof(double) * NC);
    fwd_double(kind, yd, xd, wd, bd, N, C, eps);
    float *yf = malloc(sizeof(float) * NC);
    for (int64_t i = 0; i < NC; i++)
        yf[i] = (float)yd[i];
    DT_CHECK(dt_test_nmse(y, yf, NC) < tol, "%s fwd %dx%d vs double: nmse %.3g", name, N, C,
             dt_test_nmse(y, yf, NC));

    /* backward accumulates onto whatever is there */
    float *dx0 = alloc_fill(NC, seed + 4, 1.0f, 0), *dw0 = alloc_fill(C, seed + 5, 1.0f, 0);
    float *db0 = alloc_fill(C, seed + 6, 1.0f, 0);
    float *dx = copy(dx0, NC), *dw = copy(dw0, C), *db = copy(db0, C);
    float *dx_r = copy(dx0, NC), *dw_r = copy(dw0, C), *db_r = copy(db0, C);
    run_bwd(kind, false, dx, dw, db, dy, x, w, mean, rstd, N, C);
    run_bwd(kind, true, dx_r, dw_r, db_r, dy, x, w, mean, rstd, N, C);
    DT_CHECK(dt_test_nmse(dx, dx_r, NC) < tol && dt_test_nmse(dw, dw_r, C) < tol &&
                 dt_test_nmse(db, db_r, C) < tol,
             "%s bwd %dx%d vs ref: nmse dx %.3g dw %.3g db %.3g", name, N, C,
             dt_test_nmse(dx, dx_r, NC), dt_test_nmse(dw, dw_r, C), dt_test_nmse(db, db_r, C));

    /* the same call on 1 and 3 threads gives the same bits */
    int nt = omp_get_max_threads();
    for (int t = 1; t <= 3; t += 2) {
        omp_set_num_threads(t);
        float *dx_t = copy(dx0, NC), *dw_t = copy(dw0, C), *db_t = copy(db0, C);
        float *y_t = malloc(sizeof(float) * NC);
        run_fwd(kind, false, y_t, mean_r, rstd_r, x, w, b, N, C, eps);
        run_bwd(kind, false, dx_t, dw_t, db_t, dy, x, w, mean, rstd, N, C);
        DT_CHECK(!memcmp(y_t, y, sizeof(float) * NC) && !memcmp(dx_t, dx, sizeof(float) * NC) &&
                     !memcmp(dw_t, dw, sizeof(float) * C) && !memcmp(db_t, db, sizeof(float) * C),
                 "%s %dx%d: results differ with %d threads", name, N, C, t);
        free(dx_t), free(dw_t), free(db_t), free(y_t);
    }
    omp_set_num_threads(nt);

    /* finite differences of sum(dy*y) in double, on small problems */
    if (NC <= 4096) {
        double *gx = malloc(sizeof(double) * NC), *gw = malloc(sizeof(double) * C);
        double *gb = malloc(sizeof(double) * C);
        fd_grad(kind, gx, xd, NC, dyd, xd, wd, bd, N, C, eps);
        fd_grad(kind, gw, wd, C, dyd, xd, wd, bd, N, C, eps);
        fd_grad(kind, gb, bd, C, dyd, xd, wd, bd, N, C, eps);
        float *fx = malloc(sizeof(float) * NC), *fw = malloc(sizeof(float) * C);
        float *fb = malloc(sizeof(float) * C), *ax = malloc(sizeof(float) * NC);
        float *aw = malloc(sizeof(float) * C), *ab = malloc(sizeof(float) * C);
        for (int64_t i = 0; i < NC; i++)
            fx[i] = (float)gx[i], ax[i] = dx[i] - dx0[i];
        for (int i = 0; i < C; i++) {
            fw[i] = (float)gw[i], aw[i] = dw[i] - dw0[i];
            fb[i] = (float)gb[i], ab[i] = db[i] - db0[i];
        }
        double ex = dt_test_nmse(ax, fx, NC), ew = dt_test_nmse(aw, fw, C);
        double eb = kind == LN ? dt_test_nmse(ab, fb, C) : 0;
        DT_CHECK(ex < 1e-8 && ew < 1e-8 && eb < 1e-8,
                 "%s %dx%d vs finite differences: nmse dx %.3g dw %.3g db %.3g", name, N, C, ex,
                 ew, eb);
        free(gx), free(gw), free(gb), free(fx), free(fw), free(fb), free(ax), free(aw),
            free(ab);
    }
    free(x), free(w), free(b), free(dy), free(y), free(y_r), free(mean), free(mean_r);
    free(rstd), free(rstd_r), free(xd), free(wd), free(bd), free(dyd), free(yd), free(yf);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db), free(dx_r), free(dw_r),
        free(db_r);
}

static void perf(int kind, int N, int C) {
    int64_t NC = (int64_t)N * C;
    float *x = alloc_fill(NC, 1, 1, 0), *w = alloc_fill(C, 2, 1, 1), *b = alloc_fill(C, 3, 1, 0);
    float *y = malloc(sizeof(float) * NC), *dx = calloc(NC, sizeof(float));
    float *dw = calloc(C, sizeof(float)), *db = calloc(C, sizeof(float));
    float *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    int reps = 10;
    run_fwd(kind, false, y, mean, rstd, x, w, b, N, C, 1e-5f); /* warm-up: pages, threads */
    run_bwd(kind, false, dx, dw, db, x, x, w, mean, rstd, N, C);
    double t0 = dt_test_seconds();
    for (int r = 0; r < reps; r++)
        run_fwd(kind, false, y, mean, rstd, x, w, b, N, C, 1e-5f);
    double t1 = dt_test_seconds();
    for (int r = 0; r < reps; r++)
        run_bwd(kind, false, dx, dw, db, x, x, w, mean, rstd, N, C);
    double t2 = dt_test_seconds();
    printf("perf %s %dx%d: fwd %.2f ms (%.1f GB/s) bwd %.2f ms (%.1f GB/s)\n",
           kind == LN ? "layernorm" : "rmsnorm", N, C, (t1 - t0) / reps * 1e3,
           8.0 * NC * reps / (t1 - t0) / 1e9, (t2 - t1) / reps * 1e3,
           20.0 * NC * reps / (t2 - t1) / 1e9);
    free(x), free(w), free(b), free(y), free(dx), free(dw), free(db), free(mean), free(rstd);
}

/* The bf16-output forwards: the fp32 forward's values rounded to bf16, bit for bit, and the
 * same statistics. */
static void check_bf16(int kind, int N, int C, uint64_t seed) {
    int64_t n = (int64_t)N * C;
    float *x = alloc_fill(n, seed, 2.0f, 0.5f), *w = alloc_fill(C, seed + 1, 1.0f, 1.0f);
    float *b = alloc_fill(C, seed + 2, 0.5f, 0.0f), *y = malloc(sizeof(float) * n);
    float *m = malloc(sizeof(float) * N), *r = malloc(sizeof(float) * N);
    float *m2 = malloc(sizeof(float) * N), *r2 = malloc(sizeof(float) * N);
    dt_bf16 *yh = malloc(2 * (size_t)n), *want = malloc(2 * (size_t)n);
    if (kind == LN) {
        dt_layernorm_forward(y, m, r, x, w, b, N, C, 1e-5f);
        dt_layernorm_forward_bf16(yh, m2, r2, x, w, b, N, C, 1e-5f);
    } else {
        dt_rmsnorm_forward(y, r, x, w, N, C, 1e-5f);
        dt_rmsnorm_forward_bf16(yh, r2, x, w, N, C, 1e-5f);
    }
    dt_cast_f32_to_bf16(want, y, n);
    DT_CHECK(!memcmp(yh, want, 2 * (size_t)n) && !memcmp(r, r2, sizeof(float) * N) &&
                 (kind != LN || !memcmp(m, m2, sizeof(float) * N)),
             "%s bf16 forward N=%d C=%d differs from the rounded fp32 forward",
             kind == LN ? "layernorm" : "rmsnorm", N, C);
    free(x), free(w), free(b), free(y), free(m), free(r), free(m2), free(r2), free(yh);
    free(want);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    for (int kind = LN; kind <= RMS; kind++) {
        check(kind, 5, 37, 10);    /* tiny: finite differences */
        check(kind, 3, 130, 20);   /* more than two column strips, finite differences */
        check(kind, 300, 203, 30); /* ragged lanes and strips, threaded */
        check(kind, 64, 768, 40);  /* GPT-2 width */
        check_bf16(kind, 300, 203, 50);
        check_bf16(kind, 64, 768, 60);
    }
    if (dt_test.perf) {
        perf(LN, 8192, 768);
        perf(RMS, 8192, 768);
    }
    return DT_TEST_END();
}
