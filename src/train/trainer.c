/* dtrain train: the configuration turned into a Booster, then the loop with logging,
 * evaluation, checkpoints, the memory report, export and a sample. See trainer.h.
 * Every rank runs it; only rank 0 prints and writes files.
 */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "dtrain/booster.h"
#include "io/atomic.h"
#include "io/bpe.h"
#include "train/source.h"
#include "kernels/gemm_peak.h"
#include "kernels/isa.h"
#include "plan/memory.h"
#include "train/checkpoint.h"

typedef struct trainer {
    const dt_config *cfg;
    dt_comm *world; /* borrowed */
    dt_booster *booster;
    FILE *metrics;
    double peak_flops;
    dt_comm_watch watch;      /* the collective watchdog of every communicator of the run */
    int64_t ckpt_seen;        /* the newest completed checkpoint already pruned for and logged */
    dt_model_disk_stats disk; /* the activation file's counts at the last report */
    dt_bpe *bpe;              /* data.tokenizer, for the end-of-run sample; NULL: none */
} trainer;

static bool is_root(const trainer *t) { return t->world->rank == 0; }

/* data.doc_mask's end-of-document id: data.eot_token, else the tokenizer's; where there is
 * none, every dataset must be a Megatron one (its document index) */
static dt_status doc_eot(const trainer *t, int *eot) {
    const dt_config *c = t->cfg;
    *eot = c->data.eot_token >= 0 ? c->data.eot_token : t->bpe ? dt_bpe_eot(t->bpe) : -1;
    if (!c->data.doc_mask || *eot >= 0 || dt_tokens_spec_indexed(c->data.train))
        return DT_OK;
    return dt_err_set(DT_ERR_ARG,
                      "data.doc_mask needs to know where documents end: set "
                      "data.eot_token (GPT-2's <|endoftext|> is 50256) or data.tokenizer, or "
                      "train on Megatron datasets (their document index); data.train=%s has "
                      "none",
                      c->data.train);
}

static dt_boost_spec spec_of(const dt_config *c) {
    return (dt_boost_spec){.model = &c->model,
                           .optim = &c->optim,
                           .train_data = c->data.train,
                           .val_data = c->train.eval_every > 0 ? c->data.val : NULL,
                           .batch_size = c->train.batch_size,
                           .micro_batch_size = c->train.micro_batch_size,
                           .seq_len = c->train.seq_len,
                           .shuffle = c->data.shuffle,
                           .seed = c->train.seed,
                           .init_weights = c->model.init,
                           .total_steps = c->train.steps,
                           .trace = c->train.trace[0] != '\0',
                           .mem_timeline = c->train.mem_timeline,
                           .source = c->data.source,
                           .shapes = c->data.shapes,
                           .label_dropout = c->data.label_dropout,
                           .buckets = c->data.buckets,
                           .doc_mask = c->data.doc_mask,
                           .ema_decay = c->train.ema_decay,
                           .rebalance_every = c->train.rebalance_every,
                           .rebalance_margin = c->train.rebalance_margin};
}

/* whether the run evaluates: bouncing-shapes clips always have a validation stream */
static bool evaluates(const dt_config *c) {
    return c->train.eval_every > 0 && (c->data.val[0] || c->data.source == DT_SOURCE_BOUNCE);
}

static dt_status resume(trainer *t) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    char folder[4096] = "";
    if (!k->resume[0])
        return DT_OK;
    if (strcmp(k->resume, "auto") != 0)
        snprintf(folder, sizeof folder, "%s", k->resume);
    else
        DT_TRY(dt_booster_find_checkpoint(t->booster, k->dir, folder, sizeof folder));
    if (!folder[0]) {
        dt_info("resume=auto: no checkpoint in %s yet, starting from step 0", k->dir);
        return DT_OK;
    }
    double t0 = dt_now();
    DT_TRY(dt_booster_load_checkpoint(t->booster, folder));
    dt_info("resumed from %s at step %lld (loaded in %.3f s)", folder,
            (long long)dt_booster_steps_done(t->booster), dt_now() - t0);
    if (dt_booster_steps_done(t->booster) > t->cfg->train.steps)
        dt_warn("the checkpoint is at step %lld, past train.steps=%d: nothing to train",
                (long long)dt_booster_steps_done(t->booster), t->cfg->train.steps);
    return DT_OK;
}

