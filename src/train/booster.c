/* The Booster: plugin config -> mesh -> data-parallel engine, loaders and the step. See
 * include/dtrain/booster.h. The single place where a layout is turned into running parts;
 * train/trainer.c (dtrain train) and examples/ both drive training through it.
 *
 * dp rank r takes rows [r B/dp, (r+1) B/dp) of the global batch the single process would
 * read, in micro-batches; each micro-batch's gradient is scaled by 1/(B T) and the engine sums
 * over ranks, so the step's gradient is that of the mean loss over all B T tokens whatever the
 * layout. Under fp16 that factor also carries the loss scale (optim/loss_scale.h), divided
 * out of the norm and the update again. Set-up failures are agreed across ranks before the
 * first step.
 */
#include "dtrain/booster.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "dist/dist.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "core/clock.h"
#include "io/atomic.h"
#include "io/clips.h"
#include "nn/ring_attn.h"
#include "plan/layout.h"
#include "plan/schedule.h"
#include "train/checkpoint.h"
#include "train/engine.h"
#include "train/finite.h"
#include "train/booster_impl.h"
#include "train/pipeline.h"
#include "train/source.h"
#include "train/trainer.h"

bool dt_booster__pipelined(const dt_booster *b) { return b->mesh->axis[DT_AXIS_PP]->size > 1; }

dt_status dt_booster_init(const dt_plugin_config *plugin, dt_comm *world, dt_booster **out) {
    *out = NULL;
    dt_mesh_dims dims;
    DT_TRY(dt_mesh_infer(world->size, plugin->pp_size, plugin->cp_size, plugin->sp_size,
                         plugin->tp_size, &dims));
    dt_booster *b = calloc(1, sizeof *b);
    if (!b)
        return dt_err_set(DT_ERR_OOM, "booster: out of memory");
    b->plugin = *plugin;
    b->world = world;
    b->saved_step = -1;
    dt_status st;
    DT_TRY_GOTO(dt_mem_init(&b->mem));
    DT_TRY_GOTO(dt_mesh_init(world, &dims, &b->mesh));
    b->dp = b->mesh->axis[DT_AXIS_DP];
    b->grad = b->mesh->grad;
    *out = b;
    return DT_OK;
fail:
    dt_booster_free(b);
    return st;
}

void dt_booster_free(dt_booster *b) {
    if (!b)
        return;
    dt_ckpt_async_abandon(b->saving, b->world->rank); /* a run that ends in an error */
    dt_source_close(b->train);
    dt_source_close(b->val);
    dt_pipeline_free(b->pipeline);
    dt_sched_free(b->schedule);
    dt_trace_free(&b->trace);
    dt_engine_free(b->engine);
    free(b->bucket_lay);
    dt_mesh_free(b->mesh);
    dt_mem_free(b->mem); /* also releases the batch buffers */
    free(b);
}

/* ---- boost -------------------------------------------------------------------------------- */

/* The run's layout on this rank, from the plugin and the spec; the model's own split rules
 * (heads and widths over tp and sp) checked beside it. Pure: every rank reaches one verdict. */
static dt_status make_layout(dt_booster *b, const dt_boost_spec *s) {
    b->lay_cfg = (dt_config){.model = *s->model,
                             .plugin = b->plugin,
                             .train = {.batch_size = s->batch_size,
                                       .micro_batch_size = s->micro_batch_size,
                                       .seq_len = s->seq_len}};
    DT_TRY(dt_booster__bucket_layouts(b, s));
    if (b->bk.n)
        return DT_OK;
    DT_TRY(dt_layout_make(&b->lay_cfg, b->world->size, b->world->rank, &b->lay));
    dt_model_split ms = dt_model_split_of(&b->plugin, b->lay.T);
    return dt_model_check_split(s->model, &ms);
}

/* The schedule every pp rank runs: generated, or read from the user's file; validated with
 * blocking (rendezvous) sends, so a bad one fails here, on every rank, before any message. */
