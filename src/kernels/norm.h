/* LayerNorm and RMSNorm over the last dimension, forward and backward.
 *
 * Rows are independent; threads split rows for y/dx and split columns for dw/db, so the
 * result does not depend on the thread count (bit-exact resume relies on this).
 * Backward ACCUMULATES into dx, dw, db (+=); the caller zeroes them.
 * _ref twins: plain single-threaded C with the same contract, for tests.
 */
#ifndef DT_KERNELS_NORM_H
#define DT_KERNELS_NORM_H

#include "core/dtype.h"

/* x, y: [N, C]; w, b: [C]; mean, rstd: [N] (saved for backward). y = (x-mean)*rstd*w + b */
void dt_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int N, int C, float eps);
void dt_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const float *mean, const float *rstd, int N, int C);
void dt_layernorm_forward_ref(float *y, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N, int C, float eps);
void dt_layernorm_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd, int N,
                               int C);

/* The same forwards with y [N, C] in bf16: each value the fp32 forward's, rounded to the
 * nearest bf16 (dt_cast_f32_to_bf16's bits), the fp32 array never written. */
void dt_layernorm_forward_bf16(dt_bf16 *y, float *mean, float *rstd, const float *x,
                               const float *w, const float *b, int N, int C, float eps);
void dt_rmsnorm_forward_bf16(dt_bf16 *y, float *rstd, const float *x, const float *w, int N,
                             int C, float eps);

/* RMSNorm (Llama): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). rstd: [N] saved. */
void dt_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C,
                        float eps);
void dt_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, int N, int C);
void dt_rmsnorm_forward_ref(float *y, float *rstd, const float *x, const float *w, int N, int C,
                            float eps);
void dt_rmsnorm_backward_ref(float *dx, float *dw, const float *dy, const float *x,
                             const float *w, const float *rstd, int N, int C);

#endif
