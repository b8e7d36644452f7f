/* Finding where a value went non-finite (issue 11, 5d): the first element of a rank's range
 * of an arena that is NaN or +-inf, named by its tensor. Used only on the error path (the
 * step's gradient norm is the cheap test: it is non-finite iff an element is, or the sum of
 * squares overflowed) and before anything is written (checkpoint, export). Pure, no MPI. */
#ifndef DT_TRAIN_FINITE_H
#define DT_TRAIN_FINITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/gpt.h"

/* Scans arena elements [first, first + count) held at x[0 ..), of the local table (full =
 * false) or the one-process table (full = true) of g. Returns whether one is non-finite; then
 * `where` holds "TENSOR[i] = value" (i: the element within the tensor's local shard). */
bool dt_finite_first_bad(const dt_gpt *g, bool full, const float *x, int64_t first,
                         int64_t count, char *where, size_t n);

#endif
