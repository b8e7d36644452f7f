/* AdamW over a parameter table, the LR schedule, and the clipping factor. See adamw.h. */
#include "optim/adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"

struct dt_adamw {
    dt_optim_config cfg;
    const dt_param *params; /* borrowed */
    int n_params;
    int64_t first, count;
    float *m, *v;     /* in memory, or NULL when offloaded */
    dt_offload_store *disk; /* offloaded moments, or NULL */
    int t;
    dt_mem *mem; /* borrowed */
};

static dt_status make(const dt_optim_config *cfg, const dt_param *params, int n_params,
                      int64_t first, int64_t count, const dt_offload_opts *off, dt_mem *mem,
                      dt_adamw **out) {
    *out = NULL;
    dt_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return dt_err_set(DT_ERR_OOM, "optimizer: out of memory");
    o->cfg = *cfg;
    o->params = params;
    o->n_params = n_params;
    o->mem = mem;
    o->first = first;
    o->count = count;
    dt_status st;
    if (off) {
        DT_TRY_GOTO(dt_offload_init(off, count, mem, &o->disk));
    } else {
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_OPTIM, "adamw.m", (size_t)count * sizeof(float),
                                 (void **)&o->m));
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_OPTIM, "adamw.v", (size_t)count * sizeof(float),
                                 (void **)&o->v));
    }
    *out = o;
    return DT_OK;
fail:
    dt_adamw_free(o);
    return st;
}

dt_status dt_adamw_init(const dt_optim_config *cfg, const dt_param *params, int n_params,
                        int64_t first, int64_t count, dt_mem *mem, dt_adamw **out) {
    return make(cfg, params, n_params, first, count, NULL, mem, out);
}

dt_status dt_adamw_init_offload(const dt_optim_config *cfg, const dt_param *params,
                                int n_params, int64_t first, int64_t count,
                                const dt_offload_opts *off, dt_mem *mem, dt_adamw **out) {
    return make(cfg, params, n_params, first, count, off, mem, out);
}

void dt_adamw_free(dt_adamw *o) {
    if (!o)
        return;
    dt_offload_free(o->disk);
    dt_mem_release(o->mem, o->v);
    dt_mem_release(o->mem, o->m);
    free(o);
}

/* One step's arguments, for the update of a piece of the owned range. */
typedef struct step_args {
    const dt_adamw *o;
    float *w;
    const float *g;
    uint16_t *w_lp;
    dt_dtype lp_type; /* of w_lp: DT_BF16 or DT_F16 */
    float lr, grad_scale;
} step_args;

/* The update of owned elements [at, at + n) (relative to `first`), moments m, v: [n]. The
 * kernel is element-wise, so cutting the range anywhere (tensors, shards, offload chunks)
 * gives the same bits as one call over it. */
static void update_range(void *ctx, int64_t at, int64_t n, float *m, float *v) {
    const step_args *s = ctx;
    const dt_adamw *o = s->o;
    int64_t lo = o->first + at, hi = lo + n;
    for (int i = 0; i < o->n_params; i++) {
        const dt_param *p = &o->params[i];
        /* the part of this tensor inside the range (a shard or a chunk may cut tensors) */
        int64_t a = p->offset > lo ? p->offset : lo;
        int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b)
            continue;
        dt_adamw_hparams h = {.lr = s->lr, .beta1 = o->cfg.beta1, .beta2 = o->cfg.beta2,
                              .eps = o->cfg.eps,
                              .weight_decay = p->decay ? o->cfg.weight_decay : 0.0f,
                              .grad_scale = s->grad_scale, .step = o->t};
        int64_t off = a - o->first, in = a - lo;
        uint16_t *lp = s->w_lp ? s->w_lp + off : NULL;
        if (s->lp_type == DT_F16)
            dt_adamw_update_f16(s->w + off, s->g + off, m + in, v + in, lp, b - a, &h);
        else
            dt_adamw_update(s->w + off, s->g + off, m + in, v + in, lp, b - a, &h);
    }
}

static dt_status step(dt_adamw *o, float *w, const float *g, dt_dtype lp_type, uint16_t *w_lp,
                      float lr, float grad_scale) {
    o->t++;
    step_args s = {.o = o, .w = w, .g = g, .w_lp = w_lp, .lp_type = lp_type, .lr = lr,
                   .grad_scale = grad_scale};
    if (o->disk)
        return dt_offload_stream(o->disk, update_range, &s);
    update_range(&s, 0, o->count, o->m, o->v);
    return DT_OK;
}

dt_status dt_adamw_step(dt_adamw *o, float *w, const float *g, dt_bf16 *w_lp, float lr,
                        float grad_scale) {
    return step(o, w, g, DT_BF16, w_lp, lr, grad_scale);
}

dt_status dt_adamw_step_f16(dt_adamw *o, float *w, const float *g, dt_f16 *w_f16, float lr,
                            float grad_scale) {
    return step(o, w, g, DT_F16, w_f16, lr, grad_scale);
}

int dt_adamw_steps_taken(const dt_adamw *o) { return o->t; }
void dt_adamw_set_steps_taken(dt_adamw *o, int t) { o->t = t; }
float *dt_adamw_m(dt_adamw *o) { return o->m; }
float *dt_adamw_v(dt_adamw *o) { return o->v; }

dt_status dt_adamw_get_moments(dt_adamw *o, float *m, float *v) {
    if (o->disk)
        return dt_offload_read(o->disk, m, v);
    if (m)
        memcpy(m, o->m, (size_t)o->count * sizeof *m);
    if (v)
        memcpy(v, o->v, (size_t)o->count * sizeof *v);
    return DT_OK;
}

dt_status dt_adamw_set_moments(dt_adamw *o, const float *m, const float *v) {
    if (o->disk)
        return dt_offload_write(o->disk, m, v);
    if (m)
        memcpy(o->m, m, (size_t)o->count * sizeof *m);
    if (v)
        memcpy(o->v, v, (size_t)o->count * sizeof *v);
    return DT_OK;
}

dt_status dt_adamw_read_moment(dt_adamw *o, int which, int64_t first, int64_t n, float *out) {
    if (o->disk)
        return dt_offload_read_range(o->disk, which, first, n, out);
    if (first < 0 || n < 0 || first + n > o->count)
        return dt_err_set(DT_ERR_ARG, "%s: range outside the owned moments", __func__);
    memcpy(out, (which ? o->v : o->m) + first, (size_t)n * sizeof *out);
    return DT_OK;
}

dt_status dt_adamw_write_moment(dt_adamw *o, int which, int64_t first, int64_t n,
                                const float *in) {
    if (o->disk)
        return dt_offload_write_range(o->disk, which, first, n, in);
    if (first < 0 || n < 0 || first + n > o->count)
        return dt_err_set(DT_ERR_ARG, "%s: range outside the owned moments", __func__);
    memcpy((which ? o->v : o->m) + first, in, (size_t)n * sizeof *in);
    return DT_OK;
}

float dt_lr_at(const dt_optim_config *c, int s, int total) {
    if (s < c->warmup_steps)
        return c->lr * (float)(s + 1) / (float)c->warmup_steps;
    if (c->schedule == DT_SCHED_CONSTANT)
        return c->lr;
    int span = total - c->warmup_steps;
    double progress = (double)(s - c->warmup_steps) / (span > 1 ? span : 1);
    if (progress > 1)
        progress = 1;
    return (float)(c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * progress)));
}

float dt_clip_coef(double norm, float max_norm) {
    if (max_norm <= 0)
        return 1.0f;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
