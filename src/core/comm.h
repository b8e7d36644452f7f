/* The communication interface every layer above core/ talks through (nn/, optim/, train/ never
 * include mpi.h). dist/ implements it with MPI; core/comm.c implements the size-1 case,
 * so degree-1 code paths run the same calls without MPI (a collective over one rank is a copy
 * or nothing), and a stand-in for one rank of a larger group whose peers are absent.
 *
 * Collectives over a flat float range use per-rank counts (the "v" forms), because ZeRO shards
 * rarely divide a bucket evenly. Non-blocking calls fill a dt_comm_req and complete in
 * dt_comm_wait; dt_comm_test lets a compute loop progress them. Every call is collective over
 * the communicator's group unless it says otherwise. Bytes and seconds are counted per op;
 * time spent blocked in dt_comm_wait is counted apart, as "exposed" communication.
 * A dt_comm is used by one thread at a time.
 */
#ifndef DT_CORE_COMM_H
#define DT_CORE_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "dtrain/dist.h" /* dt_comm, dt_comm_rank/size/barrier/agree */
#include "dtrain/mem.h"  /* dt_mem: where the rank is, for the watchdog's report */

typedef enum dt_comm_op {
    DT_COMM_ALLREDUCE,
    DT_COMM_REDUCE_SCATTER,
    DT_COMM_ALLGATHER,
    DT_COMM_ALLTOALL,
    DT_COMM_BROADCAST,
    DT_COMM_P2P,
    DT_COMM_OP_COUNT
} dt_comm_op;

typedef struct dt_comm_stats {
    uint64_t calls[DT_COMM_OP_COUNT];
    uint64_t bytes[DT_COMM_OP_COUNT]; /* bytes this rank receives (see comm.c for each op) */
    double seconds[DT_COMM_OP_COUNT]; /* time inside blocking calls and posting non-blocking */
    double wait_seconds;              /* time in dt_comm_wait and dt_comm_test (progress) */
} dt_comm_stats;

/* A pending non-blocking operation; zero-initialised = nothing pending. An implementation
 * sets `active` (and `op`) when it posts; the request is completed through the communicator
 * that posted it, and must be completed before that communicator is freed. Counts above
 * INT_MAX elements are refused (DT_ERR_ARG): callers chunk larger ranges. */
typedef struct dt_comm_req {
    void *impl;
    dt_comm_op op;
    bool active;
} dt_comm_req;

typedef struct dt_comm_ops {
    /* buf[0 .. n) summed over ranks, in place. req NULL = blocking. */
    dt_status (*allreduce_f32)(dt_comm *c, float *buf, int64_t n, dt_comm_req *req);
    dt_status (*allreduce_f64)(dt_comm *c, double *buf, int64_t n);      /* blocking */
    dt_status (*allreduce_max_i32)(dt_comm *c, int32_t *buf, int64_t n); /* blocking */
    /* send[0 .. sum(counts)) summed over ranks; this rank receives the counts[rank] elements
     * starting at sum(counts[0 .. rank)). */
    dt_status (*reduce_scatter_f32)(dt_comm *c, const float *send, float *recv, const int *counts,
                                    dt_comm_req *req);
    /* recv[0 .. sum(counts)): rank r's counts[r] elements land at sum(counts[0 .. r)).
     * send may alias its own place in recv (in place). */
    dt_status (*allgather_f32)(dt_comm *c, const float *send, float *recv, const int *counts,
                               dt_comm_req *req);
    /* every rank sends `n` floats to each rank: send/recv hold size x n, block r for rank r */
    dt_status (*alltoall_f32)(dt_comm *c, const float *send, float *recv, int64_t n,
                              dt_comm_req *req);
    dt_status (*broadcast)(dt_comm *c, void *buf, int64_t bytes, int root);
    /* point to point (not collective) */
    dt_status (*send)(dt_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                      dt_comm_req *req);
    dt_status (*recv)(dt_comm *c, void *buf, int64_t bytes, int peer, int tag, dt_comm_req *req);
    dt_status (*wait)(dt_comm *c, dt_comm_req *req);
    dt_status (*test)(dt_comm *c, dt_comm_req *req, bool *done);
    dt_status (*barrier)(dt_comm *c);
    void (*free)(dt_comm *c);
} dt_comm_ops;

