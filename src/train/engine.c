/* Data-parallel engine with ZeRO stages 0-3. See engine.h for the design.
 *
 * The engine installs itself as the model's unit hooks: enter() progresses outstanding
 * collectives and (stage 3) makes the unit's weights present, prefetching the next block;
 * leave() after a unit's backward starts that unit's (or bucket's) gradient reduction.
 */
#include "train/engine.h"
#include "train/engine_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cast.h"
#include "optim/adamw.h"
#include "plan/layout.h"

static int64_t overlap(int64_t a0, int64_t n0, int64_t a1, int64_t n1) {
    int64_t lo = a0 > a1 ? a0 : a1, hi = a0 + n0 < a1 + n1 ? a0 + n0 : a1 + n1;
    return hi > lo ? hi - lo : 0;
}

int *dt_engine__counts_of(dt_engine *e, int unit) { return e->counts + (size_t)unit * e->dp->size; }

static bool is_persistent(const dt_engine *e, int unit) {
    return unit == 0 || unit == e->n_units - 1;
}

static unit_buf *buf_of(dt_engine *e, int unit) {
    if (is_persistent(e, unit))
        return &e->pers[unit == 0 ? 0 : 1];
    return &e->slot[unit % N_SLOTS];
}

/* where this rank's part of `unit` starts inside its shard */
static int64_t piece_offset(const dt_engine *e, int unit) {
    int64_t a = e->ufirst[unit] > e->own_first ? e->ufirst[unit] : e->own_first;
    return a - e->own_first;
}

/* ---- stage 3: weights present just in time ------------------------------------------ */

static dt_status post_gather(dt_engine *e, unit_buf *b, int unit) {
    const int *c = dt_engine__counts_of(e, unit);
    b->wunit = unit;
    b->lp_ready = false;
    const float *send = e->w_shard + piece_offset(e, unit);
    return dt_comm_allgather_f32(e->dp, send, b->w, c, &b->wreq);
}

static dt_status ensure_weights(dt_engine *e, int unit) {
    unit_buf *b = buf_of(e, unit);
    if (b->wunit != unit) {
        DT_TRY(dt_comm_wait(e->dp, &b->wreq)); /* a prefetch of another unit */
        DT_TRY(post_gather(e, b, unit));
    }
    DT_TRY(dt_comm_wait(e->dp, &b->wreq));
    if (e->lp && !b->lp_ready) {
        dt_cast_f32_to_lp(e->mm, b->lp, b->w, e->ucount[unit]);
        b->lp_ready = true;
    }
    dt_model_bind_unit(e->model, unit, b->w, NULL, b->lp);
    return DT_OK;
}

static dt_status prefetch(dt_engine *e, int unit) {
    if (unit < 1 || unit > e->n_units - 2)
        return DT_OK; /* only blocks rotate; the others stay gathered */
    unit_buf *b = buf_of(e, unit);
    if (b->wunit == unit)
        return DT_OK;
    DT_TRY(dt_comm_wait(e->dp, &b->wreq));
    return post_gather(e, b, unit);
}

void dt_engine__invalidate_weights(dt_engine *e) {
    for (int i = 0; i < N_SLOTS; i++)
        e->slot[i].wunit = -1;
    e->pers[0].wunit = e->pers[1].wunit = -1;
}

/* ---- stages 2-3: gradients reduce-scattered unit by unit ------------------------------ */

static dt_status complete_reduction(dt_engine *e, unit_buf *b) {
    if (b->gunit < 0)
        return DT_OK;
    DT_TRY(dt_comm_wait(e->dp, &b->greq));
    int n = dt_engine__counts_of(e, b->gunit)[e->dp->rank];
    float *dst = e->g_shard + piece_offset(e, b->gunit);
    if (e->shard_fresh[b->gunit]) /* the step's first: g_shard is not zeroed */
        memcpy(dst, b->piece, (size_t)n * sizeof *dst);
    else
        dt_add_inplace(dst, b->piece, n);
    e->shard_fresh[b->gunit] = false;
    b->gunit = -1;
    return DT_OK;
}

