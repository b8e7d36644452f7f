/* A video diffusion transformer (DiT, Peebles & Xie, ICCV'23), Open-Sora style: a clip
 * [frames, channels, height, width] is cut into 3-D patches, one token each; the timestep
 * (and optionally a class label) conditions every block through adaLN-Zero; attention is over
 * the whole clip or alternates within frames (spatial) and across frames (temporal).
 *
 * Like dt_gpt, the model owns its parameter table, one weight and one gradient arena (unless
 * the caller binds them), the activations of its micro-batch slots sized at init and the
 * backward scratch; nothing is allocated after init. It runs as one process (dt_dit_init:
 * dt_dit_forward -> loss gradient of dt_dit_output -> dt_dit_backward) or split as the model
 * interface asks (dt_dit_init_model, models/dit_model.c): pipeline stages by unit (with a
 * split backward for zero-bubble schedules), Ulysses sequence parallelism over sp, tensor
 * parallelism (and Megatron-SP) over tp, ZeRO's bound storage, 16-bit matmuls, activation
 * checkpointing and int8 storage. Gradients accumulate until dt_dit_zero_grad.
 * Single-threaded control; kernels use OpenMP inside; collectives over the sp and tp comms
 * the caller gave.
 *
 * Text (text_len = Lt > 0; PixArt-alpha / Open-Sora 1.x): each block cross-attends from its
 * tokens to the clip's text after its self-attention (x = x + proj(attn(q(x), k(y), v(y))),
 * no gate), y [Lt, C] the clip's text sequence from unit 0's text embedder: an MLP (fc1,
 * tanh-GELU, fc2) over precomputed embeddings [Lt, text_dim], or over the caption's bytes
 * (text_dim = 0), each byte a learned byte plus position embedding seen with its two
 * neighbours (features [e_{i-1}, e_i, e_{i+1}], 3C wide), the model's own small encoder.
 * A clip attends to its text's n valid tokens; a clip without text (n <= 0: dropped for
 * classifier-free guidance, or no caption) attends to all Lt rows of the learned null text.
 *
 * A micro-batch as the model interface hands it over (dt_batch, B clips, T = S tokens):
 *   input   B rows of dt_dit_input_floats() floats: the noisy clip x_t in [frames, channels,
 *           height, width] order, then t in [0, 1], then the label as a float holding an
 *           integer 0..n_classes-1, or n_classes for "no label" (the null class; a model with
 *           n_classes = 0 reads 0, its null class), then with text its dt_dit_text_floats():
 *           n (-1..Lt, <= 0: no text), then Lt byte values 0..255 (text_dim 0) or Lt x
 *           text_dim embedding values, rows past n ignored;
 *   target  B rows of dt_dit_target_floats() floats: the velocity eps - x_0, clip order.
 * The loss of one token is the mean over its patch's values of (pred - target)^2, so
 * loss_sum / (B S) is the batch's mean squared error.
 */
#ifndef DT_MODELS_DIT_H
#define DT_MODELS_DIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h" /* dt_dit_attn */
#include "core/mem.h"
#include "core/param.h"
#include "core/status.h"
#include "models/model.h"

/* The model's shape. Clips are [frames, channels, height, width]; patches [pt, ph, pw]. */
typedef struct dt_dit_config {
    int frames, channels, height, width;
    int pt, ph, pw;
    int n_layer, n_head, n_embd;
    int n_classes; /* 0: unconditional; else labels 0..n_classes-1, n_classes = "null" */
    dt_dit_attn attn;
    int text_len; /* Lt: text tokens a clip attends to; 0: no text */
    int text_dim; /* width of precomputed text embeddings; 0: the caption's bytes */
    float shift;  /* the flow's timestep shift (model.timestep_shift; 0 or 1: none) */
} dt_dit_config;

/* Fixed sizes of every DiT (the DiT paper's choices). */
enum {
    DT_DIT_FREQ_DIM = 256, /* sinusoidal timestep features before the MLP */
    DT_DIT_MLP_RATIO = 4,
};

/* The DiT shape of a model configuration (model.arch = dit). */
dt_dit_config dt_dit_config_from_model(const dt_model_config *m);

/* DT_OK, or DT_ERR_ARG naming the first bad field and its value (a dimension that does not
 * divide by its patch, n_embd % n_head, a head size that is odd, ...). */
