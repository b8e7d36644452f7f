/* dist/mpi_comm + dist/mesh under mpirun (np 1, 2, 4) and as an MPI singleton.
 * Every op is checked against values known in closed form from rank-dependent data (all
 * integers small enough to be exact in float, so any summation order gives the same bits).
 * Every rank runs every check; the closing "N passed, M failed" line is printed by rank 0
 * only and counts all ranks, and every rank exits nonzero when any rank failed.
 * Named mpi_test_*.c so the tests/ glob does not register it without mpirun (tests.cmake does).
 * The checks run twice: with MPI's blocking calls, then under a collective watchdog (every
 * blocking call posted non-blocking and completed by the timed polling wait); then a wait
 * that times out is checked for its report.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "dist/dist.h"
#include "harness.h"

#define S(n) ((n) * ((n)-1) / 2) /* 0 + 1 + ... + n-1 */

static float *fbuf(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

/* Uneven per-rank counts with a rank of count 0 whenever there are two or more ranks. */
static void uneven_counts(int size, int *counts, int *displ, int *total) {
    *total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r == 1 ? 0 : 2 * r + 3;
        displ[r] = *total;
        *total += counts[r];
    }
}

/* Complete `req` by dt_comm_test polling, as a compute loop would; one check, not one per poll
 * (the number of polls depends on timing). */
static dt_status poll(dt_comm *c, dt_comm_req *req) {
    bool done = false;
    while (!done) {
        dt_status st = dt_comm_test(c, req, &done);
        if (st != DT_OK)
            return st;
    }
    return DT_OK;
}

static void test_world(dt_comm *w) {
    DT_CHECK(w->size >= 1 && w->rank >= 0 && w->rank < w->size, "rank %d size %d", w->rank,
             w->size);
    DT_CHECK(strcmp(w->name, "world") == 0, "name %s", w->name);
    DT_CHECK_OK(dt_comm_barrier(w));
}

static void test_allreduce(dt_comm *w) {
    const int64_t n = 1000;
    float *b = fbuf(n);
    /* blocking, then non-blocking completed by wait, then by test-polling */
    for (int mode = 0; mode < 3; mode++) {
        for (int64_t i = 0; i < n; i++)
            b[i] = (float)w->rank + 0.5f * (float)i;
        dt_comm_req req = {0};
        DT_CHECK_OK(dt_comm_allreduce_f32(w, b, n, mode ? &req : NULL));
        if (mode == 1) {
            DT_CHECK(req.active && req.op == DT_COMM_ALLREDUCE, "req not active after post");
            DT_CHECK_OK(dt_comm_wait(w, &req));
        } else if (mode == 2) {
            DT_CHECK_OK(poll(w, &req));
        }
        DT_CHECK(!req.active && req.impl == NULL, "mode %d: req still active", mode);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += b[i] != (float)S(w->size) + (float)w->size * 0.5f * (float)i;
        DT_CHECK(bad == 0, "rank %d allreduce_f32 mode %d: %d wrong", w->rank, mode, bad);
    }
    free(b);

    double d[3] = {w->rank * 1e6, -2.0 * w->rank, 0.25};
    DT_CHECK_OK(dt_comm_allreduce_f64(w, d, 3));
    DT_CHECK(d[0] == S(w->size) * 1e6 && d[1] == -2.0 * S(w->size) && d[2] == 0.25 * w->size,
             "allreduce_f64: %g %g %g", d[0], d[1], d[2]);

    int32_t m[2] = {w->rank * 10 - 7, -w->rank};
    DT_CHECK_OK(w->ops->allreduce_max_i32(w, m, 2));
    DT_CHECK(m[0] == (w->size - 1) * 10 - 7 && m[1] == 0, "allreduce_max_i32: %d %d", m[0], m[1]);
}

