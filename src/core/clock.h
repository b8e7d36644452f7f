/* Monotonic wall-clock seconds, for step times and communication accounting. */
#ifndef DT_CORE_CLOCK_H
#define DT_CORE_CLOCK_H

#include <time.h>

static inline double dt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#endif
