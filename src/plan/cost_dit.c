/* The time model's rows for the video DiT (see cost.h, cost_impl.h): the passes of its units
 * on one micro-batch of B clips, from the DiT's own work (models/dit_fwd.c, dit_units.c,
 * dit_tp.c):
 *   matmuls    per block the adaLN modulation [B, C] -> 6C (its input is the clip's
 *              conditioning silu(c), so B rows, whole on every rank), q|k|v, proj, fc1, fc2
 *              over the rank's Nt token rows (tp: its heads and columns); the embedders
 *              (patches [Nr, P] -> C, the timestep MLP over B rows) and the final layer
 *              (modulation [B, C] -> 2C, linear [Nr, C] -> P). The patch embedding and the
 *              timestep MLP's first layer make no input gradient.
 *   attention  non-causal: 4 T hs FLOPs a token and head forward, twice that backward, T the
 *              sequence the block sees: the clip (full), a frame's Th Tw tokens (spatial, the
 *              even blocks of spatial_temporal), a position's Tt tokens across time (temporal)
 *   pointwise  the two modulated norms, GELU (and its rerun before the backward and the weight
 *              pass), the gated residual adds and their gradients, the bias gradients, the
 *              row permutations of temporal attention and the q|k|v regrouping for the
 *              all-to-all, 16-bit operand casts, the embedders' patchify and positions, the
 *              loss
 *   comm       the ledger's collectives (plan/comm.c) of each pass as latency + bus bytes /
 *              bandwidth: Ulysses all-to-alls only for full and temporal attention, tp region
 *              ops (Megatron-SP: gathers and reduce-scatters, and the row sums of the
 *              modulation, bias, patch and final linear gradients)
 *   recompute  full checkpointing reruns the block's forward before its backward (and before
 *              a split backward's weight pass); selective reruns the attention core alone
 *              (from q|k|v kept in attention order, no collective); int8 storage quantises
 *              the kept tensors after the forward and restores them before each backward pass
 * Pure: no MPI, no tensors; thread-safe when the device's gemm_rate is.
 */
#include "plan/cost_impl.h"

#include "plan/plan_impl.h"

#include <string.h>

/* The clip's geometry. */
typedef struct dit_geo {
    double S, hw, Tt, P; /* tokens a clip, a frame's tokens, frames of tokens, patch floats */
    bool st;             /* spatial_temporal attention */
} dit_geo;

static dit_geo geo_of(const dt_model_config *m) {
    dit_geo g = {.hw = (double)(m->height / m->patch_h) * (m->width / m->patch_w),
                 .Tt = m->frames / m->patch_t,
                 .P = (double)m->channels * m->patch_t * m->patch_h * m->patch_w,
                 .st = m->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL};
    g.S = g.hw * g.Tt;
    return g;
}

/* The attention sequence block l sees, and whether Ulysses needs its all-to-alls. */
static double seq_of(const dit_geo *g, int l) { return !g->st ? g->S : l % 2 == 0 ? g->hw : g->Tt; }
static bool spatial(const dit_geo *g, int l) { return g->st && l % 2 == 0; }

/* ---- the products, shared by the FLOP count and the time model ---------------------------- */

/* One matmul of a micro-batch: rows, input and output widths; no_dx: no input gradient. */
typedef struct product {
    double m, in, out;
    bool no_dx;
} product;

/* A rank's dims: clips B, token rows Nt (inside the tp region) and Nr (residual), widths;
 * text rows T = B Lt (0: no text) and a text token's features Din. */
typedef struct dims {
    double B, Nt, Nr, C, Ct, Ft, P, T, Din;
    bool bytes; /* the text is caption bytes: the embedder's fc1 makes an input gradient */
} dims;

enum { MAX_PRODUCTS = 9 };

