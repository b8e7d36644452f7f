/* The engine's whole-arena state: full-arena copies of weights, moments and the weights'
 * average for checkpoints and layout moves, and the views sharded checkpoints read and write
 * through. See engine.h.
 */
#include <stdint.h>
#include <string.h>

#include "optim/adamw.h"
#include "train/engine.h"
#include "train/engine_impl.h"

static dt_status gather_range(dt_engine *e, const float *own, float *full) {
    return dt_comm_allgather_f32(e->dp, own, full, dt_engine__counts_of(e, e->n_units), NULL);
}

static dt_status gather_local(dt_engine *e, const float *own_or_full, bool sharded, float *local) {
    if (!sharded) {
        memcpy(local, own_or_full, (size_t)e->n_total * sizeof(float));
        return DT_OK;
    }
    return gather_range(e, own_or_full, local);
}

/* One tensor kind: this rank's part -> local arena (dp gather) -> full arena (tp gather). */
static dt_status gather_one(dt_engine *e, const float *src, bool sharded, float *local,
                            float *full) {
    DT_TRY(gather_local(e, src, sharded, local));
    return dt_model_gather_full(e->model, local, full);
}

/* One moment (v: the second): in memory it is gathered as it is; offloaded it is first read
 * from the file, straight into the local arena under ZeRO 0, else into a temporary of this
 * rank's shard ("state.offload", own_count floats). The collectives run even after a failed
 * read, so no peer waits; the caller's agreement then fails every rank with the read's error. */
static dt_status gather_moment(dt_engine *e, bool v, float *local, float *full) {
    float *mine = v ? dt_adamw_v(e->opt) : dt_adamw_m(e->opt), *tmp = NULL;
    if (mine)
        return gather_one(e, mine, e->zero > 0, local, full);
    if (e->zero == 0) {
        dt_status read = dt_adamw_get_moments(e->opt, v ? NULL : local, v ? local : NULL);
        dt_status st = dt_model_gather_full(e->model, local, full);
        return read != DT_OK ? read : st;
    }
    DT_TRY(dt_engine__alloc(e, DT_MEM_TEMP, "state.offload", (size_t)e->own_count * sizeof(float),
                            &tmp));
    dt_status read = dt_adamw_get_moments(e->opt, v ? NULL : tmp, v ? tmp : NULL);
    dt_status st = gather_one(e, tmp, true, local, full);
    dt_mem_release(e->mem, tmp);
    return read != DT_OK ? read : st;
}

dt_status dt_engine_gather_state(dt_engine *e, float *w, float *m, float *v) {
    float *local = NULL;
    DT_TRY(dt_engine__alloc(e, DT_MEM_TEMP, "state.local", (size_t)e->n_total * sizeof(float),
                            &local));
    dt_status st = DT_OK;
    if (w)
        st = gather_one(e, e->zero < 3 ? e->w_full : e->w_shard, e->zero == 3, local, w);
    /* both moments' collectives run even when reading the first from its file failed */
    dt_status sm = DT_OK, sv = DT_OK;
    if (st == DT_OK && m)
        sm = gather_moment(e, false, local, m);
    if (st == DT_OK && v)
        sv = gather_moment(e, true, local, v);
    dt_mem_release(e->mem, local);
    return st != DT_OK ? st : sm != DT_OK ? sm : sv;
}

bool dt_engine_has_ema(const dt_engine *e) { return e->ema != NULL; }

dt_status dt_engine_gather_ema(dt_engine *e, float *full) {
    if (!e->ema)
        return dt_err_set(DT_ERR_ARG, "engine: the run keeps no weight average (train.ema_decay)");
    float *local = NULL;
    DT_TRY(dt_engine__alloc(e, DT_MEM_TEMP, "state.local", (size_t)e->n_total * sizeof(float),
                            &local));
    /* before the first update the average is the weights themselves */
    const float *src = e->ema_fresh ? dt_engine__updated_weights(e) : e->ema;
    dt_status st = gather_one(e, src, e->zero > 0, local, full);
    dt_mem_release(e->mem, local);
    return st;
}

dt_status dt_engine_scatter_state(dt_engine *e, const float *w, const float *m, const float *v) {
    float *local = NULL;
    DT_TRY(dt_engine__alloc(e, DT_MEM_TEMP, "state.local", (size_t)e->n_total * sizeof(float),
                            &local));
    size_t own = (size_t)e->own_count * sizeof(float), all = (size_t)e->n_total * sizeof(float);
    if (w) {
        dt_model_take_shard(e->model, w, local);
        if (e->zero < 3) {
            memcpy(e->w_full, local, all);
            dt_model_sync_lp(e->model);
        } else {
            memcpy(e->w_shard, local + e->own_first, own);
            dt_engine__invalidate_weights(e);
        }
    }
    int64_t first = e->zero == 0 ? 0 : e->own_first;
    dt_status st = DT_OK;
    if (m) {
        dt_model_take_shard(e->model, m, local);
        st = dt_adamw_set_moments(e->opt, local + first, NULL);
    }
    if (st == DT_OK && v) {
        dt_model_take_shard(e->model, v, local);
        st = dt_adamw_set_moments(e->opt, NULL, local + first);
    }
    dt_mem_release(e->mem, local);
    return st;
}

