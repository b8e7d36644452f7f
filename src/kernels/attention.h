/* Scaled dot-product attention, forward and backward, flash-attention style.
 *
 * The T x T score matrix is never materialised: queries are processed in tiles, keys
 * streamed in tiles with an online softmax (Dao et al., FlashAttention, NeurIPS'22, alg. 1);
 * the forward saves only the output and the per-row log-sum-exp, and the backward recomputes
 * the scores tile by tile (alg. 2). Grouped-query attention: query head h reads kv head
 * h / (NH / NKV). Scratch is a few tiles on each thread's stack; nothing is allocated but in
 * bf16 mode on AVX512_BF16 (see below).
 * Backward ACCUMULATES into dq, dk, dv (+=); its _set variant overwrites them (the values of
 * accumulating onto zeros).
 */
#ifndef DT_KERNELS_ATTENTION_H
#define DT_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct dt_attn_shape {
    int B, T;          /* batch, sequence length (queries and keys) */
    int NH, NKV, hs;   /* query heads, key/value heads (NH % NKV == 0), head size */
    int64_t q_stride;  /* floats between consecutive tokens of q (and dq) */
    int64_t kv_stride; /* floats between consecutive tokens of k, v (and dk, dv) */
    float scale;       /* usually 1/sqrt(hs) */
    bool causal;       /* query t sees keys 0..t */
    bool bf16;         /* bf16 mode: QK^T and PV of bf16 operands (see below) */
    /* Documents kept apart (NULL: none). Key c of this call sits at position k_pos0 + c of its
     * sequence, and query (b, t) sees only keys at positions >= doc_start[b*T + t], the first
     * token of its document (non-decreasing in t). A lower bound only: with causal attention
     * (or where every key precedes every query, a ring's off-diagonal pair) that keeps whole
     * documents apart. Key tiles no query of a tile sees are skipped. A query that sees no key
     * gets y = 0 and lse = -inf. */
    const int32_t *doc_start;
    int k_pos0;
} dt_attn_shape;

/* bf16 mode (the run's matmuls are bf16): every product takes operands rounded to bf16
 * (nearest even), as a bf16 matmul (and flash-attention's bf16 kernels) round theirs; the
 * products of bf16 values are exact, every sum and the softmax stay fp32. Forward: q and k
 * before the scores QK^T, P and v before PV. So the scores carry a relative error of about
 * 2^-8 (q, k each rounded by 2^-9), and y one of about 2^-9 of the terms of PV; lse is of the
 * rounded scores. P is rounded as the online softmax holds it: e^(s - m) with m the row
 * maximum up to the end of its tile of 64 keys (then rescaled). Backward: P is rebuilt from
 * the same rounded q and k (so it is the forward's P, unrounded); dP = bf16(dy) bf16(v)^T;
 * D = rowsum(bf16(dy) y); dS = P (dP - D) (times scale) in fp32, then rounded; dq = dS k,
 * dk = dS^T q, dv = bf16(P)^T dy, all of rounded operands. The rounding is taken as the
 * identity (straight-through). With AVX512_BF16 every product runs on vdpbf16ps (head sizes
 * that are multiples of 16), from operands pre-packed per head in a per-call scratch (a few
 * tiles of the whole sequence per thread, allocated per call; the fallback below runs if it
 * cannot be had); elsewhere the operands are rounded and multiplied in fp32. The _ref twins
 * round the same operands. */

/* q: token (b,t) head h at q[(b*T+t)*q_stride + h*hs]; k, v likewise with kv_stride and NKV.
 * y: [B, T, NH*hs] dense; lse: [B, NH, T]. */
void dt_attention_forward(const dt_attn_shape *s, float *y, float *lse, const float *q,
                          const float *k, const float *v);
void dt_attention_backward(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                           const float *dy, const float *y, const float *lse, const float *q,
                           const float *k, const float *v);
void dt_attention_backward_set(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                               const float *dy, const float *y, const float *lse,
                               const float *q, const float *k, const float *v);
/* bf16 storage (bf16 mode implied): q, k, v are bf16 arrays at the same strides, and so is y
 * when y16 (else fp32); lse, dy and the gradients stay fp32. The results are those of the fp32
 * entry points in bf16 mode on the same (bf16) values, y rounded once at the end when y16.
 * DT_ERR_OOM (nothing written) only where a head size above the packed kernels' limit runs the
 * reference on fp32 copies of the operands and those cannot be allocated. */
dt_status dt_attention_forward_bf16(const dt_attn_shape *s, void *y, bool y16, float *lse,
                                    const uint16_t *q, const uint16_t *k, const uint16_t *v);
dt_status dt_attention_backward_set_bf16(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                                         const float *dy, const void *y, bool y16,
                                         const float *lse, const uint16_t *q, const uint16_t *k,
                                         const uint16_t *v);
/* Plain reference: materialises one score row at a time, in double. */
void dt_attention_forward_ref(const dt_attn_shape *s, float *y, float *lse, const float *q,
                              const float *k, const float *v);
void dt_attention_backward_ref(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                               const float *dy, const float *y, const float *lse,
                               const float *q, const float *k, const float *v);

#endif
