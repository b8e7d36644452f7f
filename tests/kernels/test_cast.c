/* Tests for kernels/cast.h: bf16 casts against the scalar rounding in core/dtype.h (and the
 * ties, NaN, Inf corner cases), every fp32 -> bf16 variant this CPU runs against it bit for bit;
 * the fp16 _ref casts against independent definitions (the
 * value formula of every fp16 pattern, and a search for the nearest fp16 with ties to even),
 * and every fp16 variant this CPU runs against _ref, bit for bit (f16->f32 over all 65536
 * inputs); the reductions against double-precision loops, including independence from the
 * thread count. */
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

/* the value of an fp16 pattern from its definition (NaN for NaNs) */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

/* nearest fp16 to x by search, ties to the even pattern; past 65520 (halfway to 2^16, the
 * next value an unbounded exponent would have) the result is inf */
static uint16_t f16_nearest(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isnan(x))
        return 0x7e00; /* compared as "some NaN" */
    if (a >= 65520.0)
        return sign | 0x7c00;
    int lo = 0, hi = 0x7bff; /* largest pattern whose value <= a: values grow with the bits */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f16_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    double below = f16_value((uint16_t)lo), above = lo < 0x7bff ? f16_value(lo + 1) : 65536.0;
    int pick = a - below < above - a   ? lo
               : a - below > above - a ? lo + 1
                                       : (lo & 1 ? lo + 1 : lo);
    return (uint16_t)(sign | pick);
}

static void check_f16(void) {
    /* f16 -> f32: every pattern, the reference against the definition */
    static uint16_t all[65536];
    static float want[65536], got[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    dt_cast_f16_to_f32_ref(want, all, 65536);
    int64_t bad = 0;
    for (int i = 0; i < 65536; i++) {
        double v = f16_value(all[i]);
        bad += isnan(v) ? !isnan(want[i])
                        : ((double)want[i] != v || !signbit(want[i]) != !signbit(v));
    }
    DT_CHECK(bad == 0, "f16->f32 ref: %lld of 65536 differ from the definition", (long long)bad);

    /* f32 -> f16 inputs: edge cases, then random values over the whole fp16 range and beyond */
    enum { N = 200003 };
    float *x = malloc(sizeof(float) * N);
    uint16_t *h = malloc(2 * N), *hr = malloc(2 * N);
    float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f,
                    -1e30f, INFINITY, -INFINITY, NAN, -NAN, 6.1035156e-05f /* 2^-14 */,
                    6.0975552e-05f, 5.9604645e-08f /* 2^-24 */, 2.9802322e-08f /* 2^-25: tie */,
                    2.9802326e-08f, 8.9406967e-08f /* 1.5 * 2^-24: tie, to 2 */, 1e-45f,
                    1.00048828125f /* 1 + 2^-11: tie to 1 */, 1.00146484375f /* tie to up */,
                    2049.0f, 2051.0f, 3.0517578e-05f, 1.0009765625f, -2.5e-06f, 1e-10f};
    int n_edge = (int)(sizeof edge / sizeof *edge);
    for (int i = 0; i < N; i++) {
        uint64_t r = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        r ^= r >> 29;
        r *= 0xbf58476d1ce4e5b9ull;
        r ^= r >> 32;
        if (i < n_edge) {
            x[i] = edge[i];
        } else if (i % 3 == 0) { /* exactly halfway between two neighbouring fp16 values */
            uint16_t k = (uint16_t)(r % 0x7bff);
            x[i] = (float)((f16_value(k) + f16_value(k + 1)) / 2) * (r & (1ull << 40) ? -1 : 1);
        } else { /* any float whose magnitude is in [2^-30, 2^17) */
            uint32_t u = (uint32_t)(r >> 16) & 0x807fffffu;
            u |= (uint32_t)(97 + (r % 47)) << 23;
            memcpy(&x[i], &u, 4);
        }
    }
    dt_cast_f32_to_f16_ref(hr, x, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t w = f16_nearest(x[i]);
        bad += isnan(x[i]) ? (hr[i] & 0x7c00) != 0x7c00 || !(hr[i] & 0x3ff) : hr[i] != w;
    }
    DT_CHECK(bad == 0, "f32->f16 ref: %lld of %d differ from the nearest-even search",
             (long long)bad, N);
    DT_CHECK(hr[4] == 0x7bff && hr[5] == 0x7bff && hr[6] == 0x7c00 && hr[7] == 0xfc00 &&
                 hr[17] == 0 && hr[19] == 2 && hr[21] == 0x3c00 && hr[22] == 0x3c02,
             "f32->f16 edges: %04x %04x %04x %04x %04x %04x %04x %04x", hr[4], hr[5], hr[6],
             hr[7], hr[17], hr[19], hr[21], hr[22]);

    /* every variant the CPU runs against _ref, bit for bit, NaNs included; odd lengths and
     * offsets reach the scalar tails */
    dt_cast_f16_variant v[DT_CAST_F16_MAX_VARIANTS];
    int nv = dt_cast_f16_variants(v);
    DT_CHECK(nv >= 1 && strcmp(v[nv - 1].name, "ref") == 0, "variant list ends with ref");
    for (int k = 0; k < nv; k++) {
        printf("fp16 cast variant %s\n", v[k].name);
        memset(got, 0, sizeof got);
        v[k].to_f32(got, all, 65536);
        DT_CHECK(memcmp(got, want, sizeof got) == 0, "%s f16->f32 differs from ref", v[k].name);
        v[k].to_f32(got + 1, all + 3, 1001);
        DT_CHECK(memcmp(got + 1, want + 3, 1001 * 4) == 0, "%s f16->f32 tail", v[k].name);
        memset(h, 0, 2 * N);
        v[k].to_f16(h, x, N);
        DT_CHECK(memcmp(h, hr, 2 * N) == 0, "%s f32->f16 differs from ref", v[k].name);
        v[k].to_f16(h + 1, x + 5, 37);
        DT_CHECK(memcmp(h + 1, hr + 5, 2 * 37) == 0, "%s f32->f16 tail", v[k].name);
    }
    /* the threaded entry points (the best variant) over a multi-block array */
    dt_cast_f32_to_f16(h, x, N);
    DT_CHECK(memcmp(h, hr, 2 * N) == 0, "dt_cast_f32_to_f16 differs from ref");
    float *y = malloc(sizeof(float) * N), *yr = malloc(sizeof(float) * N);
    dt_cast_f16_to_f32(y, hr, N);
    dt_cast_f16_to_f32_ref(yr, hr, N);
    DT_CHECK(memcmp(y, yr, sizeof(float) * N) == 0, "dt_cast_f16_to_f32 differs from ref");
    dt_cast_f32_to_lp(DT_F16, h, x, N);
    DT_CHECK(memcmp(h, hr, 2 * N) == 0, "dt_cast_f32_to_lp(DT_F16)");
    dt_cast_f32_to_lp(DT_BF16, h, x, 100);
    DT_CHECK(h[2] == dt_bf16_from_f32(x[2]) && h[99] == dt_bf16_from_f32(x[99]),
             "dt_cast_f32_to_lp(DT_BF16)");
    free(x), free(h), free(hr), free(y), free(yr);
}