dt_status dt_booster__make_schedule(dt_booster *b) {
    const dt_plugin_config *p = &b->plugin;
    char what[sizeof p->pp_schedule + 64];
    snprintf(what, sizeof what, "plugin.pp_schedule=%s", p->pp_schedule);
    if (strncmp(p->pp_schedule, "file:", 5) == 0) {
        const char *path = p->pp_schedule + 5;
        char *text;
        DT_TRY(dt_err_wrap(dt_read_text(path, "pipeline schedule", 16 << 20, &text),
                           "plugin.pp_schedule: "));
        dt_status st = dt_sched_parse(text, &b->schedule);
        free(text);
        DT_TRY(dt_err_wrap(st, "plugin.pp_schedule file %s", path));
        snprintf(what, sizeof what, "plugin.pp_schedule file %s", path);
    } else {
        DT_TRY(dt_layout_schedule_make(&b->lay, p, &b->schedule));
    }
    DT_TRY(dt_layout_set_schedule(&b->lay, b->schedule, what));
    DT_TRY(dt_booster__bucket_schedules(b, what));
    dt_sched_limits lim = {.p2p = DT_SCHED_P2P_RENDEZVOUS};
    return dt_err_wrap(dt_sched_validate(b->schedule, &lim), "%s", what);
}

/* The training and validation sources. Bouncing-shapes validation clips come from a seed of
 * their own (never a training clip) and keep every label (the conditional loss); clips read
 * from disk take their validation clips from data.val's folder, noised by a seed of its own. */
static dt_status open_one(dt_booster *b, const dt_boost_spec *s, dt_source **train,
                          dt_source **val) {
    (void)b;
    const dt_model_config *m = s->model;
    if (s->source == DT_SOURCE_BOUNCE) {
        dt_bounce_source_spec bs = {.model = m,
                                    .shapes = s->shapes,
                                    .label_dropout = s->label_dropout,
                                    .batch_size = s->batch_size,
                                    .seed = s->seed};
        DT_TRY(dt_source_open_bounce(&bs, train));
        bs.label_dropout = 0;
        bs.seed = dt_rng_u64(s->seed, "data.val", 0);
        return dt_source_open_bounce(&bs, val);
    }
    if (s->source == DT_SOURCE_CLIPS || s->source == DT_SOURCE_LATENTS) {
        dt_clip_source_spec cs = {.model = m,
                                  .path = s->train_data,
                                  .what = "data.train",
                                  .kind = s->source == DT_SOURCE_CLIPS ? DT_CLIPS_PIXELS
                                                                       : DT_CLIPS_LATENTS,
                                  .batch_size = s->batch_size,
                                  .shuffle = s->shuffle,
                                  .label_dropout = s->label_dropout,
                                  .seed = s->seed};
        DT_TRY(dt_source_open_clips(&cs, train));
        if (!s->val_data || !s->val_data[0])
            return DT_OK;
        cs.path = s->val_data, cs.what = "data.val", cs.shuffle = false;
        cs.label_dropout = 0;
        cs.seed = dt_rng_u64(s->seed, "data.val", 0);
        return dt_source_open_clips(&cs, val);
    }
    if (s->source != DT_SOURCE_TOKENS)
        return dt_err_set(DT_ERR_ARG, "booster: data source %d is not known", (int)s->source);
    dt_docs docs = {.on = s->doc_mask, .eot = s->eot};
    DT_TRY(dt_source_open_tokens(s->train_data, m->vocab_size, s->batch_size, s->seq_len,
                                 s->shuffle, s->seed, &docs, train));
    if (s->val_data && s->val_data[0])
        DT_TRY(dt_source_open_tokens(s->val_data, m->vocab_size, s->batch_size, s->seq_len, false,
                                     0, &docs, val));
    return DT_OK;
}

static dt_status open_sources(dt_booster *b, const dt_boost_spec *s) {
    if (b->bk.n)
        return dt_booster__bucket_sources(b, s, open_one);
    DT_TRY(open_one(b, s, &b->train, &b->val));
    b->in_row = dt_source_input_row_bytes(b->train);
    b->tg_row = dt_source_target_row_bytes(b->train);
    return DT_OK;
}

