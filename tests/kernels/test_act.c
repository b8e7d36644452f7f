/* Tests for kernels/act.h: GELU (tanh form, HF gelu_new) and SwiGLU, fast vs _ref by NMSE and
 * max relative error, vs double formulas written here, backward vs central finite differences
 * of sum(dy * y) in double, the += contract, and the tails (|x| up to 1e4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/act.h"
#include "kernels/cast.h"
#include "kernels/isa.h"

static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double silu_d(double g) { return g / (1 + exp(-g)); }

static float *fill(int64_t n, uint64_t seed, float scale) {
    float *p = malloc(sizeof(float) * n);
    dt_test_fill(p, n, seed, scale);
    return p;
}

static float *copy(const float *p, int64_t n) {
    float *q = malloc(sizeof(float) * n);
    memcpy(q, p, sizeof(float) * n);
    return q;
}

static bool same_values(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static void check_gelu(int64_t n, float scale) {
    float *x = fill(n, 1, scale), *dy = fill(n, 2, 1.0f), *dx0 = fill(n, 3, 1.0f);
    float *y = malloc(sizeof(float) * n), *yr = malloc(sizeof(float) * n);
    float *yd = malloc(sizeof(float) * n), *gd = malloc(sizeof(float) * n);
    x[0] = 0, x[1] = -30, x[2] = 30; /* exact zero and both saturated tails */
    dt_gelu_forward(y, x, n);
    dt_gelu_forward_ref(yr, x, n);
    for (int64_t i = 0; i < n; i++) {
        yd[i] = (float)gelu_d(x[i]);
        double h = 1e-4 * fmax(1, fabs(x[i]));
        gd[i] = (float)(dx0[i] + dy[i] * (gelu_d(x[i] + h) - gelu_d(x[i] - h)) / (2 * h));
    }
    DT_CHECK(dt_test_nmse(y, yr, n) < 1e-13 && dt_test_nmse(y, yd, n) < 1e-13,
             "gelu fwd n=%lld scale %g: nmse ref %.3g double %.3g", (long long)n, scale,
             dt_test_nmse(y, yr, n), dt_test_nmse(y, yd, n));
    DT_CHECK(dt_test_max_rel(y, yd, n, 1e-6) < 1e-5, "gelu fwd max rel %.3g",
             dt_test_max_rel(y, yd, n, 1e-6));
    float *dx = copy(dx0, n), *dxr = copy(dx0, n);
    dt_gelu_backward(dx, x, dy, n);
    dt_gelu_backward_ref(dxr, x, dy, n);
    DT_CHECK(dt_test_nmse(dx, dxr, n) < 1e-13, "gelu bwd vs ref: nmse %.3g",
             dt_test_nmse(dx, dxr, n));
    DT_CHECK(dt_test_nmse(dx, gd, n) < 1e-9, "gelu bwd vs finite differences: nmse %.3g",
             dt_test_nmse(dx, gd, n));
    /* dx is dx0 + dy*gelu'(x), of order 1 and often cancelling: compare on an absolute floor */
    DT_CHECK(dt_test_max_rel(dx, dxr, n, 1.0) < 1e-6, "gelu bwd max rel %.3g",
             dt_test_max_rel(dx, dxr, n, 1.0));
    /* _set: overwrites dx0's values with those of accumulating onto zeros (an exact zero
     * may differ in sign: 0 + -0 is +0) */
    float *zero = calloc(n, sizeof(float)), *set = copy(dx0, n);
    dt_gelu_backward(zero, x, dy, n);
    dt_gelu_backward_set(set, x, dy, n);
    DT_CHECK(same_values(set, zero, n), "gelu bwd _set differs");
    free(zero), free(set);
    /* _lp: the cast of the fp32 forward, bit for bit, in both 16-bit types */
    uint16_t *lp = malloc(2 * n), *want = malloc(2 * n);
    for (int t = DT_BF16; t <= DT_F16; t++) {
        dt_gelu_forward_lp((dt_dtype)t, lp, x, n);
        dt_cast_f32_to_lp((dt_dtype)t, want, y, n);
        DT_CHECK(!memcmp(lp, want, 2 * n), "gelu fwd _lp (%s) differs from the cast",
                 dt_dtype_name((dt_dtype)t));
    }
    free(lp), free(want);
    free(x), free(dy), free(dx0), free(y), free(yr), free(yd), free(gd), free(dx), free(dxr);
}

