/* Column sums and embedding gather/scatter. Columns are split across threads in contiguous
 * ranges, so each output element is summed by one thread in row order: deterministic for any
 * thread count, and no per-thread partial buffers are needed. The column sum walks its range
 * row by row (contiguous loads, the running sums in L1), and can write the bf16 copy of what
 * it reads in the same pass (the backward's dy: its bias gradient and its matmul operand). */
#include "kernels/reduce.h"

#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/bf16_vec.h"
#include "kernels/cast.h"

#define COL_BLOCK 64
#define SUM_WIDTH 4096      /* columns whose running sums one pass over the rows keeps (16 KiB) */
#define SUM_PAR_MIN 65536   /* elements below which one thread sums */

/* ---- column sums with an optional bf16 copy: one single-threaded body per ISA ----------- */

/* acc[0:w] += rows [0, N) of x[:, 0:w] (row stride C), in row order; lp (or NULL, same
 * layout) gets each element rounded to bf16 as dt_bf16_from_f32 does. */
typedef void (*sum_rows_fn)(float *acc, dt_bf16 *lp, const float *x, int N, int64_t C, int w);

static void sum_rows_ref(float *acc, dt_bf16 *lp, const float *x, int N, int64_t C, int w) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < w; j++) {
            acc[j] += x[i * C + j];
            if (lp)
                lp[i * C + j] = dt_bf16_from_f32(x[i * C + j]);
        }
}

__attribute__((target("avx512f"))) static void sum_rows_avx512(float *acc, dt_bf16 *lp,
                                                               const float *x, int N,
                                                               int64_t C, int w) {
    int w16 = w & ~15;
    for (int i = 0; i < N; i++) {
        const float *r = x + i * C;
        if (lp) {
            dt_bf16 *o = lp + i * C;
            for (int j = 0; j < w16; j += 16) {
                __m512 v = _mm512_loadu_ps(r + j);
                _mm512_storeu_ps(acc + j, _mm512_add_ps(_mm512_loadu_ps(acc + j), v));
                _mm256_storeu_si256((__m256i *)(o + j), dt_bf16_round_avx512(v));
            }
        } else {
            for (int j = 0; j < w16; j += 16)
                _mm512_storeu_ps(acc + j,
                                 _mm512_add_ps(_mm512_loadu_ps(acc + j), _mm512_loadu_ps(r + j)));
        }
    }
    if (w16 < w)
        sum_rows_ref(acc + w16, lp ? lp + w16 : NULL, x + w16, N, C, w - w16);
}

__attribute__((target("avx2"))) static void sum_rows_avx2(float *acc, dt_bf16 *lp,
                                                          const float *x, int N, int64_t C,
                                                          int w) {
    int w16 = w & ~15;
    for (int i = 0; i < N; i++) {
        const float *r = x + i * C;
        if (lp) {
            dt_bf16 *o = lp + i * C;
            for (int j = 0; j < w16; j += 16) {
                __m256 a = _mm256_loadu_ps(r + j), b = _mm256_loadu_ps(r + j + 8);
                _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), a));
                _mm256_storeu_ps(acc + j + 8, _mm256_add_ps(_mm256_loadu_ps(acc + j + 8), b));
                _mm256_storeu_si256((__m256i *)(o + j), dt_bf16_round_avx2(a, b));
            }
        } else {
            for (int j = 0; j < w16; j += 8)
                _mm256_storeu_ps(acc + j,
                                 _mm256_add_ps(_mm256_loadu_ps(acc + j), _mm256_loadu_ps(r + j)));
        }
    }
    if (w16 < w)
        sum_rows_ref(acc + w16, lp ? lp + w16 : NULL, x + w16, N, C, w - w16);
}

/* Columns [j0, j1) of the whole kernel, in strips of SUM_WIDTH: the sums start at 0 and add
 * rows in order (the bits of the _ref loop), then set or add onto out. */
static void sum_columns(sum_rows_fn f, float *out, bool accumulate, dt_bf16 *lp, const float *x,
                        int N, int C, int j0, int j1) {
    float acc[SUM_WIDTH];
    for (int a = j0; a < j1; a += SUM_WIDTH) {
        int w = j1 - a < SUM_WIDTH ? j1 - a : SUM_WIDTH;
        memset(acc, 0, (size_t)w * sizeof *acc);
        f(acc, lp ? lp + a : NULL, x + a, N, C, w);
        for (int j = 0; j < w; j++)
            out[a + j] = accumulate ? out[a + j] + acc[j] : acc[j];
    }
}

#define SUM_WHOLE(fn)                                                                         \
    static void fn##_whole(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N,   \
                           int C) {                                                           \
        sum_columns(fn, out, accumulate, lp, x, N, C, 0, C);                                  \
    }
SUM_WHOLE(sum_rows_avx512)
SUM_WHOLE(sum_rows_avx2)
SUM_WHOLE(sum_rows_ref)