static dt_status open_metrics(trainer *t) {
    const dt_train_config *tc = &t->cfg->train;
    if (!tc->metrics[0] || !is_root(t))
        return DT_OK;
    /* a resumed run continues its metrics file; a fresh run starts it over */
    t->metrics = fopen(tc->metrics, dt_booster_steps_done(t->booster) > 0 ? "a" : "w");
    if (!t->metrics)
        return dt_err_set(DT_ERR_IO, "cannot write metrics file %s: %s", tc->metrics,
                          strerror(errno));
    return DT_OK;
}

static dt_status measure_peak(trainer *t) {
    dt_gemm *g = NULL;
    DT_TRY(dt_gemm_init(&g));
    dt_dtype mm = dt_precision_mm_type(t->cfg->plugin.precision);
    dt_status st = dt_gemm_peak_flops(g, mm, 0.5, &t->peak_flops);
    dt_gemm_free(g);
    return st;
}

/* A model that cannot fit is an error before anything is allocated (n_layer 1e9 used to
 * allocate until the machine swapped): the bytes per parameter no layout avoids (fp32
 * weights and gradients, and AdamW's two moments unless they live on disk), shared out over
 * every rank as ZeRO-3 would, against this machine's memory. */
static dt_status check_model_fits(const dt_config *c, int world) {
    double params = dt_plan_param_count(&c->model), have = dt_mem_physical_bytes();
    double per = c->plugin.offload == DT_OFFLOAD_DISK ? 8 : 16, need = params * per / world;
    if (have <= 0 || need <= have)
        return DT_OK;
    return dt_err_set(DT_ERR_ARG,
                      "the model (%s, n_layer %d, n_embd %d) has %.4g "
                      "parameters: training needs at least %.4g GiB per rank (%.0f bytes per "
                      "parameter for weights, gradients%s, shared over %d ranks), and this "
                      "machine has %.1f GiB of memory",
                      dt_arch_name(c->model.arch), c->model.n_layer, c->model.n_embd, params,
                      need / 1073741824.0, per,
                      c->plugin.offload == DT_OFFLOAD_DISK ? "" : " and AdamW moments", world,
                      have / 1073741824.0);
}

/* An output file can be written (its folder is created if missing), checked before the
 * first step: a run must not train for hours and then fail to write its result. */
static dt_status check_output(const char *key, const char *path) {
    if (!path[0])
        return DT_OK;
    char dir[4096];
    struct stat sb;
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (!dir[0])
        snprintf(dir, sizeof dir, "/");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return dt_err_set(DT_ERR_ARG, "%s=%s is a folder; give a file name", key, path);
    dt_status st = dt_mkdirs(dir);
    if (st != DT_OK)
        return dt_err_wrap(st, "%s=%s: ", key, path);
    if (access(dir, W_OK | X_OK) != 0)
        return dt_err_set(DT_ERR_IO, "%s=%s: cannot write in folder %s: %s", key, path, dir,
                          strerror(errno));
    if (stat(path, &sb) == 0 && access(path, W_OK) != 0)
        return dt_err_set(DT_ERR_IO, "%s=%s: cannot write the file: %s", key, path,
                          strerror(errno));
    return DT_OK;
}

/* rank 0 writes these (every rank opens its mem_timeline file before the first step, in an
 * existing folder: booster.c) */
static dt_status check_outputs(const dt_config *c) {
    const dt_train_config *tc = &c->train;
    DT_TRY(check_output("train.export", tc->export_path));
    DT_TRY(check_output("train.mem_report", tc->mem_report));
    DT_TRY(check_output("train.trace", tc->trace));
    DT_TRY(check_output("train.metrics", tc->metrics));
    if (c->checkpoint.every > 0) {
        const char *d = c->checkpoint.dir;
        dt_status st = dt_mkdirs(d);
        if (st != DT_OK)
            return dt_err_wrap(st, "checkpoint.dir=%s: ", d);
        if (access(d, W_OK | X_OK) != 0)
            return dt_err_set(DT_ERR_IO, "checkpoint.dir=%s: cannot write in it: %s", d,
                              strerror(errno));
    }
    return DT_OK;
}

