/* Tests for kernels/gemm.h: dt_gemm_run (oneDNN) against dt_gemm_ref and against a
 * double-precision product written here, over every transpose/accumulate/bias/stride case,
 * fp32, bf16 and fp16. --perf prints GFLOP/s at 1024x2304x768 and the implementation names.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/gemm.h"

/* Independent oracle: C = op(A)op(B) (+bias) (+C) from fp32 copies of the operands. */
static void gemm_double(const dt_gemm_shape *s, const float *A, const float *B,
                        const float *bias, float *C, int64_t lda, int64_t ldb, int64_t ldc) {
    for (int m = 0; m < s->M; m++)
        for (int n = 0; n < s->N; n++) {
            double acc = 0;
            for (int k = 0; k < s->K; k++) {
                double a = s->trans_a ? A[(int64_t)k * lda + m] : A[(int64_t)m * lda + k];
                double b = s->trans_b ? B[(int64_t)n * ldb + k] : B[(int64_t)k * ldb + n];
                acc += a * b;
            }
            if (bias)
                acc += bias[n];
            float *c = &C[(int64_t)m * ldc + n];
            *c = (float)(s->accumulate ? *c + acc : acc);
        }
}

static void to_lp(dt_dtype dt, uint16_t *dst, float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = dt == DT_F16 ? dt_f16_from_f32(src[i]) : dt_bf16_from_f32(src[i]);
        /* the oracle sees the rounded operand */
        src[i] = dt == DT_F16 ? dt_f16_to_f32(dst[i]) : dt_bf16_to_f32(dst[i]);
    }
}

static void check_case(dt_gemm *g, int M, int N, int K, bool ta, bool tb, bool acc, bool bias,
                       int pad, dt_dtype dt, uint64_t seed) {
    dt_gemm_shape s = {.M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .accumulate = acc,
                       .dtype = dt};
    int64_t ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    int64_t lda = ca + pad, ldb = cb + pad, ldc = N + pad;
    if (pad)
        s.lda = lda, s.ldb = ldb, s.ldc = ldc;
    float *A = malloc(sizeof(float) * ra * lda), *B = malloc(sizeof(float) * rb * ldb);
    float *bv = malloc(sizeof(float) * N);
    float *C0 = malloc(sizeof(float) * M * ldc), *C1 = malloc(sizeof(float) * M * ldc);
    float *C2 = malloc(sizeof(float) * M * ldc), *C3 = malloc(sizeof(float) * M * ldc);
    dt_bf16 *Ah = malloc(sizeof(dt_bf16) * ra * lda), *Bh = malloc(sizeof(dt_bf16) * rb * ldb);
    dt_test_fill(A, ra * lda, seed, 1.0f);
    dt_test_fill(B, rb * ldb, seed + 1, 1.0f);
    dt_test_fill(bv, N, seed + 2, 1.0f);
    dt_test_fill(C0, M * ldc, seed + 3, 1.0f);
    bool lp = dt != DT_F32;
    if (lp) {
        to_lp(dt, Ah, A, ra * lda);
        to_lp(dt, Bh, B, rb * ldb);
    }
    memcpy(C1, C0, sizeof(float) * M * ldc);
    memcpy(C2, C0, sizeof(float) * M * ldc);
    memcpy(C3, C0, sizeof(float) * M * ldc);
    const void *a = lp ? (const void *)Ah : A, *b = lp ? (const void *)Bh : B;
    const float *bp = bias ? bv : NULL;
    DT_CHECK_OK(dt_gemm_run(g, &s, a, b, bp, C1));
    dt_gemm_ref(&s, a, b, bp, C2);
    gemm_double(&s, A, B, bp, C3, lda, ldb, ldc);
    /* The padding columns of C must be untouched. */
    bool pad_ok = true;
    for (int m = 0; m < M; m++)
        for (int64_t n = N; n < ldc; n++)
            pad_ok &= C1[m * ldc + n] == C0[m * ldc + n];
    /* Both paths accumulate fp32-exact operands in >= fp32: the error is fp32 rounding. */
    double tol = 1e-11;
    double e_ref = dt_test_nmse(C1, C2, M * ldc), e_dbl = dt_test_nmse(C1, C3, M * ldc);
    DT_CHECK(e_ref < tol && e_dbl < tol && pad_ok,
             "%s %dx%dx%d ta=%d tb=%d acc=%d bias=%d pad=%d: nmse ref %.3g double %.3g pad %d",
             dt_dtype_name(dt), M, N, K, ta, tb, acc, bias, pad, e_ref, e_dbl, pad_ok);
    /* Cached primitive, new buffers: the run must follow the new data handles. */
    for (int64_t i = 0; i < M * ldc; i++)
        C1[i] = C0[i] + 1.0f, C3[i] = C0[i] + 1.0f;
    float *A2 = malloc(sizeof(float) * ra * lda);
    memcpy(A2, A, sizeof(float) * ra * lda);
    for (int64_t i = 0; i < ra * lda; i++)
        A2[i] = -A2[i];
    dt_bf16 *Ah2 = malloc(sizeof(dt_bf16) * ra * lda);
    for (int64_t i = 0; i < ra * lda; i++)
        Ah2[i] = Ah[i] ^ 0x8000u;
    DT_CHECK_OK(dt_gemm_run(g, &s, lp ? (const void *)Ah2 : A2, b, bp, C1));
    gemm_double(&s, A2, B, bp, C3, lda, ldb, ldc);
    e_dbl = dt_test_nmse(C1, C3, M * ldc);
    DT_CHECK(e_dbl < tol, "%s rerun ta=%d tb=%d acc=%d bias=%d pad=%d: nmse %.3g",
             dt_dtype_name(dt), ta, tb, acc, bias, pad, e_dbl);
    free(A), free(B), free(bv), free(C0), free(C1), free(C2), free(C3), free(Ah), free(Bh);
    free(A2), free(Ah2);
}

