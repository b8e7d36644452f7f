/* The inside of a dt_dit, shared by its files (dit.c: arenas, views, life cycle;
 * dit_tables.c: parameter tables, unit maps, splits, whole-arena gathers; dit_fwd.c: one
 * block's forward and backward; dit_tp.c: matmuls across tp; dit_units.c: the embedders, the final
 * layer, the loss and the unit-range passes; dit_model.c: the model interface). Nothing outside
 * models/ includes it.
 *
 * Tensor parallelism (Megatron): each tp rank holds n_head / tp heads of q|k|v (a column-
 * parallel qkv), the matching columns of proj (row-parallel), 4C / tp rows of fc1 and columns
 * of fc2; the residual rows, the norms, the adaLN modulations, the embedders and the final
 * layer are replicated. Entering a column-parallel matmul is the COPY region (identity
 * forward, all-reduce of the input gradient), leaving a row-parallel one the REDUCE region
 * (all-reduce forward); the row-parallel biases are added once, after it. Under Megatron-SP
 * (sequence_tp) the residual rows are split over tp as well: the regions are SEQ_GATHER and
 * SEQ_REDUCE_SCATTER, and the gradients of what is applied to split rows (the modulations,
 * the row-parallel biases, the patch embedding and the final linear) are summed over tp.
 *
 * Rows. A micro-batch of B clips is N = B S token rows, flattened [B, S]; an sp rank holds
 * the contiguous rows [r N/sp, (r+1) N/sp) (Nr of them) through the residual stream, the
 * norms, the MLP and the projections. Row i of the rank is token (r0 + i) % S of clip
 * (r0 + i) / S. Per-clip tensors (the conditioning and every adaLN modulation) are computed
 * for all B clips on every sp rank.
 */
#ifndef DT_MODELS_DIT_IMPL_H
#define DT_MODELS_DIT_IMPL_H

#include "models/dit.h"
#include "nn/block.h"
#include "nn/linear.h"
#include "nn/ring_attn.h"

/* The DiT's tensors are linears (weight and bias), named rows of three tables, one per
 * kind of unit, in table order: the parameter table is built from them and the wiring finds
 * each view by its row's name. A row's sizes are resolved per model (dit_tables.c); zero:
 * adaLN-Zero's (and the cross-attention's output's) zero start; split: how it splits over tp
 * (core/param.h); text: only in a model with text. The embedding unit's tables follow its
 * linears: the class table (y_embedder.embedding_table, with n_classes > 0), then with text
 * the byte and position tables (bytes only) and the null text (dit_text.c). */