/* The products of unit u (0: embedders, 1..L: blocks, L + 1: final layer). */
static int unit_products(const dims *k, int u, int L, product p[MAX_PRODUCTS]) {
    double B = k->B, C = k->C;
    if (u == 0) { /* x_embedder.proj, t_embedder.mlp.0 (sinusoidal features), .2 */
        p[0] = (product){k->Nr, k->P, C, true};
        p[1] = (product){B, DT_PLAN_DIT_FREQ_DIM, C, true};
        p[2] = (product){B, C, C, false};
        if (!k->T)
            return 3;
        p[3] = (product){k->T, k->Din, C, !k->bytes}; /* y_embedder.y_proj.fc1, fc2 */
        p[4] = (product){k->T, C, C, false};
        return 5;
    }
    if (u > L) { /* final_layer.adaLN_modulation.1, final_layer.linear */
        p[0] = (product){B, C, 2 * C, false};
        p[1] = (product){k->Nr, C, k->P, false};
        return 2;
    }
    p[0] = (product){B, C, 6 * C, false}; /* adaLN_modulation.1 */
    p[1] = (product){k->Nt, C, 3 * k->Ct, false};
    p[2] = (product){k->Nt, k->Ct, C, false};
    p[3] = (product){k->Nt, C, k->Ft, false};
    p[4] = (product){k->Nt, k->Ft, C, false};
    if (!k->T)
        return 5;
    p[5] = (product){k->Nt, C, k->Ct, false}; /* cross_attn.q_linear, k, v, proj */
    p[6] = (product){k->T, C, k->Ct, false};
    p[7] = (product){k->T, C, k->Ct, false};
    p[8] = (product){k->Nt, k->Ct, C, false};
    return 9;
}

double dt_plan_dit_step_flops(const dt_model_config *m, double clips) {
    dit_geo g = geo_of(m);
    double C = m->n_embd, N = clips * g.S, flops = 0, Lt = m->text_len;
    dims k = {.B = clips,
              .Nt = N,
              .Nr = N,
              .C = C,
              .Ct = C,
              .Ft = DT_PLAN_DIT_MLP_RATIO * C,
              .P = g.P,
              .T = clips * Lt,
              .Din = m->text_dim > 0 ? m->text_dim : 3 * C,
              .bytes = m->text_dim == 0};
    for (int u = 0; u < m->n_layer + 2; u++) {
        product p[MAX_PRODUCTS];
        int n = unit_products(&k, u, m->n_layer, p);
        for (int i = 0; i < n; i++)
            flops += 2 * p[i].m * p[i].in * p[i].out;
        if (u >= 1 && u <= m->n_layer) /* QK^T and PV over every head; the text's */
            flops += 4 * seq_of(&g, u - 1) * N * C + 4 * Lt * N * C;
    }
    return 3 * flops;
}

/* ---- one block, one micro-batch ------------------------------------------------------------- */

typedef struct dit_work {
    const dt_plan_work *w;
    dit_geo g;
    dims k;
} dit_work;

typedef struct pass {
    double f, b, wgt; /* forward, backward (input half when split), weight pass */
} pass;

/* The unit's products: forward, both backward halves (dw to the weight pass when split and
 * the unit is a block: the embedders' and final layer's come with the backward). */
static pass unit_matmuls(const dit_work *x, int u, bool split) {
    product p[MAX_PRODUCTS];
    int n = unit_products(&x->k, u, x->w->L, p);
    dt_plan_linear_s t = {0};
    double no_dx = 0;
    for (int i = 0; i < n; i++) {
        dt_plan_cost_add_linear(x->w, p[i].m, p[i].in, p[i].out, &t);
        no_dx +=
            p[i].no_dx ? dt_plan_cost_gemm(x->w, DT_PLAN_GEMM_DX, p[i].m, p[i].in, p[i].out) : 0;
    }
    bool block = u >= 1 && u <= x->w->L;
    if (split && block)
        return (pass){t.fwd, t.dx, t.dw};
    return (pass){t.fwd, t.dx - no_dx + t.dw, 0};
}

/* The attention core's forward FLOPs on this rank: its N / sp token rows (all N rows of
 * Ct / sp under the all-to-all, or its own Nt of Ct) over the block's sequence; with text,
 * its Nt rows' products with their clips' Lt text tokens (cross). */
static double attention_flops(const dit_work *x, int l, bool cross) {
    if (cross)
        return 4 * x->w->c->model.text_len * x->w->Nt * x->w->A;
    return 4 * seq_of(&x->g, l) * (x->w->N / x->w->sp) * x->w->A;
}

/* Pointwise work of block l: bytes at mem_bandwidth unless a kernel has its rate. Not at the
 * in-cache act_bandwidth a GPT's passes run at: at the DiT's widths its passes are many short
 * ones (modulations, gates, patch and attention orders) whose calls, not their bytes, take
 * the time, and even the large copy's rate leaves them short (one rank of
 * configs/dit-bounce.ini, bf16: 25 ms predicted, 39 measured). */
