/* Tests for kernels/cast.h: bf16 casts against the scalar rounding in core/dtype.h (and the
 * ties, NaN, Inf corner cases), and the reductions against double-precision loops, including
 * independence from the thread count. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/cast.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    const int64_t n = 300001; /* several blocks plus a ragged tail */
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *r = malloc(sizeof(float) * n);
    dt_bf16 *h = malloc(sizeof(dt_bf16) * n);
    dt_test_fill(x, n, 1, 3.0f);
    /* corner cases: ties to even both ways, NaN, infinities, largest finite, denormal */
    uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffa00000u, 0x7f800000u,
                          0xff800000u, 0x7f7fffffu, 0x00000001u, 0x80000000u, 0x3f80ffffu};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[i * 7] = from_bits(special[i]);

    dt_cast_f32_to_bf16(h, x, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += h[i] != dt_bf16_from_f32(x[i]);
    DT_CHECK(bad == 0, "f32->bf16: %lld mismatches with dt_bf16_from_f32", (long long)bad);
    DT_CHECK(h[0] == 0x3f80 && h[7] == 0x3f82, "ties to even: %04x %04x", h[0], h[7]);
    DT_CHECK(isnan(dt_bf16_to_f32(h[14])) && isnan(dt_bf16_to_f32(h[21])), "NaN stays NaN");
    DT_CHECK(h[28] == 0x7f80 && h[35] == 0xff80 && h[42] == 0x7f80, "inf, overflow to inf");

    dt_cast_bf16_to_f32(y, h, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&y[i], &(float){dt_bf16_to_f32(h[i])}, 4) != 0;
    DT_CHECK(bad == 0, "bf16->f32: %lld mismatches", (long long)bad);

    memcpy(r, x, sizeof(float) * n);
    dt_round_bf16_inplace(r, n);
    DT_CHECK(memcmp(r, y, sizeof(float) * n) == 0, "round in place == cast there and back");

    /* reductions on finite data */
    dt_test_fill(x, n, 2, 3.0f);
    double want = 0;
    for (int64_t i = 0; i < n; i++)
        want += (double)x[i] * x[i];
    double got = dt_sumsq(x, n);
    DT_CHECK_CLOSE(got, want, 1e-12);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    double got1 = dt_sumsq(x, n);
    omp_set_num_threads(3);
    double got3 = dt_sumsq(x, n);
    omp_set_num_threads(nt);
    DT_CHECK(got == got1 && got == got3, "sumsq depends on threads: %.17g %.17g %.17g", got,
             got1, got3);
    DT_CHECK(dt_sumsq(x, 5) == (double)x[0] * x[0] + (double)x[1] * x[1] +
                                   (double)x[2] * x[2] + (double)x[3] * x[3] +
                                   (double)x[4] * x[4],
             "short sumsq");
    DT_CHECK(dt_sumsq(x, 0) == 0, "empty sumsq");

    memcpy(y, x, sizeof(float) * n);
    dt_scale_inplace(y, 0.37f, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += y[i] != x[i] * 0.37f;
    DT_CHECK(bad == 0, "scale: %lld mismatches", (long long)bad);
    memcpy(r, y, sizeof(float) * n);
    dt_add_inplace(y, x, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += y[i] != r[i] + x[i];
    DT_CHECK(bad == 0, "add: %lld mismatches", (long long)bad);

    if (dt_test.perf) {
        int64_t big = 1 << 24;
        float *a = malloc(sizeof(float) * big);
        dt_bf16 *b = malloc(sizeof(dt_bf16) * big);
        dt_test_fill(a, big, 3, 1.0f);
        double t = dt_test_seconds();
        for (int k = 0; k < 5; k++)
            dt_cast_f32_to_bf16(b, a, big);
        t = (dt_test_seconds() - t) / 5;
        printf("perf cast f32->bf16 n=%lld: %.2f GB/s\n", (long long)big, 6.0 * big / t / 1e9);
        t = dt_test_seconds();
        volatile double s = 0;
        for (int k = 0; k < 5; k++)
            s += dt_sumsq(a, big);
        t = (dt_test_seconds() - t) / 5;
        printf("perf sumsq n=%lld: %.2f GB/s\n", (long long)big, 4.0 * big / t / 1e9);
        free(a), free(b);
    }
    free(x), free(y), free(r), free(h);
    return DT_TEST_END();
}
