/* `dtrain plan`: the layouts of a model on N ranks, ranked.
 *
 *   dtrain plan --config FILE --world N [--mem SIZE] [--device NAME] [--flops F]
 *               [--bandwidth B] [--top K] [--json] [--section.key=value ...]
 *   dtrain plan ... --explain [--rank R]    the layout as given, on one rank: one JSON line
 *   dtrain plan --device this --show-device  the measured figures, as flags to reuse
 *
 * Every layout dtrain can run on N ranks (dp, tp, pp with each schedule, sp and its mode,
 * ZeRO stage, activation checkpointing, precision, micro-batches, activation compression,
 * optimizer offload) is checked with dtrain's own rules (dt_mesh_infer, dt_model_check_split,
 * dt_config_validate, the schedule validator), its memory predicted on every pipeline stage
 * (plan/memory.h) and its step time (plan/cost.h), and the layouts that fit in --mem are
 * ranked by step time (ties: less memory). Single process, no MPI.
 */
#include "cli/plan_cmd.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/plan_auto.h"
#include "cli/plan_device.h"
#include "cli/plan_probe.h"
#include "cli/plan_search.h"
#include "core/buckets.h"
#include "core/log.h"
#include "io/atomic.h"
#include "plan/comm.h"
#include "plan/cost.h"
#include "plan/layout.h"
#include "plan/memory.h"

static int usage(void) {
    dt_error(
        "usage: dtrain plan --config FILE --world N [--mem SIZE] [--device NAME] "
        "[--flops F] [--flops16 F] [--bandwidth B] [--mem-bandwidth B] [--latency S] "
        "[--attn F,B] [--attn16 F,B] [--norm F,B] [--act F,B] [--norm16 F,B] [--act16 F,B] "
        "[--act-bandwidth F --act-bytes SIZE] [--disk W,R] "
        "[--coll-bw AR,RS,AG,A2A,P2P[@SIZE] ...] [--exposed-share F] [--overlap tp,dp|none] "
        "[--attn-seq PRECISION,T,F,B ...] [--step-ratio F] [--data-rate R] [--opt-bandwidth B] "
        "[--gemm-rate PRECISION,OP,M,N,K,F ...] "
        "[--top K] [--json] "
        "[--explain [--rank R]] [--show-device] [--no-probe] "
        "[--section.key=value ...]\n"
        "  SIZE: bytes or with KiB/MiB/GiB/TiB; F, B: numbers with K/M/G/T (312T, 200G)\n"
        "  --flops sets both matmul rates, --flops16 the bf16/fp16 one (either turns off "
        "--device this's matmul rates by shape); --attn/--attn16: the attention kernel's "
        "FLOP/s forward,backward (--attn-seq: over sequences of T tokens); --norm/--act: "
        "elements/s forward,backward (--norm16/--act16: "
        "in 16-bit modes); --mem-bandwidth: bytes/s read and written; --act-bandwidth: the "
        "same for a pass over at most --act-bytes (what stays in cache); --disk: bytes/s "
        "written and read to offload files (this probes the offload folder's); --coll-bw, "
        "--exposed-share: what dtrain probe measured under mpirun; --overlap: what the "
        "device's software hides that dtrain's CPU runtime does not (tp: tensor-parallel "
        "collectives behind their products; dp: gradient reductions under a pipeline and "
        "the gather of the update; the GPU presets: tp,dp); --step-ratio: a measured step over "
        "the modelled one, scaling every pass (this: one rank's step of the model, trained "
        "now); --data-rate: rows of the batch a rank's data source reads or makes a second "
        "(this: in that step; 0: free); --opt-bandwidth: bytes/s the optimizer's update "
        "streams at (this: in that step); --gemm-rate: a product's FLOP/s at one shape "
        "(fp32|16bit, fwd|dx|dw, its sizes), where it differs from the peak; --show-device "
        "prints the device's figures as "
        "these flags after its name, with the products timed so far (this: the config's "
        "layout's; --explain's \"device\": those its plan timed); --device this --no-probe: "
        "this machine's cores and memory with those figures, nothing measured\n"
        "  devices: %s",
        dt_plan_device_names());
    return 2;
}

/* One candidate: its config, its predictions. */
/* ---- output ------------------------------------------------------------------------------ */

/* dt_plan_device.hides as --overlap takes it */
static const char *hides_name(unsigned hides) {
    bool tp = hides & DT_PLAN_HIDE_TP, dp = hides & DT_PLAN_HIDE_DP;
    return tp && dp ? "tp,dp" : tp ? "tp" : dp ? "dp" : "none";
}

