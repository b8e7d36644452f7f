/* GPT-2 and Llama-style decoder-only language models, built from nn/ blocks.
 *
 * The model owns its parameter table (core/param.h), one contiguous arena each for weights
 * and gradients (and a bf16 copy of the weights for bf16 matmuls), the activations of every
 * block sized for `B x T` tokens at init, and the shared backward scratch. Nothing is
 * allocated after dt_gpt_init. Training step:
 *     dt_gpt_forward -> dt_gpt_loss(backward = true) -> dt_gpt_backward
 * and gradients accumulate across micro-batches. A step starts with dt_gpt_fresh_grads: the
 * first write of each gradient then overwrites it, so no arena is zeroed (dt_gpt_zero_grad
 * zeroes it instead, for callers that want to).
 * Single-threaded control; kernels use OpenMP inside.
 */
#ifndef DT_MODELS_GPT_H
#define DT_MODELS_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/param.h"
#include "core/status.h"
#include "models/model.h"
#include "nn/block.h"

typedef struct dt_gpt dt_gpt;

/* Derived sizes the model uses (also what the planner will predict from). */
int dt_gpt_kv_heads(const dt_model_config *c);
int dt_gpt_ffn_hidden(const dt_model_config *c);

/* How a model is built (models/model.h): the largest micro-batch, precision, splits, the
 * pipeline units held ([n_layer + 2]) and activation memory (models/gpt_ac.c). */
typedef dt_model_opts dt_gpt_opts;

/* Whether the model splits over tp_size x sp_size ranks at this seq_len: DT_OK, or one error
 * naming both numbers and the sizes that would work. Also checked by dt_gpt_init. */
dt_status dt_gpt_check_split(const dt_model_config *c, int tp, int sp, bool sequence_tp,
                             int seq_len);
/* The same for models/model.c: seq_len / cp, the tokens a ring rank holds, is what tp and sp
 * split. */
dt_status dt_gpt_model_check_split(const dt_model_config *c, const dt_model_split *s);

dt_status dt_gpt_init(const dt_model_config *cfg, const dt_gpt_opts *opts, dt_mem *mem,
                      dt_gpt **out);
void dt_gpt_free(dt_gpt *g);
const dt_model_config *dt_gpt_config_of(const dt_gpt *g);

/* Random initialisation, GPT-2 / HF style, reproducible from the seed alone (own weights). */
void dt_gpt_init_weights(dt_gpt *g, uint64_t seed);

/* Units: the granularity at which a distributed engine moves weights and gradients.
 * Global unit 0 = embeddings, 1..L = blocks, L+1 = final norm (+ Llama's LM head). A rank
 * holds some of them (all, or its pipeline stages'); the unit API and the hooks use LOCAL
 * ids 0..n_units-1 in global order. Each unit is a contiguous range of the local arena.
 * GPT-2's LM head is unit 0's token embedding; a stage holding the final unit but not unit 0
 * holds a copy of it in its final unit (dt_gpt_tied_copy: its local tensor index, else -1). */
int dt_gpt_n_units(const dt_gpt *g);
int dt_gpt_unit_global(const dt_gpt *g, int unit);
int dt_gpt_unit_local(const dt_gpt *g, int global_unit); /* -1: not held */
void dt_gpt_unit_range(const dt_gpt *g, int unit, int64_t *first, int64_t *count);
int dt_gpt_head_unit(const dt_gpt *g); /* -1: no head here */
int dt_gpt_tied_copy(const dt_gpt *g);
/* Point a unit's views at storage holding its range (w[0] is arena element `first`).
 * NULL leaves that kind of view as it is. */
void dt_gpt_bind_unit(dt_gpt *g, int unit, float *w, float *grad, dt_bf16 *w_lp);

/* Unit hooks and phases (models/model.h). */
typedef dt_model_phase dt_gpt_phase;
typedef dt_model_hooks dt_gpt_hooks;
void dt_gpt_set_hooks(dt_gpt *g, const dt_gpt_hooks *hooks);
/* The fp32 weights changed (optimizer step, load): the 16-bit weights, cast per unit as units
 * are entered, are cast afresh from them. */
void dt_gpt_sync_lp(dt_gpt *g);

/* tokens: [B, T] */
dt_status dt_gpt_forward(dt_gpt *g, const int32_t *tokens, int B, int T);
/* Mean cross-entropy is loss_sum / (number of targets >= 0). With backward, the gradient of
 * grad_scale * sum(losses) flows into the final norm's output (continued by dt_gpt_backward). */
dt_status dt_gpt_loss(dt_gpt *g, const int32_t *targets, int B, int T, float grad_scale,
                      bool backward, double *loss_sum);
dt_status dt_gpt_backward(dt_gpt *g, const int32_t *tokens, int B, int T);

/* The same by pipeline chunk: global units [u0, u1) (all held here) on micro-batch slot
 * `slot`. Residual position l is the input of block l (position L: the final norm's input);
 * a chunk [u0, u1) reads position u0 - 1 (u0 > 0; tokens when u0 = 0) and writes u1 - 1.
 * Backward: with u1 = L + 2 it starts from the slot's loss gradient (dt_gpt_loss_slot with
 * backward), otherwise from the gradient of its output placed in dt_gpt_boundary_grad(grad)
 * (one of the model's n_grads buffers); it leaves the gradient of its input there. */
dt_status dt_gpt_forward_units(dt_gpt *g, int slot, int u0, int u1, const int32_t *tokens, int B,
                               int T);