static dt_status setup(trainer *t) {
    const dt_config *c = t->cfg;
    /* the same checks on every rank give the same message everywhere, before any collective */
    DT_TRY(dt_config_validate(c));
    DT_TRY(check_model_fits(c, t->world->size));
    DT_TRY(dt_comm_agree(t->world, is_root(t) ? check_outputs(c) : DT_OK));
    if (c->train.eval_every > 0 && !evaluates(c) && is_root(t))
        dt_warn("train.eval_every=%d but data.val is empty: no validation loss will be "
                "computed (give data.val a token shard, or set train.eval_every=0)",
                c->train.eval_every);
    if (c->data.tokenizer[0]) { /* read on every rank: a bad file is an error on each */
        DT_TRY(dt_bpe_load(c->data.tokenizer, &t->bpe));
        if (dt_bpe_vocab_size(t->bpe) > c->model.vocab_size)
            return dt_err_set(DT_ERR_ARG,
                              "data.tokenizer %s has %lld ids, more than "
                              "model.vocab_size=%d",
                              c->data.tokenizer, (long long)dt_bpe_vocab_size(t->bpe),
                              c->model.vocab_size);
    }
    DT_TRY(dt_booster_init(&c->plugin, t->world, &t->booster));
    t->watch.where = dt_booster_mem(t->booster); /* step and micro-batch for its report */
    dt_boost_spec spec = spec_of(c);
    DT_TRY(doc_eot(t, &spec.eot));
    DT_TRY(dt_booster_boost(t->booster, &spec));
    DT_TRY(resume(t));
    DT_TRY(dt_comm_agree(t->world, open_metrics(t)));
    return measure_peak(t);
}

/* ---- reporting -------------------------------------------------------------------------- */

