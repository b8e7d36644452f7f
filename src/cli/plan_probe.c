/* Measuring this machine for `dtrain plan --device this`. See plan_probe.h.
 *
 * Each probe runs the trainer's own kernel on buffers shaped like the model's (so they sit in
 * the same level of the cache as in training) and keeps the median of a few repetitions: the
 * planner wants the rate the kernel keeps in the trainer's steady state. The ranks of a run
 * on this machine share it, so every kernel is timed by as many copies of this process side
 * by side (cli/plan_crew.h), and the slowest copy's rate is the one a step waits for.
 */
#include "cli/plan_probe.h"

#include "cli/plan_crew.h"
#include "cli/plan_device.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "io/scratch_file.h"
#include "io/tokens.h"
#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_peak.h"
#include "kernels/norm.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "train/trainer.h"

enum { REPS = 5 };

static float *filled(int64_t n, float v) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; p && i < n; i++)
        p[i] = v * (float)((i % 7) + 1);
    return p;
}

/* A kernel's buffers, freed together: up to 10 */
typedef struct bufs {
    void *b[10];
} bufs;

static void bufs_free(void *state) {
    bufs *s = state;
    for (int i = 0; i < 10; i++)
        free(s->b[i]);
    free(s);
}

/* `count` buffers of room for n[i] floats, written so that each page is this process's own
 * (an untouched calloc page maps the one zero page, in cache whatever the size): small
 * values, or zeros (a matmul's operands, as dt_gemm_rate times them) */
static dt_status bufs_of(const int64_t *n, int count, bool zeros, void **state) {
    bufs *s = calloc(1, sizeof *s);
    bool ok = s != NULL;
    for (int i = 0; ok && i < count; i++) {
        int64_t len = n[i] > 0 ? n[i] : 1;
        s->b[i] = filled(len, zeros ? 0 : 0.01f * (float)(i + 1));
        ok = s->b[i] != NULL;
    }
    if (!ok) {
        if (s)
            bufs_free(s);
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory probing a kernel");
    }
    *state = s;
    return DT_OK;
}

/* ---- the kernels the probe times ------------------------------------------------------- */

/* a matrix product, as dt_linear runs it; one dt_gemm a process (a twin makes its own) */
static dt_gemm *proc_gemm;

static dt_status gemm_setup(const void *job, void **state) {
    const dt_gemm_shape *s = job;
    if (!proc_gemm)
        DT_TRY(dt_gemm_init(&proc_gemm));
    int64_t es = (int64_t)dt_dtype_size(s->dtype); /* operands in floats' room: round up */
    int64_t n[3] = {((int64_t)s->M * s->K * es + 3) / 4, ((int64_t)s->K * s->N * es + 3) / 4,
                    (int64_t)s->M * s->N};
    return bufs_of(n, 3, true, state);
}

static dt_status gemm_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    bufs *b = state;
    double t0 = dt_now();
    dt_status st = dt_gemm_run(proc_gemm, job, b->b[0], b->b[1], NULL, b->b[2]);
    secs[0] = dt_now() - t0, secs[1] = 0;
    return st;
}

static const dt_plan_kernel GEMM = {gemm_setup, gemm_once, bufs_free};

/* LayerNorm (GPT-2, the DiT) or RMSNorm (Llama) over N rows of C; bf16: the forward writes
 * the bf16 copy the next product reads, as a GPT's blocks do in 16-bit modes */
typedef struct norm_job {
    int N, C;
    bool rms, bf16;
} norm_job;

static dt_status norm_setup(const void *job, void **state) {
    const norm_job *j = job;
    int64_t n = (int64_t)j->N * j->C;
    int64_t sizes[10] = {n, n, n, n, j->C, j->C, j->C, j->C, j->N, j->N};
    return bufs_of(sizes, 10, false, state);
}

static dt_status norm_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    const norm_job *j = job;
    float **p = (float **)((bufs *)state)->b;
    float *x = p[0], *y = p[1], *dy = p[2], *dx = p[3], *w = p[4], *b = p[5], *dw = p[6];
    float *db = p[7], *mean = p[8], *rstd = p[9];
    dt_bf16 *y16 = (dt_bf16 *)y;
    double t0 = dt_now();
    if (j->rms && j->bf16)
        dt_rmsnorm_forward_bf16(y16, rstd, x, w, j->N, j->C, 1e-5f);
    else if (j->rms)
        dt_rmsnorm_forward(y, rstd, x, w, j->N, j->C, 1e-5f);
    else if (j->bf16)
        dt_layernorm_forward_bf16(y16, mean, rstd, x, w, b, j->N, j->C, 1e-5f);
    else
        dt_layernorm_forward(y, mean, rstd, x, w, b, j->N, j->C, 1e-5f);
    double t1 = dt_now();
    if (j->rms)
        dt_rmsnorm_backward(dx, dw, dy, x, w, rstd, j->N, j->C);
    else
        dt_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, j->N, j->C);
    secs[0] = t1 - t0, secs[1] = dt_now() - t1;
    return DT_OK;
}