dt_status dt_dit_check_config(const dt_dit_config *c);

/* Whether the DiT splits over tp x sp ranks: DT_OK, or one DT_ERR_ARG naming the numbers:
 * n_head % tp (tensor parallelism splits heads and MLP columns), tokens % sp, (n_head / tp)
 * % sp (Ulysses splits a tp rank's heads), with sequence_tp (Megatron-SP) (tokens / sp) % tp,
 * and for spatial_temporal the time tokens frames/patch_t % sp (spatial attention stays
 * local: every sp rank holds whole frames). Under a ring of s->cp ranks the tokens and time
 * tokens are a ring rank's (1/cp), and for spatial_temporal the time tokens cut into the
 * ring's cp x cp_chunks chunks (whole frames a chunk). */
dt_status dt_dit_check_split(const dt_dit_config *c, const dt_model_split *s);

/* Derived sizes: tokens per clip (t/pt)(h/ph)(w/pw), floats per patch pt ph pw channels,
 * floats per clip, and the floats of one clip's input and target rows (see above). */
int dt_dit_tokens(const dt_dit_config *c);
int dt_dit_patch_dim(const dt_dit_config *c);
int64_t dt_dit_clip_numel(const dt_dit_config *c);
int64_t dt_dit_input_floats(const dt_dit_config *c);  /* clip + 2 + text */
int64_t dt_dit_text_floats(const dt_dit_config *c);   /* 1 + Lt max(text_dim, 1), or 0 */
int64_t dt_dit_target_floats(const dt_dit_config *c); /* clip */

typedef struct dt_dit dt_dit;

typedef struct dt_dit_opts {
    int B;         /* the most clips one forward sees */
    bool training; /* false: no gradients, no backward scratch */
} dt_dit_opts;

/* One process, fp32, every unit, one slot. */
dt_status dt_dit_init(const dt_dit_config *cfg, const dt_dit_opts *opts, dt_mem *mem, dt_dit **out);
/* As the model interface builds it (models/model.h): o->B clips of o->T = S tokens, the
 * splits, slots, held units, bound storage, precision, checkpointing, int8 storage and split
 * backward of o. DT_ERR_ARG for T other than the clip's tokens or a split dt_dit_check_split
 * refuses. */
dt_status dt_dit_init_model(const dt_dit_config *cfg, const dt_model_opts *o, dt_mem *mem,
                            dt_dit **out);
void dt_dit_free(dt_dit *d);
const dt_dit_config *dt_dit_config_of(const dt_dit *d);
int dt_dit_max_batch(const dt_dit *d); /* the init B (of the shape in use) */
/* The following micro-batches are clips of init shape k (dt_model_opts.shapes; 0 without);
 * dt_dit_config_of then says its frames, height and width. */
dt_status dt_dit_use_shape(dt_dit *d, int k);

/* DiT initialisation from the seed alone: linears N(0, 2/(in+out)) (Xavier's variance),
 * the label table N(0, 0.02^2), every adaLN modulation and the final linear zero (so each
 * block starts as the identity and the model predicts 0). Own weights. */
void dt_dit_init_weights(dt_dit *d, uint64_t seed);
/* Refresh the 16-bit weight copy after the fp32 weights changed outside the optimizer. */
void dt_dit_sync_lp(dt_dit *d);

/* Units: global unit 0 = the embedders (patch, timestep, label, text), 1..L = blocks, L+1 = the
 * final layer. A rank holds some of them (all, or its pipeline stages') under LOCAL ids
 * 0..n_units-1 in global order; each is a contiguous range of the local arena. */
int dt_dit_n_units(const dt_dit *d);
int dt_dit_unit_local(const dt_dit *d, int global_unit); /* -1: not held */
void dt_dit_unit_range(const dt_dit *d, int unit, int64_t *first, int64_t *count);
/* Point a (local) unit's views at storage holding its range (w[0] is arena element `first`);
 * NULL leaves that kind of view as it is. */
void dt_dit_bind_unit(dt_dit *d, int unit, float *w, float *grad, dt_bf16 *w_lp);
void dt_dit_set_hooks(dt_dit *d, const dt_model_hooks *hooks);

