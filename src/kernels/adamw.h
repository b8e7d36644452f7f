/* Fused AdamW update (Loshchilov & Hutter, ICLR'19), PyTorch's formulation:
 *   p -= lr * wd * p
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2          with g = grad * grad_scale
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * One pass over memory; optionally writes the 16-bit copy of the new weights for bf16 (fp16)
 * matmuls: the bits dt_cast_f32_to_bf16 (dt_cast_f32_to_f16) would give.
 */
#ifndef DT_KERNELS_ADAMW_H
#define DT_KERNELS_ADAMW_H

#include <stdint.h>

#include "core/dtype.h"

typedef struct dt_adamw_hparams {
    float lr, beta1, beta2, eps;
    float weight_decay; /* already 0 for tensors that do not decay */
    float grad_scale;   /* clipping factor (1 = none) */
    int step;           /* 1-based step count t for bias correction */
} dt_adamw_hparams;

/* p, g, m, v: [n]; p_bf16: NULL or [n], receives the rounded new p. */
void dt_adamw_update(float *p, const float *g, float *m, float *v, dt_bf16 *p_bf16, int64_t n,
                     const dt_adamw_hparams *h);
/* The same, with p_f16: NULL or [n], the fp16 copy. */
void dt_adamw_update_f16(float *p, const float *g, float *m, float *v, dt_f16 *p_f16, int64_t n,
                         const dt_adamw_hparams *h);
void dt_adamw_update_ref(float *p, const float *g, float *m, float *v, dt_bf16 *p_bf16,
                         int64_t n, const dt_adamw_hparams *h);

#endif
