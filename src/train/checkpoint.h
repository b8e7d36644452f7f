/* Full training state on disk, for exact resume: DIR/step-N/ holds
 *   model.safetensors  weights, HuggingFace names (usable by dtrain sample and transformers)
 *   optim.safetensors  AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>" (internal layout)
 *   state.json         step, data-loader position, AdamW step count, seed, fp16 loss scale
 *   config.ini         the configuration that produced it
 * The folder is written as step-N.partial and renamed when complete (every file fsync'ed), so
 * a crash leaves either no step-N or a whole one. Resume reads the newest complete folder.
 */
#ifndef DT_TRAIN_CHECKPOINT_H
#define DT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "models/gpt.h"
#include "optim/loss_scale.h"

typedef struct dt_train_state {
    int64_t step;               /* optimizer steps completed */
    int64_t data_pos, data_step; /* loader state after `step` steps */
    uint64_t seed;
    dt_loss_scale scaler; /* fp16 loss scale (scale, clean-step count, skipped steps; the
                           * window comes from the config) */
} dt_train_state;

/* The state as whole arenas (dt_gpt_numel floats each): weights and AdamW moments. */
typedef struct dt_ckpt_arenas {
    float *w, *m, *v;
    int adam_steps;
} dt_ckpt_arenas;

dt_status dt_ckpt_save(const char *dir, const dt_gpt *g, const dt_ckpt_arenas *a,
                       const dt_train_state *s, const dt_config *cfg);
/* Remove all but the newest `keep` complete folders (keep 0 = keep all). */
dt_status dt_ckpt_prune(const char *dir, int keep);
/* Path of the newest complete step-N folder in dir into out ("" when there is none). */
dt_status dt_ckpt_latest(const char *dir, char *out, size_t out_len);
dt_status dt_ckpt_load(const char *folder, const dt_gpt *g, dt_ckpt_arenas *a,
                       dt_train_state *s);

#endif
