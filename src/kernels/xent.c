/* Softmax cross-entropy on a chunk of logit rows: loss = logsumexp(x) - x[target], and the
 * gradient (softmax(x) - onehot) * grad_scale written over the logits. Stateless; rows are
 * split over OpenMP threads and each row is done by one thread in a fixed order, so results
 * do not depend on the thread count. The row body is compiled for AVX2+FMA and for the
 * baseline ISA and picked at run time.
 */
#include "kernels/xent.h"

#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define SUM_BLOCK 512 /* float partial sums over this many exps, then added in double */

/* exp(x), vectorisable: Cephes expf (x = n ln2 + r, degree-6 polynomial for e^r, 2^n built in
 * the exponent bits; rel. error ~2 ulp). Arguments below -87 are clamped to -87, so e^-87 ~
 * 1.6e-38 stands in for anything smaller: far below float resolution next to the row's
 * largest term, which is 1. Clamp and rounding work on bit patterns because a float compare
 * or float->int conversion under GCC's default -ftrapping-math blocks vectorisation. The same
 * helper lives in attention.c; kernels share no private header yet. */
INLINE float vexp(float x) {
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    ux = ux > 0xC2AE0000u ? 0xC2AE0000u : ux; /* as unsigned bits, x < -87 iff ux > bits(-87) */
    memcpy(&x, &ux, sizeof x);
    float t = x * 1.44269504088896341f + 12582912.0f; /* rounds x log2(e) into t's low bits */
    float nf = t - 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    float r = x - nf * 0.693359375f;
    r = r + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (tb - 0x4B400000u + 127u) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* One row in three passes: max, then e^(x - max) summed (and stored when a gradient is
 * wanted), then the scale. Subtracting the max keeps every exp <= 1, so logits of any size
 * (+-1e4) neither overflow nor produce NaN. The sum is taken in float over short blocks and
 * the blocks in double, and the loss is formed in double: max + log(sum) - x[target] would
 * lose digits to cancellation in float when max is large. */
INLINE void row_body(float *x, float *loss, int32_t tgt, int V, float grad_scale) {
    if (tgt < 0 || tgt >= V) {
        /* ignored row; an out-of-range target is a caller bug with no error channel here, so
         * it is made visible as a NaN loss instead of a read past the row */
        *loss = tgt < 0 ? 0.0f : NAN;
        if (grad_scale != 0.0f)
            memset(x, 0, sizeof(float) * V);
        return;
    }
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++)
        mx = x[j] > mx ? x[j] : mx;
    const float xt = x[tgt];
    double sum = 0.0;
    for (int j0 = 0; j0 < V; j0 += SUM_BLOCK) {
        const int j1 = V - j0 < SUM_BLOCK ? V : j0 + SUM_BLOCK;
        float part = 0.0f;
        if (grad_scale != 0.0f) {
#pragma omp simd reduction(+ : part)
            for (int j = j0; j < j1; j++) {
                x[j] = vexp(x[j] - mx);
                part += x[j];
            }
        } else {
#pragma omp simd reduction(+ : part)
            for (int j = j0; j < j1; j++)
                part += vexp(x[j] - mx);
        }
        sum += part;
    }
    *loss = (float)((double)mx + log(sum) - (double)xt);
    if (grad_scale != 0.0f) {
        const float f = (float)(grad_scale / sum);
#pragma omp simd
        for (int j = 0; j < V; j++)
            x[j] *= f;
        x[tgt] -= grad_scale;
    }
}

TARGET_AVX2 static void row_avx2(float *x, float *loss, int32_t tgt, int V, float grad_scale) {
    row_body(x, loss, tgt, V, grad_scale);
}
static void row_base(float *x, float *loss, int32_t tgt, int V, float grad_scale) {
    row_body(x, loss, tgt, V, grad_scale);
}

void dt_xent_forward_backward(float *logits, float *losses, const int32_t *targets, int n,
                              int V, int64_t ld, float grad_scale) {
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        if (avx2)
            row_avx2(logits + r * ld, losses + r, targets[r], V, grad_scale);
        else
            row_base(logits + r * ld, losses + r, targets[r], V, grad_scale);
    }
}

/* Reference: plain loops, everything in double. */
void dt_xent_forward_backward_ref(float *logits, float *losses, const int32_t *targets, int n,
                                  int V, int64_t ld, float grad_scale) {
    for (int r = 0; r < n; r++) {
        float *x = logits + r * ld;
        const int32_t tgt = targets[r];
        if (tgt < 0 || tgt >= V) {
            losses[r] = tgt < 0 ? 0.0f : NAN;
            if (grad_scale != 0.0f)
                for (int j = 0; j < V; j++)
                    x[j] = 0.0f;
            continue;
        }
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < V; j++)
            sum += exp(x[j] - mx);
        losses[r] = (float)(mx + log(sum) - x[tgt]);
        if (grad_scale != 0.0f)
            for (int j = 0; j < V; j++)
                x[j] = (float)((exp(x[j] - mx) / sum - (j == tgt)) * grad_scale);
    }
}
