/* The DiT's text (see dit.h): the text embedder of unit 0 (caption bytes or precomputed
 * embeddings -> the clip's text sequence y [Lt, C], or the learned null text), the text's part
 * of a pipeline boundary, and each block's cross-attention branch (PixArt-alpha's: no norm,
 * no gate; the output projection starts at zero, so a new model ignores its text until it
 * learns to read it).
 *
 * Splits. The text is small (Lt tokens a clip) and every rank makes all of it: the embedder
 * and the keys and values of every clip, for this tp rank's heads. The queries are the
 * block's tp-region rows (a sp or ring rank's, all of them gathered under Megatron-SP), so
 * the cross-attention needs no all-to-all: each row attends to its own clip's text. The
 * gradient of y is then partial twice: over tp (each rank's heads) and over the rows split by
 * sp or the ring. It travels with the boundary gradient as is; unit 0 sums it over tp before
 * the embedder's backward, and the split rows' share is summed with the embedder's weight
 * gradients over dp x sp like every gradient of a replicated weight.
 */
#include <math.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/cast.h"
#include "kernels/reduce.h"
#include "kernels/xattn.h"
#include "models/dit_impl.h"

/* keys clip b attends to: its text's tokens, or every row of the null text */
static int keys_of(const dt_dit *d, const int32_t *tn, int b) { return tn[b] > 0 ? tn[b] : d->Lt; }

/* ---- the text embedder (unit 0) ------------------------------------------------------------ */

dt_status dt_dit_text_read(dt_dit *d, int slot, const float *text, int64_t stride, int B) {
    dt_dit_slot *s = &d->slots[slot];
    int Lt = d->Lt, Dt = d->cfg.text_dim;
    for (int b = 0; b < B; b++) {
        const float *r = text ? text + b * stride : NULL;
        double n = r ? r[0] : -1;
        if (n != floor(n) || n < -1 || n > Lt)
            return dt_err_set(DT_ERR_ARG,
                              "dit: clip %d's text has %g tokens, the model reads "
                              "-1..%d (-1 or 0: no text)",
                              b, n, Lt);
        s->tn[b] = (int32_t)n;
        if (Dt > 0) {
            float *f = s->tfeat + (size_t)b * Lt * Dt;
            if (r)
                memcpy(f, r + 1, (size_t)Lt * Dt * sizeof *f);
            else
                memset(f, 0, (size_t)Lt * Dt * sizeof *f);
            continue;
        }
        for (int i = 0; i < Lt; i++) {
            double v = i < n ? r[1 + i] : 0;
            if (v != floor(v) || v < 0 || v > 255)
                return dt_err_set(DT_ERR_ARG,
                                  "dit: byte %d of clip %d's text is %g, not "
                                  "0..255",
                                  i, b, v);
            s->ttok[(size_t)b * Lt + i] = (int32_t)v;
        }
    }
    return DT_OK;
}

/* The byte encoder's features: token i of clip b is [e_{i-1}, e_i, e_{i+1}], e_j the byte's
 * and the position's embeddings for j < n, zero elsewhere. */
static void byte_features(dt_dit *d, dt_dit_slot *s, int B) {
    int Lt = d->Lt, C = d->C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Lt; i++) {
            float *f = s->tfeat + ((size_t)b * Lt + i) * 3 * C;
            for (int w = 0; w < 3; w++) {
                int j = i - 1 + w;
                float *e = f + (size_t)w * C;
                if (j < 0 || j >= s->tn[b]) {
                    memset(e, 0, (size_t)C * sizeof *e);
                    continue;
                }
                const float *t = d->byte_tab + (size_t)s->ttok[(size_t)b * Lt + j] * C;
                const float *p = d->tpos_tab + (size_t)j * C;
                for (int c = 0; c < C; c++)
                    e[c] = t[c] + p[c];
            }
        }
}

dt_status dt_dit_text_forward(dt_dit *d, int slot, int B) {
    dt_dit_slot *s = &d->slots[slot];
    int N = B * d->Lt;
    size_t seq = (size_t)d->Lt * d->C;
    if (d->cfg.text_dim == 0)
        byte_features(d, s, B);
    DT_TRY(dt_dit_linear_forward(d, &d->y_fc1, s->tfeat, N, s->th_y));
    dt_gelu_forward(d->ty_gel, s->th_y, (int64_t)N * d->C);
    DT_TRY(dt_dit_linear_forward(d, &d->y_fc2, d->ty_gel, N, s->y));
    for (int b = 0; b < B; b++)
        if (s->tn[b] <= 0)
            memcpy(s->y + b * seq, d->null_y, seq * sizeof *s->y);
    return DT_OK;
}

