/* Peak matmul throughput of dt_gemm_run (oneDNN) over GPT-2-style shapes, fp32 and bf16.
 *
 * Prints one line that other benchmarks use as the MFU denominator:
 *   peak_fp32_gflops=X peak_bf16_gflops=Y impl_fp32=... impl_bf16=...
 * Usage: bench_gemm [reps] (default 5; best of reps per shape, best shape reported).
 * Threads follow OMP_NUM_THREADS. Single-process, no MPI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/gemm.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Forward (x W^T as nn.Linear: B transposed) and the two backward products of each layer. */
typedef struct bench_shape {
    int N, K;
    bool trans_a, trans_b;
} bench_shape;

static const bench_shape shapes[] = {
    {2304, 768, false, true},  /* qkv forward */
    {768, 768, false, true},   /* attention projection */
    {3072, 768, false, true},  /* MLP up */
    {768, 3072, false, true},  /* MLP down */
    {768, 3072, false, false}, /* MLP up, dx = dy W */
    {3072, 768, true, false},  /* MLP up, dW = dy^T x (M = K dim here) */
};

static double run_shape(dt_gemm *g, const bench_shape *b, dt_dtype dt, int M, int reps,
                        const void *A, const void *B, float *C) {
    dt_gemm_shape s = {.M = M, .N = b->N, .K = b->K, .trans_a = b->trans_a,
                       .trans_b = b->trans_b, .dtype = dt};
    if (b->trans_a) /* weight gradient: [N, K] = dy^T x, contraction over the M tokens */
        s.M = b->N, s.N = b->K, s.K = M;
    dt_status st = dt_gemm_run(g, &s, A, B, NULL, C); /* creates and warms the primitive */
    if (st != DT_OK) {
        fprintf(stderr, "bench_gemm: %s\n", dt_err_msg());
        return -1;
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        dt_gemm_run(g, &s, A, B, NULL, C);
        t = now() - t;
        best = t < best ? t : best;
    }
    return 2.0 * s.M * s.N * s.K / best / 1e9;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5, M = 1024;
    if (reps < 1)
        reps = 1;
    dt_gemm *g;
    if (dt_gemm_init(&g) != DT_OK) {
        fprintf(stderr, "bench_gemm: %s\n", dt_err_msg());
        return 1;
    }
    size_t big = (size_t)M * 3072;
    float *A = malloc(big * 4), *B = malloc((size_t)3072 * 3072 * 4), *C = malloc(big * 4 * 3);
    if (!A || !B || !C) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < big; i++)
        A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f; /* bf16 bit patterns read below */
    for (size_t i = 0; i < (size_t)3072 * 3072; i++)
        B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    double peak[DT_DTYPE_COUNT] = {0};
    for (int d = 0; d < DT_DTYPE_COUNT; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            /* bf16 reuses the fp32 buffers: any finite bit pattern times the same work */
            double gf = run_shape(g, &shapes[i], (dt_dtype)d, M, reps, A, B, C);
            if (gf < 0)
                return 1;
            fprintf(stderr, "%s M=%d N=%d K=%d ta=%d tb=%d: %.1f GFLOP/s\n",
                    dt_dtype_name((dt_dtype)d), M, shapes[i].N, shapes[i].K, shapes[i].trans_a,
                    shapes[i].trans_b, gf);
            peak[d] = gf > peak[d] ? gf : peak[d];
        }
    printf("peak_fp32_gflops=%.1f peak_bf16_gflops=%.1f impl_fp32=%s impl_bf16=%s\n",
           peak[DT_F32], peak[DT_BF16], dt_gemm_impl_name(g, DT_F32),
           dt_gemm_impl_name(g, DT_BF16));
    free(A), free(B), free(C);
    dt_gemm_free(g);
    return 0;
}