static const dt_plan_kernel NORM = {norm_setup, norm_once, bufs_free};

/* the MLP activation over n elements, GELU or SwiGLU (Llama), as the model runs it: a GPT's
 * backward sets its gradient (bf16: from the bf16 copies, writing the bf16 copy of the
 * output), the DiT's adds to it in fp32 in every mode */
typedef struct act_job {
    int64_t n;
    bool gelu, bf16, adds;
} act_job;

static dt_status act_setup(const void *job, void **state) {
    int64_t n = ((const act_job *)job)->n;
    int64_t sizes[6] = {n, n, n, n, n, n};
    return bufs_of(sizes, 6, false, state);
}

static dt_status act_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    const act_job *j = job;
    float **p = (float **)((bufs *)state)->b;
    float *x = p[0], *u = p[1], *y = p[2], *dy = p[3], *dx = p[4], *du = p[5];
    dt_bf16 *x16 = (dt_bf16 *)x, *u16 = (dt_bf16 *)u, *y16 = (dt_bf16 *)y;
    double t0 = dt_now();
    if (j->bf16 && j->gelu)
        dt_gelu_forward_bf16(y16, x16, j->n);
    else if (j->bf16)
        dt_swiglu_forward_bf16(y16, x16, u16, j->n);
    else if (j->gelu)
        dt_gelu_forward(y, x, j->n);
    else
        dt_swiglu_forward(y, x, u, j->n);
    double t1 = dt_now();
    if (j->bf16 && j->gelu)
        dt_gelu_backward_bf16_set(dx, x16, dy, j->n);
    else if (j->bf16)
        dt_swiglu_backward_bf16_set(dx, du, x16, u16, dy, j->n);
    else if (j->gelu && j->adds)
        dt_gelu_backward(dx, x, dy, j->n);
    else if (j->gelu)
        dt_gelu_backward_set(dx, x, dy, j->n);
    else
        dt_swiglu_backward_set(dx, du, x, u, dy, j->n);
    secs[0] = t1 - t0, secs[1] = dt_now() - t1;
    return DT_OK;
}

static const dt_plan_kernel ACT = {act_setup, act_once, bufs_free};

/* the attention kernel over B sequences of T tokens, reading q|k|v from one [tokens, W]
 * buffer (W = (NH + 2 NKV) hs: the qkv product's rows) and writing the gradients into one
 * such buffer, as the blocks do; bf16_copies: from 16-bit copies of q|k|v, writing y's,
 * as a GPT's block in 16-bit modes (the DiT passes fp32 rows in bf16 mode) */
typedef struct attn_job {
    dt_attn_shape s;
    bool bf16_copies;
} attn_job;

static dt_status attn_setup(const void *job, void **state) {
    const dt_attn_shape *s = &((const attn_job *)job)->s;
    int64_t tok = (int64_t)s->B * s->T, y = tok * s->NH * s->hs, qkv = tok * s->q_stride;
    /* qkv, y, dy, lse, dqkv, and their 16-bit copies (qkv16, y16) in fp32-sized buffers */
    int64_t sizes[7] = {qkv, y, y, tok * s->NH, qkv, qkv, y};
    return bufs_of(sizes, 7, false, state);
}

static dt_status attn_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    const attn_job *j = job;
    const dt_attn_shape *s = &j->s;
    float **p = (float **)((bufs *)state)->b;
    float *qkv = p[0], *y = p[1], *dy = p[2], *lse = p[3], *dq = p[4];
    const uint16_t *q16 = (const uint16_t *)p[5];
    void *y16 = p[6];
    int64_t ko = (int64_t)s->NH * s->hs, vo = ko + (int64_t)s->NKV * s->hs;
    dt_status st = DT_OK;
    double t0 = dt_now();
    if (j->bf16_copies)
        st = dt_attention_forward_bf16(s, y16, true, lse, q16, q16 + ko, q16 + vo);
    else
        dt_attention_forward(s, y, lse, qkv, qkv + ko, qkv + vo);
    double t1 = dt_now();
    if (st == DT_OK && j->bf16_copies)
        st = dt_attention_backward_set_bf16(s, dq, dq + ko, dq + vo, dy, y16, true, lse, q16,
                                            q16 + ko, q16 + vo);
    else if (st == DT_OK)
        dt_attention_backward_set(s, dq, dq + ko, dq + vo, dy, y, lse, qkv, qkv + ko, qkv + vo);
    secs[0] = t1 - t0, secs[1] = dt_now() - t1;
    return st;
}

