/* GPT-2 / Llama model: parameter table, arenas, and the forward/backward loops over blocks.
 *
 * Parameters are laid out in HuggingFace order; q/k/v projections (and GPT-2's fused c_attn)
 * are adjacent in the arena, so the attention's input projection is a single matmul over
 * [(NH + 2 NKV) hs, C] however the file names them. Activations are carved out of one arena
 * (accounted as activations) and the backward scratch out of another (temporaries).
 */
#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cast.h"
#include "kernels/reduce.h"
#include "kernels/rope.h"
#include "nn/block.h"
#include "nn/lm_head.h"

struct dt_gpt {
    dt_model_config cfg;
    dt_block_dims dims; /* local widths (this tp rank's heads and MLP columns) */
    dt_block_par par;
    dt_comm *own_comm[3]; /* size-1 comms made for the splits the caller did not give */
    dt_comm *pp;          /* pipeline group (borrowed), for whole-model gathers; NULL: none */
    int B, T;
    bool training;
    dt_mem *mem; /* borrowed */
    dt_gemm *gemm;
    dt_nn_ctx ctx;

    dt_param *full;   /* the single process's table: what files hold */
    dt_param *params; /* this rank's table: the local arena (= full without tp and pp) */
    int n_params, n_full_params, cap_params;
    int64_t n_full;
    int *local_full;    /* [n_params] the full table's index of each local tensor */
    int tied_copy;      /* local index of GPT-2's head copy of wte on a stage without unit 0 */
    int64_t vocab_rows; /* rows of the vocabulary matrices this rank holds (padded) */
    int n_embed_params, per_layer; /* unit 0's tensors; tensors per block */
    /* Units this rank holds (pipeline stages hold a few): global unit u <-> local id. Local
     * ids are what the unit API and the hooks use. */
    int n_units;
    int *unit_global, *unit_local; /* [n_units], [L + 2] (-1: not here) */
    int *unit_param;               /* [n_units + 1] local tensors of each unit */
    float **unit_w, **unit_g;      /* [n_units] current storage of each unit (first element) */
    dt_bf16 **unit_lp;
    /* micro-batches held at once (slots), and the residual positions a slot keeps */
    int n_slots, n_pos;
    int *pos_index; /* [L + 1] residual position (input of block l; L = final input) -> index */
    dt_gpt_hooks hooks;
    int64_t n_total;
    float *w, *g;   /* weights, grads */
    dt_bf16 *w_lp;  /* bf16 weights (bf16 mode) */

    float *wte, *wpe, *dwte, *dwpe; /* wpe: GPT-2 only */
    dt_norm_params lnf;
    dt_block *blocks;
    dt_lm_head head;
    float *rope_cos, *rope_sin;

    /* activations (this rank's rows), per slot */
    float *res;     /* [slot][n_pos][Nr, C]: residual stream at the positions held here */
    dt_block_acts *acts;          /* [slot][L]: carved for the blocks held here */
    dt_block_wgrad *wgrad;        /* [slot][L]: split backward's kept gradients, or NULL */
    float *lnf_mean, *lnf_rstd;   /* [slot][Nr] */
    float *dres, *dlnf;           /* [slot][Nr, C]: gradient of the residual / final norm out */
    float *lnf_out, *losses;      /* shared */
    dt_bf16 *lnf_lp;
    void *act_arena;
    /* transients, and the backward's */
    dt_block_scratch scratch;
    float *dpos;
    void *tmp_arena;
};

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

const dt_model_config *dt_gpt_config(const dt_gpt *g) { return &g->cfg; }

/* ---- parameter table ------------------------------------------------------------------- */