static dt_status report(trainer *t, const dt_step_stats *r, double val_loss) {
    const dt_config *c = t->cfg;
    double tps = (double)r->samples * r->seq_len / r->seconds;
    /* per rank: its share of the tokens against its own matmul peak (the model in the step's
     * shape of clip) */
    double mfu = dt_model_flops_per_sample(dt_booster_model(t->booster), r->seq_len) * r->samples /
                 r->seconds / t->world->size / t->peak_flops;
    size_t peak = dt_mem_peak_total(dt_booster_mem(t->booster));
    long long step = (long long)r->step;
    bool fp16 = c->plugin.precision == DT_PREC_FP16;
    char scale[96] = "";
    if (fp16)
        snprintf(scale, sizeof scale, " | scale %.0f%s (%lld skipped)", (double)r->loss_scale,
                 r->skipped ? ", SKIPPED: overflow" : "", (long long)r->skipped_steps);
    char clip[64] = ""; /* the step's bucket of clip shape */
    dt_buckets bk = {0};
    const dt_bucket *dc =
        dt_config_buckets(c, &bk) == DT_OK && r->bucket < bk.n ? &bk.b[r->bucket] : NULL;
    if (dc)
        snprintf(clip, sizeof clip, " | clip %dx%dx%d x %d", dc->frames, dc->height, dc->width,
                 r->samples);
    if (step % c->train.log_every == 0 || step == c->train.steps || !isnan(val_loss) || r->skipped)
        dt_info("step %5lld/%d | loss %.4f%s | lr %.3e | norm %6.3f%s | %8.0f tok/s | MFU %5.1f%% "
                "| mem %.0f MiB | comm %.1f MiB, %.1f ms exposed",
                step, c->train.steps, r->loss, clip, r->lr, r->grad_norm, scale, tps, 100 * mfu,
                peak / 1048576.0, r->comm_bytes / 1048576.0, 1e3 * r->comm_exposed_s);
    if (!isnan(val_loss))
        dt_info("step %5lld | val loss %.4f", step, val_loss);
    if (!t->metrics)
        return DT_OK;
    /* an overflowed fp16 step's norm is inf or NaN, which JSON cannot hold: null */
    char norm[32] = "null";
    if (isfinite(r->grad_norm))
        snprintf(norm, sizeof norm, "%.9g", r->grad_norm);
    fprintf(t->metrics,
            "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, "
            "\"tokens_per_s\": %.6g, \"mfu\": %.6g, \"peak_mem_bytes\": %zu, \"step_ms\": %.2f, "
            "\"comm_bytes\": %llu, \"comm_bytes_grad\": %llu, \"comm_bytes_tp\": %llu, "
            "\"comm_bytes_sp\": %llu, \"comm_bytes_pp\": %llu, \"comm_bytes_cp\": %llu, "
            "\"comm_exposed_ms\": %.3f, \"data_ms\": %.3f, \"optimizer_ms\": %.3f, "
            "\"loss_kind\": \"%s\"",
            step, r->loss, r->lr, norm, tps, mfu, peak, 1e3 * r->seconds,
            (unsigned long long)r->comm_bytes, (unsigned long long)r->comm_bytes_grad,
            (unsigned long long)r->comm_bytes_tp, (unsigned long long)r->comm_bytes_sp,
            (unsigned long long)r->comm_bytes_pp, (unsigned long long)r->comm_bytes_cp,
            1e3 * r->comm_exposed_s, 1e3 * r->data_s, 1e3 * r->optimizer_s,
            /* what "loss" measures: a GPT's next-token cross-entropy, a DiT's flow loss */
            c->model.arch == DT_ARCH_DIT ? "flow_mse" : "cross_entropy");
    if (fp16)
        fprintf(t->metrics, ", \"loss_scale\": %.17g, \"skipped\": %d, \"skipped_steps\": %lld",
                (double)r->loss_scale, (int)r->skipped, (long long)r->skipped_steps);
    if (!isnan(val_loss))
        fprintf(t->metrics, ", \"val_loss\": %.9g", val_loss);
    if (dc)
        fprintf(t->metrics, ", \"clip\": [%d, %d, %d], \"batch\": %d", dc->frames, dc->height,
                dc->width, r->samples);
    dt_model_disk_stats d;
    if (dt_model_act_disk_stats(dt_booster_model(t->booster),
                                &d)) { /* since the last report: this step's */
        fprintf(t->metrics,
                ", \"act_disk_written\": %lld, \"act_disk_read\": %lld, "
                "\"act_disk_busy_ms\": %.3f, \"act_disk_wait_ms\": %.3f",
                (long long)(d.written - t->disk.written), (long long)(d.read - t->disk.read),
                1e3 * (d.busy_s - t->disk.busy_s), 1e3 * (d.wait_s - t->disk.wait_s));
        t->disk = d;
    }
    fputs("}\n", t->metrics);
    /* a full disk shows here (stdio reports a failed write at the flush at the latest) */
    if (fflush(t->metrics) != 0 || ferror(t->metrics))
        return dt_err_set(DT_ERR_IO, "cannot write metrics file %s at step %lld: %s",
                          c->train.metrics, step, strerror(errno));
    return DT_OK;
}

/* Collective: a checkpoint completed since the last look (a sync save, or an async one that
 * a step, a save or the end of the run completed): prune the older ones and say so. */
static dt_status checkpoint_done(trainer *t, double seconds) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    int64_t step = dt_booster_last_checkpoint(t->booster);
    if (step == t->ckpt_seen)
        return DT_OK;
    t->ckpt_seen = step;
    dt_status st = is_root(t) ? dt_ckpt_prune(k->dir, k->keep) : DT_OK;
    DT_TRY(dt_comm_agree(t->world, st));
    if (seconds >= 0)
        dt_info("checkpoint %s/step-%lld (saved in %.3f s)", k->dir, (long long)step, seconds);
    else
        dt_info("checkpoint %s/step-%lld", k->dir, (long long)step);
    return DT_OK;
}

