/* Cross-attention to short key sets (see xattn.h). A task is one (group, head): its keys and
 * values are transposed into scratch once ([hs][n] each), then its query rows, eight at a
 * time, make their scores as hs vector steps over the keys, the softmax with the vectorisable
 * exp (kernels_impl.h), and their output (or gradients) as vector steps over the head's
 * columns. Rows of the batch the call does not hold are skipped; results are independent of
 * how tasks fall on threads. Allocation-free.
 */
#include "kernels/xattn.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

int64_t dt_xattn_scratch_count(const dt_xattn_shape *s) {
    return (int64_t)s->groups * s->heads * 2 * s->hs * s->kv_rows;
}

/* the call's rows of group g: [*lo, *hi) (empty when it holds none) */
static void group_rows(const dt_xattn_shape *s, int g, int64_t *lo, int64_t *hi) {
    int64_t a = (int64_t)g * s->group_rows - s->row0, b = a + s->group_rows;
    *lo = a > 0 ? a : 0;
    *hi = b < s->rows ? b : s->rows;
}

/* t [hs][n] from n rows of x (stride) */
static void transpose(float *restrict t, const float *restrict x, int64_t stride, int hs, int n) {
    for (int j = 0; j < n; j++)
        for (int c = 0; c < hs; c++)
            t[c * n + j] = x[j * stride + c];
}

/* A task's query rows go TILE at a time: each key (or value) vector loaded serves the tile's
 * rows, whose sums stay in registers (TILE x VEC floats), where a row at a time loaded one
 * vector per multiply-add. Keys and columns past the last whole VEC, and a last tile of fewer
 * rows, take the plain loops. */
enum { TILE = 8, VEC = 16 };
/* VEC floats: 1, 2 or 4 registers by ISA, read and written in place at any float's address
 * (no function takes or returns one: that would tie the baseline build's ABI to AVX-512) */
typedef float vec
    __attribute__((vector_size(VEC * sizeof(float)), aligned(sizeof(float)), may_alias));
#define AT(p) (*(vec *)(p))
#define AT_CONST(p) (*(const vec *)(p))

/* p[t][j] = scale sum_c q[t][c] kt[c][j] for the r rows of q (stride qs); p rows of n */
CLONES static void scores(float *restrict p, const float *restrict q, int64_t qs, int r,
                          const float *restrict kt, int hs, int n, float scale) {
    int j0 = 0;
    for (; r == TILE && j0 + VEC <= n; j0 += VEC) {
        vec acc[TILE] = {{0}};
        for (int c = 0; c < hs; c++) {
            vec kr = AT_CONST(kt + c * n + j0);
            for (int t = 0; t < TILE; t++)
                acc[t] += q[t * qs + c] * kr;
        }
        for (int t = 0; t < TILE; t++)
            AT(p + t * n + j0) = acc[t] * scale;
    }
    for (int t = 0; t < r && j0 < n; t++) {
        float *pt = p + t * n;
        for (int j = j0; j < n; j++)
            pt[j] = 0;
        for (int c = 0; c < hs; c++) {
            float a = q[t * qs + c];
            const float *row = kt + c * n;
            for (int j = j0; j < n; j++)
                pt[j] += a * row[j];
        }
        for (int j = j0; j < n; j++)
            pt[j] *= scale;
    }
}

/* p[j] = exp(p[j] - m) */
CLONES static void exp_shift(float *restrict p, float m, int n) {
    for (int j = 0; j < n; j++)
        p[j] = dt_vexp(p[j] - m);
}

/* y[t][c] = sum_j w[t][j] x[j][c] for the r rows of y (stride ys) and w (rows of n); x rows of
 * stride xs */
CLONES static void mix(float *restrict y, int64_t ys, int r, const float *restrict w,
                       const float *restrict x, int64_t xs, int hs, int n) {
    int c0 = 0;
    for (; r == TILE && c0 + VEC <= hs; c0 += VEC) {
        vec acc[TILE] = {{0}};
        for (int j = 0; j < n; j++) {
            vec xr = AT_CONST(x + j * xs + c0);
            for (int t = 0; t < TILE; t++)
                acc[t] += w[t * n + j] * xr;
        }
        for (int t = 0; t < TILE; t++)
            AT(y + t * ys + c0) = acc[t];
    }
    for (int t = 0; t < r && c0 < hs; t++) {
        float *yt = y + t * ys;
        for (int c = c0; c < hs; c++)
            yt[c] = 0;
        for (int j = 0; j < n; j++) {
            float a = w[t * n + j];
            const float *row = x + j * xs;
            for (int c = c0; c < hs; c++)
                yt[c] += a * row[c];
        }
    }
}

