/* Where training and evaluation batches come from: one interface (an ops table and the
 * implementation's own state, as dt_model is) over the token-shard loader (train/loader.c)
 * and the clips of a video DiT, made from the seed or read from disk (train/source_clips.c). The
 * booster sees batches only through it: rows of the current step's GLOBAL batch into caller buffers
 * whose row sizes the source reports, so every layout reads the same batch.
 *
 * A source's whole state is (position, step), which checkpoints store and seek restores; a
 * step's batch is a pure function of it. Single-threaded; the caller owns the buffers.
 */
#ifndef DT_TRAIN_SOURCE_H
#define DT_TRAIN_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/buckets.h"
#include "core/config.h"
#include "core/status.h"

typedef struct dt_source_ops {
    void (*close)(void *self);
    /* bytes of one row (one sample of the batch) of input and of target */
    size_t (*input_row_bytes)(const void *self);
    size_t (*target_row_bytes)(const void *self);
    /* rows [row0, row0 + n) of the current step's global batch, without advancing */
    dt_status (*rows)(const void *self, int row0, int n, void *input, void *target);
    void (*advance)(void *self); /* to the next step's batch */
    void (*rewind)(void *self);  /* to the first batch (evaluation starts over each time) */
    void (*position)(const void *self, int64_t *pos, int64_t *step);
    /* continue from a saved (position, step): an error naming the source when no batch of it
     * can start there */
    dt_status (*seek)(void *self, int64_t pos, int64_t step);
    /* (optional: one shape) the bucket of clip shape the current step's batch is of */
    int (*bucket)(const void *self);
} dt_source_ops;

typedef struct dt_source {
    const dt_source_ops *ops; /* static */
    void *self;               /* owned: freed by ops->close */
} dt_source;

/* ---- implementations -------------------------------------------------------------------- */

/* Documents kept apart (data.doc_mask): token input rows then carry, for each token, its id
 * and the position in the row where its document starts, int32 pairs [T][2]. A document
 * starts at the row's first token, after each id eot (-1: none), and where a Megatron
 * dataset's document index starts one. */
typedef struct dt_docs {
    bool on;
    int eot;
} dt_docs;

/* A token shard (loader.h): batch_size sequences of seq_len int32 ids a step; inputs (pairs
 * with documents, see dt_docs) and next-token targets [T] int32 per row. Every token must be
 * < vocab_size. A path that is a blend ("0.7 A 0.3 B", dt_blend_spec_is) opens
 * dt_source_open_blend. docs: NULL or off = ids only. */
dt_status dt_source_open_tokens(const char *path, int vocab_size, int batch_size, int seq_len,
                                bool shuffle, uint64_t seed, const dt_docs *docs, dt_source **out);
/* A weighted blend of token datasets (blend.c): "W1 PATH1 W2 PATH2 ..." (weights > 0, in
 * proportion); each global row's dataset is a pure function of the weights and the row's
 * index, so every layout reads the same batch and (rows read, step) resumes it. */
bool dt_blend_spec_is(const char *spec);
/* Whether every dataset of a path or blend is a Megatron indexed dataset (whose document
 * index says where documents start) */
bool dt_tokens_spec_indexed(const char *spec);
dt_status dt_source_open_blend(const char *spec, int vocab_size, int batch_size, int seq_len,
                               bool shuffle, uint64_t seed, const dt_docs *docs, dt_source **out);

/* Bouncing-shapes clips (io/bounce.h) for a rectified-flow DiT (models/flow.h), made on the
 * fly: clip `index` = step * batch_size + row, everything random keyed by (seed, index).
 *   input row:  dt_dit_input_floats floats: x_t [frames, channels, height, width], then t,
 *               then the label as a float holding an integer (0..n_classes-1, or n_classes =
 *               the null class when dropped for guidance with chance label_dropout; 0 when
 *               the model has no classes), then with model.text_len > 0 the clip's text row:
 *               its caption's bytes (io/bounce.h's dt_bounce_caption), n = -1 when dropped
 *               with the label
 *   target row: clip_numel floats, eps - x_0
 * The clip shape and n_classes are the model's (model.frames ...); shapes: per clip.
 * DT_ERR_ARG naming the key when the clip cannot hold the shapes, or when n_classes is
 * neither 0 nor at least the source's kinds of shape. */