static dt_status add_param(dt_gpt *g, const char *name, int64_t rows, int64_t cols,
                           dt_param_init init, float std, bool conv1d, dt_shard_kind split) {
    if (g->n_params == g->cap_params) {
        int cap = g->cap_params ? 2 * g->cap_params : 64;
        dt_param *p = realloc(g->params, (size_t)cap * sizeof *p);
        if (!p)
            return dt_err_set(DT_ERR_OOM, "model: out of memory for the parameter table");
        g->params = p;
        g->cap_params = cap;
    }
    dt_param *p = &g->params[g->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * (cols > 0 ? cols : 1);
    p->offset = g->n_total;
    p->decay = p->ndim == 2;
    p->conv1d = conv1d;
    p->init = init;
    p->std = std;
    p->shard = (dt_shard){.kind = split, .parts = 1, .full_rows = rows,
                          .full_cols = cols > 0 ? cols : 1};
    if (split == DT_SHARD_QKV) { /* GPT-2's c_attn: q, k, v of equal height */
        p->shard.sec[0] = p->shard.sec[1] = p->shard.sec[2] = rows / 3;
    }
    /* keep every tensor 16-float (64-byte) aligned inside the arena */
    g->n_total += (p->numel + 15) / 16 * 16;
    return DT_OK;
}

/* Full-table tensors of global unit u: [first, end). */
static void full_unit_params(const dt_gpt *g, int u, int *first, int *end) {
    int L = g->cfg.n_layer;
    *first = u == 0 ? 0 : g->n_embed_params + (u - 1) * g->per_layer;
    *end = u == 0 ? g->n_embed_params : u <= L ? *first + g->per_layer : g->n_full_params;
}

static dt_status push_local(dt_gpt *g, int full_index, int64_t *at) {
    dt_param *p = &g->params[g->n_params];
    *p = g->full[full_index];
    g->local_full[g->n_params++] = full_index;
    if (p->shard.kind != DT_SHARD_NONE) {
        p->shard.parts = g->par.tp->size;
        p->shard.index = g->par.tp->rank;
    }
    int64_t rows, cols;
    dt_shard_local_shape(&p->shard, &rows, &cols);
    p->shape[0] = rows;
    if (p->ndim == 2)
        p->shape[1] = cols;
    p->numel = rows * cols;
    p->offset = *at;
    *at += (p->numel + 15) / 16 * 16;
    return DT_OK;
}

/* This rank's table from the full one: the tensors of the units it holds, each its tp shard,
 * packed in unit order. A GPT-2 stage with the final unit but not the embedding also holds a
 * copy of wte for its head (the engine keeps the two copies' gradients summed). */
static dt_status localize(dt_gpt *g, const bool *held) {
    int U = g->cfg.n_layer + 2;
    g->full = g->params;
    g->n_full = g->n_total;
    g->n_full_params = g->n_params;
    g->params = malloc((size_t)(g->n_full_params + 1) * sizeof *g->params);
    g->local_full = malloc((size_t)(g->n_full_params + 1) * sizeof *g->local_full);
    g->unit_global = malloc((size_t)U * sizeof *g->unit_global);
    g->unit_local = malloc((size_t)U * sizeof *g->unit_local);
    g->unit_param = malloc((size_t)(U + 1) * sizeof *g->unit_param);
    if (!g->params || !g->local_full || !g->unit_global || !g->unit_local || !g->unit_param)
        return dt_err_set(DT_ERR_OOM, "model: out of memory for the parameter table");
    g->n_params = 0;
    g->n_units = 0;
    g->tied_copy = -1;
    int64_t at = 0;
    for (int u = 0; u < U; u++) {
        g->unit_local[u] = -1;
        if (held && !held[u])
            continue;
        g->unit_local[u] = g->n_units;
        g->unit_global[g->n_units] = u;
        g->unit_param[g->n_units++] = g->n_params;
        int first, end;
        full_unit_params(g, u, &first, &end);
        for (int i = first; i < end; i++)
            DT_TRY(push_local(g, i, &at));
        if (u == U - 1 && g->cfg.arch == DT_ARCH_GPT2 && held && !held[0]) {
            g->tied_copy = g->n_params;
            DT_TRY(push_local(g, 0, &at));
        }
    }
    g->unit_param[g->n_units] = g->n_params;
    if (g->n_units == 0)
        return dt_err_set(DT_ERR_ARG, "model: this rank holds no unit of the model");
    g->n_total = at;
    return DT_OK;
}

#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
/* how each tensor splits over tp: vocabulary and column-parallel rows, row-parallel columns */
#define WHOLE DT_SHARD_NONE
#define ROWS DT_SHARD_ROWS
#define COLS DT_SHARD_COLS
#define QKV DT_SHARD_QKV

static dt_status build_table_gpt2(dt_gpt *g) {
    const dt_model_config *c = &g->cfg;
    g->n_embed_params = 2;
    g->per_layer = 12;
    int64_t C = c->n_embd;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * c->n_layer);
    char name[96];
    DT_TRY(add_param(g, "wte.weight", c->vocab_size, C, DT_INIT_NORMAL, std, false, ROWS));
    DT_TRY(add_param(g, "wpe.weight", c->max_seq_len, C, DT_INIT_NORMAL, std, false, WHOLE));
    for (int l = 0; l < c->n_layer; l++) {
        DT_TRY(add_param(g, NAME("h.%d.ln_1.weight", l), C, 0, DT_INIT_ONES, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("h.%d.ln_1.bias", l), C, 0, DT_INIT_ZEROS, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("h.%d.attn.c_attn.weight", l), 3 * C, C, DT_INIT_NORMAL, std, true, QKV));
        DT_TRY(add_param(g, NAME("h.%d.attn.c_attn.bias", l), 3 * C, 0, DT_INIT_ZEROS, 0, false, QKV));
        DT_TRY(add_param(g, NAME("h.%d.attn.c_proj.weight", l), C, C, DT_INIT_NORMAL, proj_std, true, COLS));
        DT_TRY(add_param(g, NAME("h.%d.attn.c_proj.bias", l), C, 0, DT_INIT_ZEROS, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("h.%d.ln_2.weight", l), C, 0, DT_INIT_ONES, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("h.%d.ln_2.bias", l), C, 0, DT_INIT_ZEROS, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("h.%d.mlp.c_fc.weight", l), 4 * C, C, DT_INIT_NORMAL, std, true, ROWS));
        DT_TRY(add_param(g, NAME("h.%d.mlp.c_fc.bias", l), 4 * C, 0, DT_INIT_ZEROS, 0, false, ROWS));
        DT_TRY(add_param(g, NAME("h.%d.mlp.c_proj.weight", l), C, 4 * C, DT_INIT_NORMAL, proj_std, true, COLS));
        DT_TRY(add_param(g, NAME("h.%d.mlp.c_proj.bias", l), C, 0, DT_INIT_ZEROS, 0, false, WHOLE));
    }
    DT_TRY(add_param(g, "ln_f.weight", C, 0, DT_INIT_ONES, 0, false, WHOLE));
    DT_TRY(add_param(g, "ln_f.bias", C, 0, DT_INIT_ZEROS, 0, false, WHOLE));
    return DT_OK;
}

static dt_status build_table_llama(dt_gpt *g) {
    const dt_model_config *c = &g->cfg;
    int64_t C = c->n_embd, hs = C / c->n_head, kv = (int64_t)dt_gpt_kv_heads(c) * hs;
    int64_t F = dt_gpt_ffn_hidden(c);
    float std = 0.02f;
    char name[96];
    g->n_embed_params = 1;
    g->per_layer = 9;
    DT_TRY(add_param(g, "model.embed_tokens.weight", c->vocab_size, C, DT_INIT_NORMAL, std, false, ROWS));
    for (int l = 0; l < c->n_layer; l++) {
        const char *p = "model.layers";
        DT_TRY(add_param(g, NAME("%s.%d.input_layernorm.weight", p, l), C, 0, DT_INIT_ONES, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("%s.%d.self_attn.q_proj.weight", p, l), C, C, DT_INIT_NORMAL, std, false, ROWS));
        DT_TRY(add_param(g, NAME("%s.%d.self_attn.k_proj.weight", p, l), kv, C, DT_INIT_NORMAL, std, false, ROWS));
        DT_TRY(add_param(g, NAME("%s.%d.self_attn.v_proj.weight", p, l), kv, C, DT_INIT_NORMAL, std, false, ROWS));
        DT_TRY(add_param(g, NAME("%s.%d.self_attn.o_proj.weight", p, l), C, C, DT_INIT_NORMAL, std, false, COLS));
        DT_TRY(add_param(g, NAME("%s.%d.post_attention_layernorm.weight", p, l), C, 0, DT_INIT_ONES, 0, false, WHOLE));
        DT_TRY(add_param(g, NAME("%s.%d.mlp.gate_proj.weight", p, l), F, C, DT_INIT_NORMAL, std, false, ROWS));
        DT_TRY(add_param(g, NAME("%s.%d.mlp.up_proj.weight", p, l), F, C, DT_INIT_NORMAL, std, false, ROWS));
        DT_TRY(add_param(g, NAME("%s.%d.mlp.down_proj.weight", p, l), C, F, DT_INIT_NORMAL, std, false, COLS));
    }
    DT_TRY(add_param(g, "model.norm.weight", C, 0, DT_INIT_ONES, 0, false, WHOLE));
    DT_TRY(add_param(g, "lm_head.weight", c->vocab_size, C, DT_INIT_NORMAL, std, false, ROWS));
    return DT_OK;
}

