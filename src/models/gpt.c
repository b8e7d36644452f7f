/* GPT-2 / Llama model: unit views, arenas, and the forward/backward loops over blocks. The
 * parameter tables, the split checks and the whole-tensor gathers are in gpt_tables.c.
 *
 * Parameters are laid out in HuggingFace order; q/k/v projections (and GPT-2's fused c_attn)
 * are adjacent in the arena, so the attention's input projection is a single matmul over
 * [(NH + 2 NKV) hs, C] however the file names them. Activations are carved out of one arena
 * (accounted as activations) and the backward scratch out of another (temporaries): gpt_arenas.c.
 */
#include "models/gpt_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/reduce.h"
#include "kernels/rope.h"
#include "nn/block.h"
#include "nn/lm_head.h"

int dt_gpt_kv_heads(const dt_model_config *c) {
    return c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
}

int dt_gpt_ffn_hidden(const dt_model_config *c) {
    if (c->arch == DT_ARCH_GPT2)
        return 4 * c->n_embd;
    if (c->ffn_hidden > 0)
        return c->ffn_hidden;
    int f = (8 * c->n_embd + 2) / 3; /* Llama: 2/3 of 4C, rounded up to a multiple of 64 */
    return (f + 63) / 64 * 64;
}

const dt_model_config *dt_gpt_config_of(const dt_gpt *g) { return &g->cfg; }

/* ---- views ----------------------------------------------------------------------------- */

/* A unit's storage: element `first` of the arena lives at w[0] (g[0], lp[0]). */
typedef struct unit_store {
    float *w, *g;
    dt_bf16 *lp;
    int64_t first;
} unit_store;

static float *wv(const unit_store *u, const dt_param *p) {
    return u->w ? u->w + (p->offset - u->first) : NULL;
}
static float *gv(const unit_store *u, const dt_param *p) {
    return u->g ? u->g + (p->offset - u->first) : NULL;
}
static const dt_bf16 *lpv(const unit_store *u, const dt_param *p) {
    return u->lp ? u->lp + (p->offset - u->first) : NULL;
}

static dt_linear linear_view(const unit_store *u, const dt_param *w, const dt_param *b,
                             int64_t out_rows) {
    return (dt_linear){.in = (int)w->shape[1],
                       .out = (int)out_rows,
                       .w = wv(u, w),
                       .b = b ? wv(u, b) : NULL,
                       .dw = gv(u, w),
                       .db = b ? gv(u, b) : NULL,
                       .w_lp = lpv(u, w)};
}

static dt_norm_params norm_view(const unit_store *u, const dt_param *w, const dt_param *b) {
    return (dt_norm_params){
        .w = wv(u, w), .b = b ? wv(u, b) : NULL, .dw = gv(u, w), .db = b ? gv(u, b) : NULL};
}

/* the first local tensor of global unit u (which this rank holds) */
static const dt_param *unit_tensors(const dt_gpt *g, int u) {
    return g->params + g->unit_param[g->unit_local[u]];
}

static void wire_block(dt_gpt *g, int l, const unit_store *u) {
    const dt_param *q = unit_tensors(g, l + 1);
    dt_block *b = &g->blocks[l];
    int qkv_rows = dt_block_qkv_width(&g->dims);
    if (g->cfg.arch == DT_ARCH_GPT2) {
        b->ln1 = norm_view(u, &q[GPT2_LN1_W], &q[GPT2_LN1_B]);
        b->qkv = linear_view(u, &q[GPT2_QKV_W], &q[GPT2_QKV_B], qkv_rows);
        b->proj = linear_view(u, &q[GPT2_PROJ_W], &q[GPT2_PROJ_B], q[GPT2_PROJ_W].shape[0]);
        b->ln2 = norm_view(u, &q[GPT2_LN2_W], &q[GPT2_LN2_B]);
        b->fc = linear_view(u, &q[GPT2_FC_W], &q[GPT2_FC_B], q[GPT2_FC_W].shape[0]);
        b->down = linear_view(u, &q[GPT2_DOWN_W], &q[GPT2_DOWN_B], q[GPT2_DOWN_W].shape[0]);
    } else { /* q, k, v adjacent (check_fused_qkv): one matmul from q's view */
        b->ln1 = norm_view(u, &q[LLAMA_LN1_W], NULL);
        b->qkv = linear_view(u, &q[LLAMA_Q_W], NULL, qkv_rows);
        b->proj = linear_view(u, &q[LLAMA_O_W], NULL, q[LLAMA_O_W].shape[0]);
        b->ln2 = norm_view(u, &q[LLAMA_LN2_W], NULL);
        b->fc = linear_view(u, &q[LLAMA_GATE_W], NULL, q[LLAMA_GATE_W].shape[0]);
        b->up = linear_view(u, &q[LLAMA_UP_W], NULL, q[LLAMA_UP_W].shape[0]);
        b->down = linear_view(u, &q[LLAMA_DOWN_W], NULL, q[LLAMA_DOWN_W].shape[0]);
    }
}

static void wire_head(dt_gpt *g, const unit_store *u, const dt_param *w) {
    g->head.C = g->cfg.n_embd;
    g->head.V = (int)g->vocab_rows;
    g->head.w = wv(u, w);
    g->head.dw = gv(u, w);
    g->head.w_lp = lpv(u, w);
}