static const dt_plan_kernel ATTN = {attn_setup, attn_once, bufs_free};

/* a copy of `bytes`: the rate memory-bound passes stream at */
static dt_status copy_setup(const void *job, void **state) {
    int64_t n = (*(const int64_t *)job + 3) / 4;
    int64_t sizes[2] = {n, n};
    return bufs_of(sizes, 2, true, state);
}

static dt_status copy_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    bufs *b = state;
    double t0 = dt_now();
    memcpy(b->b[1], b->b[0], (size_t) * (const int64_t *)job);
    secs[0] = dt_now() - t0, secs[1] = 0;
    return DT_OK;
}

static const dt_plan_kernel COPY = {copy_setup, copy_once, bufs_free};

/* ---- the model's rates ------------------------------------------------------------------ */

struct dt_plan_probe {
    dt_plan_crew *crew;
    /* the measured step's configs, made before the crew forks, so every copy holds them at
     * the same address (a step job carries the pointer): the config's own layout as one rank
     * of own_world ranks, and one rank's share of the batch (where that layout cannot be
     * timed) */
    dt_config own, one;
    int own_world;
    char tokens[DT_PATH_MAX]; /* a made-up token shard the probe deletes; "": none */
    dt_plan_gemm_table seen;  /* the products timed so far, by shape */
};

static dt_status gemm_flops(dt_plan_probe *p, dt_gemm_shape s, double seconds, int reps,
                            double *flops) {
    double secs[DT_PLAN_PARTS];
    DT_TRY(dt_plan_crew_time(p->crew, &GEMM, &s, sizeof s, reps, seconds, secs));
    *flops = 2.0 * s.M * s.N * s.K / secs[0];
    return DT_OK;
}

/* the rows one micro-batch of the config puts through a block (capped: the probe is quick) */
static int probe_rows(const dt_config *c) {
    int per = c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size;
    int64_t rows = (int64_t)(per > 0 ? per : 1) * c->train.seq_len;
    return (int)(rows < 4096 ? rows : 4096);
}

static dt_status probe_norm(dt_plan_probe *p, const dt_config *c, bool lp, dt_plan_rate2 *out) {
    const dt_model_config *m = &c->model;
    norm_job j = {probe_rows(c), m->n_embd, m->arch == DT_ARCH_LLAMA, lp && m->arch != DT_ARCH_DIT};
    double secs[DT_PLAN_PARTS], n = (double)j.N * j.C;
    DT_TRY(dt_plan_crew_time(p->crew, &NORM, &j, sizeof j, REPS, 0, secs));
    *out = (dt_plan_rate2){n / secs[0], n / secs[1]};
    return DT_OK;
}

static int ffn_hidden(const dt_model_config *m) {
    if (m->arch != DT_ARCH_LLAMA) /* GPT-2 and the DiT */
        return 4 * m->n_embd;
    return m->ffn_hidden > 0 ? m->ffn_hidden : ((8 * m->n_embd + 2) / 3 + 63) / 64 * 64;
}

static dt_status probe_act(dt_plan_probe *p, const dt_config *c, bool lp, dt_plan_rate2 *out) {
    const dt_model_config *m = &c->model;
    bool dit = m->arch == DT_ARCH_DIT;
    act_job j = {(int64_t)probe_rows(c) * ffn_hidden(m), m->arch != DT_ARCH_LLAMA, lp && !dit, dit};
    double secs[DT_PLAN_PARTS];
    DT_TRY(dt_plan_crew_time(p->crew, &ACT, &j, sizeof j, REPS, 0, secs));
    *out = (dt_plan_rate2){(double)j.n / secs[0], (double)j.n / secs[1]};
    return DT_OK;
}

/* The forward and backward seconds of the attention kernel over one micro-batch's rows
 * cut into sequences of T tokens (all heads, fp32 or bf16 mode), and the FLOPs of its forward
 * as the time model counts them: causal (GPT-2, Llama) 2 T hs a query head and token,
 * non-causal (the DiT) 4 T hs; the backward counts twice that. */
