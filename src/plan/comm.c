/* The communication ledger. See comm.h. GPT-2 and Llama (nn/block.c, models/gpt.c) and the
 * video DiT (models/dit_fwd.c, dit_units.c, dit_tp.c) make their own collectives in a
 * micro-batch; the gradient group's traffic and the pipeline's are the engine's, the same for
 * both.
 *
 * Per call, for a group of p ranks (a group of one moves nothing): all-reduce of n bytes
 * 2 n (p-1) / p (integer division, as counted); all-gather and reduce-scatter: the total less
 * this rank's own piece; all-to-all: the p-1 blocks sent.
 */
#include "plan/comm.h"

#include <stdlib.h>
#include <string.h>

#include "plan/memory.h"
#include "plan/plan_impl.h"
#include "plan/stages.h"

typedef struct ledger {
    dt_plan_comm *out;
    int tp, sp, rows, grad_p, grad_rank;
    int cp;             /* the ring */
    int64_t ring_block; /* bytes of one key/value block a ring rank passes on */
    bool sg, gpt2;
    int64_t N, Nt, C, W, A, hs, NH, T, vocab_rows;
    int64_t positions; /* wpe's gradient rows summed: T, or with documents the sequence's */
    int n_mb, L, zero, pp;
    bool held[DT_MAX_CHUNKS + 2], first, last; /* units here; the embedding's / head's stage */
    bool split, lp;                            /* split backward; 16-bit matmuls */
    const dt_plugin_config *plugin;            /* plugin.ac, ac_every */
    bool dit, dit_st; /* the video DiT; its attention alternates spatial / temporal */
    int64_t B, P;     /* DiT: clips per micro-batch, floats per patch */
    int64_t Lt;       /* DiT: text tokens a clip (0: no text) */
} ledger;

static void add(int64_t *bytes, int64_t *calls, int64_t b) {
    if (b > 0)
        *bytes += b, (*calls)++;
}
static int64_t allreduce(int p, int64_t n) { return p > 1 ? 2 * n * (p - 1) / p : 0; }
static void tp_op(ledger *g, int64_t b) { add(&g->out->tp, &g->out->calls_tp, b); }
static void sp_op(ledger *g, int64_t b) { add(&g->out->sp, &g->out->calls_sp, b); }
static void grad_op(ledger *g, int64_t b) { add(&g->out->grad, &g->out->calls_grad, b); }
static void gather_op(ledger *g, int64_t b) {
    grad_op(g, b);
    add(&g->out->grad_gather, &g->out->calls_grad_gather, b);
}

/* out += sign * d, field by field */
static void comm_add(dt_plan_comm *out, const dt_plan_comm *d, int64_t sign) {
    out->grad += sign * d->grad;
    out->tp += sign * d->tp;
    out->sp += sign * d->sp;
    out->pp += sign * d->pp;
    out->cp += sign * d->cp;
    out->calls_grad += sign * d->calls_grad;
    out->calls_tp += sign * d->calls_tp;
    out->calls_sp += sign * d->calls_sp;
    out->grad_gather += sign * d->grad_gather;
    out->calls_grad_gather += sign * d->calls_grad_gather;
}

/* ---- inside the tp region: [Nt, C] enters (copy | all-gather rows) and leaves (all-reduce |
 * reduce-scatter rows); their adjoints in backward ---------------------------------------- */

static int64_t rows_piece(const ledger *g) { /* other ranks' rows of [Nt, C], as bytes */
    return g->tp > 1 ? (g->Nt / g->tp) * g->C * (g->tp - 1) * 4 : 0;
}
static void enter_fwd(ledger *g) {
    if (g->sg)
        tp_op(g, rows_piece(g));
}
static void enter_bwd(ledger *g) {
    tp_op(g, g->sg ? rows_piece(g) : allreduce(g->tp, g->Nt * g->C * 4));
}
static void leave_fwd(ledger *g) {
    tp_op(g, g->sg ? rows_piece(g) : allreduce(g->tp, g->Nt * g->C * 4));
}
static void leave_bwd(ledger *g) {
    if (g->sg)
        tp_op(g, rows_piece(g));
}
/* parameters applied to split rows (norms, row-parallel biases): gradients summed over tp */
static void rows_grads(ledger *g, int64_t floats) {
    if (g->sg)
        tp_op(g, allreduce(g->rows, floats * 4));
}