typedef enum {
    DIT_SZ_C,
    DIT_SZ_2C,
    DIT_SZ_3C,
    DIT_SZ_6C,
    DIT_SZ_F,
    DIT_SZ_P,
    DIT_SZ_FREQ,
    DIT_SZ_DIN, /* a text token's features: 3C (bytes) or text_dim */
    DIT_SZ_COUNT
} dt_dit_size;
typedef struct dt_dit_row {
    const char *name; /* under blocks.L. for a block's rows */
    dt_dit_size out, in;
    bool zero;
    dt_shard_kind split;
    bool text;
    bool no_bias; /* the keys': a bias on every key shifts a softmax's inputs alike */
} dt_dit_row;
enum { DIT_X_EMB, DIT_T_FC1, DIT_T_FC2, DIT_Y_FC1, DIT_Y_FC2, DIT_EMBED_ROWS };
enum {
    DIT_ADA,
    DIT_QKV,
    DIT_PROJ,
    DIT_XQ,
    DIT_XK,
    DIT_XV,
    DIT_XPROJ,
    DIT_FC1,
    DIT_FC2,
    DIT_BLOCK_ROWS
};
enum { DIT_FINAL_ADA, DIT_FINAL_LIN, DIT_FINAL_ROWS };
static const dt_dit_row DT_DIT_EMBED[DIT_EMBED_ROWS] = {
    [DIT_X_EMB] = {"x_embedder.proj", DIT_SZ_C, DIT_SZ_P, false, DT_SHARD_NONE, false},
    [DIT_T_FC1] = {"t_embedder.mlp.0", DIT_SZ_C, DIT_SZ_FREQ, false, DT_SHARD_NONE, false},
    [DIT_T_FC2] = {"t_embedder.mlp.2", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_NONE, false},
    [DIT_Y_FC1] = {"y_embedder.y_proj.fc1", DIT_SZ_C, DIT_SZ_DIN, false, DT_SHARD_NONE, true},
    [DIT_Y_FC2] = {"y_embedder.y_proj.fc2", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_NONE, true},
};
static const dt_dit_row DT_DIT_BLOCK[DIT_BLOCK_ROWS] = {
    [DIT_ADA] = {"adaLN_modulation.1", DIT_SZ_6C, DIT_SZ_C, true, DT_SHARD_NONE, false},
    [DIT_QKV] = {"attn.qkv", DIT_SZ_3C, DIT_SZ_C, false, DT_SHARD_QKV, false},
    [DIT_PROJ] = {"attn.proj", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_COLS, false},
    [DIT_XQ] = {"cross_attn.q_linear", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_ROWS, true},
    [DIT_XK] = {"cross_attn.k_linear", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_ROWS, true, true},
    [DIT_XV] = {"cross_attn.v_linear", DIT_SZ_C, DIT_SZ_C, false, DT_SHARD_ROWS, true},
    [DIT_XPROJ] = {"cross_attn.proj", DIT_SZ_C, DIT_SZ_C, true, DT_SHARD_COLS, true},
    [DIT_FC1] = {"mlp.fc1", DIT_SZ_F, DIT_SZ_C, false, DT_SHARD_ROWS, false},
    [DIT_FC2] = {"mlp.fc2", DIT_SZ_C, DIT_SZ_F, false, DT_SHARD_COLS, false},
};
static const dt_dit_row DT_DIT_FINAL[DIT_FINAL_ROWS] = {
    [DIT_FINAL_ADA] = {"final_layer.adaLN_modulation.1", DIT_SZ_2C, DIT_SZ_C, true, DT_SHARD_NONE,
                       false},
    [DIT_FINAL_LIN] = {"final_layer.linear", DIT_SZ_P, DIT_SZ_C, true, DT_SHARD_NONE, false},
};

/* A block's weights (borrowed views). The norms have no weights of their own: adaLN's
 * (1 + scale, shift) of the clip are the LayerNorm's affine parameters. */
typedef struct dt_dit_block {
    dt_linear ada;               /* adaLN_modulation [6C, C] on silu(c) */
    dt_linear qkv, proj;         /* [3C, C], [C, C] */
    dt_linear xq, xk, xv, xproj; /* cross-attention [C, C] each (text only) */
    dt_linear fc1, fc2;          /* [4C, C], [C, 4C] */
} dt_dit_block;

/* Saved by a block's forward for its backward, per slot (Nr residual rows, Nt inside the tp
 * region; widths C, 3C, 4C and NH of the attention and MLP this tp rank's: Ct, 3Ct, Ft, NHt;
 * "attention order":
 * the kernel's rows, see dit_fwd.c; a field the slot does not keep under activation
 * checkpointing is NULL and lives in the model's shared set). */
typedef struct dt_dit_acts {
    float *mod;           /* [B, 6C] shift1 scale1 gate1 shift2 scale2 gate2 */
    float *aff;           /* [B, 2, 2, C] per norm: (1 + scale, shift) as LN affine */
    float *mean1, *rstd1; /* [Nr] */
    float *m1;            /* [Nr, C] modulated norm output (attention input) */
    float *qkv;           /* [Nt, 3Ct] elements, attention order and layout */
    float *y, *lse;       /* [Nt, Ct] elements attention output, [Nt NHt] elements */
    float *a;             /* [Nr, C] proj output (before the gate) */
    float *x2;            /* [Nr, C] residual after the attention branch */
    float *xq;            /* [Nt, Ct] cross-attention queries (text) */
    float *xk, *xv;       /* [B Lt, Ct] its keys and values */
    float *xo, *xlse;     /* [Nt, Ct] its output, [Nt, NHt] log-sum-exp */
    float *x3;            /* [Nr, C] residual after the cross-attention branch */
    float *mean2, *rstd2; /* [Nr] */
    float *m2;            /* [Nr, C] */
    float *h;             /* [Nt, Ft] fc1 output (before GELU) */
    float *f;             /* [Nr, C] fc2 output (before the gate) */
} dt_dit_acts;

