/* The training loop. See trainer.h.
 *
 * One optimizer step = the global batch; dp rank r takes rows [r B/dp, (r+1) B/dp) of the batch
 * the single process would read, split into micro-batches. Each micro-batch's gradient is
 * scaled by 1/(B T) and the engine sums over ranks, so the step's gradient is that of the mean
 * loss over all B T tokens whatever the layout. Then global-norm clipping and AdamW.
 * Set-up failures are agreed over all ranks (dt_comm_agree) before the first step, so a rank
 * that cannot read its data makes every rank stop with its message instead of hanging.
 */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "dist/dist.h"
#include "kernels/gemm_peak.h"
#include "optim/adamw.h"
#include "train/checkpoint.h"
#include "train/engine.h"
#include "train/loader.h"

typedef struct trainer {
    const dt_config *cfg;
    dt_comm *world; /* borrowed */
    dt_mesh *mesh;
    dt_comm *dp;    /* borrowed from the mesh */
    int dp_rank, dp_size, rows, mb; /* rows of the global batch on this rank; micro-batch */
    dt_mem *mem;
    dt_engine *engine;
    dt_gpt *model; /* borrowed from the engine */
    dt_loader train, val;
    bool has_val;
    int32_t *inputs, *targets; /* [mb, T] */
    FILE *metrics;
    double peak_flops;
    dt_train_state state;
} trainer;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static bool is_root(const trainer *t) { return t->world->rank == 0; }

/* ---- layout ----------------------------------------------------------------------------- */

static dt_status check_layout(const dt_config *c, int world, dt_mesh_dims *dims) {
    const dt_plugin_config *p = &c->plugin;
    DT_TRY(dt_mesh_infer(world, p->pp_size, p->sp_size, p->tp_size, dims));
    int dp = dims->size[DT_AXIS_DP], B = c->train.batch_size;
    int mb = c->train.micro_batch_size;
    if (B % dp)
        return dt_err_set(DT_ERR_ARG, "train.batch_size=%d is not divisible by the %d "
                          "data-parallel ranks; use a multiple of %d", B, dp, dp);
    if (mb > 0 && (B / dp) % mb)
        return dt_err_set(DT_ERR_ARG, "train.micro_batch_size=%d does not divide the %d "
                          "sequences each of the %d data-parallel ranks gets (batch_size %d)",
                          mb, B / dp, dp, B);
    int zero = dt_config_zero_stage(c);
    if (zero > 0 && c->plugin.type == DT_PLUGIN_DDP)
        return dt_err_set(DT_ERR_ARG, "plugin.type=ddp has no ZeRO stage; use zero1/2/3");
    return DT_OK;
}

/* ---- set-up ----------------------------------------------------------------------------- */

/* rank 0 reads, everyone receives: no shared filesystem needed for weights or checkpoints */
static dt_status broadcast_floats(dt_comm *c, float *x, int64_t n) {
    const int64_t chunk = 1 << 28;
    for (int64_t i = 0; i < n; i += chunk)
        DT_TRY(dt_comm_broadcast(c, x + i, (n - i < chunk ? n - i : chunk) * 4, 0));
    return DT_OK;
}

typedef struct full_state {
    dt_ckpt_arenas a;
    bool with_optim;
} full_state;

static dt_status full_alloc(trainer *t, full_state *f, bool with_optim) {
    size_t bytes = (size_t)dt_gpt_numel(t->model) * sizeof(float);
    memset(f, 0, sizeof *f);
    f->with_optim = with_optim;
    DT_TRY(dt_mem_alloc(t->mem, DT_MEM_TEMP, "state.weights", bytes, (void **)&f->a.w));
    if (with_optim) {
        DT_TRY(dt_mem_alloc(t->mem, DT_MEM_TEMP, "state.exp_avg", bytes, (void **)&f->a.m));
        DT_TRY(dt_mem_alloc(t->mem, DT_MEM_TEMP, "state.exp_avg_sq", bytes, (void **)&f->a.v));
    }
    return DT_OK;
}

static void full_free(trainer *t, full_state *f) {
    dt_mem_release(t->mem, f->a.v);
    dt_mem_release(t->mem, f->a.m);
    dt_mem_release(t->mem, f->a.w);
}

