/* Timing a kernel side by side. See plan_crew.h.
 *
 * The copies meet in shared memory. The leader (this process) posts a job, bumps `gen` and
 * wakes the twins, asleep on it until then, each of which sets the job up and runs it once to warm
 * it. Then every run starts at a barrier, so all copies run together, none while another is still
 * allocating, and the leader's word at each barrier says whether to run again. A run takes as long
 * as its slowest copy, as a step's stretch between two collectives waits for its slowest rank: the
 * answer is the median over runs of that slowest time.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#include "cli/plan_crew.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

enum { MAX_COPIES = 64, MAX_RUNS = 256 };

typedef struct shared {
    atomic_int gen;     /* the job's number */
    atomic_int arrived; /* arrivals at the barrier before each run, over the job */
    atomic_int idle;    /* twins done with the job, waiting for the next */
    const dt_plan_kernel *k;
    int reps;
    double seconds;
    unsigned char job[DT_PLAN_JOB_BYTES];
    bool more[MAX_RUNS + 1]; /* the leader's word at barrier i: run again */
    /* each copy's seconds of each part, run by run */
    double runs[MAX_COPIES][DT_PLAN_PARTS][MAX_RUNS];
    int n_runs;
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

/* An idle twin sleeps in the kernel until the leader posts a job (or a tenth of a second, to
 * look for its leader): it takes no CPU from what runs meanwhile. A twin that napped 20 us at a
 * time took a fifth of a core, and 10-30% off a 1 MiB all-reduce of two MPI ranks beside it.
 * Not FUTEX_PRIVATE: the word lies in memory the processes share. */
static void sleep_on(atomic_int *word, int seen) {
    struct timespec tenth = {0, 100000000};
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &tenth, NULL, 0);
}

static void wake_all(atomic_int *word) {
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

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

/* One copy's part in a job: set up and warm, then run after run in lockstep with the others,
 * each started at a barrier (barrier 0 waits for the slowest setup), for as long as the
 * leader says. A copy whose kernel failed keeps coming to the barriers. False: a twin died
 * (only the leader, which checks, can tell). */
static bool take_part(shared *sh, int me, int copies, const dt_plan_crew *c) {
    const dt_plan_kernel *k = sh->k;
    void *state = NULL;
    double s[DT_PLAN_PARTS] = {0}, start = 0;
    dt_status st = k->setup(sh->job, &state);
    if (st == DT_OK)
        st = k->once(sh->job, state, s);
    int i = 0;
    bool alive = true;
    for (;; i++) {
        if (me == 0) {
            start = i == 0 ? dt_now() : start;
            sh->more[i] =
                st == DT_OK && i < MAX_RUNS && (i < sh->reps || dt_now() - start < sh->seconds);
        }
        atomic_fetch_add(&sh->arrived, 1);
        if (!(alive = wait_for(&sh->arrived, copies * (i + 1), c)))
            break;
        if (!sh->more[i])
            break;
        memset(s, 0, sizeof s);
        if (st == DT_OK)
            st = k->once(sh->job, state, s);
        for (int p = 0; p < DT_PLAN_PARTS; p++)
            sh->runs[me][p][i] = s[p];
    }
    if (me == 0)
        sh->n_runs = i;
    sh->st[me] = st;
    if (state)
        k->teardown(state);
    return alive;
}

static _Noreturn void twin_main(shared *sh, int me, int copies, pid_t leader) {
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&sh->gen)) == seen) {
            if (getppid() != leader)
                _exit(0);
            sleep_on(&sh->gen, seen);
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
                            size_t job_size, int reps, double seconds, double secs[DT_PLAN_PARTS]) {
    shared *sh = c->sh;
    if (job_size > sizeof sh->job)
        return dt_err_set(DT_ERR_ARG, "plan: device this: a probe's job is too large");
    sh->k = k;
    sh->reps = reps;
    sh->seconds = seconds;
    memcpy(sh->job, job, job_size);
    atomic_store(&sh->arrived, 0);
    atomic_store(&sh->idle, 0);
    atomic_fetch_add(&sh->gen, 1);
    wake_all(&sh->gen);
    if (!take_part(sh, 0, c->copies, c) || !wait_for(&sh->idle, c->copies - 1, c))
        return dt_err_set(DT_ERR_OOM,
                          "plan: device this: a copy of the probe ended (killed, out of memory?) "
                          "before its kernel was timed");
    for (int i = 0; i < c->copies; i++)
        if (sh->st[i] != DT_OK)
            return i == 0 ? sh->st[0]
                          : dt_err_set(sh->st[i],
                                       "plan: device this: copy %d of the probe, run beside "
                                       "this one, failed its kernel (out of memory?)",
                                       i);
    /* each run waits for its slowest copy, as every rank waits at the next collective */
    double slowest[DT_PLAN_PARTS][MAX_RUNS];
    int n = sh->n_runs;
    for (int p = 0; p < DT_PLAN_PARTS; p++) {
        for (int r = 0; r < n; r++) {
            slowest[p][r] = 0;
            for (int i = 0; i < c->copies; i++)
                slowest[p][r] =
                    sh->runs[i][p][r] > slowest[p][r] ? sh->runs[i][p][r] : slowest[p][r];
        }
        secs[p] = n > 0 ? median(slowest[p], n) : 0;
    }
    return n > 0 ? DT_OK
                 : dt_err_set(DT_ERR_ARG, "plan: device this: a probe's kernel ran no time");
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
