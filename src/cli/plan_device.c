/* Devices for `dtrain plan`. See plan_device.h.
 *
 * The presets are the vendors' published figures (NVIDIA A100 and H100 datasheets): memory,
 * dense matrix throughput without sparsity (bf16/fp16 tensor cores; fp32 without TF32), NVLink
 * bandwidth per direction (half the quoted bidirectional figure), and HBM bandwidth. The disk
 * offloaded state (optimizer moments, activations) goes to is assumed to be one NVMe drive at
 * 2 GB/s each way per rank. They
 * describe what a layout would cost on such a device; dtrain itself runs on CPUs.
 *
 * `this` is this machine: here, the cores a rank may use, its threads and the memory per rank;
 * its rates are measured by cli/plan_probe.c (the matmul peaks, a memory copy whose half is a
 * rank's collective bandwidth, since Open MPI copies a message twice through shared memory,
 * and each kernel). The latency (5 us) is a default; the offload disk's rates 1 GB/s unless the
 * probe measures them; no collective hides behind compute (exposed share 1). No MPI is started:
 * `dtrain plan` is one process.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cli/plan_device.h"

#include <ctype.h>
#include <limits.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "kernels/gemm.h"
#include "kernels/gemm_peak.h"

#define GIB ((int64_t)1 << 30)

typedef struct preset {
    const char *name;
    int64_t mem;
    dt_plan_device d;
} preset;

/* What a tuned implementation reaches of the datasheet figures: a large bf16 product (and
 * the dimension at which a product's rate halves, per dimension), a memory-bound kernel, a
 * fused attention kernel (forward, backward).
 * H100: measured on an H200 (the same GH100 compute die, 132 SMs at 1980 MHz under the same
 * 700 W limit; it differs in memory), PyTorch 2.11 with CUDA 13 (cuBLAS and its fused
 * attention), `bench/gpu_rates.py --peak 989e12`, 2026-11-28: bf16 products of m >= 8192
 * rows and n, k >= 1024 fit 0.696 x peak x prod(x / (x + 64)) (7% rms); a 1 GiB copy
 * 4.26 TB/s of the H200's 4.8 (0.89); causal attention at T 4096, heads of 128: forward 0.54
 * and backward 0.33 of the peak.
 * A100 (no such part to measure): calibrated once on the A100 runs of bench/run_calibrate.py
 * (Narayanan et al. 2021, Korthikanti et al. 2022), not per run: of the settings tried
 * (0.80/64, 0.85/32, 0.90/32) the one with the smallest median error; attention 0.50, the
 * low end of the 50-73% of A100's peak FlashAttention-2 reports (Dao 2023). BENCHMARKS.md
 * lists each run's error. */
#define MEM_EFFICIENCY 0.90 /* of HBM bandwidth, for a streaming kernel (both parts) */
#define NODE 8              /* GPUs a node joins by NVLink (DGX A100 and H100) */
/* What a tuned implementation overlaps (Megatron-Core with Transformer Engine, as the
 * Megatron-LM README's 2024 H100 runs: --tp-comm-overlap, --overlap-grad-reduce,
 * --overlap-param-gather); Megatron-LM of 2021-22 did neither (--overlap none) */
#define TUNED_HIDES (DT_PLAN_HIDE_TP | DT_PLAN_HIDE_DP)

static const preset PRESETS[] = {
    /* A100 SXM 80GB: 80 GiB HBM2e at 2039 GB/s; bf16 dense 312 TFLOP/s, fp32 19.5 TFLOP/s;
     * third-generation NVLink 600 GB/s bidirectional; between nodes eight 200 Gb/s HDR
     * InfiniBand adapters a node, 25 GB/s a GPU (Selene, Narayanan et al. 2021 Sec. 5) */
    {"a100-80gb",
     80 * GIB,
     {.flops_fp32 = 19.5e12,
      .flops_16 = 312e12,
      .bandwidth = 300e9,
      .latency = 10e-6,
      .mem_bandwidth = 2039e9,
      .disk_write = 2e9,
      .disk_read = 2e9,
      .attn_16 = {0.50 * 312e12, 0.50 * 312e12},
      .gemm_efficiency = 0.90,
      .gemm_half = 32,
      .mem_efficiency = MEM_EFFICIENCY,
      .node_size = NODE,
      .inter_bandwidth = 25e9,
      .hides = TUNED_HIDES,
      .tp_in_place = true}},
    /* H100 SXM 80GB: 80 GiB HBM3 at 3.35 TB/s; bf16 dense 989 TFLOP/s, fp32 67 TFLOP/s;
     * fourth-generation NVLink 900 GB/s bidirectional; between nodes eight 400 Gb/s NDR
     * InfiniBand adapters a node, 50 GB/s a GPU (DGX H100) */
    {"h100-80gb",
     80 * GIB,
     {.flops_fp32 = 67e12,
      .flops_16 = 989e12,
      .bandwidth = 450e9,
      .latency = 10e-6,
      .mem_bandwidth = 3350e9,
      .disk_write = 2e9,
      .disk_read = 2e9,
      .attn_16 = {0.54 * 989e12, 0.33 * 989e12},
      .gemm_efficiency = 0.70,
      .gemm_half = 64,
      .mem_efficiency = MEM_EFFICIENCY,
      .node_size = NODE,
      .inter_bandwidth = 50e9,
      .hides = TUNED_HIDES,
      .tp_in_place = true}},
};
enum { N_PRESETS = sizeof PRESETS / sizeof PRESETS[0] };

