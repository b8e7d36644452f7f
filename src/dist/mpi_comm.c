/* The MPI implementation of dt_comm, plus process start-up, split and abort. See dist.h.
 *
 * Ownership: a communicator owns its MPI_Comm (a dup or split, never MPI_COMM_WORLD itself),
 * a 2 x size int scratch for the displacements of blocking "v" collectives, and a pool of
 * request slots for non-blocking ones. After warm-up no call here allocates.
 * Threading: MPI_THREAD_FUNNELED; a communicator is used by one thread (the main one).
 *
 * Under a watchdog (comm.h, dt_comm_watch) every blocking call is posted in its non-blocking
 * form and completed by the same timed polling wait as dt_comm_wait: MPI_Test in a tight loop
 * for the first SPIN_S seconds (a wait that short is a transfer, not a stall, and sleeping
 * would add latency), then napping between polls for 1/NAP_SHARE of the time waited so far,
 * within [NAP_MIN_NS, NAP_MAX_NS]: a message is noticed at most ~1.5% (plus the kernel's
 * timer slack) later than by spinning, and a rank waiting for a stalled peer wakes ~500 times
 * a second instead of spinning a core; past the timeout the wait fails with the report.
 */
#include "dist/dist.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

#define SPIN_S 1e-3
#define NAP_SHARE 64
#define NAP_MIN_NS 20000L
#define NAP_MAX_NS 2000000L

/* A pending non-blocking operation. MPI requires the count and displacement arrays of a
 * non-blocking v-collective to stay untouched until it completes, so each slot carries its
 * own copy (2 x size ints) instead of sharing the communicator's scratch. */
typedef struct slot {
    MPI_Request mreq;
    int expect; /* recv: bytes the caller asked for, checked at completion; -1 otherwise */
    const char *what; /* the operation, for the watchdog's report: "all-reduce", "recv from" */
    int peer;         /* p2p: the other rank in this communicator; -1 otherwise */
    int *ints;  /* 2 x size: counts then displacements */
    struct slot *next_free;
} slot;

/* Slots are allocated in chunks and never moved, so dt_comm_req.impl can point at one. */
#define SLOTS_PER_CHUNK 16
typedef struct chunk {
    struct chunk *next;
    slot slots[SLOTS_PER_CHUNK];
    /* followed by SLOTS_PER_CHUNK x 2 x size ints */
} chunk;

typedef struct mpi_impl {
    MPI_Comm comm; /* first: the impl "is" the MPI_Comm for code that peeks */
    bool owns_mpi; /* world only: dt_dist_init called MPI_Init_thread */
    int *scratch;  /* 2 x size: displacements of blocking v-collectives */
    chunk *chunks;
    slot *free_slots;
} mpi_impl;

typedef struct mpi_comm {
    dt_comm base;
    mpi_impl m;
} mpi_comm;

static MPI_Comm mcomm(const dt_comm *c) {
    return ((const mpi_impl *)c->impl)->comm;
}

static dt_status mpi_fail(const char *who, const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", code);
    return dt_err_set(DT_ERR_MPI, "%s: %s failed: %s", who, call, text);
}

