/* The matmul peak that MFU is measured against: dt_gemm's best FLOP/s on a large, friendly
 * shape (the GPT-2 QKV projection at 1024 tokens) in the requested operand type, measured
 * now, on this machine and thread count, so that MFU is a ratio of two numbers from one run. */
#ifndef DT_KERNELS_GEMM_PEAK_H
#define DT_KERNELS_GEMM_PEAK_H

#include "kernels/gemm.h"

/* dt_gemm's best FLOP/s at one shape (operands zero, leading dimensions dense): best of at
 * least min_runs repetitions and of about `seconds` of running. */
dt_status dt_gemm_rate(dt_gemm *g, const dt_gemm_shape *shape, double seconds, int min_runs,
                       double *flops);

/* The peak's shape in operand type `dtype` (weights used transposed, as every linear layer's
 * forward does) */
dt_gemm_shape dt_gemm_peak_shape(dt_dtype dtype);

/* Best-of-repetitions FLOP/s of the peak shape over about `seconds` of running. */
dt_status dt_gemm_peak_flops(dt_gemm *g, dt_dtype dtype, double seconds, double *flops);

#endif
