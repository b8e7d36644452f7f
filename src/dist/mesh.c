/* The mesh's per-axis communicators: plan/mesh.h decides who is in which group (pure math),
 * this file only turns each (color, key) into a communicator. See dist.h.
 *
 * Ownership: a dt_mesh owns its axis communicators and borrows world.
 * MPI safety: dt_mesh_init is collective over world; every rank must pass the same dims.
 */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>

/* The group of `size` ranks in which this rank is `key`: split from world by color under
 * MPI; on a stand-in world (core/comm.h: one rank's work timed in one process) a stand-in of
 * that size, since no peer exists to split with. */
static dt_status make_group(dt_comm *world, int color, int key, int size, const char *name,
                            dt_comm **out) {
    if (dt_comm_is_standin(world))
        return dt_comm_standin_init(name, key, size, out);
    return dt_dist_split(world, color, key, name, out);
}

/* The gradient group spans sp, cp and dp; with sp and cp 1 it is the dp group's ranks (own
 * comm). */
static dt_status split_grad(dt_mesh *m, dt_comm *world) {
    const dt_mesh_dims *d = &m->dims;
    int n = d->size[DT_AXIS_SP] * d->size[DT_AXIS_CP] * d->size[DT_AXIS_DP];
    if (n == 1)
        return dt_comm_local_init("grad", &m->grad);
    int color, key;
    dt_mesh_group_axes(d, world->rank, 1u << DT_AXIS_SP | 1u << DT_AXIS_CP | 1u << DT_AXIS_DP,
                       &color, &key);
    DT_TRY(make_group(world, color, key, n, "grad", &m->grad));
    if (m->grad->size != n || m->grad->rank != key)
        return dt_err_set(DT_ERR_MPI, "mesh: grad group rank %d of %d, expected %d of %d",
                          m->grad->rank, m->grad->size, key, n);
    return DT_OK;
}

/* First and last stage of each replica: a split of world in which every middle-stage rank
 * (and every rank, without pp) is alone. */
static dt_status split_tied(dt_mesh *m, dt_comm *world) {
    int pp = m->dims.size[DT_AXIS_PP], stage = m->coords[DT_AXIS_PP];
    if (pp == 1)
        return dt_comm_local_init("tied", &m->tied);
    int color, key;
    dt_mesh_group(&m->dims, world->rank, DT_AXIS_PP, &color, &key);
    bool end = stage == 0 || stage == pp - 1;
    int want = end ? 2 : 1;
    DT_TRY(make_group(world, end ? color : world->size + world->rank, stage == 0 ? 0 : want - 1,
                      want, "tied", &m->tied));
    if (m->tied->size != want)
        return dt_err_set(DT_ERR_MPI, "mesh: tied group of %d ranks, expected %d", m->tied->size,
                          want);
    return DT_OK;
}

dt_status dt_mesh_init(dt_comm *world, const dt_mesh_dims *dims, dt_mesh **out) {
    *out = NULL;
    /* the same dims reach every rank, so every rank rejects them alike, before any collective */
    for (int a = 0; a < DT_AXIS_COUNT; a++)
        if (dims->size[a] < 1)
            return dt_err_set(DT_ERR_ARG, "mesh: %s size %d must be at least 1",
                              dt_axis_name((dt_axis)a), dims->size[a]);
    int want = dt_mesh_world(dims);
    if (want != world->size)
        return dt_err_set(DT_ERR_ARG,
                          "mesh: pp %d x dp %d x cp %d x sp %d x tp %d = %d ranks, but world "
                          "has %d",
                          dims->size[DT_AXIS_PP], dims->size[DT_AXIS_DP], dims->size[DT_AXIS_CP],
                          dims->size[DT_AXIS_SP], dims->size[DT_AXIS_TP], want, world->size);

    dt_mesh *m = calloc(1, sizeof *m);
    if (!m)
        return dt_err_set(DT_ERR_OOM, "mesh: out of memory");
    m->dims = *dims;
    m->world = world;
    dt_mesh_coords(dims, world->rank, m->coords);

    /* Every rank makes every split even after a local failure, so the collective calls stay
     * matched across ranks; the agreement below then fails all of them together. */
    dt_status st = DT_OK;
    char first[512] = "";
    for (int a = 0; a < DT_AXIS_COUNT; a++) {
        const char *name = dt_axis_name((dt_axis)a);
        dt_status sa;
        if (dims->size[a] == 1) {
            sa = dt_comm_local_init(name, &m->axis[a]);
        } else {
            int color, key;
            dt_mesh_group(dims, world->rank, (dt_axis)a, &color, &key);
            sa = make_group(world, color, key, dims->size[a], name, &m->axis[a]);
            if (sa == DT_OK && m->axis[a]->rank != key)
                sa = dt_err_set(DT_ERR_MPI, "mesh: %s rank %d, but the mesh math says %d", name,
                                m->axis[a]->rank, key);
        }
        if (sa == DT_OK && m->axis[a]->size != dims->size[a])
            sa = dt_err_set(DT_ERR_MPI, "mesh: %s group has %d ranks, expected %d", name,
                            m->axis[a]->size, dims->size[a]);
        if (st == DT_OK && sa != DT_OK) {
            st = sa; /* keep the first failure's message: a later failure would overwrite it */
            snprintf(first, sizeof first, "%s", dt_err_msg());
        }
    }
    dt_status sg = split_grad(m, world);
    dt_status stt = split_tied(m, world);
    if (sg == DT_OK)
        sg = stt;
    if (st == DT_OK && sg != DT_OK) {
        st = sg;
        snprintf(first, sizeof first, "%s", dt_err_msg());
    }
    if (st != DT_OK)
        dt_err_set(st, "%s", first);
    st = dt_comm_agree(world, st);
    if (st != DT_OK) {
        dt_mesh_free(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

void dt_mesh_free(dt_mesh *m) {
    if (!m)
        return;
    for (int a = 0; a < DT_AXIS_COUNT; a++)
        dt_comm_free(m->axis[a]);
    dt_comm_free(m->grad);
    dt_comm_free(m->tied);
    free(m);
}