/* The engine's options: what the layout says this rank runs, and the plugin's knobs. */
static dt_engine_opts engine_opts(const dt_booster *b) {
    const dt_layout *l = &b->lay;
    const dt_plugin_config *p = &b->plugin;
    dt_engine_opts eo = {.zero_stage = l->zero,
                         .bucket_mb = p->bucket_mb,
                         .overlap = p->overlap,
                         .precision = l->precision,
                         .B = l->mb,
                         .T = l->T_local,
                         .tp = b->mesh->axis[DT_AXIS_TP],
                         .sp = b->mesh->axis[DT_AXIS_SP],
                         .sequence_tp = l->rows_tp,
                         .cp = b->mesh->axis[DT_AXIS_CP],
                         .cp_zigzag = l->cp_zigzag,
                         .ac = l->ac,
                         .ac_every = l->ac_every,
                         .act_compress = p->act_compress,
                         .act_offload = p->act_offload,
                         .act_offload_dir = p->act_offload_dir,
                         .offload = p->offload,
                         .offload_dir = p->offload_dir,
                         .offload_window_mb = p->offload_window_mb,
                         .world_rank = l->rank,
                         .doc_mask = b->doc_mask,
                         .ema_decay = b->ema_decay};
    if (dt_booster__pipelined(b)) {
        eo.units = l->held;
        eo.n_slots = l->n_slots;
        eo.n_grads = l->n_grads;
        eo.pp = b->mesh->axis[DT_AXIS_PP];
        eo.tied = b->mesh->tied; /* the model's tied tensors (dt_model_tie) */
        eo.split_backward = l->split_backward;
    }
    return eo;
}

dt_status dt_booster__build_engine(dt_booster *b) {
    dt_engine_opts eo = engine_opts(b);
    dt_model_shape shapes[DT_MAX_BUCKETS];
    eo.n_shapes = dt_booster__model_shapes(b, shapes);
    eo.shapes = shapes;
    DT_TRY(dt_engine_init(&b->lay_cfg.model, &b->optim, &eo, b->grad, b->mem, &b->engine));
    b->model = dt_engine_model(b->engine);
    DT_TRY(dt_model_use_shape(b->model, b->bucket));
    if (!dt_booster__pipelined(b))
        return DT_OK;
    int64_t boundary;
    DT_TRY(dt_booster__largest_boundary(b, &boundary));
    dt_comm *scatter = b->lay.pp_scatter ? b->mesh->axis[DT_AXIS_TP] : NULL;
    return dt_pipeline_init(b->schedule, &b->lay.stages, b->mesh->axis[DT_AXIS_PP], scatter,
                            b->model, b->lay.n_slots, b->lay.n_grads, boundary, b->mem,
                            &b->pipeline);
}

/* may fail on one rank only (its files), so the caller agrees on the outcome */
static dt_status boost_local(dt_booster *b, const dt_boost_spec *s) {
    DT_TRY(open_sources(b, s));
    b->cut = s->source == DT_SOURCE_TOKENS ? b->lay.cp : 1;
    b->doc_mask = s->source == DT_SOURCE_TOKENS && s->doc_mask;
    b->ema_decay = s->ema_decay;
    b->rebalance_every = s->rebalance_every;
    b->rebalance_margin = s->rebalance_margin;
    DT_TRY(dt_booster__build_engine(b));
    DT_TRY(dt_mem_alloc(b->mem, DT_MEM_ACTS, "batch.inputs", dt_booster__batch_bytes(b, true),
                        &b->inputs));
    return dt_mem_alloc(b->mem, DT_MEM_ACTS, "batch.targets", dt_booster__batch_bytes(b, false),
                        &b->targets);
}

