/* Cross-attention to short key sets (see xattn.h). A task is one (group, head): its keys and
 * values are transposed into scratch once ([hs][n] each), then every query row of the group
 * makes its scores as hs vector steps over the keys, the softmax with the vectorisable
 * exp (kernels_impl.h), and its output (or gradients) as vector steps over the head's
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

/* s[j] = scale sum_c q[c] kt[c][j] */
CLONES static void scores(float *restrict s, const float *restrict q, const float *restrict kt,
                          int hs, int n, float scale) {
    for (int j = 0; j < n; j++)
        s[j] = 0;
    for (int c = 0; c < hs; c++) {
        float a = q[c];
        const float *row = kt + c * n;
        for (int j = 0; j < n; j++)
            s[j] += a * row[j];
    }
    for (int j = 0; j < n; j++)
        s[j] *= scale;
}

/* p[j] = exp(p[j] - m) */
CLONES static void exp_shift(float *restrict p, float m, int n) {
    for (int j = 0; j < n; j++)
        p[j] = dt_vexp(p[j] - m);
}

/* y[c] += sum_j w[j] x[j][c], x rows of stride */
CLONES static void mix(float *restrict y, const float *restrict w, const float *restrict x,
                       int64_t stride, int hs, int n) {
    for (int j = 0; j < n; j++) {
        float a = w[j];
        const float *row = x + j * stride;
        for (int c = 0; c < hs; c++)
            y[c] += a * row[c];
    }
}

/* x[j][c] += w[j] y[c] for every key j (rows of stride) */
CLONES static void spread(float *restrict x, const float *restrict w, const float *restrict y,
                          int64_t stride, int hs, int n) {
    for (int j = 0; j < n; j++) {
        float a = w[j];
        float *row = x + j * stride;
        for (int c = 0; c < hs; c++)
            row[c] += a * y[c];
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
        float *kt = scratch + (int64_t)t * 2 * hs * s->kv_rows, p[DT_XATTN_MAX_KEYS];
        int64_t kv = (int64_t)g * s->kv_rows * s->kv_stride + (int64_t)h * hs;
        transpose(kt, k + kv, s->kv_stride, hs, n);
        for (int64_t i = lo; i < hi; i++) {
            float *oh = o + i * s->q_stride + h * hs;
            scores(p, q + i * s->q_stride + h * hs, kt, hs, n, s->scale);
            float m = max_of(p, n), sum = 0;
            exp_shift(p, m, n);
            for (int j = 0; j < n; j++)
                sum += p[j];
            for (int j = 0; j < n; j++)
                p[j] /= sum;
            memset(oh, 0, (size_t)hs * sizeof *oh);
            mix(oh, p, v + kv, s->kv_stride, hs, n);
            lse[i * H + h] = m + logf(sum);
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
        float p[DT_XATTN_MAX_KEYS], dp[DT_XATTN_MAX_KEYS];
        transpose(kt, k + kv, s->kv_stride, hs, n);
        transpose(vt, v + kv, s->kv_stride, hs, n);
        for (int64_t i = lo; i < hi; i++) {
            const float *qh = q + i * s->q_stride + h * hs, *gh = dout + i * s->q_stride + h * hs;
            const float *oh = o + i * s->q_stride + h * hs;
            float *dqh = dq + i * s->q_stride + h * hs, D = 0;
            for (int c = 0; c < hs; c++)
                D += gh[c] * oh[c];
            scores(p, qh, kt, hs, n, s->scale);
            scores(dp, gh, vt, hs, n, 1.0f);
            exp_shift(p, lse[i * H + h], n);
            for (int j = 0; j < n; j++) /* d of the scaled score */
                dp[j] = p[j] * (dp[j] - D) * s->scale;
            memset(dqh, 0, (size_t)hs * sizeof *dqh);
            mix(dqh, dp, k + kv, s->kv_stride, hs, n);
            spread(dk + kv, dp, qh, s->kv_stride, hs, n);
            spread(dv + kv, p, gh, s->kv_stride, hs, n);
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
