/* Column sums and embedding gather/scatter. Columns are split across threads in blocks, so
 * each output element is summed by one thread in row order: deterministic for any thread
 * count, and no per-thread partial buffers are needed. */
#include "kernels/reduce.h"

#include <stdbool.h>
#include <string.h>

#define COL_BLOCK 64

static void colsum(float *out, const float *x, int N, int C, bool accumulate) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int j0 = blk * COL_BLOCK, j1 = j0 + COL_BLOCK < C ? j0 + COL_BLOCK : C;
        float acc[COL_BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *row = x + (int64_t)i * C;
            for (int j = j0; j < j1; j++)
                acc[j - j0] += row[j];
        }
        for (int j = j0; j < j1; j++)
            out[j] = accumulate ? out[j] + acc[j - j0] : acc[j - j0];
    }
}

void dt_colsum_accumulate(float *out, const float *x, int N, int C) { colsum(out, x, N, C, true); }

void dt_colsum_set(float *out, const float *x, int N, int C) { colsum(out, x, N, C, false); }

void dt_rows_gather(float *y, const float *table, const int32_t *idx, int64_t first,
                    int64_t count, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *dst = y + (int64_t)i * C;
        int64_t r = (int64_t)idx[i] - first;
        if (r >= 0 && r < count)
            memcpy(dst, table + r * C, (size_t)C * sizeof *dst);
        else
            memset(dst, 0, (size_t)C * sizeof *dst);
    }
}

void dt_rows_scatter_add(float *dtable, const float *dy, const int32_t *idx, int64_t first,
                         int64_t count, int N, int C) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int j0 = blk * COL_BLOCK, j1 = j0 + COL_BLOCK < C ? j0 + COL_BLOCK : C;
        for (int i = 0; i < N; i++) {
            int64_t r = (int64_t)idx[i] - first;
            if (r < 0 || r >= count)
                continue;
            const float *g = dy + (int64_t)i * C;
            float *dt = dtable + r * C;
            for (int j = j0; j < j1; j++)
                dt[j] += g[j];
        }
    }
}

void dt_rows_add_positions(float *y, const float *pos, int64_t row0, int T, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *dst = y + (int64_t)i * C;
        const float *p = pos + ((row0 + i) % T) * C;
        for (int j = 0; j < C; j++)
            dst[j] += p[j];
    }
}

void dt_rows_positions_grad(float *dpos, const float *dy, int64_t row0, int T, int N, int C) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
        int j0 = blk * COL_BLOCK, j1 = j0 + COL_BLOCK < C ? j0 + COL_BLOCK : C;
        for (int i = 0; i < N; i++) {
            const float *g = dy + (int64_t)i * C;
            float *dp = dpos + ((row0 + i) % T) * C;
            for (int j = j0; j < j1; j++)
                dp[j] += g[j];
        }
    }
}
