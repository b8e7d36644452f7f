/* The memory model. See memory.h.
 *
 * Every count here is written from what the algorithm must keep, category by category:
 *   params   fp32 weights of the local arena (+ its 16-bit copy), or the ZeRO-3 shard
 *   grads    the local gradient arena, or the ZeRO-2/3 shard (+ the whole arena when a
 *            split-backward pipeline completes gradients long after their backward)
 *   optim    AdamW's m and v over the arena or this rank's part of the shard
 *   activations  one carved arena (per micro-batch slot: the residual positions and each
 *            held block's saved tensors; shared: norm/loss buffers) + rope tables + tokens
 *   comm     ZeRO-2/3 unit buffers (two rotating block buffers, first and last unit) and
 *            the pipeline's inbox buffers
 *   temp     one carved arena of transients (the LM head's logits chunk, the block's
 *            scratch, gradient rows) + the whole-state buffers a checkpoint, resume, load or
 *            export allocates for the time it runs
 * The memory features are each counted in the function named after them, from what their
 * code carves: plugin.ac (ac_kind_of, ac_shared_bytes), act_compress (act_compress_int8_payload),
 * offload (dt_plan_offload_chunk, optim_bytes); fp16 has bf16's sizes but for qkv and att,
 * which bf16 keeps in bf16 (acts16).
 */
#include "plan/memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buckets.h"
#include "plan/layout.h"
#include "plan/plan_impl.h"

