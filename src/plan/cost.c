/* The time model. See cost.h.
 *
 * Bytes follow core/comm.c's bus convention for a group of p ranks: an all-reduce of n bytes
 * moves 2 n (p-1)/p, an all-gather or reduce-scatter of a whole of n bytes moves n (p-1)/p,
 * an all-to-all of blocks of k bytes moves k (p-1). A group of one moves nothing and costs
 * no latency.
 */
#include "plan/cost.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/comm.h"
#include "plan/cost_impl.h"
#include "plan/memory.h"
#include "plan/mesh.h"
#include "plan/plan_impl.h"
#include "plan/stages.h"

typedef dt_plan_work work;
typedef dt_plan_chunk_cost chunk_cost;
typedef dt_plan_linear_s linear_s;

static double allreduce(const work *w, int p, double n) { return dt_plan_cost_allreduce(w, p, n); }
static double gather_like(const work *w, int p, double n) { return dt_plan_cost_gather(w, p, n); }
static double reduce_scatter(const work *w, int p, double n) {
    return dt_plan_cost_reduce_scatter(w, p, n);
}

/* ---- one block, one micro-batch ------------------------------------------------------------- */

/* seconds of an m x k by k x n product */
double dt_plan_cost_gemm(const work *w, dt_plan_gemm_op op, double m, double n, double k) {
    const dt_plan_device *d = w->d;
    double rate = d->gemm_rate ? d->gemm_rate(d->gemm_ctx, w->lp, op, m, n, k) : 0;
    if (!(rate > 0) && d->gemm_efficiency > 0) {
        double h = d->gemm_half;
        rate = w->rate * d->gemm_efficiency * (m / (m + h)) * (n / (n + h)) * (k / (k + h));
    }
    return 2 * m * n * k / (rate > 0 ? rate : w->rate);
}

/* A linear layer [m, in] -> [m, out]: its forward, and its backward's two products. */
void dt_plan_cost_add_linear(const work *w, double m, double in, double out, linear_s *acc) {
    acc->fwd += dt_plan_cost_gemm(w, DT_PLAN_GEMM_FWD, m, out, in);
    acc->dx += dt_plan_cost_gemm(w, DT_PLAN_GEMM_DX, m, in, out);
    acc->dw += dt_plan_cost_gemm(w, DT_PLAN_GEMM_DW, out, in, m);
}
static void add_linear(const work *w, double m, double in, double out, linear_s *acc) {
    dt_plan_cost_add_linear(w, m, in, out, acc);
}

static linear_s block_linears(const work *w) {
    linear_s t = {0};
    add_linear(w, w->Nt, w->C, w->W, &t); /* qkv */
    add_linear(w, w->Nt, w->A, w->C, &t); /* attention projection */
    add_linear(w, w->Nt, w->C, w->F, &t); /* fc (llama: the gate) */
    if (!w->gpt2)
        add_linear(w, w->Nt, w->C, w->F, &t); /* llama: up */
    add_linear(w, w->Nt, w->F, w->C, &t);     /* down */
    return t;
}

/* QK^T and PV, causal: half of 4 T hs a query, of which documents leave attn_share. Under a
 * ring the step waits for its busiest rank: zigzag gives each the mean, a contiguous split
 * gives the last (2 cp - 1) / cp of it. */
static double block_attention_flops(const work *w) {
    double busiest = w->cp > 1 && !w->zigzag ? (2.0 * w->cp - 1) / w->cp : 1;
    return 2 * w->N * w->T * w->A / w->sp * busiest * w->attn_share;
}

double dt_plan_doc_attn_share(int T, int doc_len) {
    enum { TILE = 64, OFFSETS = 16 };
    if (doc_len <= 0 || T <= 0)
        return 1;
    double all = 0, done = 0;
    for (int o = 0; o < OFFSETS; o++) {
        int first = -(int)((int64_t)doc_len * o / OFFSETS); /* a document starts here */
        for (int q0 = 0; q0 < T; q0 += TILE) {
            /* the start of the document holding query q0 */
            int start = q0 - (int)(((int64_t)q0 - first) % doc_len);
            int kfirst = (start > 0 ? start : 0) / TILE * TILE;
            done += (q0 - kfirst) / TILE + 0.5;
            all += q0 / TILE + 0.5;
        }
    }
    return done / all;
}

/* Ring attention's exposed time (nn/ring_attn.c): each of the cp - 1 steps with a transfer
 * hides it behind that step's share of the attention `at`, and every step merges the output
 * (y read twice, written once); the backward moves a block and a gradient block a step, and
 * the last gradient block comes home after all compute. */
double dt_plan_cost_ring(const work *w, bool backward, double at) {
    if (w->cp <= 1)
        return 0;
    double one = w->d->latency + w->ring_block / w->bw_cp, step = at / w->cp;
    double merge = backward ? 0 : w->cp * 12 * w->N * w->A / w->sp / w->act_bw;
    if (!backward)
        return (w->cp - 1) * fmax(0, one - step) + merge;
    double two = w->d->latency + 2 * w->ring_block / w->bw_cp;
    return (w->cp - 1) * fmax(0, two - step) + one;
}

/* The pointwise work of a block: two norms over its rows, the MLP activation, and the
 * memory passes between the kernels: the two residual adds (and their gradients), the
 * bias gradients (GPT-2), and in 16-bit modes each matmul operand cast (4 bytes read, 2
 * written). Forward, backward (input half), and what a split backward's W repeats. */
