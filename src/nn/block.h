/* A pre-norm transformer block, in its two flavours:
 *   GPT-2: x2 = x + proj(attn(LN1(x)));  out = x2 + proj_mlp(gelu(fc(LN2(x2))))
 *   Llama: x2 = x + o(attn(rope(qkv(RMS1(x)))));  out = x2 + down(silu(gate(h)) * up(h)), h =
 * RMS2(x2)
 *
 * Split across ranks the Megatron way (dt_block_par). Each sub-layer is
 *     norm -> enter region -> column-parallel matmul(s) -> [attention | activation]
 *          -> row-parallel matmul -> leave region -> + bias + residual
 * where the tensor-parallel (tp) ranks hold heads [r NH/tp, (r+1) NH/tp) and MLP columns
 * [r F/tp, (r+1) F/tp). The region ops (nn/region.h) are chosen once: copy / reduce (plain
 * tensor parallelism: the residual stream is replicated over tp) or seq_gather /
 * seq_reduce_scatter (Megatron-SP: each tp rank holds N/tp of the rows outside the region).
 * Ulysses (sp ranks) holds N/sp rows throughout and switches to whole sequences with heads
 * split around attention, by an all-to-all. Context parallelism (ring) gives each rank its
 * chunks of every sequence, T local tokens, and runs attention around the ring. Rows are the
 * flattened [B*T] tokens; a rank's share is a contiguous range of them. Degree 1 is the same
 * code over size-1 comms.
 *
 * Sizes, for a micro-batch of N = B*T tokens: Nt = N/sp rows inside the tp region, Nr =
 * Nt/|rows| rows of the residual stream (|rows| = tp for Megatron-SP, else 1). dt_block_dims
 * holds the LOCAL widths (NH, NKV, F already divided by tp); attention runs NH/sp heads.
 *
 * The block keeps borrowed views of its weights (dt_block), the activations its backward
 * needs (dt_block_acts, one set per block) and shares one set of transient buffers across
 * blocks (dt_block_scratch). Backward ACCUMULATES the gradient of the block input into
 * `dres`, which on entry holds the gradient of the output.
 */
#ifndef DT_NN_BLOCK_H
#define DT_NN_BLOCK_H

#include <stdbool.h>

#include "core/comm.h"
#include "nn/linear.h"
#include "nn/region.h"
#include "nn/ring_attn.h"

typedef enum dt_block_kind { DT_BLOCK_GPT2, DT_BLOCK_LLAMA, DT_BLOCK_KIND_COUNT } dt_block_kind;

typedef struct dt_block_dims {
    dt_block_kind kind;
    int C, NH, NKV, hs, F; /* NH, NKV, F: this tp rank's share */
    float norm_eps;
} dt_block_dims;

/* How the block is split. Comms are borrowed and never NULL (size 1 = not split). */
typedef struct dt_block_par {
    dt_comm *tp;   /* heads and MLP width */
    dt_comm *sp;   /* Ulysses: rows split, all-to-all around attention */
    dt_comm *rows; /* the comm the residual rows are split over inside tp: tp or size 1 */
    dt_region_kind enter, leave; /* COPY/REDUCE or SEQ_GATHER/SEQ_REDUCE_SCATTER */
    dt_ring ring; /* context parallelism: attention runs around ring.cp (size 1: no ring); its
                   * ranks hold their chunks of every sequence (B x T local tokens), Ulysses
                   * runs inside each; fp32 q|k|v only (no bf16 storage under a ring) */
} dt_block_par;

/* The splits from the comms a model is given (NULL: not split): size-1 comms are made in
 * own[4] for those missing (dt_block_par_free_own releases them); the regions are COPY/REDUCE,
 * or SEQ_GATHER/SEQ_REDUCE_SCATTER under Megatron-SP (sequence_tp: the residual rows split
 * over tp). Both models hold their splits so. */
dt_status dt_block_par_make(dt_comm *tp, dt_comm *sp, bool sequence_tp, dt_comm *cp, bool cp_zigzag,
                            dt_comm *own[4], dt_block_par *out);
void dt_block_par_free_own(dt_comm *own[4]);

/* Row counts of a micro-batch of N tokens: Nt inside the tp region, Nr in the residual. */
int dt_block_rows_tp(const dt_block_par *p, int N);
int dt_block_rows_res(const dt_block_par *p, int N);