static int64_t pad64(int64_t bytes) { return (bytes + 63) / 64 * 64; }
static int64_t pad16(int64_t floats) { return (floats + 15) / 16 * 16; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

enum { F4 = 4, H2 = 2 };

/* The layout as one rank sees it. */
typedef struct shape {
    const dt_config *c;
    bool gpt2, lp;
    int L, C, hs, T, tp, sp, pp, zero; /* T: the tokens of a sequence this rank holds */
    int T_read;                        /* tokens of a sequence as read (the batch buffers' rows) */
    int cp, ring_chunks;      /* the ring, and the chunks of a sequence a ring rank holds */
    int rows_split;           /* ranks the residual rows split over: tp under Megatron-SP */
    int grad_p, grad_rank;    /* gradient group (dp x sp) size and this rank's place in it */
    int pp_rank, mb, rows;    /* micro-batch and step rows per data-parallel rank */
    int64_t N, Nt, Nr;        /* tokens of a micro-batch: all, inside the tp region, residual */
    int64_t NH, NKV, F, W, A; /* local widths (this tp rank's) */
    int64_t vocab_rows;       /* vocabulary rows per tp rank, rounded up */
    bool held[DT_MAX_CHUNKS + 2];
    bool acts16;   /* bf16 without int8 storage: qkv and att kept in bf16 (models/gpt_ac.c) */
    bool bf16;     /* bf16 mode: the MLP's h, u kept in bf16 (nn/block.h) */
    bool act_disk; /* plugin.act_offload = disk */
    bool docs;     /* data.doc_mask: inputs carry document starts, positions restart */
    int positions; /* position rows (RoPE tables, wpe's gradient): T, or with documents the
                    * whole sequence's */
} shape;

static int ffn_width(const dt_model_config *m) {
    if (m->arch == DT_ARCH_GPT2)
        return 4 * m->n_embd;
    if (m->ffn_hidden > 0)
        return m->ffn_hidden;
    return ((8 * m->n_embd + 2) / 3 + 63) / 64 * 64; /* Llama: 8C/3 rounded up to 64 */
}

static int kv_heads(const dt_model_config *m) {
    return m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
}

/* ---- the parameter arena: the table, padded, sharded over tp ---------------------------- */

/* Floats unit u takes in an arena split over `tp` (1: the whole model's table). Tensors in
 * HuggingFace order, each padded to 16 floats; vocabulary and column-parallel matrices split
 * by rows (rounded up), row-parallel ones by columns, GPT-2's fused c_attn by thirds. */
static int64_t unit_floats(const dt_model_config *m, int u, int tp) {
    if (m->arch == DT_ARCH_DIT)
        return dt_plan_dit_unit_floats(m, u, tp);
    int64_t C = m->n_embd, V = cdiv(m->vocab_size, tp), F = ffn_width(m);
    int64_t kv = (int64_t)kv_heads(m) * (C / m->n_head);
    int L = m->n_layer;
    if (m->arch == DT_ARCH_GPT2) {
        if (u == 0)
            return pad16(V * C) + pad16((int64_t)m->max_seq_len * C);
        if (u > L)
            return 2 * pad16(C);
        return 4 * pad16(C) + pad16(3 * C / tp * C) + pad16(3 * C / tp) + pad16(C * (C / tp)) +
               pad16(C) + pad16(cdiv(F, tp) * C) + pad16(cdiv(F, tp)) + pad16(C * (F / tp)) +
               pad16(C);
    }
    if (u == 0)
        return pad16(V * C);
    if (u > L)
        return pad16(C) + pad16(V * C);
    return 2 * pad16(C) + pad16(cdiv(C, tp) * C) + 2 * pad16(cdiv(kv, tp) * C) +
           pad16(C * (C / tp)) + 2 * pad16(cdiv(F, tp) * C) + pad16(C * (F / tp));
}

int dt_plan_local_units(const dt_model_config *m, int tp, const bool *held, int64_t *ucount) {
    int n = 0, L = m->n_layer;
    int64_t block = unit_floats(m, 1, tp); /* every block's table is alike */
    for (int u = 0; u < L + 2; u++) {
        if (held && !held[u])
            continue;
        ucount[n] = u >= 1 && u <= L ? block : unit_floats(m, u, tp);
        if (u == L + 1 && m->arch == DT_ARCH_GPT2 && held && !held[0])
            ucount[n] += pad16(cdiv(m->vocab_size, tp) * m->n_embd);
        n++;
    }
    return n;
}

/* ---- activations: per slot, per held block, and shared --------------------------------- */

static bool holds_block(const shape *s, int l) { return s->held[l + 1]; }
static bool holds_final(const shape *s) { return s->held[s->L + 1]; }

/* The saved fields of a block (the carve of models/gpt_ac.c), as bits. */
enum {
    A_LN = 1 << 0, /* ln1/ln2 mean and rstd: four [Nr] */
    A_QKV = 1 << 1,
    A_ATT = 1 << 2,
    A_LSE = 1 << 3,
    A_X2 = 1 << 4,
    A_H = 1 << 5,
    A_U = 1 << 6, /* Llama */
    A_ALL = (1 << 7) - 1,
    A_ATTN_OUT = A_ATT | A_LSE,                /* what selective reruns */
    A_INT8 = A_QKV | A_ATT | A_X2 | A_H | A_U, /* what act_compress stores as int8 */
    A_RESTORED = A_INT8,                       /* not kept per slot under int8 */
};

int dt_plan_fresh_block(const dt_plugin_config *p, int u0, int u1, int n_layer) {
    if (p->act_compress != DT_ACT_COMPRESS_NONE)
        return -1;
    for (int u = u1 - 1; u >= u0; u--)
        if (u >= 1 && u <= n_layer && dt_plan_ac_rerun(p, u - 1) != DT_PLAN_RERUN_NONE)
            return u - 1;
    return -1;
}

typedef enum ac_kind { AC_KEEP_ALL, AC_KEEP_NO_ATTN, AC_KEEP_INPUT } ac_kind;

/* plugin.ac: a fully checkpointed block keeps only its input (a residual position, kept
 * anyway), a selective one all but the attention core's output (att, lse). */
static ac_kind ac_kind_of(const shape *s, int l) {
    static const ac_kind of[] = {[DT_PLAN_RERUN_NONE] = AC_KEEP_ALL,
                                 [DT_PLAN_RERUN_ATTENTION] = AC_KEEP_NO_ATTN,
                                 [DT_PLAN_RERUN_BLOCK] = AC_KEEP_INPUT};
    return of[dt_plan_ac_rerun(&s->c->plugin, l)];
}

static bool holds_kind(const shape *s, ac_kind k) {
    for (int l = 0; l < s->L; l++)
        if (holds_block(s, l) && ac_kind_of(s, l) == k)
            return true;
    return false;
}

static unsigned ac_kept_fields(const shape *s, int l) {
    switch (ac_kind_of(s, l)) {
    case AC_KEEP_INPUT:
        return 0;
    case AC_KEEP_NO_ATTN:
        return A_ALL & ~(unsigned)A_ATTN_OUT;
    default:
        return A_ALL;
    }
}

static bool int8_on(const shape *s) { return s->c->plugin.act_compress == DT_ACT_COMPRESS_INT8; }

/* Bytes of the fields f in fp32 (h, u in bf16 mode: bf16), each piece 64-byte carved. */
static int64_t fields_bytes(const shape *s, unsigned f) {
    int64_t heads = s->NH / s->sp, b = 0;
    b += f & A_LN ? 4 * pad64(s->Nr * F4) : 0;
    b += f & A_QKV ? pad64(s->Nt * s->W * (s->acts16 ? H2 : F4)) : 0;
    b += f & A_ATT ? pad64(s->Nt * s->A * (s->acts16 ? H2 : F4)) : 0;
    b += f & A_LSE ? pad64(s->N * heads * F4) : 0;
    b += f & A_X2 ? pad64(s->Nr * s->C * F4) : 0;
    int64_t hu = s->bf16 ? H2 : F4;
    b += f & A_H ? pad64(s->Nt * s->F * hu) : 0;
    b += (f & A_U) && !s->gpt2 ? pad64(s->Nt * s->F * hu) : 0;
    return b;
}

/* plugin.act_compress = int8: each kept tensor of A_INT8 as an int8 [rows, cols] payload and
 * one fp32 scale per row; qkv [N, W/sp], att [Nt, A], x2 [Nr, C], h and u [Nt, F]. */
static int64_t act_compress_int8_payload(const shape *s, unsigned kept) {
    struct {
        unsigned bit;
        int64_t rows, cols;
    } t[] = {{A_QKV, s->N, s->W / s->sp},
             {A_ATT, s->Nt, s->A},
             {A_X2, s->Nr, s->C},
             {A_H, s->Nt, s->F},
             {A_U, s->Nt, s->F}};
    int64_t b = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if ((kept & t[i].bit) && !(t[i].bit == A_U && s->gpt2))
            b += pad64(t[i].rows * t[i].cols) + pad64(t[i].rows * F4);
    return b;
}

/* One block's saved tensors for one micro-batch: the kept fields, of which those restored
 * under int8 as payloads. */
static int64_t block_slot_bytes(const shape *s, int l) {
    unsigned kept = ac_kept_fields(s, l);
    if (!int8_on(s))
        return fields_bytes(s, kept);
    return fields_bytes(s, kept & ~(unsigned)A_RESTORED) + act_compress_int8_payload(s, kept);
}

/* Split backward (zero-bubble schedules): the matmuls' output gradients kept per slot until W. */
static int64_t block_wgrad_bytes(const shape *s) {
    int64_t b = pad64(s->Nt * s->W * F4) + pad64(s->Nt * s->C * F4) + pad64(s->Nt * s->F * F4) +
                pad64(s->Nt * s->C * F4);
    return s->gpt2 ? b : b + pad64(s->Nt * s->F * F4);
}

/* The shared set, carved once, that reruns and restores write into: every field when a held
 * block is fully checkpointed (+ its [Nr, C] output, ac_out), the attention output when one
 * is selective, the restored tensors when int8 is on and a held block keeps any. */
static int64_t ac_shared_bytes(const shape *s) {
    unsigned f = 0;
    bool full = holds_kind(s, AC_KEEP_INPUT);
    if (full)
        f |= A_ALL;
    if (holds_kind(s, AC_KEEP_NO_ATTN))
        f |= A_ATTN_OUT;
    if (int8_on(s) && (holds_kind(s, AC_KEEP_ALL) || holds_kind(s, AC_KEEP_NO_ATTN)))
        f |= A_RESTORED;
    return fields_bytes(s, f) + (full ? pad64(s->Nr * s->C * F4) : 0);
}

/* plugin.act_offload = disk (models/gpt_offload.c): is residual position p between two held
 * blocks, so passed on at once instead of kept (the next block's frame keeps a copy)? */
static bool act_disk_interior(const shape *s, int p) {
    return s->act_disk && p > 0 && p < s->L && holds_block(s, p - 1) && holds_block(s, p);
}

/* A rank's chunks are its runs of consecutive held units; a slot holds one (chunk,
 * micro-batch) at a time, each chunk's positions and saved sets from the slot's start
 * (models/gpt_ac.c). Residual positions a slot keeps: each held block's input and output,
 * the embedding's output and the final norm's input (distinct positions of 0..L); under
 * act_offload not those between two held blocks. The most of one chunk. */
static int residual_positions(const shape *s) {
    int most = 0;
    for (int p = 0, n = 0; p <= s->L; p++) {
        bool keep = (p < s->L && holds_block(s, p)) || (p > 0 && holds_block(s, p - 1)) ||
                    (p == 0 && s->held[0]) || (p == s->L && holds_final(s));
        if (!keep || act_disk_interior(s, p))
            continue;
        if (!s->held[p]) /* kept, so the input of a chunk's first unit */
            n = 0;
        most = ++n > most ? n : most;
    }
    return most;
}

/* plugin.act_offload = disk: the two frames every (slot, block)'s saved set passes through
 * to and from its record in the spill file, each the block's input, the fields any held block
 * keeps in fp32 and, under int8, the payloads any keeps; and the two buffers the passed-on
 * positions alternate in. Also the bytes of one record (a frame). */
static int64_t act_disk_frame_bytes(const shape *s) {
    unsigned fields = 0, kept = 0;
    for (int l = 0; l < s->L; l++)
        if (holds_block(s, l)) {
            kept |= ac_kept_fields(s, l);
            fields |= ac_kept_fields(s, l) & (int8_on(s) ? ~(unsigned)A_RESTORED : A_ALL);
        }
    return pad64(s->Nr * s->C * F4) + fields_bytes(s, fields) +
           (int8_on(s) ? act_compress_int8_payload(s, kept) : 0);
}

static int64_t act_disk_bytes(const shape *s) {
    bool interior = false;
    for (int p = 1; p < s->L; p++)
        interior |= act_disk_interior(s, p);
    return 2 * act_disk_frame_bytes(s) + (interior ? 2 * pad64(s->Nr * s->C * F4) : 0);
}

static int64_t acts_arena(const shape *s, int n_slots, bool split) {
    int64_t S = n_slots, b = pad64(S * residual_positions(s) * s->Nr * s->C * F4);
    if (s->lp) /* the 16-bit copies of matmul inputs, rebuilt in backward: shared by all
                * blocks, one for the norm outputs and one for att and the MLP activation */
        b += pad64(s->Nt * s->C * H2) + pad64(s->Nt * max64(s->A, s->F) * H2);
    bool any_block = false;
    int64_t slot = 0, chunk_bytes = 0; /* the largest chunk's saved sets, and this chunk's */
    for (int l = 0; l < s->L; l++) {
        if (!holds_block(s, l))
            continue;
        any_block = true;
        if (!s->held[l]) /* the first block of a chunk */
            chunk_bytes = 0;
        chunk_bytes +=
            (s->act_disk ? 0 : block_slot_bytes(s, l)) + (split ? block_wgrad_bytes(s) : 0);
        slot = max64(slot, chunk_bytes);
    }
    b += S * slot;
    if (s->act_disk && any_block)
        b += act_disk_bytes(s);
    b += ac_shared_bytes(s);
    if (holds_final(s))
        b += 2 * pad64(S * s->Nr * F4) + pad64(s->Nr * s->C * F4) +
             (s->lp ? pad64(s->Nt * s->C * H2) : 0) + pad64(s->Nt * F4);
    return b;
}

/* ---- transients ------------------------------------------------------------------------- */

/* Rows of the LM head's logits chunk: about 16 Mi floats (8 Mi when its 16-bit matrix is cast
 * beside them), at least 64 rows, in equal chunks (nn/lm_head.c). */
static int64_t head_chunk_rows(int64_t V, int64_t N, bool cast) {
    int64_t rows = ((int64_t)(cast ? 8 : 16) << 20) / (V > 0 ? V : 1);
    rows = rows < 64 ? 64 : rows;
    if (rows >= N)
        return N;
    return cdiv(N, cdiv(N, rows));
}

/* Scratch of the region ops: entering (copy: the whole [Nt, C]; gather: its own rows),
 * leaving (reduce: in place; reduce-scatter: the whole), and the Ulysses all-to-alls; a
 * region over one rank is skipped and needs none. */
static int64_t region_work(const shape *s) {
    bool sg = s->c->plugin.sp_mode == DT_SP_SPLIT_GATHER;
    int64_t enter = sg ? s->Nt * s->C / s->tp : s->Nt * s->C;
    int64_t leave = sg ? s->Nt * s->C : 0;
    int64_t q = s->N * s->W / s->sp, a = s->N * s->A / s->sp;
    if (s->tp == 1)
        enter = leave = 0;
    if (s->sp == 1)
        q = a = 0;
    /* ring attention (nn/ring_attn.c): two key/value blocks in flight, three gradient blocks,
     * one chunk pair's output and log-sum-exp */
    int64_t ring = 0;
    if (s->cp > 1) {
        int64_t Tc = s->T / s->ring_chunks, heads = s->NH / s->sp;
        ring = 5 * s->N * (s->W - s->A) / s->sp + Tc * heads * s->hs + heads * Tc;
    }
    return max64(max64(max64(enter, leave), max64(q, a)), ring);
}

/* 16-bit modes with the model's own weights (not ZeRO-3's gathered ones): the 16-bit weights
 * of the block or head at work, cast as it is entered (models/gpt.c). */
static bool lp_per_unit(const shape *s) { return s->lp && s->zero < 3; }

/* The LM head's logits chunk (16-bit modes round its gradient over it, nn/lm_head.c), its
 * statistics and, per unit, its 16-bit matrix. */
static int64_t head_bytes(const shape *s) {
    int64_t chunk = head_chunk_rows(s->vocab_rows, s->Nt, lp_per_unit(s));
    return pad64(chunk * s->vocab_rows * F4) + pad64(chunk * (3 * (int64_t)s->tp + 1) * F4) +
           (lp_per_unit(s) ? pad64(s->vocab_rows * s->C * H2) : 0);
}

/* What only a block call uses, forward and backward. What only a tp split (the region's entry
 * and exit copies) or a Ulysses split (the head-layout copies) uses is carved only then; the
 * fp32 MLP activation g only in fp32 mode; an fp32 q|k|v before RoPE only with bf16 storage
 * and RoPE (GPT-2's matmul writes bf16). */
static int64_t block_only_bytes(const shape *s, int64_t widest_block) {
    int64_t rc = pad64(s->Nr * s->C * F4), tc = pad64(s->Nt * s->C * F4);
    int64_t tw = pad64(s->Nt * s->W * F4), ta = pad64(s->Nt * s->A * F4);
    int64_t tf = pad64(s->Nt * s->F * F4);
    bool tp = s->tp > 1, sp = s->sp > 1;
    int64_t b = (tp ? rc + tc : 0) + (sp ? 2 * tw + ta : 0) + (s->lp ? 0 : tf);
    b += !sp && s->acts16 && !s->gpt2 ? tw : 0;
    b += lp_per_unit(s) && widest_block > 0 ? pad64(widest_block * H2) : 0;
    b += rc + tw + (sp ? ta : 0) + ta + 2 * tf + (s->gpt2 ? 0 : tf) + pad64(6 * (int64_t)s->C * F4);
    if (s->lp) {
        int64_t widest = max64(max64(s->C, s->W), s->F);
        b += pad64(s->Nt * widest * H2);
    }
    return b;
}

static int64_t temp_arena(const shape *s, int n_slots, int n_grads, int64_t widest_block) {
    int64_t S = n_slots, tc = pad64(s->Nt * s->C * F4);
    bool tp = s->tp > 1;
    bool head = (s->gpt2 && s->held[0]) || holds_final(s);
    /* shared by blocks and head: the fp32 norm output ln_full (not in bf16 over one tp rank,
     * where the norm writes bf16), the region ops' work, a tp split's dln_full */
    int64_t b = (s->bf16 && !tp ? 0 : tc) + pad64(region_work(s) * F4) + (tp ? tc : 0);
    /* the head's buffers and a block's own share one region: never live at once */
    b += max64(head ? head_bytes(s) : 0, block_only_bytes(s, widest_block));
    b += pad64((int64_t)n_grads * s->Nr * s->C * F4); /* residual gradient buffers */
    if (holds_final(s))
        b += pad64(S * s->Nr * s->C * F4);
    if (s->gpt2)
        b += pad64((int64_t)s->positions * s->C * F4); /* wpe gradient rows */
    return b;
}

/* ---- the rank ------------------------------------------------------------------------------ */

/* The model's local widths on the layout's rank. */
static void fill_shape(const dt_config *c, const dt_layout *l, shape *s) {
    const dt_model_config *m = &c->model;
    const dt_plugin_config *p = &c->plugin;
    *s = (shape){.c = c,
                 .gpt2 = m->arch == DT_ARCH_GPT2,
                 .lp = l->precision == DT_PREC_BF16 || l->precision == DT_PREC_FP16,
                 .bf16 = l->precision == DT_PREC_BF16,
                 .L = l->n_layer,
                 .C = m->n_embd,
                 .hs = m->n_embd / m->n_head,
                 .T = l->T_local,
                 .T_read = l->T,
                 .cp = l->cp,
                 .ring_chunks = l->cp > 1 && l->cp_zigzag ? 2 : 1,
                 .tp = l->tp,
                 .sp = l->sp,
                 .pp = l->pp,
                 .zero = l->zero,
                 .rows_split = l->rows_split,
                 .grad_p = l->grad_size,
                 .grad_rank = l->grad_rank,
                 .pp_rank = l->pp_rank,
                 .mb = l->mb,
                 .rows = l->rows,
                 .N = l->tokens_mb,
                 .Nt = l->tokens_sp,
                 .Nr = l->tokens_rows,
                 .act_disk = p->act_offload == DT_OFFLOAD_DISK,
                 .docs = c->data.doc_mask,
                 .positions = c->data.doc_mask ? l->T_local * l->cp : l->T_local,
                 .acts16 = l->precision == DT_PREC_BF16 &&
                           p->act_compress == DT_ACT_COMPRESS_NONE && l->cp == 1};
    s->NH = m->n_head / s->tp;
    s->NKV = kv_heads(m) / s->tp;
    s->F = ffn_width(m) / s->tp;
    s->W = (s->NH + 2 * s->NKV) * s->hs;
    s->A = s->NH * s->hs;
    s->vocab_rows = cdiv(m->vocab_size, s->tp);
    memcpy(s->held, l->held, sizeof s->held);
}

/* plugin.offload = disk: the moments stream through one window of two chunk slots, each
 * holding a chunk's m and v (16 bytes per chunk float; optim/offload.c). */
int64_t dt_plan_offload_chunk(int64_t count, float window_mb) {
    double fit = floor((double)window_mb * 1048576.0 / 256.0) * 16.0;
    int64_t need = pad16(cdiv(count, 2));
    int64_t c = fit < (double)need ? (int64_t)fit : need;
    return c < 16 ? 16 : c;
}

/* AdamW's m and v over the `count` floats this rank's optimizer owns, or their window, and
 * the weights' average over the same floats (train.ema_decay), always in memory. */
static int64_t optim_bytes(const shape *s, int64_t count) {
    int64_t ema = s->c->train.ema_decay > 0 ? count * F4 : 0;
    if (s->c->plugin.offload == DT_OFFLOAD_DISK)
        return 16 * dt_plan_offload_chunk(count, s->c->plugin.offload_window_mb) + ema;
    return 2 * count * F4 + ema;
}

/* The persistent state: params, grads, optim and comm (ZeRO unit buffers). */
static void predict_state(const shape *s, const int64_t *ucount, int n_units, bool whole,
                          dt_plan_mem *out) {
    int64_t n = 0;
    for (int u = 0; u < n_units; u++)
        n += ucount[u];
    int64_t S = pad16(cdiv(n, s->grad_p)), first = (int64_t)s->grad_rank * S;
    int64_t own = n - first < S ? n - first : S;
    own = own > 0 ? own : 0;
    out->n_local = n;
    out->own_count = own;
    int64_t *cat = out->cat;
    /* a whole 16-bit copy only in a DiT: a GPT casts unit by unit into its transients */
    bool lp_copy = s->lp && s->c->model.arch == DT_ARCH_DIT;
    cat[DT_MEM_PARAMS] = s->zero == 3 ? S * F4 : n * F4 + (lp_copy ? n * H2 : 0);
    cat[DT_MEM_GRADS] = s->zero >= 2 ? S * F4 + (whole ? n * F4 : 0) : n * F4;
    cat[DT_MEM_OPTIM] = optim_bytes(s, s->zero == 0 ? n : own);
    if (s->zero < 2)
        return;
    /* two rotating buffers as wide as the widest inner unit, one each for the first and last
     * unit: gathered weights (ZeRO-3, + 16-bit copy), gradient and its reduced piece */
    int64_t widest = 16;
    for (int u = 1; u < n_units - 1; u++)
        widest = max64(widest, ucount[u]);
    int64_t bufs[4] = {widest, widest, ucount[0], n_units > 1 ? ucount[n_units - 1] : -1};
    for (int i = 0; i < 4; i++) {
        int64_t k = bufs[i];
        if (k < 0)
            continue;
        if (s->zero == 3)
            cat[DT_MEM_COMM] += k * F4 + (s->lp ? k * H2 : 0);
        if (!whole)
            cat[DT_MEM_COMM] += k * F4 + (k < S ? k : S) * F4;
    }
}

/* Sharded checkpoints (train/checkpoint.h): the buffer "ckpt.io" (DT_CKPT_IO_BYTES) that the
 * state is checksummed through and that offloaded moments stream through, saved or loaded (never a
 * copy of their size). */
#define CKPT_IO_BYTES ((int64_t)8 << 20)

/* The largest buffer allocated for a while and released: a checkpoint save (ckpt.io; async:
 * its own ckpt.io and the staging copy "ckpt.staging" of the rank's partition, weights, m
 * and v (and the weights' average), 12 (16) x own_count bytes, which live on while the next steps
 * run, so a step's transient adds to them: the worst case, measured when the write is still in
 * flight then), a resume (ckpt.io when the moments are offloaded; resume=auto first checksums
 * through it); export's whole-state weights, with the local arena gathered over dp and, over more
 * than one tp rank, the tp ranks' arenas side by side; a load from model.init: the weights and the
 * local arena. */
static int64_t state_event_bytes(const shape *s, int64_t n_full, int64_t n_local, int64_t own_count,
                                 bool export_) {
    const dt_config *c = s->c;
    /* GPT-2 under a pipeline with ZeRO 2/3: the end stages sum the tied embedding's gradient
     * through a gathered copy of the tensor (unpadded), every step */
    bool tied_end = s->held[0] || holds_final(s);
    int64_t tied = s->gpt2 && s->pp > 1 && s->zero >= 2 && tied_end ? s->vocab_rows * s->C * F4 : 0;
    bool step_after_save = c->checkpoint.every < c->train.steps; /* not only the last */
    int64_t kinds = c->train.ema_decay > 0 ? 4 : 3;              /* weights, m, v (, the average) */
    int64_t save_ckpt = c->checkpoint.async
                            ? CKPT_IO_BYTES + kinds * own_count * F4 + (step_after_save ? tied : 0)
                            : CKPT_IO_BYTES;
    int64_t gathered = s->tp > 1 ? (int64_t)s->tp * n_local * F4 : 0; /* "tp.gather" */
    int64_t save_export = n_full * F4 + n_local * F4 + gathered;
    bool offload = c->plugin.offload == DT_OFFLOAD_DISK;
    int64_t resume = strcmp(c->checkpoint.resume, "auto") == 0 || offload ? CKPT_IO_BYTES : 0;
    int64_t load = n_full * F4 + n_local * F4;
    int64_t b = 0;
    if (c->checkpoint.every > 0 && c->train.steps > 0)
        b = max64(b, save_ckpt);
    if (c->checkpoint.resume[0])
        b = max64(b, resume);
    if (c->model.init[0])
        b = max64(b, load);
    if (export_ && c->train.export_path[0])
        b = max64(b, save_export);
    return max64(b, tied);
}

/* The run over buckets: bucket 0's prediction with the largest of every bucket's arenas,
 * batch buffers and inbox buffer (the booster and the DiT size them so); the state and its
 * events do not depend on the clip. */
static dt_status memory_of_buckets(const dt_config *c, const dt_buckets *bk, int world, int rank,
                                   const dt_plan_mem_opts *o, dt_plan_mem *out) {
    int64_t comm_rest = 0, event = 0;
    for (int k = 0; k < bk->n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk->b[k]);
        dt_plan_mem m;
        dt_status st = dt_plan_memory(&ck, world, rank, o, &m);
        DT_TRY(dt_bucket_wrap(st, bk, k));
        if (k == 0) {
            *out = m;
            comm_rest = m.cat[DT_MEM_COMM] - m.n_inbox * m.inbox_each;
            event = m.cat[DT_MEM_TEMP] - m.temp_arena;
            continue;
        }
        out->acts_arena = max64(out->acts_arena, m.acts_arena);
        out->temp_arena = max64(out->temp_arena, m.temp_arena);
        out->batch_in = max64(out->batch_in, m.batch_in);
        out->batch_tg = max64(out->batch_tg, m.batch_tg);
        out->inbox_each = max64(out->inbox_each, m.inbox_each);
    }
    out->cat[DT_MEM_ACTS] = out->acts_arena + out->batch_in + out->batch_tg;
    out->cat[DT_MEM_COMM] = comm_rest + out->n_inbox * out->inbox_each;
    out->cat[DT_MEM_TEMP] = out->temp_arena + event;
    out->total = 0;
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)
        out->total += out->cat[k];
    return DT_OK;
}