static dt_status maybe_checkpoint(trainer *t, bool last) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    int64_t step = dt_booster_steps_done(t->booster);
    if (k->every <= 0 || (step % k->every != 0 && !last))
        return DT_OK;
    /* the time training is held: sync, the whole save; async, the copy (and any wait for the
     * save before) */
    double t0 = dt_now();
    DT_TRY(dt_booster_save_checkpoint(t->booster, k->dir, t->cfg));
    double held = dt_now() - t0;
    if (k->async)
        dt_info("checkpoint %s/step-%lld: writing in the background (training held %.3f s)", k->dir,
                (long long)step, held);
    return checkpoint_done(t, k->async ? -1 : held);
}

static void write_json_cats(FILE *f, const double *v, int K) {
    for (int c = 0; c < K; c++)
        fprintf(f, "%s\"%s\": %.0f", c ? ", " : "",
                c < DT_MEM_CAT_COUNT ? dt_mem_cat_name(c) : "total", v[c]);
}

/* The planner's prediction for every rank of this layout (a pure function, so rank 0 makes
 * all of them): table[r * K + c] as write_mem_report's. The run's own schedule is read again
 * when it came from a file. */
static dt_status predict_all(const trainer *t, double *table, int K) {
    const dt_config *c = t->cfg;
    dt_schedule *sched = NULL;
    if (strncmp(c->plugin.pp_schedule, "file:", 5) == 0 && c->plugin.pp_size > 1) {
        char *text;
        DT_TRY(dt_read_text(c->plugin.pp_schedule + 5, "pipeline schedule", 16 << 20, &text));
        dt_status st = dt_sched_parse(text, &sched);
        free(text);
        DT_TRY(st);
    }
    dt_plan_mem_opts o = {.schedule = sched};
    dt_status st = DT_OK;
    for (int r = 0; st == DT_OK && r < t->world->size; r++) {
        dt_plan_mem m;
        st = dt_plan_memory(c, t->world->size, r, &o, &m);
        for (int k = 0; st == DT_OK && k < DT_MEM_CAT_COUNT; k++)
            table[r * K + k] = (double)m.cat[k];
        table[r * K + DT_MEM_CAT_COUNT] = (double)m.total;
    }
    dt_sched_free(sched);
    return st;
}

static void write_rank_entry(FILE *f, const double *measured, const double *predicted, int K) {
    write_json_cats(f, measured, K);
    if (!predicted)
        return;
    fputs(", \"predicted\": {", f);
    write_json_cats(f, predicted, K);
    fputs("}", f);
}

/* per-rank peaks of every category; "peak" is the largest rank's. "predicted" beside them
 * is the planner's (plan/memory.h) for the same layout and rank. */
static dt_status write_mem_report(trainer *t, const char *path) {
    const dt_mem *mem = dt_booster_mem(t->booster);
    int n = t->world->size, K = DT_MEM_CAT_COUNT + 1;
    double *table = calloc((size_t)(n + 1) * K, sizeof *table), *max = NULL;
    if (!table)
        return dt_err_set(DT_ERR_OOM, "memory report: out of memory");
    max = table + (size_t)n * K;
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        table[t->world->rank * K + c] = (double)dt_mem_peak(mem, c);
    table[t->world->rank * K + DT_MEM_CAT_COUNT] = (double)dt_mem_peak_total(mem);
    dt_status st = dt_comm_allreduce_f64(t->world, table, (int64_t)n * K);
    double *pred = NULL;
    if (st == DT_OK && is_root(t)) {
        pred = calloc((size_t)(n + 1) * K, sizeof *pred);
        if (pred && predict_all(t, pred, K) != DT_OK) {
            dt_warn("memory report: no prediction: %s", dt_err_msg());
            free(pred);
            pred = NULL;
        }
        for (int r = 0; r < n; r++)
            for (int c = 0; c < K; c++) {
                max[c] = table[r * K + c] > max[c] ? table[r * K + c] : max[c];
                if (pred && pred[r * K + c] > pred[n * K + c])
                    pred[n * K + c] = pred[r * K + c];
            }
        FILE *f = fopen(path, "w");
        if (!f) {
            st = dt_err_set(DT_ERR_IO, "cannot write memory report %s: %s", path, strerror(errno));
        } else {
            fputs("{\"peak\": {", f);
            write_json_cats(f, max, K);
            if (pred) {
                fputs("}, \"predicted\": {", f);
                write_json_cats(f, pred + (size_t)n * K, K);
            }
            fputs("}, \"per_rank\": [", f);
            for (int r = 0; r < n; r++) {
                fputs(r ? ", {" : "{", f);
                write_rank_entry(f, table + r * K, pred ? pred + r * K : NULL, K);
                fputs("}", f);
            }
            fputs("]}\n", f);
            if (fclose(f) != 0)
                st = dt_err_set(DT_ERR_IO, "short write to memory report %s", path);
        }
    }
    free(pred);
    free(table);
    return dt_comm_agree(t->world, st);
}

