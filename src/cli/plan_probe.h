/* Measuring this machine for `dtrain plan --device this`: the attention kernel's rates (fp32
 * and bf16 modes), the norm's and the MLP activation's elements per second, at the shapes of
 * the config's model and micro-batch, and a matmul rate for every product shape the time
 * model asks about (measured once each, on first use). */
#ifndef DT_CLI_PLAN_PROBE_H
#define DT_CLI_PLAN_PROBE_H

#include "core/config.h"
#include "core/status.h"
#include "plan/cost.h"

typedef struct dt_plan_probe dt_plan_probe;

/* Fills d's attention, norm and activation rates and its gemm_rate; *out owns the matmul
 * measurements d->gemm_ctx points at (free it after the last use of d). */
dt_status dt_plan_probe_this(const dt_config *c, dt_plan_device *d, dt_plan_probe **out);
void dt_plan_probe_free(dt_plan_probe *p);

#endif
