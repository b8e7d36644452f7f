/* The layout: what runs where for one rank of a run, made in one place from (config, world
 * size, rank) and read by everything that must agree on it: the booster and the engine that
 * run a step, and the planner's memory, time and communication models that predict one. A new
 * way to split work is one more field here, not a rule repeated in each of them.
 *
 * Pure value: no MPI, no tensors, no allocation (the schedule is the caller's); thread-safe.
 * Every refusal is DT_ERR_ARG (or _UNSUPPORTED) naming the key and the numbers.
 *
 * Example, world 8 = pp 2 x dp 2 x tp 2, batch 16, micro_batch_size 2: rank 5 sits at (pp 1,
 * dp 0, cp 0, sp 0, tp 1); it reads rows [0, 8) of each global batch in 4 micro-batches of 2, its
 * gradients are summed over the 2 ranks of its gradient group, and it holds the second half
 * of the layers and the final unit.
 */
#ifndef DT_PLAN_LAYOUT_H
#define DT_PLAN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "plan/mesh.h"
#include "plan/schedule.h"
#include "plan/stages.h"

/* Where a unit's gradients live on this rank, decided once for the run (engine.c switches on
 * it; plan/memory.c counts it). */
typedef enum dt_grad_home {
    DT_GRAD_ARENA,       /* ZeRO 0/1: the model's whole gradient arena, all-reduced in buckets */
    DT_GRAD_ROTATING,    /* ZeRO 2/3 block: one of two unit buffers, reduce-scattered on leave */
    DT_GRAD_PINNED,      /* ZeRO 2/3 first/last unit: a buffer of its own, reduce-scattered on
                          * leave (micro-batch by micro-batch) */
    DT_GRAD_PINNED_STEP, /* the same under a pipeline, where the end units' backwards of
                          * several micro-batches interleave with other work: accumulated
                          * over the step, reduce-scattered after its last micro-batch */
    DT_GRAD_WHOLE,       /* ZeRO 2/3 under a split backward: the whole local arena, accumulated
                          * over the step and reduce-scattered once at its end */
    DT_GRAD_HOME_COUNT
} dt_grad_home;

/* What activation checkpointing reruns of block l before its backward (and again before its
 * W pass under a split backward): nothing, the attention core (selective: from the saved
 * q|k|v), or the whole block forward (full). Block l is checkpointed iff l % ac_every == 0. */
typedef enum dt_plan_rerun {
    DT_PLAN_RERUN_NONE,
    DT_PLAN_RERUN_ATTENTION,
    DT_PLAN_RERUN_BLOCK
} dt_plan_rerun;

typedef struct dt_layout {
    int world, rank;
    dt_mesh_dims dims;         /* degree per axis */
    int coords[DT_AXIS_COUNT]; /* this rank's place on each axis */
    int tp, sp, cp, dp, pp;    /* dims.size[], by name */
    /* the gradient group: the ranks that hold the same weights and read different tokens
     * (dp x cp x sp), and this rank's place in it; ZeRO shards over it */
    int grad_size, grad_rank;
    /* sequences */
    int B, T;        /* global batch (sequences a step) and tokens a sequence */
    int T_local;     /* tokens of each sequence this rank's ring place holds: T / cp */
    bool cp_zigzag;  /* plugin.cp_split = zigzag (2 chunks a rank), else contiguous (1) */
    int rows, row0;  /* sequences this dp rank reads a step, from row row0 of the batch */
    int mb, n_mb;    /* micro-batch rows and micro-batches a step */
    bool rows_tp;    /* Megatron-SP: the residual rows split over the tp ranks */
    int rows_split;  /* ranks the residual rows split over: tp under Megatron-SP, else 1 */
    bool pp_scatter; /* plugin.pp_scatter in force: pp > 1, tp > 1, the rows whole on each
                      * tp rank, and not a DiT with text (its text gradient is partial over
                      * tp); a boundary travels as tp pieces, all-gathered on arrival */
    int64_t tokens_mb, tokens_sp, tokens_rows; /* of a micro-batch: this ring rank's (mb
                                                * T_local), this Ulysses rank's (/ sp), this
                                                * rank's residual rows */
    /* what each rank keeps */
    int zero; /* ZeRO stage 0-3 */
    dt_precision precision;
    dt_ac_mode ac;
    int ac_every; /* >= 1 */
    /* pipeline: stages and what the schedule asks of this rank (1 slot, no inbox when pp 1) */
    int n_layer, pp_rank;
    dt_stage_plan stages;          /* pp 1: one chunk of every unit */
    bool held[DT_MAX_CHUNKS + 2];  /* units this rank holds: 0 embedding, 1..L, L+1 final */
    int n_slots, n_inbox, n_grads; /* dt_layout_set_schedule's; 1, 0 and 1 until then */
    bool split_backward;           /* the schedule has W actions */
    bool scheduled;                /* a schedule was set (always true when pp is 1) */
} dt_layout;