static void layout_text(const dt_plan_cand *x, char *buf, size_t n) {
    const dt_plugin_config *p = &x->c.plugin;
    size_t k = (size_t)snprintf(buf, n, "dp%d", x->dp);
    if (p->tp_size > 1)
        k += (size_t)snprintf(buf + k, n - k, " tp%d%s", p->tp_size,
                              p->sp_mode == DT_SP_SPLIT_GATHER ? "+sp" : "");
    if (p->sp_size > 1)
        k += (size_t)snprintf(buf + k, n - k, " ulysses%d", p->sp_size);
    if (p->cp_size > 1)
        k += (size_t)snprintf(buf + k, n - k, " ring%d%s", p->cp_size,
                              p->cp_split == DT_CP_CONTIGUOUS ? "c" : "");
    if (p->pp_size > 1)
        k += (size_t)snprintf(buf + k, n - k, " pp%d %s", p->pp_size, p->pp_schedule);
    if (p->pp_size > 1 && p->pp_layers[0])
        k += (size_t)snprintf(buf + k, n - k, " [%.40s]", p->pp_layers);
    dt_layout l[DT_MAX_BUCKETS]; /* a candidate is a layout that runs: its split is the layout's */
    int mb = 0, n_mb = 0, n_buckets = 0, world = x->dp * dt_cli_plan_replica_ranks(p);
    bool made = dt_layout_make_buckets(&x->c, world, 0, l, &n_buckets) == DT_OK && n_buckets;
    if (!made) {
        n_buckets = 0;
        made = dt_layout_make(&x->c, world, 0, &l[0]) == DT_OK;
    }
    if (made && l[0].pp_scatter)
        k += (size_t)snprintf(buf + k, n - k, " scatter");
    if (n_buckets) {
        k += (size_t)snprintf(buf + k, n - k, " mb");
        for (int b = 0; b < n_buckets; b++) /* each bucket's micro-batch, its count alike */
            k += (size_t)snprintf(buf + k, n - k, "%s%d", b ? "/" : "", l[b].mb);
        k += (size_t)snprintf(buf + k, n - k, " x%d", l[0].n_mb);
    } else {
        if (made)
            mb = l[0].mb, n_mb = l[0].n_mb;
        k += (size_t)snprintf(buf + k, n - k, " mb%d x%d", mb, n_mb);
    }
    if (dt_config_zero_stage(&x->c))
        k += (size_t)snprintf(buf + k, n - k, " z%d", dt_config_zero_stage(&x->c));
    if (p->ac != DT_AC_NONE)
        k += (size_t)snprintf(buf + k, n - k, " ac=%s", dt_ac_mode_name(p->ac));
    if (p->ac != DT_AC_NONE && p->ac_every > 1)
        k += (size_t)snprintf(buf + k, n - k, "/%d", p->ac_every);
    if (p->act_compress)
        k += (size_t)snprintf(buf + k, n - k, " int8");
    if (p->offload)
        k += (size_t)snprintf(buf + k, n - k, " offload");
    if (p->act_offload)
        k += (size_t)snprintf(buf + k, n - k, " act-disk");
    snprintf(buf + k, n - k, " %s", dt_precision_name(p->precision));
}

static double gib(int64_t b) { return b / 1073741824.0; }

static void print_table(const dt_plan_cand *v, int n, int top, int64_t mem, const dt_config *base) {
    int64_t largest = 0; /* GiB columns, or MiB when every row shown is under 1 GiB */
    for (int i = 0; i < n && i < top; i++)
        largest = v[i].total > largest ? v[i].total : largest;
    double unit = largest >= ((int64_t)1 << 30) ? 1073741824.0 : 1048576.0;
    const char *unit_name = unit > 1048576.0 ? "GiB" : "MiB";
    printf("%4s  %-52s %8s %8s %8s %8s %8s %8s %9s %4s %10s %10s\n", "rank", "layout", "params",
           "grads", "optim", "acts", "comm", "temp", "total", "fits", "step ms", "tokens/s");
    int shown = 0;
    for (int i = 0; i < n && shown < top; i++, shown++) {
        const dt_plan_cand *x = &v[i];
        char lay[160];
        layout_text(x, lay, sizeof lay);
        double tps = dt_plan_step_tokens(base) / x->step_s;
        char r[16] = "-";
        if (x->fits)
            snprintf(r, sizeof r, "%d", i + 1);
        printf("%4s  %-52s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %4s %10.3f %10.0f\n", r, lay,
               x->cat[DT_MEM_PARAMS] / unit, x->cat[DT_MEM_GRADS] / unit,
               x->cat[DT_MEM_OPTIM] / unit, x->cat[DT_MEM_ACTS] / unit, x->cat[DT_MEM_COMM] / unit,
               x->cat[DT_MEM_TEMP] / unit, x->total / unit, x->fits ? "yes" : "no", 1e3 * x->step_s,
               tps);
    }
    printf("memory in %s per rank (the largest pipeline stage); budget %.2f GiB\n", unit_name,
           gib(mem));
}

