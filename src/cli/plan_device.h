/* The devices `dtrain plan` knows (presets with their published figures, and `this`, measured
 * on this machine now) and the size/rate arguments it reads. */
#ifndef DT_CLI_PLAN_DEVICE_H
#define DT_CLI_PLAN_DEVICE_H

#include <stdint.h>

#include "core/status.h"
#include "plan/cost.h"

/* The rates and the memory per rank of device `name` for a run of `world` ranks (`this`
 * shares the machine's memory among them and leaves its rates to dt_plan_probe_this).
 * DT_ERR_ARG naming the known devices. */
dt_status dt_plan_device_get(const char *name, int world, dt_plan_device *out, int64_t *mem);
const char *dt_plan_device_names(void); /* "a100-80gb, h100-80gb, this" */

/* "80GiB", "512 MiB", "1.5TiB", "4096" (bytes) -> bytes */
dt_status dt_plan_parse_size(const char *text, int64_t *bytes);
/* "312T", "200G", "1.5e12", "25M" (decimal multiples) -> per second */
dt_status dt_plan_parse_rate(const char *text, double *rate);
/* "200G,150G": a forward and a backward rate */
dt_status dt_plan_parse_rate2(const char *text, dt_plan_rate2 *r);
/* One --coll-bw value, "AR,RS,AG,A2A,P2P[@SIZE]" (dtrain probe's rates at a message size;
 * none: every size), into d's table of sizes, kept in order of size; a size given again
 * replaces its rates. */
dt_status dt_plan_add_coll(const char *v, dt_plan_device *d);
/* dtrain probe's line of flags (--latency, --bandwidth, --coll-bw at each size,
 * --exposed-share) into d; DT_ERR_ARG when a figure is missing or unknown. */
dt_status dt_plan_read_probe(const char *flags, dt_plan_device *d);

#endif
