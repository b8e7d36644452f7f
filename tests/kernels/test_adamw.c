/* Tests for kernels/adamw.h: several AdamW steps against a double-precision reimplementation
 * of PyTorch's torch.optim.AdamW formula and against dt_adamw_update_ref, with weight decay,
 * gradient scaling and the bf16 copy; plus the first step's closed form (|dp| = lr). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/adamw.h"
#include "kernels/cast.h"

static void adamw_double(double *p, const float *g, double *m, double *v, int64_t n,
                         const dt_adamw_hparams *h) {
    double lr = h->lr, b1 = h->beta1, b2 = h->beta2, eps = h->eps, wd = h->weight_decay;
    double bc1 = 1 - pow(b1, h->step), bc2 = 1 - pow(b2, h->step);
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)g[i] * h->grad_scale;
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static void check(int64_t n, float wd, float grad_scale, bool with_bf16) {
    dt_adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = wd, .grad_scale = grad_scale};
    float *p = malloc(sizeof(float) * n), *m = calloc(n, sizeof(float));
    float *v = calloc(n, sizeof(float)), *g = malloc(sizeof(float) * n);
    float *pr = malloc(sizeof(float) * n), *mr = calloc(n, sizeof(float));
    float *vr = calloc(n, sizeof(float)), *pdf = malloc(sizeof(float) * n);
    double *pd = malloc(sizeof(double) * n), *md = calloc(n, sizeof(double));
    double *vd = calloc(n, sizeof(double));
    dt_bf16 *pb = with_bf16 ? malloc(sizeof(dt_bf16) * n) : NULL;
    dt_test_fill(p, n, 1, 1.0f);
    memcpy(pr, p, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        pd[i] = p[i];
    int n_steps = 6;
    for (int t = 1; t <= n_steps; t++) {
        h.step = t;
        dt_test_fill(g, n, 100 + t, 1.0f);
        dt_adamw_update(p, g, m, v, pb, n, &h);
        dt_adamw_update_ref(pr, g, mr, vr, NULL, n, &h);
        adamw_double(pd, g, md, vd, n, &h);
    }
    for (int64_t i = 0; i < n; i++)
        pdf[i] = (float)pd[i];
    DT_CHECK(!memcmp(p, pr, sizeof(float) * n) && !memcmp(m, mr, sizeof(float) * n) &&
                 !memcmp(v, vr, sizeof(float) * n),
             "n=%lld: fast and ref differ (nmse p %.3g)", (long long)n, dt_test_nmse(p, pr, n));
    /* fp32 vs fp64 after a few steps: relative ~1e-6 (the DESIGN.md figure is 4e-6 at worst) */
    DT_CHECK(dt_test_max_rel(p, pdf, n, 1e-2) < 1e-5 && dt_test_nmse(p, pdf, n) < 1e-12,
             "n=%lld wd=%g gs=%g vs double: max rel %.3g nmse %.3g", (long long)n, wd,
             grad_scale, dt_test_max_rel(p, pdf, n, 1e-2), dt_test_nmse(p, pdf, n));
    if (pb) {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += pb[i] != dt_bf16_from_f32(p[i]);
        DT_CHECK(bad == 0, "bf16 copy: %lld mismatches", (long long)bad);
    }
    free(p), free(m), free(v), free(g), free(pr), free(mr), free(vr), free(pdf), free(pd);
    free(md), free(vd), free(pb);
}

/* Step 1 without decay: m/sqrt(v) after bias correction is sign(g), so p moves by lr. */
static void check_first_step(void) {
    float p[4] = {1, 1, 1, 1}, g[4] = {0.5f, -3, 1e-3f, 7}, m[4] = {0}, v[4] = {0};
    dt_adamw_hparams h = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-12f,
                          .grad_scale = 1, .step = 1};
    dt_adamw_update(p, g, m, v, NULL, 4, &h);
    for (int i = 0; i < 4; i++)
        DT_CHECK_CLOSE(p[i], 1.0 - 0.1 * (g[i] > 0 ? 1 : -1), 1e-6);
}

/* The fp16 copy: the same update, and the bits dt_cast_f32_to_f16 gives of the new weights
 * (values past fp16's range included: they round to +-inf). */
static void check_f16_copy(int64_t n) {
    dt_adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .grad_scale = 1, .step = 1};
    float *p = malloc(sizeof(float) * n), *pr = malloc(sizeof(float) * n);
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    float *mr = calloc(n, sizeof(float)), *vr = calloc(n, sizeof(float));
    float *g = malloc(sizeof(float) * n);
    dt_f16 *ph = malloc(sizeof(dt_f16) * n), *want = malloc(sizeof(dt_f16) * n);
    dt_test_fill(p, n, 3, 1e5f);
    dt_test_fill(g, n, 4, 1.0f);
    memcpy(pr, p, sizeof(float) * n);
    dt_adamw_update_f16(p, g, m, v, ph, n, &h);
    dt_adamw_update(pr, g, mr, vr, NULL, n, &h);
    dt_cast_f32_to_f16(want, pr, n);
    DT_CHECK(!memcmp(p, pr, sizeof(float) * n) && !memcmp(m, mr, sizeof(float) * n) &&
                 !memcmp(v, vr, sizeof(float) * n),
             "n=%lld: the fp16 variant's update differs", (long long)n);
    DT_CHECK(!memcmp(ph, want, sizeof(dt_f16) * n), "n=%lld: fp16 copy differs from the cast",
             (long long)n);
    free(p), free(pr), free(m), free(v), free(mr), free(vr), free(g), free(ph), free(want);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check(1000, 0.0f, 1.0f, false);
    check(100003, 0.1f, 0.5f, true); /* threaded, ragged block */
    check_f16_copy(1000);
    check_f16_copy(100003);
    check_first_step();
    if (dt_test.perf) {
        int64_t n = 1 << 24;
        float *p = calloc(n, 4), *g = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
        dt_bf16 *pb = calloc(n, 2);
        dt_test_fill(g, n, 1, 1);
        dt_adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .grad_scale = 1, .step = 1};
        dt_adamw_update(p, g, m, v, pb, n, &h);
        double t = dt_test_seconds();
        for (int r = 0; r < 5; r++)
            dt_adamw_update(p, g, m, v, pb, n, &h);
        t = (dt_test_seconds() - t) / 5;
        printf("perf adamw n=%lld (+bf16 copy): %.2f ms, %.1f GB/s\n", (long long)n, t * 1e3,
               30.0 * n / t / 1e9);
        free(p), free(g), free(m), free(v), free(pb);
    }
    return DT_TEST_END();
}
