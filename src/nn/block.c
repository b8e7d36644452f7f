/* Transformer block forward and backward, split by tp, Megatron-SP or Ulysses. See block.h
 * for the math, the sizes and the conventions.
 *
 * Scratch gradients are zeroed right before the layer that accumulates into them, so one
 * scratch set serves every block; a matmul's input gradient overwrites its buffer instead.
 * A region op over one rank (tp = 1, sp = 1) is the identity, so there the block skips it:
 * the producer writes straight into the consumer's buffer (no copy, no zeroing), and the
 * column-parallel backward takes dx and dW from one read of dy (nothing to overlap). RoPE rotates q and k in place in the head layout; its
 * backward (the inverse rotation) turns the rotated gradients back into qkv gradients.
 * Gradients of parameters applied to split rows (norms, row-parallel biases) go to
 * scratch.pgrad first and are summed over the rows comm before they are added.
 * bf16 mode stores as autocast does: the MLP's matmul outputs h (u) in bf16, rounded once by
 * the matmul, read in bf16 by the activation kernels; over one tp rank the norms write the
 * bf16 copy the matmuls read directly. fp16 mode keeps h, u and the norm outputs in fp32.
 */
#include "nn/block.h"

#include <math.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/norm.h"
#include "kernels/reduce.h"
#include "kernels/rope.h"

int dt_block_qkv_width(const dt_block_dims *d) { return (d->NH + 2 * d->NKV) * d->hs; }

dt_status dt_block_par_make(dt_comm *tp, dt_comm *sp, bool sequence_tp, dt_comm *cp, bool cp_zigzag,
                            dt_comm *own[4], dt_block_par *out) {
    dt_comm *given[4] = {tp, sp, sequence_tp ? tp : NULL, cp}, *use[4];
    static const char *const names[4] = {"tp", "sp", "rows", "cp"};
    for (int i = 0; i < 4; i++) {
        own[i] = NULL;
        if (!(use[i] = given[i])) {
            DT_TRY(dt_comm_local_init(names[i], &own[i]));
            use[i] = own[i];
        }
    }
    *out = (dt_block_par){.tp = use[0],
                          .sp = use[1],
                          .rows = use[2],
                          .enter = dt_region_enter_kind(sequence_tp),
                          .leave = dt_region_leave_kind(sequence_tp),
                          .ring = {.cp = use[3], .zigzag = cp_zigzag}};
    return DT_OK;
}

void dt_block_par_free_own(dt_comm *own[4]) {
    for (int i = 0; i < 4; i++) {
        dt_comm_free(own[i]);
        own[i] = NULL;
    }
}

int dt_block_rows_tp(const dt_block_par *p, int N) { return N / p->sp->size; }
int dt_block_rows_res(const dt_block_par *p, int N) { return N / p->sp->size / p->rows->size; }

static void zero(float *p, int64_t n) { dt_zero_f32(p, n); }

/* A region op over a comm of one rank is the identity (every op's forward and adjoint). */
static bool unsplit(const dt_comm *c) { return c->size == 1; }

/* ---- region ops, through the table ------------------------------------------------------ */

static dt_region_shape shape(int64_t rows, int64_t cols, int heads) {
    return (dt_region_shape){.rows = rows, .cols = cols, .heads = heads};
}

static dt_status region_fwd(dt_region_kind k, dt_comm *c, dt_region_shape sh, const float *x,
                            float *y, float *work) {
    return dt_region_op_get(k)->forward(c, &sh, x, y, work);
}

/* dx += A^T dy */
static dt_status region_bwd(dt_region_kind k, dt_comm *c, dt_region_shape sh, const float *dy,
                            float *dx, float *work) {
    return dt_region_op_get(k)->backward(c, &sh, dy, dx, work);
}

int64_t dt_block_work_count(const dt_block_dims *d, const dt_block_par *p, int B, int T) {
    int N = B * T, Nt = dt_block_rows_tp(p, N);
    dt_region_shape c = shape(Nt, d->C, 0), q = shape(N, dt_block_qkv_width(d), p->sp->size);
    dt_region_shape a = shape(N, (int64_t)d->NH * d->hs, d->NH);
    bool tp = !unsplit(p->tp), sp = !unsplit(p->sp); /* size-1 regions are skipped */
    int64_t n[] = {tp ? dt_region_work_count(p->enter, &c, p->tp->size) : 0,
                   tp ? dt_region_work_count(p->leave, &c, p->tp->size) : 0,
                   sp ? dt_region_work_count(DT_REGION_KIND_ALL_TO_ALL, &q, p->sp->size) : 0,
                   sp ? dt_region_work_count(DT_REGION_KIND_ALL_TO_ALL, &a, p->sp->size) : 0,
                   dt_ring_work_count(&p->ring, &(dt_attn_shape){.B = B,
                                                                 .T = T,
                                                                 .NH = d->NH / p->sp->size,
                                                                 .NKV = d->NKV / p->sp->size,
                                                                 .hs = d->hs})};
    int64_t m = 0;
    for (int i = 0; i < 5; i++)
        m = n[i] > m ? n[i] : m;
    return m;
}

