/* Softmax cross-entropy on a chunk of logit rows, forward and backward in one pass.
 *
 * The LM head (nn/lm_head.c) computes logits for a few rows at a time and calls this on each
 * chunk, so the [N, V] logits and their gradient never exist whole: the chunk's logits are
 * overwritten by their gradient in place. Rows run in parallel over OpenMP threads.
 */
#ifndef DT_KERNELS_XENT_H
#define DT_KERNELS_XENT_H

#include <stdint.h>

/* logits: [n, V] row stride ld (>= V). For each row r with targets[r] >= 0:
 *   losses[r] = logsumexp(logits[r]) - logits[r][targets[r]]
 *   if grad_scale != 0: logits[r] := (softmax(logits[r]) - onehot(targets[r])) * grad_scale
 * Rows with targets[r] < 0 are ignored: loss 0 and (if grad_scale != 0) gradient 0. */
void dt_xent_forward_backward(float *logits, float *losses, const int32_t *targets, int n,
                              int V, int64_t ld, float grad_scale);
void dt_xent_forward_backward_ref(float *logits, float *losses, const int32_t *targets, int n,
                                  int V, int64_t ld, float grad_scale);

#endif