static void test_reduce_scatter(dt_comm *w) {
    int counts[64] = {0}, displ[64] = {0}, total = 0;
    uneven_counts(w->size, counts, displ, &total);
    float *send = fbuf(total), *recv = fbuf(counts[w->rank]);
    for (int mode = 0; mode < 2; mode++) {
        for (int j = 0; j < total; j++)
            send[j] = (float)(w->rank * 1000 + j);
        for (int i = 0; i < counts[w->rank]; i++)
            recv[i] = -1;
        dt_comm_req req = {0};
        DT_CHECK_OK(dt_comm_reduce_scatter_f32(w, send, recv, counts, mode ? &req : NULL));
        DT_CHECK_OK(dt_comm_wait(w, &req));
        int bad = 0;
        for (int i = 0; i < counts[w->rank]; i++)
            bad += recv[i] != (float)(1000 * S(w->size) + w->size * (displ[w->rank] + i));
        DT_CHECK(bad == 0, "rank %d reduce_scatter mode %d: %d of %d wrong", w->rank, mode, bad,
                 counts[w->rank]);
    }
    free(send);
    free(recv);
}

static void test_allgather(dt_comm *w) {
    int counts[64] = {0}, displ[64] = {0}, total = 0;
    uneven_counts(w->size, counts, displ, &total);
    float *send = fbuf(counts[w->rank]), *recv = fbuf(total);
    /* 0 blocking, 1 blocking in place, 2 non-blocking wait, 3 non-blocking in place by test */
    for (int mode = 0; mode < 4; mode++) {
        bool in_place = mode == 1 || mode == 3;
        for (int j = 0; j < total; j++)
            recv[j] = -1;
        float *mine = in_place ? recv + displ[w->rank] : send;
        for (int i = 0; i < counts[w->rank]; i++)
            mine[i] = (float)(w->rank * 100 + i);
        dt_comm_req req = {0};
        DT_CHECK_OK(dt_comm_allgather_f32(w, mine, recv, counts, mode >= 2 ? &req : NULL));
        if (mode == 3) {
            DT_CHECK_OK(poll(w, &req));
        } else {
            DT_CHECK_OK(dt_comm_wait(w, &req));
        }
        int bad = 0;
        for (int r = 0; r < w->size; r++)
            for (int i = 0; i < counts[r]; i++)
                bad += recv[displ[r] + i] != (float)(r * 100 + i);
        DT_CHECK(bad == 0, "rank %d allgather mode %d: %d of %d wrong", w->rank, mode, bad, total);
    }
    /* counts are validated identically on every rank, so every rank fails without hanging */
    int neg[64];
    memcpy(neg, counts, sizeof neg);
    neg[0] = -1;
    dt_status st = dt_comm_allgather_f32(w, send, recv, neg, NULL);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "negative"), "negative count -> %s: %s",
             dt_status_str(st), dt_err_msg());
    free(send);
    free(recv);
}

static void test_alltoall(dt_comm *w) {
    const int n = 5;
    float *send = fbuf((int64_t)n * w->size), *recv = fbuf((int64_t)n * w->size);
    for (int mode = 0; mode < 2; mode++) {
        for (int r = 0; r < w->size; r++)
            for (int i = 0; i < n; i++) {
                send[r * n + i] = (float)(w->rank * 1000 + r * 10 + i);
                recv[r * n + i] = -1;
            }
        dt_comm_req req = {0};
        DT_CHECK_OK(dt_comm_alltoall_f32(w, send, recv, n, mode ? &req : NULL));
        DT_CHECK_OK(dt_comm_wait(w, &req));
        int bad = 0;
        for (int r = 0; r < w->size; r++)
            for (int i = 0; i < n; i++)
                bad += recv[r * n + i] != (float)(r * 1000 + w->rank * 10 + i);
        DT_CHECK(bad == 0, "rank %d alltoall mode %d: %d wrong", w->rank, mode, bad);
    }
    dt_status st = dt_comm_alltoall_f32(w, send, recv, (int64_t)INT_MAX + 1, NULL);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "INT_MAX"), "huge count -> %s: %s",
             dt_status_str(st), dt_err_msg());
    free(send);
    free(recv);
}

static void test_broadcast(dt_comm *w) {
    int root = w->size - 1;
    struct {
        int32_t a[7];
        char s[24];
    } m;
    memset(&m, 0, sizeof m);
    if (w->rank == root) {
        for (int i = 0; i < 7; i++)
            m.a[i] = 31 * root + i;
        snprintf(m.s, sizeof m.s, "from %d", root);
    }
    DT_CHECK_OK(dt_comm_broadcast(w, &m, sizeof m, root));
    char want[24];
    snprintf(want, sizeof want, "from %d", root);
    int bad = strcmp(m.s, want) != 0;
    for (int i = 0; i < 7; i++)
        bad += m.a[i] != 31 * root + i;
    DT_CHECK(bad == 0, "rank %d broadcast from %d: %d wrong", w->rank, root, bad);
    dt_status st = dt_comm_broadcast(w, &m, sizeof m, w->size);
    DT_CHECK(st == DT_ERR_ARG, "root out of range -> %s", dt_status_str(st));
}