static dt_status time_attention(dt_plan_probe *p, const dt_config *c, bool bf16, int T,
                                double secs[DT_PLAN_PARTS], double *flops) {
    const dt_model_config *m = &c->model;
    bool dit = m->arch == DT_ARCH_DIT;
    int B = probe_rows(c) / T;
    int NH = m->n_head, NKV = m->n_kv_head > 0 ? m->n_kv_head : NH, hs = m->n_embd / NH;
    int64_t W = (int64_t)(NH + 2 * NKV) * hs;
    attn_job j = {.s = {.B = B > 0 ? B : 1,
                        .T = T,
                        .NH = NH,
                        .NKV = NKV,
                        .hs = hs,
                        .q_stride = W,
                        .kv_stride = W,
                        .scale = 0.125f,
                        .causal = !dit,
                        .bf16 = bf16},
                  .bf16_copies = bf16 && !dit};
    DT_TRY(dt_plan_crew_time(p->crew, &ATTN, &j, sizeof j, REPS, 0, secs));
    *flops = (dit ? 4.0 : 2.0) * j.s.B * T * T * NH * hs;
    return DT_OK;
}

/* The attention kernel's rates at the sequences the model runs, each into d->attn_seq: a
 * GPT's and a full-attention DiT's whole sequence; under spatial_temporal a frame's tokens and
 * a position's frames, whose blocks alternate; and over them all (their FLOPs over their
 * seconds) as *out, for a sequence the table lacks. */
static dt_status probe_attention(dt_plan_probe *p, const dt_config *c, bool bf16, dt_plan_device *d,
                                 dt_plan_rate2 *out) {
    const dt_model_config *m = &c->model;
    int T[2] = {c->train.seq_len, 0};
    if (m->arch == DT_ARCH_DIT && m->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL) {
        T[0] = (m->height / m->patch_h) * (m->width / m->patch_w);
        T[1] = m->frames / m->patch_t;
    }
    double fwd = 0, bwd = 0, flops = 0;
    for (int i = 0; i < 2 && T[i] > 0; i++) {
        double secs[DT_PLAN_PARTS], n = 0;
        DT_TRY(time_attention(p, c, bf16, T[i], secs, &n));
        fwd += secs[0], bwd += secs[1], flops += n;
        if (d->n_attn_seq < DT_PLAN_ATTN_SEQS)
            d->attn_seq[d->n_attn_seq++] =
                (dt_plan_attn_seq){bf16, T[i], {n / secs[0], 2 * n / secs[1]}};
    }
    out->fwd = flops / fwd;
    out->bwd = 2 * flops / bwd;
    return DT_OK;
}

/* ---- the measured step ----------------------------------------------------------------- */

/* A training step of one rank (train/trainer.h's step timer), after STEP_WARMUP untimed ones
 * (first touches of the arenas, oneDNN's kernels made): STEP_REPS of them, and as many more
 * as fill STEP_MIN_SECONDS, since a shared VM's pace flips every second or two and a ratio
 * from nine 0.1 s steps caught one pace (a DiT's ranged 0.86-1.09 over six plans). */
enum { STEP_WARMUP = 2, STEP_REPS = 9 };
static const double STEP_MAX_SECONDS = 1.0, STEP_MIN_SECONDS = 2.0;

typedef struct step_job {
    const dt_config *c; /* the probe's `own` or `one`, the same address in every copy */
    int world;
} step_job;

static dt_status step_setup(const void *job, void **state) {
    const step_job *j = job;
    dt_step_timer *t;
    DT_TRY(dt_step_timer_init(j->c, j->world, &t));
    dt_step_times secs;
    dt_status st = DT_OK;
    for (int i = 0; i < STEP_WARMUP && st == DT_OK; i++)
        st = dt_step_timer_run(t, &secs);
    if (st != DT_OK) {
        dt_step_timer_free(t);
        return st;
    }
    *state = t;
    return DT_OK;
}

/* the step, and of it the reading of its rows and the update */
static dt_status step_once(const void *job, void *state, double secs[DT_PLAN_PARTS]) {
    (void)job;
    dt_step_times t;
    DT_TRY(dt_step_timer_run(state, &t));
    secs[0] = t.seconds, secs[1] = t.data_s, secs[2] = t.optimizer_s;
    return DT_OK;
}

static void step_free(void *state) { dt_step_timer_free(state); }

static const dt_plan_kernel STEP = {step_setup, step_once, step_free};

