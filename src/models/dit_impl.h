/* The inside of a dt_dit, shared by its files (dit.c: arenas, views, life cycle;
 * dit_tables.c: parameter tables, unit maps, splits, whole-arena gathers; dit_fwd.c: one
 * block's forward and backward; dit_units.c: the embedders, the final layer, the loss and
 * the unit-range passes; dit_model.c: the model interface). Nothing outside models/ includes
 * it.
 *
 * Tensor parallelism (Megatron): each tp rank holds n_head / tp heads of q|k|v (a column-
 * parallel qkv), the matching columns of proj (row-parallel), 4C / tp rows of fc1 and columns
 * of fc2; the residual rows, the norms, the adaLN modulations, the embedders and the final
 * layer are replicated. Entering a column-parallel matmul is the COPY region (identity
 * forward, all-reduce of the input gradient), leaving a row-parallel one the REDUCE region
 * (all-reduce forward); the row-parallel biases are added once, after it.
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
#include "nn/linear.h"

/* A block's weights (borrowed views). The norms have no weights of their own: adaLN's
 * (1 + scale, shift) of the clip are the LayerNorm's affine parameters. */
typedef struct dt_dit_block {
    dt_linear ada;       /* adaLN_modulation [6C, C] on silu(c) */
    dt_linear qkv, proj; /* [3C, C], [C, C] */
    dt_linear fc1, fc2;  /* [4C, C], [C, 4C] */
} dt_dit_block;

/* Saved by a block's forward for its backward, per slot (Nr rows here, widths C, 3C, 4C and
 * NH of the attention and MLP this tp rank's: Ct, 3Ct, Ft, NHt; "attention order":
 * the kernel's rows, see dit_fwd.c; a field the slot does not keep under activation
 * checkpointing is NULL and lives in the model's shared set). */
typedef struct dt_dit_acts {
    float *mod;              /* [B, 6C] shift1 scale1 gate1 shift2 scale2 gate2 */
    float *aff;              /* [B, 2, 2, C] per norm: (1 + scale, shift) as LN affine */
    float *mean1, *rstd1;    /* [Nr] */
    float *m1;               /* [Nr, C] modulated norm output (attention input) */
    float *qkv;              /* [Nr, 3C] elements, attention order and layout */
    float *y, *lse;          /* [Nr, C] elements attention output, [Nr NH] elements */
    float *a;                /* [Nr, C] proj output (before the gate) */
    float *x2;               /* [Nr, C] residual after the attention branch */
    float *mean2, *rstd2;    /* [Nr] */
    float *m2;               /* [Nr, C] */
    float *h;                /* [Nr, 4C] fc1 output (before GELU) */
    float *f;                /* [Nr, C] fc2 output (before the gate) */
} dt_dit_acts;

/* What one micro-batch slot keeps outside its blocks. */
typedef struct dt_dit_slot {
    float *res;      /* [n_pos][pos_stride]: residual rows [Nr, C], then silu(c) [B, C] */
    float *dres;     /* [pos_stride]: d residual [Nr, C], then d silu(c) [B, C] */
    float *sc;       /* [B, C] silu(c) the slot's blocks read */
    /* unit 0 */
    float *patches;  /* [Nr, P] */
    float *tfreq;    /* [B, FREQ] */
    float *th, *ts;  /* [B, C] t_fc1 output, its silu */
    float *c;        /* [B, C] conditioning */
    int32_t *labels; /* [B] */
    /* final unit */
    float *modf, *afff;   /* [B, 2C] shift, scale; [B, 2, C] its LN affine */
    float *meanf, *rstdf; /* [Nr] */
    float *mf;            /* [Nr, C] */
    float *dtok;          /* [Nr, P] the loss gradient of the final linear's output */
} dt_dit_slot;

struct dt_dit {
    dt_dit_config cfg;
    int B, S, P, C, NH, F, Tt, Th, Tw;
    int Nr;          /* rows of the largest micro-batch on this sp rank */
    int Ct, NHt, Ft; /* this tp rank's attention width C / tp, heads, MLP width 4C / tp */
    bool training;
    dt_mem *mem;     /* borrowed */
    dt_gemm *gemm;
    dt_nn_ctx ctx;
    dt_comm *sp;     /* borrowed, or own_sp */
    dt_comm *own_sp; /* a size-1 comm when the caller gave none */
    dt_comm *tp;     /* borrowed, or own_tp: heads and MLP columns split over it */
    dt_comm *own_tp; /* a size-1 comm when the caller gave none */
    dt_comm *pp;     /* borrowed; NULL: no pipeline */

    /* tables: the single process's (files) and this rank's (its units, packed) */
    dt_param *full, *params;
    int n_full_params, n_params, cap_params;
    int64_t n_full, n_total;
    int *local_full;             /* [n_params] full index of each local tensor */
    int n_embed_params, per_layer;
    int *unit_first;             /* [L + 3] first full tensor of each global unit, then end */
    int n_units;                 /* held here */
    int *unit_global, *unit_local, *unit_param; /* [n_units], [L + 2] (-1), [n_units + 1] */
    float **unit_w, **unit_g;    /* [n_units] current storage of each unit */
    dt_bf16 **unit_lp;
    float *w, *g;                /* own arenas (NULL: external) */
    dt_bf16 *w_lp;               /* 16-bit copy (16-bit matmuls, own weights) */

