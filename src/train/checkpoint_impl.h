/* Internal to the checkpoint module (checkpoint.c, checkpoint_shard.c, checkpoint_load.c):
 * the training state as JSON, shared by the whole and the sharded formats. */
#ifndef DT_TRAIN_CHECKPOINT_IMPL_H
#define DT_TRAIN_CHECKPOINT_IMPL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "train/checkpoint.h"

/* step, data position, AdamW step count, seed, loss scale; NULL when out of memory */
cJSON *dt_ckpt_state_json(const dt_train_state *s, int adam_steps);
/* The inverse; every field checked, errors name `path`. */
dt_status dt_ckpt_state_from_json(const cJSON *j, const char *path, dt_train_state *s,
                                  int *adam_steps);

/* The partial folder a writer on this host, process `pid`, makes for step N:
 * "DIR/step-N.partial-HOST-PID-NONCE". Returns snprintf's length. */
int dt_ckpt_partial_name(char *out, size_t n, const char *dir, long long step, int pid,
                         unsigned long nonce);
/* Is `name` a partial folder of a writer on this host that is no longer alive? */
bool dt_ckpt_partial_is_stale(const char *name);
/* The other writers of dir, from their live partial folders (all but `own`, a path or a
 * name): "host H pid P (step-4.partial-...)", joined by "; ", or "" when none is seen. */
void dt_ckpt_other_writers(const char *dir, const char *own, char *out, size_t n);

#endif
