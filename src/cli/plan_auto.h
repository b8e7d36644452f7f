/* plugin.pp_layers = auto: the layer counts per pipeline chunk that the time model balances
 * (plan/cost.h: dt_plan_stage_split), put in the config in place of "auto", for `dtrain plan`
 * on its device and for `dtrain train` on this machine measured now. Single process. */
#ifndef DT_CLI_PLAN_AUTO_H
#define DT_CLI_PLAN_AUTO_H

#include <stdbool.h>

#include "core/config.h"
#include "core/status.h"
#include "plan/cost.h"

/* A pipeline whose stage boundaries are to be decided (plugin.pp_layers = auto, pp > 1). */
bool dt_cli_plan_is_auto(const dt_config *c);
/* The counts on device dev for a `world`-rank run of c, when c is auto; else nothing. */
dt_status dt_cli_plan_resolve_auto(dt_config *c, int world, const dt_plan_device *dev);
/* The same on this machine (device `this`, measured now, shared by `world` ranks), and says
 * so in the log. `dtrain train` calls it on rank 0 and sends the answer to the rest. */
dt_status dt_cli_plan_auto_layers(dt_config *c, int world);

#endif
