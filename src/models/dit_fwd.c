/* One DiT block's forward and hand-written backward (see dit.h), from dtrain's layers and
 * kernels: dt_linear for every matmul, dt_layernorm for the norms, the flash attention
 * kernel, tanh-GELU, and the Ulysses all-to-all region op; and what a block keeps for its
 * backward under activation checkpointing.
 *
 * adaLN-Zero (DiT section 3.2): each block's norms have no weights; per clip b the block
 * regresses (shift, scale, gate) x 2 from silu(c_b) and computes
 *     x2  = x  + gate1_b * attn(LN(x) (1 + scale1_b) + shift1_b)
 *     out = x2 + gate2_b * mlp(LN(x2) (1 + scale2_b) + shift2_b).
 * LN(x)(1 + scale) + shift IS a LayerNorm whose affine weight is 1 + scale_b and bias shift_b,
 * so dt_layernorm_forward/backward over one clip's rows does the modulation and its gradient
 * (the kernel's dw, db are d scale_b and d shift_b). Zero modulation weights give gate = 0: the
 * block is the identity at initialisation. An sp rank's rows may start or end inside a clip:
 * the per-clip pieces run over each clip's segment of them, and the modulation gradients of
 * a clip split over ranks are partial sums (summed over dp x sp with the weight gradients
 * they feed, as every gradient here).
 *
 * Attention layout. Tokens are ordered (frame, row, column) per clip. Full attention runs B
 * sequences of S tokens; spatial attention (even blocks of spatial_temporal) B Tt sequences
 * of Th Tw tokens; temporal attention (odd blocks) B Th Tw sequences of Tt tokens, after q|k|v
 * rows are permuted (b, t, s) -> (b, s, t) (and the output back), so one kernel serves all
 * three as batches of shorter sequences. Under Ulysses (sp > 1) full and temporal attention
 * need whole sequences: q|k|v rows are regrouped by sp rank and the all-to-all hands each
 * rank all N rows of its n_head / sp heads ("attention order" is then that layout); the
 * output goes back to rows by the inverse all-to-all. Spatial attention stays local: an sp
 * rank holds whole frames (dt_dit_check_split), so its rows are whole sequences already.
 *
 * Tensor parallelism (dit_impl.h): q|k|v, the attention and the MLP's hidden width are this
 * tp rank's heads and columns; proj and fc2 leave the region through an all-reduce.
 *
 * Split backward (zero-bubble schedules): the backward makes the input gradients and the
 * cheap bias gradients and keeps the five matmuls' output gradients per slot; the weight
 * pass makes their weight gradients later.
 *
 * Activation checkpointing (opts ac, block l when l % ac_every == 0): "full" keeps nothing
 * but the block's input (a residual position kept anyway) and reruns the block's forward
 * into the model's shared set right before its backward; "selective" keeps all but the
 * attention output and its log-sum-exp, rerun from the saved q|k|v. A field a slot does not
 * keep is NULL there and lives in the shared set. The reruns are the forward's own kernels
 * and collectives on the same inputs, so gradients are the same bits as without. With int8
 * storage (act_compress) a slot keeps its large tensors (m1, q|k|v, y, a, x2, m2, h, f; those
 * its mode keeps) as int8 rows with one scale each: the forward writes them into the shared
 * set and quantises them when the block is done; they are restored there before the
 * backward and the weight pass (which then see the stored values, in every layout), so
 * gradients approximate those of fp32 storage.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "kernels/reduce.h"
#include "models/dit_impl.h"
#include "nn/region.h"

#define DIT_NORM_EPS 1e-6f

typedef enum { ATTN_FULL, ATTN_SPATIAL, ATTN_TEMPORAL } attn_kind;

static attn_kind block_kind(const dt_dit *d, int l) {
    if (d->cfg.attn == DT_DIT_ATTN_FULL)
        return ATTN_FULL;
    return l % 2 == 0 ? ATTN_SPATIAL : ATTN_TEMPORAL;
}

/* Whether block kind k needs the all-to-all (whole sequences spread over sp ranks). */
static bool uses_a2a(const dt_dit *d, attn_kind k) {
    return d->par.sp->size > 1 && k != ATTN_SPATIAL;
}

/* The kernel's view: rows of q|k|v (all N of a micro-batch after the all-to-all, else this
 * rank's Nt), cut into sequences of the kind's length. */
static dt_attn_shape attn_shape(const dt_dit *d, attn_kind k, int B) {
    int sp = uses_a2a(d, k) ? d->par.sp->size : 1;
    int rows = sp > 1 ? B * d->S : dt_dit_rows_tp(d, B);
    int T = k == ATTN_FULL ? d->S : k == ATTN_SPATIAL ? d->Th * d->Tw : d->Tt;
    int hs = d->C / d->NH;
    return (dt_attn_shape){.B = rows / T,
                           .T = T,
                           .NH = d->NHt / sp,
                           .NKV = d->NHt / sp,
                           .hs = hs,
                           .q_stride = 3 * d->Ct / sp,
                           .kv_stride = 3 * d->Ct / sp,
                           .scale = 1.0f / sqrtf((float)hs),
                           .bf16 = d->ctx.mm_type == DT_BF16};
}

