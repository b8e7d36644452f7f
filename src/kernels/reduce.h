/* Column sums (bias gradients) and row gathers/scatters (embeddings). Stateless, OpenMP over
 * columns so results are independent of the thread count. Scatter ACCUMULATES. */
#ifndef DT_KERNELS_REDUCE_H
#define DT_KERNELS_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

/* out[j] += sum_i x[i*C + j], x: [N, C]; _set: out[j] = the same sum (the same bits as
 * accumulating onto zeros) */
void dt_colsum_accumulate(float *out, const float *x, int N, int C);
void dt_colsum_set(float *out, const float *x, int N, int C);
/* Both: out[j] (+)= the column sum (the bits of dt_colsum_accumulate / _set: accumulate
 * true / false), and lp: [N, C] (or NULL) = x rounded to bf16 (the bits of
 * dt_cast_f32_to_bf16). The bf16 backward's dy: bias gradient and matmul operand. One pass
 * over x on one thread; on several, the cast's row blocks, then the column sum (faster). */
void dt_colsum_cast_bf16(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N,
                         int C);
void dt_colsum_cast_bf16_ref(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N,
                             int C);
/* One single-threaded implementation of dt_colsum_cast_bf16 (tests compare each to _ref). */
typedef struct dt_colsum_variant {
    const char *name; /* "avx512f", "avx2", "ref" */
    void (*run)(float *out, bool accumulate, dt_bf16 *lp, const float *x, int N, int C);
} dt_colsum_variant;
enum { DT_COLSUM_MAX_VARIANTS = 3 };
/* The variants this CPU can run into out[], fastest first, "ref" last; returns how many. */
int dt_colsum_variants(dt_colsum_variant out[DT_COLSUM_MAX_VARIANTS]);
/* Embedding rows of a vocabulary shard holding ids [first, first + count) (the whole
 * vocabulary: first 0, count V): y[i] = table[idx[i] - first] for an id in the shard, else 0.
 * table: [count, C], y: [N, C]. */
void dt_rows_gather(float *y, const float *table, const int32_t *idx, int64_t first,
                    int64_t count, int N, int C);
/* The adjoint: dtable[idx[i] - first] += dy[i] for ids in the shard. In index order per
 * column, so repeated tokens sum deterministically. */
void dt_rows_scatter_add(float *dtable, const float *dy, const int32_t *idx, int64_t first,
                         int64_t count, int N, int C);
/* Position embeddings for rows [row0, row0 + N) of a flattened [B, T] batch: y[i] +=
 * pos[p(t)], t = (row0 + i) % T, where the T tokens are n_chunks chunks of T / n_chunks and
 * local chunk k is chunk chunk[k] of the whole sequence (a context-parallel rank's tokens;
 * n_chunks 1, chunk {0}: p(t) = t). The adjoint, in local positions: dpos[t] += dy[i]. */
void dt_rows_add_positions(float *y, const float *pos, int64_t row0, int T, int N, int C,
                           int n_chunks, const int *chunk);
void dt_rows_positions_grad(float *dpos, const float *dy, int64_t row0, int T, int N, int C);
/* y[i] += table[idx[i]] for i < N (position embeddings of positions that restart at each
 * document); the adjoint is dt_rows_scatter_add over the whole table. */
void dt_rows_add_indexed(float *y, const float *table, const int32_t *idx, int N, int C);

#endif