/* The adjoint of byte_features into the byte and position tables. */
static void byte_features_backward(dt_dit *d, const dt_dit_slot *s, const float *df, int B) {
    int Lt = d->Lt, C = d->C;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < s->tn[b]; j++) {
            float *gt = d->dbyte_tab + (size_t)s->ttok[(size_t)b * Lt + j] * C;
            float *gp = d->dtpos_tab + (size_t)j * C;
            for (int w = 0; w < 3; w++) {
                int i = j + 1 - w; /* token i saw e_j in its window slot w */
                if (i < 0 || i >= Lt)
                    continue;
                const float *g = df + ((size_t)b * Lt + i) * 3 * C + (size_t)w * C;
                for (int c = 0; c < C; c++) {
                    gt[c] += g[c];
                    gp[c] += g[c];
                }
            }
        }
}

dt_status dt_dit_text_backward(dt_dit *d, int slot, int B, float *dy) {
    dt_dit_slot *s = &d->slots[slot];
    int N = B * d->Lt;
    size_t seq = (size_t)d->Lt * d->C, all = (size_t)N * d->C;
    if (d->par.tp->size > 1) /* each tp rank's heads saw a part of it */
        DT_TRY(dt_comm_allreduce_f32(d->par.tp, dy, (int64_t)all, NULL));
    for (int b = 0; b < B; b++)
        if (s->tn[b] <= 0) { /* the null text's gradient; the embedder's output was unused */
            dt_add_inplace(d->dnull_y, dy + b * seq, (int64_t)seq);
            memset(dy + b * seq, 0, seq * sizeof *dy);
        }
    float *dgel = d->dty, *dpre = d->dty + all;
    dt_gelu_forward(d->ty_gel, s->th_y, (int64_t)all);
    memset(dgel, 0, all * sizeof *dgel);
    DT_TRY(dt_dit_linear_backward(d, &d->y_fc2, d->ty_gel, dy, N, dgel));
    memset(dpre, 0, all * sizeof *dpre);
    dt_gelu_backward(dpre, s->th_y, dgel, (int64_t)all);
    if (d->cfg.text_dim > 0)
        return dt_dit_linear_backward(d, &d->y_fc1, s->tfeat, dpre, N, NULL);
    memset(d->dtfeat, 0, (size_t)N * d->Din * sizeof *d->dtfeat);
    DT_TRY(dt_dit_linear_backward(d, &d->y_fc1, s->tfeat, dpre, N, d->dtfeat));
    byte_features_backward(d, s, d->dtfeat, B);
    return DT_OK;
}

/* ---- the text in a boundary ------------------------------------------------------------------ */

int64_t dt_dit_text_boundary(const dt_dit *d, int B) {
    return d->Lt > 0 ? (int64_t)B * d->Lt * d->C + B : 0;
}

void dt_dit_text_save(const dt_dit *d, int slot, int B, float *dst) {
    const dt_dit_slot *s = &d->slots[slot];
    size_t all = (size_t)B * d->Lt * d->C;
    memcpy(dst, s->y, all * sizeof *dst);
    for (int b = 0; b < B; b++)
        dst[all + b] = (float)s->tn[b];
}

void dt_dit_text_load(dt_dit *d, int slot, int B, const float *src) {
    dt_dit_slot *s = &d->slots[slot];
    size_t all = (size_t)B * d->Lt * d->C;
    memcpy(s->y, src, all * sizeof *src);
    for (int b = 0; b < B; b++)
        s->tn[b] = (int32_t)src[all + b];
}

/* ---- cross-attention ---------------------------------------------------------------------------
 */

/* The first tp-region row of this rank in the flattened [B, S] batch; row r is of clip r / S. */
static int64_t region_row0(const dt_dit *d, int B) {
    return (int64_t)d->par.sp->rank * dt_dit_rows_tp(d, B);
}