dt_status dt_engine_scatter_ema(dt_engine *e, const float *full) {
    if (!e->ema)
        return dt_err_set(DT_ERR_ARG, "engine: the run keeps no weight average (train.ema_decay)");
    float *local = NULL;
    DT_TRY(dt_engine__alloc(e, DT_MEM_TEMP, "state.local", (size_t)e->n_total * sizeof(float),
                            &local));
    dt_model_take_shard(e->model, full, local);
    memcpy(e->ema, local + (e->zero == 0 ? 0 : e->own_first),
           (size_t)dt_engine__updated_count(e) * sizeof(float));
    e->ema_fresh = false;
    dt_mem_release(e->mem, local);
    return DT_OK;
}

dt_status dt_engine_view_begin(dt_engine *e, bool load, dt_engine_view *out) {
    memset(out, 0, sizeof *out);
    bool whole_w = load && e->zero < 3, whole_m = load && e->zero == 0;
    out->engine = e;
    out->w_first = whole_w ? 0 : e->own_first;
    out->w_count = whole_w ? e->n_total : e->own_count;
    out->w = e->zero < 3 ? e->w_full + out->w_first : e->w_shard;
    out->m_first = whole_m ? 0 : e->own_first;
    out->m_count = whole_m ? e->n_total : e->own_count;
    int64_t opt_first = e->zero == 0 ? 0 : e->own_first; /* where the optimizer's range starts */
    float *m = dt_adamw_m(e->opt), *v = dt_adamw_v(e->opt);
    if (m) { /* offloaded: both stay NULL */
        out->m = m + (out->m_first - opt_first);
        out->v = v + (out->m_first - opt_first);
    }
    if (e->ema) { /* before the first update the average is the weights themselves */
        if (e->ema_fresh && !load)
            memcpy(e->ema, dt_engine__updated_weights(e),
                   (size_t)dt_engine__updated_count(e) * sizeof(float));
        out->ema = e->ema + (out->m_first - opt_first);
    }
    return DT_OK;
}

static dt_status view_moment(const dt_engine_view *v, int which, int64_t first, int64_t n,
                             float *buf, bool write) {
    dt_engine *e = v->engine;
    if (!e || first < v->m_first || n < 0 || first + n > v->m_first + v->m_count)
        return dt_err_set(DT_ERR_ARG, "%s: elements [%lld, +%lld) outside the view", __func__,
                          (long long)first, (long long)n);
    int64_t at = first - (e->zero == 0 ? 0 : e->own_first); /* in the optimizer's range */
    if (which == 2) { /* the weights' average lives in memory */
        if (!e->ema)
            return dt_err_set(DT_ERR_ARG, "%s: the run keeps no weight average", __func__);
        if (write)
            e->ema_fresh = false;
        /* memmove: a loader may hand back the average's own memory */
        memmove(write ? e->ema + at : buf, write ? buf : e->ema + at, (size_t)n * sizeof *buf);
        return DT_OK;
    }
    return write ? dt_adamw_write_moment(e->opt, which, at, n, buf)
                 : dt_adamw_read_moment(e->opt, which, at, n, buf);
}

dt_status dt_engine_view_read_moment(const dt_engine_view *v, int which, int64_t first, int64_t n,
                                     float *out) {
    return view_moment(v, which, first, n, out, false);
}

dt_status dt_engine_view_write_moment(const dt_engine_view *v, int which, int64_t first, int64_t n,
                                      const float *in) {
    return view_moment(v, which, first, n, (float *)(uintptr_t)in, true);
}

dt_status dt_engine_view_end(dt_engine *e, dt_engine_view *v, bool loaded) {
    (void)v;
    if (loaded) {
        if (e->zero < 3)
            dt_model_sync_lp(e->model);
        else
            dt_engine__invalidate_weights(e);
    }
    return DT_OK;
}

void dt_engine_take_unit_seconds(dt_engine *e, double *per_unit, double *head) {
    for (int u = 0; u < e->n_units; u++) {
        per_unit[e->global[u]] += e->busy[u];
        e->busy[u] = 0;
    }
    *head += e->head_busy;
    e->head_busy = 0;
}

int dt_engine_adam_steps(const dt_engine *e) { return dt_adamw_steps_taken(e->opt); }
void dt_engine_set_adam_steps(dt_engine *e, int t) { dt_adamw_set_steps_taken(e->opt, t); }

void dt_engine_own_range(const dt_engine *e, bool grads, const float **x, int64_t *first,
                         int64_t *count) {
    if (grads)
        *x = e->zero < 2 ? e->g_full + e->own_first : e->g_shard;
    else
        *x = e->zero < 3 ? e->w_full + e->own_first : e->w_shard;
    *first = e->own_first;
    *count = e->own_count;
}
