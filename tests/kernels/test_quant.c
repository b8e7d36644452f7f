/* Tests for kernels/quant.h: every variant the CPU runs gives the bits of the plain-C _ref
 * (payload, scales, dequantised values) over ragged row lengths and at any thread count;
 * the scale is max|row|/127 and a zero row quantises to zeros; ties round to even; and the
 * round trip is within half a step: |x - dequant(quant(x))| <= scale/2 (plus a few ulp). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/quant.h"

static void check_variant(dt_quant_isa isa, const float *x, int64_t rows, int64_t cols,
                          const int8_t *q_ref, const float *s_ref, const float *y_ref) {
    int64_t n = rows * cols;
    int8_t *q = malloc((size_t)n);
    float *s = malloc(sizeof(float) * rows), *y = malloc(sizeof(float) * n);
    dt_quant_int8_rows_isa(isa, q, s, x, rows, cols);
    dt_dequant_int8_rows_isa(isa, y, q_ref, s_ref, rows, cols);
    const char *name = dt_quant_isa_name(isa);
    DT_CHECK(memcmp(q, q_ref, (size_t)n) == 0, "%s: int8 payload differs from _ref (cols %lld)",
             name, (long long)cols);
    DT_CHECK(memcmp(s, s_ref, sizeof(float) * rows) == 0, "%s: scales differ (cols %lld)", name,
             (long long)cols);
    DT_CHECK(memcmp(y, y_ref, sizeof(float) * n) == 0, "%s: dequantised values differ (cols %lld)",
             name, (long long)cols);
    free(q);
    free(s);
    free(y);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    const int64_t widths[] = {1, 7, 8, 15, 16, 17, 31, 64, 100, 1000};
    const int64_t rows = 37;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        int64_t cols = widths[w], n = rows * cols;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        int8_t *q = malloc((size_t)n);
        float *s = malloc(sizeof(float) * rows);
        dt_test_fill(x, n, 7 + (uint64_t)w, 3.0f);
        memset(x + 3 * cols, 0, sizeof(float) * cols); /* a zero row */
        for (int64_t i = 5; i < rows; i += 6)          /* rows of very different magnitudes */
            for (int64_t j = 0; j < cols; j++)
                x[i * cols + j] *= (i % 4 == 1) ? 1e-6f : 1e4f;
        dt_quant_int8_rows_ref(q, s, x, rows, cols);
        dt_dequant_int8_rows_ref(y, q, s, rows, cols);

        int64_t bad_scale = 0, bad_err = 0;
        double worst = 0;
        for (int64_t i = 0; i < rows; i++) {
            float m = 0;
            for (int64_t j = 0; j < cols; j++)
                m = fmaxf(m, fabsf(x[i * cols + j]));
            bad_scale += s[i] != m / 127.0f;
            for (int64_t j = 0; j < cols; j++) {
                double e = fabs((double)x[i * cols + j] - y[i * cols + j]);
                double bound = 0.5 * s[i] + 4.0 * m * 6e-8; /* half a step, a few ulp */
                bad_err += e > bound;
                if (s[i] > 0 && e / s[i] > worst)
                    worst = e / s[i];
            }
        }
        DT_CHECK(bad_scale == 0, "cols %lld: %lld scales are not max|row|/127", (long long)cols,
                 (long long)bad_scale);
        DT_CHECK(bad_err == 0, "cols %lld: %lld elements off by more than scale/2 (worst %.6f)",
                 (long long)cols, (long long)bad_err, worst);
        DT_CHECK(cols < 8 || worst > 0.4, "cols %lld: worst error %.3f of a step: rounding "
                 "looks exact, is the data quantised at all?", (long long)cols, worst);
        int64_t nonzero = 0;
        for (int64_t j = 0; j < cols; j++)
            nonzero += q[3 * cols + j] != 0;
        DT_CHECK(s[3] == 0 && nonzero == 0, "zero row: scale %g, %lld non-zero", s[3],
                 (long long)nonzero);

        int nt = omp_get_max_threads();
        for (int isa = 0; isa < DT_QUANT_ISA_COUNT; isa++) {
            if (!dt_quant_isa_supported((dt_quant_isa)isa)) {
                printf("variant %s: not supported by this CPU, skipped\n",
                       dt_quant_isa_name((dt_quant_isa)isa));
                continue;
            }
            for (int t = 1; t <= 3; t += 2) {
                omp_set_num_threads(t);
                check_variant((dt_quant_isa)isa, x, rows, cols, q, s, y);
            }
        }
        omp_set_num_threads(nt);
        /* bf16 rows: the _ref's payload and scales on the widened values, and its dequantised
         * values rounded to bf16 */
        dt_bf16 *xh = malloc(2 * (size_t)n), *yh = malloc(2 * (size_t)n);
        float *xw = malloc(sizeof(float) * n), *yw = malloc(sizeof(float) * n);
        int8_t *qh = malloc((size_t)n), *qw = malloc((size_t)n);
        float *sh = malloc(sizeof(float) * rows), *sw = malloc(sizeof(float) * rows);
        int64_t bad_lp = 0;
        for (int64_t i = 0; i < n; i++)
            xh[i] = dt_bf16_from_f32(x[i]), xw[i] = dt_bf16_to_f32(xh[i]);
        dt_quant_int8_rows_bf16(qh, sh, xh, rows, cols);
        dt_quant_int8_rows_ref(qw, sw, xw, rows, cols);
        dt_dequant_int8_rows_bf16(yh, qw, sw, rows, cols);
        dt_dequant_int8_rows_ref(yw, qw, sw, rows, cols);
        for (int64_t i = 0; i < n; i++)
            bad_lp += yh[i] != dt_bf16_from_f32(yw[i]);
        DT_CHECK(memcmp(qh, qw, (size_t)n) == 0 && memcmp(sh, sw, sizeof(float) * rows) == 0 &&
                     bad_lp == 0,
                 "bf16 rows (cols %lld): payload, scales or %lld dequantised values differ",
                 (long long)cols, (long long)bad_lp);
        free(xh), free(yh), free(xw), free(yw), free(qh), free(qw), free(sh), free(sw);
        /* the default entry points are one of the variants */
        int8_t *q2 = malloc((size_t)n);
        float *s2 = malloc(sizeof(float) * rows);
        dt_quant_int8_rows(q2, s2, x, rows, cols);
        DT_CHECK(memcmp(q2, q, (size_t)n) == 0 && memcmp(s2, s, sizeof(float) * rows) == 0,
                 "dt_quant_int8_rows differs from _ref (cols %lld)", (long long)cols);
        free(q2);
        free(s2);
        free(x);
        free(y);
        free(q);
        free(s);
    }

    /* ties to even, and exact values: max 127 gives scale 1 and 127/max = 1 */
    float t[16] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, -127, 3, 126.5f, -126.5f, 0, 1, 2, 4, 5, 6};
    int8_t want[16] = {127, 0, 2, 2, 0, -2, -127, 3, 126, -126, 0, 1, 2, 4, 5, 6};
    for (int isa = 0; isa < DT_QUANT_ISA_COUNT; isa++) {
        if (!dt_quant_isa_supported((dt_quant_isa)isa))
            continue;
        int8_t q[16];
        float s;
        dt_quant_int8_rows_isa((dt_quant_isa)isa, q, &s, t, 1, 16);
        DT_CHECK(s == 1.0f && memcmp(q, want, 16) == 0, "%s: ties to even / exact values",
                 dt_quant_isa_name((dt_quant_isa)isa));
    }
    if (dt_test.perf) { /* the 124M block's MLP pre-activation: 1024 rows x 3072 */
        int64_t prow = 1024, pcol = 3072, n = prow * pcol;
        float *x = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * prow);
        int8_t *q = malloc((size_t)n);
        dt_test_fill(x, n, 11, 3.0f);
        double tq = 1e30, td = 1e30;
        for (int k = 0; k < 5; k++) {
            double t0 = dt_test_seconds();
            dt_quant_int8_rows(q, s, x, prow, pcol);
            double t1 = dt_test_seconds();
            dt_dequant_int8_rows(x, q, s, prow, pcol);
            double t2 = dt_test_seconds();
            tq = t1 - t0 < tq ? t1 - t0 : tq;
            td = t2 - t1 < td ? t2 - t1 : td;
        }
        printf("perf quant int8 %lldx%lld: %.3f ms\n", (long long)prow, (long long)pcol, 1e3 * tq);
        printf("perf dequant int8 %lldx%lld: %.3f ms\n", (long long)prow, (long long)pcol,
               1e3 * td);
        free(x), free(s), free(q);
    }
    return DT_TEST_END();
}
