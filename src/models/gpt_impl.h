/* The inside of a dt_gpt, shared by the model's own files (gpt.c: views, arenas, forward
 * and backward; gpt_tables.c: parameter tables, split checks, whole-tensor gathers). Nothing
 * outside models/ includes it. */
#ifndef DT_MODELS_GPT_IMPL_H
#define DT_MODELS_GPT_IMPL_H

#include "io/spill.h"
#include "models/gpt.h"
#include "nn/block.h"
#include "nn/lm_head.h"

/* A unit's gradient writes, by the pass that makes them: the backward (every gradient of the
 * unit; under split backward a block's input-pass ones), the split weight pass, the head. A
 * set bit: that pass has not yet written this step, so it overwrites instead of adding. */
enum {
    DT_GPT_FRESH_BACKWARD = 1,
    DT_GPT_FRESH_WEIGHTS = 2,
    DT_GPT_FRESH_HEAD = 4,
    DT_GPT_FRESH_ALL = 7
};

/* A block's tensors in table order (HuggingFace's), by name: build_table_* lays a block's rows
 * out by these ids and wire_block reads them by the same ids, so neither relies on a position. */
enum dt_gpt2_row {
    GPT2_LN1_W,
    GPT2_LN1_B,
    GPT2_QKV_W,
    GPT2_QKV_B,
    GPT2_PROJ_W,
    GPT2_PROJ_B,
    GPT2_LN2_W,
    GPT2_LN2_B,
    GPT2_FC_W,
    GPT2_FC_B,
    GPT2_DOWN_W,
    GPT2_DOWN_B,
    GPT2_BLOCK_ROWS
};
enum dt_llama_row {
    LLAMA_LN1_W,
    LLAMA_Q_W,
    LLAMA_K_W,
    LLAMA_V_W,
    LLAMA_O_W,
    LLAMA_LN2_W,
    LLAMA_GATE_W,
    LLAMA_UP_W,
    LLAMA_DOWN_W,
    LLAMA_BLOCK_ROWS
};
/* The embedding unit's and the final unit's tensors, the same way */
enum { GPT2_WTE, GPT2_WPE, GPT2_EMBED_ROWS };
enum { GPT2_LNF_W, GPT2_LNF_B, GPT2_FINAL_ROWS };
enum { LLAMA_EMBED_W, LLAMA_EMBED_ROWS };
enum { LLAMA_NORM_W, LLAMA_HEAD_W, LLAMA_FINAL_ROWS };

/* An int8 copy of one saved [rows, cols] tensor: the bytes and one fp32 scale per row. */
typedef struct dt_gpt_q8 {
    int8_t *q;
    float *scale;
} dt_gpt_q8;

/* A block's saved tensors stored as int8 (act_compress = int8), per slot; q NULL: not kept. */
typedef struct dt_gpt_q8_acts {
    dt_gpt_q8 qkv, att, x2, h, u; /* shapes as in dt_block_acts */
} dt_gpt_q8_acts;

/* act_offload = disk (gpt_offload.c): one of the two frames a block's saved set passes
 * through on its way to and from the disk. A frame is one contiguous piece of the
 * activations arena: the fields any held block keeps, their int8 payloads (act_compress) and
 * a copy of the block's input; one record of the spill file holds one (slot, block)'s frame. */
typedef struct dt_gpt_frame {
    dt_block_acts acts;
    dt_gpt_q8_acts q8;
    float *x; /* [Nr, C] the block's input */
    char *base;
    size_t bytes;
    int slot, block; /* whose set it holds (written from it or read into it); -1: nobody's */
    int64_t ticket;  /* its last spill request, -1: none */
    bool pinned;     /* a block is at work on it */
} dt_gpt_frame;

enum { DT_GPT_FRAMES = 2 };

struct dt_gpt {
    dt_model_config cfg;
    dt_block_dims dims; /* local widths (this tp rank's heads and MLP columns) */
    dt_block_par par;
    dt_comm *own_comm[4]; /* size-1 comms made for the splits the caller did not give */
    dt_comm *pp;          /* pipeline group (borrowed), for whole-model gathers; NULL: none */
    int B, T;             /* T: the tokens of a sequence this rank holds (all but under a ring) */
    /* where they sit in the whole sequence: local chunk i (T / n_chunks tokens) is chunk
     * chunk[i] of it; one chunk, chunk 0, without a ring */
    int n_chunks, chunk[2];
    /* data.doc_mask: each input token is an (id, document start) pair; its ids, document
     * starts and positions in its document [B*T] are decoded per call (dt_gpt_read_input).
     * n_positions: the position rows (RoPE tables, wpe's gradient rows) a rank uses: its own
     * T, or with documents the whole sequence's (a document's positions restart anywhere) */
    bool doc_mask;
    int32_t *ids, *doc, *pos;
    int n_positions;
    dt_block_seq seq; /* where the current micro-batch's tokens sit, for the blocks */
    bool training;
    dt_mem *mem; /* borrowed */
    dt_gemm *gemm;
    dt_nn_ctx ctx;