static void check_swiglu(int64_t n, float scale) {
    float *g = fill(n, 4, scale), *u = fill(n, 5, 2.0f), *dy = fill(n, 6, 1.0f);
    float *dg0 = fill(n, 7, 1.0f), *du0 = fill(n, 8, 1.0f);
    float *y = malloc(sizeof(float) * n), *yr = malloc(sizeof(float) * n);
    float *yd = malloc(sizeof(float) * n), *gg = malloc(sizeof(float) * n);
    float *gu = malloc(sizeof(float) * n);
    g[0] = 0, g[1] = -80, g[2] = 80;
    dt_swiglu_forward(y, g, u, n);
    dt_swiglu_forward_ref(yr, g, u, n);
    for (int64_t i = 0; i < n; i++) {
        yd[i] = (float)(silu_d(g[i]) * u[i]);
        double h = 1e-4 * fmax(1, fabs(g[i]));
        gg[i] = (float)(dg0[i] + dy[i] * u[i] * (silu_d(g[i] + h) - silu_d(g[i] - h)) / (2 * h));
        gu[i] = (float)(du0[i] + dy[i] * silu_d(g[i])); /* linear in up: exact derivative */
    }
    DT_CHECK(dt_test_nmse(y, yr, n) < 1e-13 && dt_test_nmse(y, yd, n) < 1e-13,
             "swiglu fwd: nmse ref %.3g double %.3g", dt_test_nmse(y, yr, n),
             dt_test_nmse(y, yd, n));
    DT_CHECK(dt_test_max_rel(y, yd, n, 1e-6) < 1e-5, "swiglu fwd max rel %.3g",
             dt_test_max_rel(y, yd, n, 1e-6));
    float *dg = copy(dg0, n), *du = copy(du0, n), *dgr = copy(dg0, n), *dur = copy(du0, n);
    dt_swiglu_backward(dg, du, g, u, dy, n);
    dt_swiglu_backward_ref(dgr, dur, g, u, dy, n);
    DT_CHECK(dt_test_nmse(dg, dgr, n) < 1e-13 && dt_test_nmse(du, dur, n) < 1e-13,
             "swiglu bwd vs ref: nmse dgate %.3g dup %.3g", dt_test_nmse(dg, dgr, n),
             dt_test_nmse(du, dur, n));
    DT_CHECK(dt_test_nmse(dg, gg, n) < 1e-9 && dt_test_nmse(du, gu, n) < 1e-13,
             "swiglu bwd vs finite differences: nmse dgate %.3g dup %.3g",
             dt_test_nmse(dg, gg, n), dt_test_nmse(du, gu, n));
    float *zg = calloc(n, sizeof(float)), *zu = calloc(n, sizeof(float));
    float *sg = copy(dg0, n), *su = copy(du0, n);
    dt_swiglu_backward(zg, zu, g, u, dy, n);
    dt_swiglu_backward_set(sg, su, g, u, dy, n);
    DT_CHECK(same_values(sg, zg, n) && same_values(su, zu, n), "swiglu bwd _set differs");
    uint16_t *lp = malloc(2 * n), *want = malloc(2 * n);
    for (int t = DT_BF16; t <= DT_F16; t++) {
        dt_swiglu_forward_lp((dt_dtype)t, lp, g, u, n);
        dt_cast_f32_to_lp((dt_dtype)t, want, y, n);
        DT_CHECK(!memcmp(lp, want, 2 * n), "swiglu fwd _lp (%s) differs from the cast",
                 dt_dtype_name((dt_dtype)t));
    }
    free(lp), free(want);
    free(zg), free(zu), free(sg), free(su);
    free(g), free(u), free(dy), free(dg0), free(du0), free(y), free(yr), free(yd), free(gg);
    free(gu), free(dg), free(du), free(dgr), free(dur);
}

static void check_extremes(void) {
    float x[] = {-1e4f, -100, -50, -10, -3, -1e-3f, -1e-30f, 0, 1e-30f, 1e-3f, 3, 10, 50, 100,
                 1e4f};
    int n = (int)(sizeof x / sizeof x[0]);
    float y[32], yr[32], one[32], dx[32] = {0}, dxr[32] = {0}, sy[32], syr[32];
    for (int i = 0; i < n; i++)
        one[i] = 1;
    dt_gelu_forward(y, x, n);
    dt_gelu_forward_ref(yr, x, n);
    dt_gelu_backward(dx, x, one, n);
    dt_gelu_backward_ref(dxr, x, one, n);
    dt_swiglu_forward(sy, x, one, n);
    dt_swiglu_forward_ref(syr, x, one, n);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        ok &= isfinite(y[i]) && isfinite(dx[i]) && isfinite(sy[i]);
        ok &= fabsf(y[i] - yr[i]) <= 1e-6f * fmaxf(fabsf(yr[i]), 1e-30f) + 1e-30f;
        ok &= fabsf(dx[i] - dxr[i]) <= 1e-6f * fmaxf(fabsf(dxr[i]), 1.0f);
        ok &= fabsf(sy[i] - syr[i]) <= 1e-6f * fmaxf(fabsf(syr[i]), 1e-30f) + 1e-30f;
        if (!ok) {
            DT_CHECK(false, "extreme x=%g: gelu %g/%g dgelu %g/%g silu %g/%g", x[i], y[i], yr[i],
                     dx[i], dxr[i], sy[i], syr[i]);
            return;
        }
    }
    DT_CHECK(ok, "extremes");
    float nan_in = NAN, out;
    dt_gelu_forward(&out, &nan_in, 1);
    DT_CHECK(isnan(out), "gelu(NaN) = %g", out);
}

