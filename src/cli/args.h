/* Command-line option parsing shared by the dtrain subcommands. */
#ifndef DT_CLI_ARGS_H
#define DT_CLI_ARGS_H

/* "--name=value" or "--name value" at argv[*i]: the value (advancing *i past a separate value),
 * or NULL when argv[*i] is not this option. */
const char *dt_cli_option(int argc, char **argv, int *i, const char *name);

/* The error for an argument no option took: "--pp needs a value" when it is one of the
 * NULL-terminated with_value names standing last, else "unexpected argument". */
void dt_cli_bad_arg(const char *cmd, const char *arg, const char *const *with_value);

#endif