typedef struct pointwise_s {
    double fwd, bwd, wgt;
} pointwise_s;

static pointwise_s block_pointwise(const work *w) {
    double rows = w->Nr * w->C, hidden = w->Nt * w->F, bw = w->act_bw;
    double lp = w->lp ? 6 : 0, mlp_in = w->gpt2 ? 1 : 2;
    double dy_cast = lp * w->Nt * (w->W + w->C + mlp_in * w->F + w->C) / bw;
    pointwise_s p = {0};
    p.fwd = 2 * rows / w->norm.fwd + hidden / w->act.fwd + 2 * 12 * rows / bw +
            lp * w->Nt * (2 * w->C + w->A + w->F) / bw;
    p.bwd = 2 * rows / w->norm.bwd + hidden / w->act.bwd + 2 * 12 * rows / bw + dy_cast;
    if (w->gpt2)
        p.bwd += 4 * w->Nt * (w->W + w->C + w->F + w->C) / bw;
    p.wgt = dy_cast;
    return p;
}

typedef struct block_cost {
    double f, b, wgt; /* forward, backward (input half when split), weight half */
    double rerun;     /* of b: the rerun, skipped when the backward follows the forward */
    double io;        /* of f, b and wgt: the activation file's exposed I/O */
} block_cost;

/* plugin.act_compress = int8: each fp32 tensor block l keeps (qkv, att unless the attention
 * is rerun, x2, h, u) is quantised after the forward (4 bytes read, 1 written) and restored
 * before the backward and again before a split backward's W pass (1 read, 4 written).
 * Returns one pass's seconds. */
static double act_compress_int8_pass(const work *w, dt_plan_rerun r) {
    if (w->c->plugin.act_compress != DT_ACT_COMPRESS_INT8 || r == DT_PLAN_RERUN_BLOCK)
        return 0;
    double n = w->Nt * w->W + w->Nr * w->C + w->Nt * w->F * (w->gpt2 ? 1 : 2);
    if (r == DT_PLAN_RERUN_NONE)
        n += w->Nt * w->A;
    return 5 * n / w->act_bw;
}

/* 16-bit modes: the pass that makes the weight gradients rebuilds the copies att_lp and g_lp
 * (the MLP activation again from h, then both rounded: 4 bytes read, 2 written). */
static double lp_rebuild(const work *w) {
    bool lp = w->c->plugin.precision != DT_PREC_FP32;
    return lp ? w->Nt * w->F / w->act.fwd + 6 * w->Nt * (w->A + w->F) / w->act_bw : 0;
}

/* plugin.ac: the attention core rerun (its FLOPs, its heads -> rows all-to-all under
 * Ulysses), or the whole block's forward. */
static double ac_rerun_time(const work *w, dt_plan_rerun r, double at, double forward) {
    if (r == DT_PLAN_RERUN_BLOCK)
        return forward;
    if (r != DT_PLAN_RERUN_ATTENTION)
        return 0;
    return at + dt_plan_cost_ring(w, false, at) + dt_plan_cost_a2a(w, w->A);
}

/* 16-bit modes: a GPT casts a block's weights as it enters it, forward and backward (its
 * weight pass too), 4 bytes read and 2 written a float (models/gpt.c). */
static double unit_cast(const work *w) {
    return w->lp ? 6 * w->block_floats / dt_plan_pass_bw(w, 4 * w->block_floats) : 0;
}

/* plugin.act_offload = disk (models/gpt_offload.c): the forward copies the block's input into
 * its frame (4 bytes read, 4 written) and the I/O thread writes the record while the next
 * block computes; the backward's read (a split backward's W pass reads again) is asked for
 * while the block before it computes. What a pass's compute does not hide is exposed. */
static double act_disk_copy(const work *w) {
    return w->act_disk > 0 ? 8 * w->Nr * w->C / w->act_bw : 0;
}

static double act_disk_exposed(const work *w, bool write, double hidden_by) {
    if (!(w->act_disk > 0))
        return 0;
    double io = w->act_disk / (write ? w->d->disk_write : w->d->disk_read);
    return io > hidden_by ? io - hidden_by : 0;
}

static block_cost cost_block(const work *w, int l, bool split) {
    linear_s mm = block_linears(w);
    pointwise_s pw = block_pointwise(w);
    double flops = block_attention_flops(w);
    dt_plan_rate2 at = dt_plan_attn_at(w, w->T);
    double at_f = flops / at.fwd, at_b = 2 * flops / at.bwd;
    dt_plan_rerun r = dt_plan_ac_rerun(&w->c->plugin, l);
    double q8 = act_compress_int8_pass(w, r);
    double restore = q8;
    double comm_f = dt_plan_cost_tp_exposed(w, dt_plan_cost_block_tp(w, false), mm.fwd) +
                    dt_plan_cost_block_sp(w, false) + dt_plan_cost_tp_copies(w, false);
    double comm_b =
        dt_plan_cost_tp_exposed(w, dt_plan_cost_block_tp(w, true), mm.dx + (split ? 0 : mm.dw)) +
        dt_plan_cost_block_sp(w, true) + dt_plan_cost_tp_copies(w, true);
    double fwd = mm.fwd + at_f + dt_plan_cost_ring(w, false, at_f) + pw.fwd + comm_f + unit_cast(w);
    block_cost k = {.f = fwd + q8 + act_disk_copy(w)};
    k.io = act_disk_exposed(w, true, k.f);
    k.f += k.io;
    /* what the slot did not keep is rebuilt before the backward (and before W when split) */
    double rebuild = ac_rerun_time(w, r, at_f, fwd) + restore;
    double b_in =
        mm.dx + at_b + dt_plan_cost_ring(w, true, at_b) + pw.bwd + comm_b + rebuild + unit_cast(w);
    k.rerun = rebuild;
    if (split) {
        k.wgt = mm.dw + pw.wgt + rebuild + lp_rebuild(w) + unit_cast(w);
        double io = act_disk_exposed(w, false, k.wgt);
        k.wgt += io, k.io += io;
        k.b = b_in;
    } else {
        k.b = b_in + mm.dw + lp_rebuild(w);
    }
    double io = act_disk_exposed(w, false, k.b);
    k.b += io, k.io += io;
    return k;
}

