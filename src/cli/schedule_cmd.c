/* `dtrain schedule`: the pipeline schedule generators and validator from the command line.
 *
 *   dtrain schedule --pp P --microbatches M --kind gpipe|1f1b|interleaved|zbh1 [--chunks V]
 *                   [--stats]
 *   dtrain schedule --check FILE --pp P [--max-in-flight N] [--rendezvous] [--stats]
 *
 * Rows go to stdout in the text form of plan/schedule.h; statistics are '#' lines, so the
 * output of the first form is itself a valid input for --check. Single process, no MPI.
 */
#include "cli/schedule_cmd.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "core/log.h"
#include "io/atomic.h"
#include "plan/schedule.h"

static int usage(void) {
    dt_error("usage: dtrain schedule --pp P --microbatches M --kind gpipe|1f1b|interleaved|zbh1 "
             "[--chunks V] [--stats]\n"
             "       dtrain schedule --check FILE --pp P [--max-in-flight N] [--rendezvous] "
             "[--stats]");
    return 2;
}

static bool to_int(const char *flag, const char *v, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > 1 << 24) {
        dt_error("%s: '%s' is not a non-negative integer", flag, v);
        return false;
    }
    *out = (int)x;
    return true;
}

/* '#' lines: the simulated bubble next to the theory for the named kind (NULL: a user file). */
static void print_stats(const dt_schedule *s, const char *kind) {
    dt_sched_stats st;
    if (dt_sched_simulate(s, &st) != DT_OK) {
        printf("# stats unavailable: %s\n", dt_err_msg());
        return;
    }
    const double p = s->pp, m = s->n_mb, v = s->n_chunks;
    bool split = false;
    for (int i = 0; i < s->row[s->pp]; i++)
        split |= s->actions[i].op == DT_SCHED_OP_W;
    printf("# %d ranks, %d chunk(s) per rank, %d micro-batches; unit times F=1, %s\n", s->pp,
           s->n_chunks, s->n_mb, split ? "B=1, W=1 (split backward)" : "B=2");
    printf("# makespan %d, idle %d of %d rank-slots: bubble %.4f", st.makespan, st.idle,
           s->pp * st.makespan, st.bubble);
    if (kind && (!strcmp(kind, "gpipe") || !strcmp(kind, "1f1b")))
        printf(" (theory (p-1)/(m+p-1) = %.4f)", (p - 1) / (m + p - 1));
    else if (kind && !strcmp(kind, "interleaved"))
        printf(" (theory (p-1)/(v*m+p-1) = %.4f)", (p - 1) / (v * m + p - 1));
    else if (kind && !strcmp(kind, "zbh1"))
        printf(" (theory (p-1)/(3m+p-1) = %.4f; 1F1B %.4f)", (p - 1) / (3 * m + p - 1),
               (p - 1) / (m + p - 1));
    printf("\n# peak in flight (F done, B not yet%s) per rank:",
           s->n_chunks > 1 ? "; counts (chunk, micro-batch) pairs, times are per chunk" : "");
    for (int r = 0; r < s->pp; r++)
        printf(" %d", dt_sched_peak_in_flight(s, r));
    printf("\n# buffers per rank, activation slots / inbox / boundary gradients:");
    for (int r = 0; r < s->pp; r++)
        printf(" %d/%d/%d", dt_sched_slots(s, r), dt_sched_inbox(s, r), dt_sched_grads(s, r));
    printf("\n");
}

static int check_file(const char *path, int pp, dt_sched_limits lim, bool stats) {
    char *text;
    dt_status st = dt_read_text(path, "schedule", 16 << 20, &text);
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        return 1;
    }
    dt_schedule *s = NULL;
    st = dt_sched_parse(text, &s);
    free(text);
    if (st == DT_OK && s->pp != pp)
        st = dt_err_set(DT_ERR_ARG, "schedule has %d rows, expected one per rank for --pp %d",
                        s->pp, pp);
    if (st == DT_OK)
        st = dt_sched_validate(s, &lim);
    if (st != DT_OK) {
        dt_error("%s: %s", path, dt_err_msg());
        dt_sched_free(s);
        return st == DT_ERR_OOM ? 1 : 2;
    }
    printf("ok\n");
    if (stats)
        print_stats(s, NULL);
    dt_sched_free(s);
    return 0;
}