/* The kernel's view of the cross-attention (kernels/xattn.h): the tp region's rows of the
 * rank's clips (groups of S rows from its first row), this tp rank's heads, each clip's keys. */
static dt_xattn_shape xattn_shape(const dt_dit *d, int B, const int32_t *tn, int32_t *keys) {
    for (int b = 0; b < B; b++)
        keys[b] = keys_of(d, tn, b);
    int hs = d->C / d->NH;
    return (dt_xattn_shape){.rows = dt_dit_rows_tp(d, B),
                            .row0 = region_row0(d, B),
                            .group_rows = d->S,
                            .groups = B,
                            .heads = d->NHt,
                            .hs = hs,
                            .q_stride = d->Ct,
                            .kv_stride = d->Ct,
                            .kv_rows = d->Lt,
                            .n = keys,
                            .scale = 1.0f / sqrtf((float)hs)};
}

static void xattn_forward(dt_dit *d, int B, const int32_t *tn, const dt_dit_acts *a) {
    dt_xattn_shape s = xattn_shape(d, B, tn, d->xkeys);
    dt_xattn_forward(&s, a->xq, a->xk, a->xv, a->xo, a->xlse, d->xkt);
}

dt_status dt_dit_cross_forward(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int slot,
                               int B) {
    const dt_dit_slot *s = &d->slots[slot];
    int Nt = dt_dit_rows_tp(d, B), N = B * d->Lt;
    const float *in;
    DT_TRY(dt_dit_enter_rows(d, a->x2, B, &in));
    DT_TRY(dt_dit_linear_forward(d, &blk->xq, in, Nt, a->xq));
    DT_TRY(dt_dit_linear_forward(d, &blk->xk, s->y, N, a->xk));
    DT_TRY(dt_dit_linear_forward(d, &blk->xv, s->y, N, a->xv));
    xattn_forward(d, B, s->tn, a);
    DT_TRY(dt_dit_row_forward(d, &blk->xproj, a->xo, B, a->x3));
    dt_add_inplace(a->x3, a->x2, (int64_t)dt_dit_rows(d, B) * d->C);
    return DT_OK;
}

void dt_dit_cross_attend(dt_dit *d, const dt_dit_acts *a, int slot, int B) {
    xattn_forward(d, B, d->slots[slot].tn, a);
}

dt_status dt_dit_cross_backward(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int slot,
                                int B, float *dres, float *dy, dt_dit_wgrad *wg) {
    const dt_dit_slot *s = &d->slots[slot];
    int Nt = dt_dit_rows_tp(d, B), N = B * d->Lt;
    const float *in;
    float *dxo = d->dB;
    memset(dxo, 0, (size_t)Nt * d->Ct * sizeof *dxo);
    DT_TRY(dt_dit_row_backward(d, &blk->xproj, a->xo, dres, B, dxo, wg ? wg->dxproj : NULL));
    dt_xattn_shape xs = xattn_shape(d, B, s->tn, d->xkeys);
    dt_xattn_backward(&xs, dxo, a->xq, a->xk, a->xv, a->xo, a->xlse, d->dxq, d->dxk, d->dxv,
                      d->xkt);
    /* the keys' and values' weight gradients now: B Lt rows, cheap next to the queries' */
    DT_TRY(dt_dit_linear_backward(d, &blk->xk, s->y, d->dxk, N, dy));
    DT_TRY(dt_dit_linear_backward(d, &blk->xv, s->y, d->dxv, N, dy));
    DT_TRY(dt_dit_enter_rows(d, a->x2, B, &in));
    return dt_dit_col_backward(d, &blk->xq, in, d->dxq, B, dres, wg ? wg->dxq : NULL);
}

dt_status dt_dit_cross_weights(dt_dit *d, const dt_dit_block *blk, const dt_dit_acts *a, int B,
                               const dt_dit_wgrad *wg) {
    int Nt = dt_dit_rows_tp(d, B);
    dt_linear xproj = blk->xproj, xq = blk->xq;
    xproj.db = xq.db = NULL; /* with the backward */
    const float *in;
    DT_TRY(dt_dit_linear_backward(d, &xproj, a->xo, wg->dxproj, Nt, NULL));
    DT_TRY(dt_dit_enter_rows(d, a->x2, B, &in));
    return dt_dit_linear_backward(d, &xq, in, wg->dxq, Nt, NULL);
}
