/* Rectified flow training and Euler sampling over a dt_dit (see flow.h). */
#include "models/flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

struct dt_flow {
    dt_dit *d; /* borrowed */
    dt_mem *mem;
    dt_flow_opts opts;
    int B;
    int64_t clip;
    float *xt, *v, *dpred, *t;
    int32_t *labels;
};

float dt_flow_shift(float t, float shift) {
    if (shift == 0.0f) /* a config's zero: no shift */
        return t;
    return shift * t / (1.0f + (shift - 1.0f) * t);
}

float dt_flow_timestep(uint64_t seed, int64_t index, float shift) {
    float n;
    dt_rng_fill_normal(seed, "flow.t", index, 1, 0.0f, 1.0f, &n);
    return dt_flow_shift(1.0f / (1.0f + expf(-n)), shift);
}

/* The time at Euler step s of `steps`: 1 - s / steps, shifted (steps: 0 at the end). */
static float step_time(int s, int steps, float shift) {
    return dt_flow_shift(1.0f - (float)s / (float)steps, shift);
}

void dt_flow_noise(uint64_t seed, int64_t index, int64_t n, float *out) {
    dt_rng_fill_normal(seed, "flow.noise", index * n, n, 0.0f, 1.0f, out);
}

float dt_flow_make_row(uint64_t seed, int64_t index, float shift, int64_t numel, float *x_t,
                       float *v) {
    float t = dt_flow_timestep(seed, index, shift);
    dt_flow_noise(seed, index, numel, x_t);
    for (int64_t i = 0; i < numel; i++) {
        float x0 = v[i], eps = x_t[i];
        x_t[i] = (1.0f - t) * x0 + t * eps;
        v[i] = eps - x0;
    }
    return t;
}

bool dt_flow_drop_label(uint64_t seed, int64_t index, float p) {
    float u;
    dt_rng_fill_uniform(seed, "flow.drop", index, 1, &u);
    return u < p;
}

double dt_flow_mse(const float *pred, const float *v, int64_t n, float grad_scale, float *dpred) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)pred[i] - v[i];
        s += e * e;
        if (dpred)
            dpred[i] = (float)(2.0 * grad_scale * e / (double)n);
    }
    return s / (double)n;
}

dt_status dt_flow_init(dt_dit *d, const dt_flow_opts *opts, dt_mem *mem, dt_flow **out) {
    *out = NULL;
    if (opts->p_uncond < 0 || opts->p_uncond > 1)
        return dt_err_set(DT_ERR_ARG, "flow: p_uncond = %g is not in [0, 1]",
                          (double)opts->p_uncond);
    if (dt_dit_config_of(d)->text_len > 0)
        return dt_err_set(DT_ERR_UNSUPPORTED,
                          "flow: a one-process dt_flow serves models with "
                          "labels or none; a model with text trains and samples through the "
                          "model interface (dt_flow_sample_model)");
    dt_flow *f = calloc(1, sizeof *f);
    if (!f)
        return dt_err_set(DT_ERR_OOM, "flow: out of memory");
    dt_status st = DT_OK;
    f->d = d;
    f->mem = mem;
    f->opts = *opts;
    /* the model's B, from how many clips its output holds */
    const dt_dit_config *c = dt_dit_config_of(d);
    f->clip = dt_dit_clip_numel(c);
    f->B = dt_dit_max_batch(d);
    size_t n = (size_t)f->B * f->clip * sizeof(float);
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_TEMP, "flow.xt", n, (void **)&f->xt));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_TEMP, "flow.v", n, (void **)&f->v));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_TEMP, "flow.dpred", n, (void **)&f->dpred));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_TEMP, "flow.t", (size_t)f->B * sizeof(float),
                             (void **)&f->t));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_TEMP, "flow.labels", (size_t)f->B * sizeof(int32_t),
                             (void **)&f->labels));
    *out = f;
    return DT_OK;
fail:
    dt_flow_free(f);
    return st;
}

