/* Scaled dot-product attention, forward and backward, flash-attention style.
 *
 * The T x T score matrix is never materialised: queries are processed in tiles, keys
 * streamed in tiles with an online softmax (Dao et al., FlashAttention, NeurIPS'22, alg. 1);
 * the forward saves only the output and the per-row log-sum-exp, and the backward recomputes
 * the scores tile by tile (alg. 2). Grouped-query attention: query head h reads kv head
 * h / (NH / NKV). Scratch is a few tiles on each thread's stack; nothing is allocated.
 * Backward ACCUMULATES into dq, dk, dv (+=).
 */
#ifndef DT_KERNELS_ATTENTION_H
#define DT_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dt_attn_shape {
    int B, T;          /* batch, sequence length (queries and keys) */
    int NH, NKV, hs;   /* query heads, key/value heads (NH % NKV == 0), head size */
    int64_t q_stride;  /* floats between consecutive tokens of q (and dq) */
    int64_t kv_stride; /* floats between consecutive tokens of k, v (and dk, dv) */
    float scale;       /* usually 1/sqrt(hs) */
    bool causal;       /* query t sees keys 0..t */
} dt_attn_shape;

/* q: token (b,t) head h at q[(b*T+t)*q_stride + h*hs]; k, v likewise with kv_stride and NKV.
 * y: [B, T, NH*hs] dense; lse: [B, NH, T]. */
void dt_attention_forward(const dt_attn_shape *s, float *y, float *lse, const float *q,
                          const float *k, const float *v);
void dt_attention_backward(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                           const float *dy, const float *y, const float *lse, const float *q,
                           const float *k, const float *v);
/* Plain reference: materialises one score row at a time, in double. */
void dt_attention_forward_ref(const dt_attn_shape *s, float *y, float *lse, const float *q,
                              const float *k, const float *v);
void dt_attention_backward_ref(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                               const float *dy, const float *y, const float *lse,
                               const float *q, const float *k, const float *v);

#endif
