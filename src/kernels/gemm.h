/* Matrix products: C = op(A) · op(B) (+ bias), fp32, bf16 or fp16 operands, fp32
 * accumulate/output (or, dt_gemm_run_bf16_out, bf16 output rounded once from fp32).
 *
 * dt_gemm_run goes through oneDNN's matmul primitive (kernels/dnnl/), created once per shape
 * and kept in the dt_gemm cache. When oneDNN has no kernel for 16-bit operands on this CPU
 * (bf16 without AVX-512; fp16 in oneDNN 2.6 without AVX512-FP16), it widens them to fp32 in
 * a cached scratch buffer and runs the fp32 kernel: the result is the same math (16-bit
 * operands, fp32 accumulation), only not faster. dt_gemm_ref is the plain-C twin used by tests.
 *
 * A dt_gemm belongs to one thread of control (the primitives themselves run multi-threaded
 * through OpenMP). All matrices are row-major.
 */
#ifndef DT_KERNELS_GEMM_H
#define DT_KERNELS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

typedef struct dt_gemm_shape {
    int M, N, K;
    bool trans_a;    /* A is stored [K, M] (row-major) and used transposed; else [M, K] */
    bool trans_b;    /* B is stored [N, K] and used transposed; else [K, N] */
    bool accumulate; /* C += result (the backward convention); else C = result */
    dt_dtype dtype;  /* type of A and B; C and bias are always fp32 */
    int64_t lda, ldb, ldc; /* row strides in elements; 0 = dense */
} dt_gemm_shape;

typedef struct dt_gemm dt_gemm;

dt_status dt_gemm_init(dt_gemm **out);
void dt_gemm_free(dt_gemm *g);

/* bias: NULL or [N], added to every row (only allowed with accumulate == false). */
dt_status dt_gemm_run(dt_gemm *g, const dt_gemm_shape *s, const void *A, const void *B,
                      const float *bias, float *C);
/* The same with bf16 operands (s->dtype == DT_BF16) and a bf16 C: the fp32 sum plus bias,
 * rounded once to the nearest bf16 (even on ties), as autocast's bf16 matmul output. No
 * accumulate. Where the CPU has no bf16 matmul, the fp32 result goes through a cached scratch
 * and is rounded by dt_cast_f32_to_bf16. */
dt_status dt_gemm_run_bf16_out(dt_gemm *g, const dt_gemm_shape *s, const void *A,
                               const void *B, const float *bias, dt_bf16 *C);
void dt_gemm_ref(const dt_gemm_shape *s, const void *A, const void *B, const float *bias,
                 float *C);

/* Name of the oneDNN implementation picked for a dtype ("brg:avx512_core", "gemm:jit", or
 * "fp32 fallback" for 16-bit operands widened to fp32), for logs and benchmark tables. */
const char *dt_gemm_impl_name(dt_gemm *g, dt_dtype dtype);

#endif
