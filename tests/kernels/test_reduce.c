/* Tests for kernels/reduce.h's column sums: every variant this CPU runs of the fused column
 * sum + bf16 cast against the _ref loops, bit for bit (ragged widths, strips wider than one
 * pass, NaN/Inf/tie/subnormal inputs); _ref's sums against double precision and its bf16
 * copy against dt_cast_f32_to_bf16; the threaded kernels against _ref at 1, 2 and 3 threads;
 * the gathers and scatters against plain loops. --perf: fused vs cast + sum, GB/s. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/cast.h"
#include "kernels/reduce.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* test data with the rounding corner cases sprinkled in */
static void fill(float *x, int64_t n, uint64_t seed) {
    dt_test_fill(x, n, seed, 2.0f);
    static const uint32_t special[] = {0x7fc00000u, 0xff800001u, 0x7f800000u, 0xff800000u,
                                       0x3f808000u, 0x3f818000u, 0x00000001u, 0x807fffffu,
                                       0x7f7fffffu, 0x80000000u};
    for (int64_t i = 7, k = 0; i < n; i += 997, k++)
        x[i] = from_bits(special[k % 10]);
}

static bool same_bits(const float *a, const float *b, int64_t n) {
    return !memcmp(a, b, sizeof(float) * n);
}

static void check_shape(int N, int C) {
    int64_t n = (int64_t)N * C;
    float *x = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * C);
    float *got = malloc(sizeof(float) * C), *base = malloc(sizeof(float) * C);
    dt_bf16 *lw = malloc(2 * n), *lg = malloc(2 * n), *lc = malloc(2 * n);
    fill(x, n, 11 + N + C);
    dt_test_fill(base, C, 5, 1.0f);
    /* _ref: its bf16 copy is the cast kernel's, its finite sums match double precision */
    dt_colsum_cast_bf16_ref(want, false, lw, x, N, C);
    dt_cast_f32_to_bf16(lc, x, n);
    DT_CHECK(!memcmp(lw, lc, 2 * n), "N=%d C=%d: _ref bf16 copy differs from the cast", N, C);
    int far = 0, finite_cols = 0;
    for (int j = 0; j < C; j++) {
        double s = 0, a = 0;
        for (int i = 0; i < N; i++)
            s += x[(int64_t)i * C + j], a += fabs(x[(int64_t)i * C + j]);
        if (!isfinite(s) || a > 1e30)
            continue;
        finite_cols++;
        far += fabs(want[j] - s) > 1e-6 * a + 1e-30;
    }
    DT_CHECK(far == 0 && finite_cols > 0, "N=%d C=%d: %d of %d _ref sums far from double", N, C,
             far, finite_cols);
    dt_colsum_variant v[DT_COLSUM_MAX_VARIANTS];
    int nv = dt_colsum_variants(v);
    DT_CHECK(!strcmp(v[nv - 1].name, "ref"), "the last variant is %s, not ref", v[nv - 1].name);
    for (int k = 0; k < nv; k++)
        for (int acc = 0; acc < 2; acc++) {
            float *w2 = malloc(sizeof(float) * C);
            memcpy(w2, base, sizeof(float) * C);
            dt_colsum_cast_bf16_ref(w2, acc, NULL, x, N, C);
            memcpy(got, base, sizeof(float) * C);
            memset(lg, 0xab, 2 * n);
            v[k].run(got, acc, lg, x, N, C);
            DT_CHECK(same_bits(got, w2, C), "%s N=%d C=%d acc=%d: sums differ from _ref",
                     v[k].name, N, C, acc);
            DT_CHECK(!memcmp(lg, lw, 2 * n), "%s N=%d C=%d: bf16 copy differs", v[k].name, N, C);
            memcpy(got, base, sizeof(float) * C);
            v[k].run(got, acc, NULL, x, N, C); /* without the copy */
            DT_CHECK(same_bits(got, w2, C), "%s N=%d C=%d acc=%d: sums without the copy differ",
                     v[k].name, N, C, acc);
            free(w2);
        }
    /* threaded, any thread count: the bits of _ref; _set as accumulating onto zeros */
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        memset(lg, 0xab, 2 * n);
        dt_colsum_cast_bf16(got, false, lg, x, N, C);
        DT_CHECK(same_bits(got, want, C) && !memcmp(lg, lw, 2 * n),
                 "threads=%d N=%d C=%d: fused kernel differs from _ref", t, N, C);
        dt_colsum_set(got, x, N, C);
        DT_CHECK(same_bits(got, want, C), "threads=%d N=%d C=%d: colsum_set differs", t, N, C);
        memset(got, 0, sizeof(float) * C);
        dt_colsum_accumulate(got, x, N, C);
        DT_CHECK(same_bits(got, want, C), "threads=%d N=%d C=%d: accumulate onto 0 differs", t,
                 N, C);
        memcpy(got, base, sizeof(float) * C);
        dt_colsum_accumulate(got, x, N, C);
        int bad = 0;
        for (int j = 0; j < C; j++) {
            float w = base[j] + want[j];
            bad += memcmp(&got[j], &w, 4) != 0;
        }
        DT_CHECK(bad == 0, "threads=%d N=%d C=%d: accumulate: %d columns differ", t, N, C, bad);
    }
    omp_set_num_threads(2);
    free(x), free(want), free(got), free(base), free(lw), free(lg), free(lc);
}