/* bf16 storage: fill, rounded to bf16 (with both saturated tails and an exact zero) */
static dt_bf16 *fill_bf16(int64_t n, uint64_t seed, float scale) {
    float *f = fill(n, seed, scale);
    dt_bf16 *h = malloc(2 * n);
    f[0] = 0, f[1] = -30, f[2] = 30, f[3] = -1e4f, f[4] = 1e4f, f[5] = -90, f[6] = 90;
    dt_cast_f32_to_bf16(h, f, n);
    free(f);
    return h;
}

/* a bf16 output against its reference: at most one bf16 ulp apart (a value near a rounding
 * tie may land either side; results below 1e-30, the saturated tail, count as zero) */
static void check_bf16_close(const dt_bf16 *y, const dt_bf16 *yr, int64_t n, const char *what) {
    int64_t off = 0, far = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = dt_bf16_to_f32(y[i]), r = dt_bf16_to_f32(yr[i]), d = fabs(a - r);
        off += d > 1e-30;
        far += d > fabs(r) / 128 + 1e-30;
    }
    DT_CHECK(far == 0 && off <= n / 200 + 1, "%s (%s): %lld values 1 bf16 ulp off, %lld further",
             what, dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)), (long long)off, (long long)far);
}

static void check_bf16_variant(int64_t n, float scale) {
    const char *isa = dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)); /* forwards' variant */
    dt_bf16 *x = fill_bf16(n, 11, scale), *u = fill_bf16(n, 12, 2.0f);
    float *dy = fill(n, 13, 1.0f), *dx = fill(n, 14, 1.0f), *dxr = fill(n, 15, 1.0f);
    float *du = fill(n, 16, 1.0f), *dur = fill(n, 17, 1.0f), *xf = malloc(4 * n);
    float *dxf = malloc(4 * n);
    dt_bf16 *y = malloc(2 * n), *yr = malloc(2 * n);
    dt_cast_bf16_to_f32(xf, x, n);
    dt_gelu_forward_bf16(y, x, n);
    dt_gelu_forward_bf16_ref(yr, x, n);
    check_bf16_close(y, yr, n, "gelu fwd bf16");
    dt_gelu_backward_bf16_set(dx, x, dy, n);
    dt_gelu_backward_bf16_set_ref(dxr, x, dy, n);
    /* dy * gelu'(x) cancels near x = -0.75: compare on an absolute floor, as for fp32 */
    DT_CHECK(dt_test_nmse(dx, dxr, n) < 1e-13 && dt_test_max_rel(dx, dxr, n, 1.0) < 1e-6,
             "gelu bwd bf16 (%s) n=%lld: nmse %.3g max rel %.3g", isa, (long long)n,
             dt_test_nmse(dx, dxr, n), dt_test_max_rel(dx, dxr, n, 1.0));
    /* the fp32 kernel on the widened values: the same math */
    dt_gelu_backward_set(dxf, xf, dy, n);
    DT_CHECK(dt_test_nmse(dx, dxf, n) < 1e-13, "gelu bwd bf16 (%s) vs fp32 kernel: nmse %.3g",
             isa, dt_test_nmse(dx, dxf, n));
    dt_swiglu_forward_bf16(y, x, u, n);
    dt_swiglu_forward_bf16_ref(yr, x, u, n);
    check_bf16_close(y, yr, n, "swiglu fwd bf16");
    dt_swiglu_backward_bf16_set(dx, du, x, u, dy, n);
    dt_swiglu_backward_bf16_set_ref(dxr, dur, x, u, dy, n);
    DT_CHECK(dt_test_nmse(dx, dxr, n) < 1e-13 && dt_test_nmse(du, dur, n) < 1e-13 &&
                 dt_test_max_rel(dx, dxr, n, 1.0) < 1e-6 &&
                 dt_test_max_rel(du, dur, n, 1.0) < 1e-6,
             "swiglu bwd bf16 (%s) n=%lld: nmse dgate %.3g dup %.3g, max rel %.3g %.3g", isa,
             (long long)n, dt_test_nmse(dx, dxr, n), dt_test_nmse(du, dur, n),
             dt_test_max_rel(dx, dxr, n, 1.0), dt_test_max_rel(du, dur, n, 1.0));
    bool finite = true;
    for (int64_t i = 0; i < n; i++)
        finite &= isfinite(dx[i]) && isfinite(du[i]) && isfinite(dt_bf16_to_f32(y[i]));
    DT_CHECK(finite, "bf16 activations (%s): non-finite output", isa);
    free(x), free(u), free(dy), free(dx), free(dxr), free(du), free(dur), free(xf), free(dxf);
    free(y), free(yr);
}