/* A ring (at np 1 the rank sends to itself): post the receive, then send, so no blocking
 * send waits on a neighbour that is itself blocked sending. */
static void test_p2p(dt_comm *w) {
    int next = (w->rank + 1) % w->size, prev = (w->rank + w->size - 1) % w->size;
    double out[16], in[16];
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < 16; i++) {
            out[i] = w->rank + i / 16.0;
            in[i] = -1;
        }
        dt_comm_req rq = {0}, sq = {0};
        DT_CHECK_OK(dt_comm_recv(w, in, sizeof in, prev, 7 + mode, &rq));
        DT_CHECK_OK(dt_comm_send(w, out, sizeof out, next, 7 + mode, mode ? &sq : NULL));
        if (mode == 0) {
            DT_CHECK_OK(dt_comm_wait(w, &rq));
        } else {
            /* both polled together: each side's send may need its receive to progress */
            bool rd = false, sd = false;
            dt_status st = DT_OK;
            while (st == DT_OK && (!rd || !sd)) {
                st = dt_comm_test(w, &rq, &rd);
                if (st == DT_OK)
                    st = dt_comm_test(w, &sq, &sd);
            }
            DT_CHECK_OK(st);
        }
        int bad = 0;
        for (int i = 0; i < 16; i++)
            bad += in[i] != prev + i / 16.0;
        DT_CHECK(bad == 0, "rank %d ring mode %d: %d wrong", w->rank, mode, bad);
    }
    /* a message shorter than the receive asked for is reported, not silently accepted */
    dt_comm_req rq = {0};
    DT_CHECK_OK(dt_comm_recv(w, in, sizeof in, prev, 9, &rq));
    DT_CHECK_OK(dt_comm_send(w, out, 8, next, 9, NULL));
    dt_status st = dt_comm_wait(w, &rq);
    DT_CHECK(st == DT_ERR_MPI && strstr(dt_err_msg(), "got 8 bytes, expected 128"),
             "short message -> %s: %s", dt_status_str(st), dt_err_msg());
    DT_CHECK(!rq.active, "failed wait left the request active");
    /* an MPI error comes back as DT_ERR_MPI with MPI's own text, not an abort */
    st = dt_comm_send(w, out, 8, next, -5, NULL);
    DT_CHECK(st == DT_ERR_MPI && (strstr(dt_err_msg(), "world: MPI_Send failed: ") ||
                                  strstr(dt_err_msg(), "world: MPI_Isend failed: ")),
             "bad tag -> %s: %s", dt_status_str(st), dt_err_msg());
    st = dt_comm_recv(w, in, 8, w->size + 3, 0, NULL);
    DT_CHECK(st == DT_ERR_ARG, "peer out of range -> %s", dt_status_str(st));
}

static void test_requests(dt_comm *w) {
    /* a pending request cannot be reposted; more pending requests than one slot chunk */
    enum { K = 40 };
    float v[K];
    dt_comm_req req[K];
    memset(req, 0, sizeof req);
    for (int k = 0; k < K; k++) {
        v[k] = (float)(k + w->rank);
        DT_CHECK_OK(dt_comm_allreduce_f32(w, &v[k], 1, &req[k]));
    }
    dt_status st = dt_comm_allreduce_f32(w, &v[0], 1, &req[0]);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "pending"), "repost -> %s: %s",
             dt_status_str(st), dt_err_msg());
    for (int k = K - 1; k >= 0; k--)
        DT_CHECK_OK(dt_comm_wait(w, &req[k]));
    int bad = 0;
    for (int k = 0; k < K; k++)
        bad += v[k] != (float)(k * w->size + S(w->size));
    DT_CHECK(bad == 0, "rank %d %d pending allreduces: %d wrong", w->rank, K, bad);
    DT_CHECK_OK(dt_comm_wait(w, &req[0])); /* inactive: no-op */
}