/* Full and temporal attention run around the ring (their sequences span its ranks; without
 * one that is the kernel itself); spatial attention stays local, every ring rank holding
 * whole frames. */
static const dt_ring *ring_of(const dt_dit *d, attn_kind k) {
    static const dt_ring local = {0};
    return k == ATTN_SPATIAL ? &local : &d->par.ring;
}

/* The attention of block kind k on a->qkv (attention order): a->y and a->lse. */
static dt_status attend(dt_dit *d, attn_kind k, int B, const dt_dit_acts *a) {
    dt_attn_shape s = attn_shape(d, k, B);
    int64_t q = (int64_t)s.NH * s.hs;
    return dt_ring_attention_forward(ring_of(d, k), &s, a->y, a->lse, a->qkv, a->qkv + q,
                                     a->qkv + 2 * q, d->work);
}

int64_t dt_dit_ring_work_count(const dt_dit *d) {
    /* the one kind that goes around the ring: full, or temporal under spatial_temporal */
    attn_kind k = d->cfg.attn == DT_DIT_ATTN_FULL ? ATTN_FULL : ATTN_TEMPORAL;
    dt_attn_shape s = attn_shape(d, k, d->B);
    return dt_ring_work_count(ring_of(d, k), &s);
}

/* Rows of `width` floats between token order (b, t, s) and temporal order (b, s, t), s over
 * the Th Tw positions of a frame, all B clips. to_temporal: dst[(b, s, t)] = src[(b, t, s)]. */
static void permute_rows(const dt_dit *d, float *dst, const float *src, int64_t width, int B,
                         bool to_temporal) {
    int Tt = d->Tt, hw = d->Th * d->Tw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tt; t++)
            for (int s = 0; s < hw; s++) {
                size_t r = ((size_t)b * Tt + t) * hw + s, p = ((size_t)b * hw + s) * Tt + t;
                size_t to = to_temporal ? p : r, from = to_temporal ? r : p;
                memcpy(dst + to * width, src + from * width, (size_t)width * sizeof *dst);
            }
}

/* Per row, this tp rank's q|k|v heads in natural order [q Ct][k Ct][v Ct] <-> grouped by sp
 * rank [q Ct/sp, k Ct/sp, v Ct/sp] x sp, so the all-to-all hands sp rank g its heads' group. */
static void regroup(const dt_dit *d, float *dst, const float *src, int rows, bool to_groups) {
    int sp = d->par.sp->size;
    int64_t C = d->Ct, W = 3 * C, qa = C / sp;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int g = 0; g < sp; g++)
            for (int k = 0; k < 3; k++) {
                int64_t nat = i * W + k * C + g * qa, grp = i * W + g * 3 * qa + k * qa;
                memcpy(dst + (to_groups ? grp : nat), src + (to_groups ? nat : grp),
                       (size_t)qa * sizeof *dst);
            }
}

/* ---- per-clip pieces over this rank's rows ------------------------------------------------- */

/* The end of clip b's rows within this rank's rows, which end at `rows_end` (a rank's rows
 * may start or end inside a clip). */
static int64_t clip_piece_end(const dt_dit *d, int b, int64_t rows_end) {
    int64_t clip_end = (int64_t)(b + 1) * d->S;
    return clip_end < rows_end ? clip_end : rows_end;
}

void dt_dit_ln_rows(const dt_dit *d, float *y, float *mean, float *rstd, const float *x,
                    const float *aff, int stride, int B) {
    size_t C = (size_t)d->C;
    int64_t r0 = dt_dit_row0(d, B), Nr = dt_dit_rows(d, B);
    for (int64_t r = r0; r < r0 + Nr;) {
        int b = (int)(r / d->S);
        int64_t end = clip_piece_end(d, b, r0 + Nr);
        size_t lo = (size_t)(r - r0);
        dt_layernorm_forward(y + lo * C, mean + lo, rstd + lo, x + lo * C, aff + (size_t)b * stride,
                             aff + (size_t)b * stride + C, (int)(end - r), (int)C, DIT_NORM_EPS);
        r = end;
    }
}

/* The adjoint, accumulating into dx, d scale_b (dmod + b*mstride + scale_off) and d shift_b. */
void dt_dit_ln_rows_backward(const dt_dit *d, float *dx, float *dmod, int mstride, int scale_off,
                             int shift_off, const float *dy, const float *x, const float *aff,
                             int stride, const float *mean, const float *rstd, int B) {
    size_t C = (size_t)d->C;
    int64_t r0 = dt_dit_row0(d, B), Nr = dt_dit_rows(d, B);
    for (int64_t r = r0; r < r0 + Nr;) {
        int b = (int)(r / d->S);
        int64_t end = clip_piece_end(d, b, r0 + Nr);
        size_t lo = (size_t)(r - r0);
        dt_layernorm_backward(dx + lo * C, dmod + (size_t)b * mstride + scale_off,
                              dmod + (size_t)b * mstride + shift_off, dy + lo * C, x + lo * C,
                              aff + (size_t)b * stride, mean + lo, rstd + lo, (int)(end - r),
                              (int)C);
        r = end;
    }
}