    /* views */
    dt_linear x_emb, t_fc1, t_fc2, final_ada, final_lin;
    float *y_table, *dy_table; /* [n_classes + 1, C] or NULL */
    dt_dit_block *blocks;      /* [L] (held ones wired) */

    /* slots and residual positions: position l = input of block l (L: the final input) */
    int n_slots, n_pos;
    int *pos_index;            /* [L + 1] -> index among the positions kept, -1 */
    int64_t pos_stride;        /* Nr C + B C floats, rounded up to 16 */
    dt_model_hooks hooks;
    float *pos;                /* [S, C] fixed 3-D sinusoidal positions */
    dt_dit_slot *slots;        /* [n_slots] */
    dt_dit_acts *acts;         /* [n_slots][L] */
    /* activation checkpointing: what slots do not keep lives in one shared set */
    dt_ac_mode ac;
    int ac_every;
    dt_dit_acts shared;
    float *ac_out;             /* [Nr, C] a rerun block's output (discarded) */
    size_t *saved_bytes;       /* [n_slots][L] bytes a block's saved set holds, for the */
    bool *saved_live;          /* accountant's timeline, and whether it is in use */
    float *out;                /* [B, clip] unpatchified output (holder of the final unit) */

    /* transients, shared by the blocks (the d* ones NULL when not training) */
    float *qkv_rows, *packed, *qkvh;  /* [Nr, 3Ct] each (packed, qkvh: sp > 1) */
    float *att_rows, *atth, *gel;     /* [Nr, Ct], [Nr, Ct], [Nr, Ft] */
    float *part;                      /* [Nr, C] a row-parallel matmul's partial sum (tp > 1) */
    float *tok_out, *tok_tgt;         /* [Nr, P] final linear output, the target's patches */
    float *work;                      /* region ops' scratch (sp > 1 or tp > 1) */
    dt_bf16 *x_lp, *dy_lp;            /* 16-bit matmul operands (16-bit modes) */
    float *dA, *dB;                   /* [Nr, C] branch gradients */
    float *dg, *dh;                   /* [Nr, Ft] */
    float *dqkv, *dqkvp, *dattp;      /* [Nr, 3Ct], [Nr, 3Ct], [Nr, Ct] */
    float *dmod, *dc, *dts, *dth;     /* [B, 6C], [B, C] x 3 */
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

/* Rows of a micro-batch of B clips on this sp rank, and where they start. */
static inline int dt_dit_rows(const dt_dit *d, int B) { return B * d->S / d->sp->size; }
static inline int64_t dt_dit_row0(const dt_dit *d, int B) {
    return (int64_t)d->sp->rank * dt_dit_rows(d, B);
}

/* dit_tables.c: the full table (DiT / Open-Sora names) and this rank's (held units). */
dt_status dt_dit_build_tables(dt_dit *d, const bool *held);

/* dit_fwd.c: the slots' per-block saved sets and the shared recompute set, carved into the
 * "dit.activations" arena by the checkpointing mode (sets saved_bytes). */
void dt_dit_carve_block_acts(dt_dit *d, dt_dit_carver *cv);
/* dit_fwd.c: block l of a slot (x: its input rows, out: its output rows; sc: silu(c)
 * [B, C]), by the checkpointing mode; backward turns dres (d out) into d x and accumulates
 * d silu(c) into dsc. */
dt_status dt_dit_block_forward(dt_dit *d, int slot, int l, const float *x, const float *sc,
                               int B, float *out);
dt_status dt_dit_block_backward(dt_dit *d, int slot, int l, const float *x, const float *sc,
                                int B, float *dres, float *dsc);
/* dit_fwd.c: the per-clip pieces the final layer shares with the blocks */
void dt_dit_make_affine(float *aff, int astride, const float *mod, int mstride, int shift_off,
                        int scale_off, int B, int C);
void dt_dit_ln_rows(const dt_dit *d, float *y, float *mean, float *rstd, const float *x,
                    const float *aff, int stride, int B);
void dt_dit_ln_rows_backward(const dt_dit *d, float *dx, float *dmod, int mstride,
                             int scale_off, int shift_off, const float *dy, const float *x,
                             const float *aff, int stride, const float *mean,
                             const float *rstd, int B);
/* a linear's backward reading x (fp32, or its 16-bit copy rebuilt into d->x_lp) */
dt_status dt_dit_linear_backward(dt_dit *d, const dt_linear *l, const float *x,
                                 const float *dy, int N, float *dx);
dt_status dt_dit_linear_forward(dt_dit *d, const dt_linear *l, const float *x, int N,
                                float *y);

#endif