/* Call an MPI function, translating a failure into DT_ERR_MPI named after the communicator. */
#define MPI_TRY(c, fn, ...)                                                                        \
    do {                                                                                           \
        int rc_ = fn(__VA_ARGS__);                                                                 \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return mpi_fail((c)->name, #fn, rc_);                                                  \
    } while (0)

static dt_status check_count(const dt_comm *c, const char *what, int64_t n) {
    if (n < 0 || n > INT_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: %s count %lld is outside [0, INT_MAX]", c->name, what,
                          (long long)n);
    return DT_OK;
}

/* Exclusive prefix sums of counts into displ; fails when a count is negative or the total
 * does not fit the int displacements MPI takes. */
static dt_status prefix_displs(const dt_comm *c, const char *what, const int *counts, int *displ) {
    int64_t at = 0;
    for (int r = 0; r < c->size; r++) {
        if (counts[r] < 0)
            return dt_err_set(DT_ERR_ARG, "%s: %s counts[%d] = %d is negative", c->name, what, r,
                              counts[r]);
        displ[r] = (int)at;
        at += counts[r];
        if (at > INT_MAX)
            return dt_err_set(DT_ERR_ARG, "%s: %s total count exceeds INT_MAX", c->name, what);
    }
    return DT_OK;
}

/* ---- request slots ------------------------------------------------------------------------ */

static dt_status slot_get(dt_comm *c, dt_comm_req *req, slot **out) {
    mpi_impl *m = c->impl;
    if (req->active)
        return dt_err_set(DT_ERR_ARG, "%s: request is still pending; wait on it before reuse",
                          c->name);
    if (!m->free_slots) {
        size_t ints = (size_t)SLOTS_PER_CHUNK * 2 * (size_t)c->size;
        chunk *k = malloc(sizeof *k + ints * sizeof(int));
        if (!k)
            return dt_err_set(DT_ERR_OOM, "%s: out of memory for request slots", c->name);
        int *base = (int *)(k + 1);
        for (int i = 0; i < SLOTS_PER_CHUNK; i++) {
            k->slots[i].ints = base + (size_t)i * 2 * (size_t)c->size;
            k->slots[i].next_free = m->free_slots;
            m->free_slots = &k->slots[i];
        }
        k->next = m->chunks;
        m->chunks = k;
    }
    slot *s = m->free_slots;
    m->free_slots = s->next_free;
    s->mreq = MPI_REQUEST_NULL;
    s->expect = -1;
    s->peer = -1;
    *out = s;
    return DT_OK;
}

static void slot_put(dt_comm *c, slot *s) {
    mpi_impl *m = c->impl;
    s->next_free = m->free_slots;
    m->free_slots = s;
}

/* After the MPI call that filled s->mreq: publish the slot in req, or recycle it on failure. */
static dt_status posted(dt_comm *c, dt_comm_req *req, dt_comm_op op, slot *s, int rc,
                        const char *call, const char *what) {
    if (rc != MPI_SUCCESS) {
        slot_put(c, s);
        return mpi_fail(c->name, call, rc);
    }
    s->what = what;
    req->impl = s;
    req->op = op;
    req->active = true;
    return DT_OK;
}

/* Blocking calls stay blocking (MPI's own tuned algorithms) unless a watchdog must be able to
 * give up on them, or the test-only stall is armed. */
static bool watched(const dt_comm *c) {
    return c->watch && (c->watch->timeout_s > 0 || c->watch->stall_rank >= 0);
}

static dt_status op_wait(dt_comm *c, dt_comm_req *req);

/* The end of an op: a caller's request is left pending; a blocking call (req == NULL, its
 * own request in `own`) is completed here by the timed wait. */
static dt_status complete(dt_comm *c, dt_comm_req *req, dt_comm_req *own, dt_status st) {
    if (st != DT_OK || req)
        return st;
    return op_wait(c, own);
}

/* A receive that completed with fewer bytes than asked is a protocol bug; say so. */
static dt_status check_recv(dt_comm *c, const MPI_Status *st, int expect) {
    int got = 0;
    int rc = MPI_Get_count(st, MPI_BYTE, &got);
    if (rc != MPI_SUCCESS)
        return mpi_fail(c->name, "MPI_Get_count", rc);
    if (got != expect)
        return dt_err_set(DT_ERR_MPI, "%s: recv from rank %d got %d bytes, expected %d", c->name,
                          st->MPI_SOURCE, got, expect);
    return DT_OK;
}

/* ---- the ops ------------------------------------------------------------------------------ */

static dt_status allreduce(dt_comm *c, void *buf, int64_t n, MPI_Datatype type, MPI_Op mop,
                           dt_comm_req *req) {
    DT_TRY(check_count(c, "allreduce", n));
    if (!req && !watched(c)) {
        MPI_TRY(c, MPI_Allreduce, MPI_IN_PLACE, buf, (int)n, type, mop, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0}, *r = req ? req : &own;
    slot *s = NULL;
    DT_TRY(slot_get(c, r, &s));
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, type, mop, mcomm(c), &s->mreq);
    return complete(c, req, r,
                    posted(c, r, DT_COMM_ALLREDUCE, s, rc, "MPI_Iallreduce", "all-reduce"));
}

static dt_status op_allreduce_f32(dt_comm *c, float *buf, int64_t n, dt_comm_req *req) {
    return allreduce(c, buf, n, MPI_FLOAT, MPI_SUM, req);
}

static dt_status op_allreduce_f64(dt_comm *c, double *buf, int64_t n) {
    return allreduce(c, buf, n, MPI_DOUBLE, MPI_SUM, NULL);
}

static dt_status op_allreduce_max_i32(dt_comm *c, int32_t *buf, int64_t n) {
    return allreduce(c, buf, n, MPI_INT32_T, MPI_MAX, NULL);
}

static dt_status op_reduce_scatter_f32(dt_comm *c, const float *send, float *recv,
                                       const int *counts, dt_comm_req *req) {
    mpi_impl *m = c->impl;
    /* validates counts and their total even though MPI_Reduce_scatter takes no displs */
    DT_TRY(prefix_displs(c, "reduce_scatter", counts, m->scratch + c->size));
    if (send && send == recv)
        return dt_err_set(DT_ERR_ARG, "%s: reduce_scatter needs separate send and recv buffers",
                          c->name);
    if (!req && !watched(c)) {
        MPI_TRY(c, MPI_Reduce_scatter, send, recv, counts, MPI_FLOAT, MPI_SUM, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0}, *r = req ? req : &own;
    slot *s = NULL;
    DT_TRY(slot_get(c, r, &s));
    memcpy(s->ints, counts, (size_t)c->size * sizeof *counts);
    int rc = MPI_Ireduce_scatter(send, recv, s->ints, MPI_FLOAT, MPI_SUM, mcomm(c), &s->mreq);
    return complete(c, req, r, posted(c, r, DT_COMM_REDUCE_SCATTER, s, rc,
                                      "MPI_Ireduce_scatter", "reduce-scatter"));
}

static dt_status op_allgather_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                  dt_comm_req *req) {
    mpi_impl *m = c->impl;
    slot *s = NULL;
    int *cnt = m->scratch, *displ = m->scratch + c->size;
    dt_comm_req own = {0}, *r = req;
    if (!req && watched(c))
        r = &own;
    if (r) {
        DT_TRY(slot_get(c, r, &s));
        cnt = s->ints;
        displ = s->ints + c->size;
    }
    dt_status st = prefix_displs(c, "allgather", counts, displ);
    if (st != DT_OK) {
        if (s)
            slot_put(c, s);
        return st;
    }
    if (cnt != counts)
        memcpy(cnt, counts, (size_t)c->size * sizeof *counts);
    /* the caller's block already sits in its place in recv: MPI must not read it as a
     * separate, aliased send buffer */
    const void *sbuf = recv && send == recv + displ[c->rank] ? MPI_IN_PLACE : (const void *)send;
    int scount = counts[c->rank];
    if (!r) {
        MPI_TRY(c, MPI_Allgatherv, sbuf, scount, MPI_FLOAT, recv, cnt, displ, MPI_FLOAT, mcomm(c));
        return DT_OK;
    }
    int rc =
        MPI_Iallgatherv(sbuf, scount, MPI_FLOAT, recv, cnt, displ, MPI_FLOAT, mcomm(c), &s->mreq);
    return complete(c, req, r,
                    posted(c, r, DT_COMM_ALLGATHER, s, rc, "MPI_Iallgatherv", "all-gather"));
}

static dt_status op_alltoall_f32(dt_comm *c, const float *send, float *recv, int64_t n,
                                 dt_comm_req *req) {
    DT_TRY(check_count(c, "alltoall", n));
    if (send && send == recv)
        return dt_err_set(DT_ERR_ARG, "%s: alltoall needs separate send and recv buffers", c->name);
    if (!req && !watched(c)) {
        MPI_TRY(c, MPI_Alltoall, send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0}, *r = req ? req : &own;
    slot *s = NULL;
    DT_TRY(slot_get(c, r, &s));
    int rc = MPI_Ialltoall(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, mcomm(c), &s->mreq);
    return complete(c, req, r,
                    posted(c, r, DT_COMM_ALLTOALL, s, rc, "MPI_Ialltoall", "all-to-all"));
}

static dt_status check_peer(const dt_comm *c, const char *what, int peer) {
    if (peer < 0 || peer >= c->size)
        return dt_err_set(DT_ERR_ARG, "%s: %s rank %d is outside [0, %d)", c->name, what, peer,
                          c->size);
    return DT_OK;
}

static dt_status op_broadcast(dt_comm *c, void *buf, int64_t bytes, int root) {
    DT_TRY(check_count(c, "broadcast", bytes));
    DT_TRY(check_peer(c, "broadcast root", root));
    if (!watched(c)) {
        MPI_TRY(c, MPI_Bcast, buf, (int)bytes, MPI_BYTE, root, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0};
    slot *s = NULL;
    DT_TRY(slot_get(c, &own, &s));
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, mcomm(c), &s->mreq);
    return complete(c, NULL, &own,
                    posted(c, &own, DT_COMM_BROADCAST, s, rc, "MPI_Ibcast", "broadcast"));
}

static dt_status op_send(dt_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                         dt_comm_req *req) {
    DT_TRY(check_count(c, "send", bytes));
    DT_TRY(check_peer(c, "send peer", peer));
    if (!req && !watched(c)) {
        MPI_TRY(c, MPI_Send, buf, (int)bytes, MPI_BYTE, peer, tag, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0}, *r = req ? req : &own;
    slot *s = NULL;
    DT_TRY(slot_get(c, r, &s));
    s->peer = peer;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, mcomm(c), &s->mreq);
    return complete(c, req, r, posted(c, r, DT_COMM_P2P, s, rc, "MPI_Isend", "send to"));
}

static dt_status op_recv(dt_comm *c, void *buf, int64_t bytes, int peer, int tag,
                         dt_comm_req *req) {
    DT_TRY(check_count(c, "recv", bytes));
    DT_TRY(check_peer(c, "recv peer", peer));
    if (!req && !watched(c)) {
        MPI_Status st;
        MPI_TRY(c, MPI_Recv, buf, (int)bytes, MPI_BYTE, peer, tag, mcomm(c), &st);
        return check_recv(c, &st, (int)bytes);
    }
    dt_comm_req own = {0}, *r = req ? req : &own;
    slot *s = NULL;
    DT_TRY(slot_get(c, r, &s));
    s->expect = (int)bytes;
    s->peer = peer;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, mcomm(c), &s->mreq);
    return complete(c, req, r, posted(c, r, DT_COMM_P2P, s, rc, "MPI_Irecv", "recv from"));
}

/* The slot is recycled whatever MPI says: after a failed wait the request is dead anyway. */
static dt_status finish(dt_comm *c, dt_comm_req *req, int rc, const char *call,
                        const MPI_Status *st) {
    slot *s = req->impl;
    int expect = s->expect;
    req->impl = NULL;
    slot_put(c, s);
    if (rc != MPI_SUCCESS)
        return mpi_fail(c->name, call, rc);
    if (expect >= 0)
        return check_recv(c, st, expect);
    return DT_OK;
}

/* ---- the watchdog's wait ------------------------------------------------------------------ */

/* World rank of this communicator's rank r (for the report; MPI_PROC_NULL when unknown). */
static int world_rank_of(const dt_comm *c, int r) {
    MPI_Group g, wg;
    int out = MPI_PROC_NULL;
    if (MPI_Comm_group(mcomm(c), &g) != MPI_SUCCESS)
        return out;
    if (MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS) {
        MPI_Group_translate_ranks(g, 1, &r, wg, &out);
        MPI_Group_free(&wg);
    }
    MPI_Group_free(&g);
    return out;
}

/* The group as world ranks: "0,1" (the first 8, then "..."). */
static void group_ranks(const dt_comm *c, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int r = 0; r < c->size && len + 16 < n; r++) {
        if (r == 8) {
            snprintf(buf + len, n - len, ",...");
            break;
        }
        len += (size_t)snprintf(buf + len, n - len, r ? ",%d" : "%d", world_rank_of(c, r));
    }
}

