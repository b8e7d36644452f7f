/* Rotary position embedding, HuggingFace "rotate_half" convention (Llama):
 *   out = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[hs/2:], x[:hs/2])
 * with angle(t, i) = (pos0 + t) * theta^(-2i/hs) for i < hs/2, the same angle for i and i+hs/2.
 * Works in place on the heads of a strided activation (the q or k part of a fused qkv row).
 * The backward is the inverse rotation (a rotation's adjoint) and also works in place.
 */
#ifndef DT_KERNELS_ROPE_H
#define DT_KERNELS_ROPE_H

#include <stdint.h>

/* cos, sin: [T, hs/2] tables for positions pos0 .. pos0+T-1 */
void dt_rope_tables(float *cos_t, float *sin_t, int T, int hs, int pos0, float theta);

/* x: B*T rows of `row_stride` floats; each row holds NH heads of hs floats starting at x[0].
 * Rotates all NH heads of every row in place, row (b, t) by the angles of table row t, or of
 * table row pos[b*T + t] when pos is given (positions that restart at each document). */
void dt_rope_forward(float *x, int B, int T, int NH, int hs, int64_t row_stride, const float *cos_t,
                     const float *sin_t, const int32_t *pos);
/* dx = R^T dy, in place on the gradient buffer (same layout as forward). */
void dt_rope_backward(float *dx, int B, int T, int NH, int hs, int64_t row_stride,
                      const float *cos_t, const float *sin_t, const int32_t *pos);
void dt_rope_forward_ref(float *x, int B, int T, int NH, int hs, int64_t row_stride,
                         const float *cos_t, const float *sin_t, const int32_t *pos);
void dt_rope_backward_ref(float *dx, int B, int T, int NH, int hs, int64_t row_stride,
                          const float *cos_t, const float *sin_t, const int32_t *pos);

#endif
