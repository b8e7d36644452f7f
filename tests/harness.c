/* Implementation of the shared test harness. See harness.h. */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"

dt_test_state dt_test;

void dt_test_begin(int argc, char **argv) {
    memset(&dt_test, 0, sizeof dt_test);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--perf") == 0)
            dt_test.perf = true;
}

int dt_test_end(void) {
    printf("%d passed, %d failed\n", dt_test.passed, dt_test.failed);
    return dt_test.failed ? 1 : 0;
}

int dt_test_end_collective(dt_comm *w) {
    double n[2] = {dt_test.passed, dt_test.failed};
    if (dt_comm_allreduce_f64(w, n, 2) != DT_OK) {
        fprintf(stderr, "rank %d: cannot gather test counts: %s\n", w->rank, dt_err_msg());
        dt_test_end(); /* this rank's own counts, then fail: the others may be lost */
        return 1;
    }
    dt_test.passed = (int)n[0];
    dt_test.failed = (int)n[1];
    if (w->rank == 0)
        return dt_test_end();
    return dt_test.failed ? 1 : 0;
}

void dt_test_check(bool ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        dt_test.passed++;
        return;
    }
    dt_test.failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double dt_test_nmse(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return num / den;
}

double dt_test_max_rel(const float *a, const float *b, int64_t n, double floor_abs) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), floor_abs);
        if (d > worst || isnan(d))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

double dt_test_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

void dt_test_fill(float *x, int64_t n, uint64_t seed, float scale) {
    dt_rng_fill_uniform(seed, "test", 0, n, x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (2 * x[i] - 1) * scale;
}