/* Split backward: the output gradients of a block's matmuls its weight pass reads, per slot
 * (the gathered ones under tp). */
typedef struct dt_dit_wgrad {
    float *dmod;   /* [B, 6C] adaLN */
    float *dqkv;   /* [Nt, 3Ct] */
    float *dproj;  /* [Nt, C] */
    float *dh;     /* [Nt, Ft] fc1 */
    float *dfc2;   /* [Nt, C] */
    float *dxq;    /* [Nt, Ct] cross-attention q_linear (text) */
    float *dxproj; /* [Nt, C] cross-attention proj (text) */
} dt_dit_wgrad;

/* An int8 copy of one saved tensor (act_compress = int8): the bytes and one fp32 scale per
 * row; q NULL: not kept this way. */
typedef struct dt_dit_q8 {
    int8_t *q;
    float *scale;
} dt_dit_q8;
enum { DT_DIT_N_Q8 = 8 }; /* m1, qkv, y, a, x2, m2, h, f (dit_fwd.c) */

/* What one micro-batch slot keeps outside its blocks. */
typedef struct dt_dit_slot {
    float *res; /* [n_pos][pos_stride]: residual rows [Nr, C], then silu(c) [B, C] */
    float *sc;  /* [B, C] silu(c) the slot's blocks read */
    /* unit 0 */
    float *patches;  /* [Nr, P] */
    float *tfreq;    /* [B, FREQ] */
    float *th, *ts;  /* [B, C] t_fc1 output, its silu */
    float *c;        /* [B, C] conditioning */
    int32_t *labels; /* [B] */
    float *tfeat;    /* [B Lt, Din] text features (text) */
    float *th_y;     /* [B Lt, C] the text embedder's fc1 output (before GELU) */
    int32_t *ttok;   /* [B Lt] caption bytes (text_dim 0) */
    /* every held unit */
    float *y;    /* [B Lt, C] the text sequences the blocks attend to (text) */
    int32_t *tn; /* [B] each clip's text tokens, <= 0: the null text */
    /* final unit */
    float *modf, *afff;   /* [B, 2C] shift, scale; [B, 2, C] its LN affine */
    float *meanf, *rstdf; /* [Nr] */
    float *mf;            /* [Nr, C] */
    float *dtok;          /* [Nr, P] the loss gradient of the final linear's output */
} dt_dit_slot;

struct dt_dit {
    dt_dit_config cfg; /* frames, height, width: the shape in use */
    /* the shapes of clip it trains on (the config's alone, or data.buckets'), each with its
     * largest micro-batch; the arenas hold the largest of each, carved for the one in use */
    dt_model_shape *shapes;
    int n_shapes, shape;
    int B, S, P, C, NH, F, Tt, Th, Tw;
    int Lt, Din;     /* text tokens (0: no text), a text token's features */
    int Nt, Nr;      /* rows of the largest micro-batch on this sp rank (inside the tp region)
                      * and in its residual stream (Nt / tp under Megatron-SP, else Nt) */
    int Ct, NHt, Ft; /* this tp rank's attention width C / tp, heads, MLP width 4C / tp */
    bool training;
    bool split;  /* split backward (zero-bubble): keep what the weight pass reads */
    dt_mem *mem; /* borrowed */
    dt_gemm *gemm;
    dt_nn_ctx ctx;
    /* the splits, as a GPT holds them (nn/block.h): tp (heads and MLP columns), sp (Ulysses),
     * rows (Megatron-SP: tp; else size 1), the ring of context parallelism; borrowed, or the
     * size-1 comms of own_comm */
    dt_block_par par;
    dt_comm *own_comm[4];
    dt_comm *pp;            /* borrowed; NULL: no pipeline */
    int n_chunks, chunk[2]; /* this ring rank's chunks of a clip (1, {0} without a ring):
                             * local token t is whole-clip token chunk[t / (S / n_chunks)] *
                             * (S / n_chunks) + t % (S / n_chunks) */
    int S_full, Tt_full;    /* a whole clip's tokens and time tokens (S, Tt: this rank's) */