/* (1 + scale, shift) of one norm as its LN affine: aff[b] = [1 + mod[b, scale], mod[b, shift]]. */
void dt_dit_make_affine(float *aff, int astride, const float *mod, int mstride, int shift_off,
                        int scale_off, int B, int C) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < C; j++) {
            aff[(size_t)b * astride + j] = 1.0f + mod[(size_t)b * mstride + scale_off + j];
            aff[(size_t)b * astride + C + j] = mod[(size_t)b * mstride + shift_off + j];
        }
}

/* out = x + gate_b * v per row (gate = mod[b * 6C + off]); out may alias x. */
static void gate_add(const dt_dit *d, float *out, const float *x, const float *v, const float *mod,
                     int off, int B) {
    int S = d->S, C = d->C;
    int64_t r0 = dt_dit_row0(d, B), Nr = dt_dit_rows(d, B);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < Nr; n++) {
        const float *g = mod + ((r0 + n) / S) * 6 * C + off;
        for (int j = 0; j < C; j++)
            out[n * C + j] = x[n * C + j] + g[j] * v[n * C + j];
    }
}

/* Adjoint of gate_add's branch: dv = gate_b * dy (overwritten), dgate_b += sum_rows dy * v. */
static void gate_backward(const dt_dit *d, float *dv, float *dmod, const float *dy, const float *v,
                          const float *mod, int off, int B) {
    int S = d->S, C = d->C;
    int64_t r0 = dt_dit_row0(d, B), Nr = dt_dit_rows(d, B);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < Nr; n++) {
        const float *g = mod + ((r0 + n) / S) * 6 * C + off;
        for (int j = 0; j < C; j++)
            dv[n * C + j] = g[j] * dy[n * C + j];
    }
    for (int64_t r = r0; r < r0 + Nr;) {
        int b = (int)(r / S);
        int64_t end = (int64_t)(b + 1) * S < r0 + Nr ? (int64_t)(b + 1) * S : r0 + Nr;
        int64_t lo = r - r0, hi = end - r0;
#pragma omp parallel for schedule(static)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int64_t n = lo; n < hi; n++)
                s += (double)dy[n * C + j] * v[n * C + j];
            dmod[(size_t)b * 6 * C + off + j] += (float)s;
        }
        r = end;
    }
}

/* ---- attention between row order and attention order ---------------------------------------- */

/* q|k|v rows [Nt, 3Ct] (rows, which may be scratch) -> a->qkv in attention order. */
static dt_status qkv_to_attention(dt_dit *d, attn_kind k, int B, float *rows, float *qkv) {
    int Nt = dt_dit_rows_tp(d, B), sp = d->par.sp->size;
    if (!uses_a2a(d, k)) {
        if (k == ATTN_TEMPORAL)
            permute_rows(d, qkv, rows, 3 * (int64_t)d->Ct, B, true);
        return DT_OK; /* full and spatial: the linear wrote a->qkv itself */
    }
    regroup(d, d->packed, rows, Nt, true);
    float *h = k == ATTN_TEMPORAL ? d->qkvh : qkv;
    DT_TRY(dt_region_op_get(DT_REGION_KIND_ALL_TO_ALL)
               ->forward(d->par.sp, &(dt_region_shape){(int64_t)B * d->S, 3 * d->Ct, sp}, d->packed,
                         h, d->work));
    if (k == ATTN_TEMPORAL)
        permute_rows(d, qkv, h, 3 * (int64_t)d->Ct / sp, B, true);
    return DT_OK;
}

/* The attention output y (attention order) as rows [Nt, Ct]: y itself, or built in scratch. */
static dt_status attention_to_rows(dt_dit *d, attn_kind k, int B, const float *y,
                                   const float **rows) {
    bool a2a = uses_a2a(d, k);
    int64_t A = a2a ? d->Ct / d->par.sp->size : d->Ct;
    *rows = y;
    if (k == ATTN_TEMPORAL) {
        permute_rows(d, d->atth, y, A, B, false);
        *rows = d->atth;
    }
    if (!a2a)
        return DT_OK;
    /* heads -> rows is the all-to-all's adjoint, which accumulates */
    dt_zero_f32(d->att_rows, (int64_t)dt_dit_rows_tp(d, B) * d->Ct);
    DT_TRY(dt_region_op_get(DT_REGION_KIND_ALL_TO_ALL)
               ->backward(d->par.sp, &(dt_region_shape){(int64_t)B * d->S, d->Ct, d->NHt}, *rows,
                          d->att_rows, d->work));
    *rows = d->att_rows;
    return DT_OK;
}