static dt_status load_init_weights(trainer *t) {
    const dt_config *c = t->cfg;
    if (!c->model.init[0])
        return dt_engine_init_weights(t->engine, c->train.seed);
    full_state f;
    dt_status st = full_alloc(t, &f, false);
    if (st == DT_OK && is_root(t))
        st = dt_gpt_load(t->model, f.a.w, c->model.init);
    st = dt_comm_agree(t->world, st);
    if (st == DT_OK)
        st = broadcast_floats(t->world, f.a.w, dt_gpt_numel(t->model));
    if (st == DT_OK)
        st = dt_engine_scatter_state(t->engine, f.a.w, NULL, NULL);
    full_free(t, &f);
    if (st == DT_OK)
        dt_info("weights from %s", c->model.init);
    return st;
}

static dt_status resume(trainer *t) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    char folder[4096] = "";
    if (!k->resume[0])
        return DT_OK;
    dt_status st = DT_OK;
    if (strcmp(k->resume, "auto") != 0)
        snprintf(folder, sizeof folder, "%s", k->resume);
    else if (is_root(t))
        st = dt_ckpt_latest(k->dir, folder, sizeof folder);
    DT_TRY(dt_comm_agree(t->world, st));
    DT_TRY(dt_comm_broadcast(t->world, folder, sizeof folder, 0));
    if (!folder[0]) {
        dt_info("resume=auto: no checkpoint in %s yet, starting from step 0", k->dir);
        return DT_OK;
    }
    full_state f;
    st = full_alloc(t, &f, true);
    if (st == DT_OK && is_root(t))
        st = dt_ckpt_load(folder, t->model, &f.a, &t->state);
    st = dt_comm_agree(t->world, st);
    int64_t n = dt_gpt_numel(t->model);
    if (st == DT_OK)
        st = broadcast_floats(t->world, f.a.w, n);
    if (st == DT_OK)
        st = broadcast_floats(t->world, f.a.m, n);
    if (st == DT_OK)
        st = broadcast_floats(t->world, f.a.v, n);
    if (st == DT_OK)
        st = dt_comm_broadcast(t->world, &t->state, sizeof t->state, 0);
    if (st == DT_OK)
        st = dt_comm_broadcast(t->world, &f.a.adam_steps, sizeof f.a.adam_steps, 0);
    if (st == DT_OK) {
        st = dt_engine_scatter_state(t->engine, f.a.w, f.a.m, f.a.v);
        dt_engine_set_adam_steps(t->engine, f.a.adam_steps);
    }
    full_free(t, &f);
    DT_TRY(st);
    t->train.pos = t->state.data_pos;
    t->train.step = t->state.data_step;
    dt_info("resumed from %s at step %lld", folder, (long long)t->state.step);
    return DT_OK;
}

static dt_status open_metrics(trainer *t) {
    const dt_train_config *tc = &t->cfg->train;
    if (!tc->metrics[0] || !is_root(t))
        return DT_OK;
    /* a resumed run continues its metrics file; a fresh run starts it over */
    t->metrics = fopen(tc->metrics, t->state.step > 0 ? "a" : "w");
    if (!t->metrics)
        return dt_err_set(DT_ERR_IO, "cannot write metrics file %s: %s", tc->metrics,
                          strerror(errno));
    return DT_OK;
}

/* everything up to the first step; may fail on one rank only (files) */
static dt_status setup_local(trainer *t) {
    const dt_config *c = t->cfg;
    int T = c->train.seq_len, B = c->train.batch_size;
    DT_TRY(dt_mem_init(&t->mem));
    DT_TRY(dt_loader_open(&t->train, c->data.train, c->model.vocab_size, B, T,
                          c->data.shuffle, c->train.seed));
    if (c->train.eval_every > 0 && c->data.val[0]) {
        DT_TRY(dt_loader_open(&t->val, c->data.val, c->model.vocab_size, B, T, false, 0));
        t->has_val = true;
    }
    dt_engine_opts eo = {.zero_stage = dt_config_zero_stage(c), .bucket_mb = c->plugin.bucket_mb,
                         .precision = c->plugin.precision, .B = t->mb, .T = T};
    DT_TRY(dt_engine_init(&c->model, &c->optim, &eo, t->dp, t->mem, &t->engine));
    t->model = dt_engine_model(t->engine);
    size_t tok_bytes = (size_t)t->mb * T * sizeof(int32_t);
    DT_TRY(dt_mem_alloc(t->mem, DT_MEM_ACTS, "batch.inputs", tok_bytes, (void **)&t->inputs));
    DT_TRY(dt_mem_alloc(t->mem, DT_MEM_ACTS, "batch.targets", tok_bytes, (void **)&t->targets));
    DT_TRY(open_metrics(t));
    dt_gemm *peak_gemm = NULL;
    DT_TRY(dt_gemm_init(&peak_gemm));
    dt_dtype mm = c->plugin.precision == DT_PREC_BF16 ? DT_BF16 : DT_F32;
    dt_status st = dt_gemm_peak_flops(peak_gemm, mm, 0.5, &t->peak_flops);
    dt_gemm_free(peak_gemm);
    return st;
}

