/* The engine and the pipeline executor through the model interface alone (models/model.h),
 * on a toy model that is not GPT: under mpirun (np 1, 2, 4), ZeRO stages 0-3, one and two
 * micro-batches per rank.
 *
 * The toy: U units, each an elementwise affine map of C features, h_u = h_{u-1} * a_u + b_u,
 * on float inputs [B, T, C] (not tokens) with the loss 0.5 sum (h_U - y)^2 against float
 * targets. Its gradients are known in closed form: with dh_U = h_U - y and
 * dh_{u-1} = dh_u * a_u, d a_u = sum dh_u * h_{u-1} and d b_u = sum dh_u. A double-precision
 * evaluation of that formula from the same start weights is the reference for the engine's
 * first step: the global loss, the gradient norm, every gradient element (AdamW's first
 * moment after one step is (1 - beta1) g), and every updated weight (after one AdamW step
 * without weight decay, w - lr g / (|g| + eps)). A failure names the stage and the check.
 * With an even number of ranks, the toy also runs under the pipeline executor (pp 2 x dp,
 * 1F1B, ZeRO 0-3: a stage holds some units and sends the toy's boundary tensors), and reports
 * a tie (as GPT-2's embedding and head copy on two stages) whose sum over the tied group is
 * checked likewise.
 * The toy also round-trips its weights through save/load. Named mpi_test_*.c so the tests/
 * glob does not register it without mpirun (tests.cmake does).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "harness.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "plan/schedule.h"
#include "plan/stages.h"
#include "train/engine.h"
#include "train/pipeline.h"

/* ---- the toy model ------------------------------------------------------------------------ */

typedef struct toy {
    dt_model_config cfg;
    int U, C, N;        /* global units, features, rows (B x T) of the largest micro-batch */
    int n_slots;
    int n_local;        /* units held here (a pipeline stage holds some) */
    int *local_of;      /* [U] local id of a global unit, -1: not held */
    dt_param *params;   /* [2 n_local]: a_u, b_u of the held units, the local arena */
    dt_param *full;     /* [2U]: the whole model's table */
    int *local_full;    /* [2 n_local] full index of each local tensor */
    int *unit_param;    /* [n_local + 1] first local tensor of each held unit */
    dt_comm *pp;        /* borrowed; NULL: no pipeline */
    int64_t n_total;
    float *w, *g;       /* own arenas, NULL when the caller binds them */
    float **unit_w, **unit_g;
    /* [slot][U][N, C] unit outputs; [slot][N, C] the loss's gradient; [grad][N, C] the
     * gradient a backward carries (n_grads buffers) */
    float *out, *dloss, *dres;
    int n_grads;
    dt_model_hooks hooks;
    dt_comm *tp;        /* size 1: the toy does not split */
    int tie_role;       /* -1: no tie; 0: a_0 is tied as the original, 1: a_{U-1} as the copy */
} toy;

static dt_status enter(toy *t, int u, dt_model_phase ph) {
    return t->hooks.enter ? t->hooks.enter(t->hooks.ctx, u, ph) : DT_OK;
}
static dt_status leave(toy *t, int u, dt_model_phase ph) {
    return t->hooks.leave ? t->hooks.leave(t->hooks.ctx, u, ph) : DT_OK;
}

static int lid(const toy *t, int u) { return t->local_of[u]; }

static float *out_of(const toy *t, int slot, int u) {
    return t->out + ((size_t)slot * t->U + (size_t)u) * t->N * t->C;
}

static const float *input_of(const toy *t, int slot, int u, const dt_batch *b) {
    return u == 0 ? b->input : out_of(t, slot, u - 1);
}

static dt_status check_call(const toy *t, int slot, int u0, int u1, const dt_batch *b) {
    if (slot < 0 || slot >= t->n_slots || u0 < 0 || u1 > t->U || u0 >= u1 || b->B * b->T > t->N)
        return dt_err_set(DT_ERR_ARG, "toy: slot %d, units [%d, %d), batch %dx%d out of range",
                          slot, u0, u1, b->B, b->T);
    for (int u = u0; u < u1; u++)
        if (lid(t, u) < 0)
            return dt_err_set(DT_ERR_ARG, "toy: unit %d is not held here", u);
    return DT_OK;
}

