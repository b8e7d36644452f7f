/* The communication interface every layer above core/ talks through (nn/, optim/, train/ never
 * include mpi.h). dist/ implements it with MPI; core/comm_local.c implements the size-1 case,
 * so degree-1 code paths run the same calls without MPI (a collective over one rank is a copy
 * or nothing).
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
    dt_status (*allreduce_f64)(dt_comm *c, double *buf, int64_t n); /* blocking */
    dt_status (*allreduce_max_i32)(dt_comm *c, int32_t *buf, int64_t n); /* blocking */
    /* send[0 .. sum(counts)) summed over ranks; this rank receives the counts[rank] elements
     * starting at sum(counts[0 .. rank)). */
    dt_status (*reduce_scatter_f32)(dt_comm *c, const float *send, float *recv,
                                    const int *counts, dt_comm_req *req);
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
    dt_status (*recv)(dt_comm *c, void *buf, int64_t bytes, int peer, int tag,
                      dt_comm_req *req);
    dt_status (*wait)(dt_comm *c, dt_comm_req *req);
    dt_status (*test)(dt_comm *c, dt_comm_req *req, bool *done);
    dt_status (*barrier)(dt_comm *c);
    void (*free)(dt_comm *c);
} dt_comm_ops;

struct dt_comm {
    const dt_comm_ops *ops;
    void *impl;
    int rank, size;
    char name[16]; /* "world", "dp", "tp", ... */
    dt_comm_stats stats;
};

/* A communicator of one rank (no MPI). */
dt_status dt_comm_local_init(const char *name, dt_comm **out);
void dt_comm_free(dt_comm *c);

dt_status dt_comm_allreduce_f32(dt_comm *c, float *buf, int64_t n, dt_comm_req *req);
dt_status dt_comm_allreduce_f64(dt_comm *c, double *buf, int64_t n);
dt_status dt_comm_allreduce_max_i32(dt_comm *c, int32_t *buf, int64_t n);
dt_status dt_comm_reduce_scatter_f32(dt_comm *c, const float *send, float *recv,
                                     const int *counts, dt_comm_req *req);
dt_status dt_comm_allgather_f32(dt_comm *c, const float *send, float *recv, const int *counts,
                                dt_comm_req *req);
dt_status dt_comm_alltoall_f32(dt_comm *c, const float *send, float *recv, int64_t n,
                               dt_comm_req *req);
dt_status dt_comm_broadcast(dt_comm *c, void *buf, int64_t bytes, int root);
dt_status dt_comm_send(dt_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                       dt_comm_req *req);
dt_status dt_comm_recv(dt_comm *c, void *buf, int64_t bytes, int peer, int tag,
                       dt_comm_req *req);
dt_status dt_comm_wait(dt_comm *c, dt_comm_req *req); /* no-op on an inactive req */
dt_status dt_comm_test(dt_comm *c, dt_comm_req *req, bool *done);

/* dt_comm_agree (dtrain/dist.h): every rank passes its own status; all return the first
 * failure (lowest failing rank), with that rank's message, so every rank reports the same
 * error and none is left waiting in a later collective. */

#endif