/* c trained for timing: no files, no evaluation, a schedule that never ends */
static void timing_only(dt_config *c) {
    c->train.steps = 1 << 30;
    c->train.eval_every = 0;
    c->train.trace[0] = c->train.metrics[0] = c->train.mem_timeline[0] = '\0';
    c->train.export_path[0] = c->train.mem_report[0] = '\0';
    c->train.rebalance_every = 0;
    c->data.val[0] = '\0';
    c->checkpoint.every = 0;
    c->checkpoint.resume[0] = '\0';
}

/* c's model, data and optimizer trained by one rank on its share of the batch as world ranks
 * of data parallelism would give it, in c's precision and recomputation; everything else of
 * the plugin (the layout, offload) at its default */
static dt_config one_rank_config(const dt_config *c, int world) {
    dt_config one, def;
    dt_config_defaults(&def);
    one = *c;
    one.plugin = def.plugin;
    one.plugin.precision = c->plugin.precision;
    one.plugin.grad_clip = c->plugin.grad_clip;
    one.plugin.ac = c->plugin.ac;
    one.plugin.ac_every = c->plugin.ac_every;
    one.plugin.act_compress = c->plugin.act_compress;
    int share = c->train.batch_size / (world > 0 ? world : 1);
    one.train.batch_size = share > 0 ? share : 1;
    one.train.micro_batch_size = 0;
    timing_only(&one);
    return one;
}

/* c's own layout without its pipeline, as one rank of *own_world (world / pp) ranks: its
 * tensor, sequence and context splits, ZeRO stage and micro-batches, whose ranks run the
 * products, norms, copies and shard passes at their own shapes. A pipeline stage runs a
 * data-parallel rank's shapes, and its waits are the schedule's, which a rank alone cannot
 * show. Offload stays off: the disk's rates are timed apart. */
static dt_config own_rank_config(const dt_config *c, int world, int *own_world) {
    dt_config own = *c, def;
    dt_config_defaults(&def);
    int pp = c->plugin.pp_size > 1 ? c->plugin.pp_size : 1;
    *own_world = world % pp == 0 ? world / pp : 0;
    own.plugin.pp_size = 1;
    snprintf(own.plugin.pp_layers, sizeof own.plugin.pp_layers, "%s", def.plugin.pp_layers);
    snprintf(own.plugin.pp_schedule, sizeof own.plugin.pp_schedule, "%s", def.plugin.pp_schedule);
    own.plugin.pp_chunks = def.plugin.pp_chunks;
    own.plugin.offload = def.plugin.offload;
    own.plugin.act_offload = def.plugin.act_offload;
    timing_only(&own);
    return own;
}

/* A token source the steps can read: the config's own shard where it opens, else a shard of
 * made-up ids in the temporary folder (a step's time does not depend on which ids it reads;
 * a plan needs no data), deleted with the probe. */
static dt_status step_tokens(dt_plan_probe *p) {
    dt_config *one = &p->one;
    dt_tokens t;
    if (one->data.source != DT_SOURCE_TOKENS ||
        dt_tokens_open(one->data.train, one->model.vocab_size, &t) == DT_OK) {
        if (one->data.source == DT_SOURCE_TOKENS)
            dt_tokens_close(&t);
        return DT_OK;
    }
    dt_err_clear();
    const char *dir = getenv("TMPDIR");
    snprintf(p->tokens, sizeof p->tokens, "%s/dtrain-plan-tokens.XXXXXX",
             dir && *dir ? dir : "/tmp");
    int fd = mkstemp(p->tokens);
    if (fd < 0) {
        p->tokens[0] = '\0';
        return DT_OK; /* the step then fails to open its data, and the ratio stays 1 */
    }
    close(fd);
    int64_t n = (int64_t)one->train.batch_size * one->train.seq_len * 16 + 1;
    bool wide = one->model.vocab_size > 65536;
    void *ids = malloc((size_t)n * (wide ? 4 : 2));
    if (!ids)
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory for %lld tokens",
                          (long long)n);
    for (int64_t i = 0; i < n; i++) { /* spread over the vocabulary, as text's ids are */
        uint32_t id = (uint32_t)((uint64_t)i * 2654435761u % (uint64_t)one->model.vocab_size);
        if (wide)
            ((uint32_t *)ids)[i] = id;
        else
            ((uint16_t *)ids)[i] = (uint16_t)id;
    }
    dt_status st =
        wide ? dt_tokens_write_u32(p->tokens, ids, n) : dt_tokens_write(p->tokens, ids, n);
    free(ids);
    DT_TRY(st);
    snprintf(one->data.train, sizeof one->data.train, "%s", p->tokens);
    snprintf(p->own.data.train, sizeof p->own.data.train, "%s", p->tokens);
    return DT_OK;
}

