/* Status codes and the error message that travels with them.
 *
 * Every fallible call in libdtrain returns a dt_status. The failing call records a one-line
 * reason with dt_err_set(); callers read it with dt_err_msg(). The message lives in a
 * thread-local buffer (like errno), so concurrent threads never see each other's errors.
 * The library never exits: only cli/ turns a status into an exit code.
 */
#ifndef DT_CORE_STATUS_H
#define DT_CORE_STATUS_H

typedef enum dt_status {
    DT_OK = 0,
    DT_ERR_ARG = -1,         /* bad argument, configuration or layout */
    DT_ERR_OOM = -2,         /* allocation failed */
    DT_ERR_IO = -3,          /* file missing, unreadable, short write */
    DT_ERR_FORMAT = -4,      /* file read but its contents are wrong (magic, sizes, JSON) */
    DT_ERR_MPI = -5,         /* a collective or p2p call failed */
    DT_ERR_DNNL = -6,        /* oneDNN refused or failed */
    DT_ERR_UNSUPPORTED = -7, /* valid request this build or layout cannot do */
} dt_status;

/* Record the reason for `st` and return `st`, so callers write `return dt_err_set(...)`.
 * The message replaces any earlier one on this thread. */
dt_status dt_err_set(dt_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current message with more context ("loading ckpt: " + old message). */
dt_status dt_err_wrap(dt_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *dt_err_msg(void);
void dt_err_clear(void);
const char *dt_status_str(dt_status st);

#define DT_TRY(expr)                    \
    do {                                \
        dt_status dt_try_s_ = (expr);   \
        if (dt_try_s_ != DT_OK)         \
            return dt_try_s_;           \
    } while (0)

/* For functions that clean up through a single `fail:` label; needs `dt_status st`. */
#define DT_TRY_GOTO(expr)               \
    do {                                \
        st = (expr);                    \
        if (st != DT_OK)                \
            goto fail;                  \
    } while (0)

/* Internal invariants only (bugs), never user input. */
#define DT_ASSERT(cond)                                                    \
    do {                                                                   \
        if (!(cond))                                                       \
            dt_assert_fail(#cond, __FILE__, __LINE__);                     \
    } while (0)
void dt_assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));

#endif