#undef NAME
#undef WHOLE
#undef ROWS
#undef COLS
#undef QKV

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
    return (dt_linear){.in = (int)w->shape[1], .out = (int)out_rows, .w = wv(u, w),
                       .b = b ? wv(u, b) : NULL, .dw = gv(u, w), .db = b ? gv(u, b) : NULL,
                       .w_lp = lpv(u, w)};
}

static dt_norm_params norm_view(const unit_store *u, const dt_param *w, const dt_param *b) {
    return (dt_norm_params){.w = wv(u, w), .b = b ? wv(u, b) : NULL, .dw = gv(u, w),
                            .db = b ? gv(u, b) : NULL};
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
        b->ln1 = norm_view(u, &q[0], &q[1]);
        b->qkv = linear_view(u, &q[2], &q[3], qkv_rows);
        b->proj = linear_view(u, &q[4], &q[5], q[4].shape[0]);
        b->ln2 = norm_view(u, &q[6], &q[7]);
        b->fc = linear_view(u, &q[8], &q[9], q[8].shape[0]);
        b->down = linear_view(u, &q[10], &q[11], q[10].shape[0]);
    } else {
        b->ln1 = norm_view(u, &q[0], NULL);
        b->qkv = linear_view(u, &q[1], NULL, qkv_rows);
        b->proj = linear_view(u, &q[4], NULL, q[4].shape[0]);
        b->ln2 = norm_view(u, &q[5], NULL);
        b->fc = linear_view(u, &q[6], NULL, q[6].shape[0]);
        b->up = linear_view(u, &q[7], NULL, q[7].shape[0]);
        b->down = linear_view(u, &q[8], NULL, q[8].shape[0]);
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
    unit_store u = {.w = g->unit_w[lu], .g = g->unit_g[lu], .lp = g->unit_lp[lu],
                    .first = first};
    int gu = g->unit_global[lu];
    const dt_param *P = g->params + g->unit_param[lu];
    bool gpt2 = g->cfg.arch == DT_ARCH_GPT2;
    if (gu == 0) {
        g->wte = wv(&u, &P[0]);
        g->dwte = gv(&u, &P[0]);
        g->wpe = gpt2 ? wv(&u, &P[1]) : NULL;
        g->dwpe = gpt2 ? gv(&u, &P[1]) : NULL;
        if (gpt2)
            wire_head(g, &u, &P[0]);
    } else if (gu <= g->cfg.n_layer) {
        wire_block(g, gu - 1, &u);
    } else if (gpt2) { /* ln_f weight and bias, then the head's copy of wte if held here */
        g->lnf = norm_view(&u, &P[0], &P[1]);
        if (g->tied_copy >= 0)
            wire_head(g, &u, &g->params[g->tied_copy]);
    } else {           /* model.norm, lm_head */
        g->lnf = norm_view(&u, &P[0], NULL);
        wire_head(g, &u, &P[1]);
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
        const dt_param *q = unit_tensors(g, l + 1) + 1;
        if (q[0].offset + q[0].numel != q[1].offset || q[1].offset + q[1].numel != q[2].offset)
            return dt_err_set(DT_ERR_ARG, "model: q/k/v projections of layer %d are not "
                              "contiguous (n_embd=%d should be a multiple of 16)", l,
                              g->cfg.n_embd);
    }
    return DT_OK;
}

int dt_gpt_n_units(const dt_gpt *g) { return g->n_units; }
int dt_gpt_unit_global(const dt_gpt *g, int unit) { return g->unit_global[unit]; }
int dt_gpt_unit_local(const dt_gpt *g, int global_unit) { return g->unit_local[global_unit]; }