static dt_status complete_all(dt_engine *e) {
    for (int i = 0; i < N_SLOTS; i++)
        DT_TRY(complete_reduction(e, &e->slot[i]));
    for (int i = 0; i < 2; i++)
        DT_TRY(complete_reduction(e, &e->pers[i]));
    for (int k = 0; k < e->n_buckets; k++)
        DT_TRY(dt_comm_wait(e->dp, &e->bucket_req[k]));
    return DT_OK;
}

static dt_status progress(dt_engine *e) {
    bool done;
    for (int k = 0; k < e->n_buckets; k++)
        DT_TRY(dt_comm_test(e->dp, &e->bucket_req[k], &done));
    for (int i = 0; i < N_SLOTS; i++) {
        DT_TRY(dt_comm_test(e->dp, &e->slot[i].greq, &done));
        DT_TRY(dt_comm_test(e->dp, &e->slot[i].wreq, &done));
    }
    return DT_OK;
}

/* ---- hooks ------------------------------------------------------------------------------ */

/* A unit's gradient storage g starts afresh (a new step, or a buffer just bound to it): the
 * model overwrites it on first write where it can, so nothing zeroes it; else it is zeroed. */
static void fresh_unit(dt_engine *e, int unit, float *g) {
    if (!dt_model_fresh_grads(e->model, unit))
        dt_zero_f32(g, e->ucount[unit]);
}

/* The memory timeline's phase follows the model's, except inside an evaluation. */
static void set_mem_phase(dt_engine *e, dt_model_phase phase) {
    static const dt_mem_phase of[DT_PHASE_COUNT] = {[DT_PHASE_FORWARD] = DT_MEM_PHASE_FORWARD,
                                                    [DT_PHASE_HEAD] = DT_MEM_PHASE_HEAD,
                                                    [DT_PHASE_BACKWARD] = DT_MEM_PHASE_BACKWARD,
                                                    [DT_PHASE_WEIGHTS] = DT_MEM_PHASE_WEIGHTS};
    if (dt_mem_phase_now(e->mem) != DT_MEM_PHASE_EVAL)
        dt_mem_set_phase(e->mem, of[phase]);
}

static dt_status on_enter(void *ctx, int unit, dt_model_phase phase) {
    dt_engine *e = ctx;
    set_mem_phase(e, phase);
    DT_TRY(progress(e));
    if (e->zero == 3) {
        DT_TRY(ensure_weights(e, unit));
        if (phase == DT_PHASE_FORWARD)
            DT_TRY(prefetch(e, unit + 1));
        else if (phase == DT_PHASE_BACKWARD)
            DT_TRY(prefetch(e, unit - 1));
    }
    if (phase == DT_PHASE_BACKWARD && e->home[unit] == DT_GRAD_ROTATING) {
        unit_buf *b = buf_of(e, unit);
        DT_TRY(complete_reduction(e, b)); /* the buffer's previous unit */
        dt_model_bind_unit(e->model, unit, NULL, b->g, NULL);
        fresh_unit(e, unit, b->g);
    }
    e->t_unit = dt_now(); /* what the hooks wait for is not the unit's compute */
    return DT_OK;
}

static void count_unit_time(dt_engine *e, int unit, dt_model_phase phase) {
    if (dt_mem_phase_now(e->mem) == DT_MEM_PHASE_EVAL)
        return;
    double t = dt_now() - e->t_unit;
    if (phase == DT_PHASE_HEAD)
        e->head_busy += t;
    else
        e->busy[unit] += t;
}

