/* What each block keeps for its backward, and how the rest is rebuilt (plugin.ac).
 *
 * Block l is checkpointed when l % ac_every == 0. Per slot, a block keeps:
 *   ac none, or not checkpointed   every tensor of dt_block_acts
 *   ac full                        nothing but its input (a residual position, kept anyway):
 *                                  its forward writes into the model's one shared set and is
 *                                  rerun there right before its backward (and its W pass)
 *   ac selective                   all but the attention core's output (att, lse): rerun
 *                                  from the saved q|k|v into the shared set before backward
 * A field a slot does not keep points into the shared set (g->shared), so the forward, the
 * reruns and the backward all see one complete dt_block_acts. The reruns are the forward's
 * own kernels on the same inputs, thread count and collectives, so gradients are the same
 * bits as without checkpointing. The shared set remembers whose forward it holds: a block
 * whose backward comes right after its own forward (the last checkpointed block of a micro-
 * batch's forward, with no other forward between) finds its set there and reruns nothing.
 * int8 restores are never skipped: the backward must see the stored values, not the
 * forward's unrounded ones, or layouts would differ with their schedules.
 *
 * With act_compress = int8 a slot keeps the fp32 tensors qkv, att, x2, h, u (those its mode
 * keeps) as int8 rows with one scale each (kernels/quant.h): the forward writes them into the
 * shared set, which is quantised when the block's forward is done (x2 is read by the block
 * itself), and restored there before the block's backward and W pass. Norm statistics, lse
 * and the residual positions stay fp32; in bf16 mode h and u are bf16 (dt_block_acts.h_lp,
 * u_lp) and are stored from and restored to bf16. Without int8, bf16 mode also keeps qkv and
 * att in bf16 (qkv16, att16: the attention's operands and the proj matmul's input as they
 * are). The other bf16 copies of matmul inputs are never kept per slot: one buffer for the
 * norm outputs and one for att / the MLP activation serve every
 * block, and the backward rebuilds them (nn/block.c). Single-threaded control.
 */
#include "models/gpt_impl.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant.h"

/* the fields of a dt_block_acts a slot or the shared set holds */
enum {
    F_LN = 1 << 0, /* ln1/ln2 mean and rstd */
    F_QKV = 1 << 1,
    F_ATT = 1 << 2,
    F_LSE = 1 << 3,
    F_X2 = 1 << 4,
    F_H = 1 << 5,
    F_U = 1 << 6, /* Llama */
    F_ALL = (1 << 7) - 1,
    F_ATTN_OUT = F_ATT | F_LSE,                /* what selective does not keep */
    F_INT8 = F_QKV | F_ATT | F_X2 | F_H | F_U, /* what act_compress stores as int8 */
    F_RESTORED = F_INT8,                       /* not kept per slot under int8 */
};

typedef enum keep { KEEP_ALL, KEEP_NO_ATTN, KEEP_INPUT } keep;

static keep keep_of(const dt_gpt *g, int l) {
    if (g->ac == DT_AC_NONE || l % g->ac_every)
        return KEEP_ALL;
    return g->ac == DT_AC_FULL ? KEEP_INPUT : KEEP_NO_ATTN;
}

static bool holds_kept(const dt_gpt *g, keep k) {
    for (int l = 0; l < g->cfg.n_layer; l++)
        if (dt_gpt_holds_block(g, l) && keep_of(g, l) == k)
            return true;
    return false;
}

/* fields a slot keeps for a block, whatever their storage */
static unsigned kept_fields(const dt_gpt *g, int l) {
    switch (keep_of(g, l)) {
    case KEEP_INPUT:
        return 0;
    case KEEP_NO_ATTN:
        return F_ALL & ~F_ATTN_OUT;
    default:
        return F_ALL;
    }
}

/* ... of which these in fp32 */
static unsigned slot_fields(const dt_gpt *g, int l) {
    return kept_fields(g, l) & (g->compress ? ~(unsigned)F_RESTORED : F_ALL);
}