/* LM head chunk rows: about 16 Mi floats of logits, at least 64 rows, equal chunks */
static int64_t head_chunk(int64_t V, int64_t N) {
    int64_t rows = ((int64_t)16 << 20) / (V > 0 ? V : 1);
    rows = rows < 64 ? 64 : rows;
    if (rows >= N)
        return N;
    int64_t n = (N + rows - 1) / rows;
    return (N + n - 1) / n;
}

static int64_t a2a_qkv(const ledger *g) {
    return g->sp > 1 ? (g->N / g->sp) * (g->W / g->sp) * (g->sp - 1) * 4 : 0;
}
static int64_t a2a_att(const ledger *g) {
    return g->sp > 1 ? (g->N / g->sp) * (g->NH / g->sp) * g->hs * (g->sp - 1) * 4 : 0;
}

/* Ring attention (nn/ring_attn.c): the forward passes a block on cp - 1 times; the backward
 * passes the blocks on cp - 1 times and their gradients cp times (the last brings each home). */
static void ring_fwd(ledger *g) {
    if (g->cp > 1)
        g->out->cp += (g->cp - 1) * g->ring_block;
}
static void ring_bwd(ledger *g) {
    if (g->cp > 1)
        g->out->cp += (2 * (int64_t)g->cp - 1) * g->ring_block;
}

static void block_fwd(ledger *g) {
    enter_fwd(g);
    sp_op(g, a2a_qkv(g));
    ring_fwd(g);
    sp_op(g, a2a_att(g));
    leave_fwd(g);
    enter_fwd(g);
    leave_fwd(g);
}

/* plugin.ac: what block l reruns before its backward, and again before its W pass: the whole
 * forward, or the attention core (whose heads -> rows all-to-all runs again). */
static void rerun(ledger *g, int l) {
    dt_plan_rerun r = dt_plan_ac_rerun(g->plugin, l);
    if (r == DT_PLAN_RERUN_BLOCK)
        block_fwd(g);
    else if (r == DT_PLAN_RERUN_ATTENTION) {
        ring_fwd(g);
        sp_op(g, a2a_att(g));
    }
}

/* One micro-batch through the rank's units; skip[l]: block l's rerun before its backward is
 * skipped (dt_plan_fresh_block). */
static void micro_batch(ledger *g, const bool *skip) {
    int64_t a2a_qkv_b = a2a_qkv(g), a2a_att_b = a2a_att(g);
    if (g->first)
        leave_fwd(g); /* the vocabulary-parallel embedding */
    for (int l = 0; l < g->L; l++)
        if (g->held[l + 1])
            block_fwd(g);
    if (g->last) { /* the head, then (max, sum, target logit) per row and chunk */
        enter_fwd(g);
        int64_t chunk = head_chunk(g->vocab_rows, g->Nt);
        for (int64_t r0 = 0; r0 < g->Nt; r0 += chunk) {
            int64_t n = g->Nt - r0 < chunk ? g->Nt - r0 : chunk;
            tp_op(g, g->tp > 1 ? 3 * n * (g->tp - 1) * 4 : 0);
        }
        enter_bwd(g);
        rows_grads(g, 2 * g->C); /* final norm */
    }
    for (int l = 0; l < g->L; l++) {
        if (!g->held[l + 1])
            continue;
        if (!skip[l])
            rerun(g, l);
        enter_fwd(g); /* the norm output is rebuilt: its entering op runs again */
        leave_bwd(g);
        enter_bwd(g);
        leave_bwd(g);
        sp_op(g, a2a_att_b);
        sp_op(g, a2a_att_b);
        ring_bwd(g);
        sp_op(g, a2a_qkv_b);
        enter_fwd(g);
        enter_bwd(g);
        rows_grads(g, 6 * g->C);
        if (g->split)
            rerun(g, l);
        if (g->split && !g->lp) { /* W rebuilds both norm outputs in fp32 */
            enter_fwd(g);
            enter_fwd(g);
        }
    }
    if (g->gpt2 && g->first)
        rows_grads(g, g->positions * g->C); /* wpe */
    if (g->first)
        leave_bwd(g);
}

/* ---- the video DiT (models/dit_fwd.c, dit_units.c, dit_tp.c) ------------------------------ */

/* Under Ulysses, full and temporal attention need whole sequences (the all-to-alls); spatial
 * attention (the even blocks of spatial_temporal) runs on the rank's own frames. */