/* ---- pieces ------------------------------------------------------------------------------ */

void dt_block_norm_forward(dt_block_kind kind, const dt_norm_params *p, const float *x, int N,
                           int C, float eps, float *y, float *mean, float *rstd) {
    if (kind == DT_BLOCK_GPT2)
        dt_layernorm_forward(y, mean, rstd, x, p->w, p->b, N, C, eps);
    else
        dt_rmsnorm_forward(y, rstd, x, p->w, N, C, eps);
}

void dt_block_norm_forward_bf16(dt_block_kind kind, const dt_norm_params *p, const float *x,
                                int N, int C, float eps, dt_bf16 *y, float *mean, float *rstd) {
    if (kind == DT_BLOCK_GPT2)
        dt_layernorm_forward_bf16(y, mean, rstd, x, p->w, p->b, N, C, eps);
    else
        dt_rmsnorm_forward_bf16(y, rstd, x, p->w, N, C, eps);
}

void dt_block_norm_backward(dt_block_kind kind, const dt_norm_params *p, const float *x,
                            const float *dy, const float *mean, const float *rstd, int N, int C,
                            float *dx) {
    if (kind == DT_BLOCK_GPT2)
        dt_layernorm_backward(dx, p->dw, p->db, dy, x, p->w, mean, rstd, N, C);
    else
        dt_rmsnorm_backward(dx, p->dw, dy, x, p->w, rstd, N, C);
}

/* y[i] += b + res[i] over [N, C] rows (b may be NULL): a row-parallel layer's bias, added
 * once after the reduction, and the residual connection. */
static void add_bias_residual(float *y, const float *b, const float *res, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *row = y + (int64_t)i * C;
        const float *r = res + (int64_t)i * C;
        for (int j = 0; j < C; j++)
            row[j] += r[j] + (b ? b[j] : 0.0f);
    }
}

/* Per token, this rank's q|k|v heads in natural order [q NH][k NKV][v NKV] <-> grouped by sp
 * rank [q NH/sp, k NKV/sp, v NKV/sp] x sp, so the all-to-all hands sp rank g its group. */
static void regroup_qkv(const dt_block_dims *d, int sp, const float *src, float *dst, int rows,
                        bool to_groups) {
    int64_t W = dt_block_qkv_width(d), hs = d->hs;
    int64_t qa = (int64_t)d->NH / sp * hs, kva = (int64_t)d->NKV / sp * hs;
    int64_t nat[3] = {0, (int64_t)d->NH * hs, (int64_t)(d->NH + d->NKV) * hs};
    int64_t grp[3] = {0, qa, qa + kva}, len[3] = {qa, kva, kva};
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int g = 0; g < sp; g++)
            for (int k = 0; k < 3; k++) {
                int64_t n_off = i * W + nat[k] + g * len[k], g_off = i * W + g * (qa + 2 * kva) + grp[k];
                if (to_groups)
                    memcpy(dst + g_off, src + n_off, (size_t)len[k] * sizeof *dst);
                else
                    memcpy(dst + n_off, src + g_off, (size_t)len[k] * sizeof *dst);
            }
}

static dt_attn_shape attn_shape(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                                const dt_block_seq *seq, int B, int T) {
    int sp = p->sp->size;
    int64_t w = dt_block_qkv_width(d) / sp;
    return (dt_attn_shape){.B = B,
                           .T = T,
                           .NH = d->NH / sp,
                           .NKV = d->NKV / sp,
                           .hs = d->hs,
                           .q_stride = w,
                           .kv_stride = w,
                           .scale = 1.0f / sqrtf((float)d->hs),
                           .causal = true,
                           .bf16 = ctx->mm_type == DT_BF16,
                           .doc_start = seq->doc_start};
}

static void rope_apply(const dt_attn_shape *as, const dt_block_seq *seq, float *qkv, bool inverse) {
    if (!seq->cos_t)
        return;
    void (*rot)(float *, int, int, int, int, int64_t, const float *, const float *,
                const int32_t *) = inverse ? dt_rope_backward : dt_rope_forward;
    rot(qkv, as->B, as->T, as->NH, as->hs, as->q_stride, seq->cos_t, seq->sin_t, seq->pos);
    rot(qkv + (int64_t)as->NH * as->hs, as->B, as->T, as->NKV, as->hs, as->q_stride, seq->cos_t,
        seq->sin_t, seq->pos);
}

