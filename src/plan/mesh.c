/* Rank <-> mesh coordinates and group colors. See mesh.h. */
#include "plan/mesh.h"

#include <stdio.h>

static const char *axis_names[DT_AXIS_COUNT] = {"tp", "sp", "cp", "dp", "pp"};

const char *dt_axis_name(dt_axis a) { return a >= 0 && a < DT_AXIS_COUNT ? axis_names[a] : "?"; }

int dt_mesh_world(const dt_mesh_dims *d) {
    int w = 1;
    for (int a = 0; a < DT_AXIS_COUNT; a++)
        w *= d->size[a];
    return w;
}

dt_status dt_mesh_infer(int world, int pp, int cp, int sp, int tp, dt_mesh_dims *out) {
    if (pp < 1 || cp < 1 || sp < 1 || tp < 1)
        return dt_err_set(DT_ERR_ARG,
                          "pp_size %d, cp_size %d, sp_size %d and tp_size %d must "
                          "each be at least 1",
                          pp, cp, sp, tp);
    int model = pp * cp * sp * tp;
    if (world % model != 0) {
        char cps[32] = "";
        if (cp > 1)
            snprintf(cps, sizeof cps, "cp_size %d x ", cp);
        return dt_err_set(DT_ERR_ARG,
                          "world size %d is not divisible by pp_size %d x %ssp_size "
                          "%d x tp_size %d = %d: launch a multiple of %d processes",
                          world, pp, cps, sp, tp, model, model);
    }
    out->size[DT_AXIS_TP] = tp;
    out->size[DT_AXIS_SP] = sp;
    out->size[DT_AXIS_CP] = cp;
    out->size[DT_AXIS_DP] = world / model;
    out->size[DT_AXIS_PP] = pp;
    return DT_OK;
}

void dt_mesh_coords(const dt_mesh_dims *d, int rank, int coords[DT_AXIS_COUNT]) {
    for (int a = 0; a < DT_AXIS_COUNT; a++) { /* tp first: the fastest-varying digit */
        coords[a] = rank % d->size[a];
        rank /= d->size[a];
    }
}

int dt_mesh_rank(const dt_mesh_dims *d, const int coords[DT_AXIS_COUNT]) {
    int r = 0;
    for (int a = DT_AXIS_COUNT - 1; a >= 0; a--)
        r = r * d->size[a] + coords[a];
    return r;
}

void dt_mesh_group(const dt_mesh_dims *d, int rank, dt_axis axis, int *color, int *key) {
    dt_mesh_group_axes(d, rank, 1u << axis, color, key);
}

void dt_mesh_group_axes(const dt_mesh_dims *d, int rank, unsigned axes, int *color, int *key) {
    int c[DT_AXIS_COUNT];
    dt_mesh_coords(d, rank, c);
    *key = 0;
    for (int a = DT_AXIS_COUNT - 1; a >= 0; a--)
        if (axes & (1u << a)) {
            *key = *key * d->size[a] + c[a];
            c[a] = 0; /* every member maps to the same representative: the group's color */
        }
    *color = dt_mesh_rank(d, c);
}