typedef struct dt_bounce_source_spec {
    const dt_model_config *model; /* borrowed for the call */
    int shapes;
    float label_dropout; /* in [0, 1]; used when the model has classes or text */
    int batch_size;      /* global, in clips */
    uint64_t seed;
} dt_bounce_source_spec;
dt_status dt_source_open_bounce(const dt_bounce_source_spec *spec, dt_source **out);

/* Clips read from disk (io/clips.h) for a rectified-flow DiT: pixel clips `dtrain prepare
 * --video` wrote (kind DT_CLIPS_PIXELS) or a VAE's latents (DT_CLIPS_LATENTS), rows as the
 * bouncing-shapes source's with label 0 (the model has no classes) and, for a model with text,
 * the clip's caption bytes (pixel clips) or text embeddings (latents with "text", as wide as
 * model.text_dim, model.text_len tokens at most), dropped with chance label_dropout. Row r of step
 * s is run clip s x batch_size + r: in order, wrapping around the folder, or with shuffle a folder
 * clip drawn by (seed, that index); its noise and t come from (seed, that index). DT_ERR_ARG naming
 * `what` (the config key) when the clips' shape is not the model's. */
typedef struct dt_clip_source_spec {
    const dt_model_config *model; /* borrowed for the call */
    const char *path;             /* a folder of shards, or one */
    const char *what;             /* "data.train", "data.val" */
    int kind;                     /* dt_clips_kind */
    int batch_size;
    bool shuffle;
    float label_dropout; /* the text's, for a model with text */
    uint64_t seed;
} dt_clip_source_spec;
dt_status dt_source_open_clips(const dt_clip_source_spec *spec, dt_source **out);

/* Buckets of clip shape (core/buckets.h, data.buckets): one source per bucket, subs[k] making
 * bucket k's clips at its batch (taken, and closed on failure). Step s's batch is the rows of
 * step s of the bucket dt_bucket_of_step(bk, seed, s) names, so it is a pure function of the
 * step; the row sizes are that bucket's. Its position is the step. */
dt_status dt_source_open_buckets(const dt_buckets *bk, uint64_t seed, dt_source *const *subs,
                                 dt_source **out);

/* ---- calls ------------------------------------------------------------------------------- */

/* NULL: no-op */
static inline void dt_source_close(dt_source *s) {
    if (!s)
        return;
    s->ops->close(s->self);
    free(s);
}

static inline size_t dt_source_input_row_bytes(const dt_source *s) {
    return s->ops->input_row_bytes(s->self);
}
static inline size_t dt_source_target_row_bytes(const dt_source *s) {
    return s->ops->target_row_bytes(s->self);
}
static inline dt_status dt_source_rows(const dt_source *s, int row0, int n, void *input,
                                       void *target) {
    return s->ops->rows(s->self, row0, n, input, target);
}
static inline void dt_source_advance(dt_source *s) { s->ops->advance(s->self); }
static inline void dt_source_rewind(dt_source *s) { s->ops->rewind(s->self); }
static inline void dt_source_position(const dt_source *s, int64_t *pos, int64_t *step) {
    s->ops->position(s->self, pos, step);
}
static inline int dt_source_bucket(const dt_source *s) {
    return s->ops->bucket ? s->ops->bucket(s->self) : 0;
}
static inline dt_status dt_source_seek(dt_source *s, int64_t pos, int64_t step) {
    return s->ops->seek(s->self, pos, step);
}

#endif