static pass block_pointwise(const dit_work *x, int l) {
    const dt_plan_work *w = x->w;
    const dims *k = &x->k;
    double bw = w->mem_bw, rows = k->Nr * k->C, hid = k->Nt * k->Ft;
    double qkv = k->Nt * 3 * k->Ct, att = k->Nt * k->Ct, tc = k->Nt * k->C;
    bool a2a = w->sp > 1 && !spatial(&x->g, l), temporal = x->g.st && l % 2 == 1;
    /* moves between row order and attention order: 8 bytes an element */
    double order = (temporal ? 8 * (qkv + att) : 0) + (a2a ? 8 * qkv : 0);
    double lp = w->lp ? 6 : 0;                            /* a cast: 4 bytes read, 2 written */
    double x_in = 2 * tc + att + hid + k->B * k->C;       /* the five products' inputs */
    double dy_out = qkv + 2 * tc + hid + 6 * k->B * k->C; /* and their outputs' gradients */
    pass p;
    /* two modulated norms; two gated adds (x, v in, out: 12 bytes); GELU; proj and fc2
     * under tp: the partial product and the bias added after the region (16 bytes) */
    p.f = 2 * rows / w->norm.fwd + 2 * 12 * rows / bw + hid / w->act.fwd +
          (order + lp * x_in + (w->tp > 1 ? 2 * 16 * rows : 0)) / bw;
    /* two gate adjoints (dv = g dy, d gate: 20 bytes), GELU rerun and its adjoint, the norms'
     * adjoints, zeroed gradient buffers (4 bytes), bias gradients (dy read), the orders again
     * (the attention rows rebuilt, the gradients moved back), dy and x cast for the dw and
     * dx products */
    p.b = 2 * 20 * rows / bw + hid / w->act.fwd + hid / w->act.bwd + 2 * rows / w->norm.bwd +
          (4 * (2 * hid + 2 * rows + att + qkv) + 4 * (qkv + 2 * tc + hid) + 2 * order +
           lp * (dy_out + x_in)) /
              bw;
    /* the weight pass: GELU again, the attention rows again, the inputs cast again */
    p.wgt = hid / w->act.fwd + ((temporal ? 8 * att : 0) + lp * x_in) / bw;
    return p;
}

/* The collectives of block l's passes (the ledger's, plan/comm.c), as seconds: the
 * tensor-parallel ones less what the device hides behind the products mm. */
static pass block_comm(const dit_work *x, int l, pass mm) {
    const dt_plan_work *w = x->w;
    double n = w->Nt * w->C * 4;
    double enter_f = w->sg ? dt_plan_cost_gather(w, w->tp, n) : 0;
    double leave_b = enter_f;
    double enter_b =
        w->sg ? dt_plan_cost_reduce_scatter(w, w->tp, n) : dt_plan_cost_allreduce(w, w->tp, n);
    double leave_f = enter_b;
    double qkv = 0, att = 0;
    if (!spatial(&x->g, l)) /* spatial attention stays on its frame's rows */
        qkv = dt_plan_cost_a2a(w, w->W), att = dt_plan_cost_a2a(w, w->A);
    /* Megatron-SP: the proj and fc2 biases' and the modulations' gradients summed over rows;
     * with text the cross-attention's queries enter and its proj leaves as the MLP's */
    double text = w->c->model.text_len > 0, rowp = 2 + text;
    double sums = w->sg ? rowp * dt_plan_cost_allreduce(w, w->tp, w->C * 4) +
                              dt_plan_cost_allreduce(w, w->tp, 6 * w->B * w->C * 4)
                        : 0;
    pass p;
    p.f = dt_plan_cost_tp_exposed(w, rowp * (enter_f + leave_f), mm.f) + qkv + att;
    p.b = dt_plan_cost_tp_exposed(w, rowp * (leave_b + enter_f + enter_b) + sums, mm.b) + 2 * att +
          qkv;
    p.wgt = dt_plan_cost_tp_exposed(w, rowp * enter_f, mm.wgt) + att;
    return p;
}

/* plugin.act_compress = int8: the tensors block l keeps as int8 (m1, q|k|v, y unless rerun,
 * a, x2, m2, h, f), quantised after the forward (4 bytes read, 1 written) and restored before
 * a backward pass (1 read, 4 written): one pass's seconds. */
