/* `dtrain plot`: the command line of the two pictures in plot_timeline.c and plot_metrics.c.
 *
 *   dtrain plot --timeline FILE.json [--step N] --out FILE.svg
 *   dtrain plot --metrics FILE.jsonl --out FILE.svg
 *
 * Single process, no MPI.
 */
#include "cli/plot_cmd.h"

#include <errno.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/plot_impl.h"
#include "core/log.h"

/* A misuse, named in one line. */
static int misuse(const char *what) {
    dt_error("plot: %s (see dtrain plot --help)", what);
    return 2;
}

int dt_cli_plot(int argc, char **argv) {
    static const char *const with_value[] = {"--timeline", "--metrics", "--out", "--step", NULL};
    const char *timeline = NULL, *metrics = NULL, *out = NULL, *step_s = NULL, *v;
    if (argc <= 2)
        return misuse("nothing to draw: give --timeline or --metrics, and --out");
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--timeline")))
            timeline = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--metrics")))
            metrics = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--step")))
            step_s = v;
        else {
            dt_cli_bad_arg("plot", argv[i], with_value);
            return 2;
        }
    }
    if (!timeline && !metrics)
        return misuse("nothing to draw: give --timeline FILE.json or --metrics FILE.jsonl");
    if (timeline && metrics)
        return misuse("--timeline and --metrics draw different pictures: give one of them");
    if (!out)
        return misuse("--out FILE.svg is missing");
    if (step_s && !timeline)
        return misuse("--step picks a step of a --timeline; a --metrics plot draws every step");
    int step = -1;
    if (step_s) {
        char *end;
        errno = 0;
        long x = strtol(step_s, &end, 10);
        if (errno || end == step_s || *end || x < 0 || x > 1 << 30) {
            dt_error("--step: '%s' is not a step number (0 is the set-up)", step_s);
            return 2;
        }
        step = (int)x;
    }
    dt_status st = timeline ? dt_plot_timeline(timeline, step, out) : dt_plot_metrics(metrics, out);
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        return st == DT_ERR_IO || st == DT_ERR_OOM ? 1 : 2;
    }
    dt_info("wrote %s", out);
    return 0;
}
