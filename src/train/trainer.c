/* The training loop. See trainer.h.
 *
 * One optimizer step = the global batch split into micro-batches; each micro-batch runs
 * forward, the fused head (loss and its gradient) and backward, accumulating gradients
 * scaled by 1/(B*T) so the step's gradient is that of the mean loss over all its tokens,
 * whatever the micro-batch count. Then global-norm clipping and AdamW.
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
#include "io/atomic.h"
#include "kernels/cast.h"
#include "kernels/gemm_peak.h"
#include "optim/adamw.h"
#include "train/checkpoint.h"
#include "train/loader.h"

typedef struct trainer {
    const dt_config *cfg;
    dt_mem *mem;
    dt_gpt *model;
    dt_adamw *opt;
    dt_loader train, val;
    bool has_val;
    int32_t *inputs, *targets; /* [micro_batch, T] */
    FILE *metrics;
    double peak_flops;
    dt_train_state state;
} trainer;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int micro_batch(const dt_config *c) {
    return c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size;
}

/* ---- set-up ---------------------------------------------------------------------------- */

static dt_status init_weights(trainer *t) {
    const dt_config *c = t->cfg;
    if (c->model.init[0]) {
        DT_TRY(dt_gpt_load(t->model, c->model.init));
        dt_info("weights from %s", c->model.init);
    } else {
        dt_gpt_init_weights(t->model, c->train.seed);
    }
    return DT_OK;
}

static dt_status resume(trainer *t) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    char folder[4096] = "";
    if (!k->resume[0])
        return DT_OK;
    if (strcmp(k->resume, "auto") == 0) {
        DT_TRY(dt_ckpt_latest(k->dir, folder, sizeof folder));
        if (!folder[0]) {
            dt_info("resume=auto: no checkpoint in %s yet, starting from step 0", k->dir);
            return DT_OK;
        }
    } else {
        snprintf(folder, sizeof folder, "%s", k->resume);
    }
    DT_TRY(dt_ckpt_load(folder, t->model, t->opt, &t->state));
    t->train.pos = t->state.data_pos;
    t->train.step = t->state.data_step;
    dt_info("resumed from %s at step %lld", folder, (long long)t->state.step);
    return DT_OK;
}

static dt_status open_outputs(trainer *t) {
    const dt_train_config *tc = &t->cfg->train;
    if (!tc->metrics[0])
        return DT_OK;
    /* a resumed run continues its metrics file; a fresh run starts it over */
    t->metrics = fopen(tc->metrics, t->state.step > 0 ? "a" : "w");
    if (!t->metrics)
        return dt_err_set(DT_ERR_IO, "cannot write metrics file %s: %s", tc->metrics,
                          strerror(errno));
    return DT_OK;
}

static dt_status setup(trainer *t) {
    const dt_config *c = t->cfg;
    int mb = micro_batch(c), T = c->train.seq_len;
    dt_precision prec = c->plugin.precision;
    DT_TRY(dt_mem_init(&t->mem));
    DT_TRY(dt_loader_open(&t->train, c->data.train, c->model.vocab_size, c->train.batch_size, T,
                          c->data.shuffle, c->train.seed));
    if (c->train.eval_every > 0 && c->data.val[0]) {
        DT_TRY(dt_loader_open(&t->val, c->data.val, c->model.vocab_size, mb, T, false, 0));
        t->has_val = true;
    }
    DT_TRY(dt_gpt_init(&c->model, mb, T, prec, true, t->mem, &t->model));
    DT_TRY(init_weights(t));
    DT_TRY(dt_adamw_init(&c->optim, dt_gpt_param(t->model, 0), dt_gpt_n_params(t->model),
                         dt_gpt_numel(t->model), t->mem, &t->opt));
    size_t tok_bytes = (size_t)mb * T * sizeof(int32_t);
    DT_TRY(dt_mem_alloc(t->mem, DT_MEM_ACTS, "batch.inputs", tok_bytes, (void **)&t->inputs));
    DT_TRY(dt_mem_alloc(t->mem, DT_MEM_ACTS, "batch.targets", tok_bytes, (void **)&t->targets));
    t->state.seed = c->train.seed;
    DT_TRY(resume(t));
    DT_TRY(open_outputs(t));
    dt_gemm *peak_gemm = NULL;
    DT_TRY(dt_gemm_init(&peak_gemm));
    dt_status st = dt_gemm_peak_flops(peak_gemm, prec == DT_PREC_BF16 ? DT_BF16 : DT_F32, 0.3,
                                      &t->peak_flops);
    dt_gemm_free(peak_gemm);
    return st;
}

static void teardown(trainer *t) {
    if (t->metrics)
        fclose(t->metrics);
    dt_loader_close(&t->train);
    if (t->has_val)
        dt_loader_close(&t->val);
    dt_adamw_free(t->opt);
    dt_gpt_free(t->model);
    dt_mem_free(t->mem); /* also releases the batch buffers */
}

/* ---- one step -------------------------------------------------------------------------- */

typedef struct step_result {
    double loss, grad_norm, seconds;
    float lr;
} step_result;