static dt_status on_leave(void *ctx, int unit, dt_model_phase phase) {
    dt_engine *e = ctx;
    count_unit_time(e, unit, phase);
    if (phase != DT_PHASE_BACKWARD || !e->comm_now)
        return DT_OK;
    switch (e->home[unit]) {
    case DT_GRAD_ARENA: {
        int k = e->bucket_of_unit[unit];
        if (k < 0 || !e->overlap)
            return DT_OK;
        return dt_comm_allreduce_f32(e->dp, e->g_full + e->bucket_first[k], e->bucket_count[k],
                                     &e->bucket_req[k]);
    }
    case DT_GRAD_ROTATING:
    case DT_GRAD_PINNED: {
        unit_buf *b = buf_of(e, unit);
        b->gunit = unit;
        DT_TRY(dt_comm_reduce_scatter_f32(e->dp, b->g, b->piece, dt_engine__counts_of(e, unit),
                                          &b->greq));
        return e->overlap ? DT_OK : complete_reduction(e, b);
    }
    default: /* accumulates over the step's micro-batches; reduced in finish */
        return DT_OK;
    }
}

/* ---- set-up ----------------------------------------------------------------------------- */

dt_status dt_engine__alloc(dt_engine *e, dt_mem_cat cat, const char *name, size_t bytes,
                           void *out) {
    return dt_mem_alloc(e->mem, cat, name, bytes, (void **)out);
}

static dt_status plan_units(dt_engine *e, double bucket_bytes, bool split) {
    int P = e->dp->size, U = e->n_units;
    e->counts = calloc((size_t)(U + 1) * P, sizeof *e->counts);
    e->ufirst = calloc((size_t)U, sizeof *e->ufirst);
    e->ucount = calloc((size_t)U, sizeof *e->ucount);
    e->bucket_of_unit = malloc((size_t)U * sizeof *e->bucket_of_unit);
    e->bucket_first = calloc((size_t)U, sizeof *e->bucket_first);
    e->bucket_count = calloc((size_t)U, sizeof *e->bucket_count);
    e->bucket_req = calloc((size_t)U, sizeof *e->bucket_req);
    e->shard_fresh = calloc((size_t)U, sizeof *e->shard_fresh);
    e->home = calloc((size_t)U, sizeof *e->home);
    if (!e->counts || !e->ufirst || !e->ucount || !e->bucket_of_unit || !e->bucket_first ||
        !e->bucket_count || !e->bucket_req || !e->shard_fresh || !e->home)
        return dt_err_set(DT_ERR_OOM, "engine: out of memory");
    for (int u = 0; u < U; u++) {
        e->home[u] = dt_grad_home_of(e->zero, split, e->pipelined, u, U);
        dt_model_unit_range(e->model, u, &e->ufirst[u], &e->ucount[u]);
        for (int r = 0; r < P; r++)
            dt_engine__counts_of(e, u)[r] =
                (int)overlap(e->ufirst[u], e->ucount[u], (int64_t)r * e->S, e->S);
    }
    for (int r = 0; r < P; r++)
        dt_engine__counts_of(e, U)[r] = (int)overlap(0, e->n_total, (int64_t)r * e->S, e->S);
    if (e->zero >= 2)
        return DT_OK;
    e->n_buckets = dt_grad_buckets(e->ucount, U, bucket_bytes, e->bucket_of_unit);
    for (int u = U - 1, hi = U - 1; u >= 0; u--) {
        int k = e->bucket_of_unit[u];
        if (k < 0)
            continue;
        e->bucket_first[k] = e->ufirst[u];
        e->bucket_count[k] = e->ufirst[hi] + e->ucount[hi] - e->ufirst[u];
        hi = u - 1;
    }
    return DT_OK;
}

/* Unit buffers are the landing and sending buffers of the gathers and reduce-scatters, so
 * they are accounted as communication memory; the sharded state is params/grads/optim. */