int dt_colsum_variants(dt_colsum_variant out[DT_COLSUM_MAX_VARIANTS]) {
    int n = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        out[n++] = (dt_colsum_variant){"avx512f", sum_rows_avx512_whole};
    if (__builtin_cpu_supports("avx2"))
        out[n++] = (dt_colsum_variant){"avx2", sum_rows_avx2_whole};
    out[n++] = (dt_colsum_variant){"ref", sum_rows_ref_whole};
    return n;
}

static sum_rows_fn best_sum_rows(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return sum_rows_avx512;
    if (__builtin_cpu_supports("avx2"))
        return sum_rows_avx2;
    return sum_rows_ref;
}

/* Thread t of n takes the columns of 16-column groups [g t / n, g (t+1) / n): whole vectors,
 * and every column is summed by one thread in row order whatever the split. */
static void colsum(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N, int C) {
    sum_rows_fn f = best_sum_rows();
    int groups = (C + 15) / 16;
#pragma omp parallel if ((int64_t)N * C >= SUM_PAR_MIN)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int j0 = 16 * (int)((int64_t)groups * t / nt);
        int j1 = 16 * (int)((int64_t)groups * (t + 1) / nt);
        if (j1 > C)
            j1 = C;
        if (j0 < j1)
            sum_columns(f, out, accumulate, lp, x, N, C, j0, j1);
    }
}

void dt_colsum_accumulate(float *out, const float *x, int N, int C) {
    colsum(out, true, NULL, x, N, C);
}

void dt_colsum_set(float *out, const float *x, int N, int C) { colsum(out, false, NULL, x, N, C); }

/* One pass on one thread (1024 x 768: 0.08 ms against 0.19 ms for the two passes). On
 * several, each thread writing its columns' part of every row of lp gained nothing (2 threads:
 * 0.110 vs 0.118 ms with passive waiting) and lost much with spinning threads (0.40 vs 0.07
 * ms), so they take the row-block cast, then the column sum; the bits are the same either way. */
void dt_colsum_cast_bf16(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N,
                         int C) {
    if (lp && (int64_t)N * C >= SUM_PAR_MIN && omp_get_max_threads() > 1) {
        dt_cast_f32_to_bf16(lp, x, (int64_t)N * C);
        lp = NULL;
    }
    colsum(out, accumulate, lp, x, N, C);
}

void dt_colsum_cast_bf16_ref(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N,
                             int C) {
    for (int j = 0; j < C; j++) {
        float s = 0;
        for (int i = 0; i < N; i++)
            s += x[(int64_t)i * C + j];
        out[j] = accumulate ? out[j] + s : s;
    }
    for (int64_t i = 0; lp && i < (int64_t)N * C; i++)
        lp[i] = dt_bf16_from_f32(x[i]);
}

void dt_rows_gather(float *y, const float *table, const int32_t *idx, int64_t first,
                    int64_t count, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *dst = y + (int64_t)i * C;
        int64_t r = (int64_t)idx[i] - first;
        if (r >= 0 && r < count)
            memcpy(dst, table + r * C, (size_t)C * sizeof *dst);
        else
            memset(dst, 0, (size_t)C * sizeof *dst);
    }
}

void dt_rows_scatter_add(float *dtable, const float *dy, const int32_t *idx, int64_t first,
                         int64_t count, int N, int C) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int j0 = blk * COL_BLOCK, j1 = j0 + COL_BLOCK < C ? j0 + COL_BLOCK : C;
        for (int i = 0; i < N; i++) {
            int64_t r = (int64_t)idx[i] - first;
            if (r < 0 || r >= count)
                continue;
            const float *g = dy + (int64_t)i * C;
            float *dt = dtable + r * C;
            for (int j = j0; j < j1; j++)
                dt[j] += g[j];
        }
    }
}

void dt_rows_add_positions(float *y, const float *pos, int64_t row0, int T, int N, int C,
                           int n_chunks, const int *chunk) {
    int Tc = T / n_chunks;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *dst = y + (int64_t)i * C;
        int t = (int)((row0 + i) % T);
        const float *p = pos + ((int64_t)chunk[t / Tc] * Tc + t % Tc) * C;
        for (int j = 0; j < C; j++)
            dst[j] += p[j];
    }
}

void dt_rows_add_indexed(float *y, const float *table, const int32_t *idx, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *dst = y + (int64_t)i * C;
        const float *p = table + (int64_t)idx[i] * C;
        for (int j = 0; j < C; j++)
            dst[j] += p[j];
    }
}

void dt_rows_positions_grad(float *dpos, const float *dy, int64_t row0, int T, int N, int C) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int j0 = blk * COL_BLOCK, j1 = j0 + COL_BLOCK < C ? j0 + COL_BLOCK : C;
        for (int i = 0; i < N; i++) {
            const float *g = dy + (int64_t)i * C;
            float *dp = dpos + ((row0 + i) % T) * C;
            for (int j = j0; j < j1; j++)
                dp[j] += g[j];
        }
    }
}