/* One JSON line; `extra` (may be "") goes inside the object, after "rank". */
static void print_one(const dt_plan_cand *x, int rank, const char *extra) {
    const dt_plugin_config *p = &x->c.plugin;
    printf(
        "{\"layout\": {\"dp\": %d, \"plugin.tp_size\": %d, \"plugin.sp_size\": %d, "
        "\"plugin.pp_size\": %d, \"plugin.sp_mode\": \"%s\", \"plugin.pp_schedule\": "
        "\"%s\", \"plugin.pp_chunks\": %d, \"plugin.pp_layers\": \"%s\", \"plugin.type\": \"%s\", "
        "\"plugin.zero_stage\": %d, \"plugin.ac\": \"%s\", \"plugin.ac_every\": %d, "
        "\"plugin.precision\": \"%s\", "
        "\"plugin.microbatches\": %d, \"train.micro_batch_size\": %d, "
        "\"plugin.act_compress\": \"%s\", \"plugin.offload\": \"%s\", "
        "\"plugin.act_offload\": \"%s\", \"plugin.cp_size\": %d, "
        "\"plugin.cp_split\": \"%s\", \"plugin.pp_scatter\": %s}, \"predicted\": {",
        x->dp, p->tp_size, p->sp_size, p->pp_size, dt_sp_mode_name(p->sp_mode), p->pp_schedule,
        p->pp_chunks, p->pp_layers, dt_plugin_type_name(p->type), p->zero_stage,
        dt_ac_mode_name(p->ac), p->ac_every, dt_precision_name(p->precision), p->microbatches,
        x->c.train.micro_batch_size, dt_act_compress_name(p->act_compress),
        dt_offload_name(p->offload), dt_offload_name(p->act_offload), p->cp_size,
        dt_cp_split_name(p->cp_split), p->pp_scatter ? "true" : "false");
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)
        printf("\"%s\": %lld, ", dt_mem_cat_name(k), (long long)x->cat[k]);
    printf("\"total\": %lld, \"step_ms\": %.3f}, \"fits\": %s, \"rank\": %d%s}\n",
           (long long)x->total, 1e3 * x->step_s, x->fits ? "true" : "false", rank, extra);
}

static void print_json(const dt_plan_cand *v, int n, int top) {
    for (int i = 0; i < n && i < top; i++)
        print_one(&v[i], v[i].fits ? i + 1 : 0, "");
}

static void print_nothing_fits(const dt_plan_cands *l, int64_t mem, const dt_config *base,
                               int world) {
    const dt_plan_cand *best = l->seen ? &l->smallest : NULL;
    if (!best) { /* say why: the layout as configured, else plain data parallelism */
        dt_schedule *own;
        dt_status st = dt_cli_plan_check_layout(base, world, NULL, false, &own);
        dt_sched_free(own);
        if (st != DT_OK) {
            dt_error("no layout of this model runs on %d ranks; as configured: %s", world,
                     dt_err_msg());
            return;
        }
        dt_config dp = *base;
        dp.plugin.tp_size = dp.plugin.sp_size = dp.plugin.pp_size = dp.plugin.cp_size = 1;
        dp.plugin.microbatches = 0;
        dt_plan_mem m;
        st = dt_cli_plan_check_layout(&dp, world, NULL, false, &own);
        dt_sched_free(own);
        if (st == DT_OK)
            st = dt_plan_memory(&dp, world, 0, NULL, &m);
        dt_error("no layout of this model runs on %d ranks%s%s", world,
                 st != DT_OK ? "; with data parallelism alone: " : "",
                 st != DT_OK ? dt_err_msg() : "");
        return;
    }
    char lay[160];
    layout_text(best, lay, sizeof lay);
    dt_error("no layout fits in %.1f GiB; the smallest needs %.1f GiB: %s", gib(mem),
             gib(best->total), lay);
}

enum { DEVICE_FLAGS = 1024 + DT_PLAN_COLL_SIZES * 96 + DT_PLAN_GEMM_SHAPES * 64 };

/* The device as the flags that give it again without measuring, its name first (--show-device, and
 * --explain's "device": a plan on `this` can be repeated, or compared with another's figures),
 * with the matmul rates by shape it has given so far (gemms; NULL: none). out: DEVICE_FLAGS
 * bytes. */
static void device_flags(const char *name, const dt_plan_device *d, int64_t mem,
                         const dt_plan_gemm_table *gemms, char *out) {
    size_t n = DEVICE_FLAGS;
    int k = snprintf(out, n, "--device %s%s ", name, strcmp(name, "this") ? "" : " --no-probe");
    k += snprintf(out + k, n - (size_t)k,
                  "--flops %.6g --flops16 %.6g --bandwidth %.6g --mem-bandwidth %.6g "
                  "--latency %.6g --mem %lld",
                  d->flops_fp32, d->flops_16, d->bandwidth, d->mem_bandwidth, d->latency,
                  (long long)mem);
    const dt_plan_rate2 *r[] = {&d->attn_fp32, &d->attn_16, &d->norm,
                                &d->act,       &d->norm_16, &d->act_16};
    const char *flag[] = {"--attn", "--attn16", "--norm", "--act", "--norm16", "--act16"};
    for (int i = 0; i < 6; i++)
        if (r[i]->fwd > 0 && r[i]->bwd > 0)
            k += snprintf(out + k, n - (size_t)k, " %s %.6g,%.6g", flag[i], r[i]->fwd, r[i]->bwd);
    for (int i = 0; i < d->n_attn_seq; i++)
        k += snprintf(out + k, n - (size_t)k, " --attn-seq %s,%d,%.6g,%.6g",
                      d->attn_seq[i].lp ? "16bit" : "fp32", d->attn_seq[i].T,
                      d->attn_seq[i].rate.fwd, d->attn_seq[i].rate.bwd);
    if (d->act_bandwidth > 0)
        k += snprintf(out + k, n - (size_t)k, " --act-bandwidth %.6g --act-bytes %.0f",
                      d->act_bandwidth, d->act_bytes);
    k += snprintf(out + k, n - (size_t)k, " --disk %.6g,%.6g", d->disk_write, d->disk_read);
    for (int i = 0; i < d->n_coll; i++) {
        const double *c = d->coll[i];
        k += snprintf(out + k, n - (size_t)k, " --coll-bw %.6g,%.6g,%.6g,%.6g,%.6g", c[0], c[1],
                      c[2], c[3], c[4]);
        if (d->coll_at[i] > 0)
            k += snprintf(out + k, n - (size_t)k, "@%.0f", d->coll_at[i]);
    }
    if (d->n_coll > 0)
        k += snprintf(out + k, n - (size_t)k, " --exposed-share %.6g", d->exposed_share);
    k += snprintf(out + k, n - (size_t)k, " --overlap %s", hides_name(d->hides));
    if (d->step_ratio > 0)
        k += snprintf(out + k, n - (size_t)k, " --step-ratio %.6g", d->step_ratio);
    if (d->data_rate > 0)
        k += snprintf(out + k, n - (size_t)k, " --data-rate %.6g", d->data_rate);
    if (d->opt_bandwidth > 0)
        k += snprintf(out + k, n - (size_t)k, " --opt-bandwidth %.6g", d->opt_bandwidth);
    if (gemms)
        dt_plan_gemm_flags(gemms, out + k, n - (size_t)k);
}