dt_status dt_plan_memory(const dt_config *c, int world, int rank, const dt_plan_mem_opts *o,
                         dt_plan_mem *out) {
    memset(out, 0, sizeof *out);
    dt_buckets bk;
    DT_TRY(dt_config_buckets(c, &bk));
    if (bk.n && c->model.arch == DT_ARCH_DIT)
        return memory_of_buckets(c, &bk, world, rank, o, out);
    dt_plan_mem_opts none = {0};
    o = o ? o : &none;
    dt_layout l;
    const dt_schedule *sched;
    dt_schedule *own;
    DT_TRY(dt_layout_make_scheduled(c, world, rank, o->schedule, &l, &sched, &own));
    dt_sched_free(own);
    shape s;
    fill_shape(c, &l, &s);
    int n_slots = l.n_slots, n_inbox = l.n_inbox;
    bool split = l.split_backward;
    out->pp_rank = s.pp_rank;
    out->grad_rank = s.grad_rank;
    out->n_slots = n_slots;
    out->n_inbox = n_inbox;
    out->n_grads = l.n_grads;
    int64_t ucount[DT_MAX_CHUNKS + 2];
    int n_units = dt_plan_local_units(&c->model, s.tp, s.held, ucount);
    /* where gradients live is the engine's rule (dt_layout_grad_home): the whole local arena
     * under ZeRO 2/3 with a split backward, else unit buffers beside the shard */
    bool whole = dt_layout_grad_home(&l, 0, n_units) == DT_GRAD_WHOLE;
    predict_state(&s, ucount, n_units, whole, out);
    out->n_full = unit_floats(&c->model, 0, 1) + s.L * unit_floats(&c->model, 1, 1) +
                  unit_floats(&c->model, s.L + 1, 1); /* every block's table is alike */

    /* the batch buffers (train/source.h) hold these rows: int32 ids and targets [T] each; a
     * DiT's clip x_t, t and label (clip + 2 floats) and its velocity (clip floats) */
    int batch_rows = s.pp > 1 ? s.rows : s.mb;
    if (c->model.arch == DT_ARCH_DIT) {
        dt_plan_dit_rank r = {.B = s.mb,
                              .sp = s.sp,
                              .tp = s.tp,
                              .cp = s.cp,
                              .cp_chunks = s.ring_chunks,
                              .sequence_tp = s.rows_split > 1,
                              .split = split,
                              .n_slots = n_slots,
                              .n_grads = l.n_grads,
                              .held = s.held,
                              .plugin = &c->plugin,
                              .lp = s.lp,
                              .training = true};
        dt_plan_dit_arenas(&c->model, &r, &out->acts_arena, &out->temp_arena);
        dt_plan_dit_batch_bytes(&c->model, batch_rows, &out->batch_in, &out->batch_tg);
        out->cat[DT_MEM_ACTS] = out->acts_arena + out->batch_in + out->batch_tg;
        out->inbox_each = dt_plan_dit_boundary_bytes(&c->model, s.mb, s.cp, s.sp, s.rows_split);
        out->cat[DT_MEM_COMM] += n_inbox * out->inbox_each;
    } else {
        out->acts_arena = acts_arena(&s, n_slots, split);
        int64_t tokens = (int64_t)batch_rows * s.T_read * 4; /* int32 ids */
        int64_t rope = s.gpt2 ? 0 : 2 * (int64_t)s.positions * (s.hs / 2) * F4;
        /* documents: inputs of (id, start) pairs; the model's decoded ids, starts, positions */
        int64_t docs = s.docs ? tokens + 3 * (int64_t)s.mb * s.T * 4 : 0;
        out->cat[DT_MEM_ACTS] = out->acts_arena + rope + 2 * tokens + docs;
        out->cat[DT_MEM_COMM] += n_inbox * s.Nr * s.C * F4;
        bool any_block = false; /* blocks are alike: any held one is the widest */
        for (int l = 0; l < s.L && !any_block; l++)
            any_block = holds_block(&s, l);
        int64_t widest_block = any_block ? unit_floats(&c->model, 1, s.tp) : 0;
        out->temp_arena = temp_arena(&s, n_slots, l.n_grads, widest_block);
        for (int l = 0; l < s.L; l++)
            if (holds_block(&s, l)) {
                int64_t kept = block_slot_bytes(&s, l) + pad64(s.Nr * s.C * F4);
                out->block_bytes_per_token_hidden = (double)kept / ((double)s.N * s.C);
                break;
            }
        if (s.act_disk && widest_block > 0) {
            int held = 0;
            for (int l = 0; l < s.L; l++)
                held += holds_block(&s, l);
            out->act_disk_record = act_disk_frame_bytes(&s);
            out->act_disk_file = (int64_t)n_slots * held * out->act_disk_record;
        }
    }
    int64_t event = state_event_bytes(&s, out->n_full, out->n_local, out->own_count, o->at_export);
    out->cat[DT_MEM_TEMP] = out->temp_arena + event;
    /* everything but the state events lives from set-up to the end, so the largest sum is the
     * persistent buffers plus the largest event */
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)
        out->total += out->cat[k];
    return DT_OK;
}

int64_t dt_plan_act_disk_record(const dt_config *c, const dt_layout *l) {
    shape s;
    fill_shape(c, l, &s);
    return act_disk_frame_bytes(&s);
}

double dt_plan_param_count(const dt_model_config *m) {
    /* in doubles, unpadded: any config (n_layer 1e9 included) gives a finite answer at once */
    if (m->arch == DT_ARCH_DIT)
        return dt_plan_dit_param_count(m);
    double C = m->n_embd, V = m->vocab_size, F = ffn_width(m), L = m->n_layer;
    double kv = m->n_head > 0 ? (double)kv_heads(m) * (m->n_embd / m->n_head) : C;
    if (m->arch == DT_ARCH_GPT2)
        return V * C + (double)m->max_seq_len * C + 2 * C +
               L * (4 * C + 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C);
    return 2 * V * C + C + L * (2 * C + C * C + 2 * kv * C + C * C + 3 * F * C);
}