/* The collective watchdog: one record per process, shared (borrowed) by the communicators of
 * a run. An implementation that can wait with a deadline (dist/) completes every blocking call
 * and dt_comm_wait by polling, sleeping between polls once a wait is no longer short, so a
 * rank waiting for a stalled peer neither spins a core nor waits forever: after timeout_s it
 * fails with DT_ERR_MPI and a report naming this rank, the group, the operation (and peer),
 * and the step, micro-batch and phase read from `where`. After that, `expired` is set and
 * every later wait fails at once with the same report, because peers can no longer be
 * trusted to arrive: the caller must end the job (cli/ calls MPI_Abort), not agree on it.
 *
 * Test-only: DT_TEST_STALL=rank:step[:seconds] (read by dt_comm_watch_init) makes world rank
 * `rank` sleep `seconds` (default 3600) inside its first wait of step `step`, so tests can
 * show that the others end with the report instead of hanging. */
typedef struct dt_comm_watch {
    double timeout_s;    /* 0 = wait forever (then blocking calls stay blocking) */
    int rank;            /* this process's world rank */
    const dt_mem *where; /* borrowed, may be NULL: its context is the step and micro-batch */
    int stall_rank;      /* DT_TEST_STALL: -1 = none */
    int stall_step;
    double stall_s;
    bool stalled;     /* the stall has happened */
    bool expired;     /* a wait timed out */
    char report[640]; /* the first timeout's report */
} dt_comm_watch;

/* Fills *w (timeout in seconds, 0 = off) and reads DT_TEST_STALL; a malformed value is
 * DT_ERR_ARG. Attach with c->watch = w on the world before splitting it: dt_dist_split hands
 * the parent's watch to the new communicator. */
dt_status dt_comm_watch_init(dt_comm_watch *w, double timeout_s, int rank);
/* "step 3, micro-batch 1, backward" from w->where ("set-up" before the first step). */
void dt_comm_watch_where(const dt_comm_watch *w, char *buf, size_t n);
/* Test-only: sleeps here when DT_TEST_STALL names this rank and the current step, once. */
void dt_comm_watch_stall(dt_comm_watch *w);

struct dt_comm {
    const dt_comm_ops *ops;
    void *impl;
    int rank, size;
    char name[16]; /* "world", "dp", "tp", ... */
    dt_comm_stats stats;
    dt_comm_watch *watch; /* borrowed; NULL = no watchdog */
};

/* A communicator of one rank (no MPI). */
dt_status dt_comm_local_init(const char *name, dt_comm **out);
/* A stand-in for one rank of a group of `size` (no MPI): this process plays `rank` and no other
 * rank exists. Each call leaves what this rank holds of its result without any peer (its own
 * addend of a sum, its own block of a reduce-scatter or an all-to-all, its own piece of an
 * all-gather), sends go nowhere and receives keep their buffers. A rank's work in a layout
 * can so be timed in one process with the communication taken out (dtrain plan --device
 * this); its results are not a run's. Size 1 is dt_comm_local_init. dt_mesh_init builds a
 * stand-in mesh on a stand-in world. */
dt_status dt_comm_standin_init(const char *name, int rank, int size, dt_comm **out);
bool dt_comm_is_standin(const dt_comm *c);
void dt_comm_free(dt_comm *c);

dt_status dt_comm_allreduce_f32(dt_comm *c, float *buf, int64_t n, dt_comm_req *req);
dt_status dt_comm_allreduce_f64(dt_comm *c, double *buf, int64_t n);
dt_status dt_comm_allreduce_max_i32(dt_comm *c, int32_t *buf, int64_t n);
dt_status dt_comm_reduce_scatter_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                     dt_comm_req *req);
dt_status dt_comm_allgather_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                dt_comm_req *req);
dt_status dt_comm_alltoall_f32(dt_comm *c, const float *send, float *recv, int64_t n,
                               dt_comm_req *req);
dt_status dt_comm_broadcast(dt_comm *c, void *buf, int64_t bytes, int root);
dt_status dt_comm_send(dt_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                       dt_comm_req *req);
dt_status dt_comm_recv(dt_comm *c, void *buf, int64_t bytes, int peer, int tag, dt_comm_req *req);
dt_status dt_comm_wait(dt_comm *c, dt_comm_req *req); /* no-op on an inactive req */
dt_status dt_comm_test(dt_comm *c, dt_comm_req *req, bool *done);

/* dt_comm_agree (dtrain/dist.h): every rank passes its own status; all return the first
 * failure (lowest failing rank), with that rank's message, so every rank reports the same
 * error and none is left waiting in a later collective. */

#endif
