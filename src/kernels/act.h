/* Pointwise activations: tanh-GELU (GPT-2) and SwiGLU (Llama). Backward ACCUMULATES (+=);
 * the _set variants overwrite instead (the bits of accumulating onto zeros).
 * Stateless, OpenMP-parallel; _ref twins are plain C. */
#ifndef DT_KERNELS_ACT_H
#define DT_KERNELS_ACT_H

#include <stdint.h>

#include "core/dtype.h"

/* y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (HF "gelu_new"); x, y: [n] */
void dt_gelu_forward(float *y, const float *x, int64_t n);
/* y: [n] of type t (DT_BF16 or DT_F16): dt_cast_f32_to_lp of dt_gelu_forward's result, bit
 * for bit, without writing the fp32 values (the same for dt_swiglu_forward_lp) */
void dt_gelu_forward_lp(dt_dtype t, uint16_t *y, const float *x, int64_t n);
void dt_gelu_backward(float *dx, const float *x, const float *dy, int64_t n);
void dt_gelu_backward_set(float *dx, const float *x, const float *dy, int64_t n);
void dt_gelu_forward_ref(float *y, const float *x, int64_t n);
void dt_gelu_backward_ref(float *dx, const float *x, const float *dy, int64_t n);

/* y = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up, y: [n] */
void dt_swiglu_forward(float *y, const float *gate, const float *up, int64_t n);
void dt_swiglu_forward_lp(dt_dtype t, uint16_t *y, const float *gate, const float *up,
                          int64_t n);
void dt_swiglu_backward(float *dgate, float *dup, const float *gate, const float *up,
                        const float *dy, int64_t n);
void dt_swiglu_backward_set(float *dgate, float *dup, const float *gate, const float *up,
                            const float *dy, int64_t n);
void dt_swiglu_forward_ref(float *y, const float *gate, const float *up, int64_t n);
void dt_swiglu_backward_ref(float *dgate, float *dup, const float *gate, const float *up,
                            const float *dy, int64_t n);

#endif