/* ---- chunks and the schedule ------------------------------------------------------------- */

/* The embedding's extra work on the first chunk: a gather and the positions, 12 bytes an
 * element each way, and leaving the tp region (a reduce-scatter of rows under Megatron-SP,
 * whose adjoint all-gathers the gradient's rows; else an all-reduce, whose adjoint is free). */
static chunk_cost embed_cost(const work *w) {
    double bw = w->act_bw, n = w->Nt * w->C * 4;
    chunk_cost k = {0};
    k.f += w->sg ? reduce_scatter(w, w->tp, n) : allreduce(w, w->tp, n);
    k.f += 12 * w->Nt * w->C / bw;
    k.b += 12 * w->Nt * w->C / bw;
    if (w->sg) /* and GPT-2's position table's gradient, its rows summed */
        k.b +=
            gather_like(w, w->tp, n) +
            (w->gpt2 ? allreduce(w, w->tp, (w->c->data.doc_mask ? w->T : w->T / w->cp) * w->C * 4)
                     : 0);
    return k;
}

/* The LM head's on the last chunk: final norm, entering the tp region (an all-gather of rows
 * under Megatron-SP, a copy else; the adjoint a reduce-scatter or an all-reduce), logits,
 * cross-entropy (its passes over the logits: max, exp-sum, gradient), statistics, gradients;
 * in 16-bit modes the casts of its input and of its matrix. */
static chunk_cost head_cost(const work *w) {
    double bw = dt_plan_pass_bw(w, 4 * w->Nt * w->V); /* the logits */
    double n = w->Nt * w->C * 4;
    linear_s head = {0};
    add_linear(w, w->Nt, w->C, w->V, &head);
    double lp = w->lp ? 6 * (w->Nt * (w->C + w->V) + w->V * w->C) / bw : 0;
    chunk_cost k = {0};
    k.f += head.fwd + w->Nr * w->C / w->norm.fwd + 12 * w->Nt * w->V / bw + lp +
           (w->sg ? gather_like(w, w->tp, n) : 0) + gather_like(w, w->tp, 3 * w->Nt * 4 * w->tp);
    k.b += head.dx + head.dw + w->Nr * w->C / w->norm.bwd +
           (w->sg ? reduce_scatter(w, w->tp, n) + allreduce(w, w->tp, 2 * w->C * 4) /* norm */
                  : allreduce(w, w->tp, n));
    return k;
}

static void cost_chunks(const work *w, const dt_stage_plan *sp, bool split, chunk_cost *out) {
    int n = w->pp * w->v;
    chunk_cost embed = embed_cost(w), head = head_cost(w);
    for (int c = 0; c < n; c++) {
        chunk_cost k = {0};
        int fresh = dt_plan_fresh_block(&w->c->plugin, sp->first[c], sp->first[c + 1], w->L);
        double saved = 0;
        for (int u = sp->first[c]; u < sp->first[c + 1]; u++) {
            if (u < 1 || u > w->L)
                continue;
            block_cost b = cost_block(w, u - 1, split);
            k.f += b.f, k.b += b.b, k.wgt += b.wgt, k.io += b.io;
            saved += u - 1 == fresh ? b.rerun : 0;
        }
        if (c == 0)
            k.f += embed.f, k.b += embed.b;
        if (c == n - 1)
            k.f += head.f, k.b += head.b;
        k.b_fresh = k.b - saved;
        out[c] = k;
    }
}

/* The search replays one schedule with the same stage costs many times over (levers that
 * change only the optimizer's side: ZeRO stages, the optimizer on disk), so the last few
 * replays are kept, keyed by the schedule's serial, the message time and every stage cost,
 * and give back the very numbers a replay would. Single-threaded, as the planner is. */
enum { MEMO = 16 };
typedef struct replay_memo {
    uint64_t serial;
    double msg;
    int pp, n_chunks;
    chunk_cost *cc;
    double *end, *busy; /* [pp] each */
} replay_memo;
static replay_memo memo[MEMO];
static int memo_next;

static bool memo_find(const dt_schedule *s, double msg, const chunk_cost *cc, double *end,
                      double *busy) {
    int n = s->pp * s->n_chunks;
    for (int i = 0; i < MEMO; i++) {
        const replay_memo *m = &memo[i];
        if (m->cc && m->serial == s->serial && m->msg == msg && m->pp == s->pp &&
            m->n_chunks == s->n_chunks && !memcmp(m->cc, cc, (size_t)n * sizeof *cc)) {
            memcpy(end, m->end, (size_t)s->pp * sizeof *end);
            memcpy(busy, m->busy, (size_t)s->pp * sizeof *busy);
            return true;
        }
    }
    return false;
}

