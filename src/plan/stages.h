/* How a model's units are cut into pipeline chunks (pure arithmetic, no MPI, no tensors).
 * Units: 0 = embedding, 1..L = blocks, L+1 = final norm and head. There are pp * v chunks,
 * chunk c on pipeline rank c % pp (plan/schedule.h's convention); chunk 0 also holds the
 * embedding and the last chunk the final unit. Layers go evenly (earlier chunks take the
 * remainder) or as the user lists them ("3,3,2": one count per chunk, in chunk order).
 */
#ifndef DT_PLAN_STAGES_H
#define DT_PLAN_STAGES_H

#include <stdbool.h>

#include "core/status.h"

enum { DT_MAX_CHUNKS = 256 };

typedef struct dt_stage_plan {
    int pp, v, n_layer, n_chunks;       /* n_chunks = pp * v */
    int first[DT_MAX_CHUNKS + 1];       /* chunk c holds units [first[c], first[c + 1]) */
} dt_stage_plan;

/* DT_ERR_ARG, naming the numbers, when the layers cannot be cut so (fewer layers than
 * chunks, a list of the wrong length, a zero or negative count, a sum that is not n_layer,
 * text that does not parse). layers may be NULL or "" for the even split. */
dt_status dt_stage_plan_make(int n_layer, int pp, int v, const char *layers, dt_stage_plan *out);
/* Whether layers ("" or "auto" or a list) parses as a list of layer counts >= 1, whatever
 * their number: checked where no pipeline uses it, so a typo never waits for pp > 1. */
dt_status dt_stage_layers_check(const char *layers);
/* Units held by pipeline rank `rank`: held[u] for u in 0..n_layer+1. */
void dt_stage_plan_held(const dt_stage_plan *p, int rank, bool *held);

#endif
