/* The video DiT's rows of the memory model (plan/memory.c; see memory.h): its parameter arena
 * unit by unit, from the DiT's tensor table (models/dit.h: DiT / Open-Sora names, each tensor
 * padded to 16 floats; under tp a block's q|k|v and fc1 rows and proj and fc2 columns are
 * split, everything else is whole), and its activation and transient arenas, batch rows and
 * pipeline boundaries, from the carves of models/dit.c and dit_fwd.c.
 *
 * Pure: no MPI, no tensors; thread-safe.
 */
#include "plan/plan_impl.h"

#include <string.h>

static int64_t pad16(int64_t floats) { return (floats + 15) / 16 * 16; }

/* A linear [out, in] and its bias [out], each padded. */
static int64_t linear_floats(int64_t out, int64_t in) { return pad16(out * in) + pad16(out); }

static int64_t patch_dim(const dt_model_config *m) {
    return (int64_t)m->channels * m->patch_t * m->patch_h * m->patch_w;
}

/* A text token's features: the byte encoder's three neighbours, or the embeddings' width. */
static int64_t text_in(const dt_model_config *m) {
    return m->text_dim > 0 ? m->text_dim : 3 * (int64_t)m->n_embd;
}

/* The text embedder (models/dit_text.c): y_proj.fc1 [C, Din], fc2 [C, C], the byte and
 * position tables (bytes only) and the null text [Lt, C]. */
static int64_t text_embedder_floats(const dt_model_config *m) {
    int64_t C = m->n_embd, Lt = m->text_len;
    if (Lt == 0)
        return 0;
    return linear_floats(C, text_in(m)) + linear_floats(C, C) + pad16(Lt * C) +
           (m->text_dim > 0 ? 0 : pad16(256 * C) + pad16(Lt * C));
}

int64_t dt_plan_dit_unit_floats(const dt_model_config *m, int u, int tp) {
    int64_t C = m->n_embd, P = patch_dim(m), Ct = C / tp, Ft = DT_PLAN_DIT_MLP_RATIO * C / tp;
    if (u == 0) /* x_embedder.proj, t_embedder.mlp.0 (256 timestep features), .2, label table,
                 * the text embedder */
        return linear_floats(C, P) + linear_floats(C, DT_PLAN_DIT_FREQ_DIM) + linear_floats(C, C) +
               (m->n_classes > 0 ? pad16((m->n_classes + 1) * C) : 0) + text_embedder_floats(m);
    if (u > m->n_layer) /* final_layer.adaLN_modulation.1, final_layer.linear */
        return linear_floats(2 * C, C) + linear_floats(P, C);
    /* adaLN_modulation.1 (whole), attn.qkv (each section's rows split), attn.proj (columns
     * split, bias whole), mlp.fc1 (rows), mlp.fc2 (columns, bias whole); with text the
     * cross-attention's q, k (no bias), v (rows split) and proj (columns, bias whole) */
    int64_t cross = m->text_len > 0 ? 2 * linear_floats(Ct, C) + pad16(Ct * C) /* k: no bias */ +
                                          pad16(C * Ct) + pad16(C)
                                    : 0;
    return linear_floats(6 * C, C) + linear_floats(3 * Ct, C) + pad16(C * Ct) + pad16(C) +
           linear_floats(Ft, C) + pad16(C * Ft) + pad16(C) + cross;
}

double dt_plan_dit_param_count(const dt_model_config *m) {
    double C = m->n_embd, P = (double)patch_dim(m), L = m->n_layer;
    double y = m->n_classes > 0 ? (m->n_classes + 1.0) * C : 0;
    double Lt = m->text_len, text = 0;
    if (Lt > 0) /* the embedder; per block q, k, v and proj */
        text = (C * (double)text_in(m) + C) + (C * C + C) + Lt * C +
               (m->text_dim > 0 ? 0 : 256 * C + Lt * C) + L * (4 * C * C + 3 * C);
    return text + (C * P + C) + (C * DT_PLAN_DIT_FREQ_DIM + C) + (C * C + C) + y +
           L * (6 * C * C + 6 * C + 3 * C * C + 3 * C + C * C + C +
                2 * DT_PLAN_DIT_MLP_RATIO * C * C + DT_PLAN_DIT_MLP_RATIO * C + C) +
           (2 * C * C + 2 * C) + (P * C + P);
}

