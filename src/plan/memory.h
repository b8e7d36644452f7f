/* The memory model: the bytes every accountant category (core/mem.h) peaks at on one rank of a
 * layout, predicted from the configuration alone, before anything is allocated.
 *
 * Derived from the algorithm, not fitted and not by calling the allocating code: the parameter
 * arena is the HuggingFace tensor table padded to 16 floats per tensor (tp shards, vocabulary
 * rows rounded up), ZeRO shards are ceil(n / p) rounded to 16 floats, activations and
 * transients are 64-byte pieces, and the pipeline's activation slots and inbox buffers come
 * from replaying the schedule the run executes. Pure: no MPI, no tensors; thread-safe.
 */
#ifndef DT_PLAN_MEMORY_H
#define DT_PLAN_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mem.h"
#include "core/status.h"
#include "plan/schedule.h"

/* Floats per chunk of the optimizer's window under plugin.offload = disk, for an optimizer of
 * `count` floats and plugin.offload_window_mb = window_mb: as many 16-byte chunk floats as two
 * slots fit in the window (multiple of 16, at least 16), at most half the count rounded up to
 * 16. The window ("adamw.offload_window", optim) is 16 x chunk bytes. */
int64_t dt_plan_offload_chunk(int64_t count, float window_mb);

typedef struct dt_plan_mem_opts {
    const dt_schedule *schedule; /* the pipeline schedule run (borrowed); NULL: generated from
                                  * plugin.pp_schedule (a file: schedule must be given) */
    bool at_export;              /* count train.export's gather buffers in temp (the run's
                                  * mem_report is written before export: false there) */
} dt_plan_mem_opts;

/* One rank's prediction. cat[] are per-category peaks (bytes as requested from the
 * accountant), total the peak of their sum at one instant. */
typedef struct dt_plan_mem {
    int64_t cat[DT_MEM_CAT_COUNT];
    int64_t total;
    /* what the prediction rests on, for --explain and tests */
    int pp_rank, grad_rank;         /* coordinates: pipeline stage, rank in the gradient group */
    int n_slots, n_inbox, n_grads;  /* activation slots; pipeline inbox and boundary gradients */
    int64_t n_local;                /* floats of this rank's padded parameter arena */
    int64_t own_count;              /* floats of the arena this rank's ZeRO shard owns */
    int64_t n_full;                 /* floats of the whole model's padded arena (checkpoints) */
    int64_t acts_arena, temp_arena; /* the carved activation and transient arenas */
    int64_t batch_in, batch_tg;     /* a DiT's batch buffers of inputs and targets */
    int64_t inbox_each;             /* one pipeline inbox buffer (a DiT's), bytes */
    /* What one block keeps for its backward per micro-batch (its saved tensors and its
     * output's residual position, the next block's input), in bytes per token of the
     * micro-batch, per hidden unit: Korthikanti et al. 2022's per-layer measure (34 + 5 a s / h
     * for a 16-bit layer without recomputation, 2 with full). 0: no block held, or a DiT. */
    double block_bytes_per_token_hidden;
    /* plugin.act_offload = disk: bytes of one (micro-batch, block) record, which the forward
     * writes and the backward reads (a split backward's weight pass reads it again), and of
     * this rank's file (a record per slot and held block); 0 otherwise */
    int64_t act_disk_record, act_disk_file;
} dt_plan_mem;

/* Predict rank `rank` of a `world`-rank run of c. DT_ERR_ARG naming the key when the layout
 * does not split (world, batch, micro-batches, stages); the model's own split rules (heads,
 * MLP width over tp and sp) are the caller's to check (dt_gpt_check_split). With buckets of
 * clip shape (data.buckets) the run holds, beside the one model, the largest of each bucket's
 * activation and transient arenas, batch buffers and pipeline inbox (each bucket alone:
 * dt_plan_memory of dt_config_of_bucket); a bucket that does not split is named. */
dt_status dt_plan_memory(const dt_config *c, int world, int rank, const dt_plan_mem_opts *o,
                         dt_plan_mem *out);

/* plugin.act_offload = disk, GPT-2 and Llama: bytes of one (micro-batch, block) record on
 * the layout's rank (dt_plan_mem.act_disk_record), for the time model. */
struct dt_layout;
int64_t dt_plan_act_disk_record(const dt_config *c, const struct dt_layout *l);

/* The model's parameter count from its config alone (no allocation, O(1) in n_layer; the
 * arena's 16-float padding left out): for a size check before anything is built. */
double dt_plan_param_count(const dt_model_config *m);

#endif
