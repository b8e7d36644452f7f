/* Status codes and error text: the public part (dt_status, dt_err_*, DT_TRY) is
 * dtrain/status.h; this adds what only the library uses (DT_TRY_GOTO, DT_ASSERT).
 * The library never exits: only cli/ turns a status into an exit code.
 */
#ifndef DT_CORE_STATUS_H
#define DT_CORE_STATUS_H

#include "dtrain/status.h"

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
