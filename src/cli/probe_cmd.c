/* dtrain probe. See probe_cmd.h.
 *
 * Each figure is rank 0's median of R timed runs after one untimed, each run between
 * barriers. A kind's rate inverts the planner's model of it (plan/cost.h):
 * rate = model bytes / (seconds - latency), the latency being an 8-byte all-reduce's time.
 * The exposed share: an all-reduce posted before a matmul loop as long as it, tested between
 * eight pieces of the loop (the engine tests its reductions between units), against the loop
 * alone: (both - loop) / all-reduce, within [0, 2] (above 1: the two side by side take longer
 * than one after the other, as on cores that the collective's copies and the matmuls share).
 */
#include "cli/probe_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/help.h"
#include "core/clock.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "dtrain/dist.h"
#include "kernels/gemm.h"
#include "plan/cost.h"

enum { MAX_REPS = 64, PIECES = 8, TAG = 91 };

typedef struct probe {
    dt_comm *c;
    int p, reps;
    int64_t n; /* floats of the vector each collective moves */
    float *a, *b;
    int *counts;
    dt_gemm *gemm;
    float *ma, *mb, *mc; /* the matmul the overlap runs beside the all-reduce */
    int dim, loops;      /* its size, and the products in its loop */
} probe;

typedef enum {
    OP_LATENCY,
    OP_ALLREDUCE,
    OP_REDUCE_SCATTER,
    OP_ALLGATHER,
    OP_ALLTOALL,
    OP_P2P,
    OP_MATMUL,
    OP_MATMUL_ALONE,
    OP_OVERLAP
} op_kind;

static dt_status matmul_piece(probe *x) {
    dt_gemm_shape s = {.M = x->dim, .N = x->dim, .K = x->dim, .dtype = DT_F32};
    return dt_gemm_run(x->gemm, &s, x->ma, x->mb, NULL, x->mc);
}

/* the matmul loop; with req, the all-reduce it hides is tested between pieces */
static dt_status matmul_loop(probe *x, dt_comm_req *req) {
    for (int i = 0; i < x->loops; i++) {
        DT_TRY(matmul_piece(x));
        bool done;
        if (req && (i + 1) % (x->loops / PIECES > 0 ? x->loops / PIECES : 1) == 0)
            DT_TRY(dt_comm_test(x->c, req, &done));
    }
    return DT_OK;
}