static dt_linear without_bias(const dt_linear *l) {
    dt_linear r = *l;
    r.b = NULL;
    r.db = NULL;
    return r;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* Whether the MLP's matmul outputs (h, u) are kept in bf16 (a->h_lp, a->u_lp), as autocast
 * keeps them: bf16 mode. fp16 mode keeps them in fp32 (fp16's range would need scaling). */
static bool mlp_bf16(const dt_nn_ctx *ctx) { return ctx->mm_type == DT_BF16; }

/* norm -> enter the tp region: s->ln_full [Nt, C], and in 16-bit modes its rounded copy
 * lp [Nt, C], which the column-parallel matmuls read. In bf16 mode over one tp rank the norm
 * writes lp directly (the same bits; s->ln_full is not carved then); a split region moves
 * fp32 rows, so there the norm writes fp32 and the entered rows are cast. */
static dt_status norm_enter(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                            const dt_norm_params *np, const float *x, int N, float *mean,
                            float *rstd, dt_block_scratch *s, dt_bf16 *lp) {
    int Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N);
    if (ctx->mm_type == DT_BF16 && unsplit(p->tp)) {
        dt_block_norm_forward_bf16(d->kind, np, x, Nr, d->C, d->norm_eps, lp, mean, rstd);
        return DT_OK;
    }
    float *ln = unsplit(p->tp) ? s->ln_full : s->ln;
    dt_block_norm_forward(d->kind, np, x, Nr, d->C, d->norm_eps, ln, mean, rstd);
    if (ln != s->ln_full)
        DT_TRY(region_fwd(p->enter, p->tp, shape(Nt, d->C, 0), s->ln, s->ln_full, s->work));
    if (ctx->mm_type != DT_F32)
        dt_cast_f32_to_lp(ctx->mm_type, lp, s->ln_full, (int64_t)Nt * d->C);
    return DT_OK;
}

/* A column-parallel layer on the entered norm output: s->ln_full in fp32 mode, else its
 * 16-bit copy lp (norm_enter's). */
static dt_status column_forward(const dt_nn_ctx *ctx, const dt_linear *l,
                                const dt_block_scratch *s, const dt_bf16 *lp, int Nt,
                                float *y) {
    if (ctx->mm_type == DT_F32)
        return dt_linear_forward(ctx, l, s->ln_full, NULL, Nt, y);
    return dt_linear_forward_lp(ctx, l, lp, Nt, y);
}

/* Where a row-parallel matmul writes its partial sum: s->part, or y itself over one rank. */
static float *part_out(const dt_block_par *p, dt_block_scratch *s, float *y) {
    return unsplit(p->tp) ? y : s->part;
}

/* part [Nt, C] (from part_out) -> leave the tp region -> y [Nr, C], + bias + residual */
static dt_status leave_add(const dt_block_dims *d, const dt_block_par *p, const float *b,
                           const float *res, int N, dt_block_scratch *s, const float *part,
                           float *y) {
    int Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N);
    if (part != y)
        DT_TRY(region_fwd(p->leave, p->tp, shape(Nt, d->C, 0), part, y, s->work));
    add_bias_residual(y, b, res, Nr, d->C);
    return DT_OK;
}

/* bf16 mode keeps q|k|v and the attention output in bf16 (a->qkv16, a->att16) instead of fp32
 * (a->qkv, a->att): the attention reads and writes them directly and the proj matmul takes
 * att16 as its bf16 input (the model carves one kind or the other; see block.h). */
static bool kept16(const dt_block_acts *a) { return a->qkv16 != NULL; }

/* the attention core on the saved q|k|v: a->lse, s->att_heads, then a->att in row layout */
static dt_status attention_core(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                                const dt_block_seq *seq, int B, int T, dt_block_acts *a,
                                dt_block_scratch *s) {
    int N = B * T, Nt = dt_block_rows_tp(p, N);
    int64_t A = (int64_t)d->NH * d->hs;
    dt_attn_shape as = attn_shape(ctx, d, p, seq, B, T);
    const int64_t ko = (int64_t)as.NH * as.hs, vo = ko + (int64_t)as.NKV * as.hs;
    if (kept16(a)) {
        const dt_bf16 *q = a->qkv16;
        /* y rounded to bf16 by the kernel, in head layout: over one sp rank that is att16
         * itself; else it passes att16 (the same size) on its way through the fp32
         * all-to-all, which moves the bf16 values exactly (s->qkv_rows is free here) */
        DT_TRY(dt_attention_forward_bf16(&as, a->att16, true, a->lse, q, q + ko, q + vo));
        if (unsplit(p->sp))
            return DT_OK;
        dt_cast_bf16_to_f32(s->att_heads, a->att16, (int64_t)N * A / p->sp->size);
        zero(s->qkv_rows, (int64_t)Nt * A);
        DT_TRY(region_bwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, A, d->NH), s->att_heads,
                          s->qkv_rows, s->work));
        dt_cast_f32_to_bf16(a->att16, s->qkv_rows, (int64_t)Nt * A);
        return DT_OK;
    }
    const float *q = a->qkv, *k = q + ko, *v = q + vo;
    if (unsplit(p->sp)) /* the head layout of whole sequences is the row layout */
        return dt_ring_attention_forward(&p->ring, &as, a->att, a->lse, q, k, v, s->work);
    DT_TRY(dt_ring_attention_forward(&p->ring, &as, s->att_heads, a->lse, q, k, v, s->work));
    zero(a->att, (int64_t)Nt * A); /* heads -> rows is the all-to-all's adjoint (accumulates) */
    return region_bwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, A, d->NH), s->att_heads, a->att,
                      s->work);
}

