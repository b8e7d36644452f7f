/* `dtrain schedule`: print a generated pipeline schedule or check a user's schedule file.
 * Single process, no MPI; returns the process exit code (0 ok, 2 bad input or schedule, 1 I/O).
 */
#ifndef DT_CLI_SCHEDULE_CMD_H
#define DT_CLI_SCHEDULE_CMD_H

int dt_cli_schedule(int argc, char **argv);

#endif
