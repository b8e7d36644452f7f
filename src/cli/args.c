/* Command-line option parsing shared by the dtrain subcommands. See args.h. */
#include "cli/args.h"

#include <string.h>

#include "core/log.h"

const char *dt_cli_option(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

void dt_cli_bad_arg(const char *cmd, const char *arg, const char *const *with_value) {
    for (int k = 0; with_value && with_value[k]; k++)
        if (!strcmp(arg, with_value[k])) {
            dt_error("%s: %s needs a value (%s VALUE or %s=VALUE)", cmd, arg, arg, arg);
            return;
        }
    dt_error("%s: unexpected argument '%s' (see dtrain %s --help)", cmd, arg, cmd);
}