/* gather / scatter / positions against plain loops over a shard of the vocabulary */
static void check_rows(void) {
    enum { N = 37, C = 70, V = 20, T = 5 };
    int64_t first = 4, count = 10;
    int32_t idx[N];
    float table[V * C], dy[N * C], y[N * C], dt[V * C], want[V * C], pos[T * C];
    for (int i = 0; i < N; i++)
        idx[i] = (i * 7 + 3) % V;
    dt_test_fill(table, V * C, 1, 1.0f);
    dt_test_fill(dy, N * C, 2, 1.0f);
    dt_test_fill(pos, T * C, 3, 1.0f);
    dt_rows_gather(y, table, idx, first, count, N, C);
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) {
            int64_t r = idx[i] - first;
            bad += y[i * C + j] != (r >= 0 && r < count ? table[r * C + j] : 0.0f);
        }
    DT_CHECK(bad == 0, "gather: %d mismatches", bad);
    memset(dt, 0, sizeof dt);
    memset(want, 0, sizeof want);
    dt_rows_scatter_add(dt, dy, idx, first, count, N, C);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++)
            if (idx[i] - first >= 0 && idx[i] - first < count)
                want[(idx[i] - first) * C + j] += dy[i * C + j];
    DT_CHECK(same_bits(dt, want, V * C), "scatter_add differs from the loop");
    memset(dt, 0, sizeof dt);
    memset(want, 0, sizeof want);
    dt_rows_positions_grad(dt, dy, 3, T, N, C);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++)
            want[((3 + i) % T) * C + j] += dy[i * C + j];
    DT_CHECK(same_bits(dt, want, T * C), "positions_grad differs from the loop");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_shape(1, 1);
    check_shape(5, 15);
    check_shape(33, 17);
    check_shape(64, 384);
    check_shape(100, 770);  /* ragged, several groups per thread */
    check_shape(9, 4100);   /* wider than one pass's strip */
    check_shape(300, 1000); /* above the parallel threshold */
    check_rows();
    if (dt_test.perf) {
        int N = 1024, C = 3072, reps = 30;
        int64_t n = (int64_t)N * C;
        float *x = malloc(sizeof(float) * n), *db = calloc(C, sizeof(float));
        dt_bf16 *lp = malloc(2 * n);
        dt_test_fill(x, n, 1, 1.0f);
        /* the best of reps: the machine may be shared */
        double fused = 1e9, split = 1e9, sum = 1e9;
        for (int r = 0; r < reps; r++) {
            double t = dt_test_seconds();
            dt_colsum_cast_bf16(db, false, lp, x, N, C);
            fused = fmin(fused, dt_test_seconds() - t);
            t = dt_test_seconds();
            dt_cast_f32_to_bf16(lp, x, n);
            dt_colsum_set(db, x, N, C);
            split = fmin(split, dt_test_seconds() - t);
            t = dt_test_seconds();
            dt_colsum_set(db, x, N, C);
            sum = fmin(sum, dt_test_seconds() - t);
        }
        printf("perf colsum+cast N=%d C=%d fused: %.3f ms, %.1f GB/s\n", N, C, fused * 1e3,
               6.0 * n / fused / 1e9);
        printf("perf colsum+cast N=%d C=%d cast then colsum: %.3f ms\n", N, C, split * 1e3);
        printf("perf colsum N=%d C=%d: %.3f ms, %.1f GB/s\n", N, C, sum * 1e3,
               4.0 * n / sum / 1e9);
        free(x), free(db), free(lp);
    }
    return DT_TEST_END();
}
