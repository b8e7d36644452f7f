/* Measuring this machine for `dtrain plan --device this`. See plan_probe.h.
 *
 * Each probe runs the trainer's own kernel on buffers shaped like the model's (so they sit in
 * the same level of the cache as in training) and keeps the best of a few repetitions: the
 * planner wants the rate the kernel reaches when it has the core, as the trainer's steady
 * state does. Buffers are written before timing so each page is the process's own.
 */
#include "cli/plan_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "io/scratch_file.h"
#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_peak.h"
#include "kernels/norm.h"

enum { REPS = 5, MAX_SHAPES = 512 };

static float *filled(int64_t n, float v) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; p && i < n; i++)
        p[i] = v * (float)((i % 7) + 1);
    return p;
}

/* the rows one micro-batch of the config puts through a block (capped: the probe is quick) */
static int probe_rows(const dt_config *c) {
    int per = c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size;
    int64_t rows = (int64_t)(per > 0 ? per : 1) * c->train.seq_len;
    return (int)(rows < 4096 ? rows : 4096);
}

static double best_of(double t[REPS]) {
    double b = t[0];
    for (int i = 1; i < REPS; i++)
        b = t[i] < b ? t[i] : b;
    return b;
}

static dt_status probe_norm(const dt_config *c, dt_plan_rate2 *out) {
    int N = probe_rows(c), C = c->model.n_embd;
    int64_t n = (int64_t)N * C;
    float *x = filled(n, 0.01f), *y = filled(n, 0), *dy = filled(n, 0.001f), *dx = filled(n, 0);
    float *w = filled(C, 1), *b = filled(C, 0), *dw = filled(C, 0), *db = filled(C, 0);
    float *mean = filled(N, 0), *rstd = filled(N, 0);
    if (!x || !y || !dy || !dx || !w || !b || !dw || !db || !mean || !rstd) {
        free(x), free(y), free(dy), free(dx), free(w), free(b), free(dw), free(db), free(mean),
            free(rstd);
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory probing the norms");
    }
    double tf[REPS], tb[REPS];
    bool llama = c->model.arch == DT_ARCH_LLAMA; /* GPT-2 and the DiT: LayerNorm */
    for (int i = 0; i < REPS; i++) {
        double t0 = dt_now();
        if (llama)
            dt_rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f);
        else
            dt_layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
        double t1 = dt_now();
        if (llama)
            dt_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
        else
            dt_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
        tf[i] = t1 - t0, tb[i] = dt_now() - t1;
    }
    out->fwd = (double)n / best_of(tf);
    out->bwd = (double)n / best_of(tb);
    free(x), free(y), free(dy), free(dx), free(w), free(b), free(dw), free(db), free(mean),
        free(rstd);
    return DT_OK;
}

static int ffn_hidden(const dt_model_config *m) {
    if (m->arch != DT_ARCH_LLAMA) /* GPT-2 and the DiT */
        return 4 * m->n_embd;
    return m->ffn_hidden > 0 ? m->ffn_hidden : ((8 * m->n_embd + 2) / 3 + 63) / 64 * 64;
}

static dt_status probe_act(const dt_config *c, dt_plan_rate2 *out) {
    int64_t n = (int64_t)probe_rows(c) * ffn_hidden(&c->model);
    float *x = filled(n, 0.01f), *u = filled(n, 0.02f), *y = filled(n, 0), *dy = filled(n, 0.001f);
    float *dx = filled(n, 0), *du = filled(n, 0);
    if (!x || !u || !y || !dy || !dx || !du) {
        free(x), free(u), free(y), free(dy), free(dx), free(du);
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory probing the activation");
    }
    double tf[REPS], tb[REPS];
    bool gelu = c->model.arch != DT_ARCH_LLAMA;
    for (int i = 0; i < REPS; i++) {
        double t0 = dt_now();
        if (gelu)
            dt_gelu_forward(y, x, n);
        else
            dt_swiglu_forward(y, x, u, n);
        double t1 = dt_now();
        if (gelu)
            dt_gelu_backward(dx, x, dy, n);
        else
            dt_swiglu_backward(dx, du, x, u, dy, n);
        tf[i] = t1 - t0, tb[i] = dt_now() - t1;
    }
    out->fwd = (double)n / best_of(tf);
    out->bwd = (double)n / best_of(tb);
    free(x), free(u), free(y), free(dy), free(dx), free(du);
    return DT_OK;
}

/* The best forward and backward seconds of the attention kernel over one micro-batch's rows
 * cut into sequences of T tokens (all heads, fp32 or bf16 mode), and the FLOPs of its forward
 * as the time model counts them: causal (GPT-2, Llama) 2 T hs a query head and token,
 * non-causal (the DiT) 4 T hs; the backward counts twice that. */