typedef struct dt_norm_params {
    float *w, *b, *dw, *db; /* b, db NULL for RMSNorm (borrowed) */
    bool grad_set;          /* the block's backward overwrites dw, db (see dt_block) */
} dt_norm_params;

typedef struct dt_block {
    dt_norm_params ln1, ln2;
    dt_linear qkv;  /* [(NH + 2 NKV) hs, C]: this rank's q, k, v heads stacked */
    dt_linear proj; /* [C, NH hs]; its bias is the full (replicated) bias */
    dt_linear fc;   /* GPT-2 c_fc [F, C]; Llama gate_proj [F, C] */
    dt_linear up;   /* Llama up_proj [F, C]; unused (in = out = 0) for GPT-2 */
    dt_linear down; /* GPT-2 mlp.c_proj [C, F]; Llama down_proj [C, F]; full bias */
} dt_block;

/* The block's weight gradients accumulate over backward passes, except that each tensor
 * whose view has grad_set (dt_linear.grad_set, dt_norm_params.grad_set) is OVERWRITTEN by the
 * pass that writes it: the model sets the flags for a step's first micro-batch, so nobody
 * zeroes the gradient arena. Which pass writes what: the full backward writes every weight
 * gradient; under split backward the input pass writes the norms' and the row-parallel
 * biases' (proj, down), and the weight pass the matmul weights' and the column-parallel
 * biases' (qkv, fc). */

/* Saved for the backward, one set per block. */
typedef struct dt_block_acts {
    float *ln1_mean, *ln1_rstd;       /* [Nr] (mean unused for RMSNorm) */
    float *qkv;                       /* [N, W/sp] q|k|v of whole sequences, after RoPE */
    float *att, *lse;                 /* [Nt, NH hs] (row layout), [B, NH/sp, T] */
    float *x2;                        /* [Nr, C] residual stream after the attention branch */
    float *ln2_mean, *ln2_rstd;       /* [Nr] */
    float *h, *u;                     /* [Nt, F]: fc (or gate) output, up output */
    dt_bf16 *att_lp, *g_lp;           /* [Nt, A], [Nt, F] bf16 matmul inputs (NULL in fp32
                                       * mode): may be one buffer shared by all blocks
                                       * (rebuilt in backward from att, h, u) */
    dt_bf16 *ln1_lp, *ln2_lp;         /* [Nt, C] bf16 norm outputs: may be one buffer shared
                                       * by all blocks (rebuilt in backward) */
    dt_bf16 *qkv16, *att16;           /* bf16 mode: q|k|v [N, W/sp] (after RoPE, rounded once)
                                       * and att [Nt, NH hs] kept in bf16 in place of qkv and
                                       * att (then NULL; att_lp unused by the attention); NULL
                                       * in the other modes and under int8 storage */
    dt_bf16 *h_lp, *u_lp;             /* [Nt, F] bf16 mode only: h and u kept in bf16, as
                                       * autocast keeps them (h, u are NULL then) */
} dt_block_acts;

/* Transients shared by every block (W = (NH + 2 NKV) hs, A = NH hs). In fp32 mode the norm
 * outputs and the MLP activation are recomputed in backward into ln/ln_full/g. */
typedef struct dt_block_scratch {
    float *ln;        /* [Nr, C] */
    float *ln_full;   /* [Nt, C] the norm output inside the tp region; unused (may be NULL)
                       * in bf16 mode over one tp rank, where the norm writes its bf16 copy */
    float *qkv_rows;  /* [Nt, W] the qkv matmul's output (and, in backward, its gradient) */
    float *packed;    /* [Nt, W] q|k|v regrouped per sp rank for the all-to-all */
    float *att_heads; /* [N, A/sp] attention output in head layout */
    float *part;      /* [Nt, C] a row-parallel matmul's partial sum (and its gradient) */
    float *g;         /* [Nt, F] MLP activation, fp32 mode only (16-bit modes write a->g_lp) */
    float *work;      /* region-op scratch: dt_block_work_count floats */
    /* backward only (NULL when not training) */
    float *dln, *dln_full;  /* [Nr, C], [Nt, C] */
    float *dqkv_heads;      /* [N, W/sp] */
    float *datt, *datt_heads; /* [Nt, A], [N, A/sp] */
    float *dh, *du, *dg;    /* [Nt, F] */
    float *pgrad;           /* [6 C]: gradients of the parameters applied to split rows */
    dt_bf16 *dy_lp;         /* [Nt, max(C, W, F)] bf16 scratch for backward matmuls */
} dt_block_scratch;