/* d rows [Nt, Ct] of the attention output -> its gradient in attention order. */
static dt_status drows_to_attention(dt_dit *d, attn_kind k, int B, const float *drows,
                                    const float **datt) {
    bool a2a = uses_a2a(d, k);
    int64_t A = a2a ? d->Ct / d->par.sp->size : d->Ct;
    *datt = drows;
    if (a2a) {
        DT_TRY(dt_region_op_get(DT_REGION_KIND_ALL_TO_ALL)
                   ->forward(d->par.sp, &(dt_region_shape){(int64_t)B * d->S, d->Ct, d->NHt}, drows,
                             d->dattp, d->work));
        *datt = d->dattp;
    }
    if (k == ATTN_TEMPORAL) {
        float *dst = a2a ? d->atth : d->dattp;
        permute_rows(d, dst, *datt, A, B, true);
        *datt = dst;
    }
    return DT_OK;
}

/* d q|k|v in attention order (d->dqkvp) -> rows [Nt, 3Ct]. */
static dt_status dqkv_to_rows(dt_dit *d, attn_kind k, int B, const float **drows) {
    int sp = d->par.sp->size;
    *drows = d->dqkvp;
    if (!uses_a2a(d, k)) {
        if (k == ATTN_TEMPORAL) {
            permute_rows(d, d->dqkv, d->dqkvp, 3 * (int64_t)d->Ct, B, false);
            *drows = d->dqkv;
        }
        return DT_OK;
    }
    const float *src = d->dqkvp;
    if (k == ATTN_TEMPORAL) {
        permute_rows(d, d->qkvh, d->dqkvp, 3 * (int64_t)d->Ct / sp, B, false);
        src = d->qkvh;
    }
    int Nt = dt_dit_rows_tp(d, B);
    dt_zero_f32(d->packed, (int64_t)Nt * 3 * d->Ct);
    DT_TRY(dt_region_op_get(DT_REGION_KIND_ALL_TO_ALL)
               ->backward(d->par.sp, &(dt_region_shape){(int64_t)B * d->S, 3 * d->Ct, sp}, src,
                          d->packed, d->work));
    regroup(d, d->dqkv, d->packed, Nt, false);
    *drows = d->dqkv;
    return DT_OK;
}

/* ---- what a block keeps --------------------------------------------------------------------- */

enum {
    F_MOD = 1 << 0, /* mod, aff */
    F_LN = 1 << 1,  /* mean1, rstd1, mean2, rstd2 */
    F_M1 = 1 << 2,
    F_QKV = 1 << 3,
    F_Y = 1 << 4,
    F_LSE = 1 << 5,
    F_A = 1 << 6,
    F_X2 = 1 << 7,
    F_M2 = 1 << 8,
    F_H = 1 << 9,
    F_F = 1 << 10,
    F_XQ = 1 << 11,  /* cross-attention (text): xq */
    F_XKV = 1 << 12, /* xk, xv */
    F_XO = 1 << 13,  /* xo, xlse */
    F_X3 = 1 << 14,
    F_ALL = (1 << 15) - 1,
    F_TEXT = F_XQ | F_XKV | F_XO | F_X3,
    F_ATTN_OUT = F_Y | F_LSE | F_XO, /* what selective checkpointing does not keep */
};

typedef enum keep { KEEP_ALL, KEEP_NO_ATTN, KEEP_INPUT } keep;

static keep keep_of(const dt_dit *d, int l) {
    if (d->ac == DT_AC_NONE || l % d->ac_every)
        return KEEP_ALL;
    return d->ac == DT_AC_FULL ? KEEP_INPUT : KEEP_NO_ATTN;
}

/* the fields a model has: the cross-attention's with text only */
static unsigned model_fields(const dt_dit *d) {
    return d->Lt > 0 ? (unsigned)F_ALL : (unsigned)F_ALL & ~(unsigned)F_TEXT;
}

static unsigned kept_fields(const dt_dit *d, int l) {
    switch (keep_of(d, l)) {
    case KEEP_INPUT:
        return 0;
    case KEEP_NO_ATTN:
        return model_fields(d) & ~(unsigned)F_ATTN_OUT;
    default:
        return model_fields(d);
    }
}

static bool holds_kept(const dt_dit *d, keep k) {
    for (int l = 0; l < d->cfg.n_layer; l++)
        if (dt_dit_holds(d, l + 1) && keep_of(d, l) == k)
            return true;
    return false;
}

/* The tensors int8 storage keeps as int8 rows (in dt_dit_q8 order), their fp32 field, and
 * their shape for a micro-batch: residual rows x C, or tp-region rows x this rank's width
 * (a row of the attention order's element count, whatever its layout). */