static void wire_unit(dt_gpt *g, int lu) {
    int64_t first, count;
    dt_gpt_unit_range(g, lu, &first, &count);
    unit_store u = {.w = g->unit_w[lu], .g = g->unit_g[lu], .lp = g->unit_lp[lu], .first = first};
    int gu = g->unit_global[lu];
    const dt_param *P = g->params + g->unit_param[lu];
    bool gpt2 = g->cfg.arch == DT_ARCH_GPT2;
    if (gu == 0) {
        const dt_param *wte = &P[gpt2 ? GPT2_WTE : LLAMA_EMBED_W];
        g->wte = wv(&u, wte);
        g->dwte = gv(&u, wte);
        g->wpe = gpt2 ? wv(&u, &P[GPT2_WPE]) : NULL;
        g->dwpe = gpt2 ? gv(&u, &P[GPT2_WPE]) : NULL;
        if (gpt2)
            wire_head(g, &u, wte);
    } else if (gu <= g->cfg.n_layer) {
        wire_block(g, gu - 1, &u);
    } else if (gpt2) { /* the head's copy of wte when held here, after ln_f */
        g->lnf = norm_view(&u, &P[GPT2_LNF_W], &P[GPT2_LNF_B]);
        if (g->tied_copy >= 0)
            wire_head(g, &u, &g->params[g->tied_copy]);
    } else {
        g->lnf = norm_view(&u, &P[LLAMA_NORM_W], NULL);
        wire_head(g, &u, &P[LLAMA_HEAD_W]);
    }
}

/* Llama's q/k/v projections must be adjacent in the arena for the fused matmul. The table
 * pads each tensor to 16 floats, so they are whenever rows x C is a multiple of 16. */
static dt_status check_fused_qkv(const dt_gpt *g) {
    if (g->cfg.arch != DT_ARCH_LLAMA)
        return DT_OK;
    for (int l = 0; l < g->cfg.n_layer; l++) {
        if (g->unit_local[l + 1] < 0)
            continue;
        const dt_param *t = unit_tensors(g, l + 1);
        const dt_param *q = &t[LLAMA_Q_W], *k = &t[LLAMA_K_W], *v = &t[LLAMA_V_W];
        if (q->offset + q->numel != k->offset || k->offset + k->numel != v->offset)
            return dt_err_set(DT_ERR_ARG,
                              "model: q/k/v projections of layer %d are not "
                              "contiguous (n_embd=%d should be a multiple of 16)",
                              l, g->cfg.n_embd);
    }
    return DT_OK;
}

int dt_gpt_n_units(const dt_gpt *g) { return g->n_units; }
int dt_gpt_unit_global(const dt_gpt *g, int unit) { return g->unit_global[unit]; }
int dt_gpt_unit_local(const dt_gpt *g, int global_unit) { return g->unit_local[global_unit]; }

void dt_gpt_unit_range(const dt_gpt *g, int unit, int64_t *first, int64_t *count) {
    dt_param_tables t = dt_gpt_tables(g);
    dt_param_unit_range(&t, unit, first, count);
}

int dt_gpt_head_unit(const dt_gpt *g) {
    int L1 = g->cfg.n_layer + 1;
    if (g->cfg.arch == DT_ARCH_GPT2 && g->unit_local[0] >= 0)
        return g->unit_local[0];
    return g->unit_local[L1];
}

int dt_gpt_tied_copy(const dt_gpt *g) { return g->tied_copy; }

void dt_gpt_bind_unit(dt_gpt *g, int unit, float *w, float *grad, dt_bf16 *w_lp) {
    if (w)
        g->unit_w[unit] = w;
    if (grad)
        g->unit_g[unit] = grad;
    if (w_lp)
        g->unit_lp[unit] = w_lp;
    wire_unit(g, unit);
}

void dt_gpt_fresh_grads(dt_gpt *g, int unit) {
    for (int u = unit < 0 ? 0 : unit; u < (unit < 0 ? g->n_units : unit + 1); u++)
        g->fresh[u] = DT_GPT_FRESH_ALL;
}

/* Whether any of `bits` of local unit lu is still fresh; clears them: that pass writes now. */
static bool take_fresh(dt_gpt *g, int lu, unsigned bits) {
    bool set = (g->fresh[lu] & bits) != 0;
    g->fresh[lu] &= (uint8_t)~bits;
    return set;
}

/* GPT-2 on a rank holding unit 0: the head's matrix is the token embedding, whose gradient
 * both the head (HEAD) and the embedding (BACKWARD) write; whichever comes first sets it. */
static bool head_is_embedding(const dt_gpt *g) {
    return g->cfg.arch == DT_ARCH_GPT2 && g->unit_local[0] >= 0;
}

static void block_grad_set(dt_block *b, bool set) {
    b->ln1.grad_set = b->ln2.grad_set = set;
    b->qkv.grad_set = b->proj.grad_set = b->fc.grad_set = b->up.grad_set = set;
    b->down.grad_set = set;
}

void dt_gpt_set_hooks(dt_gpt *g, const dt_gpt_hooks *hooks) {
    g->hooks = hooks ? *hooks : (dt_gpt_hooks){0};
}