/* rank 0: path; rank r: path with ".rank<r>" before the extension; "%d" in path: the rank */
static dt_status timeline_path(const char *path, int rank, char *out, size_t n) {
    const char *pct = strstr(path, "%d");
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    int len;
    if (pct)
        len = snprintf(out, n, "%.*s%d%s", (int)(pct - path), path, rank, pct + 2);
    else if (rank == 0)
        len = snprintf(out, n, "%s", path);
    else if (dot && dot > path && (!slash || dot > slash + 1))
        len = snprintf(out, n, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
    else
        len = snprintf(out, n, "%s.rank%d", path, rank);
    return len >= 0 && (size_t)len < n ? DT_OK
                                       : dt_err_set(DT_ERR_ARG,
                                                    "train.mem_timeline=%s: path "
                                                    "too long",
                                                    path);
}

/* This rank's file is writable (a full run must not fail at its end), then the log starts. */
static dt_status start_timeline(dt_booster *b, const char *name) {
    DT_TRY(timeline_path(name, b->world->rank, b->timeline, sizeof b->timeline));
    FILE *f = fopen(b->timeline, "w");
    if (!f)
        return dt_err_set(DT_ERR_IO, "train.mem_timeline: cannot write %s: %s", b->timeline,
                          strerror(errno));
    fclose(f);
    return dt_mem_timeline_start(b->mem, DT_MEM_TIMELINE_MAX_EVENTS);
}

dt_status dt_booster_boost(dt_booster *b, const dt_boost_spec *s) {
    if (b->engine)
        return dt_err_set(DT_ERR_ARG, "booster: boost() was already called");
    DT_TRY(make_layout(b, s));
    /* a schedule file may be missing on one rank only; one is read (and must be this run's)
     * even without a pipeline, so a wrong path never waits for pp > 1 */
    if (dt_booster__pipelined(b) || strncmp(b->plugin.pp_schedule, "file:", 5) == 0)
        DT_TRY(dt_comm_agree(b->world, dt_booster__make_schedule(b)));
    if (s->trace) {
        DT_TRY(dt_trace_init(&b->trace, b->world));
        b->tracing = true;
    }
    if (s->mem_timeline && s->mem_timeline[0]) /* before the engine: its arenas are events */
        DT_TRY(dt_comm_agree(b->world, start_timeline(b, s->mem_timeline)));
    b->optim = *s->optim;
    b->total_steps = s->total_steps;
    b->lr = s->lr;
    b->lr_ctx = s->lr_ctx;
    b->state.seed = s->seed;
    dt_loss_scale_init(&b->state.scaler, b->plugin.initial_scale, b->plugin.loss_scale_window);
    DT_TRY(dt_comm_agree(b->world, boost_local(b, s)));
    if (s->init_weights && s->init_weights[0])
        return dt_booster__load_weights(b, s->init_weights);
    return dt_engine_init_weights(b->engine, s->seed);
}

/* ---- steps -------------------------------------------------------------------------------- */

/* the comms a step talks over: gradients (dp x cp x sp), tensor, sequence, pipeline and
 * context parallelism (the tied-embedding pair's few bytes are not counted) */
enum { N_STEP_COMMS = 5 };
static int step_comms(const dt_booster *b, const dt_comm *out[N_STEP_COMMS]) {
    out[0] = b->grad;
    out[1] = b->mesh->axis[DT_AXIS_TP];
    out[2] = b->mesh->axis[DT_AXIS_SP];
    out[3] = b->mesh->axis[DT_AXIS_PP];
    out[4] = b->mesh->axis[DT_AXIS_CP];
    return N_STEP_COMMS;
}

static uint64_t comm_bytes_of(const dt_comm *c) {
    uint64_t sum = 0;
    for (int op = 0; op < DT_COMM_OP_COUNT; op++)
        sum += c->stats.bytes[op];
    return sum;
}

/* time the calling thread spent in communication: blocking calls, posting, waiting */
static double comm_seconds(const dt_booster *b) {
    const dt_comm *c[N_STEP_COMMS];
    double sum = 0;
    for (int i = 0, n = step_comms(b, c); i < n; i++) {
        sum += c[i]->stats.wait_seconds;
        for (int op = 0; op < DT_COMM_OP_COUNT; op++)
            sum += c[i]->stats.seconds[op];
    }
    return sum;
}

static double trace_now(const dt_booster *b) { return b->tracing ? dt_trace_now(&b->trace) : 0; }

static dt_status trace_span(dt_booster *b, dt_span_kind k, int mb, double t0) {
    return b->tracing ? dt_trace_add(&b->trace, k, -1, mb, (int)b->state.step, t0, trace_now(b))
                      : DT_OK;
}

/* a pipeline's step share as the schedule reads it: micro-batch after micro-batch */
static dt_pipeline_batch pipeline_batch(const dt_booster *b, float grad_scale) {
    return (dt_pipeline_batch){.inputs = b->inputs,
                               .targets = b->targets,
                               .input_bytes = (size_t)b->lay.mb * b->in_row / b->cut,
                               .target_bytes = (size_t)b->lay.mb * b->tg_row / b->cut,
                               .B = b->lay.mb,
                               .T = b->lay.T_local,
                               .grad_scale = grad_scale};
}

/* Row `row` of n read rows (whole sequences) -> this rank's tokens of it under a ring: its
 * chunks, in order, packed at the front of the row's share (in place: each chunk moves to an
 * address no later than its own). */
static void keep_ring_chunks(const dt_booster *b, char *rows, size_t row_bytes, int n) {
    const dt_layout *l = &b->lay;
    int chunk[2], n_chunks = dt_ring_chunks(l->cp, l->cp_zigzag, l->coords[DT_AXIS_CP], chunk);
    size_t chunk_bytes = row_bytes / ((size_t)l->cp * n_chunks), local = row_bytes / l->cp;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < n_chunks; i++)
            memmove(rows + r * local + i * chunk_bytes,
                    rows + r * row_bytes + chunk[i] * chunk_bytes, chunk_bytes);
}

