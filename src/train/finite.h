/* Non-finite values (issue 11, 5d): the first element of a rank's range of an arena that is
 * NaN or +-inf, named by its tensor, and the errors that report it. The scans run only on
 * the error path (the step's gradient norm is the cheap test: it is non-finite iff an element
 * is, or the sum of squares overflowed) and before anything is written (checkpoint, export,
 * the end of the run). */
#ifndef DT_TRAIN_FINITE_H
#define DT_TRAIN_FINITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "models/model.h"
#include "train/engine.h"

/* Scans arena elements [first, first + count) held at x[0 ..), of the local table (full =
 * false) or the one-process table (full = true) of g. Returns whether one is non-finite; then
 * `where` holds "TENSOR[i] = value" (i: the element within the tensor's local shard). */
bool dt_finite_first_bad(const dt_model *g, bool full, const float *x, int64_t first,
                         int64_t count, char *where, size_t n);

/* Collective over world: OK when every weight of the engine is finite, else an error naming
 * the step, the lowest rank holding a non-finite one and its first tensor element, the same
 * on every rank. `what` is what was about to happen ("saving a checkpoint"). */
dt_status dt_finite_check_weights(dt_engine *e, dt_comm *world, int64_t step, float grad_clip,
                                  const char *what);
/* Collective over world, for a step whose global gradient norm is not finite: the error
 * naming where it first appeared (the weights, if a previous update or a file made them so,
 * else the reduced gradients), the same on every rank; plugin.grad_clip is suggested only
 * when it is not set. */
dt_status dt_finite_step_error(dt_engine *e, dt_comm *world, int step, float lr,
                               float grad_clip);

#endif