static bool dit_a2a(const ledger *g, int l) { return g->sp > 1 && !(g->dit_st && l % 2 == 0); }
/* Under a ring, full and temporal attention go around it; spatial stays local likewise. */
static bool dit_ring(const ledger *g, int l) { return g->cp > 1 && !(g->dit_st && l % 2 == 0); }

/* A block's forward: the modulated norm enters the tp region (gathered under Megatron-SP),
 * q|k|v to heads and the output back to rows, proj leaves; with text the cross-attention's
 * queries enter and its proj leaves (the text needs no collective: every rank makes it);
 * the MLP enters and fc2 leaves. */
static void dit_block_fwd(ledger *g, int l) {
    enter_fwd(g);
    if (dit_a2a(g, l))
        sp_op(g, a2a_qkv(g));
    if (dit_ring(g, l))
        ring_fwd(g);
    if (dit_a2a(g, l))
        sp_op(g, a2a_att(g));
    leave_fwd(g);
    if (g->Lt) {
        enter_fwd(g);
        leave_fwd(g);
    }
    enter_fwd(g);
    leave_fwd(g);
}

/* A block's backward (block_backward): fc2's bias summed over split rows and its output
 * gradient gathered, m2 gathered again, fc1's input gradient summed; the attention output
 * rebuilt as rows (its all-to-all again), proj as fc2, the output gradient to heads and
 * d q|k|v back to rows, m1 gathered, qkv's input gradient summed; the modulation gradients
 * [B, 6C] summed over split rows. The weight pass of a split backward gathers m2 and m1 and
 * rebuilds the attention rows once more. A full rerun is the block's forward again, before
 * the backward and before the weight pass (dit_fwd.c: rebuild); selective reruns only the
 * attention kernel, from q|k|v kept in attention order: no collective. */
static void dit_block_bwd(ledger *g, int l) {
    bool a2a = dit_a2a(g, l), full = dt_plan_ac_rerun(g->plugin, l) == DT_PLAN_RERUN_BLOCK;
    bool ring = dit_ring(g, l), sel = dt_plan_ac_rerun(g->plugin, l) == DT_PLAN_RERUN_ATTENTION;
    if (full)
        dit_block_fwd(g, l);
    if (sel && ring) /* the attention kernel's rerun is the ring's forward again */
        ring_fwd(g);
    rows_grads(g, g->C);
    leave_bwd(g);
    enter_fwd(g);
    enter_bwd(g);
    if (g->Lt) { /* the cross-attention: proj's bias and output gradient, the queries' */
        rows_grads(g, g->C);
        leave_bwd(g);
        enter_fwd(g);
        enter_bwd(g);
    }
    if (a2a)
        sp_op(g, a2a_att(g));
    rows_grads(g, g->C);
    leave_bwd(g);
    if (a2a)
        sp_op(g, a2a_att(g));
    if (ring)
        ring_bwd(g);
    if (a2a)
        sp_op(g, a2a_qkv(g));
    enter_fwd(g);
    enter_bwd(g);
    rows_grads(g, 6 * g->B * g->C);
    if (!g->split)
        return;
    if (full)
        dit_block_fwd(g, l);
    if (sel && ring)
        ring_fwd(g);
    enter_fwd(g);
    if (g->Lt) /* the cross-attention's queries' input */
        enter_fwd(g);
    if (a2a)
        sp_op(g, a2a_att(g));
    enter_fwd(g);
}

/* One micro-batch through the rank's units. The embedders and the final layer are replicated
 * over tp: only Megatron-SP sums the gradients of what they apply to split rows (the patch
 * embedding, the final linear and the final modulation) and the loss over the rows. */
static void dit_micro_batch(ledger *g) {
    for (int l = 0; l < g->L; l++)
        if (g->held[l + 1])
            dit_block_fwd(g, l);
    if (g->last) {
        if (g->sg) /* the loss: one double */
            tp_op(g, allreduce(g->rows, 8));
        rows_grads(g, g->P * g->C);
        rows_grads(g, g->P);
        rows_grads(g, 2 * g->B * g->C);
    }
    for (int l = g->L - 1; l >= 0; l--)
        if (g->held[l + 1])
            dit_block_bwd(g, l);
    if (g->first && g->Lt) /* the text's gradient, each tp rank's heads' part, summed */
        tp_op(g, allreduce(g->tp, g->B * g->Lt * g->C * 4));
    if (g->first) {
        rows_grads(g, g->C * g->P);
        rows_grads(g, g->C);
    }
}

