/* Array casts and reductions used around the matmuls and the optimizer.
 * Stateless; parallel over OpenMP threads; safe to call concurrently on disjoint data. */
#ifndef DT_KERNELS_CAST_H
#define DT_KERNELS_CAST_H

#include <stdint.h>

#include "core/dtype.h"

void dt_cast_f32_to_bf16(dt_bf16 *dst, const float *src, int64_t n); /* round to nearest even */
/* The loop over dt_bf16_from_f32; every variant below gives its bits. */
void dt_cast_f32_to_bf16_ref(dt_bf16 *dst, const float *src, int64_t n);
/* One single-threaded implementation of the fp32 -> bf16 cast (tests compare each to _ref). */
typedef struct dt_cast_bf16_variant {
    const char *name; /* "avx512f", "avx2", "ref" */
    void (*to_bf16)(dt_bf16 *dst, const float *src, int64_t n);
} dt_cast_bf16_variant;
enum { DT_CAST_BF16_MAX_VARIANTS = 3 };
/* The variants this CPU can run into out[], fastest first, "ref" last; returns how many. */
int dt_cast_bf16_variants(dt_cast_bf16_variant out[DT_CAST_BF16_MAX_VARIANTS]);
void dt_cast_bf16_to_f32(float *dst, const dt_bf16 *src, int64_t n);
/* Round fp32 values to the nearest bf16 and back, in place (what a bf16 store would keep). */
void dt_round_bf16_inplace(float *x, int64_t n);

/* IEEE fp16 (rounding as dt_f16_from_f32: nearest even, subnormals, +-inf on overflow, quiet
 * NaN), through the fastest variant this CPU runs (AVX-512F, F16C, or plain C), picked at
 * run time. Every variant gives the same bits as the _ref loops over the scalar conversions. */
void dt_cast_f32_to_f16(dt_f16 *dst, const float *src, int64_t n);
void dt_cast_f16_to_f32(float *dst, const dt_f16 *src, int64_t n);
void dt_cast_f32_to_f16_ref(dt_f16 *dst, const float *src, int64_t n);
void dt_cast_f16_to_f32_ref(float *dst, const dt_f16 *src, int64_t n);

/* fp32 -> the 16-bit matmul operand type t (DT_BF16 or DT_F16) in 16-bit storage. */
void dt_cast_f32_to_lp(dt_dtype t, uint16_t *dst, const float *src, int64_t n);
/* The single-threaded cast that dt_cast_f32_to_lp runs (the fastest variant this CPU has), for
 * kernels that cast their own pieces inside their own parallel loops. */
typedef void (*dt_cast_lp_fn)(uint16_t *dst, const float *src, int64_t n);
dt_cast_lp_fn dt_cast_f32_to_lp_fn(dt_dtype t);

/* One single-threaded implementation of the fp16 casts (tests compare each against _ref). */
typedef struct dt_cast_f16_variant {
    const char *name; /* "avx512f", "f16c", "ref" */
    void (*to_f16)(dt_f16 *dst, const float *src, int64_t n);
    void (*to_f32)(float *dst, const dt_f16 *src, int64_t n);
} dt_cast_f16_variant;
enum { DT_CAST_F16_MAX_VARIANTS = 3 };
/* The variants this CPU can run into out[], fastest first, "ref" last; returns how many. */
int dt_cast_f16_variants(dt_cast_f16_variant out[DT_CAST_F16_MAX_VARIANTS]);

/* sum of squares, accumulated in double: the global-norm gradient clipping's building block */
double dt_sumsq(const float *x, int64_t n);
void dt_scale_inplace(float *x, float s, int64_t n);
void dt_add_inplace(float *y, const float *x, int64_t n); /* y += x */
/* x = 0, the fixed blocks shared by the OpenMP threads (a memset runs on one thread only) */
void dt_zero_f32(float *x, int64_t n);

#endif
