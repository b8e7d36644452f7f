/* Plain-C reference for dt_gemm (see gemm.h): the test oracle for the oneDNN path.
 *
 * Accumulates each dot product in double so its own rounding is far below fp32's; bf16 and
 * fp16 operands are widened exactly. Single-threaded, stateless, no allocation.
 */
#include "kernels/gemm.h"

static inline double load(const void *p, dt_dtype dt, int64_t i) {
    if (dt == DT_BF16)
        return dt_bf16_to_f32(((const dt_bf16 *)p)[i]);
    if (dt == DT_F16)
        return dt_f16_to_f32(((const dt_f16 *)p)[i]);
    return ((const float *)p)[i];
}

void dt_gemm_ref(const dt_gemm_shape *s, const void *A, const void *B, const float *bias,
                 float *C) {
    int64_t lda = s->lda ? s->lda : (s->trans_a ? s->M : s->K);
    int64_t ldb = s->ldb ? s->ldb : (s->trans_b ? s->K : s->N);
    int64_t ldc = s->ldc ? s->ldc : s->N;
    for (int64_t m = 0; m < s->M; m++) {
        for (int64_t n = 0; n < s->N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < s->K; k++) {
                double a = load(A, s->dtype, s->trans_a ? k * lda + m : m * lda + k);
                double b = load(B, s->dtype, s->trans_b ? n * ldb + k : k * ldb + n);
                acc += a * b;
            }
            if (bias && !s->accumulate)
                acc += bias[n];
            float *c = &C[m * ldc + n];
            *c = s->accumulate ? (float)(*c + acc) : (float)acc;
        }
    }
}
