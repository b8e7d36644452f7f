/* dtrain probe: the collectives of this cluster, measured, as flags for dtrain plan.
 *
 *   mpirun -np N dtrain probe [--mib M] [--reps R] > device.flags
 *   dtrain plan --device this $(cat device.flags) --config ...
 *
 * Run under the launcher and on the ranks a run would use: every rank times the collectives
 * dtrain's runtime calls (all-reduce, reduce-scatter, all-gather, all-to-all over all ranks, and
 * a message between ranks 0 and 1) on M MiB, each where a step calls it (after a stretch of
 * work through the caches, as what it adds to that stretch, and at least its time between
 * bare barriers), and how much of an all-reduce stays exposed when compute runs beside it and tests
 * it between pieces, as the engine does. Rank 0 prints the figures in the planner's terms
 * (plan/cost.h): the latency, each kind's bytes per second a rank moves, the exposed share.
 */
#ifndef DT_CLI_PROBE_CMD_H
#define DT_CLI_PROBE_CMD_H

int dt_cli_probe(int argc, char **argv);

#endif