/* fields of the shared set: everything when a held block reruns its whole forward; the
 * attention output when one reruns its attention; the restored tensors when a held block
 * stores int8 */
static unsigned shared_fields(const dt_gpt *g) {
    unsigned f = 0;
    if (holds_kept(g, KEEP_INPUT))
        f |= F_ALL;
    if (holds_kept(g, KEEP_NO_ATTN))
        f |= F_ATTN_OUT;
    if (g->compress && (holds_kept(g, KEEP_ALL) || holds_kept(g, KEEP_NO_ATTN)))
        f |= F_RESTORED;
    return f;
}

/* [rows, cols] of the int8-stored tensors for a micro-batch of N tokens */
typedef struct q8_shape {
    int64_t rows, cols;
} q8_shape;

static q8_shape q8_shape_of(const dt_gpt *g, unsigned bit, int64_t N) {
    const dt_block_dims *d = &g->dims;
    int64_t Nt = dt_block_rows_tp(&g->par, (int)N), Nr = dt_block_rows_res(&g->par, (int)N);
    switch (bit) {
    case F_QKV:
        return (q8_shape){N, dt_block_qkv_width(d) / g->par.sp->size};
    case F_ATT:
        return (q8_shape){Nt, (int64_t)d->NH * d->hs};
    case F_X2:
        return (q8_shape){Nr, d->C};
    default:
        return (q8_shape){Nt, d->F}; /* h, u */
    }
}

/* The int8-stored tensors: their field bit, their payload and their fp32 view (and bf16
 * view, where bf16 mode keeps the tensor in bf16), by name. */
#define NO_LP SIZE_MAX
static const struct {
    unsigned bit;
    size_t q8, acts, acts_lp; /* offsets in dt_gpt_q8_acts and dt_block_acts */
} STORED[] = {
    {F_QKV, offsetof(dt_gpt_q8_acts, qkv), offsetof(dt_block_acts, qkv), NO_LP},
    {F_ATT, offsetof(dt_gpt_q8_acts, att), offsetof(dt_block_acts, att), NO_LP},
    {F_X2, offsetof(dt_gpt_q8_acts, x2), offsetof(dt_block_acts, x2), NO_LP},
    {F_H, offsetof(dt_gpt_q8_acts, h), offsetof(dt_block_acts, h), offsetof(dt_block_acts, h_lp)},
    {F_U, offsetof(dt_gpt_q8_acts, u), offsetof(dt_block_acts, u), offsetof(dt_block_acts, u_lp)},
};
enum { N_STORED = sizeof STORED / sizeof STORED[0] };

static dt_gpt_q8 *q8_field(dt_gpt_q8_acts *q, int i) {
    return (dt_gpt_q8 *)((char *)q + STORED[i].q8);
}

static float *acts_field(const dt_block_acts *a, int i) {
    float *p;
    memcpy(&p, (const char *)a + STORED[i].acts, sizeof p);
    return p;
}

static dt_bf16 *acts_field_lp(const dt_block_acts *a, int i) {
    dt_bf16 *p = NULL;
    if (STORED[i].acts_lp != NO_LP)
        memcpy(&p, (const char *)a + STORED[i].acts_lp, sizeof p);
    return p;
}

/* int8 payload [rows, cols] and [rows] scales of each stored tensor, for the largest batch */
void dt_gpt_carve_q8(dt_gpt *g, dt_carver *cv, unsigned f, dt_gpt_q8_acts *q) {
    bool llama = g->dims.kind == DT_BLOCK_LLAMA;
    for (int i = 0; i < N_STORED; i++) {
        if (!(f & STORED[i].bit) || (STORED[i].bit == F_U && !llama))
            continue;
        q8_shape sh = q8_shape_of(g, STORED[i].bit, (int64_t)g->B * g->T);
        dt_gpt_q8 *t = q8_field(q, i);
        t->q = dt_gpt_carve(cv, (size_t)(sh.rows * sh.cols));
        t->scale = dt_gpt_carve(cv, (size_t)sh.rows * sizeof(float));
    }
}