/* ---- activations and transients: the carves of models/dit.c and dit_fwd.c ------------- */

static int64_t pad64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

enum { F4 = 4, H2 = 2 };

/* A block's saved fields (models/dit_fwd.c), as bits. */
enum {
    F_MOD = 1 << 0, /* mod [B, 6C], aff [B, 4C] */
    F_LN = 1 << 1,  /* mean1, rstd1, mean2, rstd2: [Nr] each */
    F_M1 = 1 << 2,
    F_QKV = 1 << 3,
    F_Y = 1 << 4,
    F_LSE = 1 << 5,
    F_A = 1 << 6,
    F_X2 = 1 << 7,
    F_M2 = 1 << 8,
    F_H = 1 << 9,
    F_F = 1 << 10,
    F_XQ = 1 << 11,  /* with text: the cross-attention's queries [Nt, Ct] */
    F_XKV = 1 << 12, /* its keys and values [B Lt, Ct] each */
    F_XO = 1 << 13,  /* its output [Nt, Ct] and log-sum-exp [Nt, NHt] */
    F_X3 = 1 << 14,  /* the residual after it [Nr, C] */
    F_ALL = (1 << 15) - 1,
    F_TEXT = F_XQ | F_XKV | F_XO | F_X3,
    F_ATTN_OUT = F_Y | F_LSE | F_XO, /* what selective checkpointing reruns */
    /* what act_compress = int8 keeps as int8 rows with one fp32 scale each */
    F_INT8 = F_M1 | F_QKV | F_Y | F_A | F_X2 | F_M2 | F_H | F_F,
};

typedef struct dit_rank {
    const dt_plan_dit_rank *r;
    int64_t B, S, C, P, F, L, clip;
    int64_t S_full, Tt;  /* a whole clip's tokens; a ring rank's time tokens (S: its tokens) */
    int64_t Nt, Nr;      /* rows inside the tp region (B S / sp) and of the residual stream
                          * (Nt / tp under Megatron-SP, else Nt) */
    int64_t Ct, Ft, NHt; /* this tp rank's attention width, MLP width and heads */
    bool compress;       /* act_compress = int8 */
    bool st;             /* spatial_temporal attention */
    int64_t T, Din;      /* text rows of a micro-batch (B Lt; 0: no text), a token's features */
    bool bytes;          /* the text is the caption's bytes (text_dim 0) */
} dit_rank;

/* A saved tensor of the fields: its bit, rows and columns (a row of the attention order's
 * elements, whatever its layout). */
typedef struct piece {
    unsigned bit;
    int64_t rows, cols;
} piece;

enum { N_PIECES = 21 };

static void pieces(const dit_rank *k, piece p[N_PIECES]) {
    int64_t B = k->B, Nr = k->Nr, Nt = k->Nt, C = k->C, Ct = k->Ct;
    const piece all[N_PIECES] = {{F_MOD, B, 6 * C}, {F_MOD, B, 4 * C},   {F_LN, Nr, 1},
                                 {F_LN, Nr, 1},     {F_M1, Nr, C},       {F_QKV, Nt, 3 * Ct},
                                 {F_Y, Nt, Ct},     {F_LSE, Nt, k->NHt}, {F_A, Nr, C},
                                 {F_X2, Nr, C},     {F_XQ, Nt, Ct},      {F_XKV, k->T, Ct},
                                 {F_XKV, k->T, Ct}, {F_XO, Nt, Ct},      {F_XO, Nt, k->NHt},
                                 {F_X3, Nr, C},     {F_LN, Nr, 1},       {F_LN, Nr, 1},
                                 {F_M2, Nr, C},     {F_H, Nt, k->Ft},    {F_F, Nr, C}};
    memcpy(p, all, sizeof all);
}

/* the fields a model has: the cross-attention's with text only */
static unsigned model_fields(const dit_rank *k) {
    return k->T ? (unsigned)F_ALL : (unsigned)F_ALL & ~(unsigned)F_TEXT;
}

/* Bytes of the fields f in fp32, each piece 64-byte carved. */
static int64_t fields_bytes(const dit_rank *k, unsigned f) {
    piece p[N_PIECES];
    pieces(k, p);
    int64_t b = 0;
    for (int i = 0; i < N_PIECES; i++)
        b += f & p[i].bit ? pad64(p[i].rows * p[i].cols * F4) : 0;
    return b;
}