/* The 16-bit weights of an entered unit, per unit (g->lp_per_unit): the head's matrix for the
 * head, a block's whole range for a block (kept while the same block is entered again); the
 * embedding and the final norm read fp32 only. Costs one cast of each block per forward and
 * per backward, and of the head's matrix per micro-batch, instead of a 16-bit copy of the
 * whole model held for the run. */
static void cast_entered(dt_gpt *g, int unit, dt_gpt_phase phase) {
    dt_dtype mm = g->ctx.mm_type;
    if (phase == DT_PHASE_HEAD) {
        dt_cast_f32_to_lp(mm, g->lp_head, g->head.w, (int64_t)g->head.V * g->head.C);
        g->head.w_lp = g->lp_head;
        g->lp_block_unit = -1; /* the head's buffers overlay the block's */
        return;
    }
    int gu = g->unit_global[unit];
    if (gu < 1 || gu > g->cfg.n_layer || g->lp_block_unit == unit)
        return;
    int64_t first, count;
    dt_gpt_unit_range(g, unit, &first, &count);
    dt_cast_f32_to_lp(mm, g->lp_block, g->unit_w[unit], count);
    g->lp_block_unit = unit;
    dt_gpt_bind_unit(g, unit, NULL, NULL, g->lp_block);
}

static dt_status enter(dt_gpt *g, int unit, dt_gpt_phase phase) {
    if (g->hooks.enter)
        DT_TRY(g->hooks.enter(g->hooks.ctx, unit, phase));
    if (g->lp_per_unit)
        cast_entered(g, unit, phase);
    return DT_OK;
}

static dt_status leave(dt_gpt *g, int unit, dt_gpt_phase phase) {
    return g->hooks.leave ? g->hooks.leave(g->hooks.ctx, unit, phase) : DT_OK;
}

/* A (slot, block)'s saved set is in use from its forward until its backward (split: its
 * weight pass) has read it; the accountant's timeline shows the arena filling and emptying. */
static void mark_saved(dt_gpt *g, int slot, int l, bool live) {
    size_t k = (size_t)slot * g->cfg.n_layer + l;
    dt_mem_mark_saved(g->mem, "block", slot, l, g->saved_bytes[k], &g->saved_live[k], live);
}

void dt_gpt_begin_eval(dt_gpt *g) { g->evaluating = true; }

void dt_gpt_drop_saved(dt_gpt *g) {
    g->evaluating = false;
    for (int slot = 0; slot < g->n_slots; slot++)
        for (int l = 0; l < g->cfg.n_layer; l++)
            mark_saved(g, slot, l, false);
}

/* The comms the caller gave, and size-1 comms for the rest. */
static dt_status setup_par(dt_gpt *g, const dt_gpt_opts *o) {
    DT_TRY(
        dt_block_par_make(o->tp, o->sp, o->sequence_tp, o->cp, o->cp_zigzag, g->own_comm, &g->par));
    const dt_comm *cp = g->par.ring.cp;
    g->n_chunks = 1;
    g->chunk[0] = 0;
    if (cp->size > 1)
        g->n_chunks = dt_ring_chunks(cp->size, o->cp_zigzag, cp->rank, g->chunk);
    if (g->T % g->n_chunks)
        return dt_err_set(DT_ERR_ARG, "model: %d local tokens do not split into %d ring chunks",
                          g->T, g->n_chunks);
    return dt_gpt_check_split(&g->cfg, g->par.tp->size, g->par.sp->size, o->sequence_tp, g->T);
}

/* ---- life cycle ------------------------------------------------------------------------ */

