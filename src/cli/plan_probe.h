/* Measuring this machine for `dtrain plan --device this`: the matmul peaks, the memory
 * copy rate, the attention kernel's rates (fp32 and bf16 modes), the norm's and the MLP
 * activation's elements per second, at the shapes of the config's model and micro-batch, and
 * a matmul rate for every product shape the time model asks about (measured once each, on
 * first use). Each is timed by `copies` processes side by side, as that many ranks run. Then,
 * for a run of several ranks, the MPI collectives (dtrain probe under mpirun), and a training
 * step of one of the layout's ranks: its reading of rows gives data_rate, its update
 * opt_bandwidth, and the rest over the model's compute scales every pass (step_ratio). */
#ifndef DT_CLI_PLAN_PROBE_H
#define DT_CLI_PLAN_PROBE_H

#include "cli/plan_device.h"
#include "core/config.h"
#include "core/status.h"
#include "plan/cost.h"

typedef struct dt_plan_probe dt_plan_probe;

/* Fills the rates of d (whose cores and threads dt_plan_device_get measured) and its
 * gemm_rate; *out owns the copies and the matmul measurements d->gemm_ctx points at (free it
 * after the last use of d). `copies`: the ranks of the run that share this machine (at most
 * the cores over the threads a rank runs; 1 where this process is a rank under MPI, whose
 * neighbours are the other ranks). step_world > 0: also train rank 0 of c's layout on that
 * many ranks (its pipeline left out) in this process, its peers absent and its collectives
 * moving nothing (else, where that layout cannot be timed here, one rank on the share of the
 * batch that many ranks of data parallelism give it), and set d->data_rate, d->opt_bandwidth
 * and d->step_ratio from its measured parts (probe_step; 0: no step, the ratio 1). Must come
 * before any OpenMP region of this process. */
dt_status dt_plan_probe_this(const dt_config *c, int copies, int step_world, dt_plan_device *d,
                             dt_plan_probe **out);
void dt_plan_probe_free(dt_plan_probe *p);
/* The matmul shapes p has timed so far and their rates (its gemm_rate's memory). */
const dt_plan_gemm_table *dt_plan_probe_gemms(const dt_plan_probe *p);

#endif