/* n rows of a source from row0, inputs and targets: whole sequences, or under a ring this
 * rank's tokens of each */
static dt_status read_rows(dt_booster *b, dt_source *src, int row0, int n) {
    double t0 = dt_now();
    dt_status st = dt_source_rows(src, row0, n, b->inputs, b->targets);
    b->data_s += dt_now() - t0;
    DT_TRY(st);
    if (b->cut > 1) {
        keep_ring_chunks(b, (char *)b->inputs, b->in_row, n);
        keep_ring_chunks(b, (char *)b->targets, b->tg_row, n);
    }
    return DT_OK;
}

/* forward and backward of the step's micro-batches: in turn, or over the pipeline schedule */
static dt_status run_micro_batches(dt_booster *b, float grad_scale, double *loss_sum) {
    int row0 = b->lay.row0;
    *loss_sum = 0;
    if (dt_booster__pipelined(b)) {
        DT_TRY(read_rows(b, b->train, row0, b->lay.rows));
        dt_pipeline_batch pb = pipeline_batch(b, grad_scale);
        return dt_pipeline_run(b->pipeline, &pb, b->tracing ? &b->trace : NULL, (int)b->state.step,
                               loss_sum);
    }
    for (int row = 0; row < b->lay.rows; row += b->lay.mb) {
        double part, t0 = trace_now(b);
        dt_mem_set_context(b->mem, (int)b->state.step + 1, DT_MEM_PHASE_FORWARD, row / b->lay.mb);
        DT_TRY(read_rows(b, b->train, row0 + row, b->lay.mb));
        dt_batch mb = {
            .input = b->inputs, .target = b->targets, .B = b->lay.mb, .T = b->lay.T_local};
        DT_TRY(dt_engine_micro_batch(b->engine, &mb, grad_scale, row + b->lay.mb >= b->lay.rows,
                                     &part));
        DT_TRY(trace_span(b, DT_SPAN_MICRO_BATCH, row / b->lay.mb, t0));
        *loss_sum += part;
    }
    return DT_OK;
}

/* The timeline's room for a step or an evaluation, made before it: each held block's saved
 * set is marked in use and unused once per micro-batch (the accountant also keeps twice the
 * most events seen in one step). */
static dt_status reserve_events(dt_booster *b) {
    int n_mb = b->lay.n_mb; /* an evaluation may meet every bucket's count */
    for (int k = 0; k < b->bk.n; k++)
        n_mb = b->bucket_lay[k].n_mb > n_mb ? b->bucket_lay[k].n_mb : n_mb;
    return dt_mem_timeline_reserve(b->mem, 2 * n_mb * dt_model_n_units(b->model) + 64);
}

/* the loss is summed where it was computed: over dp x sp, and from the last pipeline stage */
static dt_status sum_loss(dt_booster *b, double *loss_sum) {
    DT_TRY(dt_comm_allreduce_f64(b->grad, loss_sum, 1));
    return dt_comm_allreduce_f64(b->mesh->axis[DT_AXIS_PP], loss_sum, 1);
}

static bool fp16(const dt_booster *b) { return b->plugin.precision == DT_PREC_FP16; }

/* fp16: the step's gradients overflowed on some rank. Each rank tests its own gradients' norm
 * (non-finite iff one of its summed elements is) and one all-reduce over the world makes the
 * verdict everyone's, whatever order the norm's own reductions added in. */
static dt_status grads_overflowed(dt_booster *b, double norm, bool *overflow) {
    double bad = isfinite(norm) ? 0.0 : 1.0;
    DT_TRY(dt_comm_allreduce_f64(b->world, &bad, 1));
    *overflow = bad > 0;
    return DT_OK;
}