    dt_param *full;   /* the single process's table: what files hold */
    dt_param *params; /* this rank's table: the local arena (= full without tp and pp) */
    int n_params, n_full_params, cap_params;
    int64_t n_full;
    int *local_full;    /* [n_params] the full table's index of each local tensor */
    int tied_copy;      /* local index of GPT-2's head copy of wte on a stage without unit 0 */
    int64_t vocab_rows; /* rows of the vocabulary matrices this rank holds (padded) */
    int n_embed_params, per_layer; /* unit 0's tensors; tensors per block */
    /* Units this rank holds (pipeline stages hold a few): global unit u <-> local id. Local
     * ids are what the unit API and the hooks use. */
    int n_units;
    int *unit_global, *unit_local; /* [n_units], [L + 2] (-1: not here) */
    int *unit_param;               /* [n_units + 1] local tensors of each unit */
    float **unit_w, **unit_g;      /* [n_units] current storage of each unit (first element) */
    dt_bf16 **unit_lp;
    uint8_t *fresh; /* [n_units] DT_GPT_FRESH_* writes that still overwrite (dt_gpt_fresh_grads) */
    /* micro-batches held at once (slots), boundary gradient buffers, a slot's positions */
    int n_slots, n_grads, n_pos;
    int *pos_index; /* [L + 1] residual position (input of block l; L = final input) -> index */
    dt_gpt_hooks hooks;
    int64_t n_total;
    float *w, *g; /* weights, grads */
    /* 16-bit modes with the model's own fp32 weights: the 16-bit weights exist only for the
     * unit at work, cast when it is entered (gpt.c: cast_entered), a block's range into
     * lp_block and the head's matrix into lp_head; both lie in the transients' region that
     * a block and the head share, so entering one invalidates the other's cast */
    bool lp_per_unit;
    dt_bf16 *lp_block, *lp_head;
    int lp_block_unit; /* local unit whose cast lp_block holds, -1 none */

    float *wte, *wpe, *dwte, *dwpe; /* wpe: GPT-2 only */
    dt_norm_params lnf;
    dt_block *blocks;
    dt_lm_head head;
    float *rope_cos, *rope_sin;

    /* activations (this rank's rows), per slot */
    float *res;            /* [slot][n_pos][Nr, C]: residual stream at the positions held here */
    dt_block_acts *acts;   /* [slot][L]: carved for the blocks held here */
    dt_block_wgrad *wgrad; /* [slot][L]: split backward's kept gradients, or NULL */
    float *lnf_mean, *lnf_rstd; /* [slot][Nr] */
    float *dres, *dlnf;         /* [slot][Nr, C]: gradient of the residual / final norm out */
    float *lnf_out, *losses;    /* shared */
    dt_bf16 *lnf_lp;
    /* activation checkpointing and int8 storage (gpt_ac.c) */
    dt_ac_mode ac;
    int ac_every;
    bool compress;
    dt_block_acts shared;          /* one set of recompute / restore buffers, fields as needed */
    int shared_slot, shared_block; /* whose complete set the shared buffers hold; -1: none */
    float *ac_out;                 /* [Nr, C] a rerun forward's output (discarded) */
    dt_gpt_q8_acts *q8;            /* [slot][L] with act_compress, else NULL */
    /* act_offload = disk: the saved sets and block inputs live in a spill file (a record per
     * slot and held block) and pass through two frames; the residual positions between two
     * held blocks are then transient (res_pass, by the parity of the position) */
    bool offload;
    bool evaluating; /* dt_gpt_begin_eval: no backward follows, nothing is written */
    dt_gpt_frame frames[DT_GPT_FRAMES];
    int next_frame;
    dt_spill *spill;
    float *res_pass[2];
    void *act_arena;
    /* transients, and the backward's */
    dt_block_scratch scratch;
    float *dpos; /* [n_positions, C] */
    void *tmp_arena;
    /* [slot][L]: bytes of a block's saved set (its acts, kept gradients and input residual)
     * and whether it is live, marked on the memory accountant's timeline */
    size_t *saved_bytes;
    bool *saved_live;
};

/* Hands out 64-byte aligned pieces of an arena; with base == NULL it only measures. */
typedef struct dt_carver {
    char *base;
    size_t used;
} dt_carver;

static inline void *dt_gpt_carve(dt_carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (bytes + 63) & ~(size_t)63;
    return p;
}

/* Row counts of the largest micro-batch: all tokens, inside the tp region, in the residual. */
typedef struct dt_gpt_rows {
    size_t N, Nt, Nr;
} dt_gpt_rows;

static inline dt_gpt_rows dt_gpt_rows_max(const dt_gpt *g) {
    int N = g->B * g->T;
    return (dt_gpt_rows){.N = (size_t)N,
                         .Nt = (size_t)dt_block_rows_tp(&g->par, N),
                         .Nr = (size_t)dt_block_rows_res(&g->par, N)};
}