/* bf16 storage of q|k|v and att; not under a ring, whose attention runs on fp32 operands
 * (rounded to bf16 for the products, as the kernel's fp32 entry points do in bf16 mode) */
bool dt_gpt_acts16(const dt_gpt *g) {
    return g->ctx.mm_type == DT_BF16 && !g->compress && g->par.ring.cp->size == 1;
}

/* Carve the fields of `f` (sized for the largest micro-batch) in dt_block_acts order. */
void dt_gpt_carve_fields(dt_gpt *g, dt_carver *cv, unsigned f, dt_block_acts *a) {
    const dt_block_dims *d = &g->dims;
    dt_gpt_rows r = dt_gpt_rows_max(g);
    size_t C = d->C, F = d->F, W = dt_block_qkv_width(d), A = (size_t)d->NH * d->hs;
    size_t heads = (size_t)d->NH / g->par.sp->size, f4 = sizeof(float);
    bool llama = d->kind == DT_BLOCK_LLAMA, bf = g->ctx.mm_type == DT_BF16;
#define PIECE(bit, n) ((f & (bit)) ? dt_gpt_carve(cv, (n)) : NULL)
    a->ln1_mean = PIECE(F_LN, r.Nr * f4);
    a->ln1_rstd = PIECE(F_LN, r.Nr * f4);
    size_t h2 = sizeof(dt_bf16);
    bool s16 = dt_gpt_acts16(g);
    a->qkv = s16 ? NULL : PIECE(F_QKV, r.Nt * W * f4);
    a->qkv16 = s16 ? PIECE(F_QKV, r.Nt * W * h2) : NULL;
    a->att = s16 ? NULL : PIECE(F_ATT, r.Nt * A * f4);
    a->att16 = s16 ? PIECE(F_ATT, r.Nt * A * h2) : NULL;
    a->lse = PIECE(F_LSE, r.N * heads * f4);
    a->x2 = PIECE(F_X2, r.Nr * C * f4);
    a->ln2_mean = PIECE(F_LN, r.Nr * f4);
    a->ln2_rstd = PIECE(F_LN, r.Nr * f4);
    /* h, u: fp32, or in bf16 mode bf16 (nn/block.h) */
    a->h = bf ? NULL : PIECE(F_H, r.Nt * F * f4);
    a->u = llama && !bf ? PIECE(F_U, r.Nt * F * f4) : NULL;
    a->h_lp = bf ? PIECE(F_H, r.Nt * F * sizeof(dt_bf16)) : NULL;
    a->u_lp = llama && bf ? PIECE(F_U, r.Nt * F * sizeof(dt_bf16)) : NULL;
#undef PIECE
}

