/* The data-parallel engine: one model replica per dp rank, ZeRO stages 0-3 over the dp
 * communicator (Rajbhandari et al., "ZeRO", SC'20).
 *
 *   stage 0 (DDP)  full weights, grads and AdamW state; gradients all-reduced in buckets of
 *                  whole units, each started as soon as backward finishes its units
 *   stage 1        as 0, but AdamW state (and the update) only for this rank's shard of the
 *                  arena; the updated weights are all-gathered
 *   stage 2        gradients reduce-scattered unit by unit from two rotating unit-sized
 *                  buffers into this rank's gradient shard: no full gradient is kept
 *   stage 3 (FSDP) weights sharded too: each block's weights all-gathered into one of two
 *                  unit buffers just before it runs (forward and again in backward), the next
 *                  block's gather posted ahead so it overlaps compute
 * The shard of rank r is arena elements [r S, (r+1) S), S = ceil(n / dp) rounded to 16
 * floats; ranks past the end own fewer (padding handled, never asserted away). Embedding and
 * final units (a language model's embedding and head) stay gathered for the whole step.
 * Gradients accumulate over micro-batches; stages 0-1 communicate on the last micro-batch
 * only, stages 2-3 on every one (their full gradients do not outlive a unit).
 */
#ifndef DT_TRAIN_ENGINE_H
#define DT_TRAIN_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/config.h"
#include "core/mem.h"
#include "models/model.h"

typedef struct dt_engine dt_engine;

typedef struct dt_engine_opts {
    int zero_stage;
    float bucket_mb;
    bool overlap; /* false: reduce after backward (stages 0-1) or at once (2-3), to compare */
    dt_precision precision;
    int B, T;         /* micro-batch shape (T: this rank's tokens of a sequence under a ring) */
    const dt_model_shape *shapes; /* a DiT's buckets (dt_model_opts); NULL: one shape */
    int n_shapes;
    dt_comm *tp, *sp; /* the model's splits (borrowed; NULL = none), see dt_model_opts */
    bool sequence_tp;
    dt_comm *cp; /* the ring of context parallelism (borrowed; NULL = none) */
    bool cp_zigzag;
    /* Pipeline (dt_model_opts): units held, activation slots, the pp group, and the group of
     * the first and last stage, over which the model's tied tensors (dt_model_tie) are summed
     * (NULL or size 1: none).
     * With pp > 1 the step is driven by a pipeline executor: gradients of ZeRO 0/1 and of the
     * embedding/final units are reduced in dt_engine_finish, after the last micro-batch. */
    const bool *units;
    int n_slots, n_grads;
    dt_comm *pp, *tied;
    bool split_backward; /* zero-bubble schedules (W actions); with ZeRO 2/3 the gradients
                          * are then kept whole over the step (see engine.c) */
    dt_ac_mode ac;       /* activation checkpointing and storage, see dt_model_opts */
    int ac_every;
    dt_act_compress act_compress;
    dt_offload act_offload; /* the activations' file (dt_model_opts), named by world_rank */
    const char *act_offload_dir;
    bool doc_mask; /* inputs carry document starts (dt_model_opts) */
    /* train.ema_decay > 0: an exponential moving average of the fp32 weights, kept where the
     * optimizer keeps its moments (the whole arena under ZeRO 0, this rank's shard under 1-3):
     * after every update ema = decay ema + (1 - decay) w, starting from the weights of the
     * first update */
    float ema_decay;

    /* plugin.offload=disk: this rank's AdamW moments (the whole arena under ZeRO 0, its shard
     * under 1-3) live in a file under offload_dir, streamed through a window of
     * offload_window_mb MiB (optim/offload.h); world_rank names the file. */
    dt_offload offload;
    const char *offload_dir; /* borrowed for init */
    float offload_window_mb;
    int world_rank;
    /* how the model is built from mc and the engine's dt_model_opts (NULL: dt_model_create,
     * by model.arch; a test passes its own model) */
    dt_model_create_fn create;
} dt_engine_opts;

/* Collective over dp: the ranks that hold the same weights (dp x sp under Ulysses). */
dt_status dt_engine_init(const dt_model_config *mc, const dt_optim_config *oc,
                         const dt_engine_opts *o, dt_comm *dp, dt_mem *mem, dt_engine **out);
void dt_engine_free(dt_engine *e);
dt_model *dt_engine_model(dt_engine *e);

dt_status dt_engine_init_weights(dt_engine *e, uint64_t seed);