static dt_status t_forward(void *s, int slot, int u0, int u1, const dt_batch *b) {
    toy *t = s;
    DT_TRY(check_call(t, slot, u0, u1, b));
    int64_t N = (int64_t)b->B * b->T;
    for (int u = u0; u < u1; u++) {
        DT_TRY(enter(t, lid(t, u), DT_PHASE_FORWARD));
        const float *x = input_of(t, slot, u, b), *a = t->unit_w[lid(t, u)], *bias = a + t->C;
        float *y = out_of(t, slot, u);
        for (int64_t i = 0; i < N; i++)
            for (int c = 0; c < t->C; c++)
                y[i * t->C + c] = x[i * t->C + c] * a[c] + bias[c];
        DT_TRY(leave(t, lid(t, u), DT_PHASE_FORWARD));
    }
    return DT_OK;
}

static dt_status t_loss(void *s, int slot, const dt_batch *b, float grad_scale, bool backward,
                        double *loss_sum) {
    toy *t = s;
    DT_TRY(check_call(t, slot, t->U - 1, t->U, b));
    int64_t n = (int64_t)b->B * b->T * t->C;
    const float *o = out_of(t, slot, t->U - 1), *y = b->target;
    float *d = t->dloss + (size_t)slot * t->N * t->C;
    DT_TRY(enter(t, lid(t, t->U - 1), DT_PHASE_HEAD));
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += 0.5 * ((double)o[i] - y[i]) * ((double)o[i] - y[i]);
        if (backward)
            d[i] = grad_scale * (o[i] - y[i]);
    }
    *loss_sum = sum;
    return leave(t, lid(t, t->U - 1), DT_PHASE_HEAD);
}

/* from the slot's output gradient (the loss's, or one placed in boundary_grad) down to the
 * chunk's input gradient, accumulating the weight gradients */
static dt_status t_backward(void *s, int slot, int grad, int u0, int u1, const dt_batch *b,
                            bool split) {
    toy *t = s;
    DT_TRY(check_call(t, slot, u0, u1, b));
    if (split)
        return dt_err_set(DT_ERR_UNSUPPORTED, "toy: no split backward");
    if (grad < 0 || grad >= t->n_grads)
        return dt_err_set(DT_ERR_ARG, "toy: gradient buffer %d of %d", grad, t->n_grads);
    int64_t N = (int64_t)b->B * b->T;
    float *d = t->dres + (size_t)grad * t->N * t->C;
    if (u1 == t->U)
        memcpy(d, t->dloss + (size_t)slot * t->N * t->C, (size_t)N * t->C * sizeof *d);
    for (int u = u1 - 1; u >= u0; u--) {
        DT_TRY(enter(t, lid(t, u), DT_PHASE_BACKWARD));
        const float *x = input_of(t, slot, u, b), *a = t->unit_w[lid(t, u)];
        float *da = t->unit_g[lid(t, u)], *db = da + t->C;
        for (int64_t i = 0; i < N; i++)
            for (int c = 0; c < t->C; c++) {
                float dy = d[i * t->C + c];
                da[c] += dy * x[i * t->C + c];
                db[c] += dy;
                d[i * t->C + c] = dy * a[c];
            }
        DT_TRY(leave(t, lid(t, u), DT_PHASE_BACKWARD));
    }
    return DT_OK;
}

static void wire(toy *t) {
    for (int u = 0; u < t->n_local; u++) {
        if (t->w)
            t->unit_w[u] = t->w + t->params[2 * u].offset;
        if (t->g)
            t->unit_g[u] = t->g + t->params[2 * u].offset;
    }
}

static void t_free(void *s) {
    toy *t = s;
    if (!t)
        return;
    free(t->params);
    free(t->full);
    free(t->local_of);
    free(t->unit_param);
    free(t->local_full);
    free(t->w);
    free(t->g);
    free(t->unit_w);
    free(t->unit_g);
    free(t->out);
    free(t->dres);
    free(t->dloss);
    dt_comm_free(t->tp);
    free(t);
}