/* Collective: an async save in flight is completed when every rank's write has ended (wait:
 * after waiting for it); a failed background write is reported here, on every rank. */
static dt_status poll_checkpoint(dt_booster *b, bool wait) {
    if (!b->saving)
        return DT_OK;
    dt_mem_set_context(b->mem, (int)b->state.step, DT_MEM_PHASE_CHECKPOINT, -1);
    int64_t step;
    DT_TRY(dt_ckpt_async_poll(&b->saving, b->world, wait, &step));
    if (step >= 0)
        b->saved_step = step;
    return DT_OK;
}

dt_status dt_booster_step(dt_booster *b, dt_step_stats *r) {
    /* the loss scale is a power of two (from a power-of-two start): multiplying by it and
     * dividing the norm and the update by it again are exact */
    DT_TRY(dt_booster__enter_bucket(b, b->train));
    float loss_scale = fp16(b) ? b->state.scaler.scale : 1.0f;
    float grad_scale = loss_scale / ((float)b->lay.B * b->lay.T);
    double t0 = dt_now(), comm0 = comm_seconds(b), loss_sum = 0, ts = trace_now(b);
    const dt_comm *comms[N_STEP_COMMS];
    uint64_t bytes0[N_STEP_COMMS];
    DT_TRY(poll_checkpoint(b, false)); /* all ranks, before anything can strand one */
    for (int i = 0; i < step_comms(b, comms); i++)
        bytes0[i] = comm_bytes_of(comms[i]);
    /* a failure from here to the update may be this rank's alone, with peers blocked in a
     * collective or a receive: the caller must not wait for them */
    b->stranded = true;
    b->data_s = 0;
    int step = (int)b->state.step + 1;
    DT_TRY(reserve_events(b));
    dt_mem_set_context(b->mem, step, DT_MEM_PHASE_FORWARD, -1);
    DT_TRY(dt_engine_begin_step(b->engine));
    DT_TRY(run_micro_batches(b, grad_scale, &loss_sum));
    double tc = trace_now(b);
    dt_mem_set_context(b->mem, step, DT_MEM_PHASE_COLLECTIVE, -1);
    DT_TRY(dt_engine_finish(b->engine));
    dt_source_advance(b->train);
    DT_TRY(dt_engine_grad_norm(b->engine, &r->grad_norm));
    r->grad_norm /= loss_scale;
    bool overflow = false;
    if (fp16(b))
        DT_TRY(grads_overflowed(b, r->grad_norm, &overflow));
    r->loss_scale = loss_scale;
    r->skipped = fp16(b) && dt_loss_scale_update(&b->state.scaler, overflow);
    r->skipped_steps = b->state.scaler.skipped;
    DT_TRY(trace_span(b, DT_SPAN_COLLECTIVE, -1, tc));
    /* A skipped step leaves weights, moments and AdamW's step count alone, but the LR
     * schedule still advances with the step number (as PyTorch's scheduler.step() after a
     * GradScaler skip) and its batch is consumed. */
    int s = (int)b->state.step;
    r->lr = b->lr ? b->lr(b->lr_ctx, s) : dt_lr_at(&b->optim, s, b->total_steps);
    if (!fp16(b) && !isfinite(r->grad_norm)) { /* every rank sees the global norm */
        b->stranded = false;
        return dt_finite_step_error(b->engine, b->world, step, r->lr, b->plugin.grad_clip);
    }
    double to = trace_now(b), t_opt = dt_now();
    dt_mem_set_context(b->mem, step, DT_MEM_PHASE_OPTIMIZER, -1);
    if (!r->skipped)
        DT_TRY(dt_engine_apply(b->engine, r->lr,
                               dt_clip_coef(r->grad_norm, b->plugin.grad_clip) / loss_scale));
    r->optimizer_s = dt_now() - t_opt;
    r->data_s = b->data_s;
    DT_TRY(trace_span(b, DT_SPAN_OPTIMIZER, -1, to));
    DT_TRY(trace_span(b, DT_SPAN_STEP, -1, ts));
    r->comm_exposed_s = comm_seconds(b) - comm0;
    uint64_t *by[N_STEP_COMMS] = {&r->comm_bytes_grad, &r->comm_bytes_tp, &r->comm_bytes_sp,
                                  &r->comm_bytes_pp, &r->comm_bytes_cp};
    r->comm_bytes = 0;
    for (int i = 0; i < N_STEP_COMMS; i++) {
        *by[i] = comm_bytes_of(comms[i]) - bytes0[i];
        r->comm_bytes += *by[i];
    }
    DT_TRY(sum_loss(b, &loss_sum)); /* reporting, not counted */
    b->stranded = false;
    r->loss = loss_sum / ((double)b->lay.B * b->lay.T);
    r->samples = b->lay.B;
    r->seq_len = b->lay.T;
    r->bucket = b->bucket;
    r->seconds = dt_now() - t0;
    r->step = ++b->state.step;
    dt_source_position(b->train, &b->state.data_pos, &b->state.data_step);
    if (!isfinite(r->loss))
        return dt_err_set(DT_ERR_ARG,
                          "loss became %g at step %lld (lr %g): training diverged; "
                          "lower optim.lr%s",
                          r->loss, (long long)r->step, r->lr,
                          b->plugin.grad_clip > 0 ? "" : " or set plugin.grad_clip");
    if (r->step == b->total_steps) /* the run's result: never end on non-finite weights */
        return dt_finite_check_weights(b->engine, b->world, b->state.step, b->plugin.grad_clip,
                                       "finishing the run");
    return dt_booster__rebalance(b);
}

