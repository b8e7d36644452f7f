/* Rank-aware logging to stdout (info) and stderr (warnings, errors). See log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static struct {
    int rank, world_size;
    dt_log_level min_level;
} log_state = {0, 1, DT_LOG_INFO};

void dt_log_setup(int rank, int world_size, dt_log_level min_level) {
    log_state.rank = rank;
    log_state.world_size = world_size;
    log_state.min_level = min_level;
}

int dt_log_rank(void) { return log_state.rank; }

void dt_log(dt_log_level level, const char *fmt, ...) {
    if (level < log_state.min_level)
        return;
    if (level <= DT_LOG_INFO && log_state.rank != 0)
        return;
    FILE *f = level >= DT_LOG_WARN ? stderr : stdout;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *tag = level == DT_LOG_ERROR ? "error: " : level == DT_LOG_WARN ? "warning: " : "";
    if (log_state.world_size > 1 && level >= DT_LOG_WARN)
        fprintf(f, "dtrain[rank %d]: %s%s\n", log_state.rank, tag, line);
    else if (level >= DT_LOG_WARN)
        fprintf(f, "dtrain: %s%s\n", tag, line);
    else
        fprintf(f, "%s\n", line);
    fflush(f);
}