static const dt_model_config *t_config(const void *s) { return &((const toy *)s)->cfg; }
static void t_bind(void *s, int u, float *w, float *grad, dt_bf16 *lp) {
    toy *t = s;
    (void)lp;
    if (w)
        t->unit_w[u] = w;
    if (grad)
        t->unit_g[u] = grad;
}
static void t_set_hooks(void *s, const dt_model_hooks *h) { ((toy *)s)->hooks = *h; }
static int64_t t_full_numel(const void *s) {
    return 2 * (int64_t)((const toy *)s)->U * ((const toy *)s)->C;
}
static dt_param_tables t_tables(const void *s) {
    const toy *t = s;
    return (dt_param_tables){.full = t->full,
                             .local = t->params,
                             .n_full = 2 * t->U,
                             .n_local = 2 * t->n_local,
                             .local_full = t->local_full,
                             .full_numel = t_full_numel(t),
                             .local_numel = t->n_total,
                             .skip = -1,
                             .n_units = t->n_local,
                             .unit_param = t->unit_param};
}
static dt_model_arenas t_arenas(void *s) { /* fp32 only: no 16-bit copy */
    return (dt_model_arenas){.w = ((toy *)s)->w, .g = ((toy *)s)->g};
}
static dt_comm *t_tp(const void *s) { return ((const toy *)s)->tp; }
static int t_ties(const void *s, dt_model_tie out[DT_MODEL_MAX_TIES]) {
    const toy *t = s;
    if (t->tie_role < 0)
        return 0;
    out[0] = t->tie_role == 0 ? (dt_model_tie){.param = 0, .copy = false}
                              : (dt_model_tie){.param = 2 * lid(t, t->U - 1), .copy = true};
    return 1;
}
static void t_sync_lp(void *s) { (void)s; } /* fp32 only: no 16-bit copy */
static int64_t t_boundary_count(const void *s, int B, int T) {
    return (int64_t)B * T * ((const toy *)s)->C;
}
static float *t_boundary(void *s, int slot, int position, int B, int T) {
    (void)B, (void)T;
    return out_of(s, slot, position);
}
static float *t_boundary_grad(void *s, int grad, int B, int T) {
    toy *t = s;
    (void)B, (void)T;
    return t->dres + (size_t)grad * t->N * t->C;
}
static void t_evaluating(void *s, bool on) { (void)s, (void)on; } /* nothing accounted live */
/* each unit is held by one stage: place the held ones, sum over the pipeline */
static dt_status t_gather_full(void *s, const float *local, float *full) {
    toy *t = s;
    int64_t n = t_full_numel(t);
    memset(full, 0, (size_t)n * sizeof *full);
    for (int i = 0; i < 2 * t->n_local; i++)
        memcpy(full + t->full[t->local_full[i]].offset, local + t->params[i].offset,
               (size_t)t->C * sizeof *full);
    return t->pp ? dt_comm_allreduce_f32(t->pp, full, n, NULL) : DT_OK;
}
static double t_flops(const void *s, int T) {
    const toy *t = s;
    return 6.0 * t->U * t->C * T; /* a multiply-add forward, two backward, per element */
}
static dt_status t_save(const void *s, const float *w, const char *path) {
    const toy *t = s;
    dt_st_writer *wr = NULL;
    DT_TRY(dt_st_writer_init(&wr));
    dt_status st = DT_OK;
    for (int i = 0; i < 2 * t->U && st == DT_OK; i++)
        st = dt_st_writer_add(wr, t->full[i].name, DT_ST_F32, 1, t->full[i].shape,
                              w + t->full[i].offset);
    if (st == DT_OK)
        st = dt_st_writer_commit(wr, path);
    dt_st_writer_free(wr);
    return st;
}
static dt_status t_load(const void *s, float *w, const char *path) {
    const toy *t = s;
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = DT_OK;
    for (int i = 0; i < 2 * t->n_local && st == DT_OK; i++)
        st = dt_st_read_f32(f, t->params[i].name, 1, t->params[i].shape,
                            w + t->params[i].offset);
    dt_st_close(f);
    return st;
}
static int t_sizes(const void *s, dt_model_size *out) {
    const toy *t = s;
    out[0] = (dt_model_size){"n_units", t->U};
    out[1] = (dt_model_size){"width", t->C};
    return 2;
}

