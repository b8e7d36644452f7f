/* plan/mesh: the pure rank <-> coordinate math and group colors, without MPI.
 * Checks the round trip for several shapes, the worked example in mesh.h, that each axis'
 * groups partition the world into groups of exactly that axis' size with keys 0..size-1,
 * and that dt_mesh_infer's error names every number.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "plan/mesh.h"

static dt_mesh_dims dims_of(int pp, int dp, int sp, int tp) {
    dt_mesh_dims d = {{0}};
    d.size[DT_AXIS_PP] = pp;
    d.size[DT_AXIS_DP] = dp;
    d.size[DT_AXIS_SP] = sp;
    d.size[DT_AXIS_CP] = 1;
    d.size[DT_AXIS_TP] = tp;
    return d;
}

static void check_round_trip(const dt_mesh_dims *d) {
    int world = dt_mesh_world(d);
    for (int r = 0; r < world; r++) {
        int c[DT_AXIS_COUNT];
        dt_mesh_coords(d, r, c);
        for (int a = 0; a < DT_AXIS_COUNT; a++)
            DT_CHECK(c[a] >= 0 && c[a] < d->size[a], "rank %d %s coord %d", r,
                     dt_axis_name((dt_axis)a), c[a]);
        DT_CHECK(dt_mesh_rank(d, c) == r, "rank %d -> coords -> %d", r, dt_mesh_rank(d, c));
    }
}

/* Every group along `axis` has exactly size[axis] members, keyed 0..size-1 by their
 * coordinate, its members differ only along `axis`, and the groups cover the world once. */
static void check_partition(const dt_mesh_dims *d, dt_axis axis) {
    enum { MAXW = 64 };
    int world = dt_mesh_world(d);
    int color[MAXW], key[MAXW], members[MAXW] = {0};
    for (int r = 0; r < world; r++) {
        dt_mesh_group(d, r, axis, &color[r], &key[r]);
        DT_CHECK(color[r] >= 0 && color[r] < world, "%s color %d", dt_axis_name(axis), color[r]);
        if (color[r] >= 0 && color[r] < world)
            members[color[r]]++;
    }
    int n_groups = 0;
    for (int g = 0; g < world; g++) {
        if (!members[g])
            continue;
        n_groups++;
        DT_CHECK(members[g] == d->size[axis], "%s group %d has %d members, want %d",
                 dt_axis_name(axis), g, members[g], d->size[axis]);
        bool seen[MAXW] = {false};
        int first = -1;
        for (int r = 0; r < world; r++) {
            if (color[r] != g)
                continue;
            DT_CHECK(key[r] >= 0 && key[r] < d->size[axis] && !seen[key[r]],
                     "%s group %d: duplicate or bad key %d", dt_axis_name(axis), g, key[r]);
            if (key[r] >= 0 && key[r] < MAXW)
                seen[key[r]] = true;
            int c[DT_AXIS_COUNT], c0[DT_AXIS_COUNT];
            dt_mesh_coords(d, r, c);
            DT_CHECK(key[r] == c[axis], "key %d != coord %d", key[r], c[axis]);
            if (first < 0) {
                first = r;
                continue;
            }
            dt_mesh_coords(d, first, c0);
            for (int a = 0; a < DT_AXIS_COUNT; a++)
                if (a != (int)axis)
                    DT_CHECK(c[a] == c0[a], "ranks %d and %d share a %s group but differ on %s",
                             first, r, dt_axis_name(axis), dt_axis_name((dt_axis)a));
        }
    }
    DT_CHECK(n_groups * d->size[axis] == world, "%s: %d groups x %d != world %d",
             dt_axis_name(axis), n_groups, d->size[axis], world);
}

/* members of rank's group along axis, ascending by key, as a comparable list */
static int group_of(const dt_mesh_dims *d, int rank, dt_axis axis, int *out) {
    int color, key, n = 0;
    dt_mesh_group(d, rank, axis, &color, &key);
    for (int k = 0; k < d->size[axis]; k++)
        for (int r = 0; r < dt_mesh_world(d); r++) {
            int cr, kr;
            dt_mesh_group(d, r, axis, &cr, &kr);
            if (cr == color && kr == k)
                out[n++] = r;
        }
    return n;
}

static void check_worked_example(void) {
    dt_mesh_dims d = dims_of(2, 2, 1, 2);
    DT_CHECK(dt_mesh_world(&d) == 8, "world %d", dt_mesh_world(&d));
    int c[DT_AXIS_COUNT];
    dt_mesh_coords(&d, 5, c);
    DT_CHECK(c[DT_AXIS_PP] == 1 && c[DT_AXIS_DP] == 0 && c[DT_AXIS_SP] == 0 && c[DT_AXIS_TP] == 1,
             "rank 5 -> pp %d dp %d sp %d tp %d", c[DT_AXIS_PP], c[DT_AXIS_DP], c[DT_AXIS_SP],
             c[DT_AXIS_TP]);
    int g[8], n;
    n = group_of(&d, 5, DT_AXIS_TP, g);
    DT_CHECK(n == 2 && g[0] == 4 && g[1] == 5, "tp group of 5: n %d {%d, %d}", n, g[0], g[1]);
    n = group_of(&d, 5, DT_AXIS_DP, g);
    DT_CHECK(n == 2 && g[0] == 5 && g[1] == 7, "dp group of 5: n %d {%d, %d}", n, g[0], g[1]);
    n = group_of(&d, 5, DT_AXIS_PP, g);
    DT_CHECK(n == 2 && g[0] == 1 && g[1] == 5, "pp group of 5: n %d {%d, %d}", n, g[0], g[1]);
    n = group_of(&d, 5, DT_AXIS_SP, g);
    DT_CHECK(n == 1 && g[0] == 5, "sp group of 5: n %d {%d}", n, g[0]);
}

