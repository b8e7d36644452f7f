/* A pre-norm transformer block, in its two flavours:
 *   GPT-2: x2 = x + proj(attn(LN1(x)));  out = x2 + proj_mlp(gelu(fc(LN2(x2))))
 *   Llama: x2 = x + o(attn(rope(qkv(RMS1(x)))));  out = x2 + down(silu(gate(h)) * up(h)), h = RMS2(x2)
 *
 * The block keeps borrowed views of its weights (dt_block), the activations its backward
 * needs (dt_block_acts, one set per block, sized for the largest micro-batch) and shares one
 * set of gradient scratch buffers across blocks (dt_block_scratch). Backward ACCUMULATES the
 * gradient of the block input into `dres`, which on entry holds the gradient of the output:
 * the residual stream's gradient flows through unchanged and each branch adds its part.
 */
#ifndef DT_NN_BLOCK_H
#define DT_NN_BLOCK_H

#include <stdbool.h>

#include "nn/linear.h"

typedef enum dt_block_kind { DT_BLOCK_GPT2, DT_BLOCK_LLAMA, DT_BLOCK_KIND_COUNT } dt_block_kind;

typedef struct dt_block_dims {
    dt_block_kind kind;
    int C, NH, NKV, hs, F; /* F: MLP hidden width (4C for GPT-2, ffn_hidden for Llama) */
    float norm_eps;
} dt_block_dims;

typedef struct dt_norm_params {
    float *w, *b, *dw, *db; /* b, db NULL for RMSNorm (borrowed) */
} dt_norm_params;

typedef struct dt_block {
    dt_norm_params ln1, ln2;
    dt_linear qkv;  /* [(NH + 2 NKV) hs, C]: q, k, v stacked (HF's c_attn, or q/k/v_proj) */
    dt_linear proj; /* [C, NH hs] */
    dt_linear fc;   /* GPT-2 c_fc [4C, C]; Llama gate_proj [F, C] */
    dt_linear up;   /* Llama up_proj [F, C]; unused (in = out = 0) for GPT-2 */
    dt_linear down; /* GPT-2 mlp.c_proj [C, 4C]; Llama down_proj [C, F] */
} dt_block;

/* ln1, ln2 and g may point to buffers shared by all blocks: the backward recomputes them
 * (fp32 mode) from the saved inputs and statistics. */
typedef struct dt_block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N, C], [N], [N] (mean unused for RMSNorm) */
    float *qkv;                       /* [N, (NH + 2 NKV) hs], after RoPE */
    float *att, *lse;                 /* [N, NH hs], [B, NH, T] */
    float *x2;                        /* [N, C] residual stream after the attention branch */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *h, *u, *g;                 /* [N, F]: fc (or gate) output, up output, activation */
    dt_bf16 *ln1_lp, *att_lp, *ln2_lp, *g_lp; /* bf16 matmul inputs (NULL in fp32 mode) */
} dt_block_acts;

typedef struct dt_block_scratch {
    float *dln;  /* [N, C] */
    float *dqkv; /* [N, (NH + 2 NKV) hs] */
    float *datt; /* [N, NH hs] */
    float *dh, *du, *dg; /* [N, F] */
    dt_bf16 *dy_lp;      /* [N, max(C, QKV, F)] bf16 scratch for backward matmuls */
} dt_block_scratch;

typedef struct dt_rope_cache {
    const float *cos_t, *sin_t; /* [T, hs/2] (borrowed); NULL for GPT-2 */
} dt_rope_cache;

int dt_block_qkv_width(const dt_block_dims *d);

/* x, out: [B, T, C]; out must not alias x. */
dt_status dt_block_forward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                           const dt_rope_cache *rope, const float *x, int B, int T,
                           dt_block_acts *a, float *out);
/* x: the forward input; dres: [B, T, C], gradient of the output in, of the input out. */
dt_status dt_block_backward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block *blk,
                            const dt_rope_cache *rope, const float *x, int B, int T,
                            const dt_block_acts *a, dt_block_scratch *s, float *dres);

/* The block's norm (LayerNorm for GPT-2, RMSNorm for Llama), shared with the final norm.
 * Backward accumulates into dx and the norm's weight gradients. */
void dt_block_norm_forward(dt_block_kind kind, const dt_norm_params *p, const float *x, int N,
                           int C, float eps, float *y, float *mean, float *rstd);
void dt_block_norm_backward(dt_block_kind kind, const dt_norm_params *p, const float *x,
                            const float *dy, const float *mean, const float *rstd, int N, int C,
                            float *dx);

#endif
