/* A named parameter: a view into a model's flat parameter arena (and, at the same offset,
 * into the gradient and optimizer-state arenas). Models build a table of these; the
 * optimizer, checkpoints and, later, ZeRO sharding work on the table, never on model code. */
#ifndef DT_CORE_PARAM_H
#define DT_CORE_PARAM_H

#include <stdbool.h>
#include <stdint.h>

typedef enum dt_param_init {
    DT_INIT_NORMAL, /* N(0, std^2), Philox keyed by (seed, name, element index) */
    DT_INIT_ZEROS,
    DT_INIT_ONES,
    DT_PARAM_INIT_COUNT
} dt_param_init;

typedef struct dt_param {
    char name[96];    /* HuggingFace name, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2]; /* internal layout: nn.Linear [out, in] for every matrix */
    int64_t offset;   /* first element in the arena */
    int64_t numel;
    bool decay;       /* AdamW weight decay: matrices and embeddings, not biases or gains */
    bool conv1d;      /* stored transposed ([in, out]) in the file, as GPT-2's Conv1D */
    dt_param_init init;
    float std;
} dt_param;

/* Initial values of arena elements [first, first + count): each overlapping tensor's slice
 * from (seed, name, element index), zeros in between. A ZeRO shard initialises itself
 * without materialising the rest, and gets exactly the values the whole arena would. */
void dt_param_init_range(const dt_param *table, int n_params, uint64_t seed, int64_t first,
                         int64_t count, float *out);

#endif