/* Whether the probe can train rank 0 of c on `world` ranks for a few steps: the layout splits
 * there, its memory is a small share of the machine's for every copy, and a step is predicted
 * quick (*t: that step). */
static bool step_affordable(const dt_config *c, int world, const dt_plan_device *d, int copies,
                            dt_plan_time *t) {
    double machine = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    dt_plan_mem m;
    bool ok = world > 0 && dt_plan_memory(c, world, 0, &(dt_plan_mem_opts){0}, &m) == DT_OK &&
              (double)m.total * copies < 0.25 * machine &&
              dt_plan_step_time(c, world, d, NULL, t) == DT_OK && t->step_s < STEP_MAX_SECONDS;
    dt_err_clear();
    return ok;
}

/* dt_plan_gemm_rate for `this`: each product with its operands stored as dt_linear keeps
 * them (the forward reads the weight [n, k] transposed, the input gradient dy [m, k] by the
 * weight [k, n], the weight gradient dy [k, m] transposed by x [k, n]); measured on first
 * use. 0 (the peak) if the shape cannot be measured. */
static double gemm_rate(void *ctx, int lp, dt_plan_gemm_op op, double m, double n, double k) {
    dt_plan_probe *p = ctx;
    dt_plan_gemm_shape key = {lp, (int)op, (int)m, (int)n, (int)k, 0};
    if (key.m < 1 || key.n < 1 || key.k < 1)
        return 0;
    const dt_plan_gemm_shape *had = dt_plan_gemm_find(&p->seen, lp, key.op, key.m, key.n, key.k);
    if (had)
        return had->flops;
    dt_gemm_shape s = {.M = key.m,
                       .N = key.n,
                       .K = key.k,
                       .trans_a = op == DT_PLAN_GEMM_DW,
                       .trans_b = op == DT_PLAN_GEMM_FWD,
                       .dtype = lp ? DT_BF16 : DT_F32};
    if (gemm_flops(p, s, 0.01, REPS, &key.flops) != DT_OK)
        key.flops = 0;
    if (p->seen.n < DT_PLAN_GEMM_SHAPES)
        p->seen.s[p->seen.n++] = key;
    return key.flops;
}

const dt_plan_gemm_table *dt_plan_probe_gemms(const dt_plan_probe *p) { return &p->seen; }

/* The offload folder's sustained rates: DISK_PROBE bytes written in 8 MiB records as the
 * spill thread writes them, then fdatasync (so the disk's rate counts, not the page cache's);
 * read back after the pages are dropped from the cache. In the folder of plugin.act_offload
 * (else plugin.offload), and only when the config offloads to disk: a plan never makes a
 * folder the user did not ask for. */
enum { DISK_PROBE = 64 << 20, DISK_RECORD = 8 << 20 };

static dt_status probe_disk(const dt_config *c, dt_plan_device *d) {
    const dt_plugin_config *p = &c->plugin;
    bool acts = p->act_offload == DT_OFFLOAD_DISK;
    if (!acts && p->offload != DT_OFFLOAD_DISK)
        return DT_OK;
    dt_scratch_spec spec = {.dir = acts ? p->act_offload_dir : p->offload_dir,
                            .key = acts ? "plugin.act_offload_dir" : "plugin.offload_dir",
                            .name = "dtrain-probe",
                            .what = "the disk probe",
                            .bytes = DISK_PROBE};
    char path[4200];
    int fd;
    DT_TRY(dt_scratch_open(&spec, &fd, path, sizeof path));
    char *buf = malloc(DISK_RECORD);
    int code = buf ? 0 : ENOMEM;
    int64_t at = 0;
    if (buf)
        memset(buf, 0x5a, DISK_RECORD);
    double t0 = dt_now();
    for (int64_t o = 0; code == 0 && o < DISK_PROBE; o += DISK_RECORD)
        code = dt_scratch_transfer(fd, buf, DISK_RECORD, o, true, &at);
    if (code == 0 && fdatasync(fd) != 0)
        code = errno;
    double t1 = dt_now();
    if (code == 0)
        posix_fadvise(fd, 0, DISK_PROBE, POSIX_FADV_DONTNEED);
    double t2 = dt_now();
    for (int64_t o = 0; code == 0 && o < DISK_PROBE; o += DISK_RECORD)
        code = dt_scratch_transfer(fd, buf, DISK_RECORD, o, false, &at);
    double t3 = dt_now();
    close(fd);
    free(buf);
    if (code != 0)
        return dt_err_set(DT_ERR_IO,
                          "plan: device this: probing the disk under %s failed at "
                          "byte %lld: %s",
                          spec.dir, (long long)at, dt_scratch_failure(code, true));
    d->disk_write = DISK_PROBE / (t1 - t0 > 1e-9 ? t1 - t0 : 1e-9);
    d->disk_read = DISK_PROBE / (t3 - t2 > 1e-9 ? t3 - t2 : 1e-9);
    return DT_OK;
}