/* Each bucket of clip shape alone on the rank: its clip, batch, share of the steps, memory,
 * step time and bytes per comm, as "buckets": [...]; returns the characters written. */
static int explain_buckets(const dt_config *c, const dt_buckets *bk, int world, int rank,
                           const dt_plan_device *dev, const dt_schedule *sched, char *out,
                           size_t n) {
    double sum = 0;
    for (int k = 0; k < bk->n; k++)
        sum += bk->b[k].weight;
    size_t used = (size_t)snprintf(out, n, ", \"buckets\": [");
    for (int k = 0; k < bk->n && used < n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk->b[k]);
        dt_plan_mem m;
        dt_plan_time t;
        dt_plan_comm b = {0};
        dt_plan_mem_opts o = {.schedule = sched};
        if (dt_plan_memory(&ck, world, rank, &o, &m) != DT_OK ||
            dt_plan_step_time(&ck, world, dev, sched, &t) != DT_OK ||
            dt_plan_comm_bytes(&ck, world, rank, sched, &b) != DT_OK)
            continue; /* the run's own prediction has checked every bucket */
        used += (size_t)snprintf(
            out + used, n - used,
            "%s{\"clip\": [%d, %d, %d], \"batch\": %d, \"share\": %.4f, \"tokens\": %d, "
            "\"total\": %lld, \"step_ms\": %.3f, \"comm_bytes_tp\": %lld, "
            "\"comm_bytes_sp\": %lld, \"comm_bytes_pp\": %lld, \"comm_bytes_cp\": %lld}",
            k ? ", " : "", bk->b[k].frames, bk->b[k].height, bk->b[k].width, bk->b[k].batch,
            bk->b[k].weight / sum, ck.train.seq_len, (long long)m.total, 1e3 * t.step_s,
            (long long)b.tp, (long long)b.sp, (long long)b.pp, (long long)b.cp);
    }
    if (used < n)
        used += (size_t)snprintf(out + used, n - used, "]");
    return used < n ? (int)used : (int)n - 1;
}

/* A pipeline's stages, each its ranks' part of the step, as "stage" (the explained rank's)
 * and "stages": [...]; returns the characters written. */
static int explain_stages(const dt_plan_stage_time *st, int pp, int mine, char *out, size_t n) {
    int k = snprintf(out, n, ", \"stage\": %d, \"stages\": [", mine);
    for (int r = 0; r < pp; r++)
        k += snprintf(out + k, n - (size_t)k,
                      "%s{\"compute_ms\": %.3f, \"idle_ms\": %.3f, \"exposed_comm_ms\": %.3f, "
                      "\"optimizer_ms\": %.3f}",
                      r ? ", " : "", 1e3 * st[r].compute_s, 1e3 * st[r].idle_s, 1e3 * st[r].comm_s,
                      1e3 * st[r].optimizer_s);
    return k + snprintf(out + k, n - (size_t)k, "]");
}

