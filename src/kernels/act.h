/* Pointwise activations: tanh-GELU (GPT-2) and SwiGLU (Llama). Backward ACCUMULATES (+=);
 * the _set variants overwrite instead (the bits of accumulating onto zeros). The _bf16
 * variants read bf16 inputs (act_bf16.c). Stateless, OpenMP-parallel; _ref twins are plain C. */
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

/* On bf16 storage (bf16 mode keeps the matmul outputs in bf16, as autocast does): the fp32
 * math on the inputs' exact values; forwards write the bf16 rounding of the fp32 result
 * (nearest even), backwards OVERWRITE fp32 gradients. Each runs the widest variant of
 * {portable, AVX2, AVX-512, and for the forwards AVX512_BF16} the CPU and the cap allow
 * (kernels/isa.h); the variants agree to a few fp32 ulp (forwards: to one bf16 ulp where a
 * value lies near a rounding tie; the AVX512_BF16 rounding flushes results below 1.2e-38 to
 * zero).
 * _ref: the double formulas, rounded once. */
void dt_gelu_forward_bf16(dt_bf16 *y, const dt_bf16 *x, int64_t n);
void dt_gelu_backward_bf16_set(float *dx, const dt_bf16 *x, const float *dy, int64_t n);
void dt_swiglu_forward_bf16(dt_bf16 *y, const dt_bf16 *gate, const dt_bf16 *up, int64_t n);
void dt_swiglu_backward_bf16_set(float *dgate, float *dup, const dt_bf16 *gate,
                                 const dt_bf16 *up, const float *dy, int64_t n);
void dt_gelu_forward_bf16_ref(dt_bf16 *y, const dt_bf16 *x, int64_t n);
void dt_gelu_backward_bf16_set_ref(float *dx, const dt_bf16 *x, const float *dy, int64_t n);
void dt_swiglu_forward_bf16_ref(dt_bf16 *y, const dt_bf16 *gate, const dt_bf16 *up,
                                int64_t n);
void dt_swiglu_backward_bf16_set_ref(float *dgate, float *dup, const dt_bf16 *gate,
                                     const dt_bf16 *up, const float *dy, int64_t n);

#endif