static void memo_keep(const dt_schedule *s, double msg, const chunk_cost *cc, const double *end,
                      const double *busy) {
    replay_memo *m = &memo[memo_next];
    memo_next = (memo_next + 1) % MEMO;
    free(m->cc), free(m->end), free(m->busy);
    int n = s->pp * s->n_chunks;
    *m = (replay_memo){.serial = s->serial,
                       .msg = msg,
                       .pp = s->pp,
                       .n_chunks = s->n_chunks,
                       .cc = malloc((size_t)n * sizeof *cc),
                       .end = malloc((size_t)s->pp * sizeof *end),
                       .busy = malloc((size_t)s->pp * sizeof *busy)};
    if (!m->cc || !m->end || !m->busy) { /* no memo then: the next replay recomputes */
        free(m->cc), free(m->end), free(m->busy);
        *m = (replay_memo){0};
        return;
    }
    memcpy(m->cc, cc, (size_t)n * sizeof *cc);
    memcpy(m->end, end, (size_t)s->pp * sizeof *end);
    memcpy(m->busy, busy, (size_t)s->pp * sizeof *busy);
}

/* Replays every rank's actions with these costs: a send leaves at once (its message arrives
 * latency + bytes / bandwidth later), a receive waits for its message. busy[r]: compute. */
static dt_status replay(const work *w, const dt_schedule *s, const chunk_cost *cc, double *end,
                        double *busy) {
    double msg = w->d->latency + w->boundary / w->bw_pp + w->boundary_gather;
    if (memo_find(s, msg, cc, end, busy))
        return DT_OK;
    int pairs = s->pp * s->n_chunks * s->n_mb;
    double *act = malloc((size_t)pairs * sizeof *act), *grad = malloc((size_t)pairs * sizeof *grad);
    int *at = calloc((size_t)s->pp, sizeof *at);
    bool *own = s->fresh ? NULL : calloc((size_t)pairs, sizeof *own);
    const bool *fresh = s->fresh ? s->fresh : own;
    if (!act || !grad || !at || !fresh) {
        free(act), free(grad), free(at), free(own);
        return dt_err_set(DT_ERR_OOM, "time model: out of memory");
    }
    for (int r = 0; own && r < s->pp; r++)
        dt_sched_fresh(s, r, own);
    for (int i = 0; i < pairs; i++)
        act[i] = grad[i] = -1;
    for (int r = 0; r < s->pp; r++)
        end[r] = busy[r] = 0;
    bool progress = true;
    int left = s->row[s->pp];
    while (left > 0 && progress) {
        progress = false;
        for (int r = 0; r < s->pp; r++) {
            int n;
            const dt_sched_action *a = dt_sched_row(s, r, &n);
            for (; at[r] < n; at[r]++, left--, progress = true) {
                dt_sched_action x = a[at[r]];
                int k = x.stage * s->n_mb + x.mb;
                double t = 0;
                if (x.op == DT_SCHED_OP_RECV_ACT || x.op == DT_SCHED_OP_RECV_GRAD) {
                    double arrive = x.op == DT_SCHED_OP_RECV_ACT ? act[k] : grad[k];
                    if (arrive < 0)
                        break;
                    end[r] = arrive > end[r] ? arrive : end[r];
                    continue;
                }
                if (x.op == DT_SCHED_OP_SEND_ACT)
                    act[k + s->n_mb] = end[r] + msg; /* the next chunk's input */
                else if (x.op == DT_SCHED_OP_SEND_GRAD)
                    grad[k - s->n_mb] = end[r] + msg;
                else if (x.op == DT_SCHED_OP_B)
                    t = fresh[k] ? cc[x.stage].b_fresh : cc[x.stage].b;
                else
                    t = x.op == DT_SCHED_OP_F ? cc[x.stage].f : cc[x.stage].wgt;
                end[r] += t;
                busy[r] += t;
            }
        }
    }
    free(act), free(grad), free(at), free(own);
    if (left > 0)
        return dt_err_set(DT_ERR_ARG, "time model: the schedule deadlocks");
    memo_keep(s, msg, cc, end, busy);
    return DT_OK;
}

/* ---- data parallelism and the optimizer ------------------------------------------------- */

/* Seconds to read and write back n bytes of an offload file. */
static double disk_round_trip(const work *w, double n) {
    return n / w->d->disk_read + n / w->d->disk_write;
}

/* The optimizer step over `floats`, whose memory passes take update_s: under plugin.offload =
 * disk m and v are read from and written back to the file every step (8 bytes a float each
 * way) through the window's two chunk slots, the I/O of one chunk beside the update of the
 * next (optim/offload.c), so the step is the slower of the two plus one chunk's read and
 * write. */
static double offload_disk_time(const work *w, double floats, double update_s) {
    if (w->c->plugin.offload != DT_OFFLOAD_DISK)
        return update_s;
    double chunk = (double)dt_plan_offload_chunk((int64_t)floats, w->c->plugin.offload_window_mb);
    chunk = chunk < floats ? chunk : floats;
    double io = disk_round_trip(w, 8 * floats);
    return (io > update_s ? io : update_s) + disk_round_trip(w, 8 * chunk);
}

static double step_ratio(const dt_plan_device *d) { return d->step_ratio > 0 ? d->step_ratio : 1; }