dt_status dt_booster_eval(dt_booster *b, int n_batches, double *loss) {
    if (!b->val)
        return dt_err_set(DT_ERR_ARG, "booster: no validation data was given to boost()");
    double sum = 0;
    DT_TRY(reserve_events(b));
    dt_mem_set_context(b->mem, (int)b->state.step, DT_MEM_PHASE_EVAL, -1);
    b->stranded = true;
    dt_source_rewind(b->val);
    for (int i = 0; i < n_batches; i++) {
        DT_TRY(dt_booster__enter_bucket(b, b->val));
        int row0 = b->lay.row0;
        double batch = 0; /* the batch's summed loss */
        if (dt_booster__pipelined(b)) {
            double part;
            DT_TRY(read_rows(b, b->val, row0, b->lay.rows));
            dt_pipeline_batch pb = pipeline_batch(b, 0);
            DT_TRY(dt_pipeline_eval(b->pipeline, &pb, b->lay.n_mb, &part));
            batch += part;
        }
        for (int row = 0; !dt_booster__pipelined(b) && row < b->lay.rows; row += b->lay.mb) {
            double part;
            DT_TRY(read_rows(b, b->val, row0 + row, b->lay.mb));
            dt_batch mb = {
                .input = b->inputs, .target = b->targets, .B = b->lay.mb, .T = b->lay.T_local};
            DT_TRY(dt_engine_eval(b->engine, &mb, &part));
            batch += part;
        }
        sum += batch / ((double)b->lay.B * b->lay.T); /* batches of buckets weigh alike */
        dt_source_advance(b->val);
    }
    DT_TRY(sum_loss(b, &sum));
    b->stranded = false;
    *loss = sum / n_batches;
    return DT_OK;
}

dt_status dt_booster_write_trace(dt_booster *b, const char *path) {
    if (!b->tracing)
        return dt_err_set(DT_ERR_ARG, "booster: boost() was not asked to trace");
    return dt_trace_write(&b->trace, b->world, path);
}

dt_status dt_booster_write_mem_timeline(dt_booster *b) {
    dt_status st = b->timeline[0] ? dt_mem_write_timeline(b->mem, b->world->rank, b->timeline)
                                  : dt_err_set(DT_ERR_ARG, "booster: boost() was not asked for "
                                                           "a memory timeline");
    return dt_comm_agree(b->world, st);
}

dt_status dt_booster_wait_checkpoint(dt_booster *b) { return poll_checkpoint(b, true); }

int64_t dt_booster_steps_done(const dt_booster *b) { return b->state.step; }
bool dt_booster_stranded(const dt_booster *b) { return b && b->stranded; }
dt_model *dt_booster_model(dt_booster *b) { return b->model; }
int dt_booster_dp_size(const dt_booster *b) { return b->dp->size; }
int dt_booster_micro_batch(const dt_booster *b) { return b->lay.mb; }
dt_mem *dt_booster_mem(dt_booster *b) { return b->mem; }