/* one run of an operation */
static dt_status run_op(probe *x, op_kind k) {
    dt_comm_req req = {0};
    switch (k) {
    case OP_LATENCY:
        return dt_comm_allreduce_f32(x->c, x->a, 2, NULL);
    case OP_ALLREDUCE:
        return dt_comm_allreduce_f32(x->c, x->a, x->n, NULL);
    case OP_REDUCE_SCATTER:
        return dt_comm_reduce_scatter_f32(x->c, x->a, x->b, x->counts, NULL);
    case OP_ALLGATHER:
        return dt_comm_allgather_f32(x->c, x->a, x->b, x->counts, NULL);
    case OP_ALLTOALL:
        return dt_comm_alltoall_f32(x->c, x->a, x->b, x->n / x->p, NULL);
    case OP_P2P: /* a round trip between ranks 0 and 1 */
        if (x->c->rank == 0) {
            DT_TRY(dt_comm_send(x->c, x->a, x->n * 4, 1, TAG, NULL));
            return dt_comm_recv(x->c, x->b, x->n * 4, 1, TAG, NULL);
        }
        if (x->c->rank == 1) {
            DT_TRY(dt_comm_recv(x->c, x->b, x->n * 4, 0, TAG, NULL));
            return dt_comm_send(x->c, x->a, x->n * 4, 0, TAG, NULL);
        }
        return DT_OK;
    case OP_MATMUL:
        return matmul_loop(x, NULL);
    case OP_MATMUL_ALONE: /* rank 0 computes, the others wait at the next barrier */
        return x->c->rank == 0 ? matmul_loop(x, NULL) : DT_OK;
    case OP_OVERLAP:
        DT_TRY(dt_comm_allreduce_f32(x->c, x->a, x->n, &req));
        DT_TRY(matmul_loop(x, &req));
        return dt_comm_wait(x->c, &req);
    }
    return DT_OK;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* seconds of one run on this rank: the median over the runs (rank 0's figures are printed) */
static dt_status time_op(probe *x, op_kind k, double *out) {
    double t[MAX_REPS];
    for (int r = -1; r < x->reps; r++) {
        DT_TRY(dt_comm_barrier(x->c));
        double t0 = dt_now();
        DT_TRY(run_op(x, k));
        if (r >= 0)
            t[r] = dt_now() - t0;
    }
    qsort(t, (size_t)x->reps, sizeof *t, by_value);
    *out = t[x->reps / 2];
    return DT_OK;
}

/* bytes / (seconds - latency), the latency floored at a tenth of the time */
static double rate(double bytes, double seconds, double latency) {
    double s = seconds - latency;
    return bytes / (s > 0.1 * seconds ? s : 0.1 * seconds);
}

static dt_status measure(probe *x) {
    double t_lat, t[DT_PLAN_COLL_COUNT], t_mm, t_both;
    DT_TRY(time_op(x, OP_LATENCY, &t_lat));
    const op_kind ops[DT_PLAN_COLL_COUNT] = {OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER,
                                             OP_ALLTOALL, OP_P2P};
    for (int k = 0; k < DT_PLAN_COLL_COUNT; k++)
        DT_TRY(time_op(x, ops[k], &t[k]));
    /* the matmul loop about as long as the all-reduce */
    DT_TRY(matmul_piece(x)); /* the first product sets the library up */
    double one = dt_now();
    DT_TRY(matmul_piece(x));
    one = dt_now() - one;
    x->loops = (int)(t[DT_PLAN_ALLREDUCE] / (one > 1e-6 ? one : 1e-6)) + 1;
    x->loops = x->loops < PIECES ? PIECES : x->loops;
    double t_alone;
    DT_TRY(time_op(x, OP_MATMUL, &t_mm));
    DT_TRY(time_op(x, OP_MATMUL_ALONE, &t_alone));
    DT_TRY(time_op(x, OP_OVERLAP, &t_both));
    if (x->c->rank != 0)
        return DT_OK;
    double whole = (double)x->n * 4, p = x->p, share = (t_both - t_mm) / t[DT_PLAN_ALLREDUCE];
    double bytes[DT_PLAN_COLL_COUNT] = {2 * whole * (p - 1) / p, whole * (p - 1) / p,
                                        whole * (p - 1) / p, whole * (p - 1) / p,
                                        whole /* the round trip's two messages, halved */};
    double r[DT_PLAN_COLL_COUNT];
    for (int k = 0; k < DT_PLAN_COLL_COUNT; k++)
        r[k] = rate(bytes[k], k == DT_PLAN_P2P ? t[k] / 2 : t[k], t_lat);
    share = share < 0 ? 0 : share > 2 ? 2 : share;
    /* the times on stderr: stdout is the flags alone, for $(...) */
    fprintf(stderr,
            "dtrain probe: %d ranks, %.1f MiB: latency %.1f us; all-reduce %.2f ms, "
            "reduce-scatter %.2f ms, all-gather %.2f ms, all-to-all %.2f ms, message round trip "
            "%.2f ms; all-reduce beside %.2f ms of matmuls: %.2f ms, exposed share %.2f; the "
            "matmuls on rank 0 alone %.2f ms\n",
            x->p, whole / 1048576.0, 1e6 * t_lat, 1e3 * t[0], 1e3 * t[1], 1e3 * t[2], 1e3 * t[3],
            1e3 * t[4], 1e3 * t_mm, 1e3 * t_both, share, 1e3 * t_alone);
    printf("--latency %.4g --bandwidth %.4g --coll-bw %.4g,%.4g,%.4g,%.4g,%.4g --exposed-share "
           "%.3f\n",
           t_lat, r[DT_PLAN_ALLREDUCE], r[0], r[1], r[2], r[3], r[4], share);
    return DT_OK;
}

static dt_status probe_run(dt_comm *world, double mib, int reps) {
    if (world->size < 2)
        return dt_err_set(DT_ERR_ARG, "probe: 1 rank; it measures collectives between ranks: "
                                      "run it under the launcher with the ranks a run uses "
                                      "(mpirun -np 2 dtrain probe)");
    probe x = {.c = world, .p = world->size, .reps = reps, .dim = 256};
    int64_t per = (int64_t)(mib * 1048576.0 / 4) / x.p;
    x.n = (per > 0 ? per : 1) * x.p;
    x.a = calloc((size_t)x.n, sizeof *x.a);
    x.b = calloc((size_t)x.n, sizeof *x.b);
    x.counts = malloc((size_t)x.p * sizeof *x.counts);
    size_t mm = (size_t)x.dim * x.dim;
    x.ma = calloc(mm, sizeof *x.ma), x.mb = calloc(mm, sizeof *x.mb), x.mc = calloc(mm, 4);
    dt_status st = x.a && x.b && x.counts && x.ma && x.mb && x.mc
                       ? dt_gemm_init(&x.gemm)
                       : dt_err_set(DT_ERR_OOM, "probe: out of memory for %.1f MiB", mib);
    for (int r = 0; st == DT_OK && r < x.p; r++)
        x.counts[r] = (int)(x.n / x.p);
    if (st == DT_OK)
        st = measure(&x);
    dt_gemm_free(x.gemm);
    free(x.a), free(x.b), free(x.counts), free(x.ma), free(x.mb), free(x.mc);
    return st;
}

int dt_cli_probe(int argc, char **argv) {
    double mib = 16;
    int64_t reps = 5;
    const char *v;
    static const char *const with_value[] = {"--mib", "--reps", NULL};
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        if ((v = dt_cli_option(argc, argv, &i, "--mib")))
            ok = dt_cli_real("--mib", v, 0.001, 4096, &mib);
        else if ((v = dt_cli_option(argc, argv, &i, "--reps")))
            ok = dt_cli_int("--reps", v, 1, MAX_REPS, &reps);
        else {
            dt_cli_bad_arg("probe", argv[i], with_value);
            return DT_EXIT_USAGE;
        }
        if (!ok) {
            dt_error("%s", dt_err_msg());
            return DT_EXIT_USAGE;
        }
    }
    dt_comm *world = NULL;
    dt_status st = dt_dist_init(&argc, &argv, &world);
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        return DT_EXIT_RUN;
    }
    dt_log_setup(world->rank, world->size, DT_LOG_INFO);
    /* the collectives as a training run calls them: under the watchdog of the default
     * train.comm_timeout, whose blocking calls are the non-blocking forms completed by a
     * polling wait (slower than MPI's own blocking calls: 0.9 against 0.6 ms for 3 MiB on two
     * ranks here) */
    dt_config def;
    dt_config_defaults(&def);
    dt_comm_watch watch;
    st = dt_comm_watch_init(&watch, def.train.comm_timeout, world->rank);
    world->watch = &watch;
    if (st == DT_OK)
        st = probe_run(world, mib, (int)reps);
    world->watch = NULL;
    st = dt_comm_agree(world, st);
    int rc = DT_EXIT_OK;
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        rc = DT_EXIT_RUN;
    }
    dt_dist_finalize(world);
    return rc;
}
