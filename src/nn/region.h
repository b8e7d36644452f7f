/* Region operators: the communication at the edges of a tensor- or sequence-parallel region,
 * each a forward map and its adjoint (Megatron core/tensor_parallel/mappings.py, plus the
 * sequence versions of Megatron-SP, Open-Sora and Ulysses). A parallel layer is region op →
 * unchanged local layer → region op; degree 1 runs the same calls on a size-1 dt_comm.
 * Talks to other ranks only through dt_comm (no mpi.h). Every call is collective over `c`
 * (even ops whose forward or backward moves no data check shapes identically on every rank).
 * Backwards also come split (dt_region_backward_begin/_end) so the dx collective overlaps
 * other work, e.g. the dW matmul; the blocking backwards are begin + end.
 * No allocation: the caller passes a scratch buffer. A dt_comm is used by one thread at a time.
 */
#ifndef DT_NN_REGION_H
#define DT_NN_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/status.h"

/* Shape of the FULL (unsharded) tensor, row-major [rows, cols]: rows = T (sequence, first dim),
 * cols = C (last dim). all_to_all only: cols = heads * head_size, the tensor is [T, H, hs].
 * heads is ignored by every other op. p below is c->size and r is c->rank. */
typedef struct dt_region_shape {
    int64_t rows, cols;
    int heads;
} dt_region_shape;

/* How one side (input or output) of a region op is held across the p ranks, and how an inner
 * product over that side is taken (what the adjoint is relative to):
 *   REPLICATED: [rows, cols], the same values on every rank; counted once.
 *   PER_RANK:   [rows, cols] on every rank but independent values (partial sums, or the
 *               inputs of p different shards' computations); summed over ranks.
 *   ROWS:       [rows/p, cols], rank r holds rows [r*rows/p, (r+1)*rows/p); summed over ranks.
 *   COLS:       [rows, cols/p], rank r holds columns [r*cols/p, (r+1)*cols/p); summed.
 *   HEADS:      [T, H/p, hs], rank r holds heads [r*H/p, (r+1)*H/p); summed.
 * A ROWS tensor for all_to_all is [T/p, H, hs]. */
typedef enum dt_region_layout {
    DT_REGION_LAYOUT_REPLICATED,
    DT_REGION_LAYOUT_PER_RANK,
    DT_REGION_LAYOUT_ROWS,
    DT_REGION_LAYOUT_COLS,
    DT_REGION_LAYOUT_HEADS,
    DT_REGION_LAYOUT_COUNT
} dt_region_layout;

/* One signature for every op and direction, so layers and tests can hold them in a table.
 *   forward:  in = x, out = y: y is OVERWRITTEN with A x.
 *   backward: in = dy, out = dx: dx ACCUMULATES Aᵀ dy (dx += ...; the caller zeroes it).
 * in and out must not overlap; in is never written. work: scratch of
 * dt_region_work_count() floats, contents undefined on return; NULL where that count is 0.
 * Errors: DT_ERR_ARG for a shape the comm size does not divide (message names both numbers),
 * a negative size, or a NULL work where one is needed; DT_ERR_UNSUPPORTED above 1024 ranks;
 * DT_ERR_MPI from the collective. Blocking; see dt_region_backward_begin for the split form. */
typedef dt_status (*dt_region_fn)(dt_comm *c, const dt_region_shape *s, const float *in, float *out,
                                  float *work);

typedef enum dt_region_kind {
    DT_REGION_KIND_COPY,
    DT_REGION_KIND_REDUCE,
    DT_REGION_KIND_SCATTER,
    DT_REGION_KIND_GATHER,
    DT_REGION_KIND_SEQ_GATHER,
    DT_REGION_KIND_SEQ_REDUCE_SCATTER,
    DT_REGION_KIND_SEQ_SPLIT,
    DT_REGION_KIND_SEQ_GATHER_SPLIT,
    DT_REGION_KIND_ALL_TO_ALL,
    DT_REGION_KIND_COUNT
} dt_region_kind;

/* Scratch of a region op, in units of the tensor: none, the local share (full / size), or the
 * whole tensor. */
typedef enum dt_region_work {
    DT_REGION_WORK_NONE,
    DT_REGION_WORK_SHARD,
    DT_REGION_WORK_FULL,
    DT_REGION_WORK_COUNT
} dt_region_work;

