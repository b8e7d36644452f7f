/* Pipeline stage boundaries moved by measured time (train.rebalance_every).
 *
 * Every rebalance_every steps the engine's clocks give each unit's compute seconds over those
 * steps (timed between its hooks, so waits for gathers, reductions and pipeline messages are
 * not counted), summed over every rank that ran a copy of it and averaged. A chunk's time is
 * its units' (the LM head's passes on the last chunk). When the slowest chunk exceeds their
 * mean by more than the margin, the layer counts are cut again by the planner's own balance
 * (dt_plan_balance_layers) over the measured layer, embedding and head times, and the run
 * moves to them: the whole state (weights, AdamW moments and step count, the weights'
 * average) is gathered into full arenas, the engine and the pipeline executor are rebuilt for
 * the new stages, and each rank takes its part of the arenas back, the resharding path a
 * checkpoint load takes, in memory. Every rank reaches the same decision from the same sums,
 * and the result is the single process's: only where each layer runs changes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "plan/cost.h"
#include "train/booster_impl.h"

/* this interval's seconds per global unit ([L + 2]) and of the head (the last entry), the
 * mean over the ranks that ran each unit: the same numbers on every rank */
static dt_status measured_seconds(dt_booster *b, double *sec, int n_units) {
    memset(sec, 0, (size_t)(n_units + 1) * sizeof *sec);
    dt_engine_take_unit_seconds(b->engine, sec, &sec[n_units]);
    DT_TRY(dt_comm_allreduce_f64(b->world, sec, n_units + 1));
    double copies = (double)b->world->size / b->lay.pp; /* ranks holding each unit */
    for (int u = 0; u <= n_units; u++)
        sec[u] /= copies;
    return DT_OK;
}

/* each chunk's seconds under counts[n] (the embedding on the first, the head on the last) */
static void chunk_seconds(const double *sec, int L, const int *counts, int n, double *out) {
    for (int c = 0, u = 1; c < n; c++) {
        out[c] = c == 0 ? sec[0] : 0;
        for (int k = 0; k < counts[c]; k++)
            out[c] += sec[u++];
    }
    out[n - 1] += sec[L + 1] + sec[L + 2];
}

static double slowest(const double *t, int n) {
    double m = 0;
    for (int c = 0; c < n; c++)
        m = t[c] > m ? t[c] : m;
    return m;
}

static void counts_text(const int *counts, int n, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int c = 0; c < n && k < cap; c++)
        k += (size_t)snprintf(out + k, cap - k, "%s%d", c ? "," : "", counts[c]);
}

static void seconds_text(const double *t, int n, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int c = 0; c < n && k < cap; c++)
        k += (size_t)snprintf(out + k, cap - k, "%s%.3f", c ? " " : "", t[c]);
}

/* the whole state in full arenas (temporaries of the accountant, "restage.*"), the engine
 * and pipeline rebuilt for layers, the state scattered back into them */