enum { W_C, W_3CT, W_CT, W_FT };
static const struct {
    unsigned bit;
    size_t field; /* offset in dt_dit_acts */
    int width;
} STORED[DT_DIT_N_Q8] = {
    {F_M1, offsetof(dt_dit_acts, m1), W_C}, {F_QKV, offsetof(dt_dit_acts, qkv), W_3CT},
    {F_Y, offsetof(dt_dit_acts, y), W_CT},  {F_A, offsetof(dt_dit_acts, a), W_C},
    {F_X2, offsetof(dt_dit_acts, x2), W_C}, {F_M2, offsetof(dt_dit_acts, m2), W_C},
    {F_H, offsetof(dt_dit_acts, h), W_FT},  {F_F, offsetof(dt_dit_acts, f), W_C},
};
enum { F_INT8 = F_M1 | F_QKV | F_Y | F_A | F_X2 | F_M2 | F_H | F_F };

static void stored_shape(const dt_dit *d, int i, int B, int64_t *rows, int64_t *cols) {
    bool tp_rows = STORED[i].width != W_C;
    *rows = tp_rows ? dt_dit_rows_tp(d, B) : dt_dit_rows(d, B);
    *cols = STORED[i].width == W_C     ? d->C
            : STORED[i].width == W_3CT ? 3 * (int64_t)d->Ct
            : STORED[i].width == W_CT  ? d->Ct
                                       : d->Ft;
}

static float *field_of(const dt_dit_acts *a, int i) {
    float *p;
    memcpy(&p, (const char *)a + STORED[i].field, sizeof p);
    return p;
}

/* the fields a slot keeps in fp32 (the rest: int8, or the shared set) */
static unsigned slot_fields(const dt_dit *d, int l) {
    return kept_fields(d, l) & (d->compress ? ~(unsigned)F_INT8 : model_fields(d));
}

static dt_dit_q8 *q8_of(const dt_dit *d, int slot, int l) {
    return &d->q8[((size_t)slot * d->cfg.n_layer + l) * DT_DIT_N_Q8];
}

/* The int8-kept tensors of view a, to (store) or from the slot's payloads. */
static void int8_move(dt_dit *d, int slot, int l, int B, const dt_dit_acts *a, bool store) {
    dt_dit_q8 *q = q8_of(d, slot, l);
    for (int i = 0; i < DT_DIT_N_Q8; i++) {
        if (!q[i].q)
            continue;
        int64_t rows, cols;
        stored_shape(d, i, B, &rows, &cols);
        if (store)
            dt_quant_int8_rows(q[i].q, q[i].scale, field_of(a, i), rows, cols);
        else
            dt_dequant_int8_rows(field_of(a, i), q[i].q, q[i].scale, rows, cols);
    }
}

/* Carve fields f (sized for the largest micro-batch), NULL for the rest. */
static void carve_fields(dt_dit *d, dt_dit_carver *cv, unsigned f, dt_dit_acts *a) {
    size_t B = (size_t)d->B, Nr = (size_t)d->Nr, Nt = (size_t)d->Nt, C = (size_t)d->C;
    size_t F = (size_t)d->Ft, Ct = (size_t)d->Ct, NH = (size_t)d->NHt, f4 = sizeof(float);
    size_t T = (size_t)d->B * d->Lt;
#define PIECE(bit, n) ((f & (bit)) ? (float *)dt_dit_carve(cv, (n)*f4) : NULL)
    a->mod = PIECE(F_MOD, B * 6 * C);
    a->aff = PIECE(F_MOD, B * 4 * C);
    a->mean1 = PIECE(F_LN, Nr);
    a->rstd1 = PIECE(F_LN, Nr);
    a->m1 = PIECE(F_M1, Nr * C);
    a->qkv = PIECE(F_QKV, Nt * 3 * Ct);
    a->y = PIECE(F_Y, Nt * Ct);
    a->lse = PIECE(F_LSE, Nt * NH);
    a->a = PIECE(F_A, Nr * C);
    a->x2 = PIECE(F_X2, Nr * C);
    a->xq = PIECE(F_XQ, Nt * Ct);
    a->xk = PIECE(F_XKV, T * Ct);
    a->xv = PIECE(F_XKV, T * Ct);
    a->xo = PIECE(F_XO, Nt * Ct);
    a->xlse = PIECE(F_XO, Nt * NH);
    a->x3 = PIECE(F_X3, Nr * C);
    a->mean2 = PIECE(F_LN, Nr);
    a->rstd2 = PIECE(F_LN, Nr);
    a->m2 = PIECE(F_M2, Nr * C);
    a->h = PIECE(F_H, Nt * F);
    a->f = PIECE(F_F, Nr * C);
#undef PIECE
}