const char *dt_plan_device_names(void) { return "a100-80gb, h100-80gb, this"; }

/* the cores this process may run on (its affinity: taskset and cgroups' cpusets count) */
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 0;
}

static dt_status measure_this(int world, dt_plan_device *d, int64_t *mem) {
    d->latency = 5e-6;
    /* A rank's collectives are copies and sums its own core makes (Open MPI's shared-memory
     * transport, progressed by dt_comm_test inside the compute loops): beside compute they
     * take the compute's core, so none of one hides (dtrain probe measures the share) */
    d->exposed_share = 1;
    d->disk_write = d->disk_read = 1e9; /* measured by the probe where the config offloads */
    d->cores = usable_cores();
    d->threads = omp_get_max_threads(); /* the ranks' OMP_NUM_THREADS, as the planner's */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    *mem = pages > 0 && page > 0 ? (int64_t)pages * page / world : 0;
    return DT_OK;
}

dt_status dt_plan_device_get(const char *name, int world, dt_plan_device *out, int64_t *mem) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(name, PRESETS[i].name) == 0) {
            *out = PRESETS[i].d;
            *mem = PRESETS[i].mem;
            return DT_OK;
        }
    if (strcmp(name, "this") == 0) {
        *out = (dt_plan_device){0}; /* what the measurement leaves: not modelled */
        return measure_this(world, out, mem);
    }
    return dt_err_set(DT_ERR_ARG, "plan: --device %s is not known; use one of %s", name,
                      dt_plan_device_names());
}

static dt_status number(const char *text, const char *what, double *x, const char **rest) {
    char *end;
    *x = strtod(text, &end);
    if (end == text || !(*x >= 0))
        return dt_err_set(DT_ERR_ARG, "plan: %s '%s' does not start with a number", what, text);
    while (isspace((unsigned char)*end))
        end++;
    *rest = end;
    return DT_OK;
}

dt_status dt_plan_parse_size(const char *text, int64_t *bytes) {
    static const char *units[] = {"", "KiB", "MiB", "GiB", "TiB"};
    double x;
    const char *u = "";
    DT_TRY(number(text, "size", &x, &u));
    for (int i = 0; i < 5; i++)
        if (strcmp(u, units[i]) == 0) {
            double b = x * (double)((int64_t)1 << (10 * i));
            if (!(b < 9.2e18))
                return dt_err_set(DT_ERR_ARG, "plan: size '%s' is past 8 EiB", text);
            *bytes = (int64_t)b;
            return DT_OK;
        }
    return dt_err_set(DT_ERR_ARG,
                      "plan: size '%s': the unit must be KiB, MiB, GiB or TiB (or "
                      "none: bytes)",
                      text);
}

dt_status dt_plan_parse_rate(const char *text, double *rate) {
    static const char units[] = "KMGT";
    double x;
    const char *u = "";
    DT_TRY(number(text, "rate", &x, &u));
    if (!*u) {
        *rate = x;
        return DT_OK;
    }
    const char *at = u[1] == '\0' ? strchr(units, u[0]) : NULL;
    if (!at || !*u)
        return dt_err_set(DT_ERR_ARG, "plan: rate '%s': the multiple must be K, M, G or T", text);
    *rate = x;
    for (int i = 0; i <= at - units; i++)
        *rate *= 1e3;
    return DT_OK;
}

dt_status dt_plan_parse_rate2(const char *text, dt_plan_rate2 *r) {
    const char *comma = strchr(text, ',');
    char first[64];
    if (!comma || comma == text || (size_t)(comma - text) >= sizeof first)
        return dt_err_set(DT_ERR_ARG, "plan: '%s' is not two rates 'FORWARD,BACKWARD' (200G,150G)",
                          text);
    memcpy(first, text, (size_t)(comma - text));
    first[comma - text] = '\0';
    DT_TRY(dt_plan_parse_rate(first, &r->fwd));
    return dt_plan_parse_rate(comma + 1, &r->bwd);
}