static dt_status restage(dt_booster *b, const char *layers) {
    int64_t n = dt_model_full_numel(b->model);
    size_t bytes = (size_t)n * sizeof(float);
    bool ema = dt_engine_has_ema(b->engine);
    float *w = NULL, *m = NULL, *v = NULL, *avg = NULL;
    dt_status st;
    DT_TRY(dt_booster_wait_checkpoint(b)); /* a background save reads the engine's state */
    DT_TRY_GOTO(dt_mem_alloc(b->mem, DT_MEM_TEMP, "restage.w", bytes, (void **)&w));
    DT_TRY_GOTO(dt_mem_alloc(b->mem, DT_MEM_TEMP, "restage.m", bytes, (void **)&m));
    DT_TRY_GOTO(dt_mem_alloc(b->mem, DT_MEM_TEMP, "restage.v", bytes, (void **)&v));
    if (ema)
        DT_TRY_GOTO(dt_mem_alloc(b->mem, DT_MEM_TEMP, "restage.ema", bytes, (void **)&avg));
    DT_TRY_GOTO(dt_engine_gather_state(b->engine, w, m, v));
    if (ema)
        DT_TRY_GOTO(dt_engine_gather_ema(b->engine, avg));
    int adam_steps = dt_engine_adam_steps(b->engine);
    dt_pipeline_free(b->pipeline);
    b->pipeline = NULL;
    dt_engine_free(b->engine);
    b->engine = NULL;
    b->model = NULL;
    dt_sched_free(b->schedule);
    b->schedule = NULL;
    snprintf(b->plugin.pp_layers, sizeof b->plugin.pp_layers, "%s", layers);
    b->lay_cfg.plugin = b->plugin;
    DT_TRY_GOTO(dt_layout_make(&b->lay_cfg, b->world->size, b->world->rank, &b->lay));
    DT_TRY_GOTO(dt_comm_agree(b->world, dt_booster__make_schedule(b)));
    DT_TRY_GOTO(dt_comm_agree(b->world, dt_booster__build_engine(b)));
    DT_TRY_GOTO(dt_engine_scatter_state(b->engine, w, m, v));
    if (ema)
        DT_TRY_GOTO(dt_engine_scatter_ema(b->engine, avg));
    dt_engine_set_adam_steps(b->engine, adam_steps);
fail:
    dt_mem_release(b->mem, avg);
    dt_mem_release(b->mem, v);
    dt_mem_release(b->mem, m);
    dt_mem_release(b->mem, w);
    return st;
}

dt_status dt_booster__rebalance(dt_booster *b) {
    if (b->rebalance_every <= 0 || !dt_booster__pipelined(b) ||
        b->state.step % b->rebalance_every != 0)
        return DT_OK;
    const dt_stage_plan *sp = &b->lay.stages;
    int L = b->lay.n_layer, n = sp->n_chunks, now[DT_MAX_CHUNKS] = {0}, next[DT_MAX_CHUNKS] = {0};
    double *sec = malloc((size_t)(L + 3) * sizeof *sec), t_now[DT_MAX_CHUNKS],
           t_next[DT_MAX_CHUNKS];
    if (!sec)
        return dt_err_set(DT_ERR_OOM, "train.rebalance_every: out of memory");
    dt_status st = measured_seconds(b, sec, L + 2);
    for (int c = 0; c < n; c++)
        now[c] = sp->first[c + 1] - sp->first[c] - (c == 0) - (c == n - 1);
    chunk_seconds(sec, L, now, n, t_now);
    double mean = 0;
    for (int c = 0; c < n; c++)
        mean += t_now[c] / n;
    double worst = slowest(t_now, n);
    if (st != DT_OK || !(worst > mean * (1 + b->rebalance_margin))) {
        free(sec);
        return st;
    }
    st = dt_plan_balance_layers(sec + 1, L, n, sec[0], sec[L + 1] + sec[L + 2], next);
    chunk_seconds(sec, L, next, n, t_next);
    free(sec);
    DT_TRY(st);
    char from[sizeof b->plugin.pp_layers], to[sizeof b->plugin.pp_layers], times[512];
    counts_text(now, n, from, sizeof from);
    counts_text(next, n, to, sizeof to);
    seconds_text(t_now, n, times, sizeof times);
    /* a move gathers the whole state: it must gain more than the margin to be worth it */
    double better = slowest(t_next, n);
    if (!(better * (1 + b->rebalance_margin) < worst)) {
        if (b->world->rank == 0)
            dt_info("step %lld: pipeline chunks took %s s over %d steps (slowest %.2fx their "
                    "mean); no cut of the layers beats %s by more than the margin %.2f at "
                    "these times",
                    (long long)b->state.step, times, b->rebalance_every, worst / mean, from,
                    (double)b->rebalance_margin);
        return DT_OK;
    }
    if (b->world->rank == 0)
        dt_info("step %lld: pipeline chunks took %s s over %d steps, the slowest %.2fx their "
                "mean (margin %.2f): layers per chunk %s -> %s, the slowest chunk %.3f s -> "
                "%.3f s at these times",
                (long long)b->state.step, times, b->rebalance_every, worst / mean,
                (double)b->rebalance_margin, from, to, worst, better);
    return restage(b, to);
}