void dt_dit_carve_block_acts(dt_dit *d, dt_dit_carver *cv) {
    int L = d->cfg.n_layer;
    for (int s = 0; s < d->n_slots; s++) {
        size_t start = cv->used, end = start; /* each chunk's sets from the slot's start */
        for (int l = 0; l < L; l++) {
            if (!dt_dit_holds(d, l + 1))
                continue;
            if (dt_dit_starts_chunk(d, l + 1))
                cv->used = start;
            size_t at = cv->used;
            carve_fields(d, cv, slot_fields(d, l), &d->acts[(size_t)s * L + l]);
            for (int i = 0; d->compress && i < DT_DIT_N_Q8; i++) {
                if (!(kept_fields(d, l) & STORED[i].bit))
                    continue;
                int64_t rows, cols;
                stored_shape(d, i, d->B, &rows, &cols);
                dt_dit_q8 *q = &q8_of(d, s, l)[i];
                q->q = dt_dit_carve(cv, (size_t)(rows * cols));
                q->scale = dt_dit_carve(cv, (size_t)rows * sizeof(float));
            }
            if (d->wgrad) { /* the output gradients the weight pass reads */
                size_t B = (size_t)d->B, Nt = (size_t)d->Nt, C = (size_t)d->C, f4 = 4;
                dt_dit_wgrad *w = &d->wgrad[(size_t)s * L + l];
                w->dmod = dt_dit_carve(cv, B * 6 * C * f4);
                w->dqkv = dt_dit_carve(cv, Nt * 3 * (size_t)d->Ct * f4);
                w->dproj = dt_dit_carve(cv, Nt * C * f4);
                w->dh = dt_dit_carve(cv, Nt * (size_t)d->Ft * f4);
                w->dfc2 = dt_dit_carve(cv, Nt * C * f4);
                w->dxq = d->Lt ? dt_dit_carve(cv, Nt * (size_t)d->Ct * f4) : NULL;
                w->dxproj = d->Lt ? dt_dit_carve(cv, Nt * C * f4) : NULL;
            }
            /* in use from the block's forward to its backward: its set and its input */
            d->saved_bytes[(size_t)s * L + l] =
                cv->used - at + (size_t)d->Nr * d->C * sizeof(float);
            end = cv->used > end ? cv->used : end;
        }
        cv->used = end;
    }
    /* the shared set: everything a full rerun writes; the attention output a selective
     * rerun writes; the int8-kept tensors restored (and written by their forward) */
    unsigned shared = holds_kept(d, KEEP_INPUT)     ? model_fields(d)
                      : holds_kept(d, KEEP_NO_ATTN) ? (unsigned)F_ATTN_OUT
                                                    : 0u;
    if (d->compress && (holds_kept(d, KEEP_ALL) || holds_kept(d, KEEP_NO_ATTN)))
        shared |= F_INT8;
    carve_fields(d, cv, shared & model_fields(d), &d->shared);
    d->ac_out =
        holds_kept(d, KEEP_INPUT) ? dt_dit_carve(cv, (size_t)d->Nr * d->C * sizeof(float)) : NULL;
}

/* The slot's own fields, the shared set's for the rest. */
static dt_dit_acts view(const dt_dit *d, int slot, int l) {
    const dt_dit_acts *o = &d->acts[(size_t)slot * d->cfg.n_layer + l], *s = &d->shared;
#define PICK(f) (o->f ? o->f : s->f)
    return (dt_dit_acts){.mod = PICK(mod),
                         .aff = PICK(aff),
                         .mean1 = PICK(mean1),
                         .rstd1 = PICK(rstd1),
                         .m1 = PICK(m1),
                         .qkv = PICK(qkv),
                         .y = PICK(y),
                         .lse = PICK(lse),
                         .a = PICK(a),
                         .x2 = PICK(x2),
                         .xq = PICK(xq),
                         .xk = PICK(xk),
                         .xv = PICK(xv),
                         .xo = PICK(xo),
                         .xlse = PICK(xlse),
                         .x3 = PICK(x3),
                         .mean2 = PICK(mean2),
                         .rstd2 = PICK(rstd2),
                         .m2 = PICK(m2),
                         .h = PICK(h),
                         .f = PICK(f)};
#undef PICK
}

/* ---- one block ---------------------------------------------------------------------------- */

/* The residual the MLP branch reads: after the cross-attention with text, else x2. */
static const float *mlp_input(const dt_dit *d, const dt_dit_acts *a) {
    return d->Lt > 0 ? a->x3 : a->x2;
}