/* no split backward (weight_units), description or token logits */
static const dt_model_ops toy_ops = {.free = t_free,
                                     .config = t_config,
                                     .bind_unit = t_bind,
                                     .set_hooks = t_set_hooks,
                                     .tables = t_tables,
                                     .arenas = t_arenas,
                                     .tp = t_tp,
                                     .ties = t_ties,
                                     .sync_lp = t_sync_lp,
                                     .evaluating = t_evaluating,
                                     .forward_units = t_forward,
                                     .loss_slot = t_loss,
                                     .backward_units = t_backward,
                                     .boundary_count = t_boundary_count,
                                     .boundary = t_boundary,
                                     .boundary_grad = t_boundary_grad,
                                     .gather_full = t_gather_full,
                                     .flops_per_sample = t_flops,
                                     .save = t_save,
                                     .load = t_load,
                                     .sizes = t_sizes};

/* The tables: the whole model's (a_u, b_u of every global unit, in order) and the local one
 * of the held units, packed; each tensor C floats. */
static dt_status make_tables(toy *t, const bool *held) {
    t->full = calloc((size_t)2 * t->U, sizeof *t->full);
    t->params = calloc((size_t)2 * t->U, sizeof *t->params);
    t->local_full = calloc((size_t)2 * t->U, sizeof *t->local_full);
    t->local_of = calloc((size_t)t->U, sizeof *t->local_of);
    t->unit_param = calloc((size_t)t->U + 1, sizeof *t->unit_param);
    if (!t->full || !t->params || !t->local_full || !t->local_of || !t->unit_param)
        return dt_err_set(DT_ERR_OOM, "toy: out of memory");
    for (int i = 0; i < 2 * t->U; i++) {
        dt_param *p = &t->full[i];
        snprintf(p->name, sizeof p->name, "unit.%d.%s", i / 2, i % 2 ? "b" : "a");
        p->ndim = 1;
        p->shape[0] = p->numel = t->C;
        p->offset = (int64_t)i * t->C;
        p->init = DT_INIT_NORMAL;
        p->std = i % 2 ? 0.1f : 0.8f;
        p->shard = (dt_shard){.kind = DT_SHARD_NONE, .parts = 1, .full_rows = t->C,
                              .full_cols = 1};
    }
    for (int u = 0; u < t->U; u++) {
        t->local_of[u] = held && !held[u] ? -1 : t->n_local++;
        for (int k = 0; k < 2 && t->local_of[u] >= 0; k++) {
            int i = 2 * t->local_of[u] + k;
            t->local_full[i] = 2 * u + k;
            t->params[i] = t->full[2 * u + k];
            t->params[i].offset = (int64_t)i * t->C;
        }
    }
    t->n_total = 2 * (int64_t)t->n_local * t->C;
    for (int u = 0; u <= t->n_local; u++)
        t->unit_param[u] = 2 * u;
    return DT_OK;
}

/* model.n_layer + 2 units of model.n_embd features (the units a stage plan cuts), all or a
 * pipeline stage's; fp32, no tensor or sequence split */
static dt_status toy_create(const dt_model_config *cfg, const dt_model_opts *o, dt_mem *mem,
                            dt_model **out) {
    (void)mem;
    *out = NULL;
    if ((o->tp && o->tp->size > 1) || (o->sp && o->sp->size > 1) ||
        o->precision != DT_PREC_FP32 || o->split_backward)
        return dt_err_set(DT_ERR_UNSUPPORTED, "toy: fp32 without tp, sp or split backward");
    toy *t = calloc(1, sizeof *t);
    dt_model *m = calloc(1, sizeof *m);
    if (!t || !m) {
        free(t);
        free(m);
        return dt_err_set(DT_ERR_OOM, "toy: out of memory");
    }
    *t = (toy){.cfg = *cfg, .U = cfg->n_layer + 2, .C = cfg->n_embd, .N = o->B * o->T,
               .n_slots = o->n_slots > 0 ? o->n_slots : 1, .tie_role = -1, .pp = o->pp};
    t->n_grads = o->n_grads > 0 ? o->n_grads : t->n_slots;
    dt_status st = make_tables(t, o->units);
    size_t acts = (size_t)t->n_slots * t->N * t->C;
    t->unit_w = calloc((size_t)t->U, sizeof *t->unit_w);
    t->unit_g = calloc((size_t)t->U, sizeof *t->unit_g);
    t->out = calloc(acts * t->U, sizeof *t->out);
    t->dloss = calloc(acts, sizeof *t->dloss);
    t->dres = calloc((size_t)t->n_grads * t->N * t->C, sizeof *t->dres);
    if (st == DT_OK && !o->external_weights)
        t->w = calloc((size_t)t->n_total, sizeof *t->w);
    if (st == DT_OK && o->training && !o->external_grads)
        t->g = calloc((size_t)t->n_total, sizeof *t->g);
    if (st == DT_OK)
        st = dt_comm_local_init("tp", &t->tp);
    if (st == DT_OK &&
        (!t->unit_w || !t->unit_g || !t->out || !t->dloss || !t->dres ||
         (!o->external_weights && !t->w) || (o->training && !o->external_grads && !t->g)))
        st = dt_err_set(DT_ERR_OOM, "toy: out of memory");
    if (st != DT_OK) {
        t_free(t);
        free(m);
        return st;
    }
    wire(t);
    *m = (dt_model){.ops = &toy_ops, .self = t};
    *out = m;
    return DT_OK;
}