/* int8 storage of the fields f: an int8 [rows, cols] payload and one fp32 scale per row. */
static int64_t int8_bytes(const dit_rank *k, unsigned f) {
    piece p[N_PIECES];
    pieces(k, p);
    int64_t b = 0;
    for (int i = 0; i < N_PIECES; i++)
        if (f & p[i].bit & F_INT8)
            b += pad64(p[i].rows * p[i].cols) + pad64(p[i].rows * F4);
    return b;
}

/* What block l keeps per slot under plugin.ac: all, all but the attention output
 * (selective), or nothing but its input, a residual position (full). */
static unsigned kept_fields(const dit_rank *k, int l) {
    switch (dt_plan_ac_rerun(k->r->plugin, l)) {
    case DT_PLAN_RERUN_BLOCK:
        return 0;
    case DT_PLAN_RERUN_ATTENTION:
        return model_fields(k) & ~(unsigned)F_ATTN_OUT;
    default:
        return model_fields(k);
    }
}

static bool holds_rerun(const dit_rank *k, dt_plan_rerun what) {
    for (int l = 0; l < k->L; l++)
        if (k->r->held[l + 1] && dt_plan_ac_rerun(k->r->plugin, l) == what)
            return true;
    return false;
}

/* A rank's chunks are its runs of consecutive held units; a slot holds one (chunk,
 * micro-batch), each chunk's positions and block sets from the slot's start (models/dit.c).
 * Residual positions a slot keeps: each held block's input and output, the embedders'
 * output (position 0) and the final layer's input (L); the most of one chunk. */
static int residual_positions(const dit_rank *k) {
    int most = 0, L = (int)k->L;
    const bool *h = k->r->held;
    for (int p = 0, n = 0; p <= L; p++) {
        if (!((p < L && h[p + 1]) || (p > 0 && h[p]) || (p == 0 && h[0]) || (p == L && h[L + 1])))
            continue;
        if (!h[p]) /* kept, so the input of a chunk's first unit */
            n = 0;
        most = ++n > most ? n : most;
    }
    return most;
}

/* Split backward (zero-bubble schedules): the output gradients of a block's matmuls its
 * weight pass reads, per slot: adaLN [B, 6C], q|k|v [Nt, 3Ct], proj [Nt, C], fc1 [Nt, Ft],
 * fc2 [Nt, C]; with text the cross-attention's q [Nt, Ct] and proj [Nt, C]. */
static int64_t wgrad_bytes(const dit_rank *k) {
    int64_t Nt = k->Nt, C = k->C;
    return pad64(k->B * 6 * C * F4) + pad64(Nt * 3 * k->Ct * F4) + 2 * pad64(Nt * C * F4) +
           pad64(Nt * k->Ft * F4) + (k->T ? pad64(Nt * k->Ct * F4) + pad64(Nt * C * F4) : 0);
}

/* A position: the residual rows [Nr, C] then silu(c) [B, C], with text then the text
 * sequences [B Lt, C] and their token counts [B], 16-float aligned. */
static int64_t pos_stride(const dit_rank *k) {
    return pad16((k->Nr + k->B) * k->C + (k->T ? k->T * k->C + k->B : 0));
}

