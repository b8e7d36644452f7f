/* The language-model head fused with softmax cross-entropy, optionally vocabulary-parallel
 * (Megatron's VocabParallelEmbedding-style row split of the [vocab, C] matrix with its
 * vocab-parallel cross-entropy).
 *
 * Rows are processed `chunk` at a time: this rank's logits for the chunk (one matmul against
 * its [V, C] rows of the vocabulary matrix), per-row softmax statistics of those logits, ONE
 * all-gather of the statistics over `tp` (3 floats per row per rank), the loss, d(logits) in
 * place, then straight away the chunk's input gradient and its share of the vocabulary
 * matrix's gradient. Logits are never gathered, and the [N, V] logits and their gradient
 * never exist whole: at the GPT-2 124M shape that is 205 MB not held.
 * A size-1 `tp` runs the same code with the whole vocabulary. The head allocates nothing; its
 * scratch is borrowed. One thread of control per head (the kernels use OpenMP inside).
 */
#ifndef DT_NN_LM_HEAD_H
#define DT_NN_LM_HEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "nn/linear.h"

typedef struct dt_lm_head {
    int C, V;            /* V: rows of w held by this rank (padding rows included) */
    const float *w;      /* [V, C] (borrowed; GPT-2 ties it to the token embedding) */
    float *dw;           /* [V, C] or NULL */
    bool dw_set;         /* the first chunk OVERWRITES dw (the step's first write of it) */
    const dt_bf16 *w_lp; /* bf16 copy, or NULL in fp32 mode */
    dt_comm *tp;         /* borrowed, never NULL: the vocabulary is split over it; size 1 =
                          * whole vocabulary on this rank (dt_comm_local_init) */
    int vocab_first;     /* global token id of row 0 of w */
    int vocab_size;      /* the true vocabulary: rows with global id >= vocab_size are padding,
                          * never predicted (out of the softmax, zero gradient) */
    int chunk;           /* rows per chunk */
    float *logits;       /* [chunk, V] scratch (borrowed); 16-bit modes round the gradient
                          * over it (rows at a stride of whole 64-element blocks when they fit) */
    float *stats;        /* [dt_lm_head_stats_count(h)] scratch (borrowed) */
} dt_lm_head;

/* Rows per chunk that keep a chunk's logits near `floats` (at least 64 rows), in equal chunks. */
int dt_lm_head_chunk_rows(int V, int N, int64_t floats);
/* The logits budget a model gives its head: 16 Mi floats (64 MiB); 8 Mi where the head's own
 * 16-bit matrix is cast beside them for the head's time (a GPT's 16-bit modes), which then
 * takes the room of the other half. */
#define DT_LM_HEAD_LOGITS_FLOATS ((int64_t)16 << 20)
#define DT_LM_HEAD_LOGITS_FLOATS_CAST ((int64_t)8 << 20)
/* Floats of h->stats scratch for h->chunk and h->tp's size: chunk * (3 * size + 1). */
int64_t dt_lm_head_stats_count(const dt_lm_head *h);

/* x: [N, C] (replicated over tp); x_lp: [N, C] bf16 (written in bf16 mode); targets: [N]
 * global token ids, the same on every tp rank (negative = ignored row, loss 0, no gradient;
 * >= vocab_size is a caller bug and gives a NaN loss); losses: [N] per-row cross-entropy,
 * bit-identical on every tp rank. With backward: the gradient of grad_scale * sum(losses) is
 * written into dx [N, C] (overwritten: each chunk's rows once) and ACCUMULATED into head->dw
 * (this rank's rows; padding rows get exactly 0), or written there with dw_set.
 * dx gets only this rank's PARTIAL sum over its vocabulary rows: the head does not reduce it;
 * the caller sums dx over tp (e.g. the adjoint all-reduce of nn/region's copy op, which can
 * then overlap the rest of the backward).
 * Collective over tp: one all-gather per chunk (3 * n floats from each rank), so every tp
 * rank must call it with the same N, chunk and backward. Errors: DT_ERR_ARG for a bad head
 * (NULL tp or scratch, chunk < 1, ...), found before any collective, so on every rank alike
 * when the heads agree; DT_ERR_DNNL from a matmul and DT_ERR_MPI from the all-gather. */
dt_status dt_lm_head_loss(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                          dt_bf16 *x_lp, const int32_t *targets, int N, float grad_scale,
                          bool backward, float *losses, float *dx);
/* logits: [N, V], THIS rank's columns only (global ids vocab_first + j, padding included
 * and not masked) for a few rows (sampling). Not collective: with a tp split each rank gets
 * its own slice; the model calls it with a size-1 tp, where it is the whole vocabulary (then
 * columns >= vocab_size, if any, are padding and must be skipped by the caller). */
dt_status dt_lm_head_logits(const dt_nn_ctx *ctx, const dt_lm_head *h, const float *x,
                            dt_bf16 *x_lp, int N, float *logits);

#endif
