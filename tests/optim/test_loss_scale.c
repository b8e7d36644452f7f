/* Tests for optim/loss_scale.h: the scale starts where asked, doubles after `window` clean
 * steps (and only then), halves and reports a skip on overflow (resetting the clean count),
 * never drops below 1 nor grows past 2^32, and the zero-valued struct fields mean defaults. */
#include "harness.h"
#include "optim/loss_scale.h"

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_loss_scale s;
    dt_loss_scale_init(&s, 0.0f, 0);
    DT_CHECK(s.scale == 65536.0f && s.window == 2000 && s.clean_steps == 0 && s.skipped == 0,
             "defaults: scale %g window %d", (double)s.scale, s.window);

    /* growth: exactly every `window` clean steps */
    dt_loss_scale_init(&s, 1024.0f, 3);
    bool skip_any = false;
    for (int i = 0; i < 2; i++)
        skip_any |= dt_loss_scale_update(&s, false);
    DT_CHECK(s.scale == 1024.0f && s.clean_steps == 2 && !skip_any, "no growth before window");
    DT_CHECK(!dt_loss_scale_update(&s, false), "a clean step is not skipped");
    DT_CHECK(s.scale == 2048.0f && s.clean_steps == 0, "doubled after 3 clean: %g",
             (double)s.scale);
    for (int i = 0; i < 3; i++)
        dt_loss_scale_update(&s, false);
    DT_CHECK(s.scale == 4096.0f, "doubled again: %g", (double)s.scale);

    /* overflow: skip, halve, and the clean count starts over */
    dt_loss_scale_update(&s, false);
    dt_loss_scale_update(&s, false);
    DT_CHECK(dt_loss_scale_update(&s, true), "overflow is skipped");
    DT_CHECK(s.scale == 2048.0f && s.clean_steps == 0 && s.skipped == 1,
             "halved: %g clean %d skipped %lld", (double)s.scale, s.clean_steps,
             (long long)s.skipped);
    dt_loss_scale_update(&s, false);
    dt_loss_scale_update(&s, false);
    DT_CHECK(s.scale == 2048.0f, "the two clean steps before the overflow do not count");
    dt_loss_scale_update(&s, false);
    DT_CHECK(s.scale == 4096.0f, "grows after a full window past the overflow");

    /* floor at 1: repeated overflows from 4 stop halving at 1, each still skipped */
    dt_loss_scale_init(&s, 4.0f, 2);
    float seen[4];
    for (int i = 0; i < 4; i++) {
        DT_CHECK(dt_loss_scale_update(&s, true), "overflow %d skipped", i);
        seen[i] = s.scale;
    }
    DT_CHECK(seen[0] == 2 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1 && s.skipped == 4,
             "floor at 1: %g %g %g %g", (double)seen[0], (double)seen[1], (double)seen[2],
             (double)seen[3]);

    /* cap at 2^32, also for the initial value; below 1 (or NaN) starts at 1 */
    dt_loss_scale_init(&s, 3e9f, 1);
    dt_loss_scale_update(&s, false);
    dt_loss_scale_update(&s, false);
    DT_CHECK(s.scale == DT_LOSS_SCALE_MAX, "capped at 2^32: %g", (double)s.scale);
    dt_loss_scale_init(&s, 1e20f, 1);
    DT_CHECK(s.scale == DT_LOSS_SCALE_MAX, "initial capped");
    dt_loss_scale_init(&s, 0.25f, -5);
    DT_CHECK(s.scale == 1.0f && s.window == 1, "initial below 1, window below 1");
    return DT_TEST_END();
}
