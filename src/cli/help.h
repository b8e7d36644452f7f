/* The help of every dtrain command, in one table: `dtrain --help`, `dtrain help COMMAND`,
 * `dtrain COMMAND --help`, and the list of commands every usage error names.
 * Single process, no state.
 */
#ifndef DT_CLI_HELP_H
#define DT_CLI_HELP_H

#include <stdbool.h>
#include <stdio.h>

/* The commands, as error messages list them: "train, prepare, ..." */
#define DT_CLI_COMMANDS "train, prepare, sample, schedule, plan, probe, plot, convert"

/* Exit codes of the dtrain command (README "Command line"). */
enum { DT_EXIT_OK = 0, DT_EXIT_RUN = 1, DT_EXIT_USAGE = 2 };

/* The overview (`dtrain --help`) on f; returns DT_EXIT_OK for stdout, DT_EXIT_USAGE for
 * stderr (the overview printed because the command line was wrong). */
int dt_cli_usage(FILE *f);
/* The help of one command on stdout, DT_EXIT_OK; an unknown command is one error line
 * naming the commands, DT_EXIT_USAGE. */
int dt_cli_help(const char *command);
/* True when a command's arguments (argv[2..]) ask for its help (--help or -h). */
bool dt_cli_wants_help(int argc, char **argv);

#endif
