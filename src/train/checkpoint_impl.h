/* Internal to the checkpoint module (checkpoint.c, checkpoint_shard.c, checkpoint_load.c):
 * the training state as JSON, shared by the whole and the sharded formats. */
#ifndef DT_TRAIN_CHECKPOINT_IMPL_H
#define DT_TRAIN_CHECKPOINT_IMPL_H

#include <cjson/cJSON.h>

#include "train/checkpoint.h"

/* step, data position, AdamW step count, seed, loss scale; NULL when out of memory */
cJSON *dt_ckpt_state_json(const dt_train_state *s, int adam_steps);
/* The inverse; every field checked, errors name `path`. */
dt_status dt_ckpt_state_from_json(const cJSON *j, const char *path, dt_train_state *s,
                                  int *adam_steps);

#endif