/* --explain: the configuration's own layout on one rank, memory, time and bytes per comm. */
static int explain(const dt_config *c, int world, int rank, const char *device,
                   const dt_plan_device *dev, const dt_plan_gemm_table *gemms, int64_t mem) {
    dt_schedule *sched = NULL; /* a file: schedule is read as the run reads it */
    dt_status st = DT_OK;
    if (c->plugin.pp_size > 1 && strncmp(c->plugin.pp_schedule, "file:", 5) == 0) {
        char *text = NULL;
        st = dt_read_text(c->plugin.pp_schedule + 5, "pipeline schedule", 16 << 20, &text);
        if (st == DT_OK)
            st = dt_sched_parse(text, &sched);
        free(text);
    }
    dt_config resolved = *c;
    if (st == DT_OK)
        st = dt_cli_plan_resolve_auto(&resolved, world, dev);
    c = &resolved;
    dt_schedule *own = NULL;
    if (st == DT_OK)
        st = dt_cli_plan_check_layout(c, world, sched, false, &own);
    if (own)
        sched = own;
    dt_plan_mem m;
    dt_plan_time t;
    dt_plan_stage_time stages[DT_MAX_CHUNKS];
    dt_plan_mem_opts o = {.schedule = sched};
    if (st == DT_OK)
        st = dt_plan_memory(c, world, rank, &o, &m);
    if (st == DT_OK)
        st = dt_plan_step_time_stages(c, world, dev, sched, &t, stages);
    if (st != DT_OK) {
        dt_sched_free(sched);
        dt_error("%s", dt_err_msg());
        return 2;
    }
    dt_plan_cand x = {.c = *c,
                      .dp = world / dt_cli_plan_replica_ranks(&c->plugin),
                      .total = m.total,
                      .step_s = t.step_s,
                      .fits = m.total <= mem};
    memcpy(x.cat, m.cat, sizeof x.cat);
    /* model FLOPs utilisation: the step's model FLOPs (no reruns) against every rank's
     * datasheet or measured matmul peak for the run's precision over the predicted step */
    double peak = c->plugin.precision == DT_PREC_FP32 ? dev->flops_fp32 : dev->flops_16;
    double mfu = t.step_s > 0 && peak > 0 ? dt_plan_step_flops(c) / (t.step_s * world * peak) : 0;
    char extra[900 + DT_MAX_BUCKETS * 320 + DT_MAX_CHUNKS * 160 + DEVICE_FLAGS + 16],
        flags[DEVICE_FLAGS];
    int k = snprintf(extra, sizeof extra,
                     ", \"of_rank\": %d, \"n_slots\": %d, \"n_inbox\": %d, \"n_grads\": %d, "
                     "\"local_floats\": %lld, \"compute_ms\": %.3f, \"exposed_comm_ms\": %.3f, "
                     "\"bubble\": %.4f, \"step_gflop\": %.3f, \"mfu\": %.4f, "
                     "\"block_bytes_per_token_hidden\": %.2f, \"overlap\": \"%s\"",
                     rank, m.n_slots, m.n_inbox, m.n_grads, (long long)m.n_local, 1e3 * t.compute_s,
                     1e3 * t.comm_s, t.bubble, dt_plan_step_flops(c) / 1e9, mfu,
                     m.block_bytes_per_token_hidden, hides_name(dev->hides));
    if (dev->step_ratio > 0) /* the measured step over the modelled one, scaling its passes */
        k += snprintf(extra + k, sizeof extra - (size_t)k, ", \"step_ratio\": %.4f",
                      dev->step_ratio);
    k +=
        snprintf(extra + k, sizeof extra - (size_t)k, ", \"data_ms\": %.3f, \"optimizer_ms\": %.3f",
                 1e3 * t.data_s, 1e3 * t.optimizer_s);
    if (c->plugin.pp_size > 1)
        k += explain_stages(stages, c->plugin.pp_size, m.pp_rank, extra + k,
                            sizeof extra - (size_t)k);
    if (t.cores_s > 0) /* ranks sharing too few cores: their CPU time over the cores */
        k += snprintf(extra + k, sizeof extra - (size_t)k, ", \"cores_ms\": %.3f", 1e3 * t.cores_s);
    if (m.act_disk_file > 0)
        k += snprintf(extra + k, sizeof extra - (size_t)k,
                      ", \"act_disk_record_bytes\": %lld, \"act_disk_file_bytes\": %lld, "
                      "\"act_disk_exposed_ms\": %.3f, \"disk_write_mb_s\": %.1f, "
                      "\"disk_read_mb_s\": %.1f",
                      (long long)m.act_disk_record, (long long)m.act_disk_file, 1e3 * t.act_disk_s,
                      dev->disk_write / 1e6, dev->disk_read / 1e6);
    if (c->data.doc_mask) /* the attention's share of tiles with documents of doc_len */
        k +=
            snprintf(extra + k, sizeof extra - (size_t)k, ", \"doc_len\": %d, \"attn_share\": %.4f",
                     c->data.doc_len, dt_plan_doc_attn_share(c->train.seq_len, c->data.doc_len));
    dt_buckets bk = {0};
    if (c->model.arch == DT_ARCH_DIT && dt_config_buckets(c, &bk) == DT_OK && bk.n)
        k += explain_buckets(c, &bk, world, rank, dev, sched, extra + k, sizeof extra - (size_t)k);
    dt_plan_comm b;
    if (!bk.n && dt_plan_comm_bytes(c, world, rank, sched, &b) == DT_OK) {
        k += snprintf(extra + k, sizeof extra - (size_t)k,
                      ", \"comm_bytes_tp\": %lld, "
                      "\"comm_bytes_sp\": %lld, \"comm_bytes_pp\": %lld, "
                      "\"comm_bytes_cp\": %lld",
                      (long long)b.tp, (long long)b.sp, (long long)b.pp, (long long)b.cp);
        if (b.grad_known) /* not for ZeRO-3 under a pipeline */
            k += snprintf(extra + k, sizeof extra - (size_t)k, ", \"comm_bytes_grad\": %lld",
                          (long long)b.grad);
    }
    /* last: every product this plan timed is in gemms by now */
    device_flags(device, dev, mem, gemms, flags); /* numbers and flag names: nothing to escape */
    snprintf(extra + k, sizeof extra - (size_t)k, ", \"device\": \"%s\"", flags);
    dt_sched_free(sched);
    print_one(&x, 0, extra);
    return 0;
}