/* The first timeout: compose the report once, keep it in the watch and fail with it. */
static dt_status expire(dt_comm *c, const slot *s, double waited) {
    dt_comm_watch *w = c->watch;
    char where[96], op[64], ranks[96];
    dt_comm_watch_where(w, where, sizeof where);
    group_ranks(c, ranks, sizeof ranks);
    if (s->peer >= 0)
        snprintf(op, sizeof op, "%s rank %d (%s rank %d)", s->what, world_rank_of(c, s->peer),
                 c->name, s->peer);
    else
        snprintf(op, sizeof op, "%s", s->what);
    snprintf(w->report, sizeof w->report,
             "watchdog: rank %d waited %.0f s (train.comm_timeout) in %s on group %s (%s rank %d "
             "of %d; world ranks %s) at %s: a peer rank is stalled or gone; ending the job",
             w->rank, waited, op, c->name, c->name, c->rank, c->size, ranks, where);
    w->expired = true;
    return dt_err_set(DT_ERR_MPI, "%s", w->report);
}

/* Poll s to completion or the watch's deadline; *late when the deadline passed first. */
static int poll_wait(dt_comm *c, slot *s, MPI_Status *st, bool *late, double *waited) {
    double t0 = dt_now(), limit = c->watch->timeout_s > 0 ? c->watch->timeout_s : INFINITY;
    *late = false;
    for (;;) {
        int flag = 0, rc = MPI_Test(&s->mreq, &flag, st);
        if (rc != MPI_SUCCESS || flag)
            return rc;
        *waited = dt_now() - t0;
        if (*waited >= limit) {
            *late = true;
            return MPI_SUCCESS;
        }
        if (*waited < SPIN_S)
            continue;
        long nap = (long)(*waited * 1e9 / NAP_SHARE);
        nap = nap < NAP_MIN_NS ? NAP_MIN_NS : nap > NAP_MAX_NS ? NAP_MAX_NS : nap;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = nap};
        nanosleep(&ts, NULL);
    }
}

