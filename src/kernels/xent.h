/* Softmax cross-entropy on chunks of logit rows, split so the vocabulary may be sharded over
 * ranks (Megatron's vocab-parallel cross-entropy) without ever gathering logits.
 *
 * A rank holds a window of each row: columns [0, V) are global token ids [first, first + V).
 * Three steps per chunk of rows:
 *   1. dt_xent_row_stats[_exp]: per row, the window's max m, sum s = sum_j e^(x_j - m) and the
 *      target's logit if the window owns the target (else 0). The _exp variant also leaves
 *      e^(x_j - m) in place of the logits, for step 3.
 *   2. (the caller all-gathers the stats of every rank, then) dt_xent_combine: the loss and,
 *      per row, this rank's gradient factor. Pure arithmetic in a fixed rank order, so every
 *      rank that runs it on the same gathered stats gets bit-identical losses.
 *   3. dt_xent_grad: d(logits) = (softmax - onehot) * grad_scale over the window, in place.
 * The whole vocabulary on one rank is the case first = 0 and one block of stats.
 * Stateless; rows run in parallel over OpenMP threads, each row by one thread in a fixed
 * order, so results do not depend on the thread count. Optimised functions have plain-double
 * _ref twins (the tests compare them).
 */
#ifndef DT_KERNELS_XENT_H
#define DT_KERNELS_XENT_H

#include <stdint.h>

#include "core/dtype.h"

/* logits: [n, ld] row-major; the window is columns [0, V) of each row (V >= 0, V <= ld),
 * holding global ids [first, first + V). targets: [n] global ids, negative = ignored row.
 * mx, sum, zt: [n] outputs:
 *   mx[r] = max_j logits[r][j], sum[r] = sum_j e^(logits[r][j] - mx[r])   (j < V)
 *   zt[r] = logits[r][targets[r] - first] if the target is in the window, else 0
 * An empty window (V = 0) gives mx = -inf, sum = 0; an ignored row gives mx = sum = zt = 0.
 * dt_xent_row_stats leaves the logits alone. dt_xent_row_stats_exp also writes
 * e^(logits[r][j] - mx[r]) over the window's logits (ignored rows stay untouched): the input
 * that dt_xent_grad expects. Columns [V, ld) are never touched. */
void dt_xent_row_stats(const float *logits, int64_t ld, int n, int V, int first,
                       const int32_t *targets, float *mx, float *sum, float *zt);
void dt_xent_row_stats_ref(const float *logits, int64_t ld, int n, int V, int first,
                           const int32_t *targets, float *mx, float *sum, float *zt);
void dt_xent_row_stats_exp(float *logits, int64_t ld, int n, int V, int first,
                           const int32_t *targets, float *mx, float *sum, float *zt);
void dt_xent_row_stats_exp_ref(float *logits, int64_t ld, int n, int V, int first,
                               const int32_t *targets, float *mx, float *sum, float *zt);

/* stats: [p][3][n], the stats of p windows that together cover the vocabulary, in rank
 * order: block k holds mx[n], sum[n], zt[n] of window k (as from dt_xent_row_stats). Combines
 * them, in that order, into the whole row's log-sum-exp:
 *   M = max_k mx_k, S = sum_k sum_k e^(mx_k - M), lse = M + log S   (in double)
 *   losses[r] = lse - sum_k zt_k   (only the owner's zt is nonzero, so the sum is exact)
 * and, when scale != NULL, this rank's (window me's) gradient factor
 *   scale[r] = grad_scale * e^(mx_me - lse)
 * which turns window me's stored e^(x - mx_me) into grad_scale * softmax. Ignored rows
 * (targets[r] < 0) get loss 0 and scale 0; a target >= vocab_size (no window can own it: a
 * caller bug) gets a NaN loss and scale 0. losses: [n]; scale: [n] or NULL. */
void dt_xent_combine(const float *stats, int p, int me, int n, const int32_t *targets,
                     int vocab_size, float grad_scale, float *losses, float *scale);

/* e: [n, ld], window columns [0, V) holding e^(x - mx) from dt_xent_row_stats_exp; columns
 * [V, width) are padding (width <= ld). Overwrites, for each row r:
 *   e[r][j] := e[r][j] * scale[r] - grad_scale * [first + j == targets[r]]   (j < V)
 *   e[r][j] := 0                                                           (V <= j < width)
 * and the whole [0, width) with 0 for ignored rows (targets[r] < 0). With scale from
 * dt_xent_combine this is (softmax - onehot) * grad_scale, the gradient of
 * grad_scale * loss. */
void dt_xent_grad(float *e, int64_t ld, int n, int V, int width, int first,
                  const int32_t *targets, const float *scale, float grad_scale);
void dt_xent_grad_ref(float *e, int64_t ld, int n, int V, int width, int first,
                      const int32_t *targets, const float *scale, float grad_scale);
/* dt_xent_grad, then each row's width values rounded to t (DT_BF16 or DT_F16) into
 * lp[r * ld_lp + 0:width] while the row is still in cache: the bits of dt_xent_grad followed
 * by dt_cast_f32_to_lp, with one pass over the [n, width] gradient instead of two.
 * lp either does not overlap e or is e itself, with width <= ld_lp <= 2 * ld: the 16-bit rows
 * are then written over the fp32 ones (one buffer for the logits and their rounded gradient),
 * in batches of rows whose writes only land on rows already read. */
void dt_xent_grad_lp(float *e, int64_t ld, int n, int V, int width, int first,
                     const int32_t *targets, const float *scale, float grad_scale, dt_dtype t,
                     uint16_t *lp, int64_t ld_lp);

#endif