    /* tables: the single process's (files) and this rank's (its units, packed) */
    dt_param *full, *params;
    int n_full_params, n_params, cap_params;
    int64_t n_full, n_total;
    int *local_full; /* [n_params] full index of each local tensor */
    int n_embed_params, per_layer;
    int *unit_first; /* [L + 3] first full tensor of each global unit, then end */
    int n_units;     /* held here */
    int *unit_global, *unit_local, *unit_param; /* [n_units], [L + 2] (-1), [n_units + 1] */
    float **unit_w, **unit_g;                   /* [n_units] current storage of each unit */
    dt_bf16 **unit_lp;
    float *w, *g;  /* own arenas (NULL: external) */
    dt_bf16 *w_lp; /* 16-bit copy (16-bit matmuls, own weights) */

    /* views */
    dt_linear x_emb, t_fc1, t_fc2, final_ada, final_lin;
    float *y_table, *dy_table;                          /* [n_classes + 1, C] or NULL */
    dt_linear y_fc1, y_fc2;                             /* the text embedder (text) */
    float *byte_tab, *dbyte_tab, *tpos_tab, *dtpos_tab; /* [256, C], [Lt, C] (bytes) */
    float *null_y, *dnull_y;                            /* [Lt, C] the null text */
    dt_dit_block *blocks;                               /* [L] (held ones wired) */

    /* slots and residual positions: position l = input of block l (L: the final input) */
    int n_slots, n_pos;
    /* the boundary gradient buffers (n_grads, a pipeline's from its schedule), each
     * [pos_stride]: d residual [Nr, C], then d silu(c) [B, C] (and d text) */
    int n_grads;
    float *dres;
    int *pos_index;     /* [L + 1] -> index among the positions kept, -1 */
    int64_t pos_stride; /* Nr C + B C floats, rounded up to 16 */
    dt_model_hooks hooks;
    float *pos;          /* [S, C] fixed 3-D sinusoidal positions */
    dt_dit_slot *slots;  /* [n_slots] */
    dt_dit_acts *acts;   /* [n_slots][L] */
    dt_dit_wgrad *wgrad; /* [n_slots][L] (split backward), else NULL */
    bool compress;       /* act_compress = int8 */
    dt_dit_q8 *q8;       /* [n_slots][L][DT_DIT_N_Q8] with int8 storage, else NULL */
    /* activation checkpointing: what slots do not keep lives in one shared set */
    dt_ac_mode ac;
    int ac_every;
    dt_dit_acts shared;
    float *ac_out;       /* [Nr, C] a rerun block's output (discarded) */
    size_t *saved_bytes; /* [n_slots][L] bytes a block's saved set holds, for the */
    bool *saved_live;    /* accountant's timeline, and whether it is in use */
    float *out;          /* [B, clip] unpatchified output (holder of the final unit) */

