/* Shared inside plan/ (memory.c, comm.c): the padded parameter arena unit by unit. Nothing
 * outside plan/ includes it. */
#ifndef DT_PLAN_PLAN_IMPL_H
#define DT_PLAN_PLAN_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"

/* Floats of each unit this tp rank holds (held[u] for u in 0..L+1; NULL: all), in unit order,
 * each tensor its tp shard padded to 16 floats (GPT-2: a stage with the head but not the
 * embedding adds its copy of wte to the final unit). Returns the number of units. */
int dt_plan_local_units(const dt_model_config *m, int tp, const bool *held, int64_t *ucount);

#endif
