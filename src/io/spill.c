/* Spilled records: a FIFO of requests served by one I/O thread. See spill.h.
 *
 * Tickets number the requests from 0; `done` counts those served, so request t is done when
 * done > t. The queue is a ring of QUEUE slots; a request waits for a free slot, which only
 * a caller with QUEUE requests in flight ever does.
 */
#include "io/spill.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { QUEUE = 16 };

typedef struct request {
    int64_t record;
    char *buf;
    bool write;
} request;

struct dt_spill {
    int fd;
    char path[4200];
    int64_t n_records;
    size_t record_bytes;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request queue[QUEUE];
    int64_t asked, done; /* tickets handed out, requests served */
    bool stop;
    bool failed;
    int64_t fail_ticket;
    char fail_msg[4400];
    dt_spill_stats stats;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One request, outside the lock; a failure is recorded under it by the caller. */
static int serve(dt_spill *s, const request *r, int64_t *fail_at) {
    return dt_scratch_transfer(s->fd, r->buf, s->record_bytes, r->record * (int64_t)s->record_bytes,
                               r->write, fail_at);
}

static void *io_main(void *arg) {
    dt_spill *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->done == s->asked && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->done == s->asked)
            break;
        request r = s->queue[s->done % QUEUE];
        bool skip = s->failed;
        pthread_mutex_unlock(&s->mu);
        int64_t fail_at = 0;
        double t0 = now_s();
        int code = skip ? 0 : serve(s, &r, &fail_at);
        double busy = now_s() - t0;
        pthread_mutex_lock(&s->mu);
        s->stats.busy_s += busy;
        if (code != 0 && !s->failed) {
            s->failed = true;
            s->fail_ticket = s->done;
            snprintf(s->fail_msg, sizeof s->fail_msg, "%s %s at byte %lld failed: %s",
                     r.write ? "writing" : "reading", s->path, (long long)fail_at,
                     dt_scratch_failure(code, r.write));
        } else if (!skip) {
            *(r.write ? &s->stats.bytes_written : &s->stats.bytes_read) += (int64_t)s->record_bytes;
        }
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

dt_status dt_spill_open(const dt_scratch_spec *spec, int64_t n_records, size_t record_bytes,
                        dt_spill **out) {
    *out = NULL;
    dt_spill *s = calloc(1, sizeof *s);
    if (!s)
        return dt_err_set(DT_ERR_OOM, "spill: out of memory");
    s->fd = -1;
    s->n_records = n_records;
    s->record_bytes = record_bytes;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    dt_scratch_spec sized = *spec;
    sized.bytes = n_records * (int64_t)record_bytes;
    dt_status st = dt_scratch_open(&sized, &s->fd, s->path, sizeof s->path);
    if (st == DT_OK) {
        int rc = pthread_create(&s->thread, NULL, io_main, s);
        s->started = rc == 0;
        if (rc != 0)
            st = dt_err_set(DT_ERR_OOM, "%s: cannot start the I/O thread: %s", spec->what,
                            strerror(rc));
    }
    if (st != DT_OK) {
        dt_spill_close(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_spill_close(dt_spill *s) {
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->fd >= 0)
        close(s->fd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int64_t ask(dt_spill *s, int64_t record, char *buf, bool write) {
    pthread_mutex_lock(&s->mu);
    while (s->asked - s->done == QUEUE)
        pthread_cond_wait(&s->cv, &s->mu);
    int64_t t = s->asked++;
    s->queue[t % QUEUE] = (request){.record = record, .buf = buf, .write = write};
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return t;
}

int64_t dt_spill_put(dt_spill *s, int64_t record, const void *buf) {
    return ask(s, record, (char *)(uintptr_t)buf, true);
}

int64_t dt_spill_get(dt_spill *s, int64_t record, void *buf) { return ask(s, record, buf, false); }

dt_status dt_spill_wait(dt_spill *s, int64_t ticket) {
    if (ticket < 0)
        return DT_OK;
    double t0 = now_s();
    pthread_mutex_lock(&s->mu);
    while (s->done <= ticket)
        pthread_cond_wait(&s->cv, &s->mu);
    bool failed = s->failed && ticket >= s->fail_ticket;
    s->stats.wait_s += now_s() - t0;
    pthread_mutex_unlock(&s->mu);
    return failed ? dt_err_set(DT_ERR_IO, "%s", s->fail_msg) : DT_OK;
}

size_t dt_spill_record_bytes(const dt_spill *s) { return s->record_bytes; }

dt_spill_stats dt_spill_stats_of(const dt_spill *s) {
    dt_spill_stats st;
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    st = s->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return st;
}