    /* transients, shared by the blocks (the d* ones NULL when not training) */
    float *qkv_rows, *packed, *qkvh; /* [Nt, 3Ct] each (packed, qkvh: sp > 1) */
    float *att_rows, *atth, *gel;    /* [Nt, Ct], [Nt, Ct], [Nt, Ft] */
    float *part;                     /* [Nt, C] a row-parallel matmul's partial sum (tp > 1) */
    float *ln_full;                  /* [Nt, C] a norm output gathered (Megatron-SP) */
    float *pgrad;                    /* gradients summed over split rows (Megatron-SP) */
    float *tok_out, *tok_tgt;        /* [Nr, P] final linear output, the target's patches */
    float *work;                     /* region ops' scratch (sp > 1 or tp > 1) */
    dt_bf16 *x_lp, *dy_lp;           /* 16-bit matmul operands (16-bit modes) */
    float *dA, *dB;                  /* [Nt, C] branch gradients */
    float *dg, *dh;                  /* [Nt, Ft] */
    float *dqkv, *dqkvp, *dattp;     /* [Nt, 3Ct], [Nt, 3Ct], [Nt, Ct] */
    float *dmod, *dc, *dts, *dth;    /* [B, 6C], [B, C] x 3 */
    float *dxq, *dxk, *dxv;          /* [Nt, Ct], [B Lt, Ct] x 2 (text) */
    float *ty_gel, *dty;             /* [B Lt, C] the text embedder's GELU output; d of it
                                      * then d of its input [2][B Lt, C] (text) */
    float *dtfeat;                   /* [B Lt, Din] d of the byte features (text_dim 0) */
    float *xkt;                      /* [B NHt][2][hs][Lt] each (clip, head)'s keys and
                                      * values transposed (text; kernels/xattn.h) */
    int32_t *xkeys;                  /* [B] the keys each clip attends to (text) */
    void *act_arena, *tmp_arena;
};

/* Hands out 64-byte aligned pieces of an arena; with base == NULL it only measures. */
typedef struct dt_dit_carver {
    char *base;
    size_t used;
} dt_dit_carver;

static inline void *dt_dit_carve(dt_dit_carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (bytes + 63) & ~(size_t)63;
    return p;
}

static inline bool dt_dit_holds(const dt_dit *d, int global_unit) {
    return d->unit_local[global_unit] >= 0;
}

/* A rank's chunks are its runs of consecutive held units; a slot holds one (chunk,
 * micro-batch) at a time, so each chunk's positions and block sets start at the slot's start
 * (as the GPT's). Does held unit u start a chunk? */
static inline bool dt_dit_starts_chunk(const dt_dit *d, int u) {
    return u == 0 || !dt_dit_holds(d, u - 1);
}

/* Rows of a micro-batch of B clips on this rank: inside the tp region (its sp rank's), in
 * the residual stream, and where the residual rows start in the flattened [B S] batch. */
static inline int dt_dit_rows_tp(const dt_dit *d, int B) { return B * d->S / d->par.sp->size; }
static inline int dt_dit_rows(const dt_dit *d, int B) {
    return dt_dit_rows_tp(d, B) / d->par.rows->size;
}
static inline int64_t dt_dit_row0(const dt_dit *d, int B) {
    return (int64_t)d->par.sp->rank * dt_dit_rows_tp(d, B) +
           (int64_t)d->par.rows->rank * dt_dit_rows(d, B);
}

/* dit_tables.c: the full table (DiT / Open-Sora names) and this rank's (held units). */
dt_status dt_dit_build_tables(dt_dit *d, const bool *held);

/* dit_fwd.c: the slots' per-block saved sets and the shared recompute set, carved into the
 * "dit.activations" arena by the checkpointing mode (sets saved_bytes). */
void dt_dit_carve_block_acts(dt_dit *d, dt_dit_carver *cv);
/* dit_fwd.c: floats of d->work the ring attention needs (0 without a ring). */
int64_t dt_dit_ring_work_count(const dt_dit *d);
/* dit_fwd.c: block l of a slot (x: its input rows, out: its output rows; sc: silu(c)
 * [B, C]; the text from the slot), by the checkpointing mode; backward turns dres (d out)
 * into d x and accumulates d silu(c) into dsc and d y into dy (text). */
dt_status dt_dit_block_forward(dt_dit *d, int slot, int l, const float *x, const float *sc, int B,
                               float *out);
dt_status dt_dit_block_backward(dt_dit *d, int slot, int l, const float *x, const float *sc, int B,
                                float *dres, float *dsc, float *dy, bool split);
/* split backward's weight pass of block l (after dt_dit_block_backward with split) */
dt_status dt_dit_block_weights(dt_dit *d, int slot, int l, const float *x, const float *sc, int B);
/* dit_tp.c: a norm output [Nr, C] entering the tp region (itself, or gathered to [Nt, C]);
 * row-parallel matmul forward (x [Nt, in/tp] -> y [Nr, C]) and backward; column-parallel
 * backward (dx [Nr, C] +=). keep: not NULL defers the weight gradient (split backward),
 * keeping its output gradient [Nt, out] there. */