void dt_flow_free(dt_flow *f) {
    if (!f)
        return;
    dt_mem_release(f->mem, f->labels);
    dt_mem_release(f->mem, f->t);
    dt_mem_release(f->mem, f->dpred);
    dt_mem_release(f->mem, f->v);
    dt_mem_release(f->mem, f->xt);
    free(f);
}

static dt_status check_batch(const dt_flow *f, int B) {
    if (B <= 0 || B > f->B)
        return dt_err_set(DT_ERR_ARG, "flow: B = %d clips, the model holds 1..%d", B, f->B);
    return DT_OK;
}

/* x_t, v, t and the (possibly dropped) labels of B clips; returns the labels to use. */
static const int32_t *make_batch(dt_flow *f, const float *x0, const int32_t *labels, int B,
                                 uint64_t seed, int64_t index0) {
    int64_t n = f->clip;
    for (int b = 0; b < B; b++) {
        memcpy(f->v + b * n, x0 + b * n, (size_t)n * sizeof *x0);
        f->t[b] = dt_flow_make_row(seed, index0 + b, dt_dit_config_of(f->d)->shift, n,
                                   f->xt + b * n, f->v + b * n);
    }
    if (!labels)
        return NULL;
    int null = dt_dit_config_of(f->d)->n_classes;
    for (int b = 0; b < B; b++)
        f->labels[b] = dt_flow_drop_label(seed, index0 + b, f->opts.p_uncond) ? null : labels[b];
    return f->labels;
}

dt_status dt_flow_train(dt_flow *f, const float *x0, const int32_t *labels, int B,
                        uint64_t seed, int64_t index0, float grad_scale, double *loss) {
    DT_TRY(check_batch(f, B));
    const int32_t *lab = make_batch(f, x0, labels, B, seed, index0);
    DT_TRY(dt_dit_forward(f->d, f->xt, f->t, lab, NULL, B));
    *loss = dt_flow_mse(dt_dit_output(f->d), f->v, B * f->clip, grad_scale, f->dpred);
    return dt_dit_backward(f->d, f->dpred, B);
}

dt_status dt_flow_eval(dt_flow *f, const float *x0, const int32_t *labels, int B,
                       uint64_t seed, int64_t index0, double *loss) {
    DT_TRY(check_batch(f, B));
    /* evaluation uses the labels as given (no drop) */
    const int32_t *lab = labels;
    make_batch(f, x0, NULL, B, seed, index0);
    DT_TRY(dt_dit_forward(f->d, f->xt, f->t, lab, NULL, B));
    *loss = dt_flow_mse(dt_dit_output(f->d), f->v, B * f->clip, 1.0f, NULL);
    return DT_OK;
}

dt_status dt_flow_sample(dt_flow *f, int B, int steps, uint64_t seed, const int32_t *labels,
                         float guidance, float *out) {
    DT_TRY(check_batch(f, B));
    if (steps < 1)
        return dt_err_set(DT_ERR_ARG, "flow: steps = %d, want at least 1", steps);
    int64_t n = f->clip, all = B * n;
    bool cfg = labels && guidance > 0;
    int null = dt_dit_config_of(f->d)->n_classes;
    for (int b = 0; b < B; b++) {
        dt_flow_noise(seed, b, n, out + b * n);
        f->labels[b] = null;
    }
    const float *vel = dt_dit_output(f->d);
    float shift = dt_dit_config_of(f->d)->shift;
    for (int s = 0; s < steps; s++) {
        float t = step_time(s, steps, shift), dt = t - step_time(s + 1, steps, shift);
        for (int b = 0; b < B; b++)
            f->t[b] = t;
        if (cfg) { /* v(null) first, kept in f->v */
            DT_TRY(dt_dit_forward(f->d, out, f->t, f->labels, NULL, B));
            memcpy(f->v, vel, (size_t)all * sizeof *f->v);
        }
        DT_TRY(dt_dit_forward(f->d, out, f->t, labels, NULL, B));
        for (int64_t i = 0; i < all; i++) {
            float v = cfg ? f->v[i] + guidance * (vel[i] - f->v[i]) : vel[i];
            out[i] -= dt * v; /* t decreases: x_{t - dt} = x_t - dt v */
        }
    }
    return DT_OK;
}

