/* The MPI side of dtrain: process start-up, the dt_comm implementation, and the mesh's
 * per-axis communicators. The only code that includes mpi.h.
 *
 * dt_dist_init works under mpirun and as a plain process (MPI singleton). Communicators use
 * MPI_ERRORS_RETURN; an MPI failure becomes DT_ERR_MPI with MPI's own error string.
 * Threading: MPI_THREAD_FUNNELED is requested; all MPI calls come from the main thread.
 */
#ifndef DT_DIST_DIST_H
#define DT_DIST_DIST_H

#include "core/comm.h"
#include "dtrain/dist.h" /* dt_dist_init, dt_dist_finalize, dt_dist_abort */
#include "plan/mesh.h"

/* Collective: split `parent` by (color, key) into a new communicator named `name`. */
dt_status dt_dist_split(dt_comm *parent, int color, int key, const char *name, dt_comm **out);

typedef struct dt_mesh {
    dt_mesh_dims dims;
    int coords[DT_AXIS_COUNT];
    dt_comm *world;               /* borrowed */
    dt_comm *axis[DT_AXIS_COUNT]; /* owned: the group along each axis (size 1 = local comm) */
    dt_comm *grad; /* owned: sp x dp, the ranks holding the same weights (gradients summed) */
    dt_comm *tied; /* owned: the first and last pipeline stage of this rank's model replica
                    * (GPT-2's embedding and head copy); size 1 elsewhere and without pp */
} dt_mesh;

/* Collective over world: one communicator per axis from plan/mesh's pure rank math. */
dt_status dt_mesh_init(dt_comm *world, const dt_mesh_dims *dims, dt_mesh **out);
void dt_mesh_free(dt_mesh *m);

#endif
