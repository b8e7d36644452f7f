/* The time model: one training step's time on a device described by three rates, from the
 * work the layout gives each rank.
 *
 *   compute   matmul FLOPs / the device's matmul rate: forward 2 x (weights) per token plus
 *             attention's two matmuls (causal: half of 4 T hs per head and token) and the LM
 *             head; backward twice the forward (split backward: input half B and weight half
 *             W, one forward each); full activation checkpointing reruns the checkpointed
 *             blocks' forward, selective reruns the attention core
 *   comm      every collective's bus bytes (the convention of core/comm.c) / bandwidth, plus a
 *             latency per call: tensor-parallel region ops and Ulysses all-to-alls inside the
 *             blocks (never hidden), ZeRO's reductions and gathers over dp x sp (hidden behind
 *             the backward when plugin.overlap), pipeline boundary messages
 *   pipeline  the bubble is what the schedule itself gives: every rank's actions are replayed
 *             with these per-action costs, a receive waiting for its send
 * Memory-bound passes: the optimizer step (its state streamed once), plugin.offload = disk
 * (the optimizer state read and written through the disk every step) and plugin.act_compress
 * = int8 (each kept tensor read and written once to compress, once to restore).
 * Pure: no MPI, no tensors; thread-safe. Kernels that are not matmuls (norms, softmax,
 * pointwise) are left out, which makes small models look faster than they run.
 */
#ifndef DT_PLAN_COST_H
#define DT_PLAN_COST_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "plan/schedule.h"

typedef struct dt_plan_device {
    double flops_fp32, flops_16; /* matmul FLOP/s per rank: fp32, and bf16/fp16 operands */
    double bandwidth;            /* bytes/s one rank moves in a collective or a message */
    double latency;              /* seconds per collective call or message */
    double mem_bandwidth;        /* bytes/s of memory (the optimizer step streams its state) */
    double disk_bandwidth;       /* bytes/s to the offload files (plugin.offload = disk) */
} dt_plan_device;

typedef struct dt_plan_time {
    double step_s;    /* the slowest rank's step */
    double compute_s; /* its busy time: matmuls and the tp/sp collectives between them */
    double comm_s;    /* its data-parallel communication not hidden behind compute */
    double bubble;    /* pipeline: idle share of the replayed schedule (0 without pp) */
} dt_plan_time;

/* Predict one step of a `world`-rank run of c. sched: the pipeline schedule run (borrowed;
 * NULL: generated from plugin.pp_schedule). DT_ERR_ARG when the layout does not split. */
dt_status dt_plan_step_time(const dt_config *c, int world, const dt_plan_device *d,
                            const dt_schedule *sched, dt_plan_time *out);

#endif
