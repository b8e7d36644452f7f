/* LayerNorm and RMSNorm kernels (see norm.h), after llm.c's layernorm_forward/_backward.
 *
 * Threads split rows for y and dx, and split columns into COL_BLOCK-wide strips for dw/db:
 * each thread walks every row of its own strips, so each weight gradient is summed in row order
 * whatever the thread count (bit-exact resume relies on it) and no per-thread scratch is needed.
 * Row sums use fixed lanes (LANES partial sums), again independent of threads. Row bodies are
 * built for several ISAs (target_clones). Stateless, allocation-free; _ref twins are plain C.
 */
#include "kernels/norm.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LANES 16
#define COL_BLOCK 64
#define PAR_MIN 32768 /* elements below which one thread is faster than a parallel region */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* sum(a[i]*b[i]) (b NULL: sum(a[i])) in fixed lane order so the compiler may vectorise it
 * without reassociating (no -ffast-math needed). */
static inline float dot_lanes(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += a[i + l] * (b ? b[i + l] : 1.0f);
    for (int l = 0; i < n; i++, l++)
        acc[l] += a[i] * (b ? b[i] : 1.0f);
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* sum((x[i]-mu)^2): the two-pass variance, free of the E[x^2]-E[x]^2 cancellation. */
static inline float centered_sumsq(const float *x, float mu, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += (x[i + l] - mu) * (x[i + l] - mu);
    for (int l = 0; i < n; i++, l++)
        acc[l] += (x[i] - mu) * (x[i] - mu);
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

CLONES static void ln_fwd_row(float *restrict y, float *mean, float *rstd, const float *restrict x,
                              const float *restrict w, const float *restrict b, int C, float eps) {
    float mu = dot_lanes(x, NULL, C) / C;
    float rs = 1.0f / sqrtf(centered_sumsq(x, mu, C) / C + eps);
    for (int i = 0; i < C; i++)
        y[i] = (x[i] - mu) * rs * w[i] + b[i];
    *mean = mu;
    *rstd = rs;
}

/* round to nearest even, NaN kept quiet (dt_cast_f32_to_bf16's bits), branch-free */
static inline dt_bf16 to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (dt_bf16)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* ln_fwd_row / rms_fwd_row with a bf16 y: the same statistics and expression, then rounded */
CLONES static void ln_fwd_row_bf16(dt_bf16 *restrict y, float *mean, float *rstd,
                                   const float *restrict x, const float *restrict w,
                                   const float *restrict b, int C, float eps) {
    float mu = dot_lanes(x, NULL, C) / C;
    float rs = 1.0f / sqrtf(centered_sumsq(x, mu, C) / C + eps);
    for (int i = 0; i < C; i++)
        y[i] = to_bf16((x[i] - mu) * rs * w[i] + b[i]);
    *mean = mu;
    *rstd = rs;
}

CLONES static void rms_fwd_row_bf16(dt_bf16 *restrict y, float *rstd, const float *restrict x,
                                    const float *restrict w, int C, float eps) {
    float rs = 1.0f / sqrtf(dot_lanes(x, x, C) / C + eps);
    for (int i = 0; i < C; i++)
        y[i] = to_bf16(x[i] * rs * w[i]);
    *rstd = rs;
}

/* dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
 * (the LayerNorm input gradient; llm.c layernorm_backward). */
CLONES static void ln_bwd_row(float *restrict dx, const float *restrict dy, const float *restrict x,
                              const float *restrict w, float mu, float rs, int C) {
    /* Two separate lane loops: fused into one, GCC interleaves the accumulators with shuffles
     * and runs several times slower. */
    float s1 = dot_lanes(dy, w, C);
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += dy[i + l] * w[i + l] * ((x[i + l] - mu) * rs);
    for (int l = 0; i < C; i++, l++)
        acc[l] += dy[i] * w[i] * ((x[i] - mu) * rs);
    float s2 = 0;
    for (int l = 0; l < LANES; l++)
        s2 += acc[l];
    float m1 = s1 / C, m2 = s2 / C;
    for (i = 0; i < C; i++) {
        float norm = (x[i] - mu) * rs;
        dx[i] += (dy[i] * w[i] - m1 - norm * m2) * rs;
    }
}

/* dw[c] += sum_n dy[n,c] * norm[n,c], db[c] += sum_n dy[n,c] over one strip of nc columns
 * (db NULL for RMSNorm, mean NULL meaning 0). Double accumulators: N may be tens of
 * thousands of rows. */
CLONES static void norm_dw_strip(float *dw, float *db, const float *dy, const float *x,
                                 const float *mean, const float *rstd, int N, int C, int nc) {
    double aw[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0};
    for (int64_t n = 0; n < N; n++) {
        const float *dyr = dy + n * C, *xr = x + n * C;
        float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
        for (int c = 0; c < nc; c++) {
            aw[c] += (double)(dyr[c] * ((xr[c] - mu) * rs));
            ab[c] += (double)dyr[c];
        }
    }
    for (int c = 0; c < nc; c++)
        dw[c] += (float)aw[c];
    if (db)
        for (int c = 0; c < nc; c++)
            db[c] += (float)ab[c];
}

CLONES static void rms_fwd_row(float *restrict y, float *rstd, const float *restrict x,
                               const float *restrict w, int C, float eps) {
    float rs = 1.0f / sqrtf(dot_lanes(x, x, C) / C + eps);
    for (int i = 0; i < C; i++)
        y[i] = x[i] * rs * w[i];
    *rstd = rs;
}

/* dx += rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dy * w. */
CLONES static void rms_bwd_row(float *restrict dx, const float *restrict dy,
                               const float *restrict x, const float *restrict w, float rs, int C) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= C; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += dy[i + l] * w[i + l] * (x[i + l] * rs);
    for (int l = 0; i < C; i++, l++)
        acc[l] += dy[i] * w[i] * (x[i] * rs);
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    float m = s / C;
    for (i = 0; i < C; i++)
        dx[i] += (dy[i] * w[i] - x[i] * rs * m) * rs;
}

void dt_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        ln_fwd_row(y + n * C, &mean[n], &rstd[n], x + n * C, w, b, C, eps);
}

