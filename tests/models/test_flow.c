/* Rectified flow over the DiT:
 *   - t is logit-normal: logit(t) of many clips has mean 0 and standard deviation 1; shifted
 *     by s it is sigmoid(logit(t) + ln s), recomputed here;
 *   - the loss is the mean squared error against v = eps - x0 at x_t = (1 - t) x0 + t eps,
 *     recomputed here from the noise and t the flow exposes; its gradient matches finite
 *     differences;
 *   - everything is a function of (seed, clip index): a clip's loss term is the same alone or
 *     inside a batch;
 *   - the Euler sampler's one step is x = eps - v(eps, 1); guidance 0 is the null label's
 *     sample, guidance 1 the conditional one; shifted by s, two steps stop at
 *     t = s / (1 + s) (the shift of 1/2), recomputed here;
 *   - a tiny DiT trained with AdamW on bouncing shapes lowers the loss within 60 steps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/mem.h"
#include "harness.h"
#include "io/bounce.h"
#include "models/flow.h"
#include "optim/adamw.h"

static dt_dit_config tiny(void) {
    return (dt_dit_config){.frames = 4, .channels = 3, .height = 8, .width = 8, .pt = 1,
                           .ph = 2, .pw = 2, .n_layer = 2, .n_head = 2, .n_embd = 24,
                           .n_classes = DT_BOUNCE_KIND_COUNT,
                           .attn = DT_DIT_ATTN_SPATIAL_TEMPORAL};
}

static void check_timesteps(void) {
    int n = 20000;
    double s = 0, s2 = 0;
    bool in = true;
    for (int i = 0; i < n; i++) {
        float t = dt_flow_timestep(9, i, 1);
        in &= t > 0 && t < 1;
        double l = log(t / (1 - t));
        s += l, s2 += l * l;
    }
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    DT_CHECK(in, "a t outside (0, 1)");
    DT_CHECK(fabs(mean) < 0.03 && fabs(sd - 1) < 0.03, "logit(t): mean %.3f sd %.3f", mean, sd);
    DT_CHECK(dt_flow_timestep(9, 5, 1) == dt_flow_timestep(9, 5, 1) &&
                 dt_flow_timestep(9, 5, 1) != dt_flow_timestep(9, 6, 1) &&
                 dt_flow_timestep(9, 5, 1) != dt_flow_timestep(10, 5, 1),
             "t is not a function of (seed, index)");
    int dropped = 0;
    for (int i = 0; i < n; i++)
        dropped += dt_flow_drop_label(9, i, 0.1f);
    DT_CHECK(fabs(dropped / (double)n - 0.1) < 0.01, "label drop rate %.3f, want 0.1",
             dropped / (double)n);
}

/* The shift moves logit(t) by ln s (SD3's identity for s t / (1 + (s - 1) t)); 0 and 1 keep t,
 * and the ends stay. */
static void check_shifted_timesteps(void) {
    double worst = 0;
    for (int i = 0; i < 2000; i++) {
        double t = dt_flow_timestep(9, i, 1), want = 1 / (1 + exp(-(log(t / (1 - t)) + log(3))));
        worst = fmax(worst, fabs(dt_flow_timestep(9, i, 3) - want));
        DT_CHECK(dt_flow_timestep(9, i, 0) == (float)t, "shift 0 moved t");
    }
    DT_CHECK(worst < 2e-6, "shifted t off sigmoid(logit t + ln 3) by %g", worst);
    DT_CHECK(dt_flow_shift(0, 4) == 0 && dt_flow_shift(1, 4) == 1 && dt_flow_shift(0.3f, 1) == 0.3f,
             "the shift moves an end, or s = 1 moves t");
}

static void check_mse(void) {
    float p[5] = {0.3f, -1, 2, 0, 0.5f}, v[5] = {0, -0.5f, 1, 0.25f, 0.5f}, g[5];
    double l = dt_flow_mse(p, v, 5, 3.0f, g);
    DT_CHECK_CLOSE(l, (0.09 + 0.25 + 1 + 0.0625) / 5, 1e-6);
    for (int i = 0; i < 5; i++) {
        float q[5];
        memcpy(q, p, sizeof q);
        q[i] += 1e-3f;
        double lp = dt_flow_mse(q, v, 5, 1, NULL);
        q[i] -= 2e-3f;
        double lm = dt_flow_mse(q, v, 5, 1, NULL);
        DT_CHECK(fabs(g[i] - 3 * (lp - lm) / 2e-3) < 1e-4, "d mse[%d] = %g, fd %g", i, g[i],
                 3 * (lp - lm) / 2e-3);
    }
}

typedef struct setup {
    dt_dit_config c;
    dt_mem *mem;
    dt_dit *d;
    dt_flow *f;
    int B;
    int64_t clip;
} setup;

