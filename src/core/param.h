/* A named parameter: a view into a model's flat parameter arena (and, at the same offset,
 * into the gradient and optimizer-state arenas). Models build a table of these; the
 * optimizer, checkpoints and ZeRO sharding work on the table, never on model code.
 *
 * Under tensor parallelism a rank holds a shard of some tensors. The table is then the
 * rank's LOCAL table (shapes and offsets of what it holds) and each entry's `shard` says how
 * the local tensor maps onto the full one, so initialisation (Philox by FULL element index)
 * and checkpoints (whole tensors) give every layout the single process's values.
 */
#ifndef DT_CORE_PARAM_H
#define DT_CORE_PARAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dt_param_init {
    DT_INIT_NORMAL, /* N(0, std^2), Philox keyed by (seed, name, element index) */
    DT_INIT_ZEROS,
    DT_INIT_ONES,
    DT_PARAM_INIT_COUNT
} dt_param_init;

/* How a local tensor maps onto the full [full_rows, full_cols] one (1-D: full_cols = 1).
 *   NONE  every rank holds the whole tensor (replicated)
 *   ROWS  rank r holds rows [r*rows, (r+1)*rows), rows = ceil(full_rows / parts); rows past
 *         full_rows are padding (a vocabulary padded to a multiple of tp): zero, never saved
 *   COLS  rank r holds columns [r*cols, (r+1)*cols) of every row (full_cols % parts == 0)
 *   QKV   fused q|k|v rows (GPT-2's c_attn): sections of sec[0], sec[1], sec[2] rows, each
 *         split into `parts` equal pieces; rank r holds piece r of q, then of k, then of v */
typedef enum dt_shard_kind {
    DT_SHARD_NONE,
    DT_SHARD_ROWS,
    DT_SHARD_COLS,
    DT_SHARD_QKV,
    DT_SHARD_KIND_COUNT
} dt_shard_kind;

typedef struct dt_shard {
    dt_shard_kind kind;
    int parts, index;             /* tp degree and this rank's place in it */
    int64_t full_rows, full_cols; /* the full tensor, internal layout */
    int64_t sec[3];               /* QKV: rows of q, k, v in the full tensor */
} dt_shard;

typedef struct dt_param {
    char name[96];    /* HuggingFace name, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2]; /* internal layout: nn.Linear [out, in] for every matrix (local shard) */
    int64_t offset;   /* first element in the arena */
    int64_t numel;
    bool decay;       /* AdamW weight decay: matrices and embeddings, not biases or gains */
    bool conv1d;      /* stored transposed ([in, out]) in the file, as GPT-2's Conv1D */
    dt_param_init init;
    float std;
    dt_shard shard;   /* kind NONE, parts 1 for a whole tensor */
} dt_param;

/* The local [rows, cols] a shard spec gives (a whole tensor for NONE). */
void dt_shard_local_shape(const dt_shard *s, int64_t *rows, int64_t *cols);
/* Where local row `i` of shard `index` lives in the full tensor: its full row (-1 for a
 * padding row) and the full column of its first element. */
int64_t dt_shard_full_row(const dt_shard *s, int index, int64_t i, int64_t *col0);

/* Initial values of arena elements [first, first + count): each overlapping tensor's slice
 * from (seed, name, FULL element index), zeros in between and in padding rows. A ZeRO or tp
 * shard initialises itself without materialising the rest, and gets exactly the values the
 * single process has. */
void dt_param_init_range(const dt_param *table, int n_params, uint64_t seed, int64_t first,
                         int64_t count, float *out);

/* A growable parameter table: appends an unsharded tensor [rows, cols] (cols 0: a vector of
 * rows) named `name` at arena offset *n_total, which then moves past it to the next 16-float
 * (64-byte) boundary; matrices decay, vectors do not. *out: the new row, for a model to add
 * what is its own (sharding, layout). DT_ERR_OOM when the table cannot grow. */
dt_status dt_param_append(dt_param **table, int *n, int *cap, int64_t *n_total,
                          const char *name, int64_t rows, int64_t cols, dt_param_init init,
                          float std, dt_param **out);

/* Copy between one rank's local tensor and the full tensor. `index` is the rank whose shard
 * `local` is (the spec's own index is ignored), so one rank can place every rank's data. */
void dt_param_shard_to_full(const dt_param *p, int index, const float *local, float *full);
void dt_param_full_to_shard(const dt_param *p, int index, const float *full, float *local);

/* A model's two tables as both models keep them: the single process's (`full`, what files
 * hold) and this rank's (`local`: its tp shards of the units it holds, packed into its arena),
 * with the full index of each local tensor. Borrowed views of the model's own arrays. */
typedef struct dt_param_tables {
    const dt_param *full, *local;
    int n_full, n_local;
    const int *local_full;           /* [n_local] */
    int64_t full_numel, local_numel; /* arena floats of each */
    int skip;                        /* a local tensor the gather leaves out (GPT-2's tied head
                                      * copy: the embedding's stage holds the original), -1 */
    /* the units held here: unit u's tensors are local [unit_param[u], unit_param[u + 1]) */
    int n_units;
    const int *unit_param; /* [n_units + 1] */
} dt_param_tables;

struct dt_comm;
struct dt_mem;
/* The full arena from every rank's local one: the tp ranks' arenas gathered (a temporary of
 * tp x the local arena, "tp.gather", when tp > 1), each tensor placed (a replicated tensor:
 * tp rank 0's copy), then summed over the pipeline stages, which hold disjoint tensors (zeros
 * elsewhere: the sum is exact). Collective over tp and pp (NULL: none). */
dt_status dt_param_gather_full(const dt_param_tables *t, struct dt_comm *tp, struct dt_comm *pp,
                               struct dt_mem *mem, const float *local, float *full);
/* This rank's local arena from a full one (its shards of the tensors it holds; padding 0). */
void dt_param_take_shard(const dt_param_tables *t, const float *full, float *local);
/* Local unit u's range of the local arena: its first tensor's offset to the next unit's (the
 * arena's end for the last), padding included. */
void dt_param_unit_range(const dt_param_tables *t, int unit, int64_t *first, int64_t *count);
/* The local tensor named `name`, or NULL. */
const dt_param *dt_param_find(const dt_param_tables *t, const char *name);

#endif
