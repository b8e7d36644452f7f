/* A video diffusion transformer (DiT, Peebles & Xie, ICCV'23), Open-Sora style: a clip
 * [frames, channels, height, width] is cut into 3-D patches, one token each; the timestep
 * (and optionally a class label) conditions every block through adaLN-Zero; attention is over
 * the whole clip or alternates within frames (spatial) and across frames (temporal).
 *
 * Like dt_gpt, the model owns its parameter table, one weight and one gradient arena, the
 * activations for B clips sized at init and the backward scratch; nothing is allocated after
 * dt_dit_init. Training step: dt_dit_forward -> (loss gradient of dt_dit_output) ->
 * dt_dit_backward; gradients accumulate until dt_dit_zero_grad. fp32 only for now; one
 * process (no tp/sp/pp splits yet). Single-threaded control; kernels use OpenMP inside.
 */
#ifndef DT_MODELS_DIT_H
#define DT_MODELS_DIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h" /* dt_dit_attn */
#include "core/mem.h"
#include "core/param.h"
#include "core/status.h"

/* The model's shape. Clips are [frames, channels, height, width]; patches [pt, ph, pw]. */
typedef struct dt_dit_config {
    int frames, channels, height, width;
    int pt, ph, pw;
    int n_layer, n_head, n_embd;
    int n_classes; /* 0: unconditional; else labels 0..n_classes-1, n_classes = "null" */
    dt_dit_attn attn;
} dt_dit_config;

/* Fixed sizes of every DiT (the DiT paper's choices). */
enum {
    DT_DIT_FREQ_DIM = 256, /* sinusoidal timestep features before the MLP */
    DT_DIT_MLP_RATIO = 4,
};

/* DT_OK, or DT_ERR_ARG naming the first bad field and its value (a dimension that does not
 * divide by its patch, n_embd % n_head, a head size that is odd, ...). */
dt_status dt_dit_check_config(const dt_dit_config *c);

/* Derived sizes: tokens per clip (t/pt)(h/ph)(w/pw), floats per patch pt ph pw channels,
 * floats per clip. */
int dt_dit_tokens(const dt_dit_config *c);
int dt_dit_patch_dim(const dt_dit_config *c);
int64_t dt_dit_clip_numel(const dt_dit_config *c);

typedef struct dt_dit dt_dit;

typedef struct dt_dit_opts {
    int B;         /* the most clips one forward sees */
    bool training; /* false: no gradients, no backward scratch */
} dt_dit_opts;

dt_status dt_dit_init(const dt_dit_config *cfg, const dt_dit_opts *opts, dt_mem *mem,
                      dt_dit **out);
void dt_dit_free(dt_dit *d);
const dt_dit_config *dt_dit_config_of(const dt_dit *d);
int dt_dit_max_batch(const dt_dit *d); /* the init B */

/* DiT initialisation from the seed alone: linears N(0, 2/(in+out)) (Xavier's variance),
 * the label table N(0, 0.02^2), every adaLN modulation and the final linear zero (so each
 * block starts as the identity and the model predicts 0). */
void dt_dit_init_weights(dt_dit *d, uint64_t seed);

/* Units: global unit 0 = the embedders (patch, timestep, label), 1..L = blocks, L+1 = the
 * final layer. Each is a contiguous range of the arena. */
int dt_dit_n_units(const dt_dit *d);
void dt_dit_unit_range(const dt_dit *d, int unit, int64_t *first, int64_t *count);
/* Point a unit's views at storage holding its range (w[0] is arena element `first`); NULL
 * leaves that kind of view as it is. */
void dt_dit_bind_unit(dt_dit *d, int unit, float *w, float *grad);

/* x: [B, frames, channels, height, width] (the noisy clip x_t), t: [B] in [0, 1], labels:
 * [B] in 0..n_classes (n_classes = null) or NULL (unconditional model, or all null).
 * Output: dt_dit_output, same shape as x. DT_ERR_ARG for B > the init B or a bad label. */
dt_status dt_dit_forward(dt_dit *d, const float *x, const float *t, const int32_t *labels,
                         int B);
float *dt_dit_output(dt_dit *d);
/* dout: gradient of the loss with respect to dt_dit_output ([B, clip]); accumulates every
 * parameter's gradient. Needs the forward of the same B just before. */
dt_status dt_dit_backward(dt_dit *d, const float *dout, int B);
void dt_dit_zero_grad(dt_dit *d);

int dt_dit_n_params(const dt_dit *d);
const dt_param *dt_dit_param(const dt_dit *d, int i);
const dt_param *dt_dit_find_param(const dt_dit *d, const char *name);
int64_t dt_dit_numel(const dt_dit *d);
float *dt_dit_weights(dt_dit *d);
float *dt_dit_grads(dt_dit *d); /* NULL when not training */
/* Model FLOPs per trained clip (forward + backward = 3 x forward): the matmuls (patch
 * embedding, blocks, final layer, conditioning MLPs) and attention's two products. */
double dt_dit_flops_per_sample(const dt_dit *d);

#endif
