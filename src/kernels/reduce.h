/* Column sums (bias gradients) and row gathers/scatters (embeddings). Stateless, OpenMP over
 * columns so results are independent of the thread count. Scatter ACCUMULATES. */
#ifndef DT_KERNELS_REDUCE_H
#define DT_KERNELS_REDUCE_H

#include <stdint.h>

/* out[j] += sum_i x[i*C + j], x: [N, C] */
void dt_colsum_accumulate(float *out, const float *x, int N, int C);
/* y[i] = table[idx[i]] (+ pos[i % T] when pos != NULL); table: [V, C], y: [N, C] */
void dt_rows_gather(float *y, const float *table, const int32_t *idx, const float *pos, int N,
                    int T, int C);
/* dtable[idx[i]] += dy[i]; dpos[i % T] += dy[i] when dpos != NULL. In index order per column,
 * so repeated tokens sum deterministically. */
void dt_rows_scatter_add(float *dtable, float *dpos, const float *dy, const int32_t *idx, int N,
                         int T, int C);

#endif