static dt_status time_attention(const dt_config *c, bool bf16, int T, double *fwd_s, double *bwd_s,
                                double *flops) {
    const dt_model_config *m = &c->model;
    bool dit = m->arch == DT_ARCH_DIT;
    int B = probe_rows(c) / T;
    int NH = m->n_head, NKV = m->n_kv_head > 0 ? m->n_kv_head : NH, hs = m->n_embd / NH;
    B = B > 0 ? B : 1;
    int64_t tok = (int64_t)B * T, q_n = tok * NH * hs, kv_n = tok * NKV * hs;
    float *q = filled(q_n, 0.01f), *k = filled(kv_n, 0.02f), *v = filled(kv_n, 0.03f);
    float *y = filled(q_n, 0), *dy = filled(q_n, 0.001f), *lse = filled(tok * NH, 0);
    float *dq = filled(q_n, 0), *dk = filled(kv_n, 0), *dv = filled(kv_n, 0);
    if (!q || !k || !v || !y || !dy || !lse || !dq || !dk || !dv) {
        free(q), free(k), free(v), free(y), free(dy), free(lse), free(dq), free(dk), free(dv);
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory probing attention");
    }
    dt_attn_shape s = {.B = B,
                       .T = T,
                       .NH = NH,
                       .NKV = NKV,
                       .hs = hs,
                       .q_stride = (int64_t)NH * hs,
                       .kv_stride = (int64_t)NKV * hs,
                       .scale = 0.125f,
                       .causal = !dit,
                       .bf16 = bf16};
    double tf[REPS], tb[REPS];
    for (int i = 0; i < REPS; i++) {
        double t0 = dt_now();
        dt_attention_forward(&s, y, lse, q, k, v);
        double t1 = dt_now();
        dt_attention_backward(&s, dq, dk, dv, dy, y, lse, q, k, v);
        tf[i] = t1 - t0, tb[i] = dt_now() - t1;
    }
    *fwd_s = best_of(tf);
    *bwd_s = best_of(tb);
    *flops = (dit ? 4.0 : 2.0) * tok * T * NH * hs;
    free(q), free(k), free(v), free(y), free(dy), free(lse), free(dq), free(dk), free(dv);
    return DT_OK;
}

/* The attention kernel's rates at the sequences the model runs: a GPT's and a full-attention
 * DiT's whole sequence; under spatial_temporal a frame's tokens and a position's frames, whose
 * blocks alternate, as one rate over both (their FLOPs over their seconds). */
static dt_status probe_attention(const dt_config *c, bool bf16, dt_plan_rate2 *out) {
    const dt_model_config *m = &c->model;
    int T[2] = {c->train.seq_len, 0};
    if (m->arch == DT_ARCH_DIT && m->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL) {
        T[0] = (m->height / m->patch_h) * (m->width / m->patch_w);
        T[1] = m->frames / m->patch_t;
    }
    double fwd = 0, bwd = 0, flops = 0;
    for (int i = 0; i < 2 && T[i] > 0; i++) {
        double f = 0, b = 0, n = 0;
        DT_TRY(time_attention(c, bf16, T[i], &f, &b, &n));
        fwd += f, bwd += b, flops += n;
    }
    out->fwd = flops / fwd;
    out->bwd = 2 * flops / bwd;
    return DT_OK;
}

/* ---- matmul rates by shape, measured on first use ---------------------------------------- */

typedef struct shape_rate {
    int lp, m, n, k;
    double flops;
} shape_rate;

struct dt_plan_probe {
    dt_gemm *gemm;
    shape_rate seen[MAX_SHAPES];
    int n_seen;
};

/* dt_plan_gemm_rate for `this`: a linear layer's forward product is x [m, k] by the weight
 * stored [n, k], as dt_linear runs it. 0 (the peak) if the shape cannot be measured. */
static double gemm_rate(void *ctx, int lp, double m, double n, double k) {
    dt_plan_probe *p = ctx;
    shape_rate key = {lp, (int)m, (int)n, (int)k, 0};
    if (key.m < 1 || key.n < 1 || key.k < 1)
        return 0;
    for (int i = 0; i < p->n_seen; i++)
        if (!memcmp(&p->seen[i], &key, 4 * sizeof(int)))
            return p->seen[i].flops;
    dt_gemm_shape s = {
        .M = key.m, .N = key.n, .K = key.k, .trans_b = true, .dtype = lp ? DT_BF16 : DT_F32};
    if (dt_gemm_rate(p->gemm, &s, 0.01, 3, &key.flops) != DT_OK)
        key.flops = 0;
    if (p->n_seen < MAX_SHAPES)
        p->seen[p->n_seen++] = key;
    return key.flops;
}

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

dt_status dt_plan_probe_this(const dt_config *c, dt_plan_device *d, dt_plan_probe **out) {
    *out = NULL;
    DT_TRY(probe_disk(c, d));
    DT_TRY(probe_attention(c, false, &d->attn_fp32));
    DT_TRY(probe_attention(c, true, &d->attn_16));
    DT_TRY(probe_norm(c, &d->norm));
    DT_TRY(probe_act(c, &d->act));
    dt_plan_probe *p = calloc(1, sizeof *p);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory");
    dt_status st = dt_gemm_init(&p->gemm);
    if (st != DT_OK) {
        free(p);
        return st;
    }
    d->gemm_rate = gemm_rate;
    d->gemm_ctx = p;
    *out = p;
    return DT_OK;
}

void dt_plan_probe_free(dt_plan_probe *p) {
    if (!p)
        return;
    dt_gemm_free(p->gemm);
    free(p);
}
