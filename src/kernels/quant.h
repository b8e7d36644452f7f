/* Row-wise symmetric int8 quantisation, for activations stored compressed between a block's
 * forward and its backward (plugin.act_compress = int8).
 *
 * Each row of x [rows, cols] gets one fp32 scale s = max|x_row| / 127 and q = round(x / s)
 * computed as rint(x * (127 / max|x_row|)) (round half to even), so |x - q s| <= s/2 up to
 * a few ulp of max|x_row|; a zero row has s = 0 and q = 0. Inputs must be finite.
 * Every variant (the portable loop, AVX2, AVX-512) gives the same bits as the plain-C _ref;
 * the plain entry points pick the widest the CPU runs, at run time. OpenMP over rows;
 * nothing is allocated.
 */
#ifndef DT_KERNELS_QUANT_H
#define DT_KERNELS_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

/* x: [rows, cols] -> q: [rows, cols], scale: [rows] */
void dt_quant_int8_rows(int8_t *q, float *scale, const float *x, int64_t rows, int64_t cols);
/* q, scale -> x: [rows, cols] (x = q * scale) */
void dt_dequant_int8_rows(float *x, const int8_t *q, const float *scale, int64_t rows,
                          int64_t cols);

/* The same on bf16 rows (bf16 mode keeps the MLP's h and u in bf16): q and scale are the
 * fp32 kernels' on the exactly widened values; dequantisation rounds q * scale to the nearest
 * bf16. Portable loops, OpenMP over rows. */
void dt_quant_int8_rows_bf16(int8_t *q, float *scale, const dt_bf16 *x, int64_t rows,
                             int64_t cols);
void dt_dequant_int8_rows_bf16(dt_bf16 *x, const int8_t *q, const float *scale, int64_t rows,
                               int64_t cols);

/* Plain reference: one row after another, scalar C. */
void dt_quant_int8_rows_ref(int8_t *q, float *scale, const float *x, int64_t rows,
                            int64_t cols);
void dt_dequant_int8_rows_ref(float *x, const int8_t *q, const float *scale, int64_t rows,
                              int64_t cols);

/* The variants, for tests: a variant the CPU cannot run is not supported. */
typedef enum dt_quant_isa {
    DT_QUANT_ISA_PORTABLE,
    DT_QUANT_ISA_AVX2,
    DT_QUANT_ISA_AVX512,
    DT_QUANT_ISA_COUNT
} dt_quant_isa;
bool dt_quant_isa_supported(dt_quant_isa isa);
const char *dt_quant_isa_name(dt_quant_isa isa);
/* The variant `isa` (which must be supported). */
void dt_quant_int8_rows_isa(dt_quant_isa isa, int8_t *q, float *scale, const float *x,
                            int64_t rows, int64_t cols);
void dt_dequant_int8_rows_isa(dt_quant_isa isa, float *x, const int8_t *q, const float *scale,
                              int64_t rows, int64_t cols);

#endif