/* from the saved q|k|v on: the attention core, the projection, bias and residual */
static dt_status attention_rest(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                                const dt_block *blk, const dt_block_seq *seq, const float *x, int B,
                                int T, dt_block_acts *a, dt_block_scratch *s) {
    int N = B * T, Nt = dt_block_rows_tp(p, N);
    DT_TRY(attention_core(ctx, d, p, seq, B, T, a, s));
    dt_linear proj = without_bias(&blk->proj);
    float *part = part_out(p, s, a->x2);
    if (kept16(a))
        DT_TRY(dt_linear_forward_lp(ctx, &proj, a->att16, Nt, part));
    else
        DT_TRY(dt_linear_forward(ctx, &proj, a->att, a->att_lp, Nt, part));
    return leave_add(d, p, blk->proj.b, x, N, s, part, a->x2);
}

static dt_status attention_forward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                   const dt_block_par *p, const dt_block *blk,
                                   const dt_block_seq *seq, const float *x, int B, int T,
                                   dt_block_acts *a, dt_block_scratch *s) {
    int N = B * T, Nt = dt_block_rows_tp(p, N), sp = p->sp->size;
    int64_t W = dt_block_qkv_width(d);
    DT_TRY(norm_enter(ctx, d, p, &blk->ln1, x, N, a->ln1_mean, a->ln1_rstd, s, a->ln1_lp));
    if (kept16(a) && unsplit(p->sp) && !seq->cos_t) {
        /* nothing between the matmul and the rounding: the matmul writes bf16 itself (the
         * bits of its fp32 result rounded once), no fp32 q|k|v is made */
        DT_TRY(dt_linear_forward_bf16_out(ctx, &blk->qkv, a->ln1_lp, Nt, a->qkv16));
        return attention_rest(ctx, d, p, blk, seq, x, B, T, a, s);
    }
    /* q|k|v of whole sequences: in place, or (bf16 storage) in s->qkv_rows, rounded once
     * after RoPE */
    float *qkv = kept16(a) ? s->qkv_rows : a->qkv;
    if (unsplit(p->sp)) { /* one group */
        DT_TRY(column_forward(ctx, &blk->qkv, s, a->ln1_lp, Nt, qkv));
    } else {
        DT_TRY(column_forward(ctx, &blk->qkv, s, a->ln1_lp, Nt, s->qkv_rows));
        regroup_qkv(d, sp, s->qkv_rows, s->packed, Nt, true);
        DT_TRY(region_fwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, W, sp), s->packed, qkv,
                          s->work));
    }
    dt_attn_shape as = attn_shape(ctx, d, p, seq, B, T);
    rope_apply(&as, seq, qkv, false);
    if (kept16(a))
        dt_cast_f32_to_bf16(a->qkv16, qkv, (int64_t)Nt * W);
    return attention_rest(ctx, d, p, blk, seq, x, B, T, a, s);
}

/* The MLP activation of the saved matmul output(s): fp32 into s->g, or in 16-bit modes its
 * rounded copy straight into a->g_lp (fp16: the same bits as the fp32 one, then the cast;
 * bf16: from the bf16 h, u). */
static void mlp_act(const dt_block_dims *d, const dt_block_acts *a, dt_block_scratch *s,
                    int64_t nf) {
    if (d->kind == DT_BLOCK_GPT2)
        dt_gelu_forward(s->g, a->h, nf);
    else
        dt_swiglu_forward(s->g, a->h, a->u, nf);
}

static void mlp_act_lp(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_acts *a,
                       int64_t nf) {
    if (mlp_bf16(ctx) && d->kind == DT_BLOCK_GPT2)
        dt_gelu_forward_bf16(a->g_lp, a->h_lp, nf);
    else if (mlp_bf16(ctx))
        dt_swiglu_forward_bf16(a->g_lp, a->h_lp, a->u_lp, nf);
    else if (d->kind == DT_BLOCK_GPT2)
        dt_gelu_forward_lp(ctx->mm_type, a->g_lp, a->h, nf);
    else
        dt_swiglu_forward_lp(ctx->mm_type, a->g_lp, a->h, a->u, nf);
}

