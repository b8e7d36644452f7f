/* The language-model head fused with softmax cross-entropy.
 *
 * Rows are processed `chunk` at a time: logits for the chunk (one matmul against the [V, C]
 * vocabulary matrix), loss and d(logits) in place (kernels/xent), then straight away the
 * chunk's input gradient and its share of the vocabulary matrix's gradient. The [N, V]
 * logits and their gradient never exist whole: at the GPT-2 124M shape that is 205 MB not
 * held (and not written and read back twice).
 */
#ifndef DT_NN_LM_HEAD_H
#define DT_NN_LM_HEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/linear.h"

typedef struct dt_lm_head {
    int C, V;
    const float *w;      /* [V, C] (borrowed; GPT-2 ties it to the token embedding) */
    float *dw;           /* [V, C] or NULL */
    const dt_bf16 *w_lp; /* bf16 copy, or NULL in fp32 mode */
    int chunk;           /* rows per chunk */
    float *logits;       /* [chunk, V] scratch (borrowed) */
    dt_bf16 *logits_lp;  /* [chunk, V] bf16 scratch (bf16 mode) */
} dt_lm_head;

/* Rows per chunk that keep a chunk's logits near 64 MiB (at least 64 rows). */
int dt_lm_head_chunk_rows(int V, int N);

/* x: [N, C]; x_lp: [N, C] bf16 (written in bf16 mode); targets: [N] (negative = ignored);
 * losses: [N] per-row cross-entropy. With backward: the gradient of grad_scale * sum(losses)
 * is ACCUMULATED into dx [N, C] and head->dw. */
dt_status dt_lm_head_loss(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                          dt_bf16 *x_lp, const int32_t *targets, int N, float grad_scale,
                          bool backward, float *losses, float *dx);
/* logits: [N, V] for a few rows (sampling). */
dt_status dt_lm_head_logits(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                            dt_bf16 *x_lp, int N, float *logits);

#endif