dt_status dt_gpt_init(const dt_model_config *cfg, const dt_gpt_opts *o, dt_mem *mem, dt_gpt **out) {
    *out = NULL;
    dt_status st;
    int B = o->B, T = o->T;
    bool training = o->training;
    dt_precision prec = o->precision;
    if (cfg->n_embd % cfg->n_head || T > cfg->max_seq_len || B < 1 || T < 1)
        return dt_err_set(DT_ERR_ARG,
                          "model: bad shape (n_embd=%d, n_head=%d, B=%d, T=%d, "
                          "max_seq_len=%d)",
                          cfg->n_embd, cfg->n_head, B, T, cfg->max_seq_len);
    dt_gpt *g = calloc(1, sizeof *g);
    if (!g)
        return dt_err_set(DT_ERR_OOM, "model: out of memory");
    g->cfg = *cfg;
    g->B = B;
    g->T = T;
    g->training = training;
    g->mem = mem;
    g->pp = o->pp;
    DT_TRY_GOTO(setup_par(g, o));
    int tp = g->par.tp->size;
    g->dims = (dt_block_dims){.kind = cfg->arch == DT_ARCH_GPT2 ? DT_BLOCK_GPT2 : DT_BLOCK_LLAMA,
                              .C = cfg->n_embd,
                              .NH = cfg->n_head / tp,
                              .NKV = dt_gpt_kv_heads(cfg) / tp,
                              .hs = cfg->n_embd / cfg->n_head,
                              .F = dt_gpt_ffn_hidden(cfg) / tp,
                              .norm_eps = cfg->norm_eps};
    g->vocab_rows = (cfg->vocab_size + tp - 1) / tp;
    DT_TRY_GOTO(dt_gemm_init(&g->gemm));
    g->ctx = (dt_nn_ctx){.gemm = g->gemm, .mm_type = dt_precision_mm_type(prec)};
    DT_TRY_GOTO(dt_gpt_build_tables(g, o->units));
    size_t n = (size_t)g->n_total;
    if (!o->external_weights)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_PARAMS, "weights", n * sizeof(float), (void **)&g->w));
    if (training && !o->external_grads)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_GRADS, "grads", n * sizeof(float), (void **)&g->g));
    g->lp_per_unit = g->ctx.mm_type != DT_F32 && !o->external_weights;
    g->lp_block_unit = -1;
    int n_units = g->n_units;
    g->n_slots = o->n_slots > 0 ? o->n_slots : 1;
    g->n_grads = o->n_grads > 0 ? o->n_grads : g->n_slots;
    g->blocks = calloc((size_t)cfg->n_layer, sizeof *g->blocks);
    g->acts = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->acts);
    g->saved_bytes = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->saved_bytes);
    g->saved_live = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->saved_live);
    g->ac = o->ac;
    g->ac_every = o->ac_every > 0 ? o->ac_every : 1;
    g->compress = o->act_compress == DT_ACT_COMPRESS_INT8;
    if (g->compress && !(g->q8 = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->q8))) {
        st = dt_err_set(DT_ERR_OOM, "model: out of memory");
        goto fail;
    }
    if (o->split_backward && training) {
        g->wgrad = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->wgrad);
        if (!g->wgrad) {
            st = dt_err_set(DT_ERR_OOM, "model: out of memory");
            goto fail;
        }
    }
    g->unit_w = calloc((size_t)n_units, sizeof *g->unit_w);
    g->unit_g = calloc((size_t)n_units, sizeof *g->unit_g);
    g->unit_lp = calloc((size_t)n_units, sizeof *g->unit_lp);
    g->fresh = malloc((size_t)n_units);
    g->pos_index = calloc((size_t)cfg->n_layer + 1, sizeof *g->pos_index);
    if (!g->blocks || !g->acts || !g->saved_bytes || !g->saved_live || !g->unit_w || !g->unit_g ||
        !g->unit_lp || !g->fresh || !g->pos_index) {
        st = dt_err_set(DT_ERR_OOM, "model: out of memory");
        goto fail;
    }
    DT_TRY_GOTO(check_fused_qkv(g));
    dt_gpt_fresh_grads(g, -1);
    for (int u = 0; u < n_units; u++) {
        int64_t first, count;
        dt_gpt_unit_range(g, u, &first, &count);
        dt_gpt_bind_unit(g, u, g->w ? g->w + first : NULL, g->g ? g->g + first : NULL, NULL);
    }
    g->head.chunk = dt_lm_head_chunk_rows((int)g->vocab_rows, (int)dt_gpt_rows_max(g).Nt,
                                          g->lp_per_unit ? DT_LM_HEAD_LOGITS_FLOATS_CAST
                                                         : DT_LM_HEAD_LOGITS_FLOATS);
    g->head.vocab_size = cfg->vocab_size; /* rows past it are padding, never predicted */
    g->head.vocab_first = (int)(g->par.tp->rank * g->vocab_rows);
    g->head.tp = g->par.tp;
    g->offload = training && o->act_offload == DT_OFFLOAD_DISK;
    g->doc_mask = o->doc_mask;
    g->n_positions = g->doc_mask ? T * g->par.ring.cp->size : T;
    if (g->doc_mask) {
        size_t ints = (size_t)B * T * sizeof(int32_t);
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "docs.ids", ints, (void **)&g->ids));
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "docs.starts", ints, (void **)&g->doc));
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "docs.positions", ints, (void **)&g->pos));
    }
    DT_TRY_GOTO(dt_gpt_alloc_arenas(g));
    if (g->offload)
        DT_TRY_GOTO(dt_gpt_offload_open(g, o->act_offload_dir ? o->act_offload_dir : "offload",
                                        o->act_offload_tag));
    if (cfg->arch == DT_ARCH_LLAMA) {
        size_t half = (size_t)g->n_positions * (g->dims.hs / 2) * sizeof(float);
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "rope.cos", half, (void **)&g->rope_cos));
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "rope.sin", half, (void **)&g->rope_sin));
        /* the positions this rank holds (its chunks), or with documents every position */
        int n = g->doc_mask ? 1 : g->n_chunks, Tc = g->n_positions / n, half_hs = g->dims.hs / 2;
        for (int i = 0; i < n; i++)
            dt_rope_tables(g->rope_cos + (int64_t)i * Tc * half_hs,
                           g->rope_sin + (int64_t)i * Tc * half_hs, Tc, g->dims.hs,
                           g->doc_mask ? 0 : g->chunk[i] * Tc, cfg->rope_theta);
    }
    g->seq = (dt_block_seq){.cos_t = g->rope_cos, .sin_t = g->rope_sin};
    *out = g;
    return DT_OK;
fail:
    dt_gpt_free(g);
    return st;
}

