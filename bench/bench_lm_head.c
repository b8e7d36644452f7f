/* Times dt_lm_head_loss (forward + backward) at the GPT-2 124M head shape (N=1024 rows,
 * C=768, V=50257, fp32, whole vocabulary on a size-1 tp comm).
 * Usage: bench_lm_head [reps] (default 7); prints each repeat's wall and process-CPU time and
 * their medians (CPU time is steadier on a shared machine: preemption does not count).
 * Threads follow OMP_NUM_THREADS. Single-process, no MPI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "nn/lm_head.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    const int N = 1024, C = 768, V = 50257;
    if (reps < 1 || reps > 100)
        reps = 7;
    dt_gemm *gemm;
    if (dt_gemm_init(&gemm) != DT_OK)
        return 1;
    dt_nn_ctx ctx = {.gemm = gemm, .mm_type = DT_F32};
    int chunk = dt_lm_head_chunk_rows(V, N, DT_LM_HEAD_LOGITS_FLOATS);
    float *w = malloc(sizeof(float) * V * C), *dw = calloc((size_t)V * C, sizeof(float));
    float *x = malloc(sizeof(float) * N * C), *dx = calloc((size_t)N * C, sizeof(float));
    float *logits = malloc(sizeof(float) * chunk * V), *losses = malloc(sizeof(float) * N);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    unsigned s = 1;
    for (int64_t i = 0; i < (int64_t)V * C; i++)
        w[i] = ((s = s * 1103515245u + 12345u) >> 8) * (0.04f / (1 << 24)) - 0.02f;
    for (int64_t i = 0; i < (int64_t)N * C; i++)
        x[i] = ((s = s * 1103515245u + 12345u) >> 8) * (2.0f / (1 << 24)) - 1.0f;
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)((i * 7919u) % V);
    dt_comm *tp;
    if (dt_comm_local_init("tp", &tp) != DT_OK)
        return 1;
    dt_lm_head h = {.C = C, .V = V, .w = w, .dw = dw, .tp = tp, .vocab_size = V,
                    .chunk = chunk, .logits = logits};
    h.stats = malloc(sizeof(float) * (size_t)dt_lm_head_stats_count(&h));
    double t[100], cpu[100];
    dt_lm_head_loss(&ctx, &h, x, NULL, tg, N, 1.0f / N, true, losses, dx); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = dt_now(), c0 = cpu_now();
        dt_status st = dt_lm_head_loss(&ctx, &h, x, NULL, tg, N, 1.0f / N, true, losses, dx);
        t[r] = dt_now() - t0;
        cpu[r] = cpu_now() - c0;
        if (st != DT_OK) {
            fprintf(stderr, "bench_lm_head: %s\n", dt_err_msg());
            return 1;
        }
        printf("rep %d: %.1f ms wall, %.1f ms cpu\n", r, t[r] * 1e3, cpu[r] * 1e3);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp_d);
    printf("lm_head_loss+backward N=%d C=%d V=%d chunk=%d reps=%d: median %.1f ms wall "
           "(min %.1f), median %.1f ms cpu (min %.1f); loss[0] %.6f\n", N, C, V, chunk, reps,
           t[reps / 2] * 1e3, t[0] * 1e3, cpu[reps / 2] * 1e3, cpu[0] * 1e3, losses[0]);
    free(w), free(dw), free(x), free(dx), free(logits), free(losses), free(tg), free(h.stats);
    dt_comm_free(tp);
    dt_gemm_free(gemm);
    return 0;
}