static void test_stats(dt_comm *w) {
    dt_comm_stats before = w->stats;
    float b[10] = {0};
    /* bytes received by a bandwidth-optimal algorithm: all-reduce 2 B (p-1)/p, broadcast B on
     * every rank but the root; a group of one moves nothing */
    uint64_t ar = 2 * 40 * (uint64_t)(w->size - 1) / (uint64_t)w->size;
    uint64_t bc = w->rank == 0 ? 0 : 12;
    DT_CHECK_OK(dt_comm_allreduce_f32(w, b, 10, NULL));
    DT_CHECK_OK(dt_comm_broadcast(w, b, 12, 0));
    DT_CHECK(w->stats.calls[DT_COMM_ALLREDUCE] == before.calls[DT_COMM_ALLREDUCE] + 1 &&
                 w->stats.bytes[DT_COMM_ALLREDUCE] == before.bytes[DT_COMM_ALLREDUCE] + ar,
             "allreduce stats: calls %llu bytes %llu",
             (unsigned long long)w->stats.calls[DT_COMM_ALLREDUCE],
             (unsigned long long)w->stats.bytes[DT_COMM_ALLREDUCE]);
    DT_CHECK(w->stats.calls[DT_COMM_BROADCAST] == before.calls[DT_COMM_BROADCAST] + 1 &&
                 w->stats.bytes[DT_COMM_BROADCAST] == before.bytes[DT_COMM_BROADCAST] + bc,
             "broadcast stats");
    DT_CHECK(w->stats.seconds[DT_COMM_ALLREDUCE] >= before.seconds[DT_COMM_ALLREDUCE],
             "seconds went backwards");
}

static void test_agree(dt_comm *w) {
    DT_CHECK_OK(dt_comm_agree(w, DT_OK));
    int bad_rank = w->size > 1 ? 1 : 0;
    dt_status local = DT_OK;
    if (w->rank == bad_rank)
        local = dt_err_set(DT_ERR_IO, "rank %d could not open shard.bin", w->rank);
    else
        dt_err_clear();
    dt_status st = dt_comm_agree(w, local);
    char want[64];
    snprintf(want, sizeof want, "rank %d could not open shard.bin", bad_rank);
    DT_CHECK(st == DT_ERR_IO && strcmp(dt_err_msg(), want) == 0, "rank %d agree -> %s: %s", w->rank,
             dt_status_str(st), dt_err_msg());
    /* two failures: the lowest failing rank's status and message win everywhere */
    if (w->size >= 4) {
        local = DT_OK;
        if (w->rank == 3)
            local = dt_err_set(DT_ERR_ARG, "three says no");
        if (w->rank == 2)
            local = dt_err_set(DT_ERR_FORMAT, "two says bad magic");
        st = dt_comm_agree(w, local);
        DT_CHECK(st == DT_ERR_FORMAT && strcmp(dt_err_msg(), "two says bad magic") == 0,
                 "rank %d two failures -> %s: %s", w->rank, dt_status_str(st), dt_err_msg());
    }
    DT_CHECK_OK(dt_comm_agree(w, DT_OK));
}

static void test_split(dt_comm *w) {
    dt_comm *sub = NULL;
    /* parity groups, keyed by -rank so the new ranks run in reverse order */
    DT_CHECK_OK(dt_dist_split(w, w->rank % 2, -w->rank, "parity", &sub));
    if (!sub)
        return;
    int members = (w->size - w->rank % 2 + 1) / 2, above = 0;
    for (int r = w->rank + 2; r < w->size; r += 2)
        above++;
    DT_CHECK(sub->size == members && sub->rank == above && strcmp(sub->name, "parity") == 0,
             "rank %d parity: size %d rank %d name %s", w->rank, sub->size, sub->rank, sub->name);
    double s = w->rank, want = 0;
    for (int r = w->rank % 2; r < w->size; r += 2)
        want += r;
    DT_CHECK_OK(dt_comm_allreduce_f64(sub, &s, 1));
    DT_CHECK(s == want, "rank %d parity sum %g want %g", w->rank, s, want);
    dt_comm_free(sub);
    dt_status st = dt_dist_split(w, -2, 0, "bad", &sub);
    DT_CHECK(st == DT_ERR_ARG && sub == NULL, "negative color -> %s", dt_status_str(st));

    /* a size-1 local world splits and builds a mesh without MPI */
    dt_comm *local = NULL;
    DT_CHECK_OK(dt_comm_local_init("world", &local));
    if (!local)
        return;
    DT_CHECK_OK(dt_dist_split(local, 3, 0, "one", &sub));
    DT_CHECK(sub && sub->size == 1 && sub->rank == 0 && !strcmp(sub->name, "one"),
             "split of a local comm");
    dt_comm_free(sub);
    dt_mesh *m = NULL;
    DT_CHECK_OK(dt_mesh_init(local, &(dt_mesh_dims){{1, 1, 1, 1, 1}}, &m));
    DT_CHECK(m && m->axis[DT_AXIS_DP] && m->axis[DT_AXIS_DP]->size == 1, "mesh on a local world");
    dt_mesh_free(m);
    dt_comm_free(local);
}