/* bytes/s a copy of `bytes` reads and writes (twice its size a second) */
static dt_status copy_rate(dt_plan_probe *p, int64_t bytes, double *rate) {
    double secs[DT_PLAN_PARTS];
    DT_TRY(dt_plan_crew_time(p->crew, &COPY, &bytes, sizeof bytes, REPS, 0, secs));
    *rate = 2.0 * (double)bytes / secs[0];
    return DT_OK;
}

/* The matmul peaks MFU is counted against; memory's rate from a copy far larger than the
 * caches (the optimizer's state), a rank's collective bandwidth from it where dtrain probe gave
 * none (Open MPI copies a message into a shared segment and out: a copy's size a second,
 * halved); and the rate of a pass over the largest of a block's activation tensors (the MLP's
 * hidden) at the probe's rows, which stay in cache on most CPUs. */
static dt_status probe_machine(dt_plan_probe *p, const dt_config *c, dt_plan_device *d) {
    DT_TRY(gemm_flops(p, dt_gemm_peak_shape(DT_F32), 0.3, 1, &d->flops_fp32));
    DT_TRY(gemm_flops(p, dt_gemm_peak_shape(DT_BF16), 0.3, 1, &d->flops_16));
    DT_TRY(copy_rate(p, (int64_t)64 << 20, &d->mem_bandwidth));
    if (d->n_coll == 0) /* dtrain probe did not run (or failed): the copy's guess */
        d->bandwidth = d->mem_bandwidth / 4;
    int64_t act = (int64_t)probe_rows(c) * ffn_hidden(&c->model) * 4;
    DT_TRY(copy_rate(p, act, &d->act_bandwidth));
    d->act_bytes = (double)act;
    return DT_OK;
}

/* d without the cost of any collective or message: the time model's step of a stand-in rank,
 * whose calls move nothing */
static dt_plan_device without_comm(const dt_plan_device *d) {
    dt_plan_device f = *d;
    f.latency = 0;
    f.bandwidth = f.inter_bandwidth = 1e30;
    f.n_coll = 0;
    f.exposed_share = 0;
    f.step_ratio = 0;
    return f;
}

/* From a training step of one rank, timed: d->data_rate (its rows over the seconds it read
 * them), d->opt_bandwidth (the update's bytes, as the time model counts them, over its
 * seconds) and d->step_ratio (the rest of the step over the time model's compute of it, on
 * d's rates just measured, its calls free): the rank of the config's own layout where it can
 * be afforded, else one rank's share of the batch. Left at 0 (data free, the optimizer at
 * memory's rate, ratio 1) where neither can be trained here (its data missing, say): the
 * kernels' sum stands, and --show-device says so. */
static dt_status probe_step(dt_plan_probe *p, dt_plan_device *d) {
    d->step_ratio = d->data_rate = d->opt_bandwidth = 0;
    int copies = dt_plan_crew_size(p->crew);
    dt_plan_device free_comm = without_comm(d);
    dt_plan_time t;
    step_job j = {&p->own, p->own_world};
    if (!step_affordable(j.c, j.world, &free_comm, copies, &t)) {
        j = (step_job){&p->one, 1};
        if (!step_affordable(j.c, j.world, &free_comm, copies, &t))
            return DT_OK;
    }
    double secs[DT_PLAN_PARTS];
    dt_layout lay;
    if (dt_plan_crew_time(p->crew, &STEP, &j, sizeof j, STEP_REPS, STEP_MIN_SECONDS, secs) !=
            DT_OK ||
        dt_layout_make(j.c, j.world, 0, &lay) != DT_OK) {
        dt_warn("plan: device this: a measured training step failed (%s); the step time is "
                "the kernels' sum alone",
                dt_err_msg());
        return DT_OK;
    }
    double compute = secs[0] - secs[1] - secs[2];
    if (!(secs[1] > 0 && secs[2] > 0 && compute > 0 && t.optimizer_s > 0 && t.data_s == 0))
        return DT_OK; /* a clock too coarse for the parts: the kernels' sum stands */
    d->data_rate = lay.rows / secs[1];
    d->opt_bandwidth = d->mem_bandwidth * t.optimizer_s / secs[2];
    d->step_ratio = compute / (t.step_s - t.optimizer_s);
    return DT_OK;
}

