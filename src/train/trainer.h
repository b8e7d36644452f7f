/* The training job: config -> mesh, data, engine (model + optimizer + ZeRO) -> steps with
 * logging, evaluation, checkpoints, export and a sample. Collective over `world`: every rank
 * runs it; rank 0 alone prints, writes metrics, checkpoints and exports. */
#ifndef DT_TRAIN_TRAINER_H
#define DT_TRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/config.h"
#include "models/model.h"

/* Validates cfg and the layout, trains, and returns the first error with its message set;
 * every rank returns the same status and message, except when *stranded is set: a step
 * failed on this rank while its peers may be blocked waiting for it. */
dt_status dt_train_run(const dt_config *cfg, dt_comm *world, bool *stranded);

/* One rank's training steps, timed, without MPI (the planner's measured step, cli/): cfg's
 * model, optimizer, data and plugin boosted as rank 0 of a `world`-rank run whose other ranks
 * are absent (a stand-in world, core/comm.h): its own share of the work, its collectives
 * moving nothing. No files are written: no evaluation, checkpoint, trace or metrics. */
typedef struct dt_step_timer dt_step_timer;
dt_status dt_step_timer_init(const dt_config *cfg, int world, dt_step_timer **out);
/* How long one step took, and of that its reading of the batch's rows and its update */
typedef struct dt_step_times {
    double seconds, data_s, optimizer_s;
} dt_step_times;
/* One step (forward, backward and the optimizer's update), timed. */
dt_status dt_step_timer_run(dt_step_timer *t, dt_step_times *out);
/* The timed rank's memory accountant: what rank 0 of the layout holds. */
const dt_mem *dt_step_timer_mem(const dt_step_timer *t);
void dt_step_timer_free(dt_step_timer *t);

/* Autoregressive sampling from a model built with T >= n_prompt + n_new... (the context is
 * cropped to the last `context` tokens). out: [n_new] new tokens. */
dt_status dt_sample_tokens(dt_model *g, int context, const int32_t *prompt, int n_prompt, int n_new,
                           float temperature, uint64_t seed, int32_t *out);
/* Print tokens: bytes when the vocabulary is byte-level (256), else space-separated ids. */
void dt_sample_print(const int32_t *tok, int n, int vocab_size);
/* Print tokens as the text of a byte-level BPE (io/bpe.h); an id the vocabulary lacks (the
 * model's padding rows) prints as U+FFFD. */
struct dt_bpe;
void dt_sample_print_bpe(const struct dt_bpe *bpe, const int32_t *tok, int n);

/* dtrain sample: text from a model that makes token logits, from a checkpoint folder or a
 * safetensors file; another model (a DiT) is an error naming it (and --prompt). The weights'
 * average (train.ema_decay) where the checkpoint holds one, unless raw. tokenizer: the
 * byte-level BPE file (io/bpe.h) that encodes the prompt and decodes the text; NULL: bytes (a
 * vocabulary of 256) or, for another vocabulary, ids. */
dt_status dt_sample_run(const char *checkpoint, bool raw, const char *tokenizer, const char *prompt,
                        int n_new, float temperature, uint64_t seed);

/* dtrain sample --out FILE.gif: `count` clips of a model that predicts a flow velocity,
 * sampled in `steps` Euler steps from noise of `seed`, side by side in an animated GIF. Labels:
 * `label` for every clip (has_label), else clip k gets class k % n_classes (none for an
 * unconditional model); prompt: every clip's text, for a model with text that reads caption
 * bytes (model.text_len, text_dim 0; none: the null text); guidance > 0: classifier-free
 * guidance of that scale towards the label and the prompt. Every bad input is one
 * DT_ERR_ARG naming the value, before sampling: a label outside the model's classes, a
 * GIF that cannot be written there, a model that makes text, a --prompt for a model
 * without text or with precomputed embeddings. The GIF is written atomically: the old file
 * or the whole new one. */
enum { DT_SAMPLE_MAX_CLIPS = 64 };
typedef struct dt_sample_clip_opts {
    const char *checkpoint, *out;
    const char *prompt; /* NULL or "": no text */
    int steps, count, label;
    bool has_label;
    bool raw; /* the weights, not their average (train.ema_decay) where one was kept */
    float guidance;
    uint64_t seed;
    int frames, height, width; /* the clip to sample (a bucket's); 0: the checkpoint's */
} dt_sample_clip_opts;
dt_status dt_sample_clips_run(const dt_sample_clip_opts *opts);

#endif