static dt_status mlp_forward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                             const dt_block_par *p, const dt_block *blk, int N, dt_block_acts *a,
                             dt_block_scratch *s, float *out) {
    int Nt = dt_block_rows_tp(p, N);
    int64_t nf = (int64_t)Nt * d->F;
    DT_TRY(norm_enter(ctx, d, p, &blk->ln2, a->x2, N, a->ln2_mean, a->ln2_rstd, s, a->ln2_lp));
    bool llama = d->kind == DT_BLOCK_LLAMA;
    if (mlp_bf16(ctx)) { /* h (u) in bf16: bias added in fp32, rounded once */
        DT_TRY(dt_linear_forward_bf16_out(ctx, &blk->fc, a->ln2_lp, Nt, a->h_lp));
        if (llama)
            DT_TRY(dt_linear_forward_bf16_out(ctx, &blk->up, a->ln2_lp, Nt, a->u_lp));
    } else {
        DT_TRY(column_forward(ctx, &blk->fc, s, a->ln2_lp, Nt, a->h));
        if (llama)
            DT_TRY(column_forward(ctx, &blk->up, s, a->ln2_lp, Nt, a->u));
    }
    dt_linear down = without_bias(&blk->down);
    float *part = part_out(p, s, out);
    if (ctx->mm_type != DT_F32) { /* the activation is made straight in 16 bits */
        mlp_act_lp(ctx, d, a, nf);
        DT_TRY(dt_linear_forward_lp(ctx, &down, a->g_lp, Nt, part));
    } else {
        mlp_act(d, a, s, nf);
        DT_TRY(dt_linear_forward(ctx, &down, s->g, a->g_lp, Nt, part));
    }
    return leave_add(d, p, blk->down.b, a->x2, N, s, part, out);
}

dt_status dt_block_forward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                           const dt_block *blk, const dt_block_seq *seq, const float *x, int B,
                           int T, dt_block_acts *a, dt_block_scratch *s, float *out) {
    DT_TRY(attention_forward(ctx, d, p, blk, seq, x, B, T, a, s));
    return mlp_forward(ctx, d, p, blk, B * T, a, s, out);
}

/* ---- rebuilding what was not kept ------------------------------------------------------- */

dt_status dt_block_rerun_attention(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                   const dt_block_par *p, const dt_block_seq *seq, int B, int T,
                                   dt_block_acts *a, dt_block_scratch *s) {
    return attention_core(ctx, d, p, seq, B, T, a, s);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* The norm outputs (and the copy entering the region, gathered under Megatron-SP) are not
 * kept per block, in either precision: they are rebuilt just before the weight gradients
 * that read them, so each rank keeps only its own rows' statistics (Korthikanti et al.
 * sec. 4.2.2). In 16-bit modes the rebuilt copy goes to the (shared) buffer the matmul
 * reads, by the forward's norm_enter (the same bits). */
static dt_status recompute_norm_enter(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                      const dt_block_par *p, const dt_norm_params *np,
                                      const float *x, int N, const float *mean,
                                      const float *rstd, dt_block_scratch *s, dt_bf16 *lp) {
    return norm_enter(ctx, d, p, np, x, N, (float *)mean, (float *)rstd, s, lp);
}

/* The 16-bit copies of the row-parallel matmuls' inputs (att_lp, g_lp) are not kept either:
 * one buffer serves every block, and each is rebuilt right before the weight gradient that
 * reads it, with the forward's kernels on the forward's inputs (dt_linear_forward's copy is
 * dt_cast_f32_to_lp of its input, as here), so they are the forward's bits. The MLP
 * activation is rebuilt from the saved matmul output(s), in either precision. */
static void recompute_mlp_act(const dt_nn_ctx *ctx, const dt_block_dims *d,
                              const dt_block_acts *a, dt_block_scratch *s, int64_t nf) {
    if (ctx->mm_type != DT_F32)
        mlp_act_lp(ctx, d, a, nf);
    else
        mlp_act(d, a, s, nf);
}

static void rebuild_att_lp(const dt_nn_ctx *ctx, const dt_block_dims *d, int Nt,
                           const dt_block_acts *a) {
    if (ctx->mm_type != DT_F32 && !kept16(a))
        dt_cast_f32_to_lp(ctx->mm_type, a->att_lp, a->att, (int64_t)Nt * d->NH * d->hs);
}

/* the proj matmul's input: fp32 att and its 16-bit copy, or (bf16 storage) att16 alone */
static const float *proj_in(const dt_block_acts *a) { return kept16(a) ? NULL : a->att; }
static const dt_bf16 *proj_in_lp(const dt_block_acts *a) {
    return kept16(a) ? a->att16 : a->att_lp;
}

/* The leaving region's adjoint: dy [Nr, C] -> *dpart [Nt, C] (s->part, or dy itself over
 * one rank: the caller reads it before it next writes dy); the bias gradient. */