void dt_gpt_unit_range(const dt_gpt *g, int unit, int64_t *first, int64_t *count) {
    int a = g->unit_param[unit], b = g->unit_param[unit + 1];
    *first = g->params[a].offset;
    *count = (b < g->n_params ? g->params[b].offset : g->n_total) - *first;
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

void dt_gpt_set_hooks(dt_gpt *g, const dt_gpt_hooks *hooks) {
    g->hooks = hooks ? *hooks : (dt_gpt_hooks){0};
}

static dt_status enter(dt_gpt *g, int unit, dt_gpt_phase phase) {
    return g->hooks.enter ? g->hooks.enter(g->hooks.ctx, unit, phase) : DT_OK;
}

static dt_status leave(dt_gpt *g, int unit, dt_gpt_phase phase) {
    return g->hooks.leave ? g->hooks.leave(g->hooks.ctx, unit, phase) : DT_OK;
}

/* ---- activation and scratch arenas ----------------------------------------------------- */

typedef struct carver {
    char *base;
    size_t used;
} carver;

/* Hands out 64-byte aligned pieces; with base == NULL it only measures. */
static void *carve(carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (bytes + 63) & ~(size_t)63;
    return p;
}

/* Row counts of the largest micro-batch: all tokens, inside the tp region, in the residual. */
typedef struct rows_of {
    size_t N, Nt, Nr;
} rows_of;

static rows_of rows_max(const dt_gpt *g) {
    int N = g->B * g->T;
    return (rows_of){.N = (size_t)N, .Nt = (size_t)dt_block_rows_tp(&g->par, N),
                     .Nr = (size_t)dt_block_rows_res(&g->par, N)};
}

static bool holds_block(const dt_gpt *g, int l) { return g->unit_local[l + 1] >= 0; }
static bool holds_final(const dt_gpt *g) { return g->unit_local[g->cfg.n_layer + 1] >= 0; }

/* Residual positions a slot keeps: each held block's input and output, the embedding's
 * output, the final norm's input. */
static void plan_positions(dt_gpt *g) {
    int L = g->cfg.n_layer;
    for (int l = 0; l <= L; l++)
        g->pos_index[l] = -1;
    for (int l = 0; l < L; l++)
        if (holds_block(g, l))
            g->pos_index[l] = g->pos_index[l + 1] = 0;
    if (g->unit_local[0] >= 0)
        g->pos_index[0] = 0;
    if (holds_final(g))
        g->pos_index[L] = 0;
    g->n_pos = 0;
    for (int l = 0; l <= L; l++)
        if (g->pos_index[l] == 0)
            g->pos_index[l] = g->n_pos++;
}

static void carve_acts(dt_gpt *g, carver *cv) {
    const dt_block_dims *d = &g->dims;
    rows_of r = rows_max(g);
    size_t C = d->C, F = d->F, W = dt_block_qkv_width(d), A = (size_t)d->NH * d->hs;
    size_t heads = (size_t)d->NH / g->par.sp->size, S = (size_t)g->n_slots;
    int L = g->cfg.n_layer;
    bool lp = g->ctx.mm_type == DT_BF16;
    size_t f4 = sizeof(float), h2 = sizeof(dt_bf16);
    g->res = carve(cv, S * g->n_pos * r.Nr * C * f4);
    dt_bf16 *ln_lp = lp ? carve(cv, r.Nt * C * h2) : NULL; /* rebuilt in backward: shared */
    for (size_t slot = 0; slot < S; slot++)
        for (int l = 0; l < L; l++) {
            if (!holds_block(g, l))
                continue;
            dt_block_acts *a = &g->acts[slot * L + l];
            a->ln1_mean = carve(cv, r.Nr * f4);
            a->ln1_rstd = carve(cv, r.Nr * f4);
            a->qkv = carve(cv, r.Nt * W * f4);
            a->att = carve(cv, r.Nt * A * f4);
            a->lse = carve(cv, r.N * heads * f4);
            a->x2 = carve(cv, r.Nr * C * f4);
            a->ln2_mean = carve(cv, r.Nr * f4);
            a->ln2_rstd = carve(cv, r.Nr * f4);
            a->h = carve(cv, r.Nt * F * f4);
            a->u = d->kind == DT_BLOCK_LLAMA ? carve(cv, r.Nt * F * f4) : NULL;
            a->ln1_lp = a->ln2_lp = ln_lp;
            a->att_lp = lp ? carve(cv, r.Nt * A * h2) : NULL;
            a->g_lp = lp ? carve(cv, r.Nt * F * h2) : NULL;
            if (!g->wgrad)
                continue;
            dt_block_wgrad *w = &g->wgrad[slot * L + l];
            w->dqkv = carve(cv, r.Nt * W * f4);
            w->dproj = carve(cv, r.Nt * C * f4);
            w->dh = carve(cv, r.Nt * F * f4);
            w->du = d->kind == DT_BLOCK_LLAMA ? carve(cv, r.Nt * F * f4) : NULL;
            w->ddown = carve(cv, r.Nt * C * f4);
        }
    if (!holds_final(g))
        return;
    g->lnf_mean = carve(cv, S * r.Nr * f4);
    g->lnf_rstd = carve(cv, S * r.Nr * f4);
    g->lnf_out = carve(cv, r.Nr * C * f4);
    g->lnf_lp = lp ? carve(cv, r.Nt * C * h2) : NULL;
    g->losses = carve(cv, r.Nt * f4);
}

static void carve_scratch(dt_gpt *g, carver *cv) {
    const dt_block_dims *d = &g->dims;
    rows_of r = rows_max(g);
    size_t C = d->C, F = d->F, W = dt_block_qkv_width(d), A = (size_t)d->NH * d->hs;
    size_t f4 = sizeof(float), S = (size_t)g->n_slots;
    bool lp = g->ctx.mm_type == DT_BF16;
    if (dt_gpt_head_unit(g) >= 0) {
        size_t chunk = (size_t)g->head.chunk, V = (size_t)g->vocab_rows;
        g->head.logits = carve(cv, chunk * V * f4);
        g->head.logits_lp = lp ? carve(cv, chunk * V * sizeof(dt_bf16)) : NULL;
        g->head.stats = carve(cv, (size_t)dt_lm_head_stats_count(&g->head) * f4);
    }
    dt_block_scratch *s = &g->scratch;
    s->ln = carve(cv, r.Nr * C * f4);
    s->ln_full = carve(cv, r.Nt * C * f4);
    s->qkv_rows = carve(cv, r.Nt * W * f4);
    s->packed = carve(cv, r.Nt * W * f4);
    s->att_heads = carve(cv, r.Nt * A * f4);
    s->part = carve(cv, r.Nt * C * f4);
    s->g = carve(cv, r.Nt * F * f4);
    s->work = carve(cv, (size_t)dt_block_work_count(d, &g->par, (int)r.N) * f4);
    if (!g->training)
        return;
    s->dln = carve(cv, r.Nr * C * f4);
    s->dln_full = carve(cv, r.Nt * C * f4);
    s->dqkv_heads = carve(cv, r.Nt * W * f4);
    s->datt = carve(cv, r.Nt * A * f4);
    s->datt_heads = carve(cv, r.Nt * A * f4);
    s->dh = carve(cv, r.Nt * F * f4);
    s->du = d->kind == DT_BLOCK_LLAMA ? carve(cv, r.Nt * F * f4) : NULL;
    s->dg = carve(cv, r.Nt * F * f4);
    s->pgrad = carve(cv, 6 * C * f4);
    size_t widest = C > W ? C : W;
    widest = widest > F ? widest : F;
    s->dy_lp = lp ? carve(cv, r.Nt * widest * sizeof(dt_bf16)) : NULL;
    g->dres = carve(cv, S * r.Nr * C * f4);
    g->dlnf = holds_final(g) ? carve(cv, S * r.Nr * C * f4) : NULL;
    g->dpos = g->cfg.arch == DT_ARCH_GPT2 ? carve(cv, (size_t)g->T * C * f4) : NULL;
}

static dt_status alloc_carved(dt_gpt *g, dt_mem_cat cat, const char *name,
                              void (*layout)(dt_gpt *, carver *), void **arena) {
    carver measure = {0};
    layout(g, &measure);
    DT_TRY(dt_mem_alloc(g->mem, cat, name, measure.used, arena));
    carver real = {.base = *arena};
    layout(g, &real);
    return DT_OK;
}

/* ---- how the model splits ---------------------------------------------------------------- */

/* "1, 2, 3, 4, 6 or 12": the divisors of n, for an error's suggested fix */
static void divisors_text(int n, char *out, size_t size) {
    int found[64], k = 0;
    for (int i = 1; i <= n && k < 64; i++)
        if (n % i == 0)
            found[k++] = i;
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < k && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%d", i == 0 ? "" : i == k - 1 ? " or " : ", ",
                                found[i]);
}