dt_status dt_plan_add_coll(const char *v, dt_plan_device *d) {
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf)
        return dt_err_set(DT_ERR_ARG, "--coll-bw: '%s' is too long", v);
    int64_t at = 0;
    char *size = strchr(buf, '@');
    if (size) {
        *size++ = '\0';
        if (dt_plan_parse_size(size, &at) != DT_OK || at < 1)
            return dt_err_set(DT_ERR_ARG, "--coll-bw %s: '%s' is not a message size", v, size);
    }
    double r[DT_PLAN_COLL_COUNT];
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    int n = 0;
    for (; tok && n < DT_PLAN_COLL_COUNT; tok = strtok_r(NULL, ",", &save), n++)
        DT_TRY(dt_plan_parse_rate(tok, &r[n]));
    if (n < DT_PLAN_COLL_COUNT || tok)
        return dt_err_set(DT_ERR_ARG,
                          "--coll-bw %s: give five rates, all-reduce, reduce-scatter, "
                          "all-gather, all-to-all, point-to-point (as dtrain probe prints them), "
                          "and after @ the message size they were measured at",
                          v);
    int i = 0;
    while (i < d->n_coll && d->coll_at[i] < (double)at)
        i++;
    bool again = i < d->n_coll && d->coll_at[i] == (double)at;
    if (!again && d->n_coll == DT_PLAN_COLL_SIZES)
        return dt_err_set(DT_ERR_ARG, "--coll-bw: at most %d message sizes", DT_PLAN_COLL_SIZES);
    if (!again) {
        memmove(&d->coll_at[i + 1], &d->coll_at[i], (size_t)(d->n_coll - i) * sizeof d->coll_at[0]);
        memmove(&d->coll[i + 1], &d->coll[i], (size_t)(d->n_coll - i) * sizeof d->coll[0]);
        d->n_coll++;
    }
    d->coll_at[i] = (double)at;
    memcpy(d->coll[i], r, sizeof r);
    return DT_OK;
}

dt_status dt_plan_read_probe(const char *flags, dt_plan_device *d) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", flags) >= (int)sizeof buf)
        return dt_err_set(DT_ERR_ARG, "dtrain probe's flags are too long");
    dt_plan_device got = {.exposed_share = -1};
    char *save = NULL;
    for (char *flag = strtok_r(buf, " \n", &save); flag; flag = strtok_r(NULL, " \n", &save)) {
        char *v = strtok_r(NULL, " \n", &save);
        if (!v)
            return dt_err_set(DT_ERR_ARG, "dtrain probe printed %s without a value", flag);
        if (!strcmp(flag, "--latency"))
            DT_TRY(dt_plan_parse_rate(v, &got.latency));
        else if (!strcmp(flag, "--bandwidth"))
            DT_TRY(dt_plan_parse_rate(v, &got.bandwidth));
        else if (!strcmp(flag, "--coll-bw"))
            DT_TRY(dt_plan_add_coll(v, &got));
        else if (!strcmp(flag, "--exposed-share"))
            got.exposed_share = atof(v);
        else
            return dt_err_set(DT_ERR_ARG, "dtrain probe printed %s, which plan does not read",
                              flag);
    }
    if (!(got.latency > 0 && got.bandwidth > 0 && got.n_coll > 0 && got.exposed_share >= 0))
        return dt_err_set(DT_ERR_ARG, "dtrain probe's flags lack a figure: %s", flags);
    d->latency = got.latency, d->bandwidth = got.bandwidth, d->exposed_share = got.exposed_share;
    d->n_coll = got.n_coll;
    memcpy(d->coll_at, got.coll_at, sizeof d->coll_at);
    memcpy(d->coll, got.coll, sizeof d->coll);
    return DT_OK;
}

static const char *const GEMM_OPS[] = {"fwd", "dx", "dw"};
static const char *const GEMM_PRECISIONS[] = {"fp32", "16bit"};

dt_plan_gemm_shape *dt_plan_gemm_find(dt_plan_gemm_table *t, int lp, int op, int m, int n, int k) {
    for (int i = 0; i < t->n; i++) {
        dt_plan_gemm_shape *s = &t->s[i];
        if (s->lp == lp && s->op == op && s->m == m && s->n == n && s->k == k)
            return s;
    }
    return NULL;
}