/* the optimizer's rate: as measured in a step, else memory's (scaled by the step ratio) */
static double opt_bw(const dt_plan_device *d, double mem_bw) {
    return d->opt_bandwidth > 0 ? d->opt_bandwidth : mem_bw;
}
static double opt_ratio(const dt_plan_device *d) {
    return d->opt_bandwidth > 0 ? 1 : step_ratio(d);
}

/* Each unit's backward on one micro-batch without a pipeline, as the one chunk's b_fresh
 * counts it (the freshest block reruns nothing), scaled by the device's step ratio. */
static void unit_backwards(const work *w, const dt_stage_plan *sp, double *b) {
    if (w->dit) {
        dt_plan_dit_unit_backwards(w, b);
    } else {
        int fresh = dt_plan_fresh_block(&w->c->plugin, sp->first[0], sp->first[1], w->L);
        b[0] = embed_cost(w).b;
        for (int l = 0; l < w->L; l++) {
            block_cost k = cost_block(w, l, false);
            b[l + 1] = k.b - (l == fresh ? k.rerun : 0);
        }
        b[w->L + 1] = head_cost(w).b;
    }
    for (int u = 0; u < w->L + 2; u++)
        b[u] *= step_ratio(w->d);
}

/* Exposed data-parallel communication and the optimizer step of a rank whose local arena has
 * n floats and whose micro-batches take forward_s and backward_s in all: reductions hide
 * behind the backward when plugin.overlap (ZeRO 0/1's buckets behind the last micro-batch's
 * as it completes them, lb; under a pipeline and split backwards they reduce after it, unless
 * the device's software hides them behind the last micro-batch's); ZeRO-3's gathers are
 * prefetched behind its compute; ZeRO 1/2's gather of the updated arena waits for the update
 * (or runs behind the next step's first forward). */
static void cost_dp(const work *w, int world, int rank, const dt_schedule *sched, double n,
                    double forward_s, double backward_s, double compute_s, bool split,
                    const dt_plan_last_backward *lb, double *exposed, double *optimizer) {
    int p = w->grad_p;
    dt_plan_dp_traffic t = dt_plan_dp_traffic_of(w, world, rank, sched, n);
    double lat = w->d->latency;
    dt_plan_coll reduce = w->zero >= 2 ? DT_PLAN_REDUCE_SCATTER : DT_PLAN_ALLREDUCE;
    /* each kind at the rate of its mean call */
    double r_each = t.reduce_calls ? t.reduce_bytes / (double)t.reduce_calls : 0;
    double g_each = t.gather_calls ? t.gather_bytes / (double)t.gather_calls : 0;
    double r_bw = dt_plan_kind_bw(w->d, w->bw_grad, reduce, dt_plan_coll_whole(reduce, p, r_each));
    double g_bw = dt_plan_kind_bw(w->d, w->bw_grad, DT_PLAN_ALLGATHER,
                                  dt_plan_coll_whole(DT_PLAN_ALLGATHER, p, g_each));
    double t_reduce = t.reduce_bytes / r_bw + (double)t.reduce_calls * lat;
    double t_gather = t.gather_bytes / g_bw + (double)t.gather_calls * lat;
    bool overlap = w->c->plugin.overlap, tuned = overlap && (w->d->hides & DT_PLAN_HIDE_DP);
    bool after = (w->zero < 2 && w->pp > 1) || split; /* dtrain reduces after the backward */
    double red = !overlap ? t_reduce
                 : lb     ? dt_plan_buckets_exposed(w, lb, t_reduce, t.reduce_calls)
                 : !after ? dt_plan_behind(w, t_reduce, backward_s)
                 : tuned  ? dt_plan_behind(w, t_reduce, backward_s / w->n_mb)
                          : t_reduce;
    double gat = w->zero == 3 ? dt_plan_behind(w, t_gather, compute_s)
                 : tuned      ? dt_plan_behind(w, t_gather, forward_s / w->n_mb)
                              : t_gather;
    *exposed = (p > 1 ? red + gat : 0) + allreduce(w, w->tp, 8);
    /* AdamW reads weights, gradients, m, v and writes weights, m, v over its floats; the
     * gradient norm reads the gradients once more */
    double opt = w->zero == 0 ? n : n / p, bw = opt_bw(w->d, w->mem_bw);
    *optimizer = offload_disk_time(w, opt, opt * 4 * 7 / bw) + opt * 4 / bw;
    if (w->lp && w->dit) /* the DiT's 16-bit copy, written by the update; a GPT casts per unit */
        *optimizer += n * 2 / bw;
    if (w->c->plugin.precision == DT_PREC_FP16) /* loss scaling: the overflow flag, world-wide */
        *exposed += allreduce(w, world, 8);
}

static double positive_or(double x, double fallback) { return x > 0 ? x : fallback; }

double dt_plan_pass_bw(const work *w, double bytes) {
    const dt_plan_device *d = w->d;
    return d->act_bandwidth > 0 && bytes <= d->act_bytes ? d->act_bandwidth : w->mem_bw;
}

dt_plan_rate2 dt_plan_attn_at(const work *w, double T) {
    const dt_plan_device *d = w->d;
    for (int i = 0; i < d->n_attn_seq; i++) {
        const dt_plan_attn_seq *s = &d->attn_seq[i];
        if (s->lp == (int)w->lp && s->T == T && s->rate.fwd > 0 && s->rate.bwd > 0)
            return s->rate;
    }
    return w->attn;
}