static dt_status split_error(const char *what, int n, const char *by, int parts, int per_rank) {
    char fix[256];
    divisors_text(n, fix, sizeof fix);
    return dt_err_set(DT_ERR_ARG, "%s=%d is not divisible by %s=%d; use %s %s%s", what, n, by,
                      parts, by, fix, per_rank ? " (per tp rank)" : "");
}

dt_status dt_gpt_check_split(const dt_model_config *c, int tp, int sp, bool sequence_tp,
                             int seq_len) {
    int nkv = dt_gpt_kv_heads(c), F = dt_gpt_ffn_hidden(c);
    if (tp < 1 || sp < 1)
        return dt_err_set(DT_ERR_ARG, "tp_size=%d and sp_size=%d must be >= 1", tp, sp);
    if (c->n_head % tp)
        return split_error("model.n_head", c->n_head, "plugin.tp_size", tp, 0);
    if (nkv % tp)
        return dt_err_set(DT_ERR_ARG, "model.n_kv_head=%d is not divisible by plugin.tp_size=%d "
                          "(key/value heads are split across tp ranks, not replicated); use "
                          "a tp_size that divides %d", nkv, tp, nkv);
    if (F % tp)
        return split_error("the MLP width (model.ffn_hidden or 4 x n_embd)", F,
                           "plugin.tp_size", tp, 0);
    if ((c->n_head / tp) % sp)
        return dt_err_set(DT_ERR_ARG, "the %d heads of each tp rank (model.n_head=%d / "
                          "tp_size=%d) are not divisible by plugin.sp_size=%d (Ulysses splits "
                          "heads across sp ranks); use an sp_size that divides %d",
                          c->n_head / tp, c->n_head, tp, sp, c->n_head / tp);
    if ((nkv / tp) % sp)
        return dt_err_set(DT_ERR_ARG, "the %d key/value heads of each tp rank (n_kv_head=%d / "
                          "tp_size=%d) are not divisible by plugin.sp_size=%d; use an sp_size "
                          "that divides %d", nkv / tp, nkv, tp, sp, nkv / tp);
    if (seq_len % sp)
        return split_error("train.seq_len", seq_len, "plugin.sp_size", sp, 0);
    if (sequence_tp && seq_len % tp)
        return dt_err_set(DT_ERR_ARG, "train.seq_len=%d is not divisible by plugin.tp_size=%d "
                          "(sp_mode=split_gather splits the sequence over the tp ranks); use a "
                          "seq_len that is a multiple of %d", seq_len, tp, tp);
    return DT_OK;
}

/* The comms the caller gave, and size-1 comms for the rest. */
static dt_status setup_par(dt_gpt *g, const dt_gpt_opts *o) {
    dt_comm *given[3] = {o->tp, o->sp, o->sequence_tp ? o->tp : NULL};
    const char *names[3] = {"tp", "sp", "rows"};
    dt_comm *use[3];
    for (int i = 0; i < 3; i++) {
        use[i] = given[i];
        if (!use[i]) {
            DT_TRY(dt_comm_local_init(names[i], &g->own_comm[i]));
            use[i] = g->own_comm[i];
        }
    }
    g->par = (dt_block_par){.tp = use[0], .sp = use[1], .rows = use[2],
                            .enter = o->sequence_tp ? DT_REGION_KIND_SEQ_GATHER
                                                    : DT_REGION_KIND_COPY,
                            .leave = o->sequence_tp ? DT_REGION_KIND_SEQ_REDUCE_SCATTER
                                                    : DT_REGION_KIND_REDUCE};
    return dt_gpt_check_split(&g->cfg, use[0]->size, use[1]->size, o->sequence_tp, g->T);
}

/* ---- life cycle ------------------------------------------------------------------------ */

