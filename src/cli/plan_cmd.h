/* `dtrain plan`: every layout of a model on N ranks, its predicted memory per category and step
 * time, which fit in a memory budget, ranked by time. Single process, no MPI; returns the
 * process exit code (0: something fits, 1: nothing fits, 2: bad input).
 */
#ifndef DT_CLI_PLAN_CMD_H
#define DT_CLI_PLAN_CMD_H

int dt_cli_plan(int argc, char **argv);

#endif