static dt_status block_forward(dt_dit *d, int slot, int l, const dt_dit_acts *a, const float *x,
                               const float *sc, int B, float *out) {
    const dt_dit_block *blk = &d->blocks[l];
    int C = d->C, Nt = dt_dit_rows_tp(d, B);
    attn_kind k = block_kind(d, l);
    const float *in;
    DT_TRY(dt_dit_linear_forward(d, &blk->ada, sc, B, a->mod));
    dt_dit_make_affine(a->aff, 4 * C, a->mod, 6 * C, 0, C, B, C);
    dt_dit_make_affine(a->aff + 2 * C, 4 * C, a->mod, 6 * C, 3 * C, 4 * C, B, C);
    dt_dit_ln_rows(d, a->m1, a->mean1, a->rstd1, x, a->aff, 4 * C, B);
    float *rows = !uses_a2a(d, k) && k != ATTN_TEMPORAL ? a->qkv : d->qkv_rows;
    DT_TRY(dt_dit_enter_rows(d, a->m1, B, &in));
    DT_TRY(dt_dit_linear_forward(d, &blk->qkv, in, Nt, rows));
    DT_TRY(qkv_to_attention(d, k, B, rows, a->qkv));
    DT_TRY(attend(d, k, B, a));
    const float *att;
    DT_TRY(attention_to_rows(d, k, B, a->y, &att));
    DT_TRY(dt_dit_row_forward(d, &blk->proj, att, B, a->a));
    gate_add(d, a->x2, x, a->a, a->mod, 2 * C, B);
    if (d->Lt > 0)
        DT_TRY(dt_dit_cross_forward(d, blk, a, slot, B));
    dt_dit_ln_rows(d, a->m2, a->mean2, a->rstd2, mlp_input(d, a), a->aff + 2 * C, 4 * C, B);
    DT_TRY(dt_dit_enter_rows(d, a->m2, B, &in));
    DT_TRY(dt_dit_linear_forward(d, &blk->fc1, in, Nt, a->h));
    dt_gelu_forward(d->gel, a->h, (int64_t)Nt * d->Ft);
    DT_TRY(dt_dit_row_forward(d, &blk->fc2, d->gel, B, a->f));
    gate_add(d, out, mlp_input(d, a), a->f, a->mod, 5 * C, B);
    return DT_OK;
}

/* dres: [Nr, C], the gradient of the block's output in, of its input x out. Accumulates the
 * block's weight gradients and d silu(c) into dsc; with wg (split backward) the matmuls'
 * weight gradients are left to block_weights, their output gradients kept in wg. */
static dt_status block_backward(dt_dit *d, int slot, int l, const dt_dit_acts *a, const float *x,
                                const float *sc, int B, float *dres, float *dsc, float *dy,
                                dt_dit_wgrad *wg) {
    const dt_dit_block *blk = &d->blocks[l];
    int C = d->C, Nt = dt_dit_rows_tp(d, B);
    size_t NC = (size_t)dt_dit_rows(d, B) * C, NF = (size_t)Nt * d->Ft;
    attn_kind k = block_kind(d, l);
    const float *in;
    memset(d->dmod, 0, (size_t)B * 6 * C * sizeof *d->dmod);
    /* MLP branch: out = x2 + gate2 * fc2(gelu(fc1(m2))) */
    gate_backward(d, d->dA, d->dmod, dres, a->f, a->mod, 5 * C, B);
    dt_gelu_forward(d->gel, a->h, (int64_t)NF);
    memset(d->dg, 0, NF * sizeof *d->dg);
    DT_TRY(dt_dit_row_backward(d, &blk->fc2, d->gel, d->dA, B, d->dg, wg ? wg->dfc2 : NULL));
    memset(d->dh, 0, NF * sizeof *d->dh);
    dt_gelu_backward(d->dh, a->h, d->dg, (int64_t)NF);
    memset(d->dB, 0, NC * sizeof *d->dB);
    DT_TRY(dt_dit_enter_rows(d, a->m2, B, &in));
    DT_TRY(dt_dit_col_backward(d, &blk->fc1, in, d->dh, B, d->dB, wg ? wg->dh : NULL));
    dt_dit_ln_rows_backward(d, dres, d->dmod, 6 * C, 4 * C, 3 * C, d->dB, mlp_input(d, a),
                            a->aff + 2 * C, 4 * C, a->mean2, a->rstd2, B);
    /* cross-attention branch: x3 = x2 + proj(attn(q(x2), k(y), v(y))); dres: d x3 -> d x2 */
    if (d->Lt > 0)
        DT_TRY(dt_dit_cross_backward(d, blk, a, slot, B, dres, dy, wg));
    /* attention branch: x2 = x + gate1 * proj(attn(qkv(m1))); dres now holds d x2 */
    gate_backward(d, d->dA, d->dmod, dres, a->a, a->mod, 2 * C, B);
    const float *att, *datt, *dqkv;
    DT_TRY(attention_to_rows(d, k, B, a->y, &att));
    memset(d->dB, 0, (size_t)Nt * d->Ct * sizeof *d->dB);
    DT_TRY(dt_dit_row_backward(d, &blk->proj, att, d->dA, B, d->dB, wg ? wg->dproj : NULL));
    DT_TRY(drows_to_attention(d, k, B, d->dB, &datt));
    dt_attn_shape s = attn_shape(d, k, B);
    int64_t q = (int64_t)s.NH * s.hs;
    DT_TRY(dt_ring_attention_backward_set(ring_of(d, k), &s, d->dqkvp, d->dqkvp + q,
                                          d->dqkvp + 2 * q, datt, a->y, a->lse, a->qkv, a->qkv + q,
                                          a->qkv + 2 * q, d->work));
    DT_TRY(dqkv_to_rows(d, k, B, &dqkv));
    memset(d->dA, 0, NC * sizeof *d->dA);
    DT_TRY(dt_dit_enter_rows(d, a->m1, B, &in));
    DT_TRY(dt_dit_col_backward(d, &blk->qkv, in, dqkv, B, d->dA, wg ? wg->dqkv : NULL));
    dt_dit_ln_rows_backward(d, dres, d->dmod, 6 * C, C, 0, d->dA, x, a->aff, 4 * C, a->mean1,
                            a->rstd1, B);
    if (d->par.rows->size > 1) /* the modulations saw only this rank's rows */
        DT_TRY(dt_comm_allreduce_f32(d->par.rows, d->dmod, (int64_t)B * 6 * C, NULL));
    dt_linear ada = blk->ada;
    if (wg) {
        memcpy(wg->dmod, d->dmod, (size_t)B * 6 * C * sizeof *wg->dmod);
        ada.dw = NULL;
    }
    return dt_dit_linear_backward(d, &ada, sc, d->dmod, B, dsc);
}

