/* The inside of a dt_dit, shared by its files (dit.c: tables, arenas, views; dit_fwd.c:
 * forward and backward). Nothing outside models/ includes it. */
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

/* Saved by a block's forward for its backward (N = B S rows, S tokens per clip). */
typedef struct dt_dit_acts {
    float *mod;              /* [B, 6C] shift1 scale1 gate1 shift2 scale2 gate2 */
    float *aff;              /* [B, 2, 2, C] per norm: (1 + scale, shift) as LN affine */
    float *mean1, *rstd1;    /* [N] */
    float *m1;               /* [N, C] modulated norm output (attention input) */
    float *qkv;              /* [N, 3C] in attention order (temporal: permuted) */
    float *y, *lse;          /* [N, C] attention output in attention order, [N NH] */
    float *a;                /* [N, C] proj output (before the gate) */
    float *x2;               /* [N, C] residual after the attention branch */
    float *mean2, *rstd2;    /* [N] */
    float *m2;               /* [N, C] */
    float *h;                /* [N, 4C] fc1 output (before GELU) */
    float *f;                /* [N, C] fc2 output (before the gate) */
} dt_dit_acts;

struct dt_dit {
    dt_dit_config cfg;
    int B, S, P, C, NH, F, Tt, Th, Tw;
    bool training;
    dt_mem *mem; /* borrowed */
    dt_gemm *gemm;
    dt_nn_ctx ctx;

    dt_param *params;
    int n_params, cap_params, n_embed_params, per_layer;
    int64_t n_total;
    int *unit_first; /* [L + 3] first tensor of each global unit, then n_params */
    float *w, *g;

    /* views */
    dt_linear x_emb, t_fc1, t_fc2, final_ada, final_lin;
    float *y_table, *dy_table; /* [n_classes + 1, C] or NULL */
    dt_dit_block *blocks;

    /* activations */
    float *pos;                  /* [S, C] fixed 3-D sinusoidal positions */
    float *patches;              /* [N, P] the input, patchified */
    float *tfreq, *th, *ts;      /* [B, FREQ], [B, C] fc1 out, [B, C] silu */
    float *c, *sc;               /* [B, C] conditioning, silu(c) */
    float *res;                  /* [L + 1][N, C] input of each block, then the final input */
    dt_dit_acts *acts;           /* [L] */
    float *modf, *afff;          /* [B, 2C] final shift, scale; [B, 2, C] its LN affine */
    float *meanf, *rstdf, *mf;   /* [N], [N], [N, C] */
    float *tok_out;              /* [N, P] final linear output */
    float *out;                  /* [B, clip] unpatchified */
    int32_t *labels;             /* [B] the forward's labels (null class when none given) */

    /* scratch, shared by the blocks (the d* ones NULL when not training) */
    float *qkv_rows, *att_rows, *gel; /* [N, 3C], [N, C], [N, 4C] */
    float *dtok;                      /* [N, P] gradient of the final linear's output */
    float *dres, *dA, *dB;            /* [N, C] residual gradient; two branch gradients */
    float *dg, *dh;                   /* [N, 4C] */
    float *dqkv, *dqkvp, *dattp;      /* [N, 3C] row / attention order, [N, C] */
    float *dmod, *dsc, *dc, *dts, *dth; /* [B, 6C], [B, C] x 4 */
    void *act_arena, *tmp_arena;
};

#endif