/* The same toy with a tie, as the two end stages of a pipeline would report one: a_0 as the
 * original (first) and a_{U-1} as its copy (last). */
static dt_status toy_create_tied(const dt_model_config *cfg, const dt_model_opts *o, int role,
                                 dt_model **out) {
    DT_TRY(toy_create(cfg, o, NULL, out));
    ((toy *)(*out)->self)->tie_role = role;
    return DT_OK;
}
static dt_status toy_create_first(const dt_model_config *cfg, const dt_model_opts *o,
                                  dt_mem *mem, dt_model **out) {
    (void)mem;
    return toy_create_tied(cfg, o, 0, out);
}
static dt_status toy_create_last(const dt_model_config *cfg, const dt_model_opts *o,
                                 dt_mem *mem, dt_model **out) {
    (void)mem;
    return toy_create_tied(cfg, o, 1, out);
}

/* ---- the closed-form reference ------------------------------------------------------------ */

/* gradient of (1 / n_rows) * sum over all rows of 0.5 |h_U - y|^2 at weights w (full arena),
 * and the summed loss */
static void reference(int U, int C, int n_rows, const float *w, const float *x, const float *y,
                      double *grad, double *loss) {
    double *h = calloc((size_t)(U + 1) * C, sizeof *h), *d = calloc((size_t)C, sizeof *d);
    memset(grad, 0, (size_t)2 * U * C * sizeof *grad);
    *loss = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int c = 0; c < C; c++)
            h[c] = x[(size_t)r * C + c];
        for (int u = 0; u < U; u++)
            for (int c = 0; c < C; c++)
                h[(size_t)(u + 1) * C + c] = h[(size_t)u * C + c] * w[2 * u * C + c] +
                                             w[(2 * u + 1) * C + c];
        for (int c = 0; c < C; c++) {
            d[c] = h[(size_t)U * C + c] - y[(size_t)r * C + c];
            *loss += 0.5 * d[c] * d[c];
        }
        for (int u = U - 1; u >= 0; u--)
            for (int c = 0; c < C; c++) {
                grad[2 * u * C + c] += d[c] * h[(size_t)u * C + c] / n_rows;
                grad[(2 * u + 1) * C + c] += d[c] / n_rows;
                d[c] *= w[2 * u * C + c];
            }
    }
    free(h);
    free(d);
}

/* ---- one engine step against it ------------------------------------------------------------ */

enum { U = 5, C = 16, ROWS = 8 }; /* global batch of ROWS samples, T = 1 */

