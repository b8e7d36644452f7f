/* The matmul peak that MFU is measured against: dt_gemm's best FLOP/s on a large, friendly
 * shape (the GPT-2 QKV projection at 1024 tokens) in the requested operand type, measured
 * now, on this machine and thread count, so that MFU is a ratio of two numbers from one run. */
#ifndef DT_KERNELS_GEMM_PEAK_H
#define DT_KERNELS_GEMM_PEAK_H

#include "kernels/gemm.h"

/* Best-of-repetitions FLOP/s over about `seconds` of running. */
dt_status dt_gemm_peak_flops(dt_gemm *g, dt_dtype dtype, double seconds, double *flops);

#endif