/* Input rows of K clips at time t: x_t, t, the label (n_classes = null), then with text
 * the clip's text row, or no text (NULL: the null condition). */
static void fill_rows(float *rows, const dt_dit_config *c, const float *x, int K, float t,
                      const int32_t *labels, const float *text) {
    int64_t n = dt_dit_clip_numel(c), stride = dt_dit_input_floats(c);
    int64_t tf = dt_dit_text_floats(c);
    for (int k = 0; k < K; k++) {
        float *r = rows + (size_t)k * stride;
        memcpy(r, x + (size_t)k * n, (size_t)n * sizeof *r);
        r[n] = t;
        r[n + 1] = (float)(labels ? labels[k] : c->n_classes);
        if (tf && text)
            memcpy(r + n + 2, text + (size_t)k * tf, (size_t)tf * sizeof *r);
        else if (tf) {
            memset(r + n + 2, 0, (size_t)tf * sizeof *r);
            r[n + 2] = -1; /* no text */
        }
    }
}

dt_status dt_flow_sample_model(dt_model *m, dt_mem *mem, int K, int steps, uint64_t seed,
                               const int32_t *labels, const float *text, float guidance,
                               float *out) {
    const dt_model_config *mc = dt_model_cfg(m);
    if (mc->arch != DT_ARCH_DIT)
        return dt_err_set(DT_ERR_UNSUPPORTED, "flow: sampling needs a dit model, not %s",
                          dt_arch_name(mc->arch));
    if (K < 1 || steps < 1)
        return dt_err_set(DT_ERR_ARG, "flow: K = %d clips in %d steps, want at least 1 of each",
                          K, steps);
    dt_dit_config c = dt_dit_config_from_model(mc);
    int64_t n = dt_dit_clip_numel(&c), all = (int64_t)K * n;
    int null = c.n_classes;
    for (int k = 0; labels && k < K; k++)
        if (labels[k] < 0 || labels[k] > null)
            return dt_err_set(DT_ERR_ARG, "flow: label %d of clip %d is outside 0..%d", labels[k],
                              k, null);
    if (text && c.text_len == 0)
        return dt_err_set(DT_ERR_ARG, "flow: text given to a model without text");
    bool cfg = (labels || text) && guidance > 0;
    float *rows = NULL, *v = NULL, *vn = NULL;
    dt_status st =
        dt_mem_alloc(mem, DT_MEM_TEMP, "flow.sample.rows",
                     (size_t)K * dt_dit_input_floats(&c) * sizeof(float), (void **)&rows);
    if (st == DT_OK)
        st = dt_mem_alloc(mem, DT_MEM_TEMP, "flow.sample.v", (size_t)all * sizeof(float),
                          (void **)&v);
    if (st == DT_OK && cfg)
        st = dt_mem_alloc(mem, DT_MEM_TEMP, "flow.sample.v_null", (size_t)all * sizeof(float),
                          (void **)&vn);
    for (int k = 0; st == DT_OK && k < K; k++)
        dt_flow_noise(seed, k, n, out + (size_t)k * n);
    dt_batch b = {.input = rows, .B = K, .T = dt_dit_tokens(&c)};
    for (int s = 0; st == DT_OK && s < steps; s++) {
        float t = step_time(s, steps, c.shift), dt = t - step_time(s + 1, steps, c.shift);
        if (cfg) { /* v(null) first */
            fill_rows(rows, &c, out, K, t, NULL, NULL);
            st = dt_model_predict(m, &b, vn);
        }
        if (st == DT_OK) {
            fill_rows(rows, &c, out, K, t, labels, text);
            st = dt_model_predict(m, &b, v);
        }
        for (int64_t i = 0; st == DT_OK && i < all; i++) {
            float vel = cfg ? vn[i] + guidance * (v[i] - vn[i]) : v[i];
            out[i] -= dt * vel; /* t decreases: x_{t - dt} = x_t - dt v */
        }
    }
    dt_mem_release(mem, vn);
    dt_mem_release(mem, v);
    dt_mem_release(mem, rows);
    return st;
}