static void run_stage(dt_comm *w, int zero, int n_mb, const float *x, const float *y) {
    dt_model_config mc = {.n_layer = U - 2, .n_embd = C};
    dt_optim_config oc = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0.5f};
    int rows = ROWS / w->size, mb = rows / n_mb;
    dt_engine_opts eo = {.zero_stage = zero, .bucket_mb = 0.0003f, .overlap = true,
                         .precision = DT_PREC_FP32, .B = mb, .T = 1, .create = toy_create};
    dt_mem *mem = NULL;
    dt_engine *e = NULL;
    float *w0 = calloc(2 * U * C, sizeof *w0), *w1 = calloc(2 * U * C, sizeof *w1);
    float *m1 = calloc(2 * U * C, sizeof *m1), *v1 = calloc(2 * U * C, sizeof *v1);
    double grad[2 * U * C], loss_ref, loss = 0, part, norm, norm_ref = 0;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_engine_init(&mc, &oc, &eo, w, mem, &e));
    if (!e)
        goto done;
    DT_CHECK(dt_model_n_units(dt_engine_model(e)) == U, "zero %d: %d units", zero,
             dt_model_n_units(dt_engine_model(e)));
    DT_CHECK_OK(dt_engine_init_weights(e, 7));
    DT_CHECK_OK(dt_engine_gather_state(e, w0, NULL, NULL));
    DT_CHECK_OK(dt_engine_begin_step(e));
    for (int i = 0; i < n_mb; i++) {
        int row = w->rank * rows + i * mb;
        dt_batch b = {.input = x + (size_t)row * C, .target = y + (size_t)row * C, .B = mb,
                      .T = 1};
        DT_CHECK_OK(dt_engine_micro_batch(e, &b, 1.0f / ROWS, i == n_mb - 1, &part));
        loss += part;
    }
    DT_CHECK_OK(dt_engine_finish(e));
    DT_CHECK_OK(dt_engine_grad_norm(e, &norm));
    DT_CHECK_OK(dt_engine_apply(e, oc.lr, 1.0f));
    DT_CHECK_OK(dt_engine_gather_state(e, w1, m1, v1));
    DT_CHECK_OK(dt_comm_allreduce_f64(w, &loss, 1));
    reference(U, C, ROWS, w0, x, y, grad, &loss_ref);
    DT_CHECK_CLOSE(loss, loss_ref, 1e-5);
    double gmax = 0, gerr = 0, werr = 0;
    for (int i = 0; i < 2 * U * C; i++) {
        norm_ref += grad[i] * grad[i];
        gmax = fabs(grad[i]) > gmax ? fabs(grad[i]) : gmax;
        gerr = fmax(gerr, fabs(m1[i] / (1.0 - oc.beta1) - grad[i]));
        /* AdamW's first step: bias-corrected moments are g and g^2 */
        double want = w0[i] - oc.lr * grad[i] / (fabs(grad[i]) + oc.eps);
        werr = fmax(werr, fabs(w1[i] - want));
    }
    DT_CHECK_CLOSE(norm, sqrt(norm_ref), 1e-5);
    DT_CHECK(gmax > 1e-3 && gerr <= 1e-5 * gmax, "zero %d, %d micro-batches: gradient off by "
             "%g (largest %g)", zero, n_mb, gerr, gmax);
    DT_CHECK(werr <= 1e-6, "zero %d, %d micro-batches: updated weight off by %g", zero, n_mb,
             werr);
done:
    dt_engine_free(e);
    dt_mem_free(mem);
    free(w0);
    free(w1);
    free(m1);
    free(v1);
}

/* The tied sum: ranks pair up as a "first" and a "last" stage (the tied group), each role
 * replicated over a dp group that splits the global batch. After the step, both tied
 * tensors (a_0 on the first, a_{U-1} on the last) carry the sum of the two gradients, every
 * other gradient is the plain one, and the copy is left out of the last stage's norm. */
static void run_tied(dt_comm *w, int zero, const float *x, const float *y) {
    int role = w->rank % 2, n = 2 * U * C, ia = 0, ib = 2 * (U - 1) * C;
    dt_comm *dp = NULL, *tied = NULL;
    DT_CHECK_OK(dt_dist_split(w, role, w->rank / 2, "dp", &dp));
    DT_CHECK_OK(dt_dist_split(w, w->rank / 2, role, "tied", &tied));
    dt_model_config mc = {.n_layer = U - 2, .n_embd = C};
    dt_optim_config oc = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0.5f};
    int rows = ROWS / dp->size;
    dt_engine_opts eo = {.zero_stage = zero, .bucket_mb = 0.0003f, .overlap = true,
                         .precision = DT_PREC_FP32, .B = rows, .T = 1, .tied = tied,
                         .create = role ? toy_create_last : toy_create_first};
    dt_mem *mem = NULL;
    dt_engine *e = NULL;
    float *w0 = calloc(n, sizeof *w0), *m1 = calloc(n, sizeof *m1);
    double grad[2 * U * C], want[2 * U * C], loss, part, norm, norm_ref = 0, err = 0, gmax = 0;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_engine_init(&mc, &oc, &eo, dp, mem, &e));
    if (!e)
        goto done;
    DT_CHECK_OK(dt_engine_init_weights(e, 7));
    DT_CHECK_OK(dt_engine_gather_state(e, w0, NULL, NULL));
    DT_CHECK_OK(dt_engine_begin_step(e));
    dt_batch b = {.input = x + (size_t)dp->rank * rows * C,
                  .target = y + (size_t)dp->rank * rows * C, .B = rows, .T = 1};
    DT_CHECK_OK(dt_engine_micro_batch(e, &b, 1.0f / ROWS, true, &part));
    DT_CHECK_OK(dt_engine_finish(e));
    DT_CHECK_OK(dt_engine_grad_norm(e, &norm));
    DT_CHECK_OK(dt_engine_apply(e, oc.lr, 1.0f));
    DT_CHECK_OK(dt_engine_gather_state(e, NULL, m1, NULL));
    reference(U, C, ROWS, w0, x, y, grad, &loss);
    memcpy(want, grad, sizeof want);
    for (int c = 0; c < C; c++)
        want[(role ? ib : ia) + c] = grad[ia + c] + grad[ib + c];
    for (int i = 0; i < n; i++) {
        bool copy = role == 1 && i >= ib && i < ib + C;
        norm_ref += copy ? 0 : want[i] * want[i];
        gmax = fmax(gmax, fabs(want[i]));
        err = fmax(err, fabs(m1[i] / (1.0 - oc.beta1) - want[i]));
    }
    DT_CHECK_CLOSE(norm, sqrt(norm_ref), 1e-5);
    DT_CHECK(gmax > 1e-3 && err <= 1e-5 * gmax, "tied, zero %d, rank %d: gradient off by %g "
             "(largest %g)", zero, w->rank, err, gmax);
