/* The collective watchdog's record: settings, the test-only stall switch, and the "where am I"
 * text of its report. The waiting itself is the transport's (dist/mpi_comm.c), which alone can
 * poll a pending operation. See comm.h. Single-threaded, like the communicators that share it.
 */
#include "core/comm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"

#define STALL_DEFAULT_S 3600.0

static bool parse_int(const char *s, char **end, int *out) {
    errno = 0;
    long v = strtol(s, end, 10);
    if (*end == s || errno || v < 0 || v > INT_MAX)
        return false;
    *out = (int)v;
    return true;
}

/* "rank:step[:seconds]" */
static dt_status parse_stall(dt_comm_watch *w, const char *text) {
    char *end;
    w->stall_s = STALL_DEFAULT_S;
    bool ok = parse_int(text, &end, &w->stall_rank) && *end == ':' &&
              parse_int(end + 1, &end, &w->stall_step) && w->stall_step >= 1;
    if (ok && *end == ':') {
        const char *s = end + 1;
        errno = 0;
        w->stall_s = strtod(s, &end);
        ok = end != s && !errno && w->stall_s >= 0 && w->stall_s <= 1e6;
    }
    if (!ok || *end) {
        w->stall_rank = -1;
        return dt_err_set(DT_ERR_ARG, "DT_TEST_STALL=%s: expected rank:step[:seconds] with "
                          "step >= 1 (a test-only switch; unset it)", text);
    }
    return DT_OK;
}

dt_status dt_comm_watch_init(dt_comm_watch *w, double timeout_s, int rank) {
    *w = (dt_comm_watch){.timeout_s = timeout_s, .rank = rank, .stall_rank = -1};
    if (!(timeout_s >= 0))
        return dt_err_set(DT_ERR_ARG, "comm_timeout %g must be >= 0 seconds", timeout_s);
    const char *stall = getenv("DT_TEST_STALL");
    return stall && *stall ? parse_stall(w, stall) : DT_OK;
}

void dt_comm_watch_where(const dt_comm_watch *w, char *buf, size_t n) {
    int step = 0, mb = -1;
    dt_mem_phase phase = DT_MEM_PHASE_SETUP;
    if (w->where)
        dt_mem_context(w->where, &step, &phase, &mb);
    char mbs[32] = "";
    if (mb >= 0)
        snprintf(mbs, sizeof mbs, ", micro-batch %d", mb);
    if (step == 0 && phase == DT_MEM_PHASE_SETUP)
        snprintf(buf, n, "set-up, before step 1");
    else
        snprintf(buf, n, "step %d%s, %s", step, mbs, dt_mem_phase_name(phase));
}

void dt_comm_watch_stall(dt_comm_watch *w) {
    if (w->stall_rank != w->rank || w->stalled || !w->where)
        return;
    int step, mb;
    dt_mem_phase phase;
    dt_mem_context(w->where, &step, &phase, &mb);
    if (step != w->stall_step)
        return;
    w->stalled = true;
    dt_warn("DT_TEST_STALL: rank %d sleeps %g s inside a wait at step %d (test-only switch)",
            w->rank, w->stall_s, step);
    struct timespec left = {.tv_sec = (time_t)w->stall_s,
                            .tv_nsec = (long)((w->stall_s - (double)(time_t)w->stall_s) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}