void dt_gpt_free(dt_gpt *g) {
    if (!g)
        return;
    dt_gpt_offload_close(g);
    dt_mem_release(g->mem, g->rope_sin);
    dt_mem_release(g->mem, g->rope_cos);
    dt_mem_release(g->mem, g->pos);
    dt_mem_release(g->mem, g->doc);
    dt_mem_release(g->mem, g->ids);
    dt_mem_release(g->mem, g->tmp_arena);
    dt_mem_release(g->mem, g->act_arena);
    dt_mem_release(g->mem, g->g);
    dt_mem_release(g->mem, g->w);
    free(g->fresh);
    free(g->unit_lp);
    free(g->unit_g);
    free(g->unit_w);
    free(g->pos_index);
    free(g->unit_param);
    free(g->unit_local);
    free(g->unit_global);
    free(g->local_full);
    free(g->acts);
    free(g->saved_bytes);
    free(g->saved_live);
    free(g->q8);
    free(g->wgrad);
    free(g->blocks);
    if (g->full != g->params)
        free(g->full);
    free(g->params);
    dt_block_par_free_own(g->own_comm);
    dt_gemm_free(g->gemm);
    free(g);
}

void dt_gpt_init_weights(dt_gpt *g, uint64_t seed) {
    DT_ASSERT(g->w);
    dt_param_init_range(g->params, g->n_params, seed, 0, g->n_total, g->w);
    dt_gpt_sync_lp(g);
}

void dt_gpt_sync_lp(dt_gpt *g) { g->lp_block_unit = -1; /* the next entry casts the new weights */ }

void dt_gpt_zero_grad(dt_gpt *g) {
    if (g->g)
        dt_zero_f32(g->g, g->n_total);
}

/* ---- forward / backward ---------------------------------------------------------------- */

static dt_status check_shape(const dt_gpt *g, int B, int T) {
    if (B < 1 || T < 1 || (int64_t)B * T > (int64_t)g->B * g->T || T > g->T)
        return dt_err_set(DT_ERR_ARG, "model: batch %dx%d exceeds the %dx%d it was built for", B, T,
                          g->B, g->T);
    int split = g->par.sp->size * g->par.rows->size;
    if ((B * T) % split)
        return dt_err_set(DT_ERR_ARG,
                          "model: a batch of %dx%d tokens does not split over %d "
                          "sequence-parallel ranks",
                          B, T, split);
    return DT_OK;
}

/* Where this rank's rows start in the flattened [B*T] batch: inside the tp region (t0) and
 * in the residual stream (r0). */
static void row_starts(const dt_gpt *g, int N, int64_t *t0, int64_t *r0) {
    int Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N);
    *t0 = (int64_t)g->par.sp->rank * Nt;
    *r0 = *t0 + (int64_t)g->par.rows->rank * Nr;
}

static size_t res_rows(const dt_gpt *g, int N) { return (size_t)dt_block_rows_res(&g->par, N); }

/* residual position l (input of block l; L: the final norm's input) of a slot; one between
 * two held blocks under act_offload lasts only from one block's forward to the next's */
static float *res_at(const dt_gpt *g, int slot, int l, int N) {
    if (dt_gpt_offload_interior(g, l))
        return g->res_pass[l % 2];
    size_t n = res_rows(g, N) * g->cfg.n_embd;
    return g->res + ((size_t)slot * g->n_pos + (size_t)g->pos_index[l]) * n;
}

static float *dres_of(const dt_gpt *g, int grad, int N) {
    return g->dres + (size_t)grad * res_rows(g, N) * g->cfg.n_embd;
}

static dt_region_shape tp_shape(const dt_gpt *g, int N) {
    return (dt_region_shape){.rows = dt_block_rows_tp(&g->par, N), .cols = g->cfg.n_embd};
}

/* Vocabulary-parallel embedding: each tp rank looks up the ids of its vocabulary shard (zeros
 * for the rest), the leaving region sums the shards (and, under Megatron-SP, scatters rows),
 * then the position embedding is added once, like a row-parallel layer's bias. */
static dt_status embed_forward(dt_gpt *g, const int32_t *tokens, int N, int T, float *out) {
    int Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N);
    int64_t t0, r0, v0 = (int64_t)g->par.tp->rank * g->vocab_rows;
    row_starts(g, N, &t0, &r0);
    if (g->par.tp->size == 1) { /* the leaving region is the identity: look up in place */
        dt_rows_gather(out, g->wte, tokens + t0, v0, g->vocab_rows, Nt, g->cfg.n_embd);
    } else {
        dt_rows_gather(g->scratch.part, g->wte, tokens + t0, v0, g->vocab_rows, Nt, g->cfg.n_embd);
        dt_region_shape sh = tp_shape(g, N);
        DT_TRY(dt_region_op_get(g->par.leave)
                   ->forward(g->par.tp, &sh, g->scratch.part, out, g->scratch.work));
    }
    if (g->wpe && g->doc_mask) /* positions restart at each document */
        dt_rows_add_indexed(out, g->wpe, g->pos + r0, Nr, g->cfg.n_embd);
    else if (g->wpe)
        dt_rows_add_positions(out, g->wpe, r0, T, Nr, g->cfg.n_embd, g->n_chunks, g->chunk);
    return DT_OK;
}

