/* The layout of one rank. See layout.h.
 *
 * The rules here were written out in the booster (the batch split), the engine (where
 * gradients live), and the planner's memory, time and communication models (each its own
 * copy of the micro-batch rule); they now live once, and those read the result.
 */
#include "plan/layout.h"

#include <stdio.h>
#include <string.h>

#include "core/buckets.h"

/* train.batch_size over the dp ranks, then into micro-batches: train.micro_batch_size or
 * plugin.microbatches (both: they must agree), neither: one micro-batch of every row. */
static dt_status split_batch(const dt_config *c, dt_layout *l) {
    int dp = l->dp, B = c->train.batch_size;
    int mb = c->train.micro_batch_size, n_mb = c->plugin.microbatches;
    if (B < 1 || B % dp)
        return dt_err_set(DT_ERR_ARG,
                          "train.batch_size=%d is not divisible by the %d "
                          "data-parallel ranks; use a multiple of %d",
                          B, dp, dp);
    int rows = B / dp;
    if (n_mb < 0 || (n_mb > 0 && rows % n_mb))
        return dt_err_set(DT_ERR_ARG,
                          "plugin.microbatches=%d does not divide the %d sequences "
                          "each of the %d data-parallel ranks gets (batch_size %d)",
                          n_mb, rows, dp, B);
    if (n_mb > 0 && mb > 0 && mb * n_mb != rows)
        return dt_err_set(DT_ERR_ARG,
                          "plugin.microbatches=%d and train.micro_batch_size=%d "
                          "disagree: %d x %d is not the %d sequences of each data-parallel "
                          "rank; set one of them",
                          n_mb, mb, n_mb, mb, rows);
    if (mb < 0 || (mb > 0 && rows % mb))
        return dt_err_set(DT_ERR_ARG,
                          "train.micro_batch_size=%d does not divide the %d "
                          "sequences each of the %d data-parallel ranks gets (batch_size %d)",
                          mb, rows, dp, B);
    l->B = B;
    l->rows = rows;
    l->row0 = l->coords[DT_AXIS_DP] * rows;
    l->mb = n_mb > 0 ? rows / n_mb : mb > 0 ? mb : rows;
    l->n_mb = rows / l->mb;
    return DT_OK;
}

/* Context parallelism cuts each sequence into cp chunks (contiguous) or 2 cp (zigzag), so
 * seq_len must divide into them. */
static dt_status split_ring(const dt_config *c, dt_layout *l) {
    l->cp_zigzag = c->plugin.cp_split == DT_CP_ZIGZAG;
    int chunks = l->cp == 1 ? 1 : l->cp * (l->cp_zigzag ? 2 : 1);
    if (l->T % chunks)
        return dt_err_set(DT_ERR_ARG,
                          "train.seq_len=%d does not split into the %d chunks of "
                          "plugin.cp_size=%d with cp_split=%s; use a multiple of %d",
                          l->T, chunks, l->cp, dt_cp_split_name(c->plugin.cp_split), chunks);
    l->T_local = l->T / l->cp;
    return DT_OK;
}

static dt_status split_tokens(const dt_config *c, dt_layout *l) {
    l->T = c->train.seq_len;
    if (l->T < 1)
        return dt_err_set(DT_ERR_ARG, "train.seq_len=%d must be >= 1", l->T);
    DT_TRY(split_ring(c, l));
    l->rows_tp = c->plugin.sp_mode == DT_SP_SPLIT_GATHER;
    l->rows_split = l->rows_tp ? l->tp : 1;
    /* only where the tp ranks hold the same whole boundary, and the same gradient of it, is
     * there a piece to send: a DiT's text gradient is partial over tp (models/dit_text.c) */
    bool text = c->model.arch == DT_ARCH_DIT && c->model.text_len > 0;
    l->pp_scatter = c->plugin.pp_scatter && l->pp > 1 && l->tp > 1 && !l->rows_tp && !text;
    l->tokens_mb = (int64_t)l->mb * l->T_local;
    l->tokens_sp = l->tokens_mb / l->sp;
    l->tokens_rows = l->tokens_sp / l->rows_split;
    return DT_OK;
}

