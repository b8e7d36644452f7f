/* A tiny test harness shared by every tests/<layer>/test_*.c executable.
 *
 *   int main(int argc, char **argv) {
 *       DT_TEST_BEGIN(argc, argv);            // parses --perf
 *       DT_CHECK(x == 1, "x was %d", x);     // records a pass or a failure, keeps going
 *       DT_CHECK_CLOSE(got, want, 1e-5);     // relative tolerance on doubles
 *       return DT_TEST_END();                 // prints "N passed, N failed", exit code
 *   }
 */
#ifndef DT_TESTS_HARNESS_H
#define DT_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/status.h"

typedef struct dt_test_state {
    int passed, failed;
    bool perf; /* --perf: also run the timing section */
} dt_test_state;

extern dt_test_state dt_test;

void dt_test_begin(int argc, char **argv);
int dt_test_end(void);
/* For tests run on many ranks (collective over w): sums every rank's pass/fail counts, rank 0
 * prints the closing line for the whole job, and every rank returns non-zero if any failed. */
int dt_test_end_collective(dt_comm *w);
void dt_test_check(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* normalised mean squared error sum((a-b)^2) / sum(b^2) (0 when both are 0) */
double dt_test_nmse(const float *a, const float *b, int64_t n);
double dt_test_max_rel(const float *a, const float *b, int64_t n, double floor_abs);
double dt_test_seconds(void);
/* deterministic test data in [-scale, scale] */
void dt_test_fill(float *x, int64_t n, uint64_t seed, float scale);

#define DT_TEST_BEGIN(argc, argv) dt_test_begin(argc, argv)
#define DT_TEST_END() dt_test_end()
#define DT_CHECK(cond, ...) dt_test_check((cond), __FILE__, __LINE__, __VA_ARGS__)
#define DT_CHECK_OK(expr)                                                                     \
    do {                                                                                      \
        dt_status s_ = (expr);                                                                \
        dt_test_check(s_ == DT_OK, __FILE__, __LINE__, "%s -> %s: %s", #expr,                 \
                      dt_status_str(s_), dt_err_msg());                                       \
    } while (0)
#define DT_CHECK_CLOSE(got, want, rtol)                                                       \
    do {                                                                                      \
        double g_ = (got), w_ = (want), d_ = g_ - w_;                                         \
        double a_ = w_ < 0 ? -w_ : w_;                                                        \
        dt_test_check((d_ < 0 ? -d_ : d_) <= (rtol) * (a_ > 1e-30 ? a_ : 1e-30) ||            \
                          (d_ == 0),                                                          \
                      __FILE__, __LINE__, "%s = %.9g, want %.9g (rtol %g)", #got, g_, w_,      \
                      (double)(rtol));                                                        \
    } while (0)

#endif