void dt_gpt_carve_block_acts(dt_gpt *g, dt_carver *cv) {
    const dt_block_dims *d = &g->dims;
    dt_gpt_rows r = dt_gpt_rows_max(g);
    size_t C = d->C, F = d->F, W = dt_block_qkv_width(d), f4 = sizeof(float);
    int L = g->cfg.n_layer;
    /* the bf16 copies of matmul inputs are rebuilt in backward: one buffer for the norm
     * outputs and one for att and the MLP activation (never needed at once), for all blocks */
    bool lp = g->ctx.mm_type != DT_F32;
    size_t A = (size_t)d->NH * d->hs, wide = A > F ? A : F;
    dt_bf16 *ln_lp = lp ? dt_gpt_carve(cv, r.Nt * C * sizeof(dt_bf16)) : NULL;
    dt_bf16 *act_lp = lp ? dt_gpt_carve(cv, r.Nt * wide * sizeof(dt_bf16)) : NULL;
    for (size_t slot = 0; slot < (size_t)g->n_slots; slot++) {
        size_t start = cv->used, end = start; /* each chunk's sets from the slot's start */
        for (int l = 0; l < L; l++) {
            if (!dt_gpt_holds_block(g, l))
                continue;
            if (dt_gpt_starts_chunk(g, l + 1))
                cv->used = start;
            size_t at = cv->used;
            dt_block_acts *a = &g->acts[slot * L + l];
            a->ln1_lp = a->ln2_lp = ln_lp;
            a->att_lp = a->g_lp = act_lp;
            if (!g->offload) /* else its set lives on disk and passes through the frames */
                dt_gpt_carve_fields(g, cv, slot_fields(g, l), a);
            if (g->compress && !g->offload)
                dt_gpt_carve_q8(g, cv, kept_fields(g, l), &g->q8[slot * L + l]);
            if (g->wgrad) {
                dt_block_wgrad *w = &g->wgrad[slot * L + l];
                w->dqkv = dt_gpt_carve(cv, r.Nt * W * f4);
                w->dproj = dt_gpt_carve(cv, r.Nt * C * f4);
                w->dh = dt_gpt_carve(cv, r.Nt * F * f4);
                w->du = d->kind == DT_BLOCK_LLAMA ? dt_gpt_carve(cv, r.Nt * F * f4) : NULL;
                w->ddown = dt_gpt_carve(cv, r.Nt * C * f4);
            }
            /* what the timeline marks in use from this block's forward to its backward:
             * its saved set and its input (on disk under act_offload) */
            g->saved_bytes[slot * L + l] = cv->used - at + (g->offload ? 0 : r.Nr * C * f4);
            end = cv->used > end ? cv->used : end;
        }
        cv->used = end;
    }
    if (g->offload) {
        unsigned fields = 0, q8 = 0;
        for (int l = 0; l < L; l++)
            if (dt_gpt_holds_block(g, l)) {
                fields |= slot_fields(g, l);
                q8 |= g->compress ? kept_fields(g, l) : 0;
            }
        dt_gpt_carve_frames(g, cv, fields, q8);
        for (int i = 0; i < DT_GPT_FRAMES; i++) {
            g->frames[i].acts.ln1_lp = g->frames[i].acts.ln2_lp = ln_lp;
            g->frames[i].acts.att_lp = g->frames[i].acts.g_lp = act_lp;
        }
    }
    unsigned sf = shared_fields(g);
    dt_gpt_carve_fields(g, cv, sf, &g->shared);
    g->shared_slot = g->shared_block = -1;
    g->shared.ln1_lp = g->shared.ln2_lp = ln_lp;
    g->shared.att_lp = g->shared.g_lp = act_lp;
    g->ac_out = holds_kept(g, KEEP_INPUT) ? dt_gpt_carve(cv, r.Nr * C * f4) : NULL;
}

/* ---- running a block ------------------------------------------------------------------- */

/* The fields of `own` that block l keeps, the shared set's for the rest. */
static dt_block_acts merged(const dt_gpt *g, const dt_block_acts *own, int l) {
    dt_block_acts o = *own, *s = (dt_block_acts *)&g->shared;
    unsigned f = slot_fields(g, l);
    if (!(f & F_LN))
        o.ln1_mean = o.ln1_rstd = o.ln2_mean = o.ln2_rstd = NULL;
    if (!(f & F_QKV))
        o.qkv = NULL, o.qkv16 = NULL;
    if (!(f & F_ATT))
        o.att = NULL, o.att16 = NULL;
    if (!(f & F_LSE))
        o.lse = NULL;
    if (!(f & F_X2))
        o.x2 = NULL;
    if (!(f & F_H))
        o.h = NULL, o.h_lp = NULL;
    if (!(f & F_U))
        o.u = NULL, o.u_lp = NULL;
    return (dt_block_acts){
        .ln1_mean = o.ln1_mean ? o.ln1_mean : s->ln1_mean,
        .ln1_rstd = o.ln1_rstd ? o.ln1_rstd : s->ln1_rstd,
        .qkv = o.qkv ? o.qkv : s->qkv,
        .att = o.att ? o.att : s->att,
        .lse = o.lse ? o.lse : s->lse,
        .x2 = o.x2 ? o.x2 : s->x2,
        .ln2_mean = o.ln2_mean ? o.ln2_mean : s->ln2_mean,
        .ln2_rstd = o.ln2_rstd ? o.ln2_rstd : s->ln2_rstd,
        .h = o.h ? o.h : s->h,
        .u = o.u ? o.u : s->u,
        .h_lp = o.h_lp ? o.h_lp : s->h_lp,
        .u_lp = o.u_lp ? o.u_lp : s->u_lp,
        .att_lp = o.att_lp ? o.att_lp : s->att_lp,
        .g_lp = o.g_lp ? o.g_lp : s->g_lp,
        .ln1_lp = o.ln1_lp ? o.ln1_lp : s->ln1_lp,
        .ln2_lp = o.ln2_lp ? o.ln2_lp : s->ln2_lp,
        .qkv16 = o.qkv16 ? o.qkv16 : s->qkv16,
        .att16 = o.att16 ? o.att16 : s->att16,
    };
}