/* dt_gemm_run_bf16_out against the rounding of the fp32-output run (oneDNN's bf16 kernel
 * sums in fp32 and rounds once, nearest even: the same bits, or where its blocking sums in
 * another order one bf16 ulp away) and against the double reference (bf16 rounding error);
 * the padding of C untouched. */
static void check_bf16_out(dt_gemm *g, int M, int N, int K, bool tb, bool bias, int pad,
                           uint64_t seed) {
    dt_gemm_shape s = {.M = M, .N = N, .K = K, .trans_b = tb, .dtype = DT_BF16};
    int64_t ldc = N + pad;
    if (pad)
        s.ldc = ldc;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *bv = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * M * ldc);
    float *Cd = malloc(sizeof(float) * M * ldc), *Cw = malloc(sizeof(float) * M * ldc);
    dt_bf16 *Ah = malloc(2 * M * K), *Bh = malloc(2 * K * N), *Ch = malloc(2 * M * ldc);
    dt_test_fill(A, M * K, seed, 1.0f);
    dt_test_fill(B, K * N, seed + 1, 1.0f);
    dt_test_fill(bv, N, seed + 2, 1.0f);
    to_lp(DT_BF16, Ah, A, M * K);
    to_lp(DT_BF16, Bh, B, K * N);
    for (int64_t i = 0; i < M * ldc; i++)
        Ch[i] = 0x7fc1; /* a NaN the run must leave in the padding */
    DT_CHECK_OK(dt_gemm_run(g, &s, Ah, Bh, bias ? bv : NULL, C));
    DT_CHECK_OK(dt_gemm_run_bf16_out(g, &s, Ah, Bh, bias ? bv : NULL, Ch));
    dt_gemm_ref(&s, Ah, Bh, bias ? bv : NULL, Cd);
    int far = 0, off = 0;
    bool pad_ok = true;
    for (int m = 0; m < M; m++)
        for (int64_t n = 0; n < ldc; n++) {
            int64_t i = m * ldc + n;
            if (n >= N) {
                pad_ok &= Ch[i] == 0x7fc1;
                Cw[i] = Cd[i] = 0;
                continue;
            }
            int d = (int)Ch[i] - (int)dt_bf16_from_f32(C[i]);
            off += d != 0;
            far += d > 1 || d < -1;
            Cw[i] = dt_bf16_to_f32(Ch[i]);
        }
    double e = dt_test_nmse(Cw, Cd, M * ldc);
    printf("bf16 out %dx%dx%d: %d of %d values one bf16 ulp from the rounded fp32 run\n", M, N, K, off, M * N);
    DT_CHECK(far == 0 && off <= M * N / 100 && pad_ok && e < 1e-4,
             "bf16 out %dx%dx%d tb=%d bias=%d pad=%d: %d values 1 ulp off, %d further, pad %d, "
             "nmse vs double %.3g", M, N, K, tb, bias, pad, off, far, pad_ok, e);
    free(A), free(B), free(bv), free(C), free(Cd), free(Cw), free(Ah), free(Bh), free(Ch);
}