/* Split backward (zero-bubble pipelines, Qi et al. ICLR'24): the input-gradient pass keeps
 * the output gradients of the block's matmuls here, per micro-batch, and the weight-gradient
 * pass turns them into dW later. Norm and row-parallel bias gradients are taken in the input
 * pass (they are cheap and need the residual gradient, which is gone by then). */
typedef struct dt_block_wgrad {
    float *dqkv;  /* [Nt, W] */
    float *dproj; /* [Nt, C] */
    float *dh, *du; /* [Nt, F] (du: Llama) */
    float *ddown; /* [Nt, C] */
} dt_block_wgrad;

/* Where the tokens of a micro-batch sit (borrowed). pos and doc_start index the B x T tokens
 * attention sees (whole sequences under Ulysses; a ring's local tokens, whose document starts
 * are positions of the whole sequence). */
typedef struct dt_block_seq {
    const float *cos_t, *sin_t; /* RoPE tables [positions, hs/2]; NULL for GPT-2 */
    const int32_t *pos;         /* [B*T] each token's RoPE table row; NULL: t of its sequence */
    const int32_t *doc_start;   /* [B*T] documents kept apart (attention.h); NULL: none */
} dt_block_seq;

int dt_block_qkv_width(const dt_block_dims *d);
/* Floats of scratch.work the block's region ops and ring attention need for B x T tokens. */
int64_t dt_block_work_count(const dt_block_dims *d, const dt_block_par *p, int B, int T);

/* x, out: [Nr, C] (this rank's rows); out must not alias x. Collective over the par comms. */
dt_status dt_block_forward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                           const dt_block *blk, const dt_block_seq *seq, const float *x, int B,
                           int T, dt_block_acts *a, dt_block_scratch *s, float *out);
/* x: the forward input; dres: [Nr, C], gradient of the output in, of the input out.
 * wg NULL: the full backward. wg given: the input-gradient half only; the matmuls' weight
 * gradients wait in wg for dt_block_weight_backward. */
dt_status dt_block_backward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                            const dt_block *blk, const dt_block_seq *seq, const float *x, int B,
                            int T, const dt_block_acts *a, dt_block_scratch *s, dt_block_wgrad *wg,
                            float *dres);
/* The weight-gradient half: dW (and the column-parallel biases) from wg and the recomputed
 * or saved inputs. Collective over tp only under Megatron-SP in fp32 (the recomputed norm
 * output is gathered again). */
dt_status dt_block_weight_backward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                   const dt_block_par *p, const dt_block *blk, const float *x,
                                   int B, int T, const dt_block_acts *a, dt_block_scratch *s,
                                   const dt_block_wgrad *wg);

/* Rebuilding what selective checkpointing did not keep, before a backward or weight pass,
 * bit for bit as the forward made it: from a->qkv (saved, after RoPE) the attention core
 * again into a->lse and, back in row layout, a->att; collective over sp (all-to-all). (The
 * 16-bit copies the backward reads are rebuilt by the backward itself.) */
dt_status dt_block_rerun_attention(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                   const dt_block_par *p, const dt_block_seq *seq, int B, int T,
                                   dt_block_acts *a, dt_block_scratch *s);

/* The block's norm (LayerNorm for GPT-2, RMSNorm for Llama), shared with the final norm.
 * Backward accumulates into dx and the norm's weight gradients. */
void dt_block_norm_forward(dt_block_kind kind, const dt_norm_params *p, const float *x, int N,
                           int C, float eps, float *y, float *mean, float *rstd);
/* The same with y in bf16: the bits of dt_block_norm_forward's output rounded to bf16. */
void dt_block_norm_forward_bf16(dt_block_kind kind, const dt_norm_params *p, const float *x,
                                int N, int C, float eps, dt_bf16 *y, float *mean, float *rstd);
void dt_block_norm_backward(dt_block_kind kind, const dt_norm_params *p, const float *x,
                            const float *dy, const float *mean, const float *rstd, int N, int C,
                            float *dx);

#endif