/* The slot's own fields, the shared set's for the rest. */
static dt_block_acts view(const dt_gpt *g, int slot, int l) {
    return merged(g, &g->acts[(size_t)slot * g->cfg.n_layer + l], l);
}

/* Where (slot, l)'s int8 payloads are: its frame's under act_offload, else the slot's. */
static dt_gpt_q8_acts *q8_of(const dt_gpt *g, const dt_gpt_frame *f, int slot, int l) {
    return f ? (dt_gpt_q8_acts *)&f->q8 : &g->q8[(size_t)slot * g->cfg.n_layer + l];
}

/* The int8-stored tensors block l keeps, of the view a, to (store) or from payloads q. */
static void int8_move(dt_gpt *g, dt_gpt_q8_acts *q, int l, int N, dt_block_acts *a, bool store) {
    unsigned kept = kept_fields(g, l);
    for (int i = 0; i < N_STORED; i++) {
        dt_gpt_q8 *t = q8_field(q, i);
        if (!t->q || !(kept & STORED[i].bit))
            continue;
        q8_shape sh = q8_shape_of(g, STORED[i].bit, N);
        float *x = acts_field(a, i);
        dt_bf16 *x_lp = x ? NULL : acts_field_lp(a, i); /* bf16 storage */
        if (store && x_lp)
            dt_quant_int8_rows_bf16(t->q, t->scale, x_lp, sh.rows, sh.cols);
        else if (store)
            dt_quant_int8_rows(t->q, t->scale, x, sh.rows, sh.cols);
        else if (x_lp)
            dt_dequant_int8_rows_bf16(x_lp, t->q, t->scale, sh.rows, sh.cols);
        else
            dt_dequant_int8_rows(x, t->q, t->scale, sh.rows, sh.cols);
    }
}

/* Does block l's forward or backward write the shared set? */
static bool uses_shared(const dt_gpt *g, int l) { return g->compress || keep_of(g, l) != KEEP_ALL; }

/* The shared set now holds block l's complete set of this slot (or, invalid, nobody's). */
static void shared_holds(dt_gpt *g, int slot, int l, bool complete) {
    g->shared_slot = complete ? slot : -1;
    g->shared_block = complete ? l : -1;
}

/* (slot, l)'s saved set in memory: its frame's fields under act_offload, the slot's else;
 * *x becomes the frame's copy of the block's input */
static dt_block_acts set_of(const dt_gpt *g, const dt_gpt_frame *f, int slot, int l,
                            const float **x) {
    if (!f)
        return view(g, slot, l);
    *x = f->x;
    return merged(g, &f->acts, l);
}