static dt_status split_stages(const dt_config *c, dt_layout *l) {
    int L = c->model.n_layer;
    if (L < 1 || L > DT_MAX_CHUNKS)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model.n_layer=%d: dtrain runs 1 to %d layers", L,
                          DT_MAX_CHUNKS);
    l->n_layer = L;
    if (l->pp == 1) /* not used, but a typo is still one */
        DT_TRY(dt_stage_layers_check(c->plugin.pp_layers));
    int v = l->pp > 1 ? c->plugin.pp_chunks : 1;
    DT_TRY(dt_stage_plan_make(L, l->pp, v, l->pp > 1 ? c->plugin.pp_layers : NULL, &l->stages));
    dt_stage_plan_held(&l->stages, l->pp_rank, l->held);
    l->n_slots = 1;
    l->n_inbox = 0;
    l->n_grads = 1;
    l->scheduled = l->pp == 1;
    return DT_OK;
}

dt_status dt_layout_make(const dt_config *c, int world, int rank, dt_layout *out) {
    memset(out, 0, sizeof *out);
    const dt_plugin_config *p = &c->plugin;
    dt_layout l = {.world = world, .rank = rank};
    DT_TRY(dt_mesh_infer(world, p->pp_size, p->cp_size, p->sp_size, p->tp_size, &l.dims));
    if (rank < 0 || rank >= world)
        return dt_err_set(DT_ERR_ARG, "layout: rank %d is not one of the %d ranks", rank, world);
    dt_mesh_coords(&l.dims, rank, l.coords);
    l.tp = l.dims.size[DT_AXIS_TP];
    l.sp = l.dims.size[DT_AXIS_SP];
    l.cp = l.dims.size[DT_AXIS_CP];
    l.dp = l.dims.size[DT_AXIS_DP];
    l.pp = l.dims.size[DT_AXIS_PP];
    l.pp_rank = l.coords[DT_AXIS_PP];
    l.grad_size = l.dp * l.cp * l.sp;
    l.grad_rank =
        (l.coords[DT_AXIS_DP] * l.cp + l.coords[DT_AXIS_CP]) * l.sp + l.coords[DT_AXIS_SP];
    l.zero = dt_config_zero_stage(c);
    if (l.zero < 0 || l.zero > 3)
        return dt_err_set(DT_ERR_ARG, "plugin.zero_stage=%d (0 to 3)", l.zero);
    if (l.zero > 0 && p->type == DT_PLUGIN_DDP)
        return dt_err_set(DT_ERR_ARG, "plugin.type=ddp has no ZeRO stage; use zero1/2/3");
    l.precision = p->precision;
    l.ac = p->ac;
    l.ac_every = p->ac_every > 0 ? p->ac_every : 1;
    DT_TRY(split_batch(c, &l));
    DT_TRY(split_tokens(c, &l));
    DT_TRY(split_stages(c, &l));
    *out = l;
    return DT_OK;
}

dt_status dt_layout_schedule_make(const dt_layout *l, const dt_plugin_config *p,
                                  dt_schedule **out) {
    const char *k = p->pp_schedule;
    if (strncmp(k, "file:", 5) == 0)
        return dt_err_set(DT_ERR_ARG,
                          "plugin.pp_schedule=%s: the schedule is read from the "
                          "file by its caller",
                          k);
    if (strcmp(k, "gpipe") == 0)
        return dt_sched_gpipe(l->pp, l->n_mb, out);
    if (strcmp(k, "interleaved") == 0)
        return dt_sched_interleaved(l->pp, l->n_mb, l->stages.v, out);
    if (strcmp(k, "zbh1") == 0)
        return dt_sched_zbh1(l->pp, l->n_mb, out);
    return dt_sched_1f1b(l->pp, l->n_mb, out);
}

dt_status dt_layout_set_schedule(dt_layout *l, const dt_schedule *s, const char *what) {
    if (s->pp != l->pp || s->n_chunks != l->stages.v || s->n_mb != l->n_mb)
        return dt_err_set(DT_ERR_ARG,
                          "%s is for pp %d, %d chunks per rank, %d micro-batches; "
                          "this run has pp_size %d, pp_chunks %d, %d micro-batches",
                          what, s->pp, s->n_chunks, s->n_mb, l->pp, l->stages.v, l->n_mb);
    int slots = dt_sched_slots(s, l->pp_rank);
    l->n_slots = slots > 0 ? slots : 1;
    l->n_inbox = dt_sched_inbox(s, l->pp_rank);
    l->n_grads = dt_sched_grads(s, l->pp_rank);
    l->split_backward = dt_sched_split(s);
    l->scheduled = true;
    return DT_OK;
}

