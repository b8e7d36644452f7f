/* GPT-2 and Llama-style decoder-only language models, built from nn/ blocks.
 *
 * The model owns its parameter table (core/param.h), one contiguous arena each for weights
 * and gradients (and a bf16 copy of the weights for bf16 matmuls), the activations of every
 * block sized for `B x T` tokens at init, and the shared backward scratch. Nothing is
 * allocated after dt_gpt_init. Training step:
 *     dt_gpt_forward -> dt_gpt_loss(backward = true) -> dt_gpt_backward
 * and gradients accumulate across micro-batches until dt_gpt_zero_grad.
 * Single-threaded control; kernels use OpenMP inside.
 */
#ifndef DT_MODELS_GPT_H
#define DT_MODELS_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/param.h"
#include "core/status.h"

typedef struct dt_gpt dt_gpt;

/* Derived sizes the model uses (also what the planner will predict from). */
int dt_gpt_kv_heads(const dt_model_config *c);
int dt_gpt_ffn_hidden(const dt_model_config *c);

/* B x T: the largest micro-batch the model will see. training = false keeps no gradients. */
dt_status dt_gpt_init(const dt_model_config *cfg, int B, int T, dt_precision prec, bool training,
                      dt_mem *mem, dt_gpt **out);
void dt_gpt_free(dt_gpt *g);
const dt_model_config *dt_gpt_config(const dt_gpt *g);

/* Random initialisation, GPT-2 / HF style, reproducible from the seed alone. */
void dt_gpt_init_weights(dt_gpt *g, uint64_t seed);
/* Refresh the bf16 weight copy after the fp32 weights changed outside the optimizer. */
void dt_gpt_sync_lp(dt_gpt *g);

/* tokens: [B, T] */
dt_status dt_gpt_forward(dt_gpt *g, const int32_t *tokens, int B, int T);
/* Mean cross-entropy is loss_sum / (number of targets >= 0). With backward, the gradient of
 * grad_scale * sum(losses) flows into the final norm's output (continued by dt_gpt_backward). */
dt_status dt_gpt_loss(dt_gpt *g, const int32_t *targets, int B, int T, float grad_scale,
                      bool backward, double *loss_sum);
dt_status dt_gpt_backward(dt_gpt *g, const int32_t *tokens, int B, int T);
void dt_gpt_zero_grad(dt_gpt *g);
/* Logits of the last position of one sequence tokens[0..T) (T <= the init T). */
dt_status dt_gpt_logits_last(dt_gpt *g, const int32_t *tokens, int T, float *logits);

int dt_gpt_n_params(const dt_gpt *g);
const dt_param *dt_gpt_param(const dt_gpt *g, int i);
const dt_param *dt_gpt_find_param(const dt_gpt *g, const char *name);
int64_t dt_gpt_numel(const dt_gpt *g);
float *dt_gpt_weights(dt_gpt *g);
float *dt_gpt_grads(dt_gpt *g);  /* NULL when not training */
dt_bf16 *dt_gpt_weights_lp(dt_gpt *g); /* NULL in fp32 mode */
/* Model FLOPs per trained token (forward + backward) at sequence length T, for MFU:
 * 6 x (matmul weights incl. the LM head) + 6 L C T (causal attention's two matmuls). */
double dt_gpt_flops_per_token(const dt_gpt *g, int T);

/* HuggingFace safetensors (models/gpt_io.c). Names and layouts as transformers writes them;
 * the model shape goes into __metadata__ so dtrain sample can rebuild the model. */
dt_status dt_gpt_save(const dt_gpt *g, const char *path);
dt_status dt_gpt_load(dt_gpt *g, const char *path);
/* Fill the model shape from a safetensors file's metadata; keys absent keep cfg's values. */
dt_status dt_gpt_config_from_file(const char *path, dt_model_config *cfg);

#endif