void dt_layernorm_forward_bf16(dt_bf16 *y, float *mean, float *rstd, const float *x,
                               const float *w, const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        ln_fwd_row_bf16(y + n * C, &mean[n], &rstd[n], x + n * C, w, b, C, eps);
}

void dt_rmsnorm_forward_bf16(dt_bf16 *y, float *rstd, const float *x, const float *w, int N,
                             int C, float eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        rms_fwd_row_bf16(y + n * C, &rstd[n], x + n * C, w, C, eps);
}

void dt_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const float *mean, const float *rstd, int N, int C) {
    int n_strips = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel if ((int64_t)N * C >= PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (int64_t n = 0; n < N; n++)
            ln_bwd_row(dx + n * C, dy + n * C, x + n * C, w, mean[n], rstd[n], C);
#pragma omp for schedule(static)
        for (int s = 0; s < n_strips; s++) {
            int c0 = s * COL_BLOCK, nc = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
            norm_dw_strip(dw + c0, db + c0, dy + c0, x + c0, mean, rstd, N, C, nc);
        }
    }
}

void dt_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C,
                        float eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        rms_fwd_row(y + n * C, &rstd[n], x + n * C, w, C, eps);
}

void dt_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, int N, int C) {
    int n_strips = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel if ((int64_t)N * C >= PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (int64_t n = 0; n < N; n++)
            rms_bwd_row(dx + n * C, dy + n * C, x + n * C, w, rstd[n], C);
#pragma omp for schedule(static)
        for (int s = 0; s < n_strips; s++) {
            int c0 = s * COL_BLOCK, nc = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
            norm_dw_strip(dw + c0, NULL, dy + c0, x + c0, NULL, rstd, N, C, nc);
        }
    }
}

/* ---- plain references: one thread, double statistics, textbook loops ---- */

void dt_layernorm_forward_ref(float *y, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N, int C, float eps) {
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        double mu = 0, var = 0;
        for (int i = 0; i < C; i++)
            mu += xr[i];
        mu /= C;
        for (int i = 0; i < C; i++)
            var += (xr[i] - mu) * (xr[i] - mu);
        var /= C;
        double rs = 1.0 / sqrt(var + eps);
        for (int i = 0; i < C; i++)
            y[n * C + i] = (float)((xr[i] - mu) * rs * w[i] + b[i]);
        mean[n] = (float)mu;
        rstd[n] = (float)rs;
    }
}

void dt_layernorm_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd, int N,
                               int C) {
    for (int64_t n = 0; n < N; n++) {
        const float *dyr = dy + n * C, *xr = x + n * C;
        double m1 = 0, m2 = 0;
        for (int i = 0; i < C; i++) {
            double norm = ((double)xr[i] - mean[n]) * rstd[n];
            m1 += (double)dyr[i] * w[i];
            m2 += (double)dyr[i] * w[i] * norm;
        }
        m1 /= C;
        m2 /= C;
        for (int i = 0; i < C; i++) {
            double norm = ((double)xr[i] - mean[n]) * rstd[n];
            dx[n * C + i] += (float)(((double)dyr[i] * w[i] - m1 - norm * m2) * rstd[n]);
        }
    }
    for (int i = 0; i < C; i++) {
        double sw = 0, sb = 0;
        for (int64_t n = 0; n < N; n++) {
            sw += (double)dy[n * C + i] * (((double)x[n * C + i] - mean[n]) * rstd[n]);
            sb += dy[n * C + i];
        }
        dw[i] += (float)sw;
        db[i] += (float)sb;
    }
}

void dt_rmsnorm_forward_ref(float *y, float *rstd, const float *x, const float *w, int N, int C,
                            float eps) {
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        double ss = 0;
        for (int i = 0; i < C; i++)
            ss += (double)xr[i] * xr[i];
        double rs = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++)
            y[n * C + i] = (float)(xr[i] * rs * w[i]);
        rstd[n] = (float)rs;
    }
}

void dt_rmsnorm_backward_ref(float *dx, float *dw, const float *dy, const float *x,
                             const float *w, const float *rstd, int N, int C) {
    for (int64_t n = 0; n < N; n++) {
        const float *dyr = dy + n * C, *xr = x + n * C;
        double m = 0;
        for (int i = 0; i < C; i++)
            m += (double)dyr[i] * w[i] * ((double)xr[i] * rstd[n]);
        m /= C;
        for (int i = 0; i < C; i++)
            dx[n * C + i] +=
                (float)(((double)dyr[i] * w[i] - (double)xr[i] * rstd[n] * m) * rstd[n]);
    }
    for (int i = 0; i < C; i++) {
        double sw = 0;
        for (int64_t n = 0; n < N; n++)
            sw += (double)dy[n * C + i] * ((double)x[n * C + i] * rstd[n]);
        dw[i] += (float)sw;
    }
}
