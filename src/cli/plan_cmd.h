/* `dtrain plan`: every layout of a model on N ranks, its predicted memory per category and step
 * time, which fit in a memory budget, ranked by time. Single process, no MPI; returns the
 * process exit code (0: something fits, 1: nothing fits, 2: bad input).
 */
#ifndef DT_CLI_PLAN_CMD_H
#define DT_CLI_PLAN_CMD_H

#include "core/config.h"
#include "core/status.h"

int dt_cli_plan(int argc, char **argv);

/* plugin.pp_layers = auto: replaces it in c with the layer counts the time model balances on
 * this machine (device `this`, measured now, shared by `world` ranks), and says so in the
 * log. Single process: `dtrain train` calls it on rank 0 and sends the answer to the rest. */
dt_status dt_cli_plan_auto_layers(dt_config *c, int world);

#endif