static void check_errors(dt_gemm *g) {
    float x[16] = {0}, bias[4] = {0};
    dt_gemm_shape s = {.M = 2, .N = 2, .K = 2, .accumulate = true};
    DT_CHECK(dt_gemm_run(g, &s, x, x, bias, x) == DT_ERR_ARG, "bias with accumulate accepted");
    s = (dt_gemm_shape){.M = 2, .N = 2, .K = 4, .lda = 3};
    DT_CHECK(dt_gemm_run(g, &s, x, x, NULL, x) == DT_ERR_ARG, "lda < K accepted");
    DT_CHECK(strstr(dt_err_msg(), "2x2x4") != NULL, "error names the shape: %s", dt_err_msg());
    /* K == 0: C = bias, or unchanged when accumulating */
    float c[4] = {5, 5, 5, 5}, b2[2] = {1, 2};
    s = (dt_gemm_shape){.M = 2, .N = 2, .K = 0};
    DT_CHECK_OK(dt_gemm_run(g, &s, x, x, b2, c));
    DT_CHECK(c[0] == 1 && c[1] == 2 && c[2] == 1 && c[3] == 2, "K=0 with bias");
    dt_bf16 h[4] = {0};
    s = (dt_gemm_shape){.M = 2, .N = 2, .K = 2, .dtype = DT_F32};
    DT_CHECK(dt_gemm_run_bf16_out(g, &s, x, x, NULL, h) == DT_ERR_ARG, "bf16 out of fp32 operands");
    s = (dt_gemm_shape){.M = 2, .N = 2, .K = 2, .accumulate = true, .dtype = DT_BF16};
    DT_CHECK(dt_gemm_run_bf16_out(g, &s, x, x, NULL, h) == DT_ERR_ARG, "bf16 out accumulating");
    s = (dt_gemm_shape){.M = 2, .N = 2, .K = 0, .dtype = DT_BF16};
    DT_CHECK_OK(dt_gemm_run_bf16_out(g, &s, x, x, b2, h));
    DT_CHECK(h[0] == 0x3f80 && h[1] == 0x4000 && h[3] == 0x4000, "bf16 out K=0 with bias");
}

static void perf(dt_gemm *g, dt_dtype dt) {
    int M = 1024, N = 2304, K = 768, reps = 5;
    dt_gemm_shape s = {.M = M, .N = N, .K = K, .dtype = dt};
    size_t es = dt_dtype_size(dt);
    void *A = calloc((size_t)M * K, es), *B = calloc((size_t)K * N, es);
    float *C = calloc((size_t)M * N, sizeof(float));
    DT_CHECK_OK(dt_gemm_run(g, &s, A, B, NULL, C)); /* creates the primitive */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = dt_test_seconds();
        DT_CHECK_OK(dt_gemm_run(g, &s, A, B, NULL, C));
        t = dt_test_seconds() - t;
        best = t < best ? t : best;
    }
    printf("perf gemm %s %dx%dx%d: %.1f GFLOP/s (%s)\n", dt_dtype_name(dt), M, N, K,
           2.0 * M * N * K / best / 1e9, dt_gemm_impl_name(g, dt));
    free(A), free(B), free(C);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_gemm *g = NULL;
    DT_CHECK_OK(dt_gemm_init(&g));
    if (!g)
        return DT_TEST_END();
    uint64_t seed = 100;
    for (int d = 0; d < DT_DTYPE_COUNT; d++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int v = 0; v < 5; v++) {
                    bool acc = v == 1 || v == 3, bias = v == 2 || v == 4;
                    int pad = v >= 3 ? 7 : 0;
                    check_case(g, 37, 53, 29, ta, tb, acc, bias, pad, (dt_dtype)d, seed += 10);
                }
    /* big enough for blocked kernels and several threads */
    check_case(g, 130, 257, 300, false, true, false, true, 0, DT_F32, 7);
    check_case(g, 130, 257, 300, true, false, true, false, 3, DT_BF16, 8);
    check_case(g, 130, 257, 300, true, true, false, true, 5, DT_F16, 11);
    check_case(g, 200, 64, 96, false, true, true, false, 0, DT_F16, 12); /* dense widening */
    check_case(g, 1, 1, 1, false, false, false, false, 0, DT_F32, 9);
    check_bf16_out(g, 37, 53, 29, true, true, 0, 40);
    check_bf16_out(g, 37, 53, 29, false, false, 5, 50);
    check_bf16_out(g, 256, 1536, 384, true, true, 0, 60); /* the small GPT's c_fc */
    check_errors(g);
    const char *i32 = dt_gemm_impl_name(g, DT_F32), *i16 = dt_gemm_impl_name(g, DT_BF16);
    const char *ih = dt_gemm_impl_name(g, DT_F16);
    DT_CHECK(i32[0] && i16[0] && ih[0], "impl names '%s' '%s' '%s'", i32, i16, ih);
    printf("impl fp32=%s bf16=%s fp16=%s\n", i32, i16, ih);
    if (dt_test.perf) {
        perf(g, DT_F32);
        perf(g, DT_BF16);
        perf(g, DT_F16);
    }
    dt_gemm_free(g);
    dt_gemm_free(NULL);
    return DT_TEST_END();
}