/* ---- arguments ----------------------------------------------------------------------------- */

typedef struct args {
    dt_config cfg;
    dt_plan_pins pinned;
    int world, top, rank;
    bool json, explain;
    const char *device;
    double flops, flops16, bandwidth, mem_bandwidth, latency;
    dt_plan_rate2 attn, attn16, norm, act, disk; /* disk: write, read bytes/s */
    dt_plan_rate2 norm16, act16;
    double act_bandwidth;
    int64_t act_bytes;
    dt_plan_device probed;    /* --coll-bw's table of rates by size (n_coll 0: not given) */
    double exposed_share;     /* dtrain probe's (-1: not given) */
    int hides;                /* --overlap (-1: not given) */
    double step_ratio;        /* --step-ratio (0: not given) */
    double data_rate;         /* --data-rate (0: not given) */
    double opt_bandwidth;     /* --opt-bandwidth (0: not given) */
    dt_plan_gemm_table gemms; /* --gemm-rate's matmul rates by shape (n 0: not given) */
    bool no_probe;            /* --device this --no-probe: its rates from the flags alone */
    bool show_device;
    int64_t mem;
} args;

static bool to_int(const char *flag, const char *v, int *out) {
    int64_t x;
    if (!dt_cli_int(flag, v, 1, 1 << 20, &x))
        return false;
    *out = (int)x;
    return true;
}

/* --overlap: "none", or "tp", "dp" joined by commas (dt_plan_device.hides) */
static bool parse_hides(const char *v, int *hides) {
    *hides = 0;
    if (!strcmp(v, "none"))
        return true;
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 2 && !strncmp(p, "tp", 2))
            *hides |= DT_PLAN_HIDE_TP;
        else if (n == 2 && !strncmp(p, "dp", 2))
            *hides |= DT_PLAN_HIDE_DP;
        else
            return dt_err_set(DT_ERR_ARG, "--overlap %s: give tp, dp, tp,dp or none", v), false;
        p += n + (p[n] == ',');
    }
    return *hides != 0 || (dt_err_set(DT_ERR_ARG, "--overlap: give tp, dp, tp,dp or none"), false);
}

static bool to_index(const char *flag, const char *v, int *out) {
    int64_t x;
    if (!dt_cli_int(flag, v, 0, 1 << 20, &x))
        return false;
    *out = (int)x;
    return true;
}

/* --mem: bytes with a unit, more than none and at most 1 PiB a rank */
static bool to_mem(const char *v, int64_t *out) {
    if (dt_plan_parse_size(v, out) != DT_OK)
        return false;
    if (*out < 1 || *out > ((int64_t)1 << 50)) {
        dt_err_set(DT_ERR_ARG,
                   "--mem %s: a rank's memory must be more than 0 and at most "
                   "1 PiB",
                   v);
        return false;
    }
    return true;
}

/* a rate flag: more than 0 a second, finite */
static bool to_rate(const char *flag, const char *v, double *out) {
    if (dt_plan_parse_rate(v, out) != DT_OK)
        return false;
    if (!(*out > 0) || !isfinite(*out)) {
        dt_err_set(DT_ERR_ARG, "%s %s: a rate must be more than 0", flag, v);
        return false;
    }
    return true;
}