static dt_status leave_backward(const dt_block_dims *d, const dt_block_par *p, const float *dy,
                                int N, float *db, dt_block_scratch *s, const float **dpart) {
    int Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N);
    if (db)
        dt_colsum_accumulate(db, dy, Nr, d->C);
    *dpart = dy;
    if (unsplit(p->tp))
        return DT_OK;
    *dpart = s->part;
    zero(s->part, (int64_t)Nt * d->C);
    return region_bwd(p->leave, p->tp, shape(Nt, d->C, 0), dy, s->part, s->work);
}

/* Column-parallel layer(s) l[0..n) reading one input x (ln_full): input gradient partials
 * into dln_full, then the entering region's adjoint (all-reduce or reduce-scatter into
 * s->dln [Nr, C]) is posted and runs while the weight gradients are computed (Megatron's
 * async gradient all-reduce). */
static void keep(float *dst, const float *src, int64_t n) {
    if (dst)
        memcpy(dst, src, (size_t)n * sizeof *dst);
}

static dt_status column_backward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                 const dt_block_par *p, const dt_linear *const *l,
                                 const float *const *dy, float *const *kept, int n,
                                 const float *x, const dt_bf16 *x_lp, int N,
                                 dt_block_scratch *s) {
    int Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N);
    if (unsplit(p->tp)) { /* nothing to overlap: dx (into s->dln) and dW from one read of dy */
        for (int i = 0; i < n; i++) {
            dt_linear li = *l[i];
            if (kept) {
                li.dw = li.db = NULL;
                keep(kept[i], dy[i], (int64_t)Nt * li.out);
            }
            if (i == 0)
                DT_TRY(dt_linear_backward_set_dx(ctx, &li, x, x_lp, dy[i], s->dy_lp, Nt, s->dln));
            else
                DT_TRY(dt_linear_backward(ctx, &li, x, x_lp, dy[i], s->dy_lp, Nt, s->dln));
        }
        return DT_OK;
    }
    zero(s->dln_full, (int64_t)Nt * d->C);
    for (int i = 0; i < n; i++) {
        dt_linear only_dx = *l[i];
        only_dx.dw = only_dx.db = NULL;
        DT_TRY(dt_linear_backward(ctx, &only_dx, x, x_lp, dy[i], s->dy_lp, Nt, s->dln_full));
    }
    zero(s->dln, (int64_t)Nr * d->C);
    dt_region_shape sh = shape(Nt, d->C, 0);
    dt_region_pending pending = {0};
    DT_TRY(dt_region_backward_begin(p->enter, p->tp, &sh, s->dln_full, s->dln, s->work,
                                    &pending));
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        if (kept) /* split backward: the weight gradient waits for the W pass */
            keep(kept[i], dy[i], (int64_t)Nt * l[i]->out);
        else
            st = dt_linear_backward(ctx, l[i], x, x_lp, dy[i], s->dy_lp, Nt, NULL);
    }
    dt_status st_end = dt_region_backward_end(p->tp, &pending); /* always completed */
    return st != DT_OK ? st : st_end;
}

static dt_status mlp_backward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                              const dt_block_par *p, const dt_block *blk, int N,
                              const dt_block_acts *a, dt_block_scratch *s,
                              const dt_norm_params *ln2, float *down_db, dt_block_wgrad *wg,
                              float *dres) {
    int Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N);
    int64_t nf = (int64_t)Nt * d->F;
    if (!wg) /* the down projection's weight gradient reads the activation */
        recompute_mlp_act(ctx, d, a, s, nf);
    DT_TRY(recompute_norm_enter(ctx, d, p, &blk->ln2, a->x2, N, a->ln2_mean, a->ln2_rstd, s,
                                a->ln2_lp));
    const float *dpart;
    DT_TRY(leave_backward(d, p, dres, N, down_db, s, &dpart));
    dt_linear down = without_bias(&blk->down);
    if (wg) { /* the weight gradient waits: keep its output gradient */
        down.dw = NULL;
        keep(wg->ddown, dpart, (int64_t)Nt * d->C);
    }
    DT_TRY(dt_linear_backward_set_dx(ctx, &down, s->g, a->g_lp, dpart, s->dy_lp, Nt, s->dg));
    if (d->kind == DT_BLOCK_GPT2) {
        if (mlp_bf16(ctx))
            dt_gelu_backward_bf16_set(s->dh, a->h_lp, s->dg, nf);
        else
            dt_gelu_backward_set(s->dh, a->h, s->dg, nf);
        const dt_linear *l[] = {&blk->fc};
        const float *dy[] = {s->dh};
        float *kept[] = {wg ? wg->dh : NULL};
        DT_TRY(column_backward(ctx, d, p, l, dy, wg ? kept : NULL, 1, s->ln_full, a->ln2_lp, N,
                               s));
    } else {
        if (mlp_bf16(ctx))
            dt_swiglu_backward_bf16_set(s->dh, s->du, a->h_lp, a->u_lp, s->dg, nf);
        else
            dt_swiglu_backward_set(s->dh, s->du, a->h, a->u, s->dg, nf);
        const dt_linear *l[] = {&blk->fc, &blk->up};
        const float *dy[] = {s->dh, s->du};
        float *kept[] = {wg ? wg->dh : NULL, wg ? wg->du : NULL};
        DT_TRY(column_backward(ctx, d, p, l, dy, wg ? kept : NULL, 2, s->ln_full, a->ln2_lp, N,
                               s));
    }
    dt_block_norm_backward(d->kind, ln2, a->x2, s->dln, a->ln2_mean, a->ln2_rstd, Nr, d->C,
                           dres);
    return DT_OK;
}

