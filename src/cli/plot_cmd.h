/* `dtrain plot`: pictures (SVG) of a memory timeline or a metrics file. Single process, no
 * MPI; returns the process exit code (0 ok, 2 bad arguments or input, 1 I/O). */
#ifndef DT_CLI_PLOT_CMD_H
#define DT_CLI_PLOT_CMD_H

int dt_cli_plot(int argc, char **argv);

#endif
