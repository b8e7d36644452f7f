/* AdamW over a parameter table, the LR schedule, and the clipping factor. See adamw.h. */
#include "optim/adamw.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/adamw.h"

struct dt_adamw {
    dt_optim_config cfg;
    const dt_param *params; /* borrowed */
    int n_params;
    int64_t first, count;
    float *m, *v;
    int t;
    dt_mem *mem; /* borrowed */
};

dt_status dt_adamw_init(const dt_optim_config *cfg, const dt_param *params, int n_params,
                        int64_t first, int64_t count, dt_mem *mem, dt_adamw **out) {
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
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_OPTIM, "adamw.m", (size_t)count * sizeof(float),
                             (void **)&o->m));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_OPTIM, "adamw.v", (size_t)count * sizeof(float),
                             (void **)&o->v));
    *out = o;
    return DT_OK;
fail:
    dt_adamw_free(o);
    return st;
}

void dt_adamw_free(dt_adamw *o) {
    if (!o)
        return;
    dt_mem_release(o->mem, o->v);
    dt_mem_release(o->mem, o->m);
    free(o);
}

void dt_adamw_step(dt_adamw *o, float *w, const float *g, dt_bf16 *w_lp, float lr,
                   float grad_scale) {
    o->t++;
    int64_t end = o->first + o->count;
    for (int i = 0; i < o->n_params; i++) {
        const dt_param *p = &o->params[i];
        /* the part of this tensor inside the owned range (a shard may cut tensors) */
        int64_t a = p->offset > o->first ? p->offset : o->first;
        int64_t b = p->offset + p->numel < end ? p->offset + p->numel : end;
        if (a >= b)
            continue;
        dt_adamw_hparams h = {.lr = lr, .beta1 = o->cfg.beta1, .beta2 = o->cfg.beta2,
                              .eps = o->cfg.eps,
                              .weight_decay = p->decay ? o->cfg.weight_decay : 0.0f,
                              .grad_scale = grad_scale, .step = o->t};
        int64_t off = a - o->first;
        dt_adamw_update(w + off, g + off, o->m + off, o->v + off, w_lp ? w_lp + off : NULL,
                        b - a, &h);
    }
}

int dt_adamw_steps_taken(const dt_adamw *o) { return o->t; }
void dt_adamw_set_steps_taken(dt_adamw *o, int t) { o->t = t; }
float *dt_adamw_m(dt_adamw *o) { return o->m; }
float *dt_adamw_v(dt_adamw *o) { return o->v; }

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