/* Rates left 0: attention at the matmul rate; a norm streams 8 bytes an element forward
 * (x in, y out) and 12 back (x, dy in, dx out), GELU 8 and 12, SwiGLU 12 and 20 (two
 * inputs), all at the activations' pass rate. */
static void resolve_rates(work *w, const dt_model_config *m) {
    const dt_plan_device *d = w->d;
    dt_plan_rate2 at = w->lp ? d->attn_16 : d->attn_fp32;
    double bw = w->act_bw, swiglu = m->arch == DT_ARCH_LLAMA;
    double mm = w->rate * (d->gemm_efficiency > 0 ? d->gemm_efficiency : 1);
    w->attn = (dt_plan_rate2){positive_or(at.fwd, mm), positive_or(at.bwd, mm)};
    dt_plan_rate2 norm = d->norm, act = d->act;
    if (w->lp && d->norm_16.fwd > 0 && d->norm_16.bwd > 0)
        norm = d->norm_16;
    if (w->lp && d->act_16.fwd > 0 && d->act_16.bwd > 0)
        act = d->act_16;
    w->norm = (dt_plan_rate2){positive_or(norm.fwd, bw / 8), positive_or(norm.bwd, bw / 12)};
    w->act = (dt_plan_rate2){positive_or(act.fwd, bw / (swiglu ? 12 : 8)),
                             positive_or(act.bwd, bw / (swiglu ? 20 : 12))};
}

/* Bytes/s of a group whose members lie within `span` consecutive ranks. */
static double group_bandwidth(const dt_plan_device *d, int span) {
    bool across = d->node_size > 0 && span > d->node_size && d->inter_bandwidth > 0;
    return across ? d->inter_bandwidth : d->bandwidth;
}

static dt_status fill(const dt_config *c, const dt_layout *l, const dt_plan_device *d, work *w) {
    const dt_model_config *m = &c->model;
    const dt_plugin_config *p = &c->plugin;
    int tp = l->tp, nkv = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    int F = m->arch != DT_ARCH_LLAMA ? 4 * m->n_embd /* GPT-2 and the DiT */
            : m->ffn_hidden > 0      ? m->ffn_hidden
                                     : ((8 * m->n_embd + 2) / 3 + 63) / 64 * 64;
    double hs = (double)m->n_embd / m->n_head;
    *w = (work){.c = c,
                .d = d,
                .tp = tp,
                .sp = l->sp,
                .cp = l->cp,
                .zigzag = l->cp_zigzag,
                .dp = l->dp,
                .pp = l->pp,
                .v = l->stages.v,
                .L = l->n_layer,
                .T = l->T,
                .n_mb = l->n_mb,
                .zero = l->zero,
                .grad_p = l->grad_size,
                .gpt2 = m->arch == DT_ARCH_GPT2,
                .sg = l->rows_tp,
                .dit = m->arch == DT_ARCH_DIT,
                .B = l->mb,
                .rate = l->precision == DT_PREC_FP32 ? d->flops_fp32 : d->flops_16,
                .attn_share = c->data.doc_mask ? dt_plan_doc_attn_share(l->T, c->data.doc_len) : 1};
    w->N = (double)l->tokens_mb;
    w->Nt = (double)l->tokens_sp;
    w->Nr = (double)l->tokens_rows;
    w->C = m->n_embd, w->hs = hs;
    w->NH = (double)(m->n_head / tp);
    w->A = w->NH * hs;
    w->W = (w->NH + 2.0 * (nkv / tp)) * hs;
    w->F = (double)(F / tp);
    w->V = (double)((m->vocab_size + tp - 1) / tp);
    w->lp = l->precision != DT_PREC_FP32;
    int64_t ucount[DT_MAX_CHUNKS + 2];
    if (!w->dit && m->n_layer >= 1 && m->n_layer <= DT_MAX_CHUNKS &&
        dt_plan_local_units(m, tp, NULL, ucount) > 1)
        w->block_floats = (double)ucount[1];
    w->boundary = (w->Nr + (w->dit ? w->B : 0)) * w->C * 4; /* the DiT's carries silu(c) */
    w->mem_bw = d->mem_bandwidth * (d->mem_efficiency > 0 ? d->mem_efficiency : 1);
    /* the largest of a block's activation tensors: the MLP's hidden, or the qkv rows */
    w->act_bw = dt_plan_pass_bw(w, 4 * w->Nt * (w->F > w->W ? w->F : w->W));
    /* tp varies fastest, then sp, cp, dp, pp (plan/mesh.h): a group whose span of consecutive
     * ranks exceeds a node talks across nodes */
    w->bw_tp = group_bandwidth(d, l->tp);
    /* each at the size of its message: Ulysses' q|k|v (a rank's rows, every head), a ring's
     * key/value block, a pipeline boundary */
    w->ring_block = w->N * (w->W - w->A) / w->sp * 4;
    w->bw_sp = dt_plan_kind_bw(d, group_bandwidth(d, l->tp * l->sp), DT_PLAN_ALLTOALL,
                               w->N / w->sp * w->W * 4);
    w->bw_cp =
        dt_plan_kind_bw(d, group_bandwidth(d, l->tp * l->sp * l->cp), DT_PLAN_P2P, w->ring_block);
    w->bw_grad = group_bandwidth(d, l->tp * l->sp * l->cp * l->dp);
    if (p->act_offload == DT_OFFLOAD_DISK && !w->dit)
        w->act_disk = (double)dt_plan_act_disk_record(c, l);
    if (l->pp_scatter) { /* a piece from each tp rank, all-gathered on arrival */
        w->boundary_gather = dt_plan_cost_gather(w, tp, w->boundary);
        w->boundary /= tp;
    }
    w->bw_pp = dt_plan_kind_bw(d, group_bandwidth(d, l->world), DT_PLAN_P2P, w->boundary);
    resolve_rates(w, m);
    if (!(w->rate > 0) || !(d->bandwidth > 0) || !(d->mem_bandwidth > 0) ||
        ((p->offload == DT_OFFLOAD_DISK || p->act_offload == DT_OFFLOAD_DISK) &&
         !(d->disk_write > 0 && d->disk_read > 0)))
        return dt_err_set(DT_ERR_ARG, "time model: the device's rates must be positive");
    return DT_OK;
}