static dt_status alloc_unit_buf(dt_engine *e, unit_buf *b, int64_t n, const char *what) {
    b->wunit = b->gunit = -1;
    char name[64];
    if (e->zero == 3) {
        snprintf(name, sizeof name, "zero3.%s.weights", what);
        DT_TRY(dt_engine__alloc(e, DT_MEM_COMM, name, (size_t)n * sizeof(float), &b->w));
        if (e->lp) {
            snprintf(name, sizeof name, "zero3.%s.%s", what, dt_dtype_name(e->mm));
            DT_TRY(dt_engine__alloc(e, DT_MEM_COMM, name, (size_t)n * sizeof(dt_bf16), &b->lp));
        }
    }
    if (e->g_whole) /* gradients accumulate in the whole arena: no unit gradient buffers */
        return DT_OK;
    snprintf(name, sizeof name, "zero.%s.grads", what);
    DT_TRY(dt_engine__alloc(e, DT_MEM_COMM, name, (size_t)n * sizeof(float), &b->g));
    int64_t piece = n < e->S ? n : e->S;
    snprintf(name, sizeof name, "zero.%s.reduced", what);
    return dt_engine__alloc(e, DT_MEM_COMM, name, (size_t)piece * sizeof(float), &b->piece);
}

static dt_status setup_storage(dt_engine *e, bool split) {
    int L1 = e->n_units - 1;
    e->w_full = dt_model_weights(e->model);
    e->g_full = dt_model_grads(e->model);
    e->lp_full = dt_model_weights_lp(e->model);
    if (e->zero == 3)
        DT_TRY(dt_engine__alloc(e, DT_MEM_PARAMS, "zero3.weight_shard",
                                (size_t)e->S * sizeof(float), &e->w_shard));
    if (e->zero >= 2)
        DT_TRY(dt_engine__alloc(e, DT_MEM_GRADS, "zero.grad_shard", (size_t)e->S * sizeof(float),
                                &e->g_shard));
    if (e->zero < 2)
        return DT_OK;
    if (split) {
        DT_TRY(dt_engine__alloc(e, DT_MEM_GRADS, "zero.grads_whole",
                                (size_t)e->n_total * sizeof(float), &e->g_whole));
        for (int u = 0; u < e->n_units; u++)
            dt_model_bind_unit(e->model, u, NULL, e->g_whole + e->ufirst[u], NULL);
    }
    int64_t widest = 16;
    for (int u = 1; u < L1; u++)
        widest = e->ucount[u] > widest ? e->ucount[u] : widest;
    for (int i = 0; i < N_SLOTS; i++)
        DT_TRY(alloc_unit_buf(e, &e->slot[i], widest, i ? "block_b" : "block_a"));
    DT_TRY(alloc_unit_buf(e, &e->pers[0], e->ucount[0], "first"));
    dt_model_bind_unit(e->model, 0, NULL, e->pers[0].g, NULL); /* NULL g: stays as bound */
    if (L1 > 0) { /* else a stage of one unit: it is both first and last */
        DT_TRY(alloc_unit_buf(e, &e->pers[1], e->ucount[L1], "last"));
        dt_model_bind_unit(e->model, L1, NULL, e->pers[1].g, NULL);
    }
    return DT_OK;
}