/* The split backward's weight pass: the five matmuls' weight gradients from the output
 * gradients kept in wg and their inputs, saved or rebuilt as the backward rebuilt them. */
static dt_status block_weights(dt_dit *d, int l, const dt_dit_acts *a, const float *sc, int B,
                               const dt_dit_wgrad *wg) {
    const dt_dit_block *blk = &d->blocks[l];
    int Nt = dt_dit_rows_tp(d, B);
    const float *in, *att;
    dt_linear w[5] = {blk->fc2, blk->fc1, blk->proj, blk->qkv, blk->ada};
    for (int i = 0; i < 5; i++)
        w[i].db = NULL; /* the biases' gradients came with the backward */
    dt_gelu_forward(d->gel, a->h, (int64_t)Nt * d->Ft);
    DT_TRY(dt_dit_linear_backward(d, &w[0], d->gel, wg->dfc2, Nt, NULL));
    DT_TRY(dt_dit_enter_rows(d, a->m2, B, &in));
    DT_TRY(dt_dit_linear_backward(d, &w[1], in, wg->dh, Nt, NULL));
    if (d->Lt > 0)
        DT_TRY(dt_dit_cross_weights(d, blk, a, B, wg));
    DT_TRY(attention_to_rows(d, block_kind(d, l), B, a->y, &att));
    DT_TRY(dt_dit_linear_backward(d, &w[2], att, wg->dproj, Nt, NULL));
    DT_TRY(dt_dit_enter_rows(d, a->m1, B, &in));
    DT_TRY(dt_dit_linear_backward(d, &w[3], in, wg->dqkv, Nt, NULL));
    return dt_dit_linear_backward(d, &w[4], sc, wg->dmod, B, NULL);
}

dt_status dt_dit_block_forward(dt_dit *d, int slot, int l, const float *x, const float *sc, int B,
                               float *out) {
    dt_dit_acts a = view(d, slot, l);
    DT_TRY(block_forward(d, slot, l, &a, x, sc, B, out));
    if (d->compress) /* the forward used the fp32 values; the backward will see these */
        int8_move(d, slot, l, B, &a, true);
    return DT_OK;
}

/* Rebuilds, into the shared set, what the slot did not keep (under ZeRO-3 inside the
 * backward's or weight pass's enter/leave, where the block's weights are present; the weight
 * pass comes after other blocks reused the set, so it rebuilds again). */
static dt_status rebuild(dt_dit *d, int slot, int l, dt_dit_acts *a, const float *x,
                         const float *sc, int B) {
    keep k = keep_of(d, l);
    if (k == KEEP_INPUT)
        return block_forward(d, slot, l, a, x, sc, B, d->ac_out);
    if (d->compress)
        int8_move(d, slot, l, B, a, false);
    if (k != KEEP_NO_ATTN)
        return DT_OK;
    if (d->Lt > 0)
        dt_dit_cross_attend(d, a, slot, B);
    return attend(d, block_kind(d, l), B, a);
}

static dt_dit_wgrad *wgrad_of(dt_dit *d, int slot, int l) {
    return &d->wgrad[(size_t)slot * d->cfg.n_layer + l];
}

dt_status dt_dit_block_backward(dt_dit *d, int slot, int l, const float *x, const float *sc, int B,
                                float *dres, float *dsc, float *dy, bool split) {
    dt_dit_acts a = view(d, slot, l);
    DT_TRY(rebuild(d, slot, l, &a, x, sc, B));
    return block_backward(d, slot, l, &a, x, sc, B, dres, dsc, dy,
                          split ? wgrad_of(d, slot, l) : NULL);
}

dt_status dt_dit_block_weights(dt_dit *d, int slot, int l, const float *x, const float *sc, int B) {
    dt_dit_acts a = view(d, slot, l);
    DT_TRY(rebuild(d, slot, l, &a, x, sc, B));
    return block_weights(d, l, &a, sc, B, wgrad_of(d, slot, l));
}