/* The gradient of the position rows (local, dpos [T, C]; with documents the positions
 * themselves, [n_positions, C]) into wpe's, at the whole-sequence positions of this rank's
 * chunks; `set`: the step's first write, which zeroes the rest. */
static void positions_grad_out(dt_gpt *g, int T, bool set) {
    int C = g->cfg.n_embd, Tc = T / g->n_chunks;
    if (set)
        dt_zero_f32(g->dwpe, (int64_t)g->cfg.max_seq_len * C);
    if (g->doc_mask) {
        dt_add_inplace(g->dwpe, g->dpos, (int64_t)g->n_positions * C);
        return;
    }
    for (int i = 0; i < g->n_chunks; i++)
        dt_add_inplace(g->dwpe + (int64_t)g->chunk[i] * Tc * C, g->dpos + (int64_t)i * Tc * C,
                       (int64_t)Tc * C);
}

/* The step's first write of wpe's gradient copies the T rows and zeroes the rest; of wte's
 * (unless the tied head wrote it first) zeroes it for the scatter: the one gradient that is
 * zeroed, as any embedding's is, since a scatter touches only the rows of the tokens seen. */
static dt_status embed_backward(dt_gpt *g, const int32_t *tokens, int N, int T, const float *dres) {
    int Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N), C = g->cfg.n_embd;
    int64_t t0, r0, v0 = (int64_t)g->par.tp->rank * g->vocab_rows;
    row_starts(g, N, &t0, &r0);
    int lu = g->unit_local[0];
    bool head_first = head_is_embedding(g) && !(g->fresh[lu] & DT_GPT_FRESH_HEAD);
    bool set = take_fresh(g, lu, DT_GPT_FRESH_BACKWARD);
    if (g->dwpe) { /* a partial sum over the rows comm under Megatron-SP */
        int64_t n = (int64_t)(g->doc_mask ? g->n_positions : T) * C;
        memset(g->dpos, 0, (size_t)n * sizeof(float));
        if (g->doc_mask)
            dt_rows_scatter_add(g->dpos, dres, g->pos + r0, 0, g->n_positions, Nr, C);
        else
            dt_rows_positions_grad(g->dpos, dres, r0, T, Nr, C);
        DT_TRY(dt_comm_allreduce_f32(g->par.rows, g->dpos, n, NULL));
        positions_grad_out(g, T, set);
    }
    if (set && !head_first)
        dt_zero_f32(g->dwte, g->vocab_rows * C);
    const float *dpart = dres; /* the leaving region's adjoint: identity over one tp rank */
    if (g->par.tp->size > 1) {
        memset(g->scratch.part, 0, (size_t)Nt * C * sizeof(float));
        dt_region_shape sh = tp_shape(g, N);
        DT_TRY(dt_region_op_get(g->par.leave)
                   ->backward(g->par.tp, &sh, dres, g->scratch.part, g->scratch.work));
        dpart = g->scratch.part;
    }
    dt_rows_scatter_add(g->dwte, dpart, tokens + t0, v0, g->vocab_rows, Nt, C);
    return DT_OK;
}

static dt_status check_units(const dt_gpt *g, int slot, int u0, int u1) {
    if (slot < 0 || slot >= g->n_slots || u0 < 0 || u1 > g->cfg.n_layer + 2 || u0 >= u1)
        return dt_err_set(DT_ERR_ARG, "model: slot %d (of %d), units [%d, %d) out of range", slot,
                          g->n_slots, u0, u1);
    for (int u = u0; u < u1; u++)
        if (g->unit_local[u] < 0)
            return dt_err_set(DT_ERR_ARG, "model: unit %d is not held by this rank", u);
    return DT_OK;
}

dt_status dt_gpt_forward_units(dt_gpt *g, int slot, int u0, int u1, const int32_t *input, int B,
                               int T) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, u0, u1));
    const int32_t *tokens;
    DT_TRY(dt_gpt_read_input(g, input, B, T, &tokens));
    int N = B * T, C = g->cfg.n_embd, L = g->cfg.n_layer;
    const int *lu = g->unit_local;
    if (u0 == 0) {
        DT_TRY(enter(g, lu[0], DT_PHASE_FORWARD));
        DT_TRY(embed_forward(g, tokens, N, T, res_at(g, slot, 0, N)));
        DT_TRY(leave(g, lu[0], DT_PHASE_FORWARD));
    }
    for (int u = u0 > 1 ? u0 : 1; u < u1 && u <= L; u++) {
        int l = u - 1;
        DT_TRY(enter(g, lu[u], DT_PHASE_FORWARD));
        DT_TRY(dt_gpt_block_forward(g, slot, l, res_at(g, slot, l, N), B, T,
                                    res_at(g, slot, l + 1, N)));
        mark_saved(g, slot, l, true);
        DT_TRY(leave(g, lu[u], DT_PHASE_FORWARD));
    }
    if (u1 < L + 2)
        return DT_OK;
    size_t nr = res_rows(g, N);
    DT_TRY(enter(g, lu[L + 1], DT_PHASE_FORWARD));
    dt_block_norm_forward(g->dims.kind, &g->lnf, res_at(g, slot, L, N), (int)nr, C,
                          g->dims.norm_eps, g->lnf_out, g->lnf_mean + slot * nr,
                          g->lnf_rstd + slot * nr);
    return leave(g, lu[L + 1], DT_PHASE_FORWARD);
}