static int64_t acts_arena(const dit_rank *k) {
    const dt_plan_dit_rank *r = k->r;
    int64_t B = k->B, Nr = k->Nr, C = k->C, per_slot = 0, b = 0;
    bool first = r->held[0], last = r->held[k->L + 1];
    per_slot += pad64(residual_positions(k) * pos_stride(k) * F4) + pad64(B * C * F4);
    if (k->T) /* the text sequences, their token counts */
        per_slot += pad64(k->T * C * F4) + pad64(B * 4);
    if (k->T && first) /* the text's features, fc1 output, bytes */
        per_slot +=
            pad64(k->T * k->Din * F4) + pad64(k->T * C * F4) + (k->bytes ? pad64(k->T * 4) : 0);
    if (first) /* patches, timestep features, t_fc1 out and its silu, c, labels */
        per_slot += pad64(Nr * k->P * F4) + pad64(B * DT_PLAN_DIT_FREQ_DIM * F4) +
                    3 * pad64(B * C * F4) + pad64(B * 4);
    if (last) /* final shift/scale, its LN affine, mean, rstd, modulated norm */
        per_slot += 2 * pad64(B * 2 * C * F4) + 2 * pad64(Nr * F4) + pad64(Nr * C * F4);
    int64_t blocks = 0, chunk_bytes = 0; /* the largest chunk's block sets, and this one's */
    for (int l = 0; l < k->L; l++) {
        if (!r->held[l + 1])
            continue;
        if (!r->held[l]) /* the first block of a chunk */
            chunk_bytes = 0;
        unsigned kept = kept_fields(k, l);
        /* int8 storage: the kept tensors of F_INT8 as payloads, the rest in fp32 */
        chunk_bytes += k->compress ? fields_bytes(k, kept & ~(unsigned)F_INT8) + int8_bytes(k, kept)
                                   : fields_bytes(k, kept);
        chunk_bytes += r->split ? wgrad_bytes(k) : 0;
        blocks = blocks > chunk_bytes ? blocks : chunk_bytes;
    }
    per_slot += blocks;
    b += r->n_slots * per_slot;
    /* the shared set: what a full rerun writes (and its discarded output), the attention
     * output a selective one writes, the int8-kept tensors restored before a backward */
    bool full = holds_rerun(k, DT_PLAN_RERUN_BLOCK);
    unsigned shared = full ? F_ALL : holds_rerun(k, DT_PLAN_RERUN_ATTENTION) ? F_ATTN_OUT : 0;
    if (k->compress &&
        (holds_rerun(k, DT_PLAN_RERUN_NONE) || holds_rerun(k, DT_PLAN_RERUN_ATTENTION)))
        shared |= F_INT8;
    b += fields_bytes(k, shared & model_fields(k)) + (full ? pad64(Nr * C * F4) : 0);
    b += pad64(k->S_full * C * F4); /* the fixed positions */
    if (last)
        b += pad64(B * k->clip * F4); /* the unpatchified output */
    return b;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Ring attention's scratch (nn/ring_attn.c) for the attention that goes around the ring (full,
 * or temporal under spatial_temporal): two key/value blocks in flight and three gradient
 * blocks of the attention rows (all B S of Ct / sp under Ulysses, else the rank's Nt of Ct),
 * and one chunk pair's output and log-sum-exp. */
static int64_t ring_work(const dit_rank *k) {
    const dt_plan_dit_rank *r = k->r;
    if (r->cp <= 1)
        return 0;
    int64_t T = k->st ? k->Tt : k->S, width = k->Ct / r->sp, heads = k->NHt / r->sp;
    int64_t rows = r->sp > 1 ? k->B * k->S : k->Nt, Tc = T / r->cp_chunks;
    return 5 * rows * 2 * width + Tc * width + heads * Tc;
}

static int64_t temp_arena(const dit_rank *k) {
    const dt_plan_dit_rank *r = k->r;
    int64_t B = k->B, Nr = k->Nr, Nt = k->Nt, C = k->C, F = k->F, P = k->P, b = 0;
    bool sp = r->sp > 1, tp = r->tp > 1, seq = r->sequence_tp && tp, last = r->held[k->L + 1];
    int64_t rows3 = pad64(Nt * 3 * k->Ct * F4), rows = pad64(Nt * k->Ct * F4);
    int64_t rowsF = pad64(Nt * k->Ft * F4), rowsC = pad64(Nt * C * F4);
    b += rows3 + (sp ? 2 * rows3 : 0) + 2 * rows + rowsF; /* qkv_rows, packed, qkvh, att, gel */
    b += tp ? rowsC : 0;                                  /* a row-parallel matmul's part */
    b += seq ? rowsC : 0;                                 /* a norm output gathered */
    b += last ? 2 * pad64(Nr * P * F4) : 0;               /* tok_out, tok_tgt */
    /* all-to-all, COPY-adjoint and reduce-scatter work; the ring's, in the same buffer */
    int64_t work = sp || tp ? Nt * max64(3 * k->Ct, C) : 0;
    work = max64(work, ring_work(k));
    b += work ? pad64(work * F4) : 0;
    bool text0 = k->T && r->held[0];
    if (r->lp) { /* 16-bit operands: the widest matmul input and output over Nt rows, or the
                  * text's B Lt rows */
        int64_t in = max64(max64(C, F), max64(P, DT_PLAN_DIT_FREQ_DIM));
        int64_t out = max64(max64(6 * C, F), P);
        int64_t lin = max64(Nt * in, max64(k->T * k->Din, k->T * C));
        b += pad64(lin * H2) + (r->training ? pad64(max64(Nt * out, k->T * C) * H2) : 0);
    }
    b += text0 ? pad64(k->T * C * F4) : 0; /* the text embedder's GELU output */
    if (k->T) /* the cross-attention's keys transposed, each clip's key count */
        b += pad64(2 * k->T * k->Ct * F4) + pad64(B * 4);
    if (!r->training)
        return b;
    b += pad64(r->n_grads * pos_stride(k) * F4);       /* the boundary gradient buffers */
    b += r->n_slots * (last ? pad64(Nr * P * F4) : 0); /* each slot's loss gradient */
    b += seq ? pad64(C * P * F4) : 0; /* the patch / final linear gradient summed over rows */
    b += 2 * rowsC + 2 * rowsF + 2 * rows3 + rows;      /* dA dB, dg dh, dqkv dqkvp, dattp */
    b += pad64(B * 6 * C * F4) + 3 * pad64(B * C * F4); /* dmod, dc, dts, dth */
    if (k->T)                                           /* the cross-attention's dq, dk, dv */
        b += pad64(Nt * k->Ct * F4) + 2 * pad64(k->T * k->Ct * F4);
    if (text0) /* the embedder's two gradients, the byte features' */
        b += pad64(2 * k->T * C * F4) + (k->bytes ? pad64(k->T * k->Din * F4) : 0);
    return b;
}

void dt_plan_dit_arenas(const dt_model_config *m, const dt_plan_dit_rank *r, int64_t *acts,
                        int64_t *temp) {
    int64_t S_full =
        (int64_t)(m->frames / m->patch_t) * (m->height / m->patch_h) * (m->width / m->patch_w);
    int cp = r->cp > 1 ? r->cp : 1;
    int64_t S = S_full / cp, F = DT_PLAN_DIT_MLP_RATIO * (int64_t)m->n_embd;
    int64_t Nt = r->B * S / r->sp;
    dit_rank k = {.r = r,
                  .B = r->B,
                  .S = S,
                  .S_full = S_full,
                  .Tt = m->frames / m->patch_t / cp,
                  .st = m->attn == DT_DIT_ATTN_SPATIAL_TEMPORAL,
                  .C = m->n_embd,
                  .P = patch_dim(m),
                  .F = F,
                  .L = m->n_layer,
                  .clip = (int64_t)m->frames * m->channels * m->height * m->width,
                  .Nt = Nt,
                  .Nr = r->sequence_tp ? Nt / r->tp : Nt,
                  .Ct = m->n_embd / r->tp,
                  .Ft = F / r->tp,
                  .NHt = m->n_head / r->tp,
                  .compress = r->plugin->act_compress == DT_ACT_COMPRESS_INT8,
                  .T = (int64_t)r->B * m->text_len,
                  .Din = text_in(m),
                  .bytes = m->text_dim == 0};
    *acts = acts_arena(&k);
    *temp = temp_arena(&k);
}

/* an input row's text: n, then Lt bytes or Lt x text_dim values (models/dit.h) */
static int64_t text_row(const dt_model_config *m) {
    return m->text_len > 0 ? 1 + (int64_t)m->text_len * (m->text_dim > 0 ? m->text_dim : 1) : 0;
}

void dt_plan_dit_batch_bytes(const dt_model_config *m, int rows, int64_t *inputs,
                             int64_t *targets) {
    int64_t clip = (int64_t)m->frames * m->channels * m->height * m->width;
    *inputs = (int64_t)rows * (clip + 2 + text_row(m)) * F4;
    *targets = (int64_t)rows * clip * F4;
}

int64_t dt_plan_dit_boundary_bytes(const dt_model_config *m, int B, int cp, int sp,
                                   int rows_split) {
    int64_t S =
        (int64_t)(m->frames / m->patch_t) * (m->height / m->patch_h) * (m->width / m->patch_w);
    int64_t text = m->text_len > 0 ? (int64_t)B * m->text_len * m->n_embd + B : 0;
    return ((B * S / cp / sp / rows_split + B) * (int64_t)m->n_embd + text) * F4;
}