dt_status dt_layout_make_scheduled(const dt_config *c, int world, int rank,
                                   const dt_schedule *given, dt_layout *out,
                                   const dt_schedule **sched, dt_schedule **own) {
    *sched = NULL;
    *own = NULL;
    DT_TRY(dt_layout_make(c, world, rank, out));
    if (out->pp == 1)
        return DT_OK;
    if (!given)
        DT_TRY(dt_layout_schedule_make(out, &c->plugin, own));
    *sched = given ? given : *own;
    dt_status st = dt_layout_set_schedule(
        out, *sched, given ? "the pipeline schedule given" : "plugin.pp_schedule");
    if (st != DT_OK) {
        dt_sched_free(*own);
        *own = NULL;
        *sched = NULL;
    }
    return st;
}

dt_status dt_layout_make_buckets(const dt_config *c, int world, int rank, dt_layout *out, int *n) {
    dt_buckets bk;
    *n = 0;
    DT_TRY(dt_config_buckets(c, &bk));
    dt_bucket_errors bad = {.n = 0};
    for (int k = 0; k < bk.n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk.b[k]);
        dt_layout *l = &out[k];
        dt_status st = dt_layout_make(&ck, world, rank, l);
        if (st == DT_OK && k > 0 && l->pp > 1 && out[0].pp > 1 && l->n_mb != out[0].n_mb)
            st = dt_err_set(DT_ERR_ARG,
                            "%d micro-batches a step, but bucket 0's %d: a pipeline runs one "
                            "schedule, so every bucket needs the same count (set "
                            "plugin.microbatches, or batches in one proportion to "
                            "train.micro_batch_size)",
                            l->n_mb, out[0].n_mb);
        dt_bucket_errors_add(&bad, st, &bk, k);
    }
    DT_TRY(dt_bucket_errors_status(&bad));
    *n = bk.n;
    return DT_OK;
}

bool dt_layout_holds(const dt_layout *l, int unit) {
    return unit >= 0 && unit < l->n_layer + 2 && l->held[unit];
}

/* The first and last unit a rank holds are used by every micro-batch (the embedding, the
 * head), so under ZeRO 2/3 they keep buffers of their own rather than rotate. */
dt_grad_home dt_grad_home_of(int zero, bool split_backward, bool pipelined, int unit, int n_units) {
    if (zero < 2)
        return DT_GRAD_ARENA;
    if (split_backward)
        return DT_GRAD_WHOLE;
    if (unit != 0 && unit != n_units - 1)
        return DT_GRAD_ROTATING;
    return pipelined ? DT_GRAD_PINNED_STEP : DT_GRAD_PINNED;
}

int dt_grad_buckets(const int64_t *unit_floats, int n_units, double bucket_bytes, int *closes) {
    int n = 0;
    double bytes = 0;
    for (int u = n_units - 1; u >= 0; u--) {
        bytes += 4.0 * (double)unit_floats[u];
        bool full = bytes >= bucket_bytes || u == 0;
        closes[u] = full ? n++ : -1;
        bytes = full ? 0 : bytes;
    }
    return n;
}

dt_grad_home dt_layout_grad_home(const dt_layout *l, int unit, int n_units) {
    return dt_grad_home_of(l->zero, l->split_backward, l->pp > 1, unit, n_units);
}

dt_plan_rerun dt_plan_ac_rerun(const dt_plugin_config *p, int l) {
    int every = p->ac_every > 0 ? p->ac_every : 1;
    if (p->ac == DT_AC_NONE || l % every)
        return DT_PLAN_RERUN_NONE;
    return p->ac == DT_AC_FULL ? DT_PLAN_RERUN_BLOCK : DT_PLAN_RERUN_ATTENTION;
}

dt_plan_rerun dt_layout_rerun(const dt_layout *l, int block) {
    dt_plugin_config p = {.ac = l->ac, .ac_every = l->ac_every};
    return dt_plan_ac_rerun(&p, block);
}

void dt_layout_piece(int64_t n, int parts, int part, int64_t *first, int64_t *count) {
    *first = n * part / parts;
    *count = n * (part + 1) / parts - *first;
}
