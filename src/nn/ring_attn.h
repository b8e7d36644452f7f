/* Ring attention (context parallelism): each of the cp ranks of a ring holds 1/cp of every
 * sequence's tokens, and attention passes key/value blocks around the ring, computing its
 * queries against each visiting block while the next one is in flight (Liu et al., Ring
 * Attention with Blockwise Transformers, 2023). The partial results of the blocks are merged
 * with their log-sum-exps, in ring order, so the result never depends on when a block
 * arrived. The backward passes the blocks around again, with the gradient of each block's
 * keys and values travelling beside it and summed rank after rank, until it comes home.
 *
 * Which tokens a rank holds: the sequence is cut into chunks of equal length, 2 cp of them
 * under zigzag (rank r holds chunks r and 2 cp - 1 - r, so causal work is the same on every
 * rank) or cp of them when contiguous (rank r holds chunk r). A rank's local sequence is its
 * chunks in that order. Causal attention skips a (query chunk, key chunk) pair whose keys all
 * lie after its queries and masks the diagonal pair; non-causal attention runs every pair.
 *
 * Talks to the other ranks only through dt_comm (point to point, tags 71 and 72); every rank
 * of the ring calls each function together. A ring of one rank is plain attention.
 */
#ifndef DT_NN_RING_ATTN_H
#define DT_NN_RING_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/status.h"
#include "kernels/attention.h"

typedef struct dt_ring {
    dt_comm *cp; /* borrowed; size 1 = no ring */
    bool zigzag; /* 2 chunks a rank (balanced), else 1 */
} dt_ring;

/* The whole-sequence chunk ids rank `rank` of a `cp`-rank ring holds, in local order; returns
 * how many (2 under zigzag, else 1). Chunks are seq_len / (cp * count) tokens long. */
int dt_ring_chunks(int cp, bool zigzag, int rank, int chunk[2]);

/* Floats of scratch the forward and backward need for shape s (s->T: the LOCAL tokens of a
 * sequence); 0 for a ring of one rank. */
int64_t dt_ring_work_count(const dt_ring *r, const dt_attn_shape *s);

/* s describes the local q, k, v (B sequences of s->T local tokens, strides as the kernel's).
 * y: [B, T, NH hs] dense. lse: [B, chunks, NH, T / chunks] (chunk by chunk, so each chunk's
 * rows are one kernel call's). Over one rank: the kernel itself, lse [B, NH, T]. */
dt_status dt_ring_attention_forward(const dt_ring *r, const dt_attn_shape *s, float *y, float *lse,
                                    const float *q, const float *k, const float *v, float *work);
/* The gradients of q, k, v OVERWRITTEN (as dt_attention_backward_set), from dy, the forward's
 * y and lse. dq shares q's stride, dk and dv share k's. */
dt_status dt_ring_attention_backward_set(const dt_ring *r, const dt_attn_shape *s, float *dq,
                                         float *dk, float *dv, const float *dy, const float *y,
                                         const float *lse, const float *q, const float *k,
                                         const float *v, float *work);

#endif
