/* Dynamic loss scaling for fp16 training (Micikevicius et al., "Mixed Precision Training",
 * ICLR'18, sec. 3.2; the policy of PyTorch's GradScaler without hysteresis).
 *
 * The loss is multiplied by `scale` before backward so small gradients survive fp16's range;
 * a step whose gradients hold inf/NaN on any rank is skipped and the scale halved (not below
 * 1); after `window` consecutive clean steps it doubles (not above 2^32, ColossalAI's cap).
 * Pure logic on a value struct: the caller agrees the overflow flag over ranks first.
 */
#ifndef DT_OPTIM_LOSS_SCALE_H
#define DT_OPTIM_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#define DT_LOSS_SCALE_MAX 4294967296.0f /* 2^32 */

typedef struct dt_loss_scale {
    float scale;         /* multiplier of the loss in the coming step; a power of two when the
                          * initial scale is one */
    int window;          /* clean steps before the scale doubles (>= 1) */
    int clean_steps;     /* consecutive clean steps since the scale last changed */
    int64_t skipped;     /* steps skipped so far */
} dt_loss_scale;

#define DT_LOSS_SCALE_INITIAL 65536.0f /* 2^16, GradScaler's and ColossalAI's start */
#define DT_LOSS_SCALE_WINDOW 2000

/* initial: clamped to [1, DT_LOSS_SCALE_MAX], 0 (unset) meaning DT_LOSS_SCALE_INITIAL;
 * window: 0 (unset) means DT_LOSS_SCALE_WINDOW, below 0 counts as 1. */
void dt_loss_scale_init(dt_loss_scale *s, float initial, int window);

/* Records one step's outcome. overflow: some gradient element was inf or NaN (on any rank).
 * Returns true when the step must be skipped: no weight, moment or step-counter update. */
bool dt_loss_scale_update(dt_loss_scale *s, bool overflow);

#endif