dt_status dt_gpt_loss_slot(dt_gpt *g, int slot, const int32_t *targets, int B, int T,
                           float grad_scale, bool backward, double *loss_sum);
dt_status dt_gpt_backward_units(dt_gpt *g, int slot, int grad, int u0, int u1,
                                const int32_t *tokens, int B, int T, bool split);
/* Split backward (built with split_backward): dt_gpt_backward_units with split = true makes
 * the input gradients (and the cheap norm, bias and embedding gradients); this makes the
 * matmuls' weight gradients of the same slot and units, later. */
dt_status dt_gpt_weight_units(dt_gpt *g, int slot, int u0, int u1, int B, int T);
/* Activations and gradients crossing a chunk boundary: dt_gpt_boundary_count floats. */
int64_t dt_gpt_boundary_count(const dt_gpt *g, int B, int T);
float *dt_gpt_boundary(dt_gpt *g, int slot, int position, int B, int T);
float *dt_gpt_boundary_grad(dt_gpt *g, int grad, int B, int T);
void dt_gpt_zero_grad(dt_gpt *g);
/* Local unit `unit`'s gradient storage (-1: every unit's) holds nothing of this step: the
 * next write of each of its gradients overwrites it instead of adding (the first
 * micro-batch's backward, or the first after the caller bound a new buffer). Bit-identical
 * to zeroing the storage first, except that an exact zero may keep its sign. Gradients
 * nothing writes (the arena's padding) keep their bytes, zero since allocation. */
void dt_gpt_fresh_grads(dt_gpt *g, int unit);
/* act_offload = disk: what the activation file moved so far (false: no file) */
bool dt_gpt_act_disk_stats(const dt_gpt *g, dt_model_disk_stats *out);
/* After forwards that no backward follows (evaluation): every slot's saved activations are
 * no longer needed (only the accountant's in-use bytes change). */
void dt_gpt_drop_saved(dt_gpt *g);
/* the forwards until dt_gpt_drop_saved are evaluation: activations on disk are not written */
void dt_gpt_begin_eval(dt_gpt *g);
/* Logits of the last position of one sequence tokens[0..T) (T <= the init T). */
dt_status dt_gpt_logits_last(dt_gpt *g, const int32_t *tokens, int T, float *logits);

/* Two tables: this rank's (dt_gpt_param: the tensors of the units it holds, shapes and
 * offsets in the local arena, with each tensor's shard spec) and the single process's
 * (dt_gpt_full_param: what files hold). They are the same without tensor and pipeline
 * parallelism. */
int dt_gpt_n_params(const dt_gpt *g);
int dt_gpt_n_full_params(const dt_gpt *g);
const dt_param *dt_gpt_param(const dt_gpt *g, int i);
const dt_param *dt_gpt_full_param(const dt_gpt *g, int i);
const dt_param *dt_gpt_find_param(const dt_gpt *g, const char *name);
int64_t dt_gpt_numel(const dt_gpt *g);      /* the local arena */
int64_t dt_gpt_full_numel(const dt_gpt *g); /* the single process's arena */
/* The model's splits (comms borrowed from the caller or size-1 ones it made). */
const dt_block_par *dt_gpt_par(const dt_gpt *g);
/* Both tables as core/param.h's shared functions read them (borrowed views). */
dt_param_tables dt_gpt_tables(const dt_gpt *g);
/* Collective over tp and pp: every rank's local arena -> the full arena (on every rank). */
dt_status dt_gpt_gather_full(dt_gpt *g, const float *local, float *full);
float *dt_gpt_weights(dt_gpt *g);      /* NULL with external weights */
float *dt_gpt_grads(dt_gpt *g);        /* NULL when not training or with external grads */
dt_bf16 *dt_gpt_weights_lp(dt_gpt *g); /* NULL: no whole 16-bit copy (cast per unit) */
/* Model FLOPs per trained sequence of T tokens (forward + backward), for MFU: T x (6 x the
 * matmul weights incl. the LM head + 6 L C T, causal attention's two matmuls). */
double dt_gpt_flops_per_sample(const dt_gpt *g, int T);

/* HuggingFace safetensors (models/gpt_io.c), over FULL arenas (dt_gpt_full_numel floats). Names and
 * layouts as transformers writes them; the model shape goes into __metadata__ so dtrain sample can
 * rebuild the model. */
dt_status dt_gpt_save(const dt_gpt *g, const float *weights, const char *path);
/* Into `weights` (a whole arena, dt_gpt_numel floats); call dt_gpt_sync_lp after loading
 * into the model's own arena. */
dt_status dt_gpt_load(const dt_gpt *g, float *weights, const char *path);
/* Fill the model shape from a safetensors file's metadata; keys absent keep cfg's values. */
dt_status dt_gpt_config_from_file(const char *path, dt_model_config *cfg);

/* The shape from the sizes dt_model_sizes reports for a gpt2 or llama model (cfg->arch set). */
dt_status dt_gpt_config_from_sizes(const dt_model_size *sizes, int n, dt_model_config *cfg);

/* The model interface (models/model.h) over a dt_gpt built by dt_gpt_init (models/gpt_model.c):
 * dt_model_create's choice for gpt2 and llama. */
dt_status dt_gpt_model_create(const dt_model_config *cfg, const dt_gpt_opts *opts, dt_mem *mem,
                              dt_model **out);

#endif
