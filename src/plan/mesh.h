/* The 5-D device mesh (pp, dp, cp, sp, tp) as pure rank arithmetic, tp varying fastest
 * (Megatron), then Ulysses inside the context-parallel ring (sp nearer than cp):
 *     rank = (((pp_i * dp + dp_i) * cp + cp_i) * sp + sp_i) * tp + tp_i
 * Example, world 8 = pp 2 x dp 2 x cp 1 x sp 1 x tp 2: rank 5 has coordinates (pp 1, dp 0,
 * cp 0, sp 0, tp 1); its tp group is {4, 5}, its dp group {5, 7}, its pp group {1, 5}.
 * No MPI here: dist/mesh.c turns (color, key) into MPI_Comm_split calls.
 */
#ifndef DT_PLAN_MESH_H
#define DT_PLAN_MESH_H

#include "core/status.h"

typedef enum dt_axis {
    DT_AXIS_TP,
    DT_AXIS_SP,
    DT_AXIS_CP,
    DT_AXIS_DP,
    DT_AXIS_PP,
    DT_AXIS_COUNT
} dt_axis;

typedef struct dt_mesh_dims {
    int size[DT_AXIS_COUNT]; /* degree per axis, each >= 1 */
} dt_mesh_dims;

const char *dt_axis_name(dt_axis a); /* "tp", "sp", "cp", "dp", "pp" */
int dt_mesh_world(const dt_mesh_dims *d);
/* Infer dp = world / (pp cp sp tp) and check the product; the error names all the numbers. */
dt_status dt_mesh_infer(int world, int pp, int cp, int sp, int tp, dt_mesh_dims *out);
void dt_mesh_coords(const dt_mesh_dims *d, int rank, int coords[DT_AXIS_COUNT]);
int dt_mesh_rank(const dt_mesh_dims *d, const int coords[DT_AXIS_COUNT]);
/* The group of ranks that differ from `rank` only along `axis`: color identifies the group,
 * key is the rank's position in it (= its coordinate on that axis). */
void dt_mesh_group(const dt_mesh_dims *d, int rank, dt_axis axis, int *color, int *key);
/* The same for several axes at once (a bit mask of 1 << axis): the ranks that differ only
 * along those axes, keyed with the lowest axis fastest. The gradient group of sequence
 * parallelism is sp x cp x dp: its ranks hold the same weights and different tokens. */
void dt_mesh_group_axes(const dt_mesh_dims *d, int rank, unsigned axes, int *color, int *key);

#endif