dt_status dt_engine_init(const dt_model_config *mc, const dt_optim_config *oc,
                         const dt_engine_opts *o, dt_comm *dp, dt_mem *mem, dt_engine **out) {
    *out = NULL;
    dt_status st;
    dt_engine *e = calloc(1, sizeof *e);
    if (!e)
        return dt_err_set(DT_ERR_OOM, "engine: out of memory");
    e->dp = dp;
    e->pp = o->pp;
    e->tied = o->tied;
    e->pipelined = o->pp && o->pp->size > 1;
    e->mem = mem;
    e->zero = o->zero_stage;
    e->overlap = o->overlap;
    for (int i = 0; i < N_SLOTS; i++)
        e->slot[i].wunit = e->slot[i].gunit = -1;
    for (int i = 0; i < 2; i++)
        e->pers[i].wunit = e->pers[i].gunit = -1;
    e->mm = dt_precision_mm_type(o->precision);
    e->lp = e->mm != DT_F32;
    char act_tag[32];
    snprintf(act_tag, sizeof act_tag, "r%d", o->world_rank);
    dt_model_opts go = {.B = o->B,
                        .T = o->T,
                        .shapes = o->shapes,
                        .n_shapes = o->n_shapes,
                        .precision = o->precision,
                        .training = true,
                        .external_weights = e->zero == 3,
                        .external_grads = e->zero >= 2,
                        .tp = o->tp,
                        .sp = o->sp,
                        .sequence_tp = o->sequence_tp,
                        .cp = o->cp,
                        .cp_zigzag = o->cp_zigzag,
                        .units = o->units,
                        .n_slots = o->n_slots,
                        .n_grads = o->n_grads,
                        .pp = o->pp,
                        .split_backward = o->split_backward,
                        .ac = o->ac,
                        .ac_every = o->ac_every,
                        .act_compress = o->act_compress,
                        .act_offload = o->act_offload,
                        .act_offload_dir = o->act_offload_dir,
                        .act_offload_tag = act_tag,
                        .doc_mask = o->doc_mask};
    DT_TRY_GOTO((o->create ? o->create : dt_model_create)(mc, &go, mem, &e->model));
    e->n_units = dt_model_n_units(e->model);
    e->busy = calloc((size_t)e->n_units, sizeof *e->busy);
    e->global = calloc((size_t)e->n_units, sizeof *e->global);
    if (!e->busy || !e->global) {
        st = dt_err_set(DT_ERR_OOM, "engine: out of memory");
        goto fail;
    }
    for (int g = 0, u = 0; u < e->n_units; g++)
        if (!o->units || o->units[g])
            e->global[u++] = g;
    e->n_total = dt_model_numel(e->model);
    int64_t per_rank = (e->n_total + dp->size - 1) / dp->size;
    e->S = (per_rank + 15) / 16 * 16;
    e->own_first = (int64_t)dp->rank * e->S;
    e->own_count = overlap(0, e->n_total, e->own_first, e->S);
    DT_TRY_GOTO(plan_units(e, (double)o->bucket_mb * 1048576.0, o->split_backward));
    DT_TRY_GOTO(setup_storage(e, o->split_backward));
    int64_t first = e->zero == 0 ? 0 : e->own_first;
    int64_t count = e->zero == 0 ? e->n_total : e->own_count;
    const dt_param *params = dt_model_param(e->model, 0);
    int n_params = dt_model_n_params(e->model);
    if (o->offload == DT_OFFLOAD_DISK) {
        char tag[32];
        snprintf(tag, sizeof tag, "r%d", o->world_rank);
        dt_offload_opts off = {.dir = o->offload_dir,
                               .tag = tag,
                               .window_bytes = (double)o->offload_window_mb * 1048576.0};
        st = dt_adamw_init_offload(oc, params, n_params, first, count, &off, mem, &e->opt);
        if (st != DT_OK) {
            dt_err_wrap(st, "plugin.offload=disk: ");
            goto fail;
        }
    } else {
        DT_TRY_GOTO(dt_adamw_init(oc, params, n_params, first, count, mem, &e->opt));
    }
    if (o->ema_decay > 0) {
        DT_TRY_GOTO(
            dt_engine__alloc(e, DT_MEM_OPTIM, "ema", (size_t)count * sizeof(float), &e->ema));
        e->ema_decay = o->ema_decay;
        e->ema_fresh = true;
    }
    dt_model_hooks h = {.ctx = e, .enter = on_enter, .leave = on_leave};
    dt_model_set_hooks(e->model, &h);
    *out = e;
    return DT_OK;
fail:
    dt_engine_free(e);
    return st;
}

static void free_unit_buf(dt_engine *e, unit_buf *b) {
    dt_mem_release(e->mem, b->piece);
    dt_mem_release(e->mem, b->g);
    dt_mem_release(e->mem, b->lp);
    dt_mem_release(e->mem, b->w);
}