double dt_plan_step_flops(const dt_config *c) {
    dt_buckets bk = dt_plan_buckets_of(c);
    if (bk.n)
        return dt_plan_flops_of_buckets(c, &bk);
    const dt_model_config *m = &c->model;
    if (m->arch == DT_ARCH_DIT)
        return dt_plan_dit_step_flops(m, c->train.batch_size);
    double C = m->n_embd, hs = C / m->n_head, T = c->train.seq_len;
    double kv = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    double F = m->arch == DT_ARCH_GPT2 ? 4 * C
               : m->ffn_hidden > 0     ? m->ffn_hidden
                                       : (double)(((8 * m->n_embd + 2) / 3 + 63) / 64 * 64);
    /* per token: q|k|v, proj, the MLP (Llama: gate and up), the head; causal attention */
    double block = C * (C + 2 * kv * hs) + C * C + (m->arch == DT_ARCH_GPT2 ? 2 : 3) * C * F;
    double token = 2 * (m->n_layer * block + C * m->vocab_size) + m->n_layer * 2 * T * C;
    return 3 * token * c->train.batch_size * T;
}

static void scale_chunk(chunk_cost *k, double by) {
    k->f *= by, k->b *= by, k->wgt *= by, k->b_fresh *= by, k->io *= by;
}

dt_status dt_plan_step_time(const dt_config *c, int world, const dt_plan_device *d,
                            const dt_schedule *given, dt_plan_time *out) {
    return dt_plan_step_time_stages(c, world, d, given, out, NULL);
}

dt_status dt_plan_step_time_stages(const dt_config *c, int world, const dt_plan_device *d,
                                   const dt_schedule *given, dt_plan_time *out,
                                   dt_plan_stage_time *stages) {
    const dt_schedule *sched;
    memset(out, 0, sizeof *out);
    dt_buckets bk = dt_plan_buckets_of(c);
    if (bk.n)
        return dt_plan_time_of_buckets(c, &bk, world, d, given, out, stages);
    work w = {0};
    dt_layout lay;
    dt_schedule *own;
    DT_TRY(dt_layout_make_scheduled(c, world, 0, given, &lay, &sched, &own));
    dt_status st = fill(c, &lay, d, &w);
    if (st != DT_OK) {
        dt_sched_free(own);
        return st;
    }
    const dt_stage_plan sp = lay.stages;
    bool split = lay.split_backward;
    double data = d->data_rate > 0 ? lay.rows / d->data_rate : 0;
    int n_chunks = w.pp * w.v;
    chunk_cost *cc = calloc((size_t)n_chunks, sizeof *cc);
    double *end = calloc((size_t)w.pp, sizeof *end), *busy = calloc((size_t)w.pp, sizeof *busy);
    st = cc && end && busy ? DT_OK : dt_err_set(DT_ERR_OOM, "time model: out of memory");
    if (st == DT_OK) {
        if (w.dit)
            dt_plan_dit_chunk_costs(&w, &sp, split, cc);
        else
            cost_chunks(&w, &sp, split, cc);
        for (int k = 0; k < n_chunks; k++)
            scale_chunk(&cc[k], step_ratio(d));
        if (w.pp > 1) {
            st = replay(&w, sched, cc, end, busy);
        } else {
            end[0] = busy[0] = w.n_mb * (cc[0].f + cc[0].b_fresh + cc[0].wgt);
        }
        /* every stage reads the rows before its first action, so the schedule shifts by it */
        for (int r = 0; r < w.pp; r++)
            end[r] += data, busy[r] += data;
    }
    double makespan = 0, idle = 0, cpu = 0;
    for (int r = 0; st == DT_OK && r < w.pp; r++)
        makespan = end[r] > makespan ? end[r] : makespan;
    for (int r = 0; st == DT_OK && r < w.pp; r++) {
        idle += makespan - busy[r];
        int rank = r * w.dp * w.cp * w.sp * w.tp; /* (pp r, dp 0, cp 0, sp 0, tp 0) */
        bool held[DT_MAX_CHUNKS + 2];
        int64_t ucount[DT_MAX_CHUNKS + 2], n_local = 0;
        dt_stage_plan_held(&sp, r, held);
        for (int u = 0, n = dt_plan_local_units(&c->model, w.tp, held, ucount); u < n; u++)
            n_local += ucount[u]; /* the rank's padded parameter arena */
        double forward = 0, backward = 0;
        for (int k = r; k < n_chunks; k += w.pp)
            forward += w.n_mb * cc[k].f, backward += w.n_mb * (cc[k].b + cc[k].wgt);
        double exposed, opt, last_b[DT_MAX_CHUNKS + 2];
        dt_plan_last_backward lb = {.U = w.L + 2, .floats = ucount, .secs = last_b};
        bool buckets = w.zero < 2 && w.pp == 1 && !split && c->plugin.overlap && w.grad_p > 1;
        if (buckets)
            unit_backwards(&w, &sp, last_b);
        cost_dp(&w, world, rank, sched, (double)n_local, forward, backward, busy[r], split,
                buckets ? &lb : NULL, &exposed, &opt);
        opt *= opt_ratio(d);
        if (stages)
            stages[r] = (dt_plan_stage_time){busy[r], makespan - busy[r], exposed, opt};
        double step = makespan + exposed + opt;
        cpu += (busy[r] + opt) * (world / w.pp); /* the stage's ranks alike */
        if (step > out->step_s) {
            out->step_s = step;
            out->compute_s = busy[r];
            out->comm_s = exposed;
            out->data_s = data;
            out->optimizer_s = opt;
            out->act_disk_s = 0;
            for (int k = r; k < n_chunks; k += w.pp)
                out->act_disk_s += w.n_mb * cc[k].io;
        }
    }
    if (st == DT_OK && w.pp > 1 && makespan > 0)
        out->bubble = idle / (w.pp * makespan);
    int threads = d->threads > 0 ? d->threads : 1;
    if (st == DT_OK && d->cores > 0 && (int64_t)world * threads > d->cores) {
        out->cores_s = cpu * threads / d->cores;
        out->step_s = out->step_s > out->cores_s ? out->step_s : out->cores_s;
    }
    free(cc), free(end), free(busy);
    dt_sched_free(own);
    return st;
}