static int parse(int argc, char **argv, args *a) {
    const char *v;
    dt_status st;
    for (int i = 2; i < argc; i++) /* the file first, so overrides win wherever they stand */
        if ((v = dt_cli_option(argc, argv, &i, "--config"))) {
            if ((st = dt_config_load_file(&a->cfg, v)) != DT_OK) {
                dt_error("%s", dt_err_msg());
                return 2;
            }
        }
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        if (dt_cli_option(argc, argv, &i, "--config"))
            continue;
        if ((v = dt_cli_option(argc, argv, &i, "--world")))
            ok = to_int("--world", v, &a->world);
        else if ((v = dt_cli_option(argc, argv, &i, "--top")))
            ok = to_int("--top", v, &a->top);
        else if ((v = dt_cli_option(argc, argv, &i, "--mem")))
            ok = to_mem(v, &a->mem);
        else if ((v = dt_cli_option(argc, argv, &i, "--flops")))
            ok = to_rate("--flops", v, &a->flops);
        else if ((v = dt_cli_option(argc, argv, &i, "--flops16")))
            ok = to_rate("--flops16", v, &a->flops16);
        else if ((v = dt_cli_option(argc, argv, &i, "--bandwidth")))
            ok = to_rate("--bandwidth", v, &a->bandwidth);
        else if ((v = dt_cli_option(argc, argv, &i, "--mem-bandwidth")))
            ok = to_rate("--mem-bandwidth", v, &a->mem_bandwidth);
        else if ((v = dt_cli_option(argc, argv, &i, "--latency")))
            ok = to_rate("--latency", v, &a->latency);
        else if ((v = dt_cli_option(argc, argv, &i, "--attn")))
            ok = dt_plan_parse_rate2(v, &a->attn) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--attn16")))
            ok = dt_plan_parse_rate2(v, &a->attn16) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--norm")))
            ok = dt_plan_parse_rate2(v, &a->norm) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--act")))
            ok = dt_plan_parse_rate2(v, &a->act) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--norm16")))
            ok = dt_plan_parse_rate2(v, &a->norm16) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--act16")))
            ok = dt_plan_parse_rate2(v, &a->act16) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--act-bandwidth")))
            ok = to_rate("--act-bandwidth", v, &a->act_bandwidth);
        else if ((v = dt_cli_option(argc, argv, &i, "--act-bytes")))
            ok = dt_plan_parse_size(v, &a->act_bytes) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--disk")))
            ok = dt_plan_parse_rate2(v, &a->disk) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--coll-bw")))
            ok = dt_plan_add_coll(v, &a->probed) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--exposed-share")))
            ok = dt_cli_real("--exposed-share", v, 0, 2, &a->exposed_share);
        else if ((v = dt_cli_option(argc, argv, &i, "--overlap")))
            ok = parse_hides(v, &a->hides);
        else if ((v = dt_cli_option(argc, argv, &i, "--step-ratio")))
            ok = dt_cli_real("--step-ratio", v, 0.1, 10, &a->step_ratio);
        else if ((v = dt_cli_option(argc, argv, &i, "--attn-seq")))
            ok = dt_plan_add_attn_seq(v, &a->probed) == DT_OK;
        else if ((v = dt_cli_option(argc, argv, &i, "--data-rate")))
            ok = to_rate("--data-rate", v, &a->data_rate);
        else if ((v = dt_cli_option(argc, argv, &i, "--opt-bandwidth")))
            ok = to_rate("--opt-bandwidth", v, &a->opt_bandwidth);
        else if ((v = dt_cli_option(argc, argv, &i, "--gemm-rate")))
            ok = dt_plan_add_gemm(v, &a->gemms) == DT_OK;
        else if (!strcmp(argv[i], "--show-device"))
            a->show_device = true;
        else if (!strcmp(argv[i], "--no-probe"))
            a->no_probe = true;
        else if ((v = dt_cli_option(argc, argv, &i, "--device")))
            a->device = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--rank")))
            ok = to_index("--rank", v, &a->rank);
        else if (!strcmp(argv[i], "--json"))
            a->json = true;
        else if (!strcmp(argv[i], "--explain"))
            a->explain = true;
        else if (strncmp(argv[i], "--", 2) == 0 && strchr(argv[i], '.')) {
            ok = dt_config_set(&a->cfg, argv[i] + 2) == DT_OK;
            bool pin = !strncmp(argv[i], "--plugin.", 9) || !strncmp(argv[i], "--train.", 8);
            if (ok && pin && a->pinned.n < DT_PLAN_MAX_PINS)
                a->pinned.set[a->pinned.n++] = argv[i] + 2;
        } else {
            static const char *const with_value[] = {
                "--config",    "--world",         "--top",           "--mem",
                "--flops",     "--flops16",       "--bandwidth",     "--mem-bandwidth",
                "--latency",   "--attn",          "--attn16",        "--norm",
                "--act",       "--disk",          "--device",        "--rank",
                "--coll-bw",   "--exposed-share", "--overlap",       "--norm16",
                "--act16",     "--act-bandwidth", "--act-bytes",     "--step-ratio",
                "--gemm-rate", "--data-rate",     "--opt-bandwidth", "--attn-seq",
                NULL};
            dt_cli_bad_arg("plan", argv[i], with_value);
            return 2;
        }
        if (!ok) {
            dt_error("%s", dt_err_msg()[0] ? dt_err_msg() : "bad value");
            return 2;
        }
    }
    dt_config_derive(&a->cfg);
    if (a->world < 1) {
        dt_error("plan needs --world N (and --config FILE, or the built-in default model)");
        return usage();
    }
    if (a->rank >= a->world) {
        dt_error("plan: --rank %d is not one of the %d ranks", a->rank, a->world);
        return 2;
    }
    return 0;
}

static void set2(dt_plan_rate2 *dst, dt_plan_rate2 v) {
    if (v.fwd > 0 && v.bwd > 0)
        *dst = v;
}

/* The device's rates: the named one (`this`: measured now, at the config's shapes), then
 * the flags. */