static dt_status attention_backward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                    const dt_block_par *p, const dt_block *blk,
                                    const dt_block_seq *seq, const float *x, int B, int T,
                                    const dt_block_acts *a, dt_block_scratch *s,
                                    const dt_norm_params *ln1, float *proj_db, dt_block_wgrad *wg,
                                    float *dres) {
    int N = B * T, Nr = dt_block_rows_res(p, N), Nt = dt_block_rows_tp(p, N), sp = p->sp->size;
    int64_t W = dt_block_qkv_width(d), A = (int64_t)d->NH * d->hs;
    const float *dpart;
    DT_TRY(leave_backward(d, p, dres, N, proj_db, s, &dpart));
    dt_linear proj = without_bias(&blk->proj);
    if (wg) {
        proj.dw = NULL;
        keep(wg->dproj, dpart, (int64_t)Nt * d->C);
    } else {
        rebuild_att_lp(ctx, d, Nt, a);
    }
    /* to the head layout: the output gradient, and the output itself (not kept twice); over
     * one sp rank the row layout is the head layout */
    const float *att_heads = a->att;
    if (unsplit(p->sp)) {
        DT_TRY(dt_linear_backward_set_dx(ctx, &proj, proj_in(a), proj_in_lp(a), dpart, s->dy_lp,
                                         Nt, s->datt_heads));
    } else {
        DT_TRY(dt_linear_backward_set_dx(ctx, &proj, proj_in(a), proj_in_lp(a), dpart, s->dy_lp,
                                         Nt, s->datt));
        DT_TRY(region_fwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, A, d->NH), s->datt,
                          s->datt_heads, s->work));
        const float *att = a->att;
        if (kept16(a)) { /* s->datt is free again: the bf16 values widened (exactly) */
            dt_cast_bf16_to_f32(s->datt, a->att16, (int64_t)Nt * A);
            att = s->datt;
        }
        DT_TRY(region_fwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, A, d->NH), att,
                          s->att_heads, s->work));
        att_heads = s->att_heads;
    }
    dt_attn_shape as = attn_shape(ctx, d, p, seq, B, T);
    const int64_t ko = (int64_t)as.NH * as.hs, vo = ko + (int64_t)as.NKV * as.hs;
    float *dq = s->dqkv_heads, *dk = dq + ko, *dv = dq + vo;
    if (kept16(a)) {
        const dt_bf16 *q = a->qkv16;
        bool y16 = unsplit(p->sp); /* att16 itself, or its fp32 copy in head layout */
        DT_TRY(dt_attention_backward_set_bf16(
            &as, dq, dk, dv, s->datt_heads,
            y16 ? (const void *)a->att16 : (const void *)att_heads, y16, a->lse, q, q + ko,
            q + vo));
    } else {
        const float *q = a->qkv;
        DT_TRY(dt_ring_attention_backward_set(&p->ring, &as, dq, dk, dv, s->datt_heads, att_heads,
                                              a->lse, q, q + ko, q + vo, s->work));
    }
    rope_apply(&as, seq, s->dqkv_heads, true);
    const float *dqkv = s->dqkv_heads; /* over one sp rank: already q|k|v rows */
    if (!unsplit(p->sp)) {
        zero(s->packed, (int64_t)Nt * W);
        DT_TRY(region_bwd(DT_REGION_KIND_ALL_TO_ALL, p->sp, shape(N, W, sp), s->dqkv_heads,
                          s->packed, s->work));
        regroup_qkv(d, sp, s->packed, s->qkv_rows, Nt, false);
        dqkv = s->qkv_rows;
    }
    DT_TRY(recompute_norm_enter(ctx, d, p, &blk->ln1, x, N, a->ln1_mean, a->ln1_rstd, s,
                                a->ln1_lp));
    const dt_linear *l[] = {&blk->qkv};
    const float *dy[] = {dqkv};
    float *kept[] = {wg ? wg->dqkv : NULL};
    DT_TRY(column_backward(ctx, d, p, l, dy, wg ? kept : NULL, 1, s->ln_full, a->ln1_lp, N, s));
    dt_block_norm_backward(d->kind, ln1, x, s->dln, a->ln1_mean, a->ln1_rstd, Nr, d->C, dres);
    return DT_OK;
}