/* ---- stage boundaries from time ------------------------------------------------------------ */

/* dynamic programming over (chunks, layers), O(n L^2) */
dt_status dt_plan_balance_layers(const double *block, int L, int n, double first, double last,
                                 int *counts) {
    int W = L + 1;
    double *best = malloc((size_t)(n + 1) * W * sizeof *best); /* [c][j]: j layers, c chunks */
    int *cut = malloc((size_t)(n + 1) * W * sizeof *cut);
    double *prefix = calloc((size_t)W, sizeof *prefix);
    if (!best || !cut || !prefix) {
        free(best), free(cut), free(prefix);
        return dt_err_set(DT_ERR_OOM, "stage boundaries: out of memory");
    }
    for (int l = 0; l < L; l++)
        prefix[l + 1] = prefix[l] + block[l];
    for (int i = 0; i < (n + 1) * W; i++)
        best[i] = -1;
    best[0] = 0;
    for (int c = 1; c <= n; c++)
        for (int j = c; j <= L - (n - c); j++)
            for (int i = c - 1; i < j; i++) {
                double before = best[(c - 1) * W + i];
                if (before < 0)
                    continue;
                double t = prefix[j] - prefix[i] + (c == 1 ? first : 0) + (c == n ? last : 0);
                double worst = t > before ? t : before;
                if (best[c * W + j] < 0 || worst < best[c * W + j]) {
                    best[c * W + j] = worst;
                    cut[c * W + j] = i;
                }
            }
    for (int c = n, j = L; c >= 1; c--) {
        counts[c - 1] = j - cut[c * W + j];
        j = cut[c * W + j];
    }
    free(best), free(cut), free(prefix);
    return DT_OK;
}

dt_status dt_plan_stage_split(const dt_config *c, int world, const dt_plan_device *d, char *layers,
                              size_t n_layers) {
    dt_config even = *c;
    even.plugin.pp_layers[0] = '\0';
    dt_layout lay;
    DT_TRY(dt_layout_make(&even, world, 0, &lay));
    int n = lay.stages.n_chunks, L = lay.n_layer;
    if (lay.pp == 1)
        return dt_err_set(DT_ERR_ARG, "plugin.pp_layers=auto: pp_size is 1, there is nothing "
                                      "to split");
    if (c->model.arch == DT_ARCH_DIT)
        return dt_err_set(DT_ERR_UNSUPPORTED, "plugin.pp_layers=auto: the time model splits "
                                              "language models; give the DiT's counts");
    work w = {0};
    DT_TRY(fill(&even, &lay, d, &w));
    double *block = malloc((size_t)L * sizeof *block);
    if (!block)
        return dt_err_set(DT_ERR_OOM, "plugin.pp_layers=auto: out of memory");
    for (int l = 0; l < L; l++) {
        block_cost b = cost_block(&w, l, false);
        block[l] = b.f + b.b + b.wgt;
    }
    chunk_cost e = embed_cost(&w), h = head_cost(&w);
    int counts[DT_MAX_CHUNKS];
    dt_status st = dt_plan_balance_layers(block, L, n, e.f + e.b, h.f + h.b, counts);
    free(block);
    DT_TRY(st);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        int m = snprintf(layers + k, n_layers - k, "%s%d", i ? "," : "", counts[i]);
        if (m < 0 || (size_t)m >= n_layers - k)
            return dt_err_set(DT_ERR_ARG,
                              "plugin.pp_layers=auto: %d chunks do not fit the "
                              "key's %zu characters",
                              n, n_layers);
        k += (size_t)m;
    }
    return DT_OK;
}