typedef struct dt_region_op {
    const char *name; /* "copy", "seq_split", ... */
    dt_region_fn forward, backward;
    dt_region_layout in, out; /* layout of x (and dx), of y (and dy) */
    /* The direction runs a dt_comm collective that moves data; false: local copy/add only
     * (still called on every rank, and still checks the shape). */
    bool forward_comm, backward_comm;
    /* dt_region_backward_begin runs the collective in place in dy (copy's all-reduce): dy is
     * overwritten with the all-reduced dy. false: begin/end never write dy. */
    bool backward_in_place;
    /* Scratch the op needs: for the blocking forward and backward (work), and for
     * dt_region_backward_begin (backward_work; never more than work). */
    dt_region_work work, backward_work;
} dt_region_op;

/* The op table entry for `k` (static, never freed); NULL for an out-of-range k. */
const dt_region_op *dt_region_op_get(dt_region_kind k);
/* The pair a tensor-parallel block runs between: rows_split (Megatron-SP: the residual rows
 * split over the tp ranks) enters by all-gathering rows and leaves by reduce-scattering them;
 * otherwise it enters by copy and leaves by all-reduce. Every model picks its regions here. */
dt_region_kind dt_region_enter_kind(bool rows_split);
dt_region_kind dt_region_leave_kind(bool rows_split);
/* Local element count of a tensor in `layout` on a comm of `size` ranks (assumes the shape
 * divides; the ops check). */
int64_t dt_region_count(dt_region_layout layout, const dt_region_shape *s, int size);
/* Scratch floats op `k` needs for its forward and its blocking backward (the larger of the
 * two); 0 means work may be NULL. */
int64_t dt_region_work_count(dt_region_kind k, const dt_region_shape *s, int size);
/* Scratch floats dt_region_backward_begin needs for op `k` (at most dt_region_work_count; 0 for
 * copy, which reduces in place in dy, and for the ops whose backward moves no data). */
int64_t dt_region_backward_work_count(dt_region_kind k, const dt_region_shape *s, int size);

/* ---- Split backward: post the adjoint's collective, do other work, then complete it.
 *
 *   dt_region_pending p = {0};
 *   DT_TRY(dt_region_backward_begin(k, c, &s, dy, dx, work, &p));
 *   dt_status st = compute_dW(...);               // anything not touching dy, dx, work
 *   dt_status st_end = dt_region_backward_end(c, &p);   // always, even if st != DT_OK
 *
 * Result: exactly (bitwise) what the blocking op->backward(c, &s, dy, dx, work) gives.
 * Between begin and end the pending op owns three buffers; the caller must not read or write
 * them, nor free them, until end returns:
 *   dy   (op->out layout): the collective's input. backward_in_place ops (copy) all-reduce in
 *        it, so after end dy holds allreduce(dy); every other op leaves dy unchanged.
 *   work (dt_region_backward_work_count floats, NULL where 0): the collective's output;
 *        contents undefined after end.
 *   dx   (op->in layout): written only by end, which ACCUMULATES (dx += A^T dy).
 * dy, dx and work must not overlap. Ops whose backward moves no data post nothing; end does
 * their add. Several ops may be pending at once (each with its own p and buffers); as for
 * every collective, every rank must begin them in the same order. Ends may come in any order. */
typedef struct dt_region_pending {
    dt_comm_req req; /* the posted collective; inactive for ops that move no data */
    dt_region_kind kind;
    dt_region_shape shape;
    const float *src; /* borrowed: where end reads the collective's result (dy or work) */
    float *dx;        /* borrowed */
    bool active;      /* begun and not yet ended */
} dt_region_pending;

/* Validates the shape, then posts the adjoint of op `k` (see above). `p` must be zeroed or
 * already ended (end leaves it zeroed); a p still pending is refused (DT_ERR_ARG) and left
 * pending. On error nothing is posted and p is left inactive, so a later end is a no-op.
 * Errors as dt_region_fn (work checked against dt_region_backward_work_count), plus DT_ERR_ARG
 * for an out-of-range k. Collective over c when op->backward_comm. */
dt_status dt_region_backward_begin(dt_region_kind k, dt_comm *c, const dt_region_shape *s,
                                   float *dy, float *dx, float *work, dt_region_pending *p);
/* Progresses the pending collective without blocking (call it between chunks of the overlapped
 * work: MPI may only move non-blocking collectives forward inside MPI calls). *done: the
 * collective has completed; end is still required (it does the accumulation). */