static void check_infer(void) {
    dt_mesh_dims d;
    DT_CHECK_OK(dt_mesh_infer(8, 2, 1, 1, 2, &d));
    DT_CHECK(d.size[DT_AXIS_DP] == 2 && d.size[DT_AXIS_PP] == 2 && d.size[DT_AXIS_TP] == 2 &&
                 d.size[DT_AXIS_SP] == 1,
             "infer 8 = pp2 sp1 tp2 -> dp %d", d.size[DT_AXIS_DP]);
    DT_CHECK_OK(dt_mesh_infer(12, 1, 1, 3, 2, &d));
    DT_CHECK(d.size[DT_AXIS_DP] == 2, "infer 12 / (1 3 2) -> dp %d", d.size[DT_AXIS_DP]);

    dt_status st = dt_mesh_infer(6, 2, 1, 1, 4, &d);
    DT_CHECK(st == DT_ERR_ARG, "infer 6 / (2 1 4) -> %s", dt_status_str(st));
    const char *msg = dt_err_msg();
    DT_CHECK(strstr(msg, "6") && strstr(msg, "pp_size 2") && strstr(msg, "sp_size 1") &&
                 strstr(msg, "tp_size 4") && strstr(msg, "8"),
             "message lacks the numbers: %s", msg);
    st = dt_mesh_infer(4, 0, 1, 1, 1, &d);
    DT_CHECK(st == DT_ERR_ARG, "pp 0 -> %s", dt_status_str(st));
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    const int shapes[][4] = {/* pp dp sp tp */
                             {1, 1, 1, 1}, {1, 4, 1, 1}, {1, 1, 1, 4}, {2, 2, 1, 2},
                             {2, 1, 2, 2}, {3, 2, 2, 1}, {2, 2, 2, 2}, {1, 3, 1, 5}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        dt_mesh_dims d = dims_of(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
        check_round_trip(&d);
        for (int a = 0; a < DT_AXIS_COUNT; a++)
            check_partition(&d, (dt_axis)a);
    }
    /* a ring axis between dp and sp: pp 2 x dp 2 x cp 2 x sp 2 x tp 1 */
    dt_mesh_dims ring = dims_of(2, 2, 2, 1);
    ring.size[DT_AXIS_CP] = 2;
    check_round_trip(&ring);
    for (int a = 0; a < DT_AXIS_COUNT; a++)
        check_partition(&ring, (dt_axis)a);
    int rc[DT_AXIS_COUNT];
    dt_mesh_coords(&ring, 7, rc); /* 7 = (((0 * 2 + 1) * 2 + 1) * 2 + 1) * 1 + 0 */
    DT_CHECK(rc[DT_AXIS_CP] == 1 && rc[DT_AXIS_SP] == 1 && rc[DT_AXIS_DP] == 1 &&
                 rc[DT_AXIS_PP] == 0,
             "rank 7 -> cp %d sp %d dp %d pp %d", rc[DT_AXIS_CP], rc[DT_AXIS_SP], rc[DT_AXIS_DP],
             rc[DT_AXIS_PP]);
    int color, key;
    dt_mesh_group_axes(&ring, 7, 1u << DT_AXIS_SP | 1u << DT_AXIS_CP | 1u << DT_AXIS_DP, &color,
                       &key);
    DT_CHECK(color == 0 && key == 7, "rank 7's gradient group: color %d key %d", color, key);
    dt_mesh_dims inferred;
    DT_CHECK_OK(dt_mesh_infer(16, 2, 2, 2, 1, &inferred));
    DT_CHECK(inferred.size[DT_AXIS_DP] == 2 && inferred.size[DT_AXIS_CP] == 2,
             "infer 16 / (pp 2 cp 2 sp 2) -> dp %d cp %d", inferred.size[DT_AXIS_DP],
             inferred.size[DT_AXIS_CP]);
    check_worked_example();
    check_infer();
    DT_CHECK(strcmp(dt_axis_name(DT_AXIS_TP), "tp") == 0 &&
                 strcmp(dt_axis_name(DT_AXIS_SP), "sp") == 0 &&
                 strcmp(dt_axis_name(DT_AXIS_CP), "cp") == 0 &&
                 strcmp(dt_axis_name(DT_AXIS_DP), "dp") == 0 &&
                 strcmp(dt_axis_name(DT_AXIS_PP), "pp") == 0,
             "axis names");
    return DT_TEST_END();
}
