/* Timing a kernel side by side. See plan_crew.h.
 *
 * The copies meet in one shared page. The leader (this process) posts a job and bumps `gen`;
 * each twin, napping until then, sets the job up, runs it once to warm it, and waits at the
 * `ready` barrier so that no copy times its kernel while another is still allocating. Every
 * copy then times its runs, publishes its best seconds, and goes on running the kernel until
 * `timed` says all have finished, so the last copy to finish is timed beside busy ones too.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#include "cli/plan_crew.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

enum { MAX_COPIES = 64, MAX_RUNS = 256 };

typedef struct shared {
    atomic_int gen;   /* the job's number */
    atomic_int ready; /* copies set up and warm */
    atomic_int timed; /* copies that have published their seconds */
    atomic_int idle;  /* twins done with the job, waiting for the next */
    const dt_plan_kernel *k;
    int reps;
    double seconds;
    unsigned char job[DT_PLAN_JOB_BYTES];
    double secs[MAX_COPIES][2];
    dt_status st[MAX_COPIES];
} shared;

struct dt_plan_crew {
    shared *sh;
    int copies;
    pid_t twin[MAX_COPIES];
    cpu_set_t own; /* this process's cores before the crew pinned it */
    bool pinned;
};

static void nap(long ns) { nanosleep(&(struct timespec){0, ns}, NULL); }

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, by_value);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* Waits until *n reaches goal; the leader (crew given) gives up should a twin have died. */
static bool wait_for(atomic_int *n, int goal, const dt_plan_crew *c) {
    for (long spin = 0; atomic_load(n) < goal; spin++)
        if (c && spin % 4096 == 4095) {
            for (int i = 1; i < c->copies; i++)
                if (waitpid(c->twin[i], NULL, WNOHANG) != 0)
                    return false;
            nap(1000);
        }
    return true;
}

/* One copy's part in a job: set up, warm, start with the others, time, keep them company. */
static void take_part(shared *sh, int me, int copies, const dt_plan_crew *c) {
    const dt_plan_kernel *k = sh->k;
    void *state = NULL;
    double s[2] = {0, 0};
    dt_status st = k->setup(sh->job, &state);
    if (st == DT_OK)
        st = k->once(sh->job, state, s);
    atomic_fetch_add(&sh->ready, 1);
    if (!wait_for(&sh->ready, copies, c))
        st = DT_ERR_OOM;
    double start = dt_now(), runs[2][MAX_RUNS];
    int n = 0;
    for (; st == DT_OK && (n < sh->reps || dt_now() - start < sh->seconds) && n < MAX_RUNS; n++) {
        st = k->once(sh->job, state, s);
        runs[0][n] = s[0], runs[1][n] = s[1];
    }
    for (int p = 0; p < 2 && n > 0; p++)
        sh->secs[me][p] = median(runs[p], n);
    sh->st[me] = st;
    atomic_fetch_add(&sh->timed, 1);
    while (st == DT_OK && atomic_load(&sh->timed) < copies)
        st = k->once(sh->job, state, s);
    if (state)
        k->teardown(state);
}

static _Noreturn void twin_main(shared *sh, int me, int copies, pid_t leader) {
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&sh->gen)) == seen) {
            if (getppid() != leader)
                _exit(0);
            nap(20000);
        }
        seen = g;
        take_part(sh, me, copies, NULL);
        atomic_fetch_add(&sh->idle, 1);
    }
}

/* copy i's cores: the i-th run of `threads` among the cores this process may use */
static void slice(const cpu_set_t *all, int i, int threads, cpu_set_t *out) {
    CPU_ZERO(out);
    for (int cpu = 0, n = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, all)) {
            if (n / threads == i)
                CPU_SET(cpu, out);
            n++;
        }
}

static pid_t start_twin(dt_plan_crew *c, int me, int threads) {
    pid_t leader = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a twin never outlives the plan */
    if (getppid() != leader)
        _exit(0);
    cpu_set_t mine;
    slice(&c->own, me, threads, &mine);
    sched_setaffinity(0, sizeof mine, &mine);
    twin_main(c->sh, me, c->copies, leader);
}

