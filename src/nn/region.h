/* Region operators: the communication at the edges of a tensor- or sequence-parallel region,
 * each a forward map and its adjoint (Megatron core/tensor_parallel/mappings.py, plus the
 * sequence versions of Megatron-SP, Open-Sora and Ulysses). A parallel layer is region op →
 * unchanged local layer → region op; degree 1 runs the same calls on a size-1 dt_comm.
 * Talks to other ranks only through dt_comm (no mpi.h). Every call is collective over `c`
 * (even ops whose forward or backward moves no data check shapes identically on every rank).
 * No allocation: the caller passes a scratch buffer. A dt_comm is used by one thread at a time.
 */
#ifndef DT_NN_REGION_H
#define DT_NN_REGION_H

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
 * DT_ERR_MPI from the collective. Blocking (no overlap of the dx collective with dW yet). */
typedef dt_status (*dt_region_fn)(dt_comm *c, const dt_region_shape *s, const float *in,
                                  float *out, float *work);

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

typedef struct dt_region_op {
    const char *name; /* "copy", "seq_split", ... */
    dt_region_fn forward, backward;
    dt_region_layout in, out; /* layout of x (and dx), of y (and dy) */
} dt_region_op;

/* The op table entry for `k` (static, never freed); NULL for an out-of-range k. */
const dt_region_op *dt_region_op_get(dt_region_kind k);
/* Local element count of a tensor in `layout` on a comm of `size` ranks (assumes the shape
 * divides; the ops check). */
int64_t dt_region_count(dt_region_layout layout, const dt_region_shape *s, int size);
/* Scratch floats op `k` needs (the larger of its two directions); 0 means work may be NULL. */
int64_t dt_region_work_count(dt_region_kind k, const dt_region_shape *s, int size);

/* The ops. Layout in → out as in the table; all collectives over `c`.
 * copy (enter a column-parallel region): x REPLICATED → y PER_RANK.
 *   forward y = x; backward dx += allreduce(dy). work: rows*cols. */
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
