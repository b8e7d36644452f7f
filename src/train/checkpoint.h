/* Training state on disk, for exact resume.
 *
 * Sharded format (what dtrain writes): DIR/step-N/ holds
 *   rank-R.safetensors  what world rank R owned: for each tensor slice, three 1-D F32 tensors
 *                       "<HF name>", "exp_avg.<HF name>", "exp_avg_sq.<HF name>" (internal
 *                       [out, in] layout, the slice's elements of its tp shard)
 *   manifest.json       step, data position, AdamW step count, seed, loss scale; the model
 *                       shape, the layout and config that wrote it; every tensor's global
 *                       shape and dtype; for every file its size, CRC32C and slices (tensor,
 *                       tp split/parts/index, the shard's rows and cols, first element and
 *                       count, and the byte offsets of the three pieces in the file)
 *   manifest.crc32c     the manifest's own CRC32C
 * Each rank writes its file (fsync'ed) into a folder named for this writer alone
 * (step-N.partial-<pid>-<nonce>), rank 0 then the manifest, and renames the folder to step-N
 * when every rank has succeeded (then fsyncs DIR): step-N is complete or absent. Each rank
 * loads only the slices its own layout holds, by pread, straight into its arenas, so any
 * layout resumes any other's checkpoint. Saved or loaded, the state streams between its
 * arenas (or the offloaded moments' file) and the rank file through one bounded buffer.
 *
 * Async save (checkpoint_async.c): the same three phases; the rank's part is first copied to
 * a staging buffer and phase 2 runs on a background thread, which makes no MPI call.
 *
 * Whole format (older dtrain, still loaded): DIR/step-N/ holds
 *   model.safetensors  weights, HuggingFace names (usable by dtrain sample and transformers)
 *   optim.safetensors  AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>" (internal layout)
 *   state.json         step, data-loader position, AdamW step count, seed, fp16 loss scale
 *   config.ini         the configuration that produced it
 * The folder is written as step-N.partial and renamed when complete (every file fsync'ed), so
 * a crash leaves either no step-N or a whole one. Resume reads the newest complete folder.
 */
#ifndef DT_TRAIN_CHECKPOINT_H
#define DT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/config.h"
#include "models/model.h"
#include "optim/loss_scale.h"
#include "train/engine.h"

typedef struct dt_train_state {
    int64_t step;               /* optimizer steps completed */
    int64_t data_pos, data_step; /* loader state after `step` steps */
    uint64_t seed;
    dt_loss_scale scaler; /* fp16 loss scale (scale, clean-step count, skipped steps; the
                           * window comes from the config) */
} dt_train_state;

/* The state as whole arenas (dt_model_numel floats each): weights and AdamW moments. */
typedef struct dt_ckpt_arenas {
    float *w, *m, *v;
    int adam_steps;
} dt_ckpt_arenas;

/* Remove all but the newest `keep` complete folders (keep 0 = keep all), and the partial
 * folders of this host's writers that were killed mid-save. */
dt_status dt_ckpt_prune(const char *dir, int keep);
dt_status dt_ckpt_load(const char *folder, const dt_model *g, dt_ckpt_arenas *a,
                       dt_train_state *s);

/* Every step-N folder with a manifest or state.json in dir, ascending; *steps malloc'ed. */
dt_status dt_ckpt_list(const char *dir, long long **steps, int *n);
void dt_ckpt_remove_folder(const char *path);
/* N of a folder name "step-N" (canonical decimal, no leading zeros, N < 2^31), else -1. */
long long dt_ckpt_folder_step(const char *name);
/* A folder named step-N must hold the state of step N: an error naming both otherwise. */
dt_status dt_ckpt_check_step(const char *folder, int64_t step);

/* ---- sharded format --------------------------------------------------------------------- */

/* The accountant's buffer for checksumming and for streaming offloaded moments (temp,
 * "ckpt.io"): the only memory a sharded save or load adds beyond training (an async save adds
 * its staging copy, see dt_ckpt_async_start). */
#define DT_CKPT_IO_BYTES ((size_t)8 << 20)
#define DT_CKPT_TMP_LEN (4096 + 64) /* a partial folder's path */

typedef struct dt_ckpt_meta {
    const dt_train_state *state;
    int adam_steps;
    const char *layout; /* "dp=2 tp=1 ..." or NULL */
    const char *config; /* the run's configuration as INI text, or NULL */
    bool ema;           /* the slices hold the weights' average too (train.ema_decay) */
} dt_ckpt_meta;

/* Collective over world: every rank writes its view (dt_engine_view_begin with load =
 * false), rank 0 the manifest and the rename. On failure no step-N appears and the partial
 * folder is removed; the training state is untouched. io: io_len bytes of scratch. The three
 * phases below, in a row. */
dt_status dt_ckpt_save_sharded(const char *dir, dt_comm *world, const dt_model *g,
                               const dt_engine_view *v, const dt_ckpt_meta *meta, void *io,
                               size_t io_len);