/* dt_mesh_init with `d`: each axis comm sums exactly the world ranks the pure math groups. */
static void check_mesh(dt_comm *w, dt_mesh_dims d) {
    dt_mesh *m = NULL;
    DT_CHECK_OK(dt_mesh_init(w, &d, &m));
    if (!m)
        return;
    int c[DT_AXIS_COUNT];
    dt_mesh_coords(&d, w->rank, c);
    DT_CHECK(m->world == w, "mesh world");
    for (int a = 0; a < DT_AXIS_COUNT; a++) {
        dt_comm *ax = m->axis[a];
        const char *name = dt_axis_name((dt_axis)a);
        DT_CHECK(m->coords[a] == c[a], "%s coord %d want %d", name, m->coords[a], c[a]);
        DT_CHECK(ax && ax->size == d.size[a] && ax->rank == c[a] && !strcmp(ax->name, name),
                 "rank %d %s comm: size %d rank %d name %s", w->rank, name, ax ? ax->size : -1,
                 ax ? ax->rank : -1, ax ? ax->name : "-");
        if (!ax)
            continue;
        int color, key;
        dt_mesh_group(&d, w->rank, (dt_axis)a, &color, &key);
        double want[2] = {0, 0}, got[2] = {w->rank, 1};
        for (int r = 0; r < w->size; r++) {
            int cr, kr;
            dt_mesh_group(&d, r, (dt_axis)a, &cr, &kr);
            if (cr == color) {
                want[0] += r;
                want[1] += 1;
            }
        }
        DT_CHECK_OK(dt_comm_allreduce_f64(ax, got, 2));
        DT_CHECK(got[0] == want[0] && got[1] == want[1],
                 "rank %d %s group: sum %g of %g ranks, want %g of %g", w->rank, name, got[0],
                 got[1], want[0], want[1]);
    }
    dt_mesh_free(m);
}

static dt_mesh_dims mesh_dims(int pp, int dp, int sp, int tp) {
    dt_mesh_dims d = {{0}};
    d.size[DT_AXIS_PP] = pp;
    d.size[DT_AXIS_DP] = dp;
    d.size[DT_AXIS_SP] = sp;
    d.size[DT_AXIS_CP] = 1;
    d.size[DT_AXIS_TP] = tp;
    return d;
}

static void test_mesh(dt_comm *w) {
    check_mesh(w, mesh_dims(1, w->size, 1, 1));
    check_mesh(w, mesh_dims(1, 1, 1, w->size));
    if (w->size == 4) {
        check_mesh(w, mesh_dims(1, 2, 1, 2));
        check_mesh(w, mesh_dims(2, 1, 1, 2));
        check_mesh(w, mesh_dims(2, 1, 2, 1));
    }
    dt_mesh *m = NULL;
    dt_status st = dt_mesh_init(w, &(dt_mesh_dims){{2, 1, 1, 3, 1}}, &m);
    DT_CHECK(st == DT_ERR_ARG && m == NULL, "mesh 6 on %d ranks -> %s", w->size, dt_status_str(st));
    char want[64];
    snprintf(want, sizeof want, "= 6 ranks, but world has %d", w->size);
    DT_CHECK(strstr(dt_err_msg(), want) != NULL, "mesh error text: %s", dt_err_msg());
}