dt_status dt_dit_enter_rows(dt_dit *d, const float *x, int B, const float **full);
dt_status dt_dit_row_forward(dt_dit *d, const dt_linear *l, const float *x, int B, float *y);
dt_status dt_dit_row_backward(dt_dit *d, const dt_linear *l, const float *x, const float *dy, int B,
                              float *dx, float *keep);
dt_status dt_dit_col_backward(dt_dit *d, const dt_linear *l, const float *x, const float *dy, int B,
                              float *dx, float *keep);
/* dit_tp.c: g[0..n) += the sum over the rows comm of part[0..n) (part is clobbered):
 * gradients of what is applied to split residual rows (Megatron-SP; a plain add else). */
dt_status dt_dit_sum_rows(dt_dit *d, float *g, float *part, int64_t n);
/* dit_tp.c: a replicated linear applied to this rank's residual rows (the patch embedding,
 * the final linear): its weight gradients summed over split rows (Megatron-SP). */
dt_status dt_dit_rows_linear_backward(dt_dit *d, const dt_linear *l, const float *x,
                                      const float *dy, int N, float *dx);
/* dit_text.c: the text embedder of unit 0: the input rows' text (n and bytes or embeddings;
 * NULL: no text) into the slot (DT_ERR_ARG for a bad n or byte); the slot's text sequences y
 * from it; the backward from dy [B Lt, C] (this rank's part: summed over tp here; clobbered)
 * into the embedder's gradients. */
dt_status dt_dit_text_read(dt_dit *d, int slot, const float *text, int64_t stride, int B);
dt_status dt_dit_text_forward(dt_dit *d, int slot, int B);
dt_status dt_dit_text_backward(dt_dit *d, int slot, int B, float *dy);
/* dit_text.c: floats of a boundary's text (y [B Lt, C], then n [B]; 0 without text), and
 * the slot's text to (save) and from (load) a boundary's. */
int64_t dt_dit_text_boundary(const dt_dit *d, int B);
void dt_dit_text_save(const dt_dit *d, int slot, int B, float *dst);
void dt_dit_text_load(dt_dit *d, int slot, int B, const float *src);
/* dit_text.c: a block's cross-attention branch on a->x2 (a->x3 = x2 + proj(attn)); the
 * attention alone again (selective recompute); the backward from dres = d x3 into d x2
 * (in place), accumulating the slot's d y into dy (wg: split backward, the q and proj
 * weight gradients left to dt_dit_cross_weights). */
dt_status dt_dit_cross_forward(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int slot,
                               int B);
void dt_dit_cross_attend(dt_dit *d, const dt_dit_acts *a, int slot, int B);
dt_status dt_dit_cross_backward(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int slot,
                                int B, float *dres, float *dy, dt_dit_wgrad *wg);
dt_status dt_dit_cross_weights(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int B,
                               const dt_dit_wgrad *wg);
/* dit_fwd.c: the per-clip pieces the final layer shares with the blocks */
void dt_dit_make_affine(float *aff, int astride, const float *mod, int mstride, int shift_off,
                        int scale_off, int B, int C);
void dt_dit_ln_rows(const dt_dit *d, float *y, float *mean, float *rstd, const float *x,
                    const float *aff, int stride, int B);
void dt_dit_ln_rows_backward(const dt_dit *d, float *dx, float *dmod, int mstride, int scale_off,
                             int shift_off, const float *dy, const float *x, const float *aff,
                             int stride, const float *mean, const float *rstd, int B);
/* dit_tp.c: a linear's backward reading x (fp32, or its 16-bit copy rebuilt into d->x_lp) */
dt_status dt_dit_linear_backward(dt_dit *d, const dt_linear *l, const float *x, const float *dy,
                                 int N, float *dx);
dt_status dt_dit_linear_forward(dt_dit *d, const dt_linear *l, const float *x, int N, float *y);

#endif