static dt_status finish(trainer *t) {
    const dt_config *c = t->cfg;
    double t0 = dt_now();
    DT_TRY(dt_booster_wait_checkpoint(t->booster)); /* an async save still in flight */
    if (c->checkpoint.async && c->checkpoint.every > 0)
        dt_info("checkpoint: waited %.3f s at the end for the save in flight", dt_now() - t0);
    DT_TRY(checkpoint_done(t, -1));
    if (c->train.mem_report[0]) /* before export, whose gather buffers are temporaries */
        DT_TRY(write_mem_report(t, c->train.mem_report));
    if (c->train.trace[0]) {
        DT_TRY(dt_booster_write_trace(t->booster, c->train.trace));
        dt_info("step timeline written to %s", c->train.trace);
    }
    if (is_root(t))
        dt_mem_print_table(dt_booster_mem(t->booster), stdout);
    if (c->train.export_path[0]) {
        DT_TRY(dt_booster_export(t->booster, c->train.export_path));
        dt_info("weights exported to %s", c->train.export_path);
    }
    if (c->train.mem_timeline[0]) { /* last, so the export's temporaries are in it */
        DT_TRY(dt_booster_write_mem_timeline(t->booster));
        dt_info("memory timeline written to %s (other ranks: .rank<r> before the extension)",
                c->train.mem_timeline);
    }
    /* a model that makes token logits prints a text sample when its ids are bytes or come
     * from data.tokenizer (a DiT samples clips with dtrain sample --out) */
    int n = c->train.sample_tokens;
    if (n <= 0 || !dt_booster_model(t->booster)->ops->logits_last ||
        (c->model.vocab_size != 256 && !t->bpe))
        return DT_OK;
    int32_t eot = t->bpe ? dt_bpe_eot(t->bpe) : -1;
    int32_t prompt = t->bpe ? (eot >= 0 ? eot : 0) : '\n', *out = malloc((size_t)n * sizeof *out);
    if (!out)
        return dt_err_set(DT_ERR_OOM, "sample: out of memory");
    dt_status st = dt_booster_sample(t->booster, &prompt, 1, n, 0.8f, c->train.seed, out);
    if (st == DT_OK && is_root(t)) {
        dt_info("sample (temperature 0.8):");
        if (t->bpe)
            dt_sample_print_bpe(t->bpe, out, n);
        else
            dt_sample_print(out, n, c->model.vocab_size);
    }
    free(out);
    return st;
}

static dt_status run(trainer *t) {
    const dt_config *c = t->cfg;
    DT_TRY(setup(t));
    char shape[256];
    dt_model_describe(dt_booster_model(t->booster), shape, sizeof shape);
    dt_info("model %s: %s | %.2fM parameters | %s | batch %d x %d tokens (micro-batch %d per "
            "rank) | %d ranks: dp %d, ZeRO %d",
            dt_arch_name(c->model.arch), shape,
            dt_model_full_numel(dt_booster_model(t->booster)) / 1e6,
            dt_precision_name(c->plugin.precision), c->train.batch_size, c->train.seq_len,
            dt_booster_micro_batch(t->booster), t->world->size, dt_booster_dp_size(t->booster),
            dt_config_zero_stage(c));
    if (c->data.buckets[0])
        dt_info("buckets of clip shape (frames x height x width: batch, weight): %s",
                c->data.buckets);
    dt_info("matmul peak measured now: %.1f GFLOP/s per rank (%s)", t->peak_flops / 1e9,
            dt_precision_name(c->plugin.precision));
    char kernels[256];
    dt_kernels_describe(kernels, sizeof kernels);
    dt_info("kernel variants on this CPU: %s", kernels);
    bool eval = evaluates(c);
    while (dt_booster_steps_done(t->booster) < c->train.steps) {
        dt_step_stats r;
        DT_TRY(dt_booster_step(t->booster, &r));
        DT_TRY(checkpoint_done(t, -1)); /* the step may have completed an async save */
        double val_loss = NAN;
        bool last = r.step == c->train.steps;
        if (eval && (r.step % c->train.eval_every == 0 || last))
            DT_TRY(dt_booster_eval(t->booster, c->train.eval_batches, &val_loss));
        dt_status st = report(t, &r, val_loss); /* rank 0 writes: the others learn of it */
        DT_TRY(c->train.metrics[0] ? dt_comm_agree(t->world, st) : st);
        DT_TRY(maybe_checkpoint(t, last));
    }
    return finish(t);
}

