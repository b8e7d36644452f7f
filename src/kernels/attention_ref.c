/* The attention kernels' reference (attention.h): plain loops in double, one score row at a
 * time, rounding the operands a bf16 mode rounds. Slow and obviously right: the kernels' tests
 * compare every variant with it. */
#include <math.h>
#include <stdint.h>

#include "core/dtype.h"
#include "kernels/attention.h"
#include "kernels/kernels_impl.h"

/* bf16 mode rounds P relative to the running maximum at the end of each key tile of the
 * kernels (attention.c, attn_bf16.c: 64 keys) */
#define BC 64

static inline float bf16_round(float x) { return dt_bf16_to_f32(dt_bf16_from_f32(x)); }

/* ---- reference: plain loops, double accumulation, one score row at a time ---- */

static double dot_d(const float *a, const float *b, int n) {
    double acc = 0.0;
    for (int d = 0; d < n; d++)
        acc += (double)a[d] * b[d];
    return acc;
}

/* the score dot product: of the bf16-rounded operands in bf16 mode */
static double dot_qk(const float *a, const float *b, int n, bool bf) {
    if (!bf)
        return dot_d(a, b, n);
    double acc = 0.0;
    for (int d = 0; d < n; d++)
        acc += (double)bf16_round(a[d]) * bf16_round(b[d]);
    return acc;
}

/* an operand of a product: rounded to bf16 in bf16 mode */
static double op(float x, bool bf) { return bf ? bf16_round(x) : x; }

/* D = rowsum(dy y), of the dy that dP sees (rounded in bf16 mode) */
static double dot_dy(const float *dy, const float *y, int n, bool bf) {
    double acc = 0.0;
    for (int d = 0; d < n; d++)
        acc += op(dy[d], bf) * y[d];
    return acc;
}

/* dS_tj times scale (the factor of dq and dk), from P_tj and dP_tj - D_t: rounded to bf16 as
 * the operand of dS k and dS^T q in bf16 mode */
static double ds_of(const dt_attn_shape *s, double p, double dp_minus_d) {
    const double ds = s->scale * p * dp_minus_d;
    return s->bf16 ? bf16_round((float)ds) : ds;
}

void dt_attention_forward_ref(const dt_attn_shape *s, float *y, float *lse, const float *q,
                              const float *k, const float *v) {
    const int T = s->T, hs = s->hs, C = s->NH * hs;
    if (T <= 0 || hs <= 0 || s->NKV <= 0 || s->NH % s->NKV != 0)
        return;
    const int group = s->NH / s->NKV;
    double row[T], acc[hs];
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < T; t++) {
                const float *qt = q + ((int64_t)b * T + t) * s->q_stride + (int64_t)h * hs;
                const int64_t kv0 = (int64_t)b * T * s->kv_stride + (int64_t)(h / group) * hs;
                const int n = s->causal ? t + 1 : T, lo = dt_attn_doc_lo(s, b, t);
                double mx = -INFINITY, sum = 0.0;
                for (int j = lo; j < n; j++) {
                    row[j] = s->scale * dot_qk(qt, k + kv0 + j * s->kv_stride, hs, s->bf16);
                    mx = row[j] > mx ? row[j] : mx;
                }
                for (int d = 0; d < hs; d++)
                    acc[d] = 0.0;
                double mt = -INFINITY; /* bf16 mode: the row max up to the end of j's key tile */
                for (int j = lo; j < n; j++) {
                    double pj = exp(row[j] - mx);
                    const float *vj = v + kv0 + j * s->kv_stride;
                    sum += pj;
                    if (j == lo || j % BC == 0)
                        for (int c = j; c < (j / BC + 1) * BC && c < n; c++)
                            mt = row[c] > mt ? row[c] : mt;
                    /* PV of bf16 operands, P rounded relative to mt as the tiled kernel holds
                     * it; the sum stays unrounded */
                    const double pr = bf16_round((float)exp(row[j] - mt)) * exp(mt - mx);
                    if (s->bf16)
                        for (int d = 0; d < hs; d++)
                            acc[d] += pr * bf16_round(vj[d]);
                    else
                        for (int d = 0; d < hs; d++)
                            acc[d] += pj * vj[d];
                }
                float *yt = y + ((int64_t)b * T + t) * C + (int64_t)h * hs;
                for (int d = 0; d < hs; d++) /* no key seen (documents): y = 0, lse = -inf */
                    yt[d] = sum > 0 ? (float)(acc[d] / sum) : 0.0f;
                lse[((int64_t)b * s->NH + h) * T + t] =
                    sum > 0 ? (float)(mx + log(sum)) : -INFINITY;
            }
}