static double int8_pass(const dit_work *x, dt_plan_rerun r) {
    const dt_plan_work *w = x->w;
    if (w->c->plugin.act_compress != DT_ACT_COMPRESS_INT8 || r == DT_PLAN_RERUN_BLOCK)
        return 0;
    const dims *k = &x->k;
    double n = 5 * k->Nr * k->C + k->Nt * (3 * k->Ct + k->Ft);
    if (r == DT_PLAN_RERUN_NONE)
        n += k->Nt * k->Ct;
    return 5 * n / w->mem_bw;
}

static pass cost_block(const dit_work *x, int l, bool split) {
    const dt_plan_work *w = x->w;
    pass mm = unit_matmuls(x, l + 1, split), pw = block_pointwise(x, l), cm = block_comm(x, l, mm);
    /* self-attention at its sequence's rate, cross-attention at the kernel's one rate */
    double self = attention_flops(x, l, false), cross = attention_flops(x, l, true);
    dt_plan_rate2 at = dt_plan_attn_at(w, seq_of(&x->g, l));
    double at_f = self / at.fwd + cross / w->attn.fwd;
    double at_b = 2 * self / at.bwd + 2 * cross / w->attn.bwd;
    if (!spatial(&x->g, l)) { /* full and temporal attention go around a ring */
        at_f += dt_plan_cost_ring(w, false, at_f);
        at_b += dt_plan_cost_ring(w, true, at_b);
    }
    dt_plan_rerun r = dt_plan_ac_rerun(&w->c->plugin, l);
    double q8 = int8_pass(x, r);
    double fwd = mm.f + at_f + pw.f + cm.f;
    /* what the slot did not keep, rebuilt before the backward and again before W */
    double rebuild = (r == DT_PLAN_RERUN_BLOCK       ? fwd
                      : r == DT_PLAN_RERUN_ATTENTION ? at_f
                                                     : 0) +
                     q8;
    pass k = {.f = fwd + q8, .b = mm.b + at_b + pw.b + cm.b + rebuild};
    if (split)
        k.wgt = mm.wgt + pw.wgt + cm.wgt + rebuild;
    return k;
}

/* The embedders: timestep features (B x 256 sines), the MLP, patchify (8 bytes a patch
 * float), the positions added (12 bytes); backward: the patch and MLP weight gradients
 * (Megatron-SP: the patch embedding's summed over rows). */
static pass cost_embed(const dit_work *x) {
    const dt_plan_work *w = x->w;
    const dims *k = &x->k;
    double bw = w->mem_bw, lp = w->lp ? 6 : 0;
    pass mm = unit_matmuls(x, 0, false);
    double io = 8 * k->Nr * k->P + 12 * k->Nr * k->C + lp * k->Nr * k->P;
    pass p = {.f = mm.f + io / bw, .b = mm.b + (8 * k->Nr * k->C + lp * 2 * k->Nr * k->P) / bw};
    if (w->sg)
        p.b += dt_plan_cost_allreduce(w, w->tp, (k->C * k->P + k->C) * 4);
    if (k->T) /* the text: GELU and its adjoint; its gradient summed over tp's heads */
        p.f += k->T * k->C / w->act.fwd, p.b += k->T * k->C * (1 / w->act.fwd + 1 / w->act.bwd) +
                                                dt_plan_cost_allreduce(w, w->tp, k->T * k->C * 4);
    return p;
}

/* The final layer and the loss: modulation, the modulated norm, the linear, the target's
 * patchify and the squared error (Megatron-SP: the loss, the linear's and the modulation's
 * gradients summed over rows). */
static pass cost_final(const dit_work *x) {
    const dt_plan_work *w = x->w;
    const dims *k = &x->k;
    double bw = w->mem_bw, rows = k->Nr * k->C, tok = k->Nr * k->P;
    double lp = w->lp ? 6 : 0;
    pass mm = unit_matmuls(x, w->L + 1, false);
    pass p = {.f = mm.f + rows / w->norm.fwd + (20 * tok + lp * rows) / bw,
              .b = mm.b + rows / w->norm.bwd + (8 * rows + lp * (tok + rows)) / bw};
    if (w->sg)
        p.f += dt_plan_cost_allreduce(w, w->tp, 8),
            p.b += dt_plan_cost_allreduce(w, w->tp, (k->P * k->C + k->P + 2 * k->B * k->C) * 4);
    return p;
}

static dit_work dit_work_of(const dt_plan_work *w) {
    const dt_model_config *m = &w->c->model;
    dit_work x = {.w = w, .g = geo_of(m)};
    x.k = (dims){.B = w->B,
                 .Nt = w->Nt,
                 .Nr = w->Nr,
                 .C = w->C,
                 .Ct = w->A,
                 .Ft = w->F,
                 .P = x.g.P,
                 .T = (double)w->B * m->text_len,
                 .Din = m->text_dim > 0 ? m->text_dim : 3.0 * w->C,
                 .bytes = m->text_dim == 0};
    return x;
}