double dt_plan_gemm_table_rate(void *ctx, int lp, dt_plan_gemm_op op, double m, double n,
                               double k) {
    dt_plan_gemm_shape *s = dt_plan_gemm_find(ctx, lp, (int)op, (int)m, (int)n, (int)k);
    return s ? s->flops : 0;
}

/* the index of word in names[count], or -1 */
static int word_index(const char *word, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (!strcmp(word, names[i]))
            return i;
    return -1;
}

/* v's comma-separated fields, copied into buf[256], into part[max]; how many (max + 1 when
 * there are more), or -1 when v does not fit */
static int split_fields(const char *v, char *buf, char **part, int max) {
    if (snprintf(buf, 256, "%s", v) >= 256)
        return -1;
    char *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max)
            return max + 1;
        part[n++] = tok;
    }
    return n;
}

/* a whole number in [1, INT_MAX], the whole of s */
static bool positive_int(const char *s, int *out) {
    char *end;
    long x = strtol(s, &end, 10);
    *out = (int)x;
    return *end == '\0' && end != s && x >= 1 && x <= INT_MAX;
}

dt_status dt_plan_add_gemm(const char *v, dt_plan_gemm_table *t) {
    char buf[256], *part[6];
    int n = split_fields(v, buf, part, 6);
    if (n < 0)
        return dt_err_set(DT_ERR_ARG, "--gemm-rate: '%s' is too long", v);
    dt_plan_gemm_shape s = {0};
    int dims[3];
    bool ok = n == 6 && (s.lp = word_index(part[0], GEMM_PRECISIONS, 2)) >= 0 &&
              (s.op = word_index(part[1], GEMM_OPS, 3)) >= 0;
    for (int i = 0; ok && i < 3; i++)
        ok = positive_int(part[2 + i], &dims[i]);
    if (!ok)
        return dt_err_set(DT_ERR_ARG,
                          "--gemm-rate %s: give PRECISION,OP,M,N,K,RATE: fp32 or 16bit, fwd, dx "
                          "or dw, the product's three sizes and its FLOP/s (as --explain's "
                          "\"device\" prints them)",
                          v);
    DT_TRY(dt_plan_parse_rate(part[5], &s.flops));
    s.m = dims[0], s.n = dims[1], s.k = dims[2];
    dt_plan_gemm_shape *had = dt_plan_gemm_find(t, s.lp, s.op, s.m, s.n, s.k);
    if (!had && t->n == DT_PLAN_GEMM_SHAPES)
        return dt_err_set(DT_ERR_ARG, "--gemm-rate: at most %d shapes", DT_PLAN_GEMM_SHAPES);
    *(had ? had : &t->s[t->n++]) = s;
    return DT_OK;
}

dt_status dt_plan_add_attn_seq(const char *v, dt_plan_device *d) {
    char buf[256], *part[4];
    int n = split_fields(v, buf, part, 4);
    if (n < 0)
        return dt_err_set(DT_ERR_ARG, "--attn-seq: '%s' is too long", v);
    dt_plan_attn_seq s = {0};
    if (!(n == 4 && (s.lp = word_index(part[0], GEMM_PRECISIONS, 2)) >= 0 &&
          positive_int(part[1], &s.T)))
        return dt_err_set(DT_ERR_ARG,
                          "--attn-seq %s: give PRECISION,T,FWD,BWD: fp32 or 16bit, the "
                          "sequence's tokens and the attention kernel's FLOP/s forward and "
                          "backward (as --explain's \"device\" prints them)",
                          v);
    DT_TRY(dt_plan_parse_rate(part[2], &s.rate.fwd));
    DT_TRY(dt_plan_parse_rate(part[3], &s.rate.bwd));
    int i = 0;
    while (i < d->n_attn_seq && !(d->attn_seq[i].lp == s.lp && d->attn_seq[i].T == s.T))
        i++;
    if (i == DT_PLAN_ATTN_SEQS)
        return dt_err_set(DT_ERR_ARG, "--attn-seq: at most %d sequences", DT_PLAN_ATTN_SEQS);
    d->attn_seq[i] = s;
    d->n_attn_seq += i == d->n_attn_seq;
    return DT_OK;
}

size_t dt_plan_gemm_flags(const dt_plan_gemm_table *t, char *out, size_t n) {
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < t->n && k < n; i++) {
        const dt_plan_gemm_shape *s = &t->s[i];
        int w =
            snprintf(out + k, n - k, " --gemm-rate %s,%s,%d,%d,%d,%.6g",
                     GEMM_PRECISIONS[s->lp ? 1 : 0], GEMM_OPS[s->op], s->m, s->n, s->k, s->flops);
        k += w > 0 ? (size_t)w : 0;
    }
    return k < n ? k : n - 1;
}
