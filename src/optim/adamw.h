/* AdamW over a parameter table: the moments live in one arena parallel to the weights (or,
 * offloaded, in a file streamed through a window: optim/offload.h), and each tensor is
 * updated with its own weight decay (0 for biases and norm gains).
 * Single-threaded control; the update kernel runs on OpenMP threads. */
#ifndef DT_OPTIM_ADAMW_H
#define DT_OPTIM_ADAMW_H

#include <stdint.h>

#include "core/config.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/param.h"
#include "optim/offload.h"

typedef struct dt_adamw dt_adamw;

/* The optimizer owns arena elements [first, first + count): the whole arena for one process,
 * a ZeRO shard otherwise. params: borrowed for the optimizer's lifetime. */
dt_status dt_adamw_init(const dt_optim_config *cfg, const dt_param *params, int n_params,
                        int64_t first, int64_t count, dt_mem *mem, dt_adamw **out);
/* The same, with the moments in a file under off->dir (see dt_offload_init for its errors);
 * the update gives the same bits as in memory. */
dt_status dt_adamw_init_offload(const dt_optim_config *cfg, const dt_param *params,
                                int n_params, int64_t first, int64_t count,
                                const dt_offload_opts *off, dt_mem *mem, dt_adamw **out);
void dt_adamw_free(dt_adamw *o);

/* One update of the owned range: w, g, w_lp (or NULL) point at element `first`; w -= ...
 * using g * grad_scale, w_lp gets the bf16 copy. Advances the bias-correction step count.
 * Fails only offloaded, on an I/O error (DT_ERR_IO naming the file). */
dt_status dt_adamw_step(dt_adamw *o, float *w, const float *g, dt_bf16 *w_lp, float lr,
                        float grad_scale);
/* The same, with w_f16 (or NULL) getting the fp16 copy (dt_cast_f32_to_f16's bits). */
dt_status dt_adamw_step_f16(dt_adamw *o, float *w, const float *g, dt_f16 *w_f16, float lr,
                            float grad_scale);

int dt_adamw_steps_taken(const dt_adamw *o);
void dt_adamw_set_steps_taken(dt_adamw *o, int t);
/* [count] first and second moments of the owned range; NULL when offloaded */
float *dt_adamw_m(dt_adamw *o);
float *dt_adamw_v(dt_adamw *o);
/* Copies of the owned range's moments out of / into the optimizer, wherever they live
 * (m, v: [count] or NULL to skip one). */
dt_status dt_adamw_get_moments(dt_adamw *o, float *m, float *v);
dt_status dt_adamw_set_moments(dt_adamw *o, const float *m, const float *v);
/* Elements [first, first + n) of the owned range of one moment (which: 0 m, 1 v), copied out
 * of / into the optimizer wherever they live; offloaded, straight from / to the file (no
 * memory beyond the caller's buffer). */
dt_status dt_adamw_read_moment(dt_adamw *o, int which, int64_t first, int64_t n, float *out);
dt_status dt_adamw_write_moment(dt_adamw *o, int which, int64_t first, int64_t n,
                                const float *in);

/* Learning rate for 0-based step s of `total`: linear warmup over warmup_steps to lr, then
 * cosine decay to min_lr at the last step, or constant. */
float dt_lr_at(const dt_optim_config *c, int s, int total);

/* PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float dt_clip_coef(double norm, float max_norm);

#endif
