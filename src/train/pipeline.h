/* The pipeline executor: runs one rank's row of a dt_schedule (plan/schedule.h) on its
 * stage of the model. Forward and backward are the model's per-chunk calls on per-micro-
 * batch activation slots; activations and their gradients cross stages as point-to-point
 * messages on the pp communicator, posted when the schedule says and waited for only when
 * the data is needed. The schedule has been validated before (every rank, same verdict), so
 * the order of messages cannot deadlock.
 *
 * Slots: a (chunk, micro-batch) takes a slot at its forward and gives it back after its
 * backward has sent its input gradient (or after its W); a slot's outgoing messages are
 * completed before it is reused. An input that arrives ahead of its forward lands in a small
 * inbox buffer (one boundary tensor) and is copied into the slot at the forward.
 * dt_sched_slots (plan/schedule.h) tells how many slots a schedule needs on a rank (GPipe:
 * all micro-batches; 1F1B: pp - r on stage r).
 *
 * Scattered boundaries (plugin.pp_scatter, dt_layout.pp_scatter): where the tp ranks of a
 * stage all hold the same whole boundary and the same gradient of it, each sends only its
 * piece (dt_layout_piece) to its peer of the next stage, and the receiving stage's tp group
 * all-gathers the pieces, in place, when the data is needed. Between machines that is 1/tp of
 * the bytes; inside one, a gather more.
 */
#ifndef DT_TRAIN_PIPELINE_H
#define DT_TRAIN_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "models/model.h"
#include "plan/schedule.h"
#include "plan/stages.h"
#include "train/trace.h"

typedef struct dt_pipeline dt_pipeline;

/* Checks that the schedule fits the plan (chunks, ranks) and the model was built with enough
 * slots and boundary gradient buffers (n_grads); boundary_floats: the largest boundary a
 * micro-batch carries (dt_model_boundary_count of the largest micro-batch, of every shape the model
 * trains on). scatter: the tp group whose pieces make a boundary, or NULL to send it whole.
 * Borrows all. */
dt_status dt_pipeline_init(const dt_schedule *s, const dt_stage_plan *plan, dt_comm *pp,
                           dt_comm *scatter, dt_model *model, int n_slots, int n_grads,
                           int64_t boundary_floats, dt_mem *mem, dt_pipeline **out);
void dt_pipeline_free(dt_pipeline *p);

/* The step's micro-batches, one after another: micro-batch mb's input at byte
 * mb * input_bytes of inputs, its target at mb * target_bytes of targets (dt_batch says what
 * the model reads there). */
typedef struct dt_pipeline_batch {
    const void *inputs, *targets;
    size_t input_bytes, target_bytes; /* of one micro-batch */
    int B, T;                         /* one micro-batch */
    float grad_scale;
} dt_pipeline_batch;

/* One step's forward and backward over the schedule. loss_sum: this rank's share (the last
 * stage's losses; 0 elsewhere). trace may be NULL. Collective over pp. */
dt_status dt_pipeline_run(dt_pipeline *p, const dt_pipeline_batch *b, dt_trace *trace, int step,
                          double *loss_sum);
/* Forward only, micro-batch after micro-batch (evaluation); loss_sum as above. */
dt_status dt_pipeline_eval(dt_pipeline *p, const dt_pipeline_batch *b, int n_mb, double *loss_sum);

#endif