void dt_engine_free(dt_engine *e) {
    if (!e)
        return;
    if (e->bucket_req) /* never leave a request pending behind freed buffers */
        complete_all(e);
    for (int i = 0; i < N_SLOTS; i++)
        free_unit_buf(e, &e->slot[i]);
    for (int i = 0; i < 2; i++)
        free_unit_buf(e, &e->pers[i]);
    dt_adamw_free(e->opt);
    free(e->busy);
    free(e->global);
    dt_mem_release(e->mem, e->ema);
    dt_mem_release(e->mem, e->g_whole);
    dt_mem_release(e->mem, e->g_shard);
    dt_mem_release(e->mem, e->w_shard);
    dt_model_free(e->model);
    free(e->counts);
    free(e->ufirst);
    free(e->ucount);
    free(e->bucket_of_unit);
    free(e->bucket_first);
    free(e->bucket_count);
    free(e->bucket_req);
    free(e->shard_fresh);
    free(e->home);
    free(e);
}

dt_model *dt_engine_model(dt_engine *e) { return e->model; }

/* ---- weights ---------------------------------------------------------------------------- */

dt_status dt_engine_init_weights(dt_engine *e, uint64_t seed) {
    if (e->zero == 3) { /* each rank makes only its shard: Philox needs no neighbours */
        dt_param_init_range(dt_model_param(e->model, 0), dt_model_n_params(e->model), seed,
                            e->own_first, e->own_count, e->w_shard);
        dt_engine__invalidate_weights(e);
    } else {
        dt_model_init_weights(e->model, seed);
    }
    return DT_OK;
}

/* ---- a step ----------------------------------------------------------------------------- */

static int n_persistent(const dt_engine *e) { return e->n_units > 1 ? 2 : 1; }

static int persistent_unit(const dt_engine *e, int i) { return i == 0 ? 0 : e->n_units - 1; }

/* Nothing is zeroed per step: every gradient buffer starts afresh (fresh_unit), and each
 * unit's first reduced piece is copied into g_shard (complete_reduction) or the whole arena
 * reduce-scattered over it (finish). g_shard's tail past own_count stays as allocated. */
dt_status dt_engine_begin_step(dt_engine *e) {
    if (e->zero >= 2) {
        for (int u = 0; u < e->n_units; u++)
            e->shard_fresh[u] = true;
        if (e->g_whole && !dt_model_fresh_grads(e->model, -1))
            dt_zero_f32(e->g_whole, e->n_total);
        for (int i = 0; i < n_persistent(e); i++) {
            int u = persistent_unit(e, i);
            if (e->home[u] == DT_GRAD_PINNED_STEP)
                fresh_unit(e, u, e->pers[i].g);
        }
    } else if (!dt_model_fresh_grads(e->model, -1)) {
        dt_model_zero_grad(e->model);
    }
    /* pipelined ZeRO 0/1 reduce in finish: the last micro-batch is not a unit-order event */
    e->comm_now = e->zero >= 2 || !e->pipelined;
    return DT_OK;
}

dt_status dt_engine_micro_batch(dt_engine *e, const dt_batch *b, float grad_scale, bool last,
                                double *loss_sum) {
    e->comm_now = e->zero >= 2 || last;
    if (e->zero >= 2) {
        DT_TRY(complete_all(e)); /* the persistent units' buffers are reused below */
        for (int i = 0; i < n_persistent(e); i++) {
            int u = persistent_unit(e, i);
            if (e->home[u] == DT_GRAD_PINNED)
                fresh_unit(e, u, e->pers[i].g);
        }
    }
    DT_TRY(dt_model_forward(e->model, b));
    DT_TRY(dt_model_loss(e->model, b, grad_scale, true, loss_sum));
    return dt_model_backward(e->model, b);
}

/* A tensor the first and last stage both hold (dt_model_tie: GPT-2's embedding on the first,
 * the head's copy of it on the last) is one tensor; each stage has its own gradient of it,
 * reduced over dp. Both get the sum, so both copies take the same AdamW update and stay
 * bit-identical. */
