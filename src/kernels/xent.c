/* Softmax cross-entropy on a chunk of logit rows: loss = logsumexp(x) - x[target], and the
 * gradient (softmax(x) - onehot) * grad_scale written over the logits. Stateless; rows are
 * split over OpenMP threads and each row is done by one thread in a fixed order, so results
 * do not depend on the thread count. The row body is compiled for AVX2+FMA and for the
 * baseline ISA and picked at run time.
 */
#include "kernels/xent.h"

#include "kernels/kernels_impl.h"

#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define SUM_BLOCK 512 /* float partial sums over this many exps, then added in double */


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
                x[j] = dt_vexp(x[j] - mx);
                part += x[j];
            }
        } else {
#pragma omp simd reduction(+ : part)
            for (int j = j0; j < j1; j++)
                part += dt_vexp(x[j] - mx);
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