dt_status dt_gpt_init(const dt_model_config *cfg, const dt_gpt_opts *o, dt_mem *mem,
                      dt_gpt **out) {
    *out = NULL;
    dt_status st;
    int B = o->B, T = o->T;
    bool training = o->training;
    dt_precision prec = o->precision;
    if (cfg->n_embd % cfg->n_head || T > cfg->max_seq_len || B < 1 || T < 1)
        return dt_err_set(DT_ERR_ARG, "model: bad shape (n_embd=%d, n_head=%d, B=%d, T=%d, "
                          "max_seq_len=%d)", cfg->n_embd, cfg->n_head, B, T, cfg->max_seq_len);
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
                              .C = cfg->n_embd, .NH = cfg->n_head / tp,
                              .NKV = dt_gpt_kv_heads(cfg) / tp, .hs = cfg->n_embd / cfg->n_head,
                              .F = dt_gpt_ffn_hidden(cfg) / tp, .norm_eps = cfg->norm_eps};
    g->vocab_rows = (cfg->vocab_size + tp - 1) / tp;
    DT_TRY_GOTO(dt_gemm_init(&g->gemm));
    g->ctx = (dt_nn_ctx){.gemm = g->gemm, .mm_type = prec == DT_PREC_BF16 ? DT_BF16 : DT_F32};
    DT_TRY_GOTO(cfg->arch == DT_ARCH_GPT2 ? build_table_gpt2(g) : build_table_llama(g));
    DT_TRY_GOTO(localize(g, o->units));
    size_t n = (size_t)g->n_total;
    if (!o->external_weights)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_PARAMS, "weights", n * sizeof(float),
                                 (void **)&g->w));
    if (training && !o->external_grads)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_GRADS, "grads", n * sizeof(float), (void **)&g->g));
    if (g->ctx.mm_type == DT_BF16 && !o->external_weights)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_PARAMS, "weights.bf16", n * sizeof(dt_bf16),
                                 (void **)&g->w_lp));
    int n_units = g->n_units;
    g->n_slots = o->n_slots > 0 ? o->n_slots : 1;
    g->blocks = calloc((size_t)cfg->n_layer, sizeof *g->blocks);
    g->acts = calloc((size_t)g->n_slots * cfg->n_layer, sizeof *g->acts);
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
    g->pos_index = calloc((size_t)cfg->n_layer + 1, sizeof *g->pos_index);
    if (!g->blocks || !g->acts || !g->unit_w || !g->unit_g || !g->unit_lp || !g->pos_index) {
        st = dt_err_set(DT_ERR_OOM, "model: out of memory");
        goto fail;
    }
    DT_TRY_GOTO(check_fused_qkv(g));
    plan_positions(g);
    for (int u = 0; u < n_units; u++) {
        int64_t first, count;
        dt_gpt_unit_range(g, u, &first, &count);
        dt_gpt_bind_unit(g, u, g->w ? g->w + first : NULL, g->g ? g->g + first : NULL,
                         g->w_lp ? g->w_lp + first : NULL);
    }
    g->head.chunk = dt_lm_head_chunk_rows((int)g->vocab_rows, (int)rows_max(g).Nt);
    g->head.vocab_size = cfg->vocab_size; /* rows past it are padding, never predicted */
    g->head.vocab_first = (int)(g->par.tp->rank * g->vocab_rows);
    g->head.tp = g->par.tp;
    DT_TRY_GOTO(alloc_carved(g, DT_MEM_ACTS, "activations", carve_acts, &g->act_arena));
    DT_TRY_GOTO(alloc_carved(g, DT_MEM_TEMP, "transients", carve_scratch, &g->tmp_arena));
    if (cfg->arch == DT_ARCH_LLAMA) {
        size_t half = (size_t)T * (g->dims.hs / 2) * sizeof(float);
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "rope.cos", half, (void **)&g->rope_cos));
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_ACTS, "rope.sin", half, (void **)&g->rope_sin));
        dt_rope_tables(g->rope_cos, g->rope_sin, T, g->dims.hs, 0, cfg->rope_theta);
    }
    *out = g;
    return DT_OK;
fail:
    dt_gpt_free(g);
    return st;
}

void dt_gpt_free(dt_gpt *g) {
    if (!g)
        return;
    dt_mem_release(g->mem, g->rope_sin);
    dt_mem_release(g->mem, g->rope_cos);
    dt_mem_release(g->mem, g->tmp_arena);
    dt_mem_release(g->mem, g->act_arena);
    dt_mem_release(g->mem, g->w_lp);
    dt_mem_release(g->mem, g->g);
    dt_mem_release(g->mem, g->w);
    free(g->unit_lp);
    free(g->unit_g);
    free(g->unit_w);
    free(g->pos_index);
    free(g->unit_param);
    free(g->unit_local);
    free(g->unit_global);
    free(g->local_full);
    free(g->acts);
    free(g->wgrad);
    free(g->blocks);
    if (g->full != g->params)
        free(g->full);
    free(g->params);
    for (int i = 0; i < 3; i++)
        dt_comm_free(g->own_comm[i]);
    dt_gemm_free(g->gemm);
    free(g);
}

void dt_gpt_init_weights(dt_gpt *g, uint64_t seed) {
    DT_ASSERT(g->w);
    dt_param_init_range(g->params, g->n_params, seed, 0, g->n_total, g->w);
    dt_gpt_sync_lp(g);
}

void dt_gpt_sync_lp(dt_gpt *g) {
    if (g->w_lp && g->w)
        dt_cast_f32_to_bf16(g->w_lp, g->w, g->n_total);
}

void dt_gpt_zero_grad(dt_gpt *g) {
    if (g->g)
        memset(g->g, 0, (size_t)g->n_total * sizeof *g->g);
}

/* ---- forward / backward ---------------------------------------------------------------- */

static dt_status check_shape(const dt_gpt *g, int B, int T) {
    if (B < 1 || T < 1 || (int64_t)B * T > (int64_t)g->B * g->T || T > g->T)
        return dt_err_set(DT_ERR_ARG, "model: batch %dx%d exceeds the %dx%d it was built for",
                          B, T, g->B, g->T);
    int split = g->par.sp->size * g->par.rows->size;
    if ((B * T) % split)
        return dt_err_set(DT_ERR_ARG, "model: a batch of %dx%d tokens does not split over %d "
                          "sequence-parallel ranks", B, T, split);
    return DT_OK;
}

static dt_rope_cache rope_of(const dt_gpt *g) {
    return (dt_rope_cache){.cos_t = g->rope_cos, .sin_t = g->rope_sin};
}

/* Where this rank's rows start in the flattened [B*T] batch: inside the tp region (t0) and
 * in the residual stream (r0). */
static void row_starts(const dt_gpt *g, int N, int64_t *t0, int64_t *r0) {
    int Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N);
    *t0 = (int64_t)g->par.sp->rank * Nt;
    *r0 = *t0 + (int64_t)g->par.rows->rank * Nr;
}

static size_t res_rows(const dt_gpt *g, int N) { return (size_t)dt_block_rows_res(&g->par, N); }

/* residual position l (input of block l; L: the final norm's input) of a slot */
static float *res_at(const dt_gpt *g, int slot, int l, int N) {
    size_t n = res_rows(g, N) * g->cfg.n_embd;
    return g->res + ((size_t)slot * g->n_pos + (size_t)g->pos_index[l]) * n;
}

static float *dres_of(const dt_gpt *g, int slot, int N) {
    return g->dres + (size_t)slot * res_rows(g, N) * g->cfg.n_embd;
}

