/* Tests for kernels/rope.h: tables vs the double formula, forward vs an explicit HF
 * rotate_half computation in double and vs _ref, backward vs _ref and vs central finite
 * differences of sum(dy * rope(x)), backward(forward(x)) == x, and strided (fused qkv) rows
 * whose other columns stay untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/rope.h"

/* out = x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), rotate_half = cat(-x2, x1) */
static void hf_rope_double(double *out, const float *x, int B, int T, int NH, int hs,
                           int64_t stride, const float *cos_t, const float *sin_t) {
    int half = hs / 2;
    double *rh = malloc(sizeof(double) * hs);
    for (int64_t r = 0; r < (int64_t)B * T; r++)
        for (int h = 0; h < NH; h++) {
            const float *v = x + r * stride + (int64_t)h * hs;
            double *o = out + r * stride + (int64_t)h * hs;
            for (int i = 0; i < half; i++)
                rh[i] = -(double)v[i + half], rh[i + half] = v[i];
            int t = (int)(r % T);
            for (int i = 0; i < hs; i++) {
                int j = i % half;
                o[i] = v[i] * (double)cos_t[t * half + j] + rh[i] * (double)sin_t[t * half + j];
            }
        }
    free(rh);
}

static double lin_loss(const float *x, const float *dy, int64_t n, int B, int T, int NH, int hs,
                       int64_t stride, const float *c, const float *s) {
    double *y = calloc(n, sizeof(double));
    hf_rope_double(y, x, B, T, NH, hs, stride, c, s);
    double l = 0;
    for (int64_t r = 0; r < (int64_t)B * T; r++)
        for (int64_t i = 0; i < (int64_t)NH * hs; i++)
            l += dy[r * stride + i] * y[r * stride + i];
    free(y);
    return l;
}

static void check(int B, int T, int NH, int hs, int64_t stride, int pos0, bool fd) {
    int half = hs / 2;
    float theta = 10000.0f;
    float *c = malloc(sizeof(float) * T * half), *s = malloc(sizeof(float) * T * half);
    dt_rope_tables(c, s, T, hs, pos0, theta);
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = (pos0 + t) * pow(theta, -2.0 * i / hs);
            worst = fmax(worst, fabs(c[t * half + i] - cos(a)));
            worst = fmax(worst, fabs(s[t * half + i] - sin(a)));
        }
    /* float32 angles (the HF recipe) are off by ~pos * 6e-8 rad */
    DT_CHECK(worst < 1e-7 * (pos0 + T) + 1e-7, "tables pos0=%d T=%d: max err %.3g", pos0, T,
             worst);

    int64_t n = (int64_t)B * T * stride;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *yr = malloc(sizeof(float) * n), *yh = malloc(sizeof(float) * n);
    double *yd = calloc(n, sizeof(double));
    dt_test_fill(x, n, 11, 2.0f);
    memcpy(y, x, sizeof(float) * n);
    memcpy(yr, x, sizeof(float) * n);
    memcpy(yh, x, sizeof(float) * n); /* columns past NH*hs must stay as in x */
    dt_rope_forward(y, B, T, NH, hs, stride, c, s, NULL);
    dt_rope_forward_ref(yr, B, T, NH, hs, stride, c, s, NULL);
    hf_rope_double(yd, x, B, T, NH, hs, stride, c, s);
    for (int64_t r = 0; r < (int64_t)B * T; r++)
        for (int64_t i = 0; i < (int64_t)NH * hs; i++)
            yh[r * stride + i] = (float)yd[r * stride + i];
    DT_CHECK(dt_test_nmse(y, yr, n) < 1e-14 && dt_test_nmse(y, yh, n) < 1e-14,
             "rope fwd B%d T%d NH%d hs%d stride %lld: nmse ref %.3g hf %.3g", B, T, NH, hs,
             (long long)stride, dt_test_nmse(y, yr, n), dt_test_nmse(y, yh, n));
    bool untouched = true;
    for (int64_t r = 0; r < (int64_t)B * T; r++)
        for (int64_t i = (int64_t)NH * hs; i < stride; i++)
            untouched &= y[r * stride + i] == x[r * stride + i];
    DT_CHECK(untouched, "rope fwd wrote outside the rotated heads");

    /* inverse: backward(forward(x)) == x up to cos^2 + sin^2 = 1 in float */
    float *z = malloc(sizeof(float) * n);
    memcpy(z, y, sizeof(float) * n);
    dt_rope_backward(z, B, T, NH, hs, stride, c, s, NULL);
    DT_CHECK(dt_test_max_rel(z, x, n, 1.0) < 1e-6, "backward(forward(x)) != x: %.3g",
             dt_test_max_rel(z, x, n, 1.0));

    /* backward vs ref, and vs finite differences of sum(dy * rope(x)) */
    float *dy = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    float *dxr = malloc(sizeof(float) * n);
    dt_test_fill(dy, n, 12, 1.0f);
    memcpy(dx, dy, sizeof(float) * n);
    memcpy(dxr, dy, sizeof(float) * n);
    dt_rope_backward(dx, B, T, NH, hs, stride, c, s, NULL);
    dt_rope_backward_ref(dxr, B, T, NH, hs, stride, c, s, NULL);
    DT_CHECK(dt_test_nmse(dx, dxr, n) < 1e-14, "rope bwd vs ref: nmse %.3g",
             dt_test_nmse(dx, dxr, n));
    if (fd) {
        float *g = malloc(sizeof(float) * n);
        memcpy(g, dy, sizeof(float) * n); /* untouched columns pass the gradient through */
        for (int64_t r = 0; r < (int64_t)B * T; r++)
            for (int64_t i = 0; i < (int64_t)NH * hs; i++) {
                int64_t k = r * stride + i;
                float keep = x[k], h = 1e-2f;
                x[k] = keep + h;
                double lp = lin_loss(x, dy, n, B, T, NH, hs, stride, c, s);
                x[k] = keep - h;
                double lm = lin_loss(x, dy, n, B, T, NH, hs, stride, c, s);
                x[k] = keep;
                g[k] = (float)((lp - lm) / (2.0 * h));
            }
        DT_CHECK(dt_test_nmse(dx, g, n) < 1e-12, "rope bwd vs finite differences: nmse %.3g",
                 dt_test_nmse(dx, g, n));
        free(g);
    }
    free(c), free(s), free(x), free(y), free(yr), free(yh), free(yd), free(z), free(dy),
        free(dx), free(dxr);
}

