/* Array casts and reductions used around the matmuls and the optimizer.
 * Stateless; parallel over OpenMP threads; safe to call concurrently on disjoint data. */
#ifndef DT_KERNELS_CAST_H
#define DT_KERNELS_CAST_H

#include <stdint.h>

#include "core/dtype.h"

void dt_cast_f32_to_bf16(dt_bf16 *dst, const float *src, int64_t n); /* round to nearest even */
void dt_cast_bf16_to_f32(float *dst, const dt_bf16 *src, int64_t n);
/* Round fp32 values to the nearest bf16 and back, in place (what a bf16 store would keep). */
void dt_round_bf16_inplace(float *x, int64_t n);

/* sum of squares, accumulated in double: the global-norm gradient clipping's building block */
double dt_sumsq(const float *x, int64_t n);
void dt_scale_inplace(float *x, float s, int64_t n);
void dt_add_inplace(float *y, const float *x, int64_t n); /* y += x */

#endif
