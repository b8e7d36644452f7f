/* dtrain's public C API: the Booster, as ColossalAI users know it.
 *
 *   plugin = {type = zero2, precision = bf16, grad_clip = 1.0}   (core/config.h)
 *   booster = dt_booster_init(&plugin, world)                    ~ Booster(plugin=plugin)
 *   dt_booster_boost(booster, &spec)                             ~ booster.boost(model,
 *                                                                   optimizer, dataloader,
 *                                                                   lr_scheduler)
 *   loop: dt_booster_step(booster, &stats)                       ~ forward, backward,
 *                                                                   optimizer.step()
 * A plugin is a layout: `none`/`ddp` replicate, `zero1|2|3` are presets of `hybrid` with that
 * zero_stage; tp_size, sp_size (sp_mode) and pp_size (microbatches, pp_layers, pp_schedule,
 * pp_chunks) split the model. Every call is
 * collective over the world communicator (all ranks call it, in the same order); errors come
 * back on every rank with the same message. The world comes from dt_dist_init (dtrain/dist.h).
 * Ownership: dt_booster_init's booster is the caller's until dt_booster_free, which frees
 * everything boost() built (the model, optimizer state, data loader); pointers passed in are
 * borrowed for the call only; dt_booster_model/_mem return views owned by the booster.
 * Thread-safety: one thread drives a booster (the thread that called dt_dist_init); the
 * library runs its own OpenMP threads inside a call (OMP_NUM_THREADS).
 */
#ifndef DTRAIN_BOOSTER_H
#define DTRAIN_BOOSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/config.h"
#include "dtrain/dist.h"
#include "dtrain/mem.h"
#include "dtrain/status.h"

typedef struct dt_booster dt_booster;
typedef struct dt_model dt_model;

DT_API dt_status dt_booster_init(const dt_plugin_config *plugin, dt_comm *world, dt_booster **out);
DT_API void dt_booster_free(dt_booster *b);

/* Learning rate for 0-based optimizer step `step` (NULL: warmup + cosine/constant from the
 * optimizer config, as dtrain train does). */
typedef float (*dt_lr_schedule_fn)(void *ctx, int step);

/* What boost() turns into its distributed version: the model (built from its config, with
 * random or loaded weights), AdamW, the data source (token shards, or clips made on the fly)
 * and the batch shape, and the LR schedule. Pointers are borrowed for the call only. */
typedef struct dt_boost_spec {
    const dt_model_config *model;
    const dt_optim_config *optim;
    const char *train_data; /* llm.c token shard */
    const char *val_data;   /* NULL or "" = no evaluation */
    int batch_size;         /* global, in sequences */
    int micro_batch_size;   /* per rank; 0 = the rank's whole share */
    int seq_len;
    bool shuffle;
    uint64_t seed;            /* weights and data order */
    const char *init_weights; /* HF safetensors to start from; NULL or "" = random init */
    int total_steps;          /* for the default schedule */
    dt_lr_schedule_fn lr;     /* NULL = default */
    void *lr_ctx;
    bool trace; /* record each step's timeline (dt_booster_write_trace) */
    /* log every allocation and saved activation set into this rank's file of this name
     * (dt_booster_write_mem_timeline); NULL or "" = no log */
    const char *mem_timeline;
    /* Where batches come from (0 = DT_SOURCE_TOKENS: the shards train_data and val_data).
     * DT_SOURCE_BOUNCE: clips of bouncing shapes for a DiT, made from the seed (evaluation on
     * clips of a seed of their own, always available; train_data and val_data unused), with
     * `shapes` per clip and, for a model with classes, the chance label_dropout that a
     * training clip gets the null label. DT_SOURCE_CLIPS, DT_SOURCE_LATENTS: clips read from
     * the shard folders train_data and val_data (pixel clips of dtrain prepare --video, or a
     * VAE's latents), for an unconditional DiT of their shape. */
    dt_data_source source;
    int shapes;
    float label_dropout;
    /* A DiT's buckets of clip shape (dt_config's data.buckets; NULL or "": the model's one
     * shape, batch_size): each bucket's batch, layout and clips are its own, each step all ranks
     * take the bucket the seed draws for it; bucket k's clips from disk are the shards in the
     * folder named FxHxW inside train_data (and val_data) */
    const char *buckets;
    /* Token sources: documents kept apart (attention within a document, positions restarting
     * at each): a document ends after the id eot (-1: none) and where a Megatron dataset's
     * document index starts another */
    bool doc_mask;
    int eot;
    /* > 0: an exponential moving average of the weights (dt_engine: after each update,
     * ema = decay ema + (1 - decay) w), in checkpoints and exported beside the weights */
    float ema_decay;
    /* > 0: every rebalance_every steps a pipeline's chunks are timed and, when the slowest
     * exceeds their mean by more than rebalance_margin (a share), its layer boundaries move
     * (dt_config's train.rebalance_every) */
    int rebalance_every;
    float rebalance_margin;
} dt_boost_spec;

DT_API dt_status dt_booster_boost(dt_booster *b, const dt_boost_spec *spec);

