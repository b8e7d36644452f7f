/* Command-line option parsing shared by the dtrain subcommands. */
#ifndef DT_CLI_ARGS_H
#define DT_CLI_ARGS_H

/* "--name=value" or "--name value" at argv[*i]: the value (advancing *i past a separate value),
 * or NULL when argv[*i] is not this option. */
const char *dt_cli_option(int argc, char **argv, int *i, const char *name);

/* The error for an argument no option took: "--pp needs a value" when it is one of the
 * NULL-terminated with_value names standing last, else "unexpected argument". */
void dt_cli_bad_arg(const char *cmd, const char *arg, const char *const *with_value);

/* Strict numbers, one parser for every command: the whole text must be the number (no
 * trailing characters, no wrap-around, no sign on a seed), inside [lo, hi]; a real must be
 * finite. false, with the reason in dt_err_msg() (DT_ERR_ARG) naming the option, the value and
 * the range it takes; the caller prints it. */
#include <stdbool.h>
#include <stdint.h>
bool dt_cli_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out);
bool dt_cli_seed(const char *flag, const char *text, uint64_t *out); /* 0 .. 2^64 - 1 */
bool dt_cli_real(const char *flag, const char *text, double lo, double hi, double *out);

#endif