static dt_status sum_tied_gradient(dt_engine *e, const dt_param *p) {
    if (e->zero < 2)
        return dt_comm_allreduce_f32(e->tied, e->g_full + p->offset, p->numel, NULL);
    int P = e->dp->size, *counts = calloc((size_t)P, sizeof *counts);
    float *full = NULL;
    dt_status st = counts
                       ? dt_engine__alloc(e, DT_MEM_TEMP, "tied.grad", (size_t)p->numel * 4, &full)
                       : dt_err_set(DT_ERR_OOM, "engine: out of memory");
    for (int r = 0; st == DT_OK && r < P; r++)
        counts[r] = (int)overlap(p->offset, p->numel, (int64_t)r * e->S, e->S);
    int64_t own_at = p->offset > e->own_first ? p->offset : e->own_first;
    float *own = e->g_shard + (own_at - e->own_first);
    if (st == DT_OK)
        st = dt_comm_allgather_f32(e->dp, own, full, counts, NULL);
    if (st == DT_OK)
        st = dt_comm_allreduce_f32(e->tied, full, p->numel, NULL);
    if (st == DT_OK)
        memcpy(own, full + (own_at - p->offset), (size_t)counts[e->dp->rank] * sizeof *own);
    dt_mem_release(e->mem, full);
    free(counts);
    return st;
}

static dt_status sum_tied_gradients(dt_engine *e) {
    if (!e->tied || e->tied->size < 2)
        return DT_OK;
    dt_model_tie t[DT_MODEL_MAX_TIES];
    for (int k = 0, n = dt_model_ties(e->model, t); k < n; k++)
        DT_TRY(sum_tied_gradient(e, dt_model_param(e->model, t[k].param)));
    return DT_OK;
}

dt_status dt_engine_finish(dt_engine *e) {
    /* ZeRO 0/1 reduce here, not during backward: under pp, or as the no-overlap baseline on
     * the step's last micro-batch */
    bool reduce_here = e->pipelined || (!e->overlap && e->comm_now);
    if (e->zero < 2 && reduce_here)
        for (int k = 0; k < e->n_buckets; k++)
            DT_TRY(dt_comm_allreduce_f32(e->dp, e->g_full + e->bucket_first[k], e->bucket_count[k],
                                         NULL));
    if (e->g_whole) /* this rank's part of the whole arena lands at g_shard[0] */
        DT_TRY(dt_comm_reduce_scatter_f32(e->dp, e->g_whole, e->g_shard,
                                          dt_engine__counts_of(e, e->n_units), NULL));
    for (int i = 0; e->zero >= 2 && i < n_persistent(e); i++) {
        unit_buf *b = &e->pers[i];
        int u = persistent_unit(e, i);
        if (e->home[u] != DT_GRAD_PINNED_STEP)
            continue;
        b->gunit = u;
        DT_TRY(dt_comm_reduce_scatter_f32(e->dp, b->g, b->piece, dt_engine__counts_of(e, u),
                                          &b->greq));
        DT_TRY(complete_reduction(e, b));
    }
    DT_TRY(complete_all(e));
    return sum_tied_gradients(e);
}

/* Sum of squares of arena elements [first, first + count) held in g[0 ..): tensors split
 * over tp count on every tp rank, replicated ones only on tp rank 0, and tied copies not at
 * all (the other stage's original counts), so the tp and pp sums count each element of the
 * full model once. */
static double sumsq_counted_once(const dt_engine *e, const float *g, int64_t first, int64_t count) {
    dt_comm *tp = dt_model_tp(e->model);
    double s = 0;
    for (int i = 0; i < dt_model_n_params(e->model); i++) {
        const dt_param *p = dt_model_param(e->model, i);
        if ((p->shard.kind == DT_SHARD_NONE && tp->rank != 0) || dt_model_is_copy(e->model, i))
            continue;
        int64_t n = overlap(p->offset, p->numel, first, count);
        if (n > 0) {
            int64_t a = p->offset > first ? p->offset : first;
            s += dt_sumsq(g + (a - first), n);
        }
    }
    return s;
}