static dt_status op_wait(dt_comm *c, dt_comm_req *req) {
    slot *s = req->impl;
    if (!s)
        return DT_OK;
    MPI_Status st;
    if (!watched(c)) {
        int rc = MPI_Wait(&s->mreq, &st);
        return finish(c, req, rc, "MPI_Wait", &st);
    }
    /* after a timeout, or on one: MPI still owns the request and the slot's arrays, so the
     * slot is dropped (freed with the communicator), never reused */
    if (c->watch->expired) {
        req->impl = NULL;
        return dt_err_set(DT_ERR_MPI, "%s", c->watch->report);
    }
    dt_comm_watch_stall(c->watch);
    bool late = false;
    double waited = 0;
    int rc = poll_wait(c, s, &st, &late, &waited);
    if (!late)
        return finish(c, req, rc, "MPI_Test", &st);
    req->impl = NULL;
    return expire(c, s, waited);
}

static dt_status op_test(dt_comm *c, dt_comm_req *req, bool *done) {
    slot *s = req->impl;
    *done = true;
    if (!s)
        return DT_OK;
    MPI_Status st;
    int flag = 0;
    int rc = MPI_Test(&s->mreq, &flag, &st);
    if (rc == MPI_SUCCESS && !flag) {
        *done = false;
        return DT_OK;
    }
    /* an error also ends the request, so a polling loop stops */
    return finish(c, req, rc, "MPI_Test", &st);
}

