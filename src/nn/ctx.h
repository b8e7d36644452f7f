/* What every layer's forward and backward receives: the matmul engine and the operand type.
 * Owned by the model or trainer; layers borrow it. One per thread of control. */
#ifndef DT_NN_CTX_H
#define DT_NN_CTX_H

#include "core/dtype.h"
#include "kernels/gemm.h"

typedef struct dt_nn_ctx {
    dt_gemm *gemm;    /* borrowed */
    dt_dtype mm_type; /* DT_F32, or DT_BF16 / DT_F16: matmul operands rounded to that 16-bit
                       * type (kept in the layers' dt_bf16-typed 16-bit buffers), fp32
                       * accumulate */
} dt_nn_ctx;

#endif