/* x: [B, frames, channels, height, width] (the noisy clip x_t), t: [B] in [0, 1], labels:
 * [B] in 0..n_classes (n_classes = null) or NULL (unconditional model, or all null); text:
 * [B, dt_dit_text_floats()] as the input rows' text, or NULL (no text: the null text).
 * Output: dt_dit_output, same shape as x. DT_ERR_ARG for B > the init B, a bad label or text.
 * One-process models only (slot 0, every unit). */
dt_status dt_dit_forward(dt_dit *d, const float *x, const float *t, const int32_t *labels,
                         const float *text, int B);
float *dt_dit_output(dt_dit *d);
/* dout: gradient of the loss with respect to dt_dit_output ([B, clip]); accumulates every
 * parameter's gradient. Needs the forward of the same B just before. */
dt_status dt_dit_backward(dt_dit *d, const float *dout, int B);
void dt_dit_zero_grad(dt_dit *d);

/* The model interface's passes (models/model.h) over micro-batches in dt_batch form (see
 * above). Residual position l is the input of block l (L: the final layer's input); the
 * boundary tensor at a position is its residual rows then silu(c) [B, C] (the conditioning
 * every later block and the final layer read), with text then the text sequences [B, Lt, C]
 * and each clip's n [B], the boundary gradient their gradients (n's: zero). */
dt_status dt_dit_forward_units(dt_dit *d, int slot, int u0, int u1, const dt_batch *b);
dt_status dt_dit_loss_slot(dt_dit *d, int slot, const dt_batch *b, float grad_scale, bool backward,
                           double *loss_sum);
/* grad: the buffer of the gradient crossing the chunk boundary (of the opts' n_grads) */
dt_status dt_dit_backward_units(dt_dit *d, int slot, int grad, int u0, int u1, const dt_batch *b,
                                bool split);
/* Split backward (a model built with split_backward): the blocks' matmul weight gradients
 * backward_units(split) left out. */
dt_status dt_dit_weight_units(dt_dit *d, int slot, int u0, int u1, const dt_batch *b);
int64_t dt_dit_boundary_count(const dt_dit *d, int B);
float *dt_dit_boundary(dt_dit *d, int slot, int position, int B);
float *dt_dit_boundary_grad(dt_dit *d, int grad, int B);
void dt_dit_drop_saved(dt_dit *d);
/* The predicted velocity of the batch's inputs, out [B, clip] (one-process models). */
dt_status dt_dit_predict(dt_dit *d, const dt_batch *b, float *out);

/* Two tables: this rank's (its units' tensors, packed) and the single process's (files);
 * the same when every unit is held. */
int dt_dit_n_params(const dt_dit *d);
const dt_param *dt_dit_param(const dt_dit *d, int i);
const dt_param *dt_dit_find_param(const dt_dit *d, const char *name);
int dt_dit_n_full_params(const dt_dit *d);
const dt_param *dt_dit_full_param(const dt_dit *d, int i);
int64_t dt_dit_numel(const dt_dit *d);
int64_t dt_dit_full_numel(const dt_dit *d);
float *dt_dit_weights(dt_dit *d);      /* NULL with external weights */
float *dt_dit_grads(dt_dit *d);        /* NULL when not training or with external grads */
dt_bf16 *dt_dit_weights_lp(dt_dit *d); /* NULL in fp32 or with external weights */
dt_comm *dt_dit_tp(const dt_dit *d);   /* the tp group (a size-1 comm when not split) */
/* Both tables as core/param.h's shared functions read them (borrowed views). */
dt_param_tables dt_dit_tables(const dt_dit *d);
/* Collective over tp and pp: every rank's local arena -> the full arena (every rank). */
dt_status dt_dit_gather_full(dt_dit *d, const float *local, float *full);
/* Model FLOPs per trained clip (forward + backward = 3 x forward): the matmuls (patch
 * embedding, blocks, final layer, conditioning MLPs) and attention's two products. */
double dt_dit_flops_per_sample(const dt_dit *d);

/* The model interface over a dt_dit (models/dit_model.c): dt_model_create's choice for
 * model.arch = dit, and its rows of models/model.c. */
dt_status dt_dit_model_create(const dt_model_config *cfg, const dt_model_opts *opts, dt_mem *mem,
                              dt_model **out);
dt_status dt_dit_model_check_split(const dt_model_config *c, const dt_model_split *s);
dt_status dt_dit_config_from_file(const char *path, dt_model_config *cfg);
dt_status dt_dit_config_from_sizes(const dt_model_size *sizes, int n, dt_model_config *cfg);

#endif