static dt_status op_barrier(dt_comm *c) {
    if (!watched(c)) {
        MPI_TRY(c, MPI_Barrier, mcomm(c));
        return DT_OK;
    }
    dt_comm_req own = {0};
    slot *s = NULL;
    DT_TRY(slot_get(c, &own, &s));
    int rc = MPI_Ibarrier(mcomm(c), &s->mreq);
    return complete(c, NULL, &own,
                    posted(c, &own, DT_COMM_ALLREDUCE, s, rc, "MPI_Ibarrier", "barrier"));
}

/* Requests must be completed before free: MPI forbids MPI_Request_free on collectives, so
 * there is nothing sound to do with a pending one. After MPI_Finalize only memory is freed. */
static void op_free(dt_comm *c) {
    mpi_comm *mc = (mpi_comm *)c;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && mc->m.comm != MPI_COMM_NULL)
        MPI_Comm_free(&mc->m.comm); /* a void destructor has no one to tell of a failure */
    for (chunk *k = mc->m.chunks, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    free(mc->m.scratch);
    free(mc);
}

static const dt_comm_ops mpi_ops = {
    .allreduce_f32 = op_allreduce_f32,
    .allreduce_f64 = op_allreduce_f64,
    .allreduce_max_i32 = op_allreduce_max_i32,
    .reduce_scatter_f32 = op_reduce_scatter_f32,
    .allgather_f32 = op_allgather_f32,
    .alltoall_f32 = op_alltoall_f32,
    .broadcast = op_broadcast,
    .send = op_send,
    .recv = op_recv,
    .wait = op_wait,
    .test = op_test,
    .barrier = op_barrier,
    .free = op_free,
};