/* SIGKILL: a twin holds nothing but memory, and one may be waiting at a barrier */
static void end_twins(dt_plan_crew *c) {
    for (int i = 1; i < MAX_COPIES; i++)
        if (c->twin[i] > 0) {
            kill(c->twin[i], SIGKILL);
            waitpid(c->twin[i], NULL, 0);
            c->twin[i] = 0;
        }
    c->copies = 1;
}

dt_status dt_plan_crew_start(int copies, int threads, dt_plan_crew **out) {
    *out = NULL;
    dt_plan_crew *c = calloc(1, sizeof *c);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!c || sh == MAP_FAILED) {
        free(c);
        if (sh != MAP_FAILED)
            munmap(sh, sizeof *sh);
        return dt_err_set(DT_ERR_OOM, "plan: device this: out of memory starting the probe");
    }
    c->sh = sh;
    c->copies = copies < 1 ? 1 : copies > MAX_COPIES ? MAX_COPIES : copies;
    threads = threads < 1 ? 1 : threads;
    if (c->copies > 1 && sched_getaffinity(0, sizeof c->own, &c->own) != 0)
        c->copies = 1;
    for (int i = 1; i < c->copies; i++) {
        c->twin[i] = start_twin(c, i, threads);
        if (c->twin[i] < 0) {
            dt_warn("plan: device this: could not start a copy of the probe (%s); measuring "
                    "alone, not %d side by side",
                    strerror(errno), c->copies);
            end_twins(c); /* they count on copies that will not come */
            break;
        }
    }
    if (c->copies > 1) {
        cpu_set_t mine;
        slice(&c->own, 0, threads, &mine);
        c->pinned = sched_setaffinity(0, sizeof mine, &mine) == 0;
    }
    *out = c;
    return DT_OK;
}

int dt_plan_crew_size(const dt_plan_crew *c) { return c ? c->copies : 1; }

dt_status dt_plan_crew_time(dt_plan_crew *c, const dt_plan_kernel *k, const void *job,
                            size_t job_size, int reps, double seconds, double secs[2]) {
    shared *sh = c->sh;
    if (job_size > sizeof sh->job)
        return dt_err_set(DT_ERR_ARG, "plan: device this: a probe's job is too large");
    sh->k = k;
    sh->reps = reps;
    sh->seconds = seconds;
    memcpy(sh->job, job, job_size);
    atomic_store(&sh->ready, 0);
    atomic_store(&sh->timed, 0);
    atomic_store(&sh->idle, 0);
    atomic_fetch_add(&sh->gen, 1);
    take_part(sh, 0, c->copies, c);
    if (sh->st[0] == DT_OK && !wait_for(&sh->idle, c->copies - 1, c))
        sh->st[0] = DT_ERR_OOM;
    if (sh->st[0] == DT_ERR_OOM)
        return dt_err_set(DT_ERR_OOM,
                          "plan: device this: a copy of the probe ended (killed, out of memory?) "
                          "before its kernel was timed");
    secs[0] = secs[1] = 0;
    for (int i = 0; i < c->copies; i++) {
        if (sh->st[i] != DT_OK)
            return i == 0 ? sh->st[0]
                          : dt_err_set(sh->st[i],
                                       "plan: device this: copy %d of the probe, run beside "
                                       "this one, failed its kernel (out of memory?)",
                                       i);
        for (int p = 0; p < 2; p++)
            secs[p] = sh->secs[i][p] > secs[p] ? sh->secs[i][p] : secs[p];
    }
    return DT_OK;
}

void dt_plan_crew_stop(dt_plan_crew *c) {
    if (!c)
        return;
    end_twins(c);
    if (c->pinned)
        sched_setaffinity(0, sizeof c->own, &c->own);
    munmap(c->sh, sizeof *c->sh);
    free(c);
}