dt_status dt_gpt_block_forward(dt_gpt *g, int slot, int l, const float *x, int B, int T,
                               float *out) {
    dt_gpt_frame *f = NULL;
    if (g->offload)
        DT_TRY(dt_gpt_frame_for_forward(g, slot, l, &f));
    dt_block_acts a = f ? merged(g, &f->acts, l) : view(g, slot, l);
    if (uses_shared(g, l))
        shared_holds(g, slot, l, false);
    dt_status st = dt_block_forward(&g->ctx, &g->dims, &g->par, &g->blocks[l], &g->seq, x, B, T, &a,
                                    &g->scratch, out);
    if (st != DT_OK) {
        if (f)
            dt_gpt_frame_done(f);
        return st;
    }
    if (g->compress)
        int8_move(g, q8_of(g, f, slot, l), l, B * T, &a, true);
    else if (uses_shared(g, l))
        shared_holds(g, slot, l, true);
    if (!f)
        return DT_OK;
    if (g->evaluating) { /* no backward follows: the set need not reach the disk */
        dt_gpt_frame_forget(f);
        return DT_OK;
    }
    memcpy(f->x, x, (size_t)dt_block_rows_res(&g->par, B * T) * g->dims.C * sizeof(float));
    dt_gpt_frame_put(g, f, slot, l);
    return DT_OK;
}

/* Rebuild, into the shared set, what the slot did not keep for block l. Under ZeRO-3 this
 * runs inside the backward's (or W pass's) enter/leave, where the weights are gathered. */
static dt_status rebuild(dt_gpt *g, const dt_gpt_frame *f, int slot, int l, const float *x, int B,
                         int T, dt_block_acts *a) {
    keep k = keep_of(g, l);
    if (!uses_shared(g, l) || (g->shared_slot == slot && g->shared_block == l))
        return DT_OK;
    shared_holds(g, slot, l, false); /* until the backward is done with it */
    if (k == KEEP_INPUT) {
        return dt_block_forward(&g->ctx, &g->dims, &g->par, &g->blocks[l], &g->seq, x, B, T, a,
                                &g->scratch, g->ac_out);
    }
    if (g->compress)
        int8_move(g, q8_of(g, f, slot, l), l, B * T, a, false);
    if (k == KEEP_NO_ATTN)
        DT_TRY(dt_block_rerun_attention(&g->ctx, &g->dims, &g->par, &g->seq, B, T, a, &g->scratch));
    return DT_OK;
}

/* Under act_offload: the frame with (slot, l)'s set, and `next`'s asked for ahead. */
static dt_status fetch(dt_gpt *g, int slot, int l, int next, dt_gpt_frame **f) {
    *f = NULL;
    if (!g->offload)
        return DT_OK;
    DT_TRY(dt_gpt_frame_fetch(g, slot, l, f));
    dt_status st = next >= 0 ? dt_gpt_frame_ahead(g, slot, next) : DT_OK;
    if (st != DT_OK)
        dt_gpt_frame_done(*f);
    return st;
}

dt_status dt_gpt_block_backward(dt_gpt *g, int slot, int l, int next, const float *x, int B, int T,
                                dt_block_wgrad *wg, float *dres) {
    dt_gpt_frame *f;
    DT_TRY(fetch(g, slot, l, next, &f));
    dt_block_acts a = set_of(g, f, slot, l, &x);
    dt_status st = rebuild(g, f, slot, l, x, B, T, &a);
    if (uses_shared(g, l))
        shared_holds(g, slot, l, false);
    if (st == DT_OK)
        st = dt_block_backward(&g->ctx, &g->dims, &g->par, &g->blocks[l], &g->seq, x, B, T, &a,
                               &g->scratch, wg, dres);
    if (f)
        dt_gpt_frame_done(f);
    return st;
}

/* The W pass comes after other blocks reused the shared set: rebuild again. */
dt_status dt_gpt_block_weights(dt_gpt *g, int slot, int l, int next, const float *x, int B, int T,
                               dt_block_wgrad *wg) {
    dt_gpt_frame *f;
    DT_TRY(fetch(g, slot, l, next, &f));
    dt_block_acts a = set_of(g, f, slot, l, &x);
    dt_status st = rebuild(g, f, slot, l, x, B, T, &a);
    if (uses_shared(g, l))
        shared_holds(g, slot, l, false);
    if (st == DT_OK)
        st = dt_block_weight_backward(&g->ctx, &g->dims, &g->par, &g->blocks[l], x, B, T, &a,
                                      &g->scratch, wg);
    if (f)
        dt_gpt_frame_done(f);
    return st;
}
