/* AdamW over a parameter table: the moments live in one arena parallel to the weights, and
 * each tensor is updated with its own weight decay (0 for biases and norm gains).
 * Single-threaded control; the update kernel runs on OpenMP threads. */
#ifndef DT_OPTIM_ADAMW_H
#define DT_OPTIM_ADAMW_H

#include <stdint.h>

#include "core/config.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/param.h"

typedef struct dt_adamw dt_adamw;

/* The optimizer owns arena elements [first, first + count): the whole arena for one process,
 * a ZeRO shard otherwise. params: borrowed for the optimizer's lifetime. */
dt_status dt_adamw_init(const dt_optim_config *cfg, const dt_param *params, int n_params,
                        int64_t first, int64_t count, dt_mem *mem, dt_adamw **out);
void dt_adamw_free(dt_adamw *o);

/* One update of the owned range: w, g, w_lp (or NULL) point at element `first`; w -= ...
 * using g * grad_scale, w_lp gets the bf16 copy. Advances the bias-correction step count. */
void dt_adamw_step(dt_adamw *o, float *w, const float *g, dt_bf16 *w_lp, float lr,
                   float grad_scale);

int dt_adamw_steps_taken(const dt_adamw *o);
void dt_adamw_set_steps_taken(dt_adamw *o, int t);
float *dt_adamw_m(dt_adamw *o); /* [count] first moments of the owned range */
float *dt_adamw_v(dt_adamw *o); /* [count] second moments */

/* Learning rate for 0-based step s of `total`: linear warmup over warmup_steps to lr, then
 * cosine decay to min_lr at the last step, or constant. */
float dt_lr_at(const dt_optim_config *c, int s, int total);

/* PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0. */
float dt_clip_coef(double norm, float max_norm);

#endif
