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

typedef struct dt_loader {
    dt_tokens shard;
    int B, T;
    bool shuffle;
    uint64_t seed;
    int64_t pos;  /* sequential: start of the next batch */
    int64_t step; /* batches handed out so far */
    int32_t *row; /* [T + 1] one row's ids as read, split into inputs and targets (owned) */
} dt_loader;

/* Opens and validates the shard (every token < vocab_size); it must hold B*T + 1 tokens. */
dt_status dt_loader_open(dt_loader *ld, const char *path, int vocab_size, int B, int T,
                         bool shuffle, uint64_t seed);
void dt_loader_close(dt_loader *ld);

/* Rows [row0, row0 + n_rows) of the next batch into inputs/targets ([n_rows, T] each),
 * without advancing; dt_loader_advance moves to the next batch. */
dt_status dt_loader_rows(const dt_loader *ld, int row0, int n_rows, int32_t *inputs,
                         int32_t *targets); /* DT_ERR_IO naming the shard if it shrank */
/* Continue from a saved (position, step); a position no batch can start at is an error
 * naming the shard. */
dt_status dt_loader_seek(dt_loader *ld, int64_t pos, int64_t step);
void dt_loader_advance(dt_loader *ld);
void dt_loader_rewind(dt_loader *ld);

#endif