typedef struct dt_step_stats {
    int64_t step;     /* optimizer steps completed, after this one */
    double loss;      /* mean cross-entropy of the step's global batch, before the update */
    double grad_norm; /* global, before clipping */
    float lr;
    double seconds;
    uint64_t comm_bytes; /* bytes this rank moved in the step's communication */
    uint64_t comm_bytes_grad, comm_bytes_tp, comm_bytes_sp,
        comm_bytes_pp;      /* the same, per
                             * group: gradients (dp x cp x sp), tensor parallel, Ulysses,
                             * pipeline (dtrain's bus-bytes count) */
    uint64_t comm_bytes_cp; /* the ring of context parallelism (keys, values and their
                             * gradients) */
    double comm_exposed_s;  /* time this rank's own thread spent in them (blocked, posting or
                             * waiting): the communication that did not overlap compute */
    double data_s;          /* of seconds: reading (or making) this rank's rows of the batch */
    double optimizer_s;     /* of seconds: the optimizer's update (ZeRO's gather of it included) */
    /* fp16 (1, false, 0 otherwise): the loss scale this step's backward used, whether its
     * gradients overflowed so that nothing was updated, and the run's skipped steps so far */
    float loss_scale;
    bool skipped;
    int64_t skipped_steps;
    int samples, seq_len; /* the step's global batch and tokens per sample (a bucket's) */
    int bucket;           /* the step's bucket of data.buckets (0 without) */
} dt_step_stats;

/* The recorded timeline of every step so far as Chrome-trace JSON (rank 0 writes). */
DT_API dt_status dt_booster_write_trace(dt_booster *b, const char *path);

/* Each rank's memory timeline (core/mem.h's JSON), named by spec.mem_timeline: rank 0 writes
 * that name, rank r the name with ".rank<r>" before its extension, or, when the name holds
 * "%d", every rank the name with its rank there. boost() checks every rank can write its file.
 * Collective over all ranks (every rank learns every rank's outcome). */
DT_API dt_status dt_booster_write_mem_timeline(dt_booster *b);

/* One optimizer step on the next global batch. */
DT_API dt_status dt_booster_step(dt_booster *b, dt_step_stats *stats);
/* True after a step or evaluation failed part-way on this rank: the other ranks may be
 * blocked waiting for it (a receive, a collective), so the caller should abort the job
 * (dt_dist_abort) rather than return. Errors of every other call reach all ranks alike. */
DT_API bool dt_booster_stranded(const dt_booster *b);

/* Mean validation loss over the first n_batches global batches of the val shard. */
DT_API dt_status dt_booster_eval(dt_booster *b, int n_batches, double *loss);

/* Training state to DIR/step-N, sharded: every rank writes what it owns, rank 0 the
 * manifest (see src/train/checkpoint.h). cfg (may be NULL) is recorded in the manifest.
 * With cfg->checkpoint.async, each rank copies its part to a staging buffer and a background
 * thread writes it while training goes on: the call returns after the copy, and step-N
 * appears when a later dt_booster_step (each asks, in one tiny all-reduce, whether every
 * rank's write has ended), the next save or dt_booster_wait_checkpoint completes it; a failed
 * write is that call's error, on every rank, and leaves no step-N. One save at a time: a save
 * first waits for the one in flight. Collective. */
DT_API dt_status dt_booster_save_checkpoint(dt_booster *b, const char *dir, const dt_config *cfg);
/* Collective: waits for an async save in flight, if any, and completes it (or returns its
 * error). Call it before the end of the run; dt_booster_free only abandons a save in flight
 * (no step-N appears). */
DT_API dt_status dt_booster_wait_checkpoint(dt_booster *b);
/* The step of the newest checkpoint this booster completed, -1 when none yet. */
DT_API int64_t dt_booster_last_checkpoint(const dt_booster *b);
/* Resume from a step folder written by any layout (sharded, or the older whole format). */
DT_API dt_status dt_booster_load_checkpoint(dt_booster *b, const char *folder);
/* Collective: the newest step folder in dir whose manifest and checksums verify, into out
 * ("" when dir has none); damaged ones are named in a warning and skipped. An error when
 * every one is damaged. */
DT_API dt_status dt_booster_find_checkpoint(dt_booster *b, const char *dir, char *out, size_t n);
/* Final weights as HuggingFace safetensors (rank 0 writes). */
DT_API dt_status dt_booster_export(dt_booster *b, const char *path);
/* Where export writes the weights' average (train.ema_decay) beside `path`: ".ema" before its
 * extension (model.safetensors -> model.ema.safetensors). */
DT_API void dt_booster_ema_path(const char *path, char *out, size_t n);
/* Temperature sampling of n_new tokens after the prompt, in any layout: the weights are
 * gathered, rank 0 runs a one-process copy of the model, and every rank receives the tokens
 * in out[n_new]. Collective over the world; reproducible from the seed. */
DT_API dt_status dt_booster_sample(dt_booster *b, const int32_t *prompt, int n_prompt, int n_new,
                                   float temperature, uint64_t seed, int32_t *out);

DT_API int64_t dt_booster_steps_done(const dt_booster *b);
DT_API dt_model *dt_booster_model(dt_booster *b);
DT_API int dt_booster_dp_size(const dt_booster *b);
DT_API int dt_booster_micro_batch(const dt_booster *b);
/* Rank's own memory accountant (peaks by category). */
DT_API dt_mem *dt_booster_mem(dt_booster *b);

#endif