static dt_status setup(trainer *t) {
    const dt_config *c = t->cfg;
    dt_mesh_dims dims;
    /* the same checks on every rank give the same message everywhere, before any collective */
    DT_TRY(dt_config_validate(c));
    DT_TRY(check_layout(c, t->world->size, &dims));
    DT_TRY(dt_mesh_init(t->world, &dims, &t->mesh));
    t->dp = t->mesh->axis[DT_AXIS_DP];
    t->dp_rank = t->dp->rank;
    t->dp_size = t->dp->size;
    t->rows = c->train.batch_size / t->dp_size;
    t->mb = c->train.micro_batch_size > 0 ? c->train.micro_batch_size : t->rows;
    DT_TRY(dt_comm_agree(t->world, setup_local(t)));
    t->state.seed = c->train.seed;
    DT_TRY(load_init_weights(t));
    return resume(t);
}

static void teardown(trainer *t) {
    if (t->metrics)
        fclose(t->metrics);
    dt_loader_close(&t->train);
    if (t->has_val)
        dt_loader_close(&t->val);
    dt_engine_free(t->engine);
    dt_mesh_free(t->mesh);
    dt_mem_free(t->mem); /* also releases the batch buffers */
}

/* ---- one step --------------------------------------------------------------------------- */

typedef struct step_result {
    double loss, grad_norm, seconds, comm_exposed;
    uint64_t comm_bytes;
    float lr;
} step_result;

static uint64_t comm_bytes(const dt_comm *c) {
    uint64_t b = 0;
    for (int op = 0; op < DT_COMM_OP_COUNT; op++)
        b += c->stats.bytes[op];
    return b;
}

static dt_status train_step(trainer *t, step_result *r) {
    const dt_config *c = t->cfg;
    int B = c->train.batch_size, T = c->train.seq_len, row0 = t->dp_rank * t->rows;
    float grad_scale = 1.0f / ((float)B * T);
    double t0 = now(), wait0 = t->dp->stats.wait_seconds, loss_sum = 0;
    uint64_t bytes0 = comm_bytes(t->dp);
    DT_TRY(dt_engine_begin_step(t->engine));
    for (int row = 0; row < t->rows; row += t->mb) {
        double part;
        dt_loader_rows(&t->train, row0 + row, t->mb, t->inputs, t->targets);
        DT_TRY(dt_engine_micro_batch(t->engine, t->inputs, t->targets, t->mb, T, grad_scale,
                                     row + t->mb >= t->rows, &part));
        loss_sum += part;
    }
    DT_TRY(dt_engine_finish(t->engine));
    dt_loader_advance(&t->train);
    DT_TRY(dt_engine_grad_norm(t->engine, &r->grad_norm));
    r->lr = dt_lr_at(&c->optim, (int)t->state.step, c->train.steps);
    DT_TRY(dt_engine_apply(t->engine, r->lr, dt_clip_coef(r->grad_norm, c->plugin.grad_clip)));
    r->comm_exposed = t->dp->stats.wait_seconds - wait0;
    r->comm_bytes = comm_bytes(t->dp) - bytes0;
    DT_TRY(dt_comm_allreduce_f64(t->dp, &loss_sum, 1));
    r->loss = loss_sum / ((double)B * T);
    r->seconds = now() - t0;
    t->state.step++;
    t->state.data_pos = t->train.pos;
    t->state.data_step = t->train.step;
    if (!isfinite(r->loss))
        return dt_err_set(DT_ERR_ARG, "loss became %g at step %lld (lr %g): training diverged; "
                          "lower optim.lr or set plugin.grad_clip", r->loss,
                          (long long)t->state.step, r->lr);
    return DT_OK;
}