dt_status dt_gpt_forward(dt_gpt *g, const int32_t *tokens, int B, int T) {
    return dt_gpt_forward_units(g, 0, 0, g->cfg.n_layer + 2, tokens, B, T);
}

/* The head is a column-parallel layer over the vocabulary: the final norm's output enters
 * the tp region (all rows of the region on every tp rank); its input gradient is a partial
 * sum over the vocabulary shards, summed by the entering region's adjoint. Reads the final
 * norm's output of the slot's forward, which must be the last forward this rank ran. */
dt_status dt_gpt_loss_slot(dt_gpt *g, int slot, const int32_t *targets, int B, int T,
                           float grad_scale, bool backward, double *loss_sum) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, g->cfg.n_layer + 1, g->cfg.n_layer + 2));
    if (backward && !g->training)
        return dt_err_set(DT_ERR_ARG, "model: built for inference, cannot compute gradients");
    int N = B * T, Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N);
    int C = g->cfg.n_embd;
    int64_t t0, r0;
    row_starts(g, N, &t0, &r0);
    dt_region_shape sh = tp_shape(g, N);
    const dt_region_op *entry = dt_region_op_get(g->par.enter);
    int hu = dt_gpt_head_unit(g);
    DT_TRY(enter(g, hu, DT_PHASE_HEAD));
    /* over one tp rank the entering region is the identity: the head reads the final norm's
     * output and writes the gradient of it in place */
    bool unsplit = g->par.tp->size == 1;
    float *dlnf = g->dlnf + (size_t)slot * res_rows(g, N) * C;
    float *x = unsplit ? g->lnf_out : g->scratch.ln_full;
    float *dx = !backward ? NULL : unsplit ? dlnf : g->scratch.dln_full;
    if (!unsplit)
        DT_TRY(entry->forward(g->par.tp, &sh, g->lnf_out, x, g->scratch.work));
    if (backward) { /* the tied embedding may have written the matrix's gradient first */
        bool emb_first = head_is_embedding(g) && !(g->fresh[hu] & DT_GPT_FRESH_BACKWARD);
        g->head.dw_set = take_fresh(g, hu, DT_GPT_FRESH_HEAD) && !emb_first;
    }
    DT_TRY(dt_lm_head_loss(&g->ctx, &g->head, x, g->lnf_lp, targets + t0, Nt, grad_scale, backward,
                           g->losses, dx));
    if (backward && !unsplit) {
        memset(dlnf, 0, (size_t)Nr * C * sizeof(float));
        DT_TRY(entry->backward(g->par.tp, &sh, dx, dlnf, g->scratch.work));
    }
    DT_TRY(leave(g, hu, DT_PHASE_HEAD));
    double s = 0;
    for (int i = 0; i < Nt; i++)
        s += g->losses[i];
    *loss_sum = s;
    return DT_OK;
}

dt_status dt_gpt_loss(dt_gpt *g, const int32_t *targets, int B, int T, float grad_scale,
                      bool backward, double *loss_sum) {
    return dt_gpt_loss_slot(g, 0, targets, B, T, grad_scale, backward, loss_sum);
}

/* The final norm sees this rank's rows: its weight gradients are partial over the rows comm. */
static dt_status final_norm_backward(dt_gpt *g, int slot, int N, float *dres) {
    int Nr = dt_block_rows_res(&g->par, N), C = g->cfg.n_embd;
    size_t nr = res_rows(g, N);
    float *pg = g->scratch.pgrad;
    memset(pg, 0, 2 * (size_t)C * sizeof(float));
    dt_norm_params p = {.w = g->lnf.w, .b = g->lnf.b, .dw = pg, .db = g->lnf.b ? pg + C : NULL};
    dt_block_norm_backward(g->dims.kind, &p, res_at(g, slot, g->cfg.n_layer, N),
                           g->dlnf + slot * nr * C, g->lnf_mean + slot * nr,
                           g->lnf_rstd + slot * nr, Nr, C, dres);
    DT_TRY(dt_comm_allreduce_f32(g->par.rows, pg, 2 * (int64_t)C, NULL));
    bool set = take_fresh(g, g->unit_local[g->cfg.n_layer + 1], DT_GPT_FRESH_BACKWARD);
    float *dst[2] = {g->lnf.dw, g->lnf.db};
    for (int i = 0; i < 2 && dst[i]; i++) {
        if (set)
            memcpy(dst[i], pg + (int64_t)i * C, (size_t)C * sizeof(float));
        else
            dt_add_inplace(dst[i], pg + (int64_t)i * C, C);
    }
    return DT_OK;
}

