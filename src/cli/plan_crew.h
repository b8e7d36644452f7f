/* Timing a kernel as the ranks of a run would meet it: side by side.
 *
 * The ranks of a layout on this machine share its cores' caches, memory bandwidth and (on a
 * shared VM) whatever the neighbours leave them, so a kernel timed in one process alone
 * measures a faster machine than the ranks get. A crew is `copies` processes (this one and
 * forked twins), each pinned to its own `threads` cores as mpirun binds ranks, that run the
 * same kernel together, run by run. A run lasts as long as its slowest copy: every stretch of
 * a step between two collectives waits for its slowest rank.
 *
 * A crew must start before this process runs any OpenMP region or matmul (a forked twin
 * inherits no thread pool), and never under MPI. */
#ifndef DT_CLI_PLAN_CREW_H
#define DT_CLI_PLAN_CREW_H

#include <stddef.h>

#include "core/status.h"

typedef struct dt_plan_crew dt_plan_crew;

/* A kernel to time, in up to DT_PLAN_PARTS parts (a forward and a backward; a training
 * step, its reading of rows and its update): setup makes its buffers from the job (a plain
 * struct copied to every copy), once runs it a time and says the seconds of each part (those
 * it leaves are 0), teardown frees the buffers. */
enum { DT_PLAN_PARTS = 3 };
typedef struct dt_plan_kernel {
    dt_status (*setup)(const void *job, void **state);
    dt_status (*once)(const void *job, void *state, double secs[DT_PLAN_PARTS]);
    void (*teardown)(void *state);
} dt_plan_kernel;

enum { DT_PLAN_JOB_BYTES = 256 };

/* `copies` <= 1 makes a crew of this process alone (nothing forked, nothing pinned). Should a
 * twin fail to start, the crew is this process alone and a warning says why. */
dt_status dt_plan_crew_start(int copies, int threads, dt_plan_crew **out);
int dt_plan_crew_size(const dt_plan_crew *c);

/* Seconds of each part: at least `reps` runs and `seconds` of running (at most 256 runs),
 * every copy starting each run together; secs[i] is the median over runs of the slowest
 * copy's time. The median, not the best: a step is a sum of many runs, each meeting whatever
 * the neighbours do then. job_size <= DT_PLAN_JOB_BYTES. */
dt_status dt_plan_crew_time(dt_plan_crew *c, const dt_plan_kernel *k, const void *job,
                            size_t job_size, int reps, double seconds, double secs[DT_PLAN_PARTS]);

/* Ends the twins and gives this process its cores back. NULL is fine. */
void dt_plan_crew_stop(dt_plan_crew *c);

#endif