static dt_status device_of(args *a, dt_plan_device *dev, int64_t *dev_mem, dt_plan_probe **probe) {
    const char *name = a->device;
    *probe = NULL;
    bool this = !strcmp(name, "this");
    if (a->no_probe && !this)
        return dt_err_set(DT_ERR_ARG, "plan: --no-probe goes with --device this (a preset is "
                                      "never measured)");
    if (a->no_probe && !(a->flops > 0 && a->flops16 > 0 && a->mem_bandwidth > 0))
        return dt_err_set(DT_ERR_ARG,
                          "plan: --device this --no-probe measures nothing: give at least "
                          "--flops, --flops16 and --mem-bandwidth (--show-device prints every "
                          "figure)");
    DT_TRY(dt_plan_device_get(name, a->world, dev, dev_mem));
    if (this && !a->no_probe)
        DT_TRY(dt_plan_probe_this(&a->cfg, a->world, a->world, dev, probe));
    if (a->flops > 0 || a->flops16 > 0)
        dev->gemm_rate = NULL; /* the rates given hold for every shape */
    if (a->gemms.n > 0)        /* but for the shapes given */
        dev->gemm_rate = dt_plan_gemm_table_rate, dev->gemm_ctx = &a->gemms;
    if (a->flops > 0)
        dev->flops_16 = a->flops, dev->flops_fp32 = a->flops;
    if (a->flops16 > 0)
        dev->flops_16 = a->flops16;
    if (a->bandwidth > 0)
        dev->bandwidth = a->bandwidth;
    if (a->mem_bandwidth > 0)
        dev->mem_bandwidth = a->mem_bandwidth;
    if (a->latency > 0)
        dev->latency = a->latency;
    if (a->attn.fwd > 0 || a->attn16.fwd > 0)
        dev->n_attn_seq = 0; /* the rates given hold at every sequence */
    set2(&dev->attn_fp32, a->attn);
    set2(&dev->attn_16, a->attn16);
    if (a->probed.n_attn_seq > 0) { /* but at the sequences given */
        dev->n_attn_seq = a->probed.n_attn_seq;
        memcpy(dev->attn_seq, a->probed.attn_seq, sizeof dev->attn_seq);
    }
    set2(&dev->norm, a->norm);
    set2(&dev->act, a->act);
    if (a->norm.fwd > 0 && a->norm.bwd > 0) /* the rates given hold in every precision */
        dev->norm_16 = dev->norm;
    if (a->act.fwd > 0 && a->act.bwd > 0)
        dev->act_16 = dev->act;
    set2(&dev->norm_16, a->norm16);
    set2(&dev->act_16, a->act16);
    if (a->act_bandwidth > 0)
        dev->act_bandwidth = a->act_bandwidth;
    if (a->act_bytes > 0)
        dev->act_bytes = (double)a->act_bytes;
    if (a->disk.fwd > 0 && a->disk.bwd > 0)
        dev->disk_write = a->disk.fwd, dev->disk_read = a->disk.bwd;
    if (a->probed.n_coll > 0) {
        dev->n_coll = a->probed.n_coll;
        memcpy(dev->coll_at, a->probed.coll_at, sizeof dev->coll_at);
        memcpy(dev->coll, a->probed.coll, sizeof dev->coll);
    }
    if (a->exposed_share >= 0)
        dev->exposed_share = a->exposed_share;
    if (a->hides >= 0)
        dev->hides = (unsigned)a->hides;
    if (a->step_ratio > 0)
        dev->step_ratio = a->step_ratio;
    if (a->data_rate > 0)
        dev->data_rate = a->data_rate;
    if (a->opt_bandwidth > 0)
        dev->opt_bandwidth = a->opt_bandwidth;
    return DT_OK;
}

static int plan_with(args *a, const dt_plan_device *dev, const dt_plan_gemm_table *gemms,
                     int64_t dev_mem);

/* The matmul rates by shape dev reads: --gemm-rate's, or those `this` measures; NULL: none. */
static const dt_plan_gemm_table *gemms_of(const dt_plan_device *dev, const dt_plan_probe *probe) {
    if (dev->gemm_rate == dt_plan_gemm_table_rate)
        return dev->gemm_ctx;
    return dev->gemm_rate && probe ? dt_plan_probe_gemms(probe) : NULL;
}

int dt_cli_plan(int argc, char **argv) {
    args a = {.top = 20, .exposed_share = -1, .hides = -1, .device = "a100-80gb"};
    dt_config_defaults(&a.cfg);
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    dt_plan_device dev;
    int64_t dev_mem;
    dt_plan_probe *probe = NULL;
    if (device_of(&a, &dev, &dev_mem, &probe) != DT_OK) {
        dt_error("%s", dt_err_msg());
        dt_plan_probe_free(probe);
        return 2;
    }
    rc = plan_with(&a, &dev, gemms_of(&dev, probe), dev_mem);
    dt_plan_probe_free(probe);
    return rc;
}

static int plan_with(args *a_, const dt_plan_device *dev_, const dt_plan_gemm_table *gemms,
                     int64_t dev_mem) {
    args a = *a_;
    const dt_plan_device dev = *dev_;
    dt_status st;
    int64_t mem = a.mem > 0 ? a.mem : dev_mem;
    if (a.show_device) { /* the flags that reproduce this device without measuring again */
        char flags[DEVICE_FLAGS];
        device_flags(a.device, &dev, mem, gemms, flags);
        printf("%s\n", flags);
        return 0;
    }
    if (a.explain)
        return explain(&a.cfg, a.world, a.rank, a.device, &dev, gemms, mem);
    dt_plan_cands l = {.keep = a.top};
    st = dt_cli_plan_search(&a.cfg, a.world, &dev, mem, &a.pinned, &l);
    if (st != DT_OK) {
        free(l.v);
        dt_error("%s", dt_err_msg());
        return 1;
    }
    dt_cli_plan_rank(&l);
    st = dt_cli_plan_time(l.v, l.n < a.top ? l.n : a.top, a.world, &dev);
    if (st != DT_OK) {
        free(l.v);
        dt_error("%s", dt_err_msg());
        return 1;
    }
    bool any = l.n > 0 && l.v[0].fits;
    if (a.json)
        print_json(l.v, l.n, a.top);
    else if (any)
        print_table(l.v, l.n, a.top, mem, &a.cfg);
    if (!any)
        print_nothing_fits(&l, mem, &a.cfg, a.world);
    free(l.v);
    return any ? 0 : 1;
}