dt_status dt_engine_grad_norm(dt_engine *e, double *norm) {
    double s;
    if (e->zero < 2) { /* every rank of the gradient group holds the same reduced gradient */
        s = sumsq_counted_once(e, e->g_full, 0, e->n_total);
    } else {
        s = sumsq_counted_once(e, e->g_shard, e->own_first, e->own_count);
        DT_TRY(dt_comm_allreduce_f64(e->dp, &s, 1));
    }
    DT_TRY(dt_comm_allreduce_f64(dt_model_tp(e->model), &s, 1));
    if (e->pp)
        DT_TRY(dt_comm_allreduce_f64(e->pp, &s, 1));
    *norm = sqrt(s);
    return DT_OK;
}

/* The fp32 weights the optimizer updates: its range of the arena */
float *dt_engine__updated_weights(dt_engine *e) {
    return e->zero == 0 ? e->w_full : e->zero == 3 ? e->w_shard : e->w_full + e->own_first;
}

int64_t dt_engine__updated_count(const dt_engine *e) {
    return e->zero == 0 ? e->n_total : e->own_count;
}

/* ema = decay ema + (1 - decay) w after an update (the first one's weights before it start it) */
static void ema_update(dt_engine *e, bool before) {
    if (!e->ema)
        return;
    const float *w = dt_engine__updated_weights(e);
    int64_t n = dt_engine__updated_count(e);
    if (before) {
        if (e->ema_fresh)
            memcpy(e->ema, w, (size_t)n * sizeof *w);
        e->ema_fresh = false;
        return;
    }
    const float d = e->ema_decay, k = 1.0f - e->ema_decay;
    float *ema = e->ema;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        ema[i] = d * ema[i] + k * w[i];
}

static dt_status apply_update(dt_engine *e, float lr, float grad_scale);

dt_status dt_engine_apply(dt_engine *e, float lr, float grad_scale) {
    ema_update(e, true);
    DT_TRY(apply_update(e, lr, grad_scale));
    ema_update(e, false);
    return DT_OK;
}

static dt_status apply_update(dt_engine *e, float lr, float grad_scale) {
    switch (e->zero) {
    case 0: /* the fused update writes the 16-bit copy of what it updates, where the model
             * keeps one; a model that casts unit by unit is told its casts are stale */
        if (e->mm == DT_F16)
            DT_TRY(dt_adamw_step_f16(e->opt, e->w_full, e->g_full, e->lp_full, lr, grad_scale));
        else
            DT_TRY(dt_adamw_step(e->opt, e->w_full, e->g_full, e->lp_full, lr, grad_scale));
        if (e->lp && !e->lp_full)
            dt_model_sync_lp(e->model);
        return DT_OK;
    case 3:
        dt_engine__invalidate_weights(e);
        return dt_adamw_step(e->opt, e->w_shard, e->g_shard, NULL, lr, grad_scale);
    default: {
        const float *g = e->zero == 1 ? e->g_full + e->own_first : e->g_shard;
        DT_TRY(dt_adamw_step(e->opt, e->w_full + e->own_first, g, NULL, lr, grad_scale));
        DT_TRY(dt_comm_allgather_f32(e->dp, e->w_full + e->own_first, e->w_full,
                                     dt_engine__counts_of(e, e->n_units), NULL));
        dt_model_sync_lp(e->model);
        return DT_OK;
    }
    }
}

dt_status dt_engine_eval(dt_engine *e, const dt_batch *b, double *loss_sum) {
    dt_model_begin_eval(e->model);
    DT_TRY(dt_model_forward(e->model, b));
    DT_TRY(dt_model_loss(e->model, b, 0.0f, false, loss_sum));
    dt_model_drop_saved(e->model);
    return DT_OK;
}