/* every variant this CPU runs, against the references */
static void check_bf16(void) {
    for (int isa = 0; isa <= DT_ISA_AVX512BF16; isa++) {
        if (!dt_isa_supported((dt_isa)isa)) {
            printf("SKIP bf16 activations %s: this CPU does not run it\n",
                   dt_isa_name((dt_isa)isa));
            continue;
        }
        dt_isa_set_cap((dt_isa)isa);
        check_bf16_variant(1001, 4.0f); /* ragged tail */
        check_bf16_variant(100003, 6.0f); /* threaded, ragged block */
    }
    dt_isa_set_cap(DT_ISA_COUNT - 1);
}

static void perf_bf16(void) {
    int64_t n = 1024 * 3072;
    dt_bf16 *x = fill_bf16(n, 1, 3), *y = malloc(2 * n);
    float *dy = fill(n, 2, 1), *d = malloc(4 * n);
    for (int isa = 0; isa <= DT_ISA_AVX512BF16; isa++) {
        if (!dt_isa_supported((dt_isa)isa))
            continue;
        dt_isa_set_cap((dt_isa)isa);
        int reps = 10;
        dt_gelu_forward_bf16(y, x, n);
        double t0 = dt_test_seconds();
        for (int r = 0; r < reps; r++)
            dt_gelu_forward_bf16(y, x, n);
        double t1 = dt_test_seconds();
        for (int r = 0; r < reps; r++)
            dt_gelu_backward_bf16_set(d, x, dy, n);
        double t2 = dt_test_seconds();
        printf("perf bf16 %s n=%lld: gelu fwd %.2f ms, bwd %.2f ms\n",
               dt_isa_name((dt_isa)isa), (long long)n, (t1 - t0) / reps * 1e3,
               (t2 - t1) / reps * 1e3);
    }
    dt_isa_set_cap(DT_ISA_COUNT - 1);
    free(x), free(y), free(dy), free(d);
}

static void perf(void) {
    int64_t n = 1024 * 3072;
    float *x = fill(n, 1, 3), *y = malloc(sizeof(float) * n), *d = calloc(n, sizeof(float));
    float *u = fill(n, 2, 1);
    dt_gelu_forward(y, x, n);
    int reps = 10;
    double t0 = dt_test_seconds();
    for (int r = 0; r < reps; r++)
        dt_gelu_forward(y, x, n);
    double t1 = dt_test_seconds();
    for (int r = 0; r < reps; r++)
        dt_gelu_backward(d, x, y, n);
    double t2 = dt_test_seconds();
    for (int r = 0; r < reps; r++)
        dt_swiglu_forward(y, x, u, n);
    double t3 = dt_test_seconds();
    printf("perf n=%lld: gelu fwd %.2f ms (%.1f GB/s), bwd %.2f ms (%.1f GB/s), swiglu fwd "
           "%.2f ms (%.1f GB/s)\n",
           (long long)n, (t1 - t0) / reps * 1e3, 8.0 * n * reps / (t1 - t0) / 1e9,
           (t2 - t1) / reps * 1e3, 16.0 * n * reps / (t2 - t1) / 1e9, (t3 - t2) / reps * 1e3,
           12.0 * n * reps / (t3 - t2) / 1e9);
    free(x), free(y), free(d), free(u);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_gelu(1001, 4.0f);
    check_gelu(100003, 6.0f); /* threaded, ragged block */
    check_swiglu(1001, 6.0f);
    check_swiglu(100003, 12.0f);
    check_extremes();
    check_bf16();
    if (dt_test.perf) {
        perf();
        perf_bf16();
    }
    return DT_TEST_END();
}
