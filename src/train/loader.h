/* Batches from a token shard, in the order llm.c reads them.
 *
 * Sequential (shuffle = false): a step reads tokens [p, p + B*T] (B*T + 1 tokens; targets are
 * the inputs shifted by one), then p += B*T, and p returns to 0 when the next batch would run
 * past the end. Shuffled: row r of step s starts at a Philox-chosen offset keyed by
 * (seed, s*B + r), so any step's batch is a pure function of the step. Either way the
 * loader's whole state is (position, step): checkpoints store it and resume exactly.
 */
#ifndef DT_TRAIN_LOADER_H
#define DT_TRAIN_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "io/tokens.h"
#include "train/source.h"

typedef struct dt_loader {
    dt_tokens shard;
    int B, T;
    bool shuffle;
    uint64_t seed;
    int64_t pos;  /* sequential: start of the next batch */
    int64_t step; /* batches handed out so far */
    dt_docs docs;
    int32_t *row;  /* [T + 1] one row's ids as read, split into inputs and targets (owned) */
    uint8_t *mark; /* [T + 1] where the dataset's index starts documents (owned) */
} dt_loader;

/* Opens and validates the shard (every token < vocab_size); it must hold B*T + 1 tokens.
 * docs: NULL or off = input rows of ids only. */
dt_status dt_loader_open(dt_loader *ld, const char *path, int vocab_size, int B, int T,
                         bool shuffle, uint64_t seed, const dt_docs *docs);
void dt_loader_close(dt_loader *ld);

/* Rows [row0, row0 + n_rows) of the next batch into inputs/targets ([n_rows, T] each; inputs
 * [n_rows, T, 2] with documents), without advancing; dt_loader_advance moves to the next
 * batch. */
dt_status dt_loader_rows(const dt_loader *ld, int row0, int n_rows, int32_t *inputs,
                         int32_t *targets); /* DT_ERR_IO naming the shard if it shrank */
/* Continue from a saved (position, step); a position no batch can start at is an error
 * naming the shard. */
dt_status dt_loader_seek(dt_loader *ld, int64_t pos, int64_t step);
void dt_loader_advance(dt_loader *ld);
void dt_loader_rewind(dt_loader *ld);

/* Bytes of one input row of T tokens: ids, or (with documents) id and document-start pairs */
size_t dt_token_input_row_bytes(int T, const dt_docs *docs);
/* One row of T tokens from token `start` of t: input (ids, or with documents (id, document
 * start) pairs, dt_docs) and target (the ids shifted by one); row [T + 1] and mark [T + 1]
 * are the caller's scratch. */
dt_status dt_token_row_read(const dt_tokens *t, int64_t start, int T, const dt_docs *docs,
                            int32_t *row, uint8_t *mark, int32_t *input, int32_t *target);

#endif