int dt_cli_schedule(int argc, char **argv) {
    const char *kind = NULL, *check = NULL, *v;
    int pp = 0, m = 0, chunks = 0;
    bool stats = false, saw_pp = false;
    dt_sched_limits lim = {0};
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--pp"))) {
            saw_pp = true;
            if (!to_int("--pp", v, &pp))
                return 2;
        } else if ((v = dt_cli_option(argc, argv, &i, "--microbatches"))) {
            if (!to_int("--microbatches", v, &m))
                return 2;
        } else if ((v = dt_cli_option(argc, argv, &i, "--chunks"))) {
            if (!to_int("--chunks", v, &chunks))
                return 2;
        } else if ((v = dt_cli_option(argc, argv, &i, "--max-in-flight"))) {
            if (!to_int("--max-in-flight", v, &lim.max_in_flight))
                return 2;
        } else if ((v = dt_cli_option(argc, argv, &i, "--kind"))) {
            kind = v;
        } else if ((v = dt_cli_option(argc, argv, &i, "--check"))) {
            check = v;
        } else if (!strcmp(argv[i], "--rendezvous")) {
            lim.p2p = DT_SCHED_P2P_RENDEZVOUS;
        } else if (!strcmp(argv[i], "--stats")) {
            stats = true;
        } else {
            static const char *const with_value[] = {
                "--pp", "--microbatches", "--chunks", "--max-in-flight", "--kind", "--check", NULL};
            dt_cli_bad_arg("schedule", argv[i], with_value);
            return usage();
        }
    }
    if (pp < 1) {
        if (saw_pp)
            dt_error("schedule: --pp %d: the number of pipeline stages must be >= 1", pp);
        else
            dt_error("schedule: --pp P (the number of pipeline stages) is required");
        return usage();
    }
    if (check)
        return check_file(check, pp, lim, stats);
    if (!kind) {
        dt_error("schedule: --kind gpipe|1f1b|interleaved|zbh1 is required (or --check FILE)");
        return usage();
    }
    if (m < 1) {
        dt_error("schedule: --microbatches M (>= 1) is required with --kind");
        return usage();
    }
    if (chunks && strcmp(kind, "interleaved") != 0) {
        dt_error("schedule: --chunks applies to --kind interleaved only");
        return 2;
    }
    dt_schedule *s = NULL;
    dt_status st;
    if (!strcmp(kind, "gpipe"))
        st = dt_sched_gpipe(pp, m, &s);
    else if (!strcmp(kind, "1f1b"))
        st = dt_sched_1f1b(pp, m, &s);
    else if (!strcmp(kind, "interleaved"))
        st = dt_sched_interleaved(pp, m, chunks ? chunks : 2, &s);
    else if (!strcmp(kind, "zbh1"))
        st = dt_sched_zbh1(pp, m, &s);
    else
        st = dt_err_set(DT_ERR_ARG,
                        "schedule: unknown --kind '%s' (gpipe, 1f1b, interleaved, "
                        "zbh1)",
                        kind);
    /* generated schedules are valid by construction; checking costs microseconds */
    dt_sched_limits strict = {.p2p = DT_SCHED_P2P_RENDEZVOUS};
    if (st == DT_OK)
        st = dt_sched_validate(s, &strict);
    char *text = NULL;
    if (st == DT_OK)
        st = dt_sched_format(s, &text);
    if (st != DT_OK) {
        dt_error("%s", dt_err_msg());
        dt_sched_free(s);
        return st == DT_ERR_OOM ? 1 : 2;
    }
    fputs(text, stdout);
    if (stats)
        print_stats(s, kind);
    free(text);
    dt_sched_free(s);
    return 0;
}
