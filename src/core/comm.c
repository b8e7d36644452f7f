/* dt_comm wrappers: byte and time accounting around the implementation's ops, the size-1
 * communicator, and error agreement. See comm.h. */
#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

static int64_t sum_counts(const int *counts, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        s += counts[i];
    return s;
}

/* Bytes are the volume this rank receives under a bandwidth-optimal algorithm (the "bus
 * bytes" convention of NCCL's tests), so every op is counted the same way and a formula can
 * predict them exactly: with p ranks, all-reduce of B bytes = 2 B (p-1)/p, reduce-scatter and
 * all-gather of a total T bytes = T minus this rank's own piece, all-to-all = the p-1 blocks
 * from the others, broadcast = B on every rank but the root. A group of one moves nothing. */
#define ACCOUNT(c, op, nbytes, call)                                                               \
    do {                                                                                           \
        double t0_ = dt_now();                                                                     \
        dt_status s_ = (call);                                                                     \
        (c)->stats.calls[op]++;                                                                    \
        if ((c)->size > 1) { /* a group of one copies locally: neither bytes nor comm time */      \
            (c)->stats.bytes[op] += (uint64_t)(nbytes);                                            \
            (c)->stats.seconds[op] += dt_now() - t0_;                                              \
        }                                                                                          \
        return s_;                                                                                 \
    } while (0)

static int64_t allreduce_bytes(const dt_comm *c, int64_t bytes) {
    return 2 * bytes * (c->size - 1) / c->size;
}

dt_status dt_comm_allreduce_f32(dt_comm *c, float *buf, int64_t n, dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_ALLREDUCE, allreduce_bytes(c, n * 4), c->ops->allreduce_f32(c, buf, n, req));
}
dt_status dt_comm_allreduce_f64(dt_comm *c, double *buf, int64_t n) {
    ACCOUNT(c, DT_COMM_ALLREDUCE, allreduce_bytes(c, n * 8), c->ops->allreduce_f64(c, buf, n));
}
dt_status dt_comm_allreduce_max_i32(dt_comm *c, int32_t *buf, int64_t n) {
    ACCOUNT(c, DT_COMM_ALLREDUCE, allreduce_bytes(c, n * 4), c->ops->allreduce_max_i32(c, buf, n));
}
dt_status dt_comm_reduce_scatter_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                     dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_REDUCE_SCATTER, (sum_counts(counts, c->size) - counts[c->rank]) * 4,
            c->ops->reduce_scatter_f32(c, send, recv, counts, req));
}
dt_status dt_comm_allgather_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_ALLGATHER, (sum_counts(counts, c->size) - counts[c->rank]) * 4,
            c->ops->allgather_f32(c, send, recv, counts, req));
}
dt_status dt_comm_alltoall_f32(dt_comm *c, const float *send, float *recv, int64_t n,
                               dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_ALLTOALL, n * (c->size - 1) * 4,
            c->ops->alltoall_f32(c, send, recv, n, req));
}
dt_status dt_comm_broadcast(dt_comm *c, void *buf, int64_t bytes, int root) {
    ACCOUNT(c, DT_COMM_BROADCAST, c->rank == root ? 0 : bytes,
            c->ops->broadcast(c, buf, bytes, root));
}
dt_status dt_comm_send(dt_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                       dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_P2P, bytes, c->ops->send(c, buf, bytes, peer, tag, req));
}
dt_status dt_comm_recv(dt_comm *c, void *buf, int64_t bytes, int peer, int tag, dt_comm_req *req) {
    ACCOUNT(c, DT_COMM_P2P, 0, c->ops->recv(c, buf, bytes, peer, tag, req));
}

dt_status dt_comm_wait(dt_comm *c, dt_comm_req *req) {
    if (!req || !req->active)
        return DT_OK;
    double t0 = dt_now();
    dt_status st = c->ops->wait(c, req);
    if (c->size > 1)
        c->stats.wait_seconds += dt_now() - t0;
    req->active = false;
    return st;
}

dt_status dt_comm_test(dt_comm *c, dt_comm_req *req, bool *done) {
    *done = true;
    if (!req || !req->active)
        return DT_OK;
    *done = false;
    double t0 = dt_now(); /* progressing a collective copies and sums on this thread: exposed */
    dt_status st = c->ops->test(c, req, done);
    if (c->size > 1)
        c->stats.wait_seconds += dt_now() - t0;
    if (*done)
        req->active = false;
    return st;
}

dt_status dt_comm_barrier(dt_comm *c) { return c->ops->barrier(c); }

int dt_comm_rank(const dt_comm *c) { return c->rank; }

int dt_comm_size(const dt_comm *c) { return c->size; }

void dt_comm_free(dt_comm *c) {
    if (c)
        c->ops->free(c);
}