/* Phase 1, collective: rank 0 creates DIR/step-N.partial-<pid>-<nonce>; every rank gets its
 * path in tmp[tmp_len] (DT_CKPT_TMP_LEN). */
dt_status dt_ckpt_save_begin(const char *dir, dt_comm *world, int64_t step, char *tmp,
                             size_t tmp_len);
/* Phase 2, local, on any thread (no MPI): this rank's rank-R.safetensors (fsync'ed) and its
 * description. Offloaded moments (v->m NULL) stream from their file through io. */
dt_status dt_ckpt_save_rank(const char *tmp, int rank, const dt_model *g, const dt_engine_view *v,
                            void *io, size_t io_len);
/* Phase 3, collective: `written` is this rank's phase 2 outcome; when every rank succeeded,
 * rank 0 writes the manifest and renames tmp to DIR/step-N, else removes tmp. Every rank
 * returns the first failure. */
dt_status dt_ckpt_save_finish(const char *dir, const char *tmp, dt_comm *world,
                              const dt_model *g, const dt_ckpt_meta *meta, dt_status written);

/* An async save in flight (checkpoint_async.c). The training thread starts it, asks at each
 * step boundary whether every rank's background write has ended, and completes it (phase 3)
 * then, or waits for it at the next save and at the end of the run. */
typedef struct dt_ckpt_async dt_ckpt_async;
/* Collective: phase 1, then a copy of this rank's view into a staging buffer (accountant:
 * temp, "ckpt.staging", 4 x (w_count + 2 m_count) bytes, with its own "ckpt.io" of
 * DT_CKPT_IO_BYTES), then phase 2 on a background thread; returns when the copy is made.
 * meta and its strings are copied. g and mem are borrowed until the job ends. */
dt_status dt_ckpt_async_start(const char *dir, dt_comm *world, const dt_model *g,
                              const dt_engine_view *v, const dt_ckpt_meta *meta, dt_mem *mem,
                              dt_ckpt_async **out);
/* Collective over world (one tiny all-reduce): when every rank's write has ended or one has
 * failed (or `wait`: after waiting for this rank's), joins the thread, runs phase 3, frees the
 * job and sets *job = NULL; otherwise returns at once with *job unchanged. The error of a
 * failed write names the checkpoint, and is every rank's. *step: the step saved. */
dt_status dt_ckpt_async_poll(dt_ckpt_async **job, dt_comm *world, bool wait, int64_t *step);
/* Local: a run ending in an error. Waits for this rank's thread, frees the job; rank 0
 * removes the partial folder (no collective: peers may be gone). */
void dt_ckpt_async_abandon(dt_ckpt_async *job, int rank);

/* Whether folder holds a sharded checkpoint (its manifest.json exists). */
bool dt_ckpt_is_sharded(const char *folder);
/* Which kind of step folder `folder` is: sharded (manifest.json), whole (state.json), or
 * neither: then one error that says what is there (a sharded folder without its manifest,
 * a checkpoint.dir holding step folders, something else). */
dt_status dt_ckpt_folder_kind(const char *folder, bool *sharded);
/* Collective: the manifest's checksum and parse, every file's presence, size and CRC32C
 * (rank r checksums files r, r + world, ...). The error names the folder and what is wrong. */
dt_status dt_ckpt_verify(const char *folder, dt_comm *world, void *io, size_t io_len);
/* Local: fill the view (dt_engine_view_begin with load = true) from the slices that hold it,
 * after checking the model shape against the manifest's; state and AdamW step count too.
 * Offloaded moments (v->m NULL) go through io (io_len bytes) into their file. */
dt_status dt_ckpt_load_sharded(const char *folder, const dt_model *g, const dt_engine_view *v,
                               dt_train_state *s, int *adam_steps, void *io, size_t io_len);
/* The model shape the manifest records (arch, sizes, max_seq_len, rope_theta, norm_eps). */
dt_status dt_ckpt_model_config(const char *folder, dt_model_config *cfg);
/* A one-process model's weights (g built with no splits; w: dt_model_numel floats); with
 * `average`, the weights' average where the checkpoint holds one (*averaged says which was
 * read; may be NULL). */
dt_status dt_ckpt_load_weights(const char *folder, const dt_model *g, bool average, float *w,
                               bool *averaged);

/* dtrain convert: a sharded checkpoint -> one HuggingFace safetensors file (the weights;
 * what export writes: with the weights' average, where the checkpoint holds one, beside them as
 * NAME.ema.safetensors), and such a file -> a sharded step-0 checkpoint folder `out` (zero
 * moments, data position 0, seed `seed`) that any layout resumes. One process. */
dt_status dt_ckpt_convert_to_hf(const char *folder, const char *out);
/* A shape read from a file (`origin`) is a valid model whose weights fit in this machine's
 * memory: checked before a one-process model is built from it (sample, convert). */
dt_status dt_ckpt_check_shape(const dt_model_config *c, const char *origin);
dt_status dt_ckpt_convert_from_hf(const char *file, const char *out, uint64_t seed);

#endif
