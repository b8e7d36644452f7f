/* The communication ledger: the bytes one training step moves on each of a rank's comms, as
 * the run's metrics count them (comm_bytes_grad, _tp, _sp, _pp; core/comm.c's bus-bytes
 * convention), from every collective and message the algorithm makes, in the order it makes
 * them (nn/block.c, models/gpt.c, nn/lm_head.c; the video DiT's models/dit_fwd.c, dit_units.c,
 * dit_tp.c; train/engine.c, train/pipeline.c), for the units the rank's pipeline stage holds.
 * Pure; thread-safe.
 */
#ifndef DT_PLAN_COMM_H
#define DT_PLAN_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "plan/schedule.h"

typedef struct dt_plan_comm {
    bool grad_known; /* false: ZeRO-3 under a pipeline (its gathers follow the schedule's
                      * order of units, not modelled); grad is then 0 */
    int64_t grad;    /* over dp x cp x sp: gradient buckets or ZeRO reductions and gathers */
    int64_t tp;      /* tensor-parallel region ops, the loss statistics, Megatron-SP row grads */
    int64_t sp;      /* Ulysses all-to-alls */
    int64_t pp;      /* pipeline boundary messages sent, and the gradient norm's all-reduce */
    int64_t cp;      /* ring attention: key/value blocks and their gradients sent */
    int64_t calls_grad, calls_tp, calls_sp; /* collective calls that move bytes */
    int64_t grad_gather, calls_grad_gather; /* of grad: the weights' all-gathers (ZeRO 1-3) */
} dt_plan_comm;

/* Rank `rank` of a `world`-rank run of c, one step. sched: the pipeline schedule run
 * (borrowed; NULL: generated from plugin.pp_schedule). DT_ERR_ARG when the layout does not
 * split. */
dt_status dt_plan_comm_bytes(const dt_config *c, int world, int rank, const dt_schedule *sched,
                             dt_plan_comm *out);
/* The same ledger's gradient group alone (grad, grad_gather, their calls, grad_known; the
 * rest 0): what the time model needs of it, without replaying the micro-batches. */
dt_status dt_plan_comm_grad_bytes(const dt_config *c, int world, int rank, const dt_schedule *sched,
                                  dt_plan_comm *out);

#endif