dt_status dt_comm_agree(dt_comm *c, dt_status local) {
    /* max over ranks of (failed ? size - rank : 0) picks the lowest failing rank */
    int32_t who = local != DT_OK ? c->size - c->rank : 0;
    DT_TRY(dt_comm_allreduce_max_i32(c, &who, 1));
    if (who == 0)
        return DT_OK;
    int root = c->size - who;
    struct {
        int32_t status;
        char msg[1000];
    } m = {0};
    if (c->rank == root) {
        m.status = local;
        snprintf(m.msg, sizeof m.msg, "%s", dt_err_msg());
    }
    DT_TRY(dt_comm_broadcast(c, &m, sizeof m, root));
    return dt_err_set((dt_status)m.status, "%s", m.msg);
}

/* ---- the stand-in communicator (and the size-1 one) ------------------------------------ */

/* Every rank of a stand-in but this one is absent, so each call keeps what this rank holds of
 * its result without any peer: a sum its own addend, a reduce-scatter and an all-to-all their
 * own block of the input, an all-gather its own piece in place. With one rank that is the
 * whole result. */
static dt_status standin_allreduce_f32(dt_comm *c, float *b, int64_t n, dt_comm_req *r) {
    return DT_OK;
}
static dt_status standin_allreduce_f64(dt_comm *c, double *b, int64_t n) { return DT_OK; }
static dt_status standin_allreduce_max_i32(dt_comm *c, int32_t *b, int64_t n) { return DT_OK; }
static dt_status standin_reduce_scatter(dt_comm *c, const float *s, float *r, const int *counts,
                                        dt_comm_req *q) {
    const float *own = s + sum_counts(counts, c->rank);
    if (r != own)
        memmove(r, own, (size_t)counts[c->rank] * sizeof *r);
    return DT_OK;
}
static dt_status standin_allgather(dt_comm *c, const float *s, float *r, const int *counts,
                                   dt_comm_req *q) {
    float *own = r + sum_counts(counts, c->rank);
    if (own != s)
        memmove(own, s, (size_t)counts[c->rank] * sizeof *r);
    return DT_OK;
}
static dt_status standin_alltoall(dt_comm *c, const float *s, float *r, int64_t n, dt_comm_req *q) {
    int64_t at = (int64_t)c->rank * n;
    if (r != s)
        memmove(r + at, s + at, (size_t)n * sizeof *r);
    return DT_OK;
}
static dt_status standin_broadcast(dt_comm *c, void *b, int64_t bytes, int root) { return DT_OK; }
/* a message to or from an absent peer: sent nowhere, and a receive keeps its buffer */
static dt_status standin_p2p(dt_comm *c, const void *b, int64_t bytes, int peer, int tag,
                             dt_comm_req *q) {
    if (c->size == 1)
        return dt_err_set(DT_ERR_ARG, "%s: point-to-point on a communicator of one rank", c->name);
    return DT_OK;
}
static dt_status standin_recv(dt_comm *c, void *b, int64_t bytes, int peer, int tag,
                              dt_comm_req *q) {
    return standin_p2p(c, b, bytes, peer, tag, q);
}
static dt_status standin_wait(dt_comm *c, dt_comm_req *q) { return DT_OK; }
static dt_status standin_test(dt_comm *c, dt_comm_req *q, bool *done) {
    *done = true;
    return DT_OK;
}
static dt_status standin_barrier(dt_comm *c) { return DT_OK; }
static void standin_free(dt_comm *c) { free(c); }

static const dt_comm_ops standin_ops = {
    .allreduce_f32 = standin_allreduce_f32,
    .allreduce_f64 = standin_allreduce_f64,
    .allreduce_max_i32 = standin_allreduce_max_i32,
    .reduce_scatter_f32 = standin_reduce_scatter,
    .allgather_f32 = standin_allgather,
    .alltoall_f32 = standin_alltoall,
    .broadcast = standin_broadcast,
    .send = standin_p2p,
    .recv = standin_recv,
    .wait = standin_wait,
    .test = standin_test,
    .barrier = standin_barrier,
    .free = standin_free,
};

dt_status dt_comm_standin_init(const char *name, int rank, int size, dt_comm **out) {
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return dt_err_set(DT_ERR_ARG, "communicator %s: rank %d of %d ranks", name, rank, size);
    dt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return dt_err_set(DT_ERR_OOM, "communicator: out of memory");
    c->ops = &standin_ops;
    c->rank = rank;
    c->size = size;
    snprintf(c->name, sizeof c->name, "%s", name);
    *out = c;
    return DT_OK;
}

bool dt_comm_is_standin(const dt_comm *c) { return c->ops == &standin_ops; }

dt_status dt_comm_local_init(const char *name, dt_comm **out) {
    return dt_comm_standin_init(name, 0, 1, out);
}