/* The layout of rank `rank` of a `world`-rank run of c: the mesh (dt_mesh_infer's rule), the
 * batch split into data-parallel rows and micro-batches (train.micro_batch_size or
 * plugin.microbatches; neither: one micro-batch of every row), the stages (plugin.pp_layers
 * or even), the ZeRO stage (dt_config_zero_stage) and the checkpointing. The model's own split
 * rules (heads and widths over tp and sp) are dt_model_check_split's. With pp > 1 the schedule
 * is set afterwards (dt_layout_set_schedule), since a file schedule is read by the caller. */
dt_status dt_layout_make(const dt_config *c, int world, int rank, dt_layout *out);

/* With buckets of clip shape (data.buckets): each bucket's layout out[k] (of
 * dt_config_of_bucket: its clip, batch and tokens; out holds DT_MAX_BUCKETS), *n of them (0:
 * none). One error naming the bucket that does not split, or whose micro-batch count under a
 * pipeline is not bucket 0's (one schedule runs every bucket). */
dt_status dt_layout_make_buckets(const dt_config *c, int world, int rank, dt_layout *out, int *n);

/* The schedule plugin.pp_schedule names (gpipe, 1f1b, interleaved with pp_chunks, zbh1) for
 * the layout's micro-batches; DT_ERR_ARG for a file: schedule, which the caller reads. */
dt_status dt_layout_schedule_make(const dt_layout *l, const dt_plugin_config *p, dt_schedule **out);
/* Checks that s is this layout's (pp, chunks, micro-batches), then records what it asks of
 * this rank: activation slots, inbox buffers, split backward. `what` names the schedule in a
 * refusal (e.g. "plugin.pp_schedule=1f1b"). Whether s is valid is dt_sched_validate's to
 * say, once, where a schedule is read (generated ones are valid by construction). */
dt_status dt_layout_set_schedule(dt_layout *l, const dt_schedule *s, const char *what);

/* dt_layout_make and, with pp > 1, its schedule: `given` (borrowed), or else the one
 * plugin.pp_schedule names, generated into *own (the caller frees it; NULL otherwise).
 * *sched is the schedule in force (NULL when pp is 1). The planner's way in. */
dt_status dt_layout_make_scheduled(const dt_config *c, int world, int rank,
                                   const dt_schedule *given, dt_layout *out,
                                   const dt_schedule **sched, dt_schedule **own);

/* Unit `unit` of the n_units this rank holds (local ids), by ZeRO stage, split backward and
 * pipeline; dt_layout_grad_home reads them from the layout. */
dt_grad_home dt_grad_home_of(int zero, bool split_backward, bool pipelined, int unit, int n_units);
dt_grad_home dt_layout_grad_home(const dt_layout *l, int unit, int n_units);
dt_plan_rerun dt_plan_ac_rerun(const dt_plugin_config *p, int l);
dt_plan_rerun dt_layout_rerun(const dt_layout *l, int block);
/* ZeRO 0/1's gradient buckets (plugin.bucket_mb as bytes): whole units in the order the
 * backward completes them (the last unit first), a bucket closing once it holds bucket_bytes
 * or reaches unit 0. closes[u] is the bucket whose lowest unit u is (that bucket is complete
 * when u's backward is, and spans u up to the unit below the previous bucket's lowest), or -1.
 * unit_floats: each unit's local weights. Returns the number of buckets. */
int dt_grad_buckets(const int64_t *unit_floats, int n_units, double bucket_bytes, int *closes);
/* Piece `part` of `parts` of n floats (a boundary under plugin.pp_scatter): [*first, *first +
 * *count), the pieces as even as whole floats allow. */
void dt_layout_piece(int64_t n, int parts, int part, int64_t *first, int64_t *count);
/* Units [0, L + 2) this rank holds, and whether it holds unit u. */
bool dt_layout_holds(const dt_layout *l, int unit);

#endif