dt_status dt_gpt_backward_units(dt_gpt *g, int slot, int grad, int u0, int u1, const int32_t *input,
                                int B, int T, bool split) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, u0, u1));
    if (grad < 0 || grad >= g->n_grads)
        return dt_err_set(DT_ERR_ARG, "model: gradient buffer %d (of %d) out of range", grad,
                          g->n_grads);
    const int32_t *tokens;
    DT_TRY(dt_gpt_read_input(g, input, B, T, &tokens));
    if (split && !g->wgrad)
        return dt_err_set(DT_ERR_ARG, "model: split backward needs a model built for it");
    int N = B * T, C = g->cfg.n_embd, L = g->cfg.n_layer;
    const int *lu = g->unit_local;
    float *dres = dres_of(g, grad, N);
    if (u1 == L + 2) {
        memset(dres, 0, res_rows(g, N) * C * sizeof(float));
        DT_TRY(enter(g, lu[L + 1], DT_PHASE_BACKWARD));
        DT_TRY(final_norm_backward(g, slot, N, dres));
        DT_TRY(leave(g, lu[L + 1], DT_PHASE_BACKWARD));
    }
    for (int u = (u1 <= L ? u1 - 1 : L); u >= 1 && u >= u0; u--) {
        int l = u - 1;
        DT_TRY(enter(g, lu[u], DT_PHASE_BACKWARD));
        dt_block_wgrad *wg = split ? &g->wgrad[(size_t)slot * L + l] : NULL;
        block_grad_set(
            &g->blocks[l],
            take_fresh(g, lu[u], DT_GPT_FRESH_BACKWARD | (split ? 0 : DT_GPT_FRESH_WEIGHTS)));
        int next = u - 1 >= 1 && u - 1 >= u0 ? l - 1 : -1;
        DT_TRY(dt_gpt_block_backward(g, slot, l, next, res_at(g, slot, l, N), B, T, wg, dres));
        if (!split)
            mark_saved(g, slot, l, false);
        DT_TRY(leave(g, lu[u], DT_PHASE_BACKWARD));
    }
    if (u0 > 0)
        return DT_OK;
    DT_TRY(enter(g, lu[0], DT_PHASE_BACKWARD));
    DT_TRY(embed_backward(g, tokens, N, T, dres));
    return leave(g, lu[0], DT_PHASE_BACKWARD);
}

dt_status dt_gpt_backward(dt_gpt *g, const int32_t *tokens, int B, int T) {
    return dt_gpt_backward_units(g, 0, 0, 0, g->cfg.n_layer + 2, tokens, B, T, false);
}

dt_status dt_gpt_weight_units(dt_gpt *g, int slot, int u0, int u1, int B, int T) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, u0, u1));
    if (!g->wgrad)
        return dt_err_set(DT_ERR_ARG, "model: split backward needs a model built for it");
    int N = B * T, L = g->cfg.n_layer;
    for (int u = (u1 <= L ? u1 - 1 : L); u >= 1 && u >= u0; u--) {
        int l = u - 1;
        DT_TRY(enter(g, g->unit_local[u], DT_PHASE_WEIGHTS));
        block_grad_set(&g->blocks[l], take_fresh(g, g->unit_local[u], DT_GPT_FRESH_WEIGHTS));
        int next = u - 1 >= 1 && u - 1 >= u0 ? l - 1 : -1;
        DT_TRY(dt_gpt_block_weights(g, slot, l, next, res_at(g, slot, l, N), B, T,
                                    &g->wgrad[(size_t)slot * L + l]));
        mark_saved(g, slot, l, false);
        DT_TRY(leave(g, g->unit_local[u], DT_PHASE_WEIGHTS));
    }
    return DT_OK;
}

int64_t dt_gpt_boundary_count(const dt_gpt *g, int B, int T) {
    return (int64_t)res_rows(g, B * T) * g->cfg.n_embd;
}

float *dt_gpt_boundary(dt_gpt *g, int slot, int position, int B, int T) {
    return res_at(g, slot, position, B * T);
}

float *dt_gpt_boundary_grad(dt_gpt *g, int grad, int B, int T) { return dres_of(g, grad, B * T); }

dt_status dt_gpt_logits_last(dt_gpt *g, const int32_t *tokens, int T, float *logits) {
    if (g->par.tp->size * g->par.sp->size > 1 || g->n_units < g->cfg.n_layer + 2)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model: sampling runs on one process; export the "
                                              "weights and use dtrain sample");
    if (g->doc_mask) { /* the prompt is one document: pairs (id, 0) */
        int32_t *pairs = malloc((size_t)T * 2 * sizeof *pairs);
        if (!pairs)
            return dt_err_set(DT_ERR_OOM, "model: out of memory for a prompt of %d tokens", T);
        for (int t = 0; t < T; t++)
            pairs[2 * t] = tokens[t], pairs[2 * t + 1] = 0;
        dt_status st = dt_gpt_forward(g, pairs, 1, T);
        free(pairs);
        DT_TRY(st);
    } else {
        DT_TRY(dt_gpt_forward(g, tokens, 1, T));
    }
    const float *last = g->lnf_out + (size_t)(T - 1) * g->cfg.n_embd;
    dt_bf16 *lp = g->lnf_lp ? g->lnf_lp + (size_t)(T - 1) * g->cfg.n_embd : NULL;
    int hu = dt_gpt_head_unit(g);
    DT_TRY(enter(g, hu, DT_PHASE_HEAD));
    DT_TRY(dt_lm_head_logits(&g->ctx, &g->head, last, lp, 1, logits));
    return leave(g, hu, DT_PHASE_HEAD);
}