/* ---- construction ------------------------------------------------------------------------- */

/* Wrap `comm` (taken over: freed here on failure) in a dt_comm with MPI_ERRORS_RETURN. */
static dt_status wrap(MPI_Comm comm, const char *name, dt_comm **out) {
    dt_status st = DT_OK;
    int rc;
    mpi_comm *mc = calloc(1, sizeof *mc);
    if (!mc) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory for communicator", name);
        goto fail;
    }
    mc->m.comm = comm;
    mc->base.ops = &mpi_ops;
    mc->base.impl = &mc->m;
    snprintf(mc->base.name, sizeof mc->base.name, "%s", name);
    if ((rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        st = mpi_fail(name, "MPI_Comm_set_errhandler", rc);
        goto fail;
    }
    if ((rc = MPI_Comm_rank(comm, &mc->base.rank)) != MPI_SUCCESS) {
        st = mpi_fail(name, "MPI_Comm_rank", rc);
        goto fail;
    }
    if ((rc = MPI_Comm_size(comm, &mc->base.size)) != MPI_SUCCESS) {
        st = mpi_fail(name, "MPI_Comm_size", rc);
        goto fail;
    }
    mc->m.scratch = malloc(2 * (size_t)mc->base.size * sizeof(int));
    if (!mc->m.scratch) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory for communicator scratch", name);
        goto fail;
    }
    *out = &mc->base;
    return DT_OK;
fail:
    if (mc)
        free(mc->m.scratch);
    free(mc);
    if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    return st;
}

dt_status dt_dist_init(int *argc, char ***argv, dt_comm **world) {
    *world = NULL;
    int inited = 0, fin = 0, rc;
    MPI_Finalized(&fin);
    if (fin)
        return dt_err_set(DT_ERR_MPI, "world: MPI was already finalized");
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* errors here are fatal under MPI's default handler; nothing to translate */
        if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
            return mpi_fail("world", "MPI_Init_thread", rc);
        if (provided < MPI_THREAD_FUNNELED) {
            MPI_Finalize();
            return dt_err_set(DT_ERR_MPI, "world: MPI provides thread level %d, need FUNNELED",
                              provided);
        }
    }
    MPI_Comm dup = MPI_COMM_NULL;
    dt_status st;
    /* so that a failing dup reports instead of aborting */
    if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        st = mpi_fail("world", "MPI_Comm_set_errhandler", rc);
        goto fail;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) {
        st = mpi_fail("world", "MPI_Comm_dup", rc);
        goto fail;
    }
    st = wrap(dup, "world", world);
    if (st != DT_OK)
        goto fail;
    ((mpi_impl *)(*world)->impl)->owns_mpi = !inited;
    return DT_OK;
fail:
    if (!inited)
        MPI_Finalize();
    return st;
}

void dt_dist_finalize(dt_comm *world) {
    /* without a world we cannot know who initialised MPI; assume we did (dist.h contract) */
    bool owns = !world || ((mpi_impl *)world->impl)->owns_mpi;
    dt_comm_free(world);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (owns && inited && !fin)
        MPI_Finalize();
}

dt_status dt_dist_split(dt_comm *parent, int color, int key, const char *name, dt_comm **out) {
    *out = NULL;
    if (color < 0)
        return dt_err_set(DT_ERR_ARG, "%s: split color %d is negative", name, color);
    /* any split of one rank is that rank alone: no MPI needed (a local world, a size-1 axis) */
    if (parent->ops != &mpi_ops) {
        if (parent->size == 1)
            return dt_comm_local_init(name, out);
        return dt_err_set(DT_ERR_ARG, "%s: split needs an MPI communicator, %s is not one", name,
                          parent->name);
    }
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(mcomm(parent), color, key, &sub);
    if (rc != MPI_SUCCESS)
        return mpi_fail(parent->name, "MPI_Comm_split", rc);
    DT_TRY(wrap(sub, name, out));
    (*out)->watch = parent->watch;
    return DT_OK;
}

void dt_dist_abort(dt_comm *world, int code) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code); /* the world dup's group is the same: everyone */
    _Exit(code ? code : 1);              /* no MPI, or MPI_Abort returned */
}