/* A stand-in for rank 1 of 3 keeps its own part of each result and nothing else; on one
 * rank it is the local communicator (a message is refused). */
static void test_standin_calls(void) {
    dt_comm *c = NULL;
    DT_CHECK_OK(dt_comm_standin_init("tp", 1, 3, &c));
    if (!c)
        return;
    DT_CHECK(c->rank == 1 && c->size == 3 && dt_comm_is_standin(c), "stand-in rank 1 of 3");
    int counts[3] = {2, 3, 1};
    float send[6] = {1, 2, 3, 4, 5, 6}, recv[6] = {0}, sum[2] = {7, 8};
    DT_CHECK_OK(dt_comm_allreduce_f32(c, sum, 2, NULL));
    DT_CHECK(sum[0] == 7 && sum[1] == 8, "stand-in all-reduce keeps its own addend");
    DT_CHECK_OK(dt_comm_reduce_scatter_f32(c, send, recv, counts, NULL));
    DT_CHECK(recv[0] == 3 && recv[1] == 4 && recv[2] == 5 && recv[3] == 0,
             "stand-in reduce-scatter: its own block (%g %g %g %g)", recv[0], recv[1], recv[2],
             recv[3]);
    float all[6] = {0}, mine[3] = {9, 8, 7};
    DT_CHECK_OK(dt_comm_allgather_f32(c, mine, all, counts, NULL));
    DT_CHECK(all[0] == 0 && all[1] == 0 && all[2] == 9 && all[3] == 8 && all[4] == 7 && all[5] == 0,
             "stand-in all-gather: its own piece at its place");
    float a2a[6] = {0};
    DT_CHECK_OK(dt_comm_alltoall_f32(c, send, a2a, 2, NULL));
    DT_CHECK(a2a[0] == 0 && a2a[2] == 3 && a2a[3] == 4 && a2a[4] == 0,
             "stand-in all-to-all: its own block");
    dt_comm_req q = {0};
    DT_CHECK_OK(dt_comm_recv(c, recv, 4, 0, 7, &q));
    DT_CHECK_OK(dt_comm_wait(c, &q));
    DT_CHECK(recv[0] == 3, "a receive from an absent peer keeps its buffer");
    dt_comm_free(c);
    DT_CHECK(dt_comm_standin_init("x", 3, 3, &c) == DT_ERR_ARG && !c, "rank 3 of 3 refused");
    DT_CHECK_OK(dt_comm_local_init("one", &c));
    DT_CHECK(c && dt_comm_is_standin(c) && c->size == 1, "the local comm is a stand-in of one");
    if (c)
        DT_CHECK(dt_comm_send(c, send, 4, 0, 0, NULL) == DT_ERR_ARG, "a message on one rank");
    dt_comm_free(c);
}

/* dt_mesh_init on a stand-in world playing each rank of pp 2 x dp 2 x sp 1 x tp 2 (and of
 * sp 2 x tp 2): every group a stand-in of the mesh math's size, this rank at its key. */
static void check_standin_mesh(dt_mesh_dims d) {
    int n = dt_mesh_world(&d);
    for (int r = 0; r < n; r++) {
        dt_comm *w = NULL;
        dt_mesh *m = NULL;
        DT_CHECK_OK(dt_comm_standin_init("world", r, n, &w));
        DT_CHECK_OK(dt_mesh_init(w, &d, &m));
        if (!m) {
            dt_comm_free(w);
            continue;
        }
        for (int a = 0; a < DT_AXIS_COUNT; a++) {
            int color, key;
            dt_mesh_group(&d, r, (dt_axis)a, &color, &key);
            DT_CHECK(m->axis[a]->size == d.size[a] && m->axis[a]->rank == key,
                     "stand-in rank %d %s: %d of %d", r, dt_axis_name((dt_axis)a), m->axis[a]->rank,
                     m->axis[a]->size);
        }
        int color, key;
        unsigned grad = 1u << DT_AXIS_SP | 1u << DT_AXIS_CP | 1u << DT_AXIS_DP;
        dt_mesh_group_axes(&d, r, grad, &color, &key);
        int g = d.size[DT_AXIS_SP] * d.size[DT_AXIS_CP] * d.size[DT_AXIS_DP];
        DT_CHECK(m->grad->size == g && m->grad->rank == key, "stand-in rank %d grad %d of %d", r,
                 m->grad->rank, m->grad->size);
        int pp = d.size[DT_AXIS_PP], stage = m->coords[DT_AXIS_PP];
        int tied = pp > 1 && (stage == 0 || stage == pp - 1) ? 2 : 1;
        DT_CHECK(m->tied->size == tied && m->tied->rank == (stage == 0 ? 0 : tied - 1),
                 "stand-in rank %d tied %d of %d", r, m->tied->rank, m->tied->size);
        dt_mesh_free(m);
        dt_comm_free(w);
    }
}

