/* Rank-aware logging.
 *
 * Info lines are printed by rank 0 only (every rank would print the same progress line);
 * errors and warnings are printed by every rank, prefixed with the rank when the world has
 * more than one. The rank and world size are process-wide settings made once at start-up by
 * train/ or cli/ (the one piece of process state in the library besides the error text).
 */
#ifndef DT_CORE_LOG_H
#define DT_CORE_LOG_H

typedef enum dt_log_level {
    DT_LOG_DEBUG,
    DT_LOG_INFO,
    DT_LOG_WARN,
    DT_LOG_ERROR,
    DT_LOG_LEVEL_COUNT
} dt_log_level;

void dt_log_setup(int rank, int world_size, dt_log_level min_level);
int dt_log_rank(void);
void dt_log(dt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define dt_info(...) dt_log(DT_LOG_INFO, __VA_ARGS__)
#define dt_warn(...) dt_log(DT_LOG_WARN, __VA_ARGS__)
#define dt_error(...) dt_log(DT_LOG_ERROR, __VA_ARGS__)
#define dt_debug(...) dt_log(DT_LOG_DEBUG, __VA_ARGS__)

#endif
