/* Rectified flow (Liu et al., ICLR'23), the objective of Open-Sora 1.2+, and its Euler
 * sampler, over a dt_dit.
 *
 * Training: for clip x_0 with noise eps ~ N(0, I) and t in (0, 1),
 *     x_t = (1 - t) x_0 + t eps,   target v = eps - x_0 (dx_t / dt),   loss = mean (v_pred - v)^2.
 * t is logit-normal, t = sigmoid(n), n ~ N(0, 1) (Esser et al., SD3, section 3.1; Open-Sora
 * 1.2's choice), which puts most samples at mid noise levels where the velocity is hardest,
 * then shifted by the model's s (model.timestep_shift): t' = s t / (1 + (s - 1) t), the same
 * as sigmoid(n + ln s) (SD3 section 5.3.2, Open-Sora 1.2's timestep transform): a clip that
 * repeats its content over many pixels stays legible under more noise, and s > 1 trains more
 * where its layout is still undecided.
 *
 * Sampling integrates dx/dt = v from pure noise at t = 1 to t = 0 in N Euler steps (at the
 * shifted times of 1 - i / N, so s > 1 spends more of them at high noise), with optional
 * classifier-free guidance v = v(null) + s (v(label) - v(null)).
 *
 * A dt_flow owns the batch buffers it needs (sized for the model's B at init, through the
 * accountant); single-threaded control.
 */
#ifndef DT_MODELS_FLOW_H
#define DT_MODELS_FLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "models/dit.h"
#include "models/model.h"

/* t shifted by s: s t / (1 + (s - 1) t); 0 and 1 stay, s = 1 (or 0: unset) returns t. */
float dt_flow_shift(float t, float shift);
/* t of the clip with global index `index`: sigmoid of a standard normal, shifted. */
float dt_flow_timestep(uint64_t seed, int64_t index, float shift);
/* Noise of the clip with global index `index`: n standard normals. */
void dt_flow_noise(uint64_t seed, int64_t index, int64_t n, float *out);
/* A training row of clip `index` from its clip x_0 (numel values, in v on entry): the noised
 * clip x_t = (1 - t) x_0 + t eps into x_t and the velocity eps - x_0 over v, with noise and t
 * of (seed, index) (t shifted); returns t. What every clip source hands the model. */
float dt_flow_make_row(uint64_t seed, int64_t index, float shift, int64_t numel, float *x_t,
                       float *v);
/* Whether clip `index`'s label is dropped (replaced by the null class) with probability p. */
bool dt_flow_drop_label(uint64_t seed, int64_t index, float p);

/* Mean squared error of pred against v over n values; with dpred (may be NULL) its gradient
 * times grad_scale, 2 grad_scale (pred - v) / n (overwritten). */
double dt_flow_mse(const float *pred, const float *v, int64_t n, float grad_scale, float *dpred);

typedef struct dt_flow dt_flow;

typedef struct dt_flow_opts {
    float p_uncond; /* probability of training a clip with the null label (guidance) */
} dt_flow_opts;

/* Buffers for the model's B clips: x_t, v, the loss gradient, t and labels (B x clip floats
 * three times, category temporaries). d is borrowed and must outlive the flow; a model with
 * text is refused (DT_ERR_UNSUPPORTED: it samples through dt_flow_sample_model). */
dt_status dt_flow_init(dt_dit *d, const dt_flow_opts *opts, dt_mem *mem, dt_flow **out);
void dt_flow_free(dt_flow *f);

/* One training micro-batch: clips x0 [B, clip] (global indices index0 ..), labels [B] or
 * NULL. Forward, loss (*loss = the batch's mean squared error) and backward, whose
 * gradients of grad_scale * loss accumulate into the model's. */
dt_status dt_flow_train(dt_flow *f, const float *x0, const int32_t *labels, int B,
                        uint64_t seed, int64_t index0, float grad_scale, double *loss);
/* The same without backward (evaluation). */
dt_status dt_flow_eval(dt_flow *f, const float *x0, const int32_t *labels, int B,
                       uint64_t seed, int64_t index0, double *loss);

/* B clips into out [B, clip], from noise dt_flow_noise(seed, b) in `steps` Euler steps.
 * labels [B] or NULL (null class); guidance <= 0 or no labels: plain conditional velocity,
 * else classifier-free guidance with that scale (two forwards per step). DT_ERR_ARG for
 * steps < 1 or B beyond the model's. */
dt_status dt_flow_sample(dt_flow *f, int B, int steps, uint64_t seed, const int32_t *labels,
                         float guidance, float *out);

/* The same sampler over the model interface (a one-process dit model built for at least K
 * clips, models/dit.h): K clips into out [K, clip], from noise dt_flow_noise(seed, k), Euler
 * from t = 1 to 0 in `steps` steps through dt_model_predict, with classifier-free guidance as
 * dt_flow_sample (the condition: labels and text, [K, dt_dit_text_floats()] rows as the
 * model's input rows hold it, either NULL: none; the null pass drops both); the same weights
 * give dt_flow_sample's bits. Its buffers (the input rows and one or two velocities, K clips
 * each) are temporaries of `mem` for the call. DT_ERR_ARG for K or steps < 1, a label
 * outside 0..n_classes, text for a model without. */
dt_status dt_flow_sample_model(dt_model *m, dt_mem *mem, int K, int steps, uint64_t seed,
                               const int32_t *labels, const float *text, float guidance,
                               float *out);

#endif