/* The parameters applied to split rows see only this rank's rows: their gradients are
 * partial sums over the rows comm (size 1 outside Megatron-SP). Added to their gradients, or
 * copied where the view says the pass overwrites them. */
static dt_status add_row_param_grads(const dt_block_dims *d, const dt_block_par *p,
                                     const dt_block *blk, float *pgrad) {
    int C = d->C;
    DT_TRY(dt_comm_allreduce_f32(p->rows, pgrad, 6 * (int64_t)C, NULL));
    float *dst[6] = {blk->ln1.dw, blk->ln1.db, blk->ln2.dw, blk->ln2.db, blk->proj.db,
                     blk->down.db};
    bool set[6] = {blk->ln1.grad_set, blk->ln1.grad_set, blk->ln2.grad_set, blk->ln2.grad_set,
                   blk->proj.grad_set, blk->down.grad_set};
    for (int i = 0; i < 6; i++) {
        if (!dst[i])
            continue;
        if (set[i])
            memcpy(dst[i], pgrad + (int64_t)i * C, (size_t)C * sizeof(float));
        else
            dt_add_inplace(dst[i], pgrad + (int64_t)i * C, C);
    }
    return DT_OK;
}

dt_status dt_block_backward(const dt_nn_ctx *ctx, const dt_block_dims *d, const dt_block_par *p,
                            const dt_block *blk, const dt_block_seq *seq, const float *x, int B,
                            int T, const dt_block_acts *a, dt_block_scratch *s, dt_block_wgrad *wg,
                            float *dres) {
    int C = d->C;
    float *pg = s->pgrad;
    zero(pg, 6 * (int64_t)C);
    bool has_b = blk->ln1.b != NULL;
    dt_norm_params ln1 = {.w = blk->ln1.w, .b = blk->ln1.b, .dw = pg, .db = has_b ? pg + C : NULL};
    dt_norm_params ln2 = {.w = blk->ln2.w, .b = blk->ln2.b, .dw = pg + 2 * C,
                          .db = has_b ? pg + 3 * C : NULL};
    float *proj_db = blk->proj.db ? pg + 4 * C : NULL, *down_db = blk->down.db ? pg + 5 * C : NULL;
    /* MLP branch: dres is d(out); LN2's backward adds the branch's part, leaving d(x2) */
    DT_TRY(mlp_backward(ctx, d, p, blk, B * T, a, s, &ln2, down_db, wg, dres));
    DT_TRY(attention_backward(ctx, d, p, blk, seq, x, B, T, a, s, &ln1, proj_db, wg, dres));
    return add_row_param_grads(d, p, blk, pg);
}

/* The W pass: the same weight-gradient products the full backward makes, from the kept
 * output gradients and the inputs (saved, or recomputed as the full backward does). */
dt_status dt_block_weight_backward(const dt_nn_ctx *ctx, const dt_block_dims *d,
                                   const dt_block_par *p, const dt_block *blk, const float *x,
                                   int B, int T, const dt_block_acts *a, dt_block_scratch *s,
                                   const dt_block_wgrad *wg) {
    int N = B * T, Nt = dt_block_rows_tp(p, N);
    int64_t nf = (int64_t)Nt * d->F;
    recompute_mlp_act(ctx, d, a, s, nf);
    dt_linear down = without_bias(&blk->down), proj = without_bias(&blk->proj);
    DT_TRY(dt_linear_backward(ctx, &down, s->g, a->g_lp, wg->ddown, s->dy_lp, Nt, NULL));
    DT_TRY(recompute_norm_enter(ctx, d, p, &blk->ln2, a->x2, N, a->ln2_mean, a->ln2_rstd, s,
                                a->ln2_lp));
    DT_TRY(dt_linear_backward(ctx, &blk->fc, s->ln_full, a->ln2_lp, wg->dh, s->dy_lp, Nt, NULL));
    if (d->kind == DT_BLOCK_LLAMA)
        DT_TRY(dt_linear_backward(ctx, &blk->up, s->ln_full, a->ln2_lp, wg->du, s->dy_lp, Nt,
                                  NULL));
    rebuild_att_lp(ctx, d, Nt, a);
    DT_TRY(dt_linear_backward(ctx, &proj, proj_in(a), proj_in_lp(a), wg->dproj, s->dy_lp, Nt,
                              NULL));
    DT_TRY(recompute_norm_enter(ctx, d, p, &blk->ln1, x, N, a->ln1_mean, a->ln1_rstd, s,
                                a->ln1_lp));
    return dt_linear_backward(ctx, &blk->qkv, s->ln_full, a->ln1_lp, wg->dqkv, s->dy_lp, Nt,
                              NULL);
}