/* unit u's passes: 0 the embedders, 1..L the blocks, L + 1 the final layer and the loss */
static pass unit_pass(const dit_work *x, int u, bool split) {
    return u == 0 ? cost_embed(x) : u > x->w->L ? cost_final(x) : cost_block(x, u - 1, split);
}

void dt_plan_dit_chunk_costs(const dt_plan_work *w, const dt_stage_plan *sp, bool split,
                             dt_plan_chunk_cost *out) {
    dit_work x = dit_work_of(w);
    for (int c = 0; c < w->pp * w->v; c++) {
        dt_plan_chunk_cost k = {0};
        for (int u = sp->first[c]; u < sp->first[c + 1]; u++) {
            pass p = unit_pass(&x, u, split);
            k.f += p.f, k.b += p.b, k.wgt += p.wgt;
        }
        k.b_fresh = k.b; /* the DiT reruns before every backward */
        out[c] = k;
    }
}

void dt_plan_dit_unit_backwards(const dt_plan_work *w, double *b) {
    dit_work x = dit_work_of(w);
    for (int u = 0; u < w->L + 2; u++)
        b[u] = unit_pass(&x, u, false).b;
}

/* ---- buckets of clip shape (data.buckets): the run as the mean over its buckets' shares ---- */

/* The share of steps bucket k takes (its weight over their sum). */
static double bucket_share(const dt_buckets *bk, int k) {
    double sum = 0;
    for (int j = 0; j < bk->n; j++)
        sum += bk->b[j].weight;
    return bk->b[k].weight / sum;
}

/* buckets of clip shape (data.buckets) parsed; none when the config has none or is no DiT's */
dt_buckets dt_plan_buckets_of(const dt_config *c) {
    dt_buckets bk = {0};
    if (c->model.arch != DT_ARCH_DIT || dt_config_buckets(c, &bk) != DT_OK)
        bk.n = 0;
    return bk;
}

double dt_plan_step_tokens(const dt_config *c) {
    dt_buckets bk = dt_plan_buckets_of(c);
    double tokens = 0;
    for (int k = 0; k < bk.n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk.b[k]);
        tokens += bucket_share(&bk, k) * ck.train.batch_size * ck.train.seq_len;
    }
    return bk.n ? tokens : (double)c->train.batch_size * c->train.seq_len;
}

double dt_plan_flops_of_buckets(const dt_config *c, const dt_buckets *bk) {
    double flops = 0;
    for (int k = 0; k < bk->n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk->b[k]);
        flops += bucket_share(bk, k) * dt_plan_step_flops(&ck);
    }
    return flops;
}

/* The run over buckets: each bucket's step, weighted by its share of the steps. */
dt_status dt_plan_time_of_buckets(const dt_config *c, const dt_buckets *bk, int world,
                                  const dt_plan_device *d, const dt_schedule *given,
                                  dt_plan_time *out, dt_plan_stage_time *stages) {
    memset(out, 0, sizeof *out);
    int pp = c->plugin.pp_size > 1 ? c->plugin.pp_size : 1;
    dt_plan_stage_time each[DT_MAX_CHUNKS];
    if (stages)
        memset(stages, 0, (size_t)pp * sizeof *stages);
    for (int k = 0; k < bk->n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk->b[k]);
        dt_plan_time t;
        dt_status st = dt_plan_step_time_stages(&ck, world, d, given, &t, stages ? each : NULL);
        DT_TRY(dt_bucket_wrap(st, bk, k));
        double w = bucket_share(bk, k);
        for (int r = 0; stages && r < pp; r++) {
            stages[r].compute_s += w * each[r].compute_s;
            stages[r].idle_s += w * each[r].idle_s;
            stages[r].comm_s += w * each[r].comm_s;
            stages[r].optimizer_s += w * each[r].optimizer_s;
        }
        out->step_s += w * t.step_s;
        out->compute_s += w * t.compute_s;
        out->comm_s += w * t.comm_s;
        out->bubble += w * t.bubble;
        out->act_disk_s += w * t.act_disk_s;
        out->data_s += w * t.data_s;
        out->optimizer_s += w * t.optimizer_s;
    }
    return DT_OK;
}