/* ---- the collectives, measured by dtrain probe under mpirun ----------------------------- */

/* the message sizes (MiB) dtrain probe times: from a small tensor-parallel activation to a
 * gradient bucket's share */
static const char PROBE_MIB[] = "0.25,1,4,16";

/* Runs argv with its stdout read into out (at most n - 1 bytes), stderr to /dev/null;
 * the exit status, or -1 when it could not start. */
static int run_capture(char *const argv[], char *out, size_t n) {
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    extern char **environ;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t got = 0;
    ssize_t k;
    char rest[512]; /* past n - 1 bytes the output is read and dropped: the child never blocks */
    while (rc == 0 && (k = got < n - 1 ? read(fds[0], out + got, n - 1 - got)
                                       : read(fds[0], rest, sizeof rest)) > 0)
        got += got < n - 1 ? (size_t)k : 0;
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    if (rc != 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The run's ranks on this machine meet in MPI collectives, which a copy's rate says little
 * of (Open MPI's non-blocking forms, which the trainer waits on, run at a third to a half of
 * it, and some at large messages far below): so `ranks` ranks of dtrain probe, started by
 * mpirun as a run's are, time each kind at PROBE_MIB's sizes. Where mpirun cannot (not on
 * the path, refused), a warning, and the copy's guess stands. */
static void probe_collectives(int ranks, dt_plan_device *d) {
    char exe[4096], np[16], out[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        dt_warn("plan: device this: cannot find this program to run dtrain probe (%s); the "
                "collectives are guessed from a memory copy",
                strerror(errno));
        return;
    }
    exe[n] = '\0';
    snprintf(np, sizeof np, "%d", ranks);
    char *argv[] = {"mpirun", "--oversubscribe", "-np", np, exe, "probe",
                    "--mib",  (char *)PROBE_MIB, NULL};
    int rc = run_capture(argv, out, sizeof out);
    if (rc != 0 || dt_plan_read_probe(out, d) != DT_OK)
        dt_warn("plan: device this: `mpirun --oversubscribe -np %d dtrain probe --mib %s` %s; "
                "the collectives are guessed from a memory copy (run it by hand to see why, and "
                "give its flags to plan)",
                ranks, PROBE_MIB,
                rc < 0 ? "did not start"
                : rc   ? "failed"
                       : "printed no flags");
}

dt_status dt_plan_probe_this(const dt_config *c, int copies, int step_world, dt_plan_device *d,
                             dt_plan_probe **out) {
    *out = NULL;
    dt_plan_probe *p = calloc(1, sizeof *p);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory");
    dt_status st = DT_OK;
    if (step_world > 0) {
        p->own = own_rank_config(c, step_world, &p->own_world);
        p->one = one_rank_config(c, step_world);
        st = step_tokens(p);
    }
    int threads = d->threads > 0 ? d->threads : 1;
    int room = d->cores > 0 ? d->cores / threads : 1;
    int side_by_side = copies < room ? copies : room;
    /* before the crew: its twins and its pinning of this process (which mpirun and, unbound,
     * its ranks would inherit) stay out of the ranks' way */
    if (st == DT_OK && step_world > 1 && side_by_side > 1)
        probe_collectives(side_by_side, d);
    if (st == DT_OK)
        st = dt_plan_crew_start(side_by_side, threads, &p->crew);
    if (st == DT_OK)
        st = probe_machine(p, c, d);
    if (st == DT_OK)
        st = probe_disk(c, d);
    d->n_attn_seq = 0;
    for (int lp = 0; lp < 2 && st == DT_OK; lp++) { /* fp32, then 16-bit modes */
        st = probe_attention(p, c, lp, d, lp ? &d->attn_16 : &d->attn_fp32);
        if (st == DT_OK)
            st = probe_norm(p, c, lp, lp ? &d->norm_16 : &d->norm);
        if (st == DT_OK)
            st = probe_act(p, c, lp, lp ? &d->act_16 : &d->act);
    }
    if (st == DT_OK) {
        d->gemm_rate = gemm_rate;
        d->gemm_ctx = p;
    }
    if (st == DT_OK && step_world > 0)
        st = probe_step(p, d);
    if (st != DT_OK) {
        dt_plan_probe_free(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

void dt_plan_probe_free(dt_plan_probe *p) {
    if (!p)
        return;
    dt_plan_crew_stop(p->crew);
    if (p->tokens[0])
        unlink(p->tokens);
    dt_gemm_free(proc_gemm);
    proc_gemm = NULL;
    free(p);
}