static bool make_with(setup *s, dt_dit_config c, int B, float p_uncond) {
    s->c = c;
    s->B = B;
    s->clip = dt_dit_clip_numel(&s->c);
    s->d = NULL;
    s->f = NULL;
    DT_CHECK_OK(dt_mem_init(&s->mem));
    DT_CHECK_OK(dt_dit_init(&s->c, &(dt_dit_opts){.B = B, .training = true}, s->mem, &s->d));
    if (!s->d)
        return false;
    dt_dit_init_weights(s->d, 1);
    DT_CHECK_OK(dt_flow_init(s->d, &(dt_flow_opts){.p_uncond = p_uncond}, s->mem, &s->f));
    return s->f != NULL;
}

static bool make(setup *s, int B, float p_uncond) { return make_with(s, tiny(), B, p_uncond); }

static void drop(setup *s) {
    dt_flow_free(s->f);
    dt_dit_free(s->d);
    dt_mem_free(s->mem);
}

/* The objective recomputed from its definition on a model with random (non-zero) weights. */
static void check_objective(void) {
    setup s;
    if (!make(&s, 3, 0))
        return;
    dt_test_fill(dt_dit_weights(s.d), dt_dit_numel(s.d), 2, 0.2f);
    dt_bounce_config bc = dt_bounce_defaults(4, 3, 8, 8);
    int64_t n = s.clip * 3;
    float *x0 = malloc(sizeof(float) * n), *xt = malloc(sizeof(float) * n);
    float *v = malloc(sizeof(float) * n), t[3];
    int32_t lab[3];
    dt_bounce_batch(&bc, 4, 100, 3, x0, lab);
    for (int b = 0; b < 3; b++) {
        t[b] = dt_flow_timestep(77, 100 + b, 1);
        dt_flow_noise(77, 100 + b, s.clip, v + b * s.clip);
        for (int64_t i = 0; i < s.clip; i++) {
            float e = v[b * s.clip + i], x = x0[b * s.clip + i];
            xt[b * s.clip + i] = (1 - t[b]) * x + t[b] * e;
            v[b * s.clip + i] = e - x;
        }
    }
    DT_CHECK_OK(dt_dit_forward(s.d, xt, t, lab, NULL, 3));
    double want = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = dt_dit_output(s.d)[i] - v[i];
        want += e * e / n;
    }
    double got;
    DT_CHECK_OK(dt_flow_eval(s.f, x0, lab, 3, 77, 100, &got));
    DT_CHECK_CLOSE(got, want, 1e-6);
    /* the middle clip alone gives its own term of the batch (index-pure randomness) */
    double one, want1 = 0;
    DT_CHECK_OK(dt_flow_eval(s.f, x0 + s.clip, lab + 1, 1, 77, 101, &one));
    DT_CHECK_OK(dt_dit_forward(s.d, xt + s.clip, t + 1, lab + 1, NULL, 1));
    for (int64_t i = 0; i < s.clip; i++) {
        double e = dt_dit_output(s.d)[i] - v[s.clip + i];
        want1 += e * e / s.clip;
    }
    DT_CHECK_CLOSE(one, want1, 1e-6);
    /* the training step's loss is the same and its gradient that of the model with dpred */
    double tl;
    dt_dit_zero_grad(s.d);
    DT_CHECK_OK(dt_flow_train(s.f, x0, lab, 3, 77, 100, 1.0f, &tl));
    DT_CHECK_CLOSE(tl, want, 1e-6);
    int64_t nw = dt_dit_numel(s.d);
    float *g1 = malloc(sizeof(float) * nw), *dp = malloc(sizeof(float) * n);
    memcpy(g1, dt_dit_grads(s.d), sizeof(float) * nw);
    dt_dit_zero_grad(s.d);
    DT_CHECK_OK(dt_dit_forward(s.d, xt, t, lab, NULL, 3));
    for (int64_t i = 0; i < n; i++)
        dp[i] = 2 * (dt_dit_output(s.d)[i] - v[i]) / n;
    DT_CHECK_OK(dt_dit_backward(s.d, dp, 3));
    double gmax = 0;
    for (int64_t i = 0; i < nw; i++)
        gmax = fmax(gmax, fabs(g1[i]));
    double gd = dt_test_max_rel(dt_dit_grads(s.d), g1, nw, 1e-3 * gmax);
    DT_CHECK(gd < 1e-4, "train gradient differs by %g", gd);

    /* Euler: one step from t = 1 is eps - v(eps, 1) */
    float *out = malloc(sizeof(float) * n), *eps = malloc(sizeof(float) * n);
    float ones[3] = {1, 1, 1};
    DT_CHECK_OK(dt_flow_sample(s.f, 3, 1, 5, lab, 0, out));
    for (int b = 0; b < 3; b++)
        dt_flow_noise(5, b, s.clip, eps + b * s.clip);
    DT_CHECK_OK(dt_dit_forward(s.d, eps, ones, lab, NULL, 3));
    double err = 0;
    for (int64_t i = 0; i < n; i++)
        err = fmax(err, fabs(out[i] - (eps[i] - dt_dit_output(s.d)[i])));
    DT_CHECK(err < 1e-6, "one Euler step differs by %g", err);
    /* guidance 1 = conditional, guidance 0 = the null label's sample */
    float *o2 = malloc(sizeof(float) * n);
    DT_CHECK_OK(dt_flow_sample(s.f, 3, 4, 5, lab, 0, out));
    DT_CHECK_OK(dt_flow_sample(s.f, 3, 4, 5, lab, 1, o2));
    DT_CHECK(dt_test_max_rel(o2, out, n, 1e-3) < 1e-4, "guidance 1 != conditional");
    int32_t nulls[3] = {3, 3, 3};
    DT_CHECK_OK(dt_flow_sample(s.f, 3, 4, 5, nulls, 0, out));
    DT_CHECK_OK(dt_flow_sample(s.f, 3, 4, 5, lab, 1e-30f, o2));
    DT_CHECK(dt_test_max_rel(o2, out, n, 1e-3) < 1e-4, "guidance ~0 != the null sample");
    DT_CHECK(dt_flow_sample(s.f, 4, 4, 5, lab, 0, out) == DT_ERR_ARG, "B beyond the model");
    /* shifted by 3, two steps: x = eps - (1 - m) v(eps, 1), then x - m v(x, m), m = 3/4 */
    setup h;
    dt_dit_config shifted = tiny();
    shifted.shift = 3;
    if (make_with(&h, shifted, 3, 0)) {
        memcpy(dt_dit_weights(h.d), dt_dit_weights(s.d), sizeof(float) * dt_dit_numel(s.d));
        DT_CHECK_OK(dt_flow_sample(h.f, 3, 2, 5, lab, 0, out));
        float mid = 3 * 0.5 / (1 + 2 * 0.5), mids[3] = {mid, mid, mid};
        DT_CHECK_OK(dt_dit_forward(h.d, eps, ones, lab, NULL, 3));
        for (int64_t i = 0; i < n; i++)
            o2[i] = eps[i] - (1 - mid) * dt_dit_output(h.d)[i];
        DT_CHECK_OK(dt_dit_forward(h.d, o2, mids, lab, NULL, 3));
        for (int64_t i = 0; i < n; i++)
            o2[i] -= mid * dt_dit_output(h.d)[i];
        DT_CHECK(dt_test_max_rel(out, o2, n, 1e-3) < 1e-5, "the shifted sampler's steps differ");
    }
    drop(&h);
    DT_CHECK(dt_flow_sample(s.f, 3, 0, 5, lab, 0, out) == DT_ERR_ARG, "0 steps");
    free(o2), free(out), free(eps), free(g1), free(dp), free(x0), free(xt), free(v);
    drop(&s);
}