done:
    dt_engine_free(e);
    dt_mem_free(mem);
    dt_comm_free(tied);
    dt_comm_free(dp);
    free(w0);
    free(m1);
}

/* The pipeline executor on the toy: ranks pair up as pp 2 (1F1B, two micro-batches; the
 * stages exchange the toy's boundary tensors), each stage replicated over a dp group with
 * ZeRO `zero`; the whole model's gradient and update against the closed form. */
static void run_pipeline(dt_comm *w, int zero, const float *x, const float *y) {
    int n = 2 * U * C, n_mb = 2;
    dt_comm *pp = NULL, *dp = NULL;
    DT_CHECK_OK(dt_dist_split(w, w->rank / 2, w->rank % 2, "pp", &pp));
    DT_CHECK_OK(dt_dist_split(w, w->rank % 2, w->rank / 2, "dp", &dp));
    dt_model_config mc = {.n_layer = U - 2, .n_embd = C};
    dt_optim_config oc = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0.5f};
    int rows = ROWS / dp->size, mb = rows / n_mb;
    dt_stage_plan plan;
    dt_schedule *s = NULL;
    bool held[U];
    DT_CHECK_OK(dt_stage_plan_make(U - 2, 2, 1, NULL, &plan));
    DT_CHECK_OK(dt_sched_1f1b(2, n_mb, &s));
    dt_stage_plan_held(&plan, pp->rank, held);
    int n_slots = s ? dt_sched_slots(s, pp->rank) : 1,
        n_grads = s ? dt_sched_grads(s, pp->rank) : 1;
    dt_engine_opts eo = {.zero_stage = zero,
                         .bucket_mb = 0.0003f,
                         .overlap = true,
                         .precision = DT_PREC_FP32,
                         .B = mb,
                         .T = 1,
                         .units = held,
                         .n_slots = n_slots,
                         .n_grads = n_grads,
                         .pp = pp,
                         .create = toy_create};
    dt_mem *mem = NULL;
    dt_engine *e = NULL;
    dt_pipeline *pipe = NULL;
    float *w0 = calloc(n, sizeof *w0), *w1 = calloc(n, sizeof *w1), *m1 = calloc(n, sizeof *m1);
    double grad[2 * U * C], loss_ref, loss = 0, norm, norm_ref = 0, gmax = 0, gerr = 0, werr = 0;
    DT_CHECK_OK(dt_mem_init(&mem));
    if (s)
        DT_CHECK_OK(dt_engine_init(&mc, &oc, &eo, dp, mem, &e));
    if (e)
        DT_CHECK_OK(dt_pipeline_init(s, &plan, pp, NULL, dt_engine_model(e), n_slots, n_grads,
                                     dt_model_boundary_count(dt_engine_model(e), mb, 1), mem,
                                     &pipe));
    if (!pipe)
        goto done;
    DT_CHECK_OK(dt_engine_init_weights(e, 7));
    DT_CHECK_OK(dt_engine_gather_state(e, w0, NULL, NULL));
    DT_CHECK_OK(dt_engine_begin_step(e));
    size_t bytes = (size_t)mb * C * sizeof(float);
    dt_pipeline_batch pb = {.inputs = x + (size_t)dp->rank * rows * C,
                            .targets = y + (size_t)dp->rank * rows * C, .input_bytes = bytes,
                            .target_bytes = bytes, .B = mb, .T = 1, .grad_scale = 1.0f / ROWS};
    DT_CHECK_OK(dt_pipeline_run(pipe, &pb, NULL, 0, &loss));
    DT_CHECK_OK(dt_engine_finish(e));
    DT_CHECK_OK(dt_engine_grad_norm(e, &norm));
    DT_CHECK_OK(dt_engine_apply(e, oc.lr, 1.0f));
    DT_CHECK_OK(dt_engine_gather_state(e, w1, m1, NULL));
    DT_CHECK_OK(dt_comm_allreduce_f64(w, &loss, 1)); /* the last stage's, over dp */
    reference(U, C, ROWS, w0, x, y, grad, &loss_ref);
    DT_CHECK_CLOSE(loss, loss_ref, 1e-5);
    for (int i = 0; i < n; i++) {
        norm_ref += grad[i] * grad[i];
        gmax = fmax(gmax, fabs(grad[i]));
        gerr = fmax(gerr, fabs(m1[i] / (1.0 - oc.beta1) - grad[i]));
        werr = fmax(werr, fabs(w1[i] - (w0[i] - oc.lr * grad[i] / (fabs(grad[i]) + oc.eps))));
    }
    DT_CHECK_CLOSE(norm, sqrt(norm_ref), 1e-5);
    DT_CHECK(gmax > 1e-3 && gerr <= 1e-5 * gmax, "pp 2, zero %d: gradient off by %g "
             "(largest %g)", zero, gerr, gmax);
    DT_CHECK(werr <= 1e-6, "pp 2, zero %d: updated weight off by %g", zero, werr);