static inline bool dt_gpt_holds_block(const dt_gpt *g, int l) { return g->unit_local[l + 1] >= 0; }
/* A rank's chunks are its runs of consecutive held units (one per pipeline chunk; all of them
 * without a pipeline). A slot holds one (chunk, micro-batch) at a time, so each chunk's
 * positions and saved sets start at the slot's start: a slot is as large as the largest
 * chunk's, not the sum of them. Does held unit u start a chunk? */
static inline bool dt_gpt_starts_chunk(const dt_gpt *g, int u) {
    return u == 0 || g->unit_local[u - 1] < 0;
}

static inline bool dt_gpt_holds_final(const dt_gpt *g) {
    return g->unit_local[g->cfg.n_layer + 1] >= 0;
}

/* The residual positions a slot keeps, then the "activations" and "transients" arenas carved
 * for them (gpt_arenas.c); the head's chunk must be set first. */
dt_status dt_gpt_alloc_arenas(dt_gpt *g);

/* Activations of the held blocks, per slot, and the shared recompute / restore set: carved
 * into the "activations" arena (gpt_ac.c). */
void dt_gpt_carve_block_acts(dt_gpt *g, dt_carver *cv);
/* bf16 mode without int8 storage: the blocks keep q|k|v and att in bf16 (qkv16, att16), and
 * the qkv matmul writes its fp32 output into scratch.qkv_rows first (carved then also over one
 * sp rank) */
bool dt_gpt_acts16(const dt_gpt *g);
/* One held block of a slot, by the checkpointing and storage modes (gpt_ac.c): forward from
 * x into out; backward (wg: split backward's input pass) accumulating into dres; the split
 * backward's weight pass. Same contracts as dt_block_forward/backward/weight_backward. */
dt_status dt_gpt_block_forward(dt_gpt *g, int slot, int l, const float *x, int B, int T,
                               float *out);
/* `next`: the block whose backward (weight pass) this rank runs right after, whose saved set
 * act_offload fetches ahead; -1: none. */
dt_status dt_gpt_block_backward(dt_gpt *g, int slot, int l, int next, const float *x, int B, int T,
                                dt_block_wgrad *wg, float *dres);
dt_status dt_gpt_block_weights(dt_gpt *g, int slot, int l, int next, const float *x, int B, int T,
                               dt_block_wgrad *wg);

/* act_offload = disk (gpt_offload.c). Is residual position l (1..L-1) between two held
 * blocks, so transient? */
bool dt_gpt_offload_interior(const dt_gpt *g, int l);

/* The batch's token ids (*ids). With documents (doc_mask) the input holds (id, document
 * start) pairs: the ids, the starts and each token's position in its document are decoded
 * into g->ids, doc, pos for the blocks (g->seq); a start after its token or before the
 * sequence is a damaged input, an error naming the token (gpt_docs.c). */
dt_status dt_gpt_read_input(dt_gpt *g, const int32_t *input, int B, int T, const int32_t **ids);
/* The frames, carved (with base NULL: measured) by the fields of `fields`, int8 payloads
 * by `q8_fields` (dt_gpt_carve_fields' and dt_gpt_carve_q8's bit sets). */
void dt_gpt_carve_frames(dt_gpt *g, dt_carver *cv, unsigned fields, unsigned q8_fields);
/* Opens the spill file: a record per slot and held block. */
dt_status dt_gpt_offload_open(dt_gpt *g, const char *dir, const char *tag);
void dt_gpt_offload_close(dt_gpt *g);
/* A frame for (slot, l)'s forward, pinned; dt_gpt_frame_put writes it out and unpins it. */
dt_status dt_gpt_frame_for_forward(dt_gpt *g, int slot, int l, dt_gpt_frame **out);
void dt_gpt_frame_put(dt_gpt *g, dt_gpt_frame *f, int slot, int l);
/* The frame holding (slot, l)'s set for its backward or weight pass, read when no frame
 * holds it, pinned; dt_gpt_frame_done unpins it. dt_gpt_frame_ahead asks for a set that is
 * about to be fetched (no wait). */
dt_status dt_gpt_frame_fetch(dt_gpt *g, int slot, int l, dt_gpt_frame **out);
void dt_gpt_frame_done(dt_gpt_frame *f);
/* Unpins f and forgets whose set it held (an evaluation forward's, never written). */
void dt_gpt_frame_forget(dt_gpt_frame *f);
dt_status dt_gpt_frame_ahead(dt_gpt *g, int slot, int l);
/* Carving the pieces of a block's saved set (gpt_ac.c), for the slots and the frames. */
void dt_gpt_carve_fields(dt_gpt *g, dt_carver *cv, unsigned fields, dt_block_acts *a);
void dt_gpt_carve_q8(dt_gpt *g, dt_carver *cv, unsigned fields, dt_gpt_q8_acts *q);

/* The full (single-process) table in HuggingFace order, then this rank's local table: the
 * units in `held` (NULL: all), each tensor its tp shard (gpt_tables.c). */
dt_status dt_gpt_build_tables(dt_gpt *g, const bool *held);

#endif