static void test_standin(void) {
    test_standin_calls();
    check_standin_mesh(mesh_dims(2, 2, 1, 2));
    check_standin_mesh(mesh_dims(3, 1, 2, 2));
}

/* A receive nobody sends times out with the report, on a split of its own so the world stays
 * usable; a later wait on the expired communicator fails at once with the same report. */
static void test_watch_timeout(dt_comm *w) {
    if (w->size < 2)
        return;
    dt_comm_watch watch;
    DT_CHECK_OK(dt_comm_watch_init(&watch, 0.3, w->rank));
    dt_comm *sub = NULL;
    w->watch = &watch;
    DT_CHECK_OK(dt_dist_split(w, 0, w->rank, "late", &sub));
    w->watch = NULL;
    if (!sub)
        return;
    DT_CHECK(sub->watch == &watch, "split did not hand the watch on");
    double in[2];
    if (w->rank == 0) {
        double t0 = dt_now();
        dt_status st = dt_comm_recv(sub, in, sizeof in, 1, 3, NULL);
        double took = dt_now() - t0;
        DT_CHECK(st == DT_ERR_MPI && watch.expired, "timeout -> %s", dt_status_str(st));
        DT_CHECK(strstr(dt_err_msg(), "watchdog: rank 0 waited 0 s (train.comm_timeout) in recv "
                                      "from rank 1 (late rank 1) on group late (late rank 0 of ") &&
                     strstr(dt_err_msg(), "at set-up, before step 1"),
                 "report: %s", dt_err_msg());
        DT_CHECK(took >= 0.3 && took < 5, "timed out after %g s", took);
        dt_comm_req rq = {0};
        DT_CHECK_OK(dt_comm_recv(sub, in, sizeof in, 1, 4, &rq));
        t0 = dt_now();
        st = dt_comm_wait(sub, &rq);
        DT_CHECK(st == DT_ERR_MPI && !strcmp(dt_err_msg(), watch.report) && dt_now() - t0 < 0.1,
                 "wait after expiry -> %s: %s", dt_status_str(st), dt_err_msg());
    }
    DT_CHECK_OK(dt_comm_barrier(w));
    if (w->rank == 1) { /* complete rank 0's abandoned receives */
        double out[2] = {0};
        DT_CHECK_OK(dt_comm_send(sub, out, sizeof out, 0, 3, NULL));
        DT_CHECK_OK(dt_comm_send(sub, out, sizeof out, 0, 4, NULL));
    }
    DT_CHECK_OK(dt_comm_barrier(w));
    dt_comm_free(sub);
}

static void run_all(dt_comm *w) {
    test_world(w);
    test_allreduce(w);
    test_reduce_scatter(w);
    test_allgather(w);
    test_alltoall(w);
    test_broadcast(w);
    test_p2p(w);
    test_requests(w);
    test_stats(w);
    test_agree(w);
    test_split(w);
    test_mesh(w);
}

int main(int argc, char **argv) {
    dt_comm *w = NULL;
    dt_status st = dt_dist_init(&argc, &argv, &w);
    if (st != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    if (w->size > 64) {
        fprintf(stderr, "this test supports at most 64 ranks\n");
        dt_dist_finalize(w);
        return 1;
    }
    DT_TEST_BEGIN(argc, argv);
    test_standin();
    run_all(w);
    dt_comm_watch watch;
    DT_CHECK_OK(dt_comm_watch_init(&watch, 60, w->rank));
    w->watch = &watch;
    run_all(w);
    DT_CHECK(!watch.expired, "a watched wait timed out: %s", watch.report);
    w->watch = NULL;
    test_watch_timeout(w);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