/* dq is summed per query row, dk and dv per key row (over the group's heads and the queries
 * that see the key), each in double, so the reference has no float accumulation. */
void dt_attention_backward_ref(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                               const float *dy, const float *y, const float *lse, const float *q,
                               const float *k, const float *v) {
    const int T = s->T, hs = s->hs, C = s->NH * hs;
    if (T <= 0 || hs <= 0 || s->NKV <= 0 || s->NH % s->NKV != 0)
        return;
    const int group = s->NH / s->NKV;
    const int64_t qs = s->q_stride, kvs = s->kv_stride;
    double acc[hs], acc2[hs];
    for (int b = 0; b < s->B; b++) {
        for (int h = 0; h < s->NH; h++) { /* dq_t = scale sum_j P_tj (dP_tj - D_t) k_j */
            const int64_t kv0 = (int64_t)b * T * kvs + (int64_t)(h / group) * hs;
            for (int t = 0; t < T; t++) {
                const int64_t r = (int64_t)b * T + t;
                const float *qt = q + r * qs + (int64_t)h * hs, *dyt = dy + r * C + h * hs;
                const double lt = lse[((int64_t)b * s->NH + h) * T + t];
                const double D = dot_dy(dyt, y + r * C + h * hs, hs, s->bf16);
                for (int d = 0; d < hs; d++)
                    acc[d] = 0.0;
                for (int j = dt_attn_doc_lo(s, b, t); j < (s->causal ? t + 1 : T); j++) {
                    const float *kj = k + kv0 + j * kvs;
                    double pj = exp(s->scale * dot_qk(qt, kj, hs, s->bf16) - lt);
                    double dsj = ds_of(s, pj, dot_qk(dyt, v + kv0 + j * kvs, hs, s->bf16) - D);
                    for (int d = 0; d < hs; d++)
                        acc[d] += dsj * op(kj[d], s->bf16);
                }
                for (int d = 0; d < hs; d++)
                    dq[r * qs + h * hs + d] += (float)acc[d];
            }
        }
        for (int g = 0; g < s->NKV; g++) { /* dk_j, dv_j over the group's heads and queries */
            const int64_t kv0 = (int64_t)b * T * kvs + (int64_t)g * hs;
            for (int j = 0; j < T; j++) {
                const float *kj = k + kv0 + j * kvs, *vj = v + kv0 + j * kvs;
                for (int d = 0; d < hs; d++)
                    acc[d] = acc2[d] = 0.0;
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int t = s->causal ? j : 0; t < T && dt_attn_doc_lo(s, b, t) <= j; t++) {
                        const int64_t r = (int64_t)b * T + t;
                        const float *qt = q + r * qs + (int64_t)h * hs, *dyt = dy + r * C + h * hs;
                        const double lt = lse[((int64_t)b * s->NH + h) * T + t];
                        double pj = exp(s->scale * dot_qk(qt, kj, hs, s->bf16) - lt);
                        double dsj = ds_of(s, pj,
                                           dot_qk(dyt, vj, hs, s->bf16) -
                                               dot_dy(dyt, y + r * C + h * hs, hs, s->bf16));
                        const double pb = s->bf16 ? bf16_round((float)pj) : pj;
                        for (int d = 0; d < hs; d++) {
                            acc[d] += dsj * op(qt[d], s->bf16);
                            acc2[d] += pb * op(dyt[d], s->bf16);
                        }
                    }
                for (int d = 0; d < hs; d++) {
                    dk[kv0 + j * kvs + d] += (float)acc[d];
                    dv[kv0 + j * kvs + d] += (float)acc2[d];
                }
            }
        }
    }
}
