/* Status codes and the error message that travels with them (public API).
 *
 * Every fallible call in libdtrain returns a dt_status. The failing call records a one-line
 * reason with dt_err_set(); callers read it with dt_err_msg() (the last error of this thread).
 * Thread-safety: the message lives in a thread-local buffer (like errno), so concurrent
 * threads never see each other's errors. Ownership: the returned strings belong to the
 * library (dt_err_msg's until this thread's next error). The library never exits.
 */
#ifndef DTRAIN_STATUS_H
#define DTRAIN_STATUS_H

#include "dtrain/export.h"

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
DT_API dt_status dt_err_set(dt_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current message with more context ("loading ckpt: " + old message). */
DT_API dt_status dt_err_wrap(dt_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last error recorded on this thread ("(no message)" when none). */
DT_API const char *dt_err_msg(void);
DT_API void dt_err_clear(void);
/* "ok", "bad argument", ... (a static string) */
DT_API const char *dt_status_str(dt_status st);

/* Forward a failure to the caller. */
#define DT_TRY(expr)                    \
    do {                                \
        dt_status dt_try_s_ = (expr);   \
        if (dt_try_s_ != DT_OK)         \
            return dt_try_s_;           \
    } while (0)

#endif