static dt_block_acts *acts_of(const dt_gpt *g, int slot, int l) {
    return &g->acts[(size_t)slot * g->cfg.n_layer + l];
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
    dt_rows_gather(g->scratch.part, g->wte, tokens + t0, v0, g->vocab_rows, Nt, g->cfg.n_embd);
    dt_region_shape sh = tp_shape(g, N);
    DT_TRY(dt_region_op_get(g->par.leave)->forward(g->par.tp, &sh, g->scratch.part, out,
                                                   g->scratch.work));
    if (g->wpe)
        dt_rows_add_positions(out, g->wpe, r0, T, Nr, g->cfg.n_embd);
    return DT_OK;
}

static dt_status embed_backward(dt_gpt *g, const int32_t *tokens, int N, int T,
                                const float *dres) {
    int Nt = dt_block_rows_tp(&g->par, N), Nr = dt_block_rows_res(&g->par, N), C = g->cfg.n_embd;
    int64_t t0, r0, v0 = (int64_t)g->par.tp->rank * g->vocab_rows;
    row_starts(g, N, &t0, &r0);
    if (g->dwpe) { /* a partial sum over the rows comm under Megatron-SP */
        memset(g->dpos, 0, (size_t)T * C * sizeof(float));
        dt_rows_positions_grad(g->dpos, dres, r0, T, Nr, C);
        DT_TRY(dt_comm_allreduce_f32(g->par.rows, g->dpos, (int64_t)T * C, NULL));
        dt_add_inplace(g->dwpe, g->dpos, (int64_t)T * C);
    }
    memset(g->scratch.part, 0, (size_t)Nt * C * sizeof(float));
    dt_region_shape sh = tp_shape(g, N);
    DT_TRY(dt_region_op_get(g->par.leave)->backward(g->par.tp, &sh, dres, g->scratch.part,
                                                    g->scratch.work));
    dt_rows_scatter_add(g->dwte, g->scratch.part, tokens + t0, v0, g->vocab_rows, Nt, C);
    return DT_OK;
}

static dt_status check_units(const dt_gpt *g, int slot, int u0, int u1) {
    if (slot < 0 || slot >= g->n_slots || u0 < 0 || u1 > g->cfg.n_layer + 2 || u0 >= u1)
        return dt_err_set(DT_ERR_ARG, "model: slot %d (of %d), units [%d, %d) out of range",
                          slot, g->n_slots, u0, u1);
    for (int u = u0; u < u1; u++)
        if (g->unit_local[u] < 0)
            return dt_err_set(DT_ERR_ARG, "model: unit %d is not held by this rank", u);
    return DT_OK;
}