dt_status dt_region_backward_test(dt_comm *c, dt_region_pending *p, bool *done);
/* Waits for the collective and accumulates into dx. Always completes the request, even after
 * an error (then dx is left untouched and the collective's error is returned); leaves p zeroed.
 * A no-op (DT_OK) on a zeroed p. `c` is the comm begin was given. */
dt_status dt_region_backward_end(dt_comm *c, dt_region_pending *p);

/* The ops. Layout in → out as in the table; all collectives over `c`.
 * copy (enter a column-parallel region): x REPLICATED → y PER_RANK.
 *   forward y = x; backward dx += allreduce(dy). work: rows*cols (split backward: none,
 *   the all-reduce runs in place in dy). */
dt_status dt_region_copy_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                 float *work);
dt_status dt_region_copy_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                  float *dx, float *work);
/* reduce (leave a row-parallel region): x PER_RANK → y REPLICATED.
 *   forward y = allreduce(x); backward dx += dy. work: none. */
dt_status dt_region_reduce_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work);
dt_status dt_region_reduce_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work);
/* scatter (split the last dim): x REPLICATED → y COLS.
 *   forward y = own column slice of x; backward dx += allgather of dy along cols.
 *   work: rows*cols. cols % p == 0. */
dt_status dt_region_scatter_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                    float *y, float *work);
dt_status dt_region_scatter_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                     float *dx, float *work);
/* gather (last dim): x COLS → y REPLICATED.
 *   forward y = allgather of x along cols; backward dx += own column slice of dy.
 *   work: rows*cols. cols % p == 0. */
dt_status dt_region_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x, float *y,
                                   float *work);
dt_status dt_region_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                    float *dx, float *work);
/* seq_gather (Megatron-SP, before a column-parallel block): x ROWS → y PER_RANK.
 *   forward y = allgather of rows; backward dx += reduce_scatter of dy rows.
 *   work: rows*cols/p. rows % p == 0. */
dt_status dt_region_seq_gather_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work);
dt_status dt_region_seq_gather_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work);
/* seq_reduce_scatter (Megatron-SP, after a row-parallel block): x PER_RANK → y ROWS.
 *   forward y = reduce_scatter of rows; backward dx += allgather of dy rows.
 *   work: rows*cols. rows % p == 0. */
dt_status dt_region_seq_reduce_scatter_forward(dt_comm *c, const dt_region_shape *s,
                                               const float *x, float *y, float *work);
dt_status dt_region_seq_reduce_scatter_backward(dt_comm *c, const dt_region_shape *s,
                                                const float *dy, float *dx, float *work);
/* seq_split (Open-Sora split_forward_gather_backward, before the blocks): x REPLICATED → y ROWS.
 *   forward y = own rows of x; backward dx += allgather of dy rows. work: rows*cols.
 *   rows % p == 0. */
dt_status dt_region_seq_split_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                      float *y, float *work);
dt_status dt_region_seq_split_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                       float *dx, float *work);
/* seq_gather_split (Open-Sora gather_forward_split_backward, before the final norm/head):
 * x ROWS → y REPLICATED. forward y = allgather of rows; backward dx += own rows of dy.
 * work: none. rows % p == 0. */
dt_status dt_region_seq_gather_split_forward(dt_comm *c, const dt_region_shape *s,
                                             const float *x, float *y, float *work);
dt_status dt_region_seq_gather_split_backward(dt_comm *c, const dt_region_shape *s,
                                              const float *dy, float *dx, float *work);
/* all_to_all (Ulysses, around attention): x ROWS = [T/p, H, hs] row-major (rank r's rows
 * [r*T/p, (r+1)*T/p)) → y HEADS = [T, H/p, hs] row-major (all T rows, rank r's heads
 * [r*H/p, (r+1)*H/p)). Backward is the inverse all-to-all, accumulated into dx [T/p, H, hs].
 * work: T*H*hs/p (the local size, same on both sides). T % p == 0, H % p == 0,
 * cols % heads == 0. */
dt_status dt_region_all_to_all_forward(dt_comm *c, const dt_region_shape *s, const float *x,
                                       float *y, float *work);
dt_status dt_region_all_to_all_backward(dt_comm *c, const dt_region_shape *s, const float *dy,
                                        float *dx, float *work);

#endif