/* Positions that restart at each document (pos given): every row rotated by its own table
 * row, as one row of a one-token sequence rotated by that row of the table alone; the
 * backward is its inverse. */
static void check_positions(void) {
    enum { B = 2, T = 40, NH = 3, hs = 16, half = hs / 2 };
    const int64_t n = (int64_t)B * T * NH * hs;
    float c[T * half], s[T * half], x[n], y[n], yr[n], one[n];
    int32_t pos[B * T];
    dt_rope_tables(c, s, T, hs, 0, 10000.0f);
    for (int r = 0; r < B * T; r++)
        pos[r] = r % T < 7 ? r % T : (r % T - 7) % 13; /* documents of 7, then of 13 tokens */
    dt_test_fill(x, n, 21, 1.0f);
    memcpy(y, x, sizeof x);
    memcpy(yr, x, sizeof x);
    memcpy(one, x, sizeof x);
    dt_rope_forward(y, B, T, NH, hs, NH * hs, c, s, pos);
    dt_rope_forward_ref(yr, B, T, NH, hs, NH * hs, c, s, pos);
    for (int r = 0; r < B * T; r++)
        dt_rope_forward_ref(one + (int64_t)r * NH * hs, 1, 1, NH, hs, NH * hs, c + pos[r] * half,
                            s + pos[r] * half, NULL);
    DT_CHECK(memcmp(y, one, sizeof y) == 0 && memcmp(yr, one, sizeof y) == 0,
             "rope with positions: not each row rotated by its own table row");
    dt_rope_backward(y, B, T, NH, hs, NH * hs, c, s, pos);
    DT_CHECK(dt_test_max_rel(y, x, n, 1.0) < 1e-6,
             "rope with positions: backward(forward(x)) "
             "!= x: %.3g",
             dt_test_max_rel(y, x, n, 1.0));
    dt_rope_backward_ref(yr, B, T, NH, hs, NH * hs, c, s, pos);
    DT_CHECK(dt_test_max_rel(yr, x, n, 1.0) < 1e-6,
             "rope ref with positions: backward(forward(x)) "
             "!= x: %.3g",
             dt_test_max_rel(yr, x, n, 1.0));
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_positions();
    check(2, 3, 2, 8, 16, 0, true);         /* dense rows, finite differences */
    check(2, 5, 3, 6, 3 * 18, 7, true);     /* q part of a fused qkv row, pos0 > 0 */
    check(4, 64, 12, 64, 3 * 768, 0, false); /* GPT-2 head layout, threaded */
    check(1, 33, 4, 128, 4 * 128, 4000, false);
    if (dt_test.perf) {
        int B = 8, T = 1024, NH = 12, hs = 64;
        int64_t n = (int64_t)B * T * NH * hs;
        float *x = malloc(sizeof(float) * n), *c = malloc(sizeof(float) * T * hs / 2);
        float *s = malloc(sizeof(float) * T * hs / 2);
        dt_test_fill(x, n, 1, 1);
        dt_rope_tables(c, s, T, hs, 0, 10000.0f);
        dt_rope_forward(x, B, T, NH, hs, NH * hs, c, s, NULL);
        double t = dt_test_seconds();
        for (int r = 0; r < 10; r++)
            dt_rope_forward(x, B, T, NH, hs, NH * hs, c, s, NULL);
        t = (dt_test_seconds() - t) / 10;
        printf("perf rope fwd %dx%dx%dx%d: %.2f ms (%.1f GB/s)\n", B, T, NH, hs, t * 1e3,
               8.0 * n / t / 1e9);
        free(x), free(c), free(s);
    }
    return DT_TEST_END();
}