/* validation: the first eval_batches global batches of the val shard, split like training */
static dt_status evaluate(trainer *t, double *val_loss) {
    const dt_config *c = t->cfg;
    int B = c->train.batch_size, T = c->train.seq_len, row0 = t->dp_rank * t->rows;
    double sum = 0;
    dt_loader_rewind(&t->val);
    for (int i = 0; i < c->train.eval_batches; i++) {
        for (int row = 0; row < t->rows; row += t->mb) {
            double part;
            dt_loader_rows(&t->val, row0 + row, t->mb, t->inputs, t->targets);
            DT_TRY(dt_engine_eval(t->engine, t->inputs, t->targets, t->mb, T, &part));
            sum += part;
        }
        dt_loader_advance(&t->val);
    }
    DT_TRY(dt_comm_allreduce_f64(t->dp, &sum, 1));
    *val_loss = sum / ((double)c->train.eval_batches * B * T);
    return DT_OK;
}

/* ---- reporting -------------------------------------------------------------------------- */

static void report(trainer *t, const step_result *r, double val_loss) {
    const dt_config *c = t->cfg;
    double tokens = (double)c->train.batch_size * c->train.seq_len;
    double tps = tokens / r->seconds;
    /* MFU per rank: this rank's share of the tokens against its own matmul peak */
    double mfu = dt_gpt_flops_per_token(t->model, c->train.seq_len) * tps / t->world->size /
                 t->peak_flops;
    size_t peak = dt_mem_peak_total(t->mem);
    long long step = (long long)t->state.step;
    if (step % c->train.log_every == 0 || step == c->train.steps || !isnan(val_loss))
        dt_info("step %5lld/%d | loss %.4f | lr %.3e | norm %6.3f | %8.0f tok/s | MFU %5.1f%% | "
                "mem %.0f MiB | comm %.1f MiB, %.1f ms exposed", step, c->train.steps, r->loss,
                r->lr, r->grad_norm, tps, 100 * mfu, peak / 1048576.0, r->comm_bytes / 1048576.0,
                1e3 * r->comm_exposed);
    if (!isnan(val_loss))
        dt_info("step %5lld | val loss %.4f", step, val_loss);
    if (!t->metrics)
        return;
    fprintf(t->metrics, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
            "\"tokens_per_s\": %.6g, \"mfu\": %.6g, \"peak_mem_bytes\": %zu, \"step_ms\": %.4g, "
            "\"comm_bytes\": %llu, \"comm_exposed_ms\": %.4g",
            step, r->loss, r->lr, r->grad_norm, tps, mfu, peak, 1e3 * r->seconds,
            (unsigned long long)r->comm_bytes, 1e3 * r->comm_exposed);
    if (!isnan(val_loss))
        fprintf(t->metrics, ", \"val_loss\": %.9g", val_loss);
    fputs("}\n", t->metrics);
    fflush(t->metrics);
}

/* collective: gathers the state on every rank, rank 0 writes */
static dt_status save_state(trainer *t, bool with_optim, const char *export_path) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    full_state f;
    dt_status st = full_alloc(t, &f, with_optim);
    if (st == DT_OK)
        st = dt_engine_gather_state(t->engine, f.a.w, f.a.m, f.a.v);
    f.a.adam_steps = dt_engine_adam_steps(t->engine);
    if (st == DT_OK && is_root(t))
        st = export_path ? dt_gpt_save(t->model, f.a.w, export_path)
                         : dt_ckpt_save(k->dir, t->model, &f.a, &t->state, t->cfg);
    if (st == DT_OK && is_root(t) && !export_path)
        st = dt_ckpt_prune(k->dir, k->keep);
    full_free(t, &f);
    return dt_comm_agree(t->world, st);
}

static dt_status maybe_checkpoint(trainer *t, bool last) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    if (k->every <= 0 || (t->state.step % k->every != 0 && !last))
        return DT_OK;
    DT_TRY(save_state(t, true, NULL));
    dt_info("checkpoint %s/step-%lld", k->dir, (long long)t->state.step);
    return DT_OK;
}

