/* Ring attention on its own (nn/ring_attn), under mpirun: per rank, the forward's and the
 * backward's wall time, the part of it spent in the ring's communication (dt_comm's own
 * count: posting, testing and waiting; the rest is this rank's attention and merges), and the
 * time the same blocks take to go around the ring with no attention at all. The exposed
 * share is the ring's communication time over the pass (it includes waiting for a slower
 * neighbour); the balance is each rank's compute against the ranks' mean. GPT-2 124M's attention
 * (12 heads of 64), one sequence of cp x T_LOCAL tokens, causal, fp32.
 *
 *   mpirun -np CP bench_ring [T_LOCAL (8192)] [zigzag|contiguous (zigzag)]
 *
 * One line a rank, then rank 0's summary. Threads follow OMP_NUM_THREADS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "dist/dist.h"
#include "nn/ring_attn.h"

static double comm_s(const dt_comm *c) {
    double s = c->stats.wait_seconds;
    for (int op = 0; op < DT_COMM_OP_COUNT; op++)
        s += c->stats.seconds[op];
    return s;
}

static void fill(float *x, int64_t n, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
}

/* The blocks alone: cp - 1 steps of send on / receive from, as the forward moves them. */
static double blocks_alone(dt_comm *c, float *a, float *b, int64_t n) {
    int P = c->size, me = c->rank;
    double t0 = dt_now();
    for (int step = 0; step + 1 < P; step++) {
        dt_comm_req req[2] = {0};
        float *cur = step % 2 ? b : a, *next = step % 2 ? a : b;
        if (dt_comm_recv(c, next, n * 4, (me + P - 1) % P, 71, &req[0]) != DT_OK ||
            dt_comm_send(c, cur, n * 4, (me + 1) % P, 71, &req[1]) != DT_OK ||
            dt_comm_wait(c, &req[0]) != DT_OK || dt_comm_wait(c, &req[1]) != DT_OK)
            return NAN;
    }
    return dt_now() - t0;
}

int main(int argc, char **argv) {
    dt_comm *w = NULL;
    if (dt_dist_init(&argc, &argv, &w) != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    int Tl = argc > 1 ? atoi(argv[1]) : 8192;
    bool zigzag = !(argc > 2 && strcmp(argv[2], "contiguous") == 0);
    const int NH = 12, hs = 64;
    int64_t W = 3 * NH * hs, A = NH * hs, n = (int64_t)Tl * W;
    dt_attn_shape s = {.B = 1,
                       .T = Tl,
                       .NH = NH,
                       .NKV = NH,
                       .hs = hs,
                       .q_stride = W,
                       .kv_stride = W,
                       .scale = 1.0f / sqrtf((float)hs),
                       .causal = true};
    dt_ring ring = {.cp = w, .zigzag = zigzag};
    float *qkv = malloc((size_t)n * 4), *dqkv = malloc((size_t)n * 4);
    float *y = malloc((size_t)Tl * A * 4), *dy = malloc((size_t)Tl * A * 4);
    float *lse = malloc((size_t)Tl * NH * 4);
    int64_t nw = dt_ring_work_count(&ring, &s);
    float *work = malloc((size_t)(nw > 0 ? nw : 1) * 4);
    if (!qkv || !dqkv || !y || !dy || !lse || !work) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    fill(qkv, n, 1 + (unsigned)w->rank);
    fill(dy, (int64_t)Tl * A, 7 + (unsigned)w->rank);
    dt_comm_barrier(w);
    double c0 = comm_s(w), t0 = dt_now();
    dt_status st = dt_ring_attention_forward(&ring, &s, y, lse, qkv, qkv + A, qkv + 2 * A, work);
    double tf = dt_now() - t0, cf = comm_s(w) - c0;
    dt_comm_barrier(w);
    c0 = comm_s(w), t0 = dt_now();
    if (st == DT_OK)
        st = dt_ring_attention_backward_set(&ring, &s, dqkv, dqkv + A, dqkv + 2 * A, dy, y, lse,
                                            qkv, qkv + A, qkv + 2 * A, work);
    double tb = dt_now() - t0, cb = comm_s(w) - c0;
    if (st != DT_OK) {
        fprintf(stderr, "ring: %s\n", dt_err_msg());
        return 1;
    }
    dt_comm_barrier(w);
    int64_t block = (int64_t)Tl * 2 * NH * hs;
    double alone = blocks_alone(w, work, work + block, block);
    double mine[5] = {tf - cf, cf, tb - cb, cb, alone}, sum[5];
    memcpy(sum, mine, sizeof sum);
    dt_comm_allreduce_f64(w, sum, 5);
    double max_f = mine[0], min_f = mine[0];
    printf("rank %d: forward %.3f s (compute %.3f, ring comm %.3f), backward %.3f s (compute "
           "%.3f, ring comm %.3f), blocks alone %.3f s\n",
           w->rank, tf, mine[0], cf, tb, mine[2], cb, alone);
    fflush(stdout);
    /* the spread of compute over ranks: every rank's forward and backward compute at rank 0 */
    double all[2 * 64] = {0};
    if (w->size <= 64) {
        all[2 * w->rank] = mine[0];
        all[2 * w->rank + 1] = mine[2];
        dt_comm_allreduce_f64(w, all, 2 * w->size);
    }
    if (w->rank == 0 && w->size <= 64) {
        double mean_f = sum[0] / w->size, mean_b = sum[2] / w->size, worst = 0;
        for (int r = 0; r < w->size; r++) {
            double df = fabs(all[2 * r] / mean_f - 1), db = fabs(all[2 * r + 1] / mean_b - 1);
            worst = fmax(worst, fmax(df, db));
            max_f = fmax(max_f, all[2 * r]);
            min_f = fmin(min_f, all[2 * r]);
        }
        printf("cp %d, %s, %d tokens a rank (sequence %d): compute per rank within %.1f%% of "
               "the mean (forward %.3f-%.3f s); ring comm exposed (mean) forward %.3f s = %.1f%%, "
               "backward %.3f s = %.1f%% of the pass; the forward's blocks alone take %.3f s\n",
               w->size, zigzag ? "zigzag" : "contiguous", Tl, Tl * w->size, 100 * worst, min_f,
               max_f, sum[1] / w->size, 100 * sum[1] / (sum[0] + sum[1]), sum[3] / w->size,
               100 * sum[3] / (sum[2] + sum[3]), sum[4] / w->size);
    }
    free(work), free(lse), free(dy), free(y), free(dqkv), free(qkv);
    dt_dist_finalize(w);
    return 0;
}
