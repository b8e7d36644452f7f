/* The training job: config -> mesh, data, engine (model + optimizer + ZeRO) -> steps with
 * logging, evaluation, checkpoints, export and a sample. Collective over `world`: every rank
 * runs it; rank 0 alone prints, writes metrics, checkpoints and exports. */
#ifndef DT_TRAIN_TRAINER_H
#define DT_TRAIN_TRAINER_H

#include <stdint.h>

#include "core/comm.h"
#include "core/config.h"
#include "models/model.h"

/* Validates cfg and the layout, trains, and returns the first error with its message set;
 * every rank returns the same status and message, except when *stranded is set: a step
 * failed on this rank while its peers may be blocked waiting for it. */
dt_status dt_train_run(const dt_config *cfg, dt_comm *world, bool *stranded);

/* Autoregressive sampling from a model built with T >= n_prompt + n_new... (the context is
 * cropped to the last `context` tokens). out: [n_new] new tokens. */
dt_status dt_sample_tokens(dt_model *g, int context, const int32_t *prompt, int n_prompt,
                           int n_new, float temperature, uint64_t seed, int32_t *out);
/* Print tokens: bytes when the vocabulary is byte-level (256), else space-separated ids. */
void dt_sample_print(const int32_t *tok, int n, int vocab_size);

/* dtrain sample: model from a checkpoint folder or safetensors file. */
dt_status dt_sample_run(const char *checkpoint, const char *prompt, int n_new,
                        float temperature, uint64_t seed);

#endif
