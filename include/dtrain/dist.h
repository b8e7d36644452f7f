/* The world of ranks (public API): start-up under mpirun/srun or as a plain process, and the
 * communicator handle every collective call takes.
 *
 * dt_dist_init starts MPI (MPI_THREAD_FUNNELED; call it once, before any other dtrain call
 * that takes a dt_comm) and gives the world communicator; dt_dist_finalize frees it and ends
 * MPI. Ownership: the dt_comm is opaque and owned by the caller of dt_dist_init until
 * dt_dist_finalize. Thread-safety: a dt_comm is used by one thread at a time, and every MPI
 * call comes from the thread that called dt_dist_init.
 */
#ifndef DTRAIN_DIST_H
#define DTRAIN_DIST_H

#include "dtrain/status.h"

typedef struct dt_comm dt_comm;

/* MPI_Init_thread (if not yet initialised) and a dt_comm for MPI_COMM_WORLD. */
DT_API dt_status dt_dist_init(int *argc, char ***argv, dt_comm **world);
/* MPI_Finalize after freeing `world` (NULL allowed). */
DT_API void dt_dist_finalize(dt_comm *world);
/* Abort every rank with exit code `code`: for a caller whose peers would otherwise wait
 * forever (dt_booster_stranded). Does not return. */
DT_API void dt_dist_abort(dt_comm *world, int code);

/* This process's rank in c, and the number of ranks. */
DT_API int dt_comm_rank(const dt_comm *c);
DT_API int dt_comm_size(const dt_comm *c);
/* Collective: returns when every rank of c has called it. */
DT_API dt_status dt_comm_barrier(dt_comm *c);
/* Collective: the first non-OK status of any rank (with its message) on every rank, or DT_OK;
 * for a caller's own checks that must fail on all ranks alike. */
DT_API dt_status dt_comm_agree(dt_comm *c, dt_status local);

#endif