dt_status dt_gpt_forward_units(dt_gpt *g, int slot, int u0, int u1, const int32_t *tokens,
                               int B, int T) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, u0, u1));
    int N = B * T, C = g->cfg.n_embd, L = g->cfg.n_layer;
    const int *lu = g->unit_local;
    if (u0 == 0) {
        DT_TRY(enter(g, lu[0], DT_PHASE_FORWARD));
        DT_TRY(embed_forward(g, tokens, N, T, res_at(g, slot, 0, N)));
        DT_TRY(leave(g, lu[0], DT_PHASE_FORWARD));
    }
    dt_rope_cache rope = rope_of(g);
    for (int u = u0 > 1 ? u0 : 1; u < u1 && u <= L; u++) {
        int l = u - 1;
        DT_TRY(enter(g, lu[u], DT_PHASE_FORWARD));
        DT_TRY(dt_block_forward(&g->ctx, &g->dims, &g->par, &g->blocks[l], &rope,
                                res_at(g, slot, l, N), B, T, acts_of(g, slot, l), &g->scratch,
                                res_at(g, slot, l + 1, N)));
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
    float *x = g->scratch.ln_full, *dx = backward ? g->scratch.dln_full : NULL;
    DT_TRY(entry->forward(g->par.tp, &sh, g->lnf_out, x, g->scratch.work));
    if (backward)
        memset(dx, 0, (size_t)Nt * C * sizeof(float));
    DT_TRY(dt_lm_head_loss(&g->ctx, &g->head, x, g->lnf_lp, targets + t0, Nt, grad_scale,
                           backward, g->losses, dx));
    if (backward) {
        float *dlnf = g->dlnf + (size_t)slot * res_rows(g, N) * C;
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
    dt_add_inplace(g->lnf.dw, pg, C);
    if (g->lnf.db)
        dt_add_inplace(g->lnf.db, pg + C, C);
    return DT_OK;
}

dt_status dt_gpt_backward_units(dt_gpt *g, int slot, int u0, int u1, const int32_t *tokens,
                                int B, int T, bool split) {
    DT_TRY(check_shape(g, B, T));
    DT_TRY(check_units(g, slot, u0, u1));
    if (split && !g->wgrad)
        return dt_err_set(DT_ERR_ARG, "model: split backward needs a model built for it");
    int N = B * T, C = g->cfg.n_embd, L = g->cfg.n_layer;
    const int *lu = g->unit_local;
    float *dres = dres_of(g, slot, N);
    if (u1 == L + 2) {
        memset(dres, 0, res_rows(g, N) * C * sizeof(float));
        DT_TRY(enter(g, lu[L + 1], DT_PHASE_BACKWARD));
        DT_TRY(final_norm_backward(g, slot, N, dres));
        DT_TRY(leave(g, lu[L + 1], DT_PHASE_BACKWARD));
    }
    dt_rope_cache rope = rope_of(g);
    for (int u = (u1 <= L ? u1 - 1 : L); u >= 1 && u >= u0; u--) {
        int l = u - 1;
        DT_TRY(enter(g, lu[u], DT_PHASE_BACKWARD));
        dt_block_wgrad *wg = split ? &g->wgrad[(size_t)slot * L + l] : NULL;
        DT_TRY(dt_block_backward(&g->ctx, &g->dims, &g->par, &g->blocks[l], &rope,
                                 res_at(g, slot, l, N), B, T, acts_of(g, slot, l), &g->scratch,
                                 wg, dres));
        DT_TRY(leave(g, lu[u], DT_PHASE_BACKWARD));
    }
    if (u0 > 0)
        return DT_OK;
    DT_TRY(enter(g, lu[0], DT_PHASE_BACKWARD));
    DT_TRY(embed_backward(g, tokens, N, T, dres));
    return leave(g, lu[0], DT_PHASE_BACKWARD);
}

dt_status dt_gpt_backward(dt_gpt *g, const int32_t *tokens, int B, int T) {
    return dt_gpt_backward_units(g, 0, 0, g->cfg.n_layer + 2, tokens, B, T, false);
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
        DT_TRY(dt_block_weight_backward(&g->ctx, &g->dims, &g->par, &g->blocks[l],
                                        res_at(g, slot, l, N), B, T, acts_of(g, slot, l),
                                        &g->scratch, &g->wgrad[(size_t)slot * L + l]));
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

float *dt_gpt_boundary_grad(dt_gpt *g, int slot, int B, int T) {
    return dres_of(g, slot, B * T);
}

dt_status dt_gpt_logits_last(dt_gpt *g, const int32_t *tokens, int T, float *logits) {
    if (g->par.tp->size * g->par.sp->size > 1 || g->n_units < g->cfg.n_layer + 2)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model: sampling runs on one process; export the "
                          "weights and use dtrain sample");
    DT_TRY(dt_gpt_forward(g, tokens, 1, T));
    const float *last = g->lnf_out + (size_t)(T - 1) * g->cfg.n_embd;
    dt_bf16 *lp = g->lnf_lp ? g->lnf_lp + (size_t)(T - 1) * g->cfg.n_embd : NULL;
    int hu = dt_gpt_head_unit(g);
    DT_TRY(enter(g, hu, DT_PHASE_HEAD));
    DT_TRY(dt_lm_head_logits(&g->ctx, &g->head, last, lp, 1, logits));
    return leave(g, hu, DT_PHASE_HEAD);
}

/* ---- whole tensors across tp -------------------------------------------------------------- */

dt_status dt_gpt_gather_full(dt_gpt *g, const float *local, float *full) {
    dt_comm *tp = g->par.tp;
    int p = tp->size;
    float *all = NULL;
    int *counts = calloc((size_t)p, sizeof *counts);
    if (!counts)
        return dt_err_set(DT_ERR_OOM, "model: out of memory");
    dt_status st = dt_mem_alloc(g->mem, DT_MEM_TEMP, "tp.gather", (size_t)p * g->n_total * 4,
                                (void **)&all);
    for (int r = 0; r < p; r++)
        counts[r] = (int)g->n_total;
    if (st == DT_OK && g->n_total * p > INT32_MAX)
        st = dt_err_set(DT_ERR_UNSUPPORTED, "model: %lld floats per rank are too many to gather "
                        "in one call", (long long)g->n_total);
    if (st == DT_OK)
        st = dt_comm_allgather_f32(tp, local, all, counts, NULL);
    if (st == DT_OK) {
        memset(full, 0, (size_t)g->n_full * sizeof *full);
        for (int i = 0; i < g->n_params; i++) {
            const dt_param *lp = &g->params[i];
            if (i == g->tied_copy)
                continue; /* the embedding's stage holds the original */
            int holders = lp->shard.kind == DT_SHARD_NONE ? 1 : p; /* replicated: rank 0's */
            for (int r = 0; r < holders; r++)
                dt_param_shard_to_full(lp, r, all + (size_t)r * g->n_total + lp->offset,
                                       full + g->full[g->local_full[i]].offset);
        }
    }
    dt_mem_release(g->mem, all);
    free(counts);
    /* pipeline stages hold disjoint tensors: the sum over stages (zeros elsewhere) is exact */
    for (int64_t i = 0; st == DT_OK && g->pp && i < g->n_full; i += 1 << 28) {
        int64_t n = g->n_full - i < (1 << 28) ? g->n_full - i : 1 << 28;
        st = dt_comm_allreduce_f32(g->pp, full + i, n, NULL);
    }
    return st;
}

void dt_gpt_take_shard(const dt_gpt *g, const float *full, float *local) {
    memset(local, 0, (size_t)g->n_total * sizeof *local);
    for (int i = 0; i < g->n_params; i++) {
        const dt_param *lp = &g->params[i];
        dt_param_full_to_shard(lp, lp->shard.index, full + g->full[g->local_full[i]].offset,
                               local + lp->offset);
    }
}

/* ---- accessors ------------------------------------------------------------------------- */

int dt_gpt_n_params(const dt_gpt *g) { return g->n_params; }
int dt_gpt_n_full_params(const dt_gpt *g) { return g->n_full_params; }
const dt_param *dt_gpt_param(const dt_gpt *g, int i) { return &g->params[i]; }
const dt_param *dt_gpt_full_param(const dt_gpt *g, int i) { return &g->full[i]; }
int64_t dt_gpt_numel(const dt_gpt *g) { return g->n_total; }
int64_t dt_gpt_full_numel(const dt_gpt *g) { return g->n_full; }
float *dt_gpt_weights(dt_gpt *g) { return g->w; }
float *dt_gpt_grads(dt_gpt *g) { return g->g; }
dt_bf16 *dt_gpt_weights_lp(dt_gpt *g) { return g->w_lp; }
const dt_block_par *dt_gpt_par(const dt_gpt *g) { return &g->par; }

const dt_param *dt_gpt_find_param(const dt_gpt *g, const char *name) {
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->params[i].name, name) == 0)
            return &g->params[i];
    return NULL;
}

double dt_gpt_flops_per_token(const dt_gpt *g, int T) {
    double matmul_weights = 0;
    for (int i = 0; i < g->n_full_params; i++) {
        const dt_param *p = &g->full[i];
        bool embedding_only = strcmp(p->name, "wpe.weight") == 0 ||
                              strcmp(p->name, "model.embed_tokens.weight") == 0;
        if (p->ndim == 2 && !embedding_only)
            matmul_weights += (double)p->numel;
    }
    /* GPT-2's wte is counted once, as the LM head's matrix (the lookup costs no FLOPs) */
    return 6.0 * matmul_weights + 6.0 * g->cfg.n_layer * g->cfg.n_embd * (double)T;
}