static dt_status train_step(trainer *t, step_result *r) {
    const dt_config *c = t->cfg;
    int B = c->train.batch_size, mb = micro_batch(c), T = c->train.seq_len;
    float grad_scale = 1.0f / ((float)B * T);
    double t0 = now(), loss_sum = 0;
    dt_gpt_zero_grad(t->model);
    for (int row = 0; row < B; row += mb) {
        double part;
        dt_loader_rows(&t->train, row, mb, t->inputs, t->targets);
        DT_TRY(dt_gpt_forward(t->model, t->inputs, mb, T));
        DT_TRY(dt_gpt_loss(t->model, t->targets, mb, T, grad_scale, true, &part));
        DT_TRY(dt_gpt_backward(t->model, t->inputs, mb, T));
        loss_sum += part;
    }
    dt_loader_advance(&t->train);
    float *grads = dt_gpt_grads(t->model);
    r->grad_norm = sqrt(dt_sumsq(grads, dt_gpt_numel(t->model)));
    r->lr = dt_lr_at(&c->optim, (int)t->state.step, c->train.steps);
    dt_adamw_step(t->opt, dt_gpt_weights(t->model), grads, dt_gpt_weights_lp(t->model), r->lr,
                  dt_clip_coef(r->grad_norm, c->plugin.grad_clip));
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

static dt_status evaluate(trainer *t, double *val_loss) {
    const dt_config *c = t->cfg;
    int mb = micro_batch(c), T = c->train.seq_len;
    double sum = 0;
    dt_loader_rewind(&t->val);
    for (int i = 0; i < c->train.eval_batches; i++) {
        double part;
        dt_loader_rows(&t->val, 0, mb, t->inputs, t->targets);
        DT_TRY(dt_gpt_forward(t->model, t->inputs, mb, T));
        DT_TRY(dt_gpt_loss(t->model, t->targets, mb, T, 0.0f, false, &part));
        sum += part;
        dt_loader_advance(&t->val);
    }
    *val_loss = sum / ((double)c->train.eval_batches * mb * T);
    return DT_OK;
}

/* ---- reporting ------------------------------------------------------------------------- */

static void report(trainer *t, const step_result *r, double val_loss) {
    const dt_config *c = t->cfg;
    double tokens = (double)c->train.batch_size * c->train.seq_len;
    double tps = tokens / r->seconds;
    double mfu = dt_gpt_flops_per_token(t->model, c->train.seq_len) * tps / t->peak_flops;
    size_t peak = dt_mem_peak_total(t->mem);
    long long step = (long long)t->state.step;
    if (step % c->train.log_every == 0 || step == c->train.steps || !isnan(val_loss))
        dt_info("step %5lld/%d | loss %.4f | lr %.3e | norm %6.3f | %8.0f tok/s | MFU %5.1f%% | "
                "mem %.0f MiB%s", step, c->train.steps, r->loss, r->lr, r->grad_norm, tps,
                100 * mfu, peak / 1048576.0, isnan(val_loss) ? "" : " | val");
    if (!isnan(val_loss))
        dt_info("step %5lld | val loss %.4f", step, val_loss);
    if (!t->metrics)
        return;
    fprintf(t->metrics, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
            "\"tokens_per_s\": %.6g, \"mfu\": %.6g, \"peak_mem_bytes\": %zu, \"step_ms\": %.4g",
            step, r->loss, r->lr, r->grad_norm, tps, mfu, peak, 1e3 * r->seconds);
    if (!isnan(val_loss))
        fprintf(t->metrics, ", \"val_loss\": %.9g", val_loss);
    fputs("}\n", t->metrics);
    fflush(t->metrics);
}

static dt_status maybe_checkpoint(trainer *t, bool last) {
    const dt_checkpoint_config *k = &t->cfg->checkpoint;
    if (k->every <= 0 || (t->state.step % k->every != 0 && !last))
        return DT_OK;
    DT_TRY(dt_ckpt_save(k->dir, t->model, t->opt, &t->state, t->cfg));
    dt_info("checkpoint %s/step-%lld", k->dir, (long long)t->state.step);
    return dt_ckpt_prune(k->dir, k->keep);
}

static dt_status finish(trainer *t) {
    const dt_config *c = t->cfg;
    if (c->train.export_path[0]) {
        DT_TRY(dt_gpt_save(t->model, c->train.export_path));
        dt_info("weights exported to %s", c->train.export_path);
    }
    if (dt_log_rank() == 0)
        dt_mem_print_table(t->mem, stdout);
    if (c->train.mem_report[0])
        DT_TRY(dt_mem_write_json(t->mem, c->train.mem_report));
    int n = c->train.sample_tokens;
    if (n <= 0 || c->model.vocab_size != 256)
        return DT_OK;
    int32_t prompt = '\n', *out = malloc((size_t)n * sizeof *out);
    if (!out)
        return dt_err_set(DT_ERR_OOM, "sample: out of memory");
    dt_status st = dt_sample_tokens(t->model, c->train.seq_len, &prompt, 1, n, 0.8f,
                                    c->train.seed, out);
    if (st == DT_OK) {
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
            "%s | batch %d x %d tokens (micro-batch %d)", dt_arch_name(c->model.arch),
            c->model.n_layer, c->model.n_head, dt_gpt_kv_heads(&c->model), c->model.n_embd,
            c->model.vocab_size, dt_gpt_numel(t->model) / 1e6,
            dt_precision_name(c->plugin.precision), c->train.batch_size, c->train.seq_len,
            micro_batch(c));
    dt_info("matmul peak measured now: %.1f GFLOP/s (%s)", t->peak_flops / 1e9,
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

dt_status dt_train_run(const dt_config *cfg) {
    DT_TRY(dt_config_validate(cfg));
    trainer t = {.cfg = cfg};
    dt_status st = run(&t);
    teardown(&t);
    return st;
}