/* x[j][c] += sum_t w[t][j] y[t][c] for every key j (rows of stride xs), over the r rows of y
 * (stride ys) and w (rows of n) */
CLONES static void spread(float *restrict x, int64_t xs, const float *restrict w,
                          const float *restrict y, int64_t ys, int r, int hs, int n) {
    for (int j = 0; j < n; j++) {
        float *row = x + j * xs;
        int c0 = 0;
        for (; c0 + VEC <= hs; c0 += VEC) {
            vec acc = AT(row + c0);
            for (int t = 0; t < r; t++)
                acc += w[t * n + j] * AT_CONST(y + t * ys + c0);
            AT(row + c0) = acc;
        }
        for (int t = 0; t < r; t++) {
            float a = w[t * n + j];
            for (int c = c0; c < hs; c++)
                row[c] += a * y[t * ys + c];
        }
    }
}

static float max_of(const float *p, int n) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++)
        m = p[j] > m ? p[j] : m;
    return m;
}

void dt_xattn_forward(const dt_xattn_shape *s, const float *q, const float *k, const float *v,
                      float *o, float *lse, float *scratch) {
    int hs = s->hs, H = s->heads;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < s->groups * H; t++) {
        int g = t / H, h = t % H, n = s->n[g];
        int64_t lo, hi;
        group_rows(s, g, &lo, &hi);
        if (lo >= hi)
            continue;
        float *kt = scratch + (int64_t)t * 2 * hs * s->kv_rows, p[TILE * DT_XATTN_MAX_KEYS];
        int64_t kv = (int64_t)g * s->kv_rows * s->kv_stride + (int64_t)h * hs;
        transpose(kt, k + kv, s->kv_stride, hs, n);
        for (int64_t i = lo; i < hi; i += TILE) {
            int r = hi - i < TILE ? (int)(hi - i) : TILE;
            int64_t at = i * s->q_stride + h * hs;
            scores(p, q + at, s->q_stride, r, kt, hs, n, s->scale);
            for (int u = 0; u < r; u++) {
                float *pu = p + u * n, m = max_of(pu, n), sum = 0;
                exp_shift(pu, m, n);
                for (int j = 0; j < n; j++)
                    sum += pu[j];
                for (int j = 0; j < n; j++)
                    pu[j] /= sum;
                lse[(i + u) * H + h] = m + logf(sum);
            }
            mix(o + at, s->q_stride, r, p, v + kv, s->kv_stride, hs, n);
        }
    }
}

void dt_xattn_backward(const dt_xattn_shape *s, const float *dout, const float *q,
                       const float *k, const float *v, const float *o, const float *lse,
                       float *dq, float *dk, float *dv, float *scratch) {
    int hs = s->hs, H = s->heads;
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < s->groups * H; t++) {
        int g = t / H, h = t % H, n = s->n[g];
        int64_t lo, hi, kv = (int64_t)g * s->kv_rows * s->kv_stride + (int64_t)h * hs;
        for (int j = 0; j < s->kv_rows; j++) {
            memset(dk + kv + j * s->kv_stride, 0, (size_t)hs * sizeof *dk);
            memset(dv + kv + j * s->kv_stride, 0, (size_t)hs * sizeof *dv);
        }
        group_rows(s, g, &lo, &hi);
        if (lo >= hi)
            continue;
        float *kt = scratch + (int64_t)t * 2 * hs * s->kv_rows, *vt = kt + (int64_t)hs * n;
        float p[TILE * DT_XATTN_MAX_KEYS], dp[TILE * DT_XATTN_MAX_KEYS];
        transpose(kt, k + kv, s->kv_stride, hs, n);
        transpose(vt, v + kv, s->kv_stride, hs, n);
        for (int64_t i = lo; i < hi; i += TILE) {
            int r = hi - i < TILE ? (int)(hi - i) : TILE;
            int64_t at = i * s->q_stride + h * hs;
            scores(p, q + at, s->q_stride, r, kt, hs, n, s->scale);
            scores(dp, dout + at, s->q_stride, r, vt, hs, n, 1.0f);
            for (int u = 0; u < r; u++) {
                const float *gh = dout + at + u * s->q_stride, *oh = o + at + u * s->q_stride;
                float *pu = p + u * n, *dpu = dp + u * n, D = 0;
                for (int c = 0; c < hs; c++)
                    D += gh[c] * oh[c];
                exp_shift(pu, lse[(i + u) * H + h], n);
                for (int j = 0; j < n; j++) /* d of the scaled score */
                    dpu[j] = pu[j] * (dpu[j] - D) * s->scale;
            }
            mix(dq + at, s->q_stride, r, dp, k + kv, s->kv_stride, hs, n);
            spread(dk + kv, s->kv_stride, dp, q + at, s->q_stride, r, hs, n);
            spread(dv + kv, s->kv_stride, p, dout + at, s->q_stride, r, hs, n);
        }
    }
}

