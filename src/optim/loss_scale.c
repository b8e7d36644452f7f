/* Dynamic loss scaling (see loss_scale.h). Pure, allocation-free, thread-compatible. */
#include "optim/loss_scale.h"

static float clamp_scale(float x) {
    if (!(x >= 1.0f)) /* NaN too */
        return 1.0f;
    return x > DT_LOSS_SCALE_MAX ? DT_LOSS_SCALE_MAX : x;
}

void dt_loss_scale_init(dt_loss_scale *s, float initial, int window) {
    s->scale = clamp_scale(initial == 0.0f ? DT_LOSS_SCALE_INITIAL : initial);
    s->window = window == 0 ? DT_LOSS_SCALE_WINDOW : window < 1 ? 1 : window;
    s->clean_steps = 0;
    s->skipped = 0;
}

bool dt_loss_scale_update(dt_loss_scale *s, bool overflow) {
    if (overflow) {
        s->scale = clamp_scale(s->scale * 0.5f);
        s->clean_steps = 0;
        s->skipped++;
        return true;
    }
    if (++s->clean_steps >= s->window) {
        s->scale = clamp_scale(s->scale * 2.0f);
        s->clean_steps = 0;
    }
    return false;
}
