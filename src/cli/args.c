/* Command-line option parsing shared by the dtrain subcommands. See args.h. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/status.h"

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

bool dt_cli_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (end == text || *end || isspace((unsigned char)text[0]) || errno == ERANGE || x < lo ||
        x > hi) {
        dt_err_set(DT_ERR_ARG, "%s: '%s' is not a whole number from %lld to %lld", flag, text,
                   (long long)lo, (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

bool dt_cli_seed(const char *flag, const char *text, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end || errno == ERANGE) {
        dt_err_set(DT_ERR_ARG,
                   "%s: '%s' is not a seed (a whole number from 0 to "
                   "18446744073709551615)",
                   flag, text);
        return false;
    }
    *out = x;
    return true;
}

bool dt_cli_real(const char *flag, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || isspace((unsigned char)text[0]) || !isfinite(x) || x < lo ||
        x > hi) {
        dt_err_set(DT_ERR_ARG, "%s: '%s' is not a number from %g to %g", flag, text, lo, hi);
        return false;
    }
    *out = x;
    return true;
}