/* A few dozen AdamW steps on fresh bouncing clips lower the loss. */
static void check_training(void) {
    setup s;
    int B = 8, steps = 60;
    if (!make(&s, B, 0.1f))
        return;
    dt_bounce_config bc = dt_bounce_defaults(4, 3, 8, 8);
    DT_CHECK_OK(dt_bounce_check(&bc));
    dt_optim_config oc = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                          .weight_decay = 0.0f};
    dt_adamw *opt = NULL;
    int np = dt_dit_n_params(s.d);
    DT_CHECK_OK(dt_adamw_init(&oc, dt_dit_param(s.d, 0), np, 0, dt_dit_numel(s.d), s.mem,
                              &opt));
    float *x0 = malloc(sizeof(float) * s.clip * B);
    int32_t lab[8];
    double first = 0, last = 0;
    for (int step = 0; step < steps && opt; step++) {
        dt_bounce_batch(&bc, 3, (int64_t)step * B, B, x0, lab);
        double loss;
        dt_dit_zero_grad(s.d);
        DT_CHECK_OK(dt_flow_train(s.f, x0, lab, B, 11, (int64_t)step * B, 1.0f, &loss));
        DT_CHECK_OK(dt_adamw_step(opt, dt_dit_weights(s.d), dt_dit_grads(s.d), NULL, oc.lr, 1));
        if (step < 10)
            first += loss / 10;
        if (step >= steps - 10)
            last += loss / 10;
        if (step % 10 == 0 || step == steps - 1)
            printf("step %d loss %.4f\n", step, loss);
    }
    printf("mean loss: first 10 steps %.4f, last 10 %.4f\n", first, last);
    DT_CHECK(last < 0.7 * first, "loss %.4f -> %.4f did not fall by 30%%", first, last);
    dt_adamw_free(opt);
    free(x0);
    drop(&s);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_timesteps();
    check_shifted_timesteps();
    check_mse();
    check_objective();
    check_training();
    return DT_TEST_END();
}