/* ---- reference twins: per row, head and key, libm in double ------------------------------------ */

void dt_xattn_forward_ref(const dt_xattn_shape *s, const float *q, const float *k,
                          const float *v, float *o, float *lse) {
    int hs = s->hs, H = s->heads;
    for (int g = 0; g < s->groups; g++) {
        int64_t lo, hi;
        group_rows(s, g, &lo, &hi);
        for (int64_t i = lo; i < hi; i++)
            for (int h = 0; h < H; h++) {
                const float *qh = q + i * s->q_stride + h * hs;
                double sc[DT_XATTN_MAX_KEYS], m = -INFINITY, sum = 0;
                for (int j = 0; j < s->n[g]; j++) {
                    const float *kj = k + ((int64_t)g * s->kv_rows + j) * s->kv_stride + h * hs;
                    double d = 0;
                    for (int c = 0; c < hs; c++)
                        d += (double)qh[c] * kj[c];
                    sc[j] = d * s->scale;
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j < s->n[g]; j++)
                    sum += exp(sc[j] - m);
                for (int c = 0; c < hs; c++) {
                    double acc = 0;
                    for (int j = 0; j < s->n[g]; j++)
                        acc += exp(sc[j] - m) / sum *
                               v[((int64_t)g * s->kv_rows + j) * s->kv_stride + h * hs + c];
                    o[i * s->q_stride + h * hs + c] = (float)acc;
                }
                lse[i * H + h] = (float)(m + log(sum));
            }
    }
}

void dt_xattn_backward_ref(const dt_xattn_shape *s, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse,
                           float *dq, float *dk, float *dv) {
    int hs = s->hs, H = s->heads;
    for (int g = 0; g < s->groups; g++) {
        for (int j = 0; j < s->kv_rows; j++)
            for (int h = 0; h < H; h++)
                for (int c = 0; c < hs; c++) {
                    int64_t at = ((int64_t)g * s->kv_rows + j) * s->kv_stride + h * hs + c;
                    dk[at] = dv[at] = 0;
                }
        int64_t lo, hi;
        group_rows(s, g, &lo, &hi);
        for (int64_t i = lo; i < hi; i++)
            for (int h = 0; h < H; h++) {
                const float *qh = q + i * s->q_stride + h * hs, *gh = dout + i * s->q_stride + h * hs;
                const float *oh = o + i * s->q_stride + h * hs;
                double D = 0;
                for (int c = 0; c < hs; c++)
                    D += (double)gh[c] * oh[c];
                for (int c = 0; c < hs; c++)
                    dq[i * s->q_stride + h * hs + c] = 0;
                for (int j = 0; j < s->n[g]; j++) {
                    int64_t at = ((int64_t)g * s->kv_rows + j) * s->kv_stride + h * hs;
                    double sc = 0, dp = 0;
                    for (int c = 0; c < hs; c++) {
                        sc += (double)qh[c] * k[at + c];
                        dp += (double)gh[c] * v[at + c];
                    }
                    double p = exp(sc * s->scale - lse[i * H + h]), ds = p * (dp - D) * s->scale;
                    for (int c = 0; c < hs; c++) {
                        dq[i * s->q_stride + h * hs + c] += (float)(ds * k[at + c]);
                        dk[at + c] += (float)(ds * qh[c]);
                        dv[at + c] += (float)(p * gh[c]);
                    }
                }
            }
    }
}