/* every fp32 -> bf16 variant against dt_bf16_from_f32, bit for bit: a sweep of patterns
 * over every exponent (ties, NaN payloads, infinities, subnormals: 1 in 2^12 of all floats
 * plus every pattern around the rounding point of each exponent), at ragged lengths */
static void check_bf16_variants(void) {
    int64_t n = (int64_t)1 << 20;
    float *x = malloc(sizeof(float) * n);
    dt_bf16 *h = malloc(sizeof(dt_bf16) * n), *want = malloc(sizeof(dt_bf16) * n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t near = ((uint32_t)(i & 0x1ff) << 23) | 0x7f00u | ((uint32_t)i >> 9 & 0xff);
        uint32_t u = i < n / 2 ? (uint32_t)i << 12 : near; /* the sweep, then near the halves */
        x[i] = from_bits(u ^ (i & 1 ? 0x80000000u : 0) ^ (i % 3 == 0 ? 0x8000u : 0));
    }
    for (int64_t i = 0; i < n; i++)
        want[i] = dt_bf16_from_f32(x[i]);
    dt_cast_f32_to_bf16_ref(h, x, n);
    DT_CHECK(!memcmp(h, want, sizeof(dt_bf16) * n), "bf16 _ref differs from dt_bf16_from_f32");
    dt_cast_bf16_variant v[DT_CAST_BF16_MAX_VARIANTS];
    int nv = dt_cast_bf16_variants(v);
    DT_CHECK(!strcmp(v[nv - 1].name, "ref"), "the last bf16 variant is %s", v[nv - 1].name);
    int64_t lens[] = {n, 15, 17, 1000003 % n};
    for (int k = 0; k < nv; k++)
        for (int l = 0; l < 4; l++) {
            memset(h, 0xab, sizeof(dt_bf16) * n);
            v[k].to_bf16(h, x, lens[l]);
            int64_t bad = 0;
            for (int64_t i = 0; i < lens[l]; i++)
                bad += h[i] != want[i];
            bad += lens[l] < n && h[lens[l]] != 0xabab; /* nothing past the end */
            DT_CHECK(bad == 0, "bf16 variant %s n=%lld: %lld mismatches", v[k].name,
                     (long long)lens[l], (long long)bad);
        }
    free(x), free(h), free(want);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_f16();
    check_bf16_variants();
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
    dt_zero_f32(y, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += y[i] != 0.0f || signbit(y[i]);
    DT_CHECK(bad == 0, "zero: %lld elements not +0", (long long)bad);

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
        dt_cast_bf16_variant bv[DT_CAST_BF16_MAX_VARIANTS];
        for (int k = 0, nv = dt_cast_bf16_variants(bv); k < nv; k++) {
            t = dt_test_seconds();
            bv[k].to_bf16(b, a, big);
            t = dt_test_seconds() - t;
            printf("perf cast f32->bf16 %s n=%lld: %.2f GB/s\n", bv[k].name, (long long)big,
                   6.0 * big / t / 1e9);
        }
        dt_cast_f16_variant v[DT_CAST_F16_MAX_VARIANTS];
        for (int k = 0, nv = dt_cast_f16_variants(v); k < nv; k++) {
            t = dt_test_seconds();
            v[k].to_f16(b, a, big);
            t = dt_test_seconds() - t;
            printf("perf cast f32->f16 %s n=%lld: %.2f GB/s\n", v[k].name, (long long)big,
                   6.0 * big / t / 1e9);
        }
        t = dt_test_seconds();
        volatile double s = 0;
        for (int k = 0; k < 5; k++)
            s += dt_sumsq(a, big);
        t = (dt_test_seconds() - t) / 5;
        printf("perf sumsq n=%lld: %.2f GB/s\n", (long long)big, 4.0 * big / t / 1e9);
        t = dt_test_seconds();
        for (int k = 0; k < 5; k++)
            dt_zero_f32(a, big);
        t = (dt_test_seconds() - t) / 5;
        printf("perf zero n=%lld: %.2f GB/s\n", (long long)big, 4.0 * big / t / 1e9);
        free(a), free(b);
    }
    free(x), free(y), free(r), free(h);
    return DT_TEST_END();
}