done:
    dt_pipeline_free(pipe);
    dt_engine_free(e);
    dt_mem_free(mem);
    dt_sched_free(s);
    dt_comm_free(dp);
    dt_comm_free(pp);
    free(w0);
    free(w1);
    free(m1);
}

/* the toy's own save and load: the same weights back */
static void round_trip(dt_comm *w) {
    dt_model_config mc = {.n_layer = U - 2, .n_embd = C};
    dt_model_opts o = {.B = 1, .T = 1};
    dt_model *m = NULL;
    DT_CHECK_OK(toy_create(&mc, &o, NULL, &m));
    if (!m)
        return;
    char path[64];
    snprintf(path, sizeof path, "/tmp/dtrain-toy-%d-%d.safetensors", (int)getpid(), w->rank);
    dt_model_init_weights(m, 3);
    float *back = calloc((size_t)dt_model_numel(m), sizeof *back);
    DT_CHECK_OK(dt_model_save(m, dt_model_weights(m), path));
    DT_CHECK_OK(dt_model_load(m, back, path));
    DT_CHECK(memcmp(back, dt_model_weights(m), (size_t)dt_model_numel(m) * sizeof *back) == 0,
             "toy: loaded weights differ from the saved ones");
    DT_CHECK(dt_model_weight_units(m, 0, 0, U, &(dt_batch){.B = 1, .T = 1}) ==
                 DT_ERR_UNSUPPORTED, "toy: a missing weight_units slot is not an error");
    remove(path);
    free(back);
    dt_model_free(m);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_comm *w = NULL;
    if (dt_dist_init(&argc, &argv, &w) != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    float x[ROWS * C], y[ROWS * C];
    dt_test_fill(x, ROWS * C, 11, 1.0f);
    dt_test_fill(y, ROWS * C, 12, 1.0f);
    for (int zero = 0; zero <= 3; zero++)
        for (int n_mb = 1; n_mb <= 2 && n_mb <= ROWS / w->size; n_mb++)
            run_stage(w, zero, n_mb, x, y);
    for (int zero = 0; w->size % 2 == 0 && zero <= 3; zero++) {
        run_tied(w, zero, x, y);
        run_pipeline(w, zero, x, y);
    }
    round_trip(w);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
