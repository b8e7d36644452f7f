/* Thread-local error text for dt_status. See status.h. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_LEN 1024
static _Thread_local char err_text[ERR_LEN];

dt_status dt_err_set(dt_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    return st;
}

dt_status dt_err_wrap(dt_status st, const char *fmt, ...) {
    char old[ERR_LEN];
    memcpy(old, err_text, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    if (n >= 0 && n < ERR_LEN) /* append the old message after the new prefix */
        memcpy(err_text + n, old, strnlen(old, ERR_LEN - 1 - n) + 1), err_text[ERR_LEN - 1] = 0;
    return st;
}

const char *dt_err_msg(void) { return err_text[0] ? err_text : "(no message)"; }

void dt_err_clear(void) { err_text[0] = 0; }

const char *dt_status_str(dt_status st) {
    switch (st) {
    case DT_OK: return "ok";
    case DT_ERR_ARG: return "invalid argument";
    case DT_ERR_OOM: return "out of memory";
    case DT_ERR_IO: return "I/O error";
    case DT_ERR_FORMAT: return "bad file format";
    case DT_ERR_MPI: return "MPI error";
    case DT_ERR_DNNL: return "oneDNN error";
    case DT_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

void dt_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "dtrain: internal error: %s:%d: assertion '%s' failed\n", file, line, cond);
    abort(); /* a bug, not an input error: stop with a core dump */
}