dt_status dt_train_run(const dt_config *cfg, dt_comm *world, bool *stranded) {
    trainer t = {.cfg = cfg, .world = world, .ckpt_seen = -1};
    /* a negative timeout is left to dt_config_validate's message */
    int timeout = cfg->train.comm_timeout > 0 ? cfg->train.comm_timeout : 0;
    dt_status st = dt_comm_watch_init(&t.watch, timeout, world->rank);
    if (st == DT_OK) {
        world->watch = &t.watch; /* before the booster splits the world into the mesh */
        st = run(&t);
    }
    /* after a timeout no peer can be trusted to take part in anything: end the job, with
     * the watchdog's report whatever failed after it */
    if (t.watch.expired)
        st = dt_err_set(DT_ERR_MPI, "%s", t.watch.report);
    *stranded = st != DT_OK && (t.watch.expired || dt_booster_stranded(t.booster));
    if (t.metrics && fclose(t.metrics) != 0 && st == DT_OK) {
        st = dt_err_set(DT_ERR_IO, "cannot write metrics file %s: %s", cfg->train.metrics,
                        strerror(errno));
        dt_error("%s", dt_err_msg()); /* rank 0 alone: the others have finished */
    }
    dt_booster_free(t.booster);
    dt_bpe_free(t.bpe);
    world->watch = NULL;
    return st;
}

/* ---- one rank's steps, timed ------------------------------------------------------------- */

struct dt_step_timer {
    dt_comm *world;
    dt_booster *booster;
};

void dt_step_timer_free(dt_step_timer *t) {
    if (!t)
        return;
    dt_booster_free(t->booster);
    dt_comm_free(t->world);
    free(t);
}

dt_status dt_step_timer_init(const dt_config *cfg, int world, dt_step_timer **out) {
    *out = NULL;
    dt_step_timer *t = calloc(1, sizeof *t);
    if (!t)
        return dt_err_set(DT_ERR_OOM, "timing a training step: out of memory");
    dt_boost_spec spec = spec_of(cfg);
    spec.val_data = NULL, spec.trace = false, spec.mem_timeline = NULL;
    spec.rebalance_every = 0;
    spec.eot = cfg->data.eot_token; /* a tokenizer's own is left to dtrain train */
    dt_status st = dt_config_validate(cfg);
    if (st == DT_OK)
        st = dt_comm_standin_init("world", 0, world, &t->world);
    if (st == DT_OK)
        st = dt_booster_init(&cfg->plugin, t->world, &t->booster);
    if (st == DT_OK)
        st = dt_booster_boost(t->booster, &spec);
    if (st != DT_OK) {
        dt_step_timer_free(t);
        return st;
    }
    *out = t;
    return DT_OK;
}

dt_status dt_step_timer_run(dt_step_timer *t, dt_step_times *out) {
    dt_step_stats r = {0};
    double t0 = dt_now();
    dt_status st = dt_booster_step(t->booster, &r);
    *out = (dt_step_times){dt_now() - t0, r.data_s, r.optimizer_s};
    return st;
}

const dt_mem *dt_step_timer_mem(const dt_step_timer *t) { return dt_booster_mem(t->booster); }
