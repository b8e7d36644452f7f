/* The model's parameter tables (the single process's, in HuggingFace order, and this rank's
 * local one: its units, each tensor its tp shard), the checks that a split divides the model,
 * and the gathers between local and full arenas. See gpt.h. */
#include "models/gpt_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter table ------------------------------------------------------------------- */

static dt_status add_param(dt_gpt *g, const char *name, int64_t rows, int64_t cols,
                           dt_param_init init, float std, bool conv1d, dt_shard_kind split) {
    dt_param *p;
    DT_TRY(dt_param_append(&g->params, &g->n_params, &g->cap_params, &g->n_total, name, rows,
                           cols, init, std, &p));
    p->conv1d = conv1d;
    p->shard.kind = split;
    if (split == DT_SHARD_QKV) /* GPT-2's c_attn: q, k, v of equal height */
        p->shard.sec[0] = p->shard.sec[1] = p->shard.sec[2] = rows / 3;
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

/* how each tensor splits over tp: vocabulary and column-parallel rows, row-parallel columns */
#define WHOLE DT_SHARD_NONE
#define ROWS DT_SHARD_ROWS
#define COLS DT_SHARD_COLS
#define QKV DT_SHARD_QKV

/* A block row's sizes and initial spread, resolved per model by the arrays below. */
typedef enum { SZ_0, SZ_C, SZ_3C, SZ_4C, SZ_KV, SZ_F, SZ_V, SZ_T, SZ_COUNT } row_size;
typedef enum { STD_0, STD_W, STD_PROJ, STD_COUNT } row_std;

typedef struct block_row {
    const char *name; /* with the layer index for %d */
    row_size rows, cols;
    dt_param_init init;
    row_std std;
    bool conv1d;
    dt_shard_kind split;
} block_row;

static const block_row GPT2_ROWS[GPT2_BLOCK_ROWS] = {
    [GPT2_LN1_W] = {"h.%d.ln_1.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false, WHOLE},
    [GPT2_LN1_B] = {"h.%d.ln_1.bias", SZ_C, SZ_0, DT_INIT_ZEROS, STD_0, false, WHOLE},
    [GPT2_QKV_W] = {"h.%d.attn.c_attn.weight", SZ_3C, SZ_C, DT_INIT_NORMAL, STD_W, true, QKV},
    [GPT2_QKV_B] = {"h.%d.attn.c_attn.bias", SZ_3C, SZ_0, DT_INIT_ZEROS, STD_0, false, QKV},
    [GPT2_PROJ_W] = {"h.%d.attn.c_proj.weight", SZ_C, SZ_C, DT_INIT_NORMAL, STD_PROJ, true,
                     COLS},
    [GPT2_PROJ_B] = {"h.%d.attn.c_proj.bias", SZ_C, SZ_0, DT_INIT_ZEROS, STD_0, false,
                     WHOLE},
    [GPT2_LN2_W] = {"h.%d.ln_2.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false, WHOLE},
    [GPT2_LN2_B] = {"h.%d.ln_2.bias", SZ_C, SZ_0, DT_INIT_ZEROS, STD_0, false, WHOLE},
    [GPT2_FC_W] = {"h.%d.mlp.c_fc.weight", SZ_4C, SZ_C, DT_INIT_NORMAL, STD_W, true, ROWS},
    [GPT2_FC_B] = {"h.%d.mlp.c_fc.bias", SZ_4C, SZ_0, DT_INIT_ZEROS, STD_0, false, ROWS},
    [GPT2_DOWN_W] = {"h.%d.mlp.c_proj.weight", SZ_C, SZ_4C, DT_INIT_NORMAL, STD_PROJ, true,
                     COLS},
    [GPT2_DOWN_B] = {"h.%d.mlp.c_proj.bias", SZ_C, SZ_0, DT_INIT_ZEROS, STD_0, false, WHOLE},
};

#define L_ "model.layers.%d."
static const block_row LLAMA_ROWS[LLAMA_BLOCK_ROWS] = {
    [LLAMA_LN1_W] = {L_ "input_layernorm.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false, WHOLE},
    [LLAMA_Q_W] = {L_ "self_attn.q_proj.weight", SZ_C, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [LLAMA_K_W] = {L_ "self_attn.k_proj.weight", SZ_KV, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [LLAMA_V_W] = {L_ "self_attn.v_proj.weight", SZ_KV, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [LLAMA_O_W] = {L_ "self_attn.o_proj.weight", SZ_C, SZ_C, DT_INIT_NORMAL, STD_W, false, COLS},
    [LLAMA_LN2_W] = {L_ "post_attention_layernorm.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false,
                     WHOLE},
    [LLAMA_GATE_W] = {L_ "mlp.gate_proj.weight", SZ_F, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [LLAMA_UP_W] = {L_ "mlp.up_proj.weight", SZ_F, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [LLAMA_DOWN_W] = {L_ "mlp.down_proj.weight", SZ_C, SZ_F, DT_INIT_NORMAL, STD_W, false, COLS},
};
#undef L_

static const block_row GPT2_EMBED[GPT2_EMBED_ROWS] = {
    [GPT2_WTE] = {"wte.weight", SZ_V, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
    [GPT2_WPE] = {"wpe.weight", SZ_T, SZ_C, DT_INIT_NORMAL, STD_W, false, WHOLE},
};
static const block_row GPT2_FINAL[GPT2_FINAL_ROWS] = {
    [GPT2_LNF_W] = {"ln_f.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false, WHOLE},
    [GPT2_LNF_B] = {"ln_f.bias", SZ_C, SZ_0, DT_INIT_ZEROS, STD_0, false, WHOLE},
};
static const block_row LLAMA_EMBED[LLAMA_EMBED_ROWS] = {
    [LLAMA_EMBED_W] = {"model.embed_tokens.weight", SZ_V, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
};
static const block_row LLAMA_FINAL[LLAMA_FINAL_ROWS] = {
    [LLAMA_NORM_W] = {"model.norm.weight", SZ_C, SZ_0, DT_INIT_ONES, STD_0, false, WHOLE},
    [LLAMA_HEAD_W] = {"lm_head.weight", SZ_V, SZ_C, DT_INIT_NORMAL, STD_W, false, ROWS},
};

/* Layer l's rows (or a unit's without a layer: names without %d), in id order. */
static dt_status add_block(dt_gpt *g, const block_row *rows, int n, int l,
                           const int64_t size[SZ_COUNT], const float std[STD_COUNT]) {
    char name[96];
    for (int i = 0; i < n; i++) {
        const block_row *r = &rows[i];
        snprintf(name, sizeof name, r->name, l);
        DT_TRY(add_param(g, name, size[r->rows], size[r->cols], r->init, std[r->std], r->conv1d,
                         r->split));
    }
    return DT_OK;
}

static dt_status build_table_gpt2(dt_gpt *g) {
    const dt_model_config *c = &g->cfg;
    g->n_embed_params = GPT2_EMBED_ROWS;
    g->per_layer = GPT2_BLOCK_ROWS;
    int64_t C = c->n_embd;
    const int64_t size[SZ_COUNT] = {[SZ_C] = C,
                                    [SZ_3C] = 3 * C,
                                    [SZ_4C] = 4 * C,
                                    [SZ_V] = c->vocab_size,
                                    [SZ_T] = c->max_seq_len};
    const float std[STD_COUNT] = {[STD_W] = 0.02f,
                                  [STD_PROJ] = 0.02f / sqrtf(2.0f * c->n_layer)};
    DT_TRY(add_block(g, GPT2_EMBED, GPT2_EMBED_ROWS, 0, size, std));
    for (int l = 0; l < c->n_layer; l++)
        DT_TRY(add_block(g, GPT2_ROWS, GPT2_BLOCK_ROWS, l, size, std));
    return add_block(g, GPT2_FINAL, GPT2_FINAL_ROWS, 0, size, std);
}

static dt_status build_table_llama(dt_gpt *g) {
    const dt_model_config *c = &g->cfg;
    int64_t C = c->n_embd, hs = C / c->n_head;
    const int64_t size[SZ_COUNT] = {[SZ_C] = C,
                                    [SZ_KV] = (int64_t)dt_gpt_kv_heads(c) * hs,
                                    [SZ_F] = dt_gpt_ffn_hidden(c),
                                    [SZ_V] = c->vocab_size};
    const float std[STD_COUNT] = {[STD_W] = 0.02f};
    g->n_embed_params = LLAMA_EMBED_ROWS;
    g->per_layer = LLAMA_BLOCK_ROWS;
    DT_TRY(add_block(g, LLAMA_EMBED, LLAMA_EMBED_ROWS, 0, size, std));
    for (int l = 0; l < c->n_layer; l++)
        DT_TRY(add_block(g, LLAMA_ROWS, LLAMA_BLOCK_ROWS, l, size, std));
    return add_block(g, LLAMA_FINAL, LLAMA_FINAL_ROWS, 0, size, std);
}

#undef WHOLE
#undef ROWS
#undef COLS
#undef QKV

dt_status dt_gpt_build_tables(dt_gpt *g, const bool *held) {
    DT_TRY(g->cfg.arch == DT_ARCH_GPT2 ? build_table_gpt2(g) : build_table_llama(g));
    return localize(g, held);
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

dt_status dt_gpt_model_check_split(const dt_model_config *c, const dt_model_split *s) {
    return dt_gpt_check_split(c, s->tp, s->sp, s->sequence_tp, s->seq_len / s->cp);
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

/* ---- whole tensors across tp -------------------------------------------------------------- */

dt_param_tables dt_gpt_tables(const dt_gpt *g) {
    return (dt_param_tables){.full = g->full,
                             .local = g->params,
                             .n_full = g->n_full_params,
                             .n_local = g->n_params,
                             .local_full = g->local_full,
                             .full_numel = g->n_full,
                             .local_numel = g->n_total,
                             .skip = g->tied_copy,
                             .n_units = g->n_units,
                             .unit_param = g->unit_param};
}

dt_status dt_gpt_gather_full(dt_gpt *g, const float *local, float *full) {
    dt_param_tables t = dt_gpt_tables(g);
    return dt_param_gather_full(&t, g->par.tp, g->pp, g->mem, local, full);
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
/* none: the 16-bit weights are cast unit by unit (gpt.c: cast_entered) or bound by the
 * caller (ZeRO-3) */
dt_bf16 *dt_gpt_weights_lp(dt_gpt *g) {
    (void)g;
    return NULL;
}
const dt_block_par *dt_gpt_par(const dt_gpt *g) { return &g->par; }

const dt_param *dt_gpt_find_param(const dt_gpt *g, const char *name) {
    dt_param_tables t = dt_gpt_tables(g);
    return dt_param_find(&t, name);
}

double dt_gpt_flops_per_sample(const dt_gpt *g, int T) {
    double matmul_weights = 0;
    for (int i = 0; i < g->n_full_params; i++) {
        const dt_param *p = &g->full[i];
        bool embedding_only = strcmp(p->name, "wpe.weight") == 0 ||
                              strcmp(p->name, "model.embed_tokens.weight") == 0;
        if (p->ndim == 2 && !embedding_only)
            matmul_weights += (double)p->numel;
    }
    /* GPT-2's wte is counted once, as the LM head's matrix (the lookup costs no FLOPs) */
    return (6.0 * matmul_weights + 6.0 * g->cfg.n_layer * g->cfg.n_embd * (double)T) * T;
}