/* per-rank peaks of every category, max over ranks, into the JSON report */
static dt_status write_mem_report(trainer *t, const char *path) {
    int n = t->world->size, K = DT_MEM_CAT_COUNT + 1;
    double *table = calloc((size_t)n * K, sizeof *table);
    if (!table)
        return dt_err_set(DT_ERR_OOM, "memory report: out of memory");
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        table[t->world->rank * K + c] = (double)dt_mem_peak(t->mem, c);
    table[t->world->rank * K + DT_MEM_CAT_COUNT] = (double)dt_mem_peak_total(t->mem);
    dt_status st = dt_comm_allreduce_f64(t->world, table, (int64_t)n * K);
    if (st == DT_OK && is_root(t)) {
        FILE *f = fopen(path, "w");
        if (!f) {
            st = dt_err_set(DT_ERR_IO, "cannot write memory report %s: %s", path,
                            strerror(errno));
        } else {
            fputs("{\"peak\": {", f);
            for (int c = 0; c < K; c++) {
                double mx = 0;
                for (int r = 0; r < n; r++)
                    mx = table[r * K + c] > mx ? table[r * K + c] : mx;
                fprintf(f, "%s\"%s\": %.0f", c ? ", " : "",
                        c < DT_MEM_CAT_COUNT ? dt_mem_cat_name(c) : "total", mx);
            }
            fputs("}, \"per_rank\": [", f);
            for (int r = 0; r < n; r++) {
                fputs(r ? ", {" : "{", f);
                for (int c = 0; c < K; c++)
                    fprintf(f, "%s\"%s\": %.0f", c ? ", " : "",
                            c < DT_MEM_CAT_COUNT ? dt_mem_cat_name(c) : "total", table[r * K + c]);
                fputs("}", f);
            }
            fputs("]}\n", f);
            if (fclose(f) != 0)
                st = dt_err_set(DT_ERR_IO, "short write to memory report %s", path);
        }
    }
    free(table);
    return dt_comm_agree(t->world, st);
}

static dt_status finish(trainer *t) {
    const dt_config *c = t->cfg;
    if (c->train.mem_report[0]) /* before export, whose gather buffers are temporaries */
        DT_TRY(write_mem_report(t, c->train.mem_report));
    if (is_root(t))
        dt_mem_print_table(t->mem, stdout);
    if (c->train.export_path[0]) {
        DT_TRY(save_state(t, false, c->train.export_path));
        dt_info("weights exported to %s", c->train.export_path);
    }
    int n = c->train.sample_tokens;
    if (n <= 0 || c->model.vocab_size != 256)
        return DT_OK;
    int32_t prompt = '\n', *out = malloc((size_t)n * sizeof *out);
    if (!out)
        return dt_err_set(DT_ERR_OOM, "sample: out of memory");
    /* every rank samples in step (stage 3 gathers weights collectively); rank 0 prints */
    dt_status st = dt_sample_tokens(t->model, c->train.seq_len, &prompt, 1, n, 0.8f,
                                    c->train.seed, out);
    if (st == DT_OK && is_root(t)) {
        dt_info("sample (temperature 0.8):");
        dt_sample_print(out, n, c->model.vocab_size);
    }
    free(out);
    return st;
}

static dt_status run(trainer *t) {
    const dt_config *c = t->cfg;
    DT_TRY(setup(t));
    dt_info("model %s: %d layers, %d heads (%d kv), n_embd %d, vocab %d | %.2fM parameters | "
            "%s | batch %d x %d tokens (micro-batch %d) | %d ranks: dp %d, ZeRO %d",
            dt_arch_name(c->model.arch), c->model.n_layer, c->model.n_head,
            dt_gpt_kv_heads(&c->model), c->model.n_embd, c->model.vocab_size,
            dt_gpt_numel(t->model) / 1e6, dt_precision_name(c->plugin.precision),
            c->train.batch_size, c->train.seq_len, t->mb, t->world->size, t->dp_size,
            dt_config_zero_stage(c));
    dt_info("matmul peak measured now: %.1f GFLOP/s per rank (%s)", t->peak_flops / 1e9,
            dt_precision_name(c->plugin.precision));
    while (t->state.step < c->train.steps) {
        step_result r;
        DT_TRY(train_step(t, &r));
        double val_loss = NAN;
        bool last = t->state.step == c->train.steps;
        bool eval_now = t->has_val && (t->state.step % c->train.eval_every == 0 || last);
        if (eval_now)
            DT_TRY(evaluate(t, &val_loss));
        report(t, &r, val_loss);
        DT_TRY(maybe_checkpoint(t, last));
    }
    return finish(t);
}

dt_status dt_train_run(const dt_config *cfg, dt_comm *world) {
    trainer t = {.cfg = cfg, .world = world};
    dt_status st = run(&t);
    teardown(&t);
    return st;
}