/* ---- over the gradient group (train/engine.c) -------------------------------------------- */

static int64_t overlap(int64_t a0, int64_t n0, int64_t a1, int64_t n1) {
    int64_t lo = a0 > a1 ? a0 : a1, hi = a0 + n0 < a1 + n1 ? a0 + n0 : a1 + n1;
    return hi > lo ? hi - lo : 0;
}

typedef struct arena {
    int U;
    int64_t size[DT_MAX_CHUNKS + 2], first[DT_MAX_CHUNKS + 2], n, S;
} arena;

/* all-gather or reduce-scatter of [first, first + count): what the other ranks own */
static int64_t others(const ledger *g, const arena *a, int64_t first, int64_t count) {
    if (g->grad_p < 2)
        return 0;
    return (count - overlap(first, count, (int64_t)g->grad_rank * a->S, a->S)) * 4;
}

static void zero3_gathers(ledger *g, const arena *a) {
    int U = a->U, held[4] = {-1, -1, -1, -1}; /* buffers: block a, block b, first, last */
    int head = g->gpt2 ? 0 : U - 1;
#define BUF(u) ((u) == 0 ? 2 : (u) == U - 1 ? 3 : (u) % 2)
#define ENSURE(u)                                                                                  \
    do {                                                                                           \
        if (held[BUF(u)] != (u)) {                                                                 \
            held[BUF(u)] = (u);                                                                    \
            gather_op(g, others(g, a, a->first[u], a->size[u]));                                   \
        }                                                                                          \
    } while (0)
    for (int m = 0; m < g->n_mb; m++) {
        for (int u = 0; u < U; u++) { /* forward: each unit, prefetching the next block */
            ENSURE(u);
            if (u + 1 >= 1 && u + 1 <= U - 2)
                ENSURE(u + 1);
        }
        ENSURE(head);
        for (int u = U - 1; u >= 0; u--) { /* backward, prefetching the previous block */
            ENSURE(u);
            if (u - 1 >= 1 && u - 1 <= U - 2)
                ENSURE(u - 1);
        }
    }
#undef ENSURE
#undef BUF
}

/* ZeRO 2 under a pipeline: inner units reduce-scattered after each micro-batch's backward,
 * the first and last unit (and, split backward, the whole arena) once in finish; GPT-2's
 * end stages then gather the tied embedding's reduced gradient to sum it across them. */
static void grad_step_pipelined_zero2(ledger *g, const arena *a) {
    int U = a->U;
    if (g->split) {
        grad_op(g, others(g, a, 0, a->n));
    } else {
        for (int u = 0; u < U; u++)
            for (int m = 0; m < (u == 0 || u == U - 1 ? 1 : g->n_mb); m++)
                grad_op(g, others(g, a, a->first[u], a->size[u]));
    }
    if (g->gpt2 && (g->first || g->last)) {
        int64_t wte = g->vocab_rows * g->C; /* unpadded; after ln_f on the last stage */
        int64_t at = g->first ? 0 : a->first[U - 1] + 2 * ((g->C + 15) / 16 * 16);
        grad_op(g, others(g, a, at, wte));
    }
    grad_op(g, allreduce(g->grad_p, 8));
    gather_op(g, others(g, a, 0, a->n));
}

static void grad_step(ledger *g, const dt_config *c, const arena *a) {
    int U = a->U;
    if (g->pp > 1 && g->zero == 2) {
        grad_step_pipelined_zero2(g, a);
        return;
    }
    if (g->zero < 2) { /* buckets of whole units in backward order, all-reduced once */
        int closes[DT_MAX_CHUNKS + 2];
        dt_grad_buckets(a->size, U, c->plugin.bucket_mb * 1048576.0, closes);
        for (int u = U - 1, hi = U - 1; u >= 0; u--) {
            if (closes[u] < 0)
                continue;
            int64_t n = a->first[hi] + a->size[hi] - a->first[u];
            grad_op(g, allreduce(g->grad_p, n * 4));
            hi = u - 1;
        }
    } else { /* each unit reduce-scattered after its backward, every micro-batch */
        for (int m = 0; m < g->n_mb; m++)
            for (int u = 0; u < U; u++)
                grad_op(g, others(g, a, a->first[u], a->size[u]));
        grad_op(g, allreduce(g->grad_p, 8)); /* the gradient norm's partial sums */
    }
    if (g->zero == 1 || g->zero == 2) /* updated shards all-gathered into the whole arena */
        gather_op(g, others(g, a, 0, a->n));
    if (g->zero == 3)
        zero3_gathers(g, a);
}