/* One optimizer step: begin, micro_batch x n, finish (waits for every reduction), then
 * grad_norm and apply. `last` marks the step's last micro-batch. */
dt_status dt_engine_begin_step(dt_engine *e);
dt_status dt_engine_micro_batch(dt_engine *e, const dt_batch *b, float grad_scale, bool last,
                                double *loss_sum);
dt_status dt_engine_finish(dt_engine *e);
dt_status dt_engine_grad_norm(dt_engine *e, double *norm); /* global, over all shards */
dt_status dt_engine_apply(dt_engine *e, float lr, float grad_scale);
/* Loss without gradients (evaluation). */
dt_status dt_engine_eval(dt_engine *e, const dt_batch *b, double *loss_sum);

/* Full-arena copies (dt_model_full_numel floats) of weights and AdamW moments (collective over
 * dp and tp; any pointer may be NULL) and their inverse, so checkpoints are the same files
 * whatever the layout, offloaded or not. */
dt_status dt_engine_gather_state(dt_engine *e, float *w, float *m, float *v);
/* The full-arena copy of the weights' average (train.ema_decay); DT_ERR_ARG when the run keeps
 * none. Collective like dt_engine_gather_state. */
dt_status dt_engine_gather_ema(dt_engine *e, float *full);
bool dt_engine_has_ema(const dt_engine *e);
dt_status dt_engine_scatter_state(dt_engine *e, const float *w, const float *m, const float *v);
/* A rank's own part of the state, for sharded checkpoints (train/checkpoint.h): weights of
 * local-arena elements [w_first, w_first + w_count) at w, moments of [m_first, m_first +
 * m_count) at m and v (each pointer at its range's first element). To save, both ranges are
 * the rank's ZeRO partition of the local arena (also under ZeRO 0, so the data-parallel ranks
 * share the writing); to load, they are everything the rank holds. Offloaded moments have no
 * memory to point at: m and v are NULL, and the caller moves them piece by piece through a
 * buffer of its own with dt_engine_view_read_moment / _write_moment (straight from / to the
 * file), so a checkpoint allocates nothing of the state's size. */
typedef struct dt_engine_view {
    int64_t w_first, w_count, m_first, m_count;
    float *w, *m, *v;
    float *ema;        /* over the moments' range; NULL when the run keeps no average */
    dt_engine *engine; /* borrowed; NULL for a view of plain buffers */
} dt_engine_view;
dt_status dt_engine_view_begin(dt_engine *e, bool load, dt_engine_view *out);
/* Local-arena elements [first, first + n) (inside the view's moment range) of moment `which`
 * (0 exp_avg, 1 exp_avg_sq, 2 the weights' average), out of / into the optimizer, wherever
 * they live. Writing the average makes it the one the run continues (not restarted from the
 * weights at the next update). */
dt_status dt_engine_view_read_moment(const dt_engine_view *v, int which, int64_t first,
                                     int64_t n, float *out);
dt_status dt_engine_view_write_moment(const dt_engine_view *v, int which, int64_t first,
                                      int64_t n, const float *in);
/* loaded: the view's contents were replaced (the bf16 copy and ZeRO-3's gathered units are
 * refreshed). */
dt_status dt_engine_view_end(dt_engine *e, dt_engine_view *v, bool loaded);
/* This rank's ZeRO partition of the local arena (under ZeRO 0 and 1 too: the data-parallel
 * ranks share it out) in the reduced gradients (after dt_engine_finish) or the fp32 weights:
 * local-arena elements [first, first + count) at x. Every element is some rank's. */
void dt_engine_own_range(const dt_engine *e, bool grads, const float **x, int64_t *first,
                         int64_t *count);
/* Compute seconds of each unit this rank holds since the last call (training passes only),
 * timed between the unit hooks, so the gathers and reductions they wait for are not counted:
 * added into per_unit[global unit] (the model's units, 0 .. n_layer + 1), the LM head's
 * passes into *head; the clocks restart. */
void dt_engine_take_unit_seconds(dt_engine *e, double *per_unit, double *head);
/* The full-arena average back into the engine (the inverse of dt_engine_gather_ema); the run
 * continues from it. DT_ERR_ARG when the run keeps none. */
dt_status dt_engine_scatter_ema(dt_engine *e, const float *full);
int dt_engine_adam_steps(const dt_engine *e);
void dt_engine_set_adam_steps(dt_engine *e, int t);

#endif