/* Boundary messages this rank sends (recv: receives) in one step, activations forward and
 * gradients back. */
static int pipeline_messages(const dt_schedule *s, int rank, bool recv) {
    int n, k = 0;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++)
        k += recv ? a[i].op == DT_SCHED_OP_RECV_ACT || a[i].op == DT_SCHED_OP_RECV_GRAD
                  : a[i].op == DT_SCHED_OP_SEND_ACT || a[i].op == DT_SCHED_OP_SEND_GRAD;
    return k;
}

/* The step's boundary messages: whole on pp, or under plugin.pp_scatter this rank's piece on
 * pp and an all-gather over tp of each one received (train/pipeline.c) */
static void pipeline_step(ledger *g, const dt_layout *l, const dt_schedule *s, int64_t floats) {
    int sends = pipeline_messages(s, l->pp_rank, false);
    if (!l->pp_scatter) {
        g->out->pp += sends * floats * 4;
        return;
    }
    int64_t first, piece;
    dt_layout_piece(floats, l->tp, l->coords[DT_AXIS_TP], &first, &piece);
    g->out->pp += sends * piece * 4;
    for (int k = pipeline_messages(s, l->pp_rank, true); k > 0; k--)
        tp_op(g, (floats - piece) * 4);
}

/* The bytes of every comm over one step of layout l (its schedule sched when pp > 1). */
/* The ledger's view of rank l of a run of c. */
static ledger ledger_make(const dt_config *c, const dt_layout *l, dt_plan_comm *out) {
    const dt_model_config *m = &c->model;
    const dt_plugin_config *p = &c->plugin;
    int tp = l->tp, nkv = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    int64_t hs = m->n_embd / m->n_head;
    ledger g = {.out = out,
                .tp = tp,
                .sp = l->sp,
                .grad_p = l->grad_size,
                .grad_rank = l->grad_rank,
                .sg = l->rows_tp,
                .gpt2 = m->arch == DT_ARCH_GPT2,
                .C = m->n_embd,
                .hs = hs,
                .NH = m->n_head / tp,
                .T = l->T_local,
                .positions = (int64_t)l->T_local * (c->data.doc_mask ? l->cp : 1),
                .cp = l->cp,
                .vocab_rows = (m->vocab_size + tp - 1) / tp,
                .n_mb = l->n_mb,
                .L = l->n_layer,
                .zero = l->zero,
                .pp = l->pp,
                .lp = l->precision != DT_PREC_FP32,
                .plugin = p,
                .split = l->split_backward};
    g.rows = l->rows_split;
    g.N = l->tokens_mb;
    g.Nt = l->tokens_sp;
    g.W = (g.NH + 2 * (nkv / tp)) * hs;
    g.A = g.NH * hs;
    g.ring_block = g.N * (g.W - g.A) / l->sp * 4;
    g.dit = m->arch == DT_ARCH_DIT;
    g.dit_st = m->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL;
    g.B = l->mb;
    g.P = (int64_t)m->channels * m->patch_t * m->patch_h * m->patch_w;
    g.Lt = g.dit ? m->text_len : 0;
    memcpy(g.held, l->held, sizeof g.held);
    g.first = g.held[0];
    g.last = g.held[g.L + 1];
    return g;
}

/* The rank's parameter arena: its units' padded sizes, where each starts, its ZeRO shard. */
static arena arena_of(const dt_config *c, const ledger *g) {
    arena a = {0};
    a.U = dt_plan_local_units(&c->model, g->tp, g->held, a.size);
    for (int u = 0; u < a.U; u++)
        a.first[u] = a.n, a.n += a.size[u];
    a.S = ((a.n + g->grad_p - 1) / g->grad_p + 15) / 16 * 16;
    return a;
}

static dt_status ledger_of(const dt_config *c, const dt_layout *l, const dt_schedule *sched,
                           dt_plan_comm *out) {
    const dt_plugin_config *p = &c->plugin;
    ledger g = ledger_make(c, l, out);
    /* The block of each of this rank's chunks whose forward a micro-batch may find still in
     * the shared set (dt_plan_fresh_block; -1: none), and whether micro-batch k does:
     * fresh[c * n_mb + k] (without a pipeline, always). */
    static const int MB_MAX = 4096;
    if (g.n_mb > MB_MAX)
        return dt_err_set(DT_ERR_UNSUPPORTED,
                          "communication ledger: %d micro-batches (at most "
                          "%d)",
                          g.n_mb, MB_MAX);
    int chunk[DT_MAX_CHUNKS], block[DT_MAX_CHUNKS], n_fresh = 0;
    bool *fresh = NULL;
    if (g.pp > 1) {
        const dt_stage_plan *stages = &l->stages;
        if (!(fresh = calloc((size_t)stages->n_chunks * g.n_mb, sizeof *fresh)))
            return dt_err_set(DT_ERR_OOM, "communication ledger: out of memory");
        dt_sched_fresh(sched, l->pp_rank, fresh);
        for (int c = l->pp_rank; c < stages->n_chunks; c += g.pp) {
            chunk[n_fresh] = c;
            block[n_fresh++] = dt_plan_fresh_block(p, stages->first[c], stages->first[c + 1], g.L);
        }
    } else {
        chunk[0] = -1;
        block[n_fresh++] = dt_plan_fresh_block(p, 0, g.L + 2, g.L);
    }
    arena a = arena_of(c, &g);
    /* micro-batches alike (the same reruns skipped) move the same bytes: the first of a run
     * of them is counted, the others add its difference */
    bool skip[DT_MAX_CHUNKS] = {0}, was[DT_MAX_CHUNKS] = {0};
    dt_plan_comm before, delta = {0};
    int64_t repeats = 0; /* micro-batches since the last counted one, each adding delta */
    for (int k = 0; k < g.n_mb; k++) {
        bool same = k > 0;
        for (int i = 0; i < n_fresh; i++) {
            bool now = block[i] >= 0 && (chunk[i] < 0 || fresh[chunk[i] * g.n_mb + k]);
            same = same && now == was[i];
            was[i] = now;
            if (block[i] >= 0)
                skip[block[i]] = now;
        }
        if (same) {
            repeats++;
            continue;
        }
        comm_add(out, &delta, repeats);
        repeats = 0;
        before = *out;
        if (g.dit) /* its reruns are never skipped */
            dit_micro_batch(&g);
        else
            micro_batch(&g, skip);
        delta = *out;
        comm_add(&delta, &before, -1);
    }
    comm_add(out, &delta, repeats);
    free(fresh);
    out->grad_known = !(g.pp > 1 && g.zero == 3);
    if (out->grad_known)
        grad_step(&g, c, &a);
    tp_op(&g, allreduce(g.tp, 8)); /* the gradient norm over tp (and pp) */
    /* DiT: and silu(c), with text the text sequences and their counts */
    int64_t boundary =
        (g.Nt / g.rows + (g.dit ? g.B : 0)) * g.C + (g.Lt ? g.B * g.Lt * g.C + g.B : 0);
    if (g.pp > 1)
        pipeline_step(&g, l, sched, boundary);
    out->pp += allreduce(g.pp, 8);
    return DT_OK;
}

dt_status dt_plan_comm_bytes(const dt_config *c, int world, int rank, const dt_schedule *given,
                             dt_plan_comm *out) {
    const dt_schedule *sched;
    memset(out, 0, sizeof *out);
    dt_layout l;
    dt_schedule *own;
    DT_TRY(dt_layout_make_scheduled(c, world, rank, given, &l, &sched, &own));
    dt_status st = ledger_of(c, &l, sched, out);
    dt_sched_free(own);
    return st;
}

dt_status dt_plan_comm_grad_bytes(const dt_config *c, int world, int rank, const dt_schedule *given,
                                  dt_plan_comm *out) {
    memset(out, 0, sizeof *out);
    dt_layout l;
    const dt_schedule *sched;
    dt_schedule *own;
    DT_TRY(dt_layout_make_scheduled(c, world, rank, given, &l, &sched, &own));
    dt_sched_free(own);
    ledger g = ledger_make(c, &l, out);
    arena a = arena_of(c, &g);
    out->grad_known = !(g.pp > 1 && g.zero == 3);
    if (out->grad_known)
        grad_step(&g, c, &a);
    return DT_OK;
}
