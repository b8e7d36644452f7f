/* Optimizer state in a file, streamed through a double-buffered window. See offload.h.
 *
 * File layout: chunk k of the elements is the region [k 2 C, (k+1) 2 C) floats (C = chunk):
 * its m then its v, so one pread and one pwrite move a chunk's whole state. The window has
 * the same layout for two slots; chunk k uses slot k % 2.
 *
 * A pass (stream) runs two threads over a fixed order of operations. The I/O thread does
 *   R0, R1, W0, R2, W1, R3, ..., W(n-2), W(n-1)
 * (Rk: read chunk k into its slot, Wk: write it back), waiting before W(k-2) until the caller
 * has finished chunk k-2; the caller waits for Rk, runs the update on chunk k, and says so.
 * So while chunk i is updated the thread writes chunk i-1 back and reads chunk i+1 into the
 * slot chunk i-1 just left. Slot reuse is safe by construction: R(k) follows W(k-2) on the
 * same thread.
 */
#include "optim/offload.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "io/scratch_file.h"

struct dt_offload_store {
    int fd;
    char path[DT_PATH_MAX + 64];
    int64_t count, chunk, n_chunks;
    float *window; /* [2 slots][m, v][chunk] */
    dt_mem *mem;   /* borrowed */
};

int64_t dt_offload_chunk_for(int64_t count, double window_bytes) {
    double fit = floor(window_bytes / 256.0) * 16.0; /* 16 bytes per chunk float */
    int64_t need = ((count + 1) / 2 + 15) / 16 * 16; /* two chunks at least: see offload.h */
    int64_t c = fit < (double)need ? (int64_t)fit : need;
    return c < 16 ? 16 : c;
}

int64_t dt_offload_chunk(const dt_offload_store *f) { return f->chunk; }
const char *dt_offload_path(const dt_offload_store *f) { return f->path; }

/* ---- set-up ------------------------------------------------------------------------------ */

dt_status dt_offload_init(const dt_offload_opts *o, int64_t count, dt_mem *mem,
                          dt_offload_store **out) {
    *out = NULL;
    dt_offload_store *f = calloc(1, sizeof *f);
    if (!f)
        return dt_err_set(DT_ERR_OOM, "optimizer offload: out of memory");
    dt_status st;
    f->fd = -1;
    f->mem = mem;
    f->count = count;
    f->chunk = dt_offload_chunk_for(count, o->window_bytes);
    f->n_chunks = (count + f->chunk - 1) / f->chunk;
    char name[128], what[128];
    snprintf(name, sizeof name, "dtrain-optim-%s", o->tag);
    snprintf(what, sizeof what, "this rank's optimizer state (2 moments x %lld floats)",
             (long long)count);
    dt_scratch_spec spec = {.dir = o->dir,
                            .key = "offload_dir",
                            .name = name,
                            .what = what,
                            .bytes = f->n_chunks * f->chunk * 2 * (int64_t)sizeof(float)};
    DT_TRY_GOTO(dt_scratch_open(&spec, &f->fd, f->path, sizeof f->path));
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_OPTIM, "adamw.offload_window",
                             (size_t)f->chunk * 4 * sizeof(float), (void **)&f->window));
    *out = f;
    return DT_OK;
fail:
    dt_offload_free(f);
    return st;
}

void dt_offload_free(dt_offload_store *f) {
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    dt_mem_release(f->mem, f->window);
    free(f);
}

/* ---- a pass ------------------------------------------------------------------------------ */

typedef struct stream {
    dt_offload_store *f;
    bool do_read, do_write;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t loaded, computed; /* chunks read by the I/O thread; chunks the caller finished */
    bool failed;
    bool fail_write;          /* what failed: a write (else a read) */
    int fail_code;            /* dt_scratch_transfer's */
    int64_t fail_at;          /* byte offset */
} stream;

static float *slot_of(const dt_offload_store *f, int64_t k) {
    return f->window + (k % 2) * 2 * f->chunk;
}

static void mark(stream *s, int64_t *counter, int64_t value) {
    pthread_mutex_lock(&s->mu);
    *counter = value;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* waits until *counter >= target; false when the pass failed meanwhile */
static bool wait_for(stream *s, const int64_t *counter, int64_t target) {
    pthread_mutex_lock(&s->mu);
    while (*counter < target && !s->failed)
        pthread_cond_wait(&s->cv, &s->mu);
    bool ok = !s->failed;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* pread/pwrite of chunk k's whole region */
static bool transfer(stream *s, int64_t k, bool write) {
    const dt_offload_store *f = s->f;
    size_t n = (size_t)f->chunk * 2 * sizeof(float);
    int64_t at;
    int code = dt_scratch_transfer(f->fd, slot_of(f, k), n, (int64_t)k * (int64_t)n, write, &at);
    if (code == 0)
        return true;
    pthread_mutex_lock(&s->mu);
    s->failed = true;
    s->fail_write = write;
    s->fail_code = code;
    s->fail_at = at;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return false;
}

static void *io_main(void *arg) {
    stream *s = arg;
    int64_t n = s->f->n_chunks;
    for (int64_t k = 0; k < n + 2; k++) {
        if (k >= 2) { /* chunk k-2 is done with its slot: write it back before reusing it */
            if (!wait_for(s, &s->computed, k - 1))
                return NULL;
            if (s->do_write && !transfer(s, k - 2, true))
                return NULL;
        }
        if (k < n) {
            if (s->do_read && !transfer(s, k, false))
                return NULL;
            mark(s, &s->loaded, k + 1);
        }
    }
    return NULL;
}

static dt_status run(dt_offload_store *f, bool do_read, bool do_write, dt_offload_fn fn,
                     void *ctx) {
    if (f->n_chunks == 0)
        return DT_OK;
    stream s = {.f = f, .do_read = do_read, .do_write = do_write};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_t io;
    int rc = pthread_create(&io, NULL, io_main, &s);
    dt_status st = DT_OK;
    if (rc != 0) {
        st = dt_err_set(DT_ERR_OOM, "optimizer offload: cannot start the I/O thread: %s",
                        strerror(rc));
        goto done;
    }
    for (int64_t i = 0; i < f->n_chunks; i++) {
        if (!wait_for(&s, &s.loaded, i + 1))
            break;
        int64_t first = i * f->chunk;
        int64_t n = f->count - first < f->chunk ? f->count - first : f->chunk;
        float *m = slot_of(f, i);
        fn(ctx, first, n, m, m + f->chunk);
        mark(&s, &s.computed, i + 1);
    }
    pthread_join(io, NULL);
    if (s.failed) {
        const char *what = dt_scratch_failure(s.fail_code, s.fail_write);
        st = dt_err_set(DT_ERR_IO, "optimizer offload: %s %s at byte %lld failed: %s",
                        s.fail_write ? "writing" : "reading", f->path, (long long)s.fail_at,
                        what);
    }
done:
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    return st;
}

dt_status dt_offload_stream(dt_offload_store *f, dt_offload_fn fn, void *ctx) {
    return run(f, true, true, fn, ctx);
}

typedef struct copy_ctx {
    float *out_m, *out_v;
    const float *in_m, *in_v;
} copy_ctx;

static void copy_out(void *ctx, int64_t first, int64_t n, float *m, float *v) {
    const copy_ctx *c = ctx;
    if (c->out_m)
        memcpy(c->out_m + first, m, (size_t)n * sizeof *m);
    if (c->out_v)
        memcpy(c->out_v + first, v, (size_t)n * sizeof *v);
}

static void copy_in(void *ctx, int64_t first, int64_t n, float *m, float *v) {
    const copy_ctx *c = ctx;
    if (c->in_m)
        memcpy(m, c->in_m + first, (size_t)n * sizeof *m);
    if (c->in_v)
        memcpy(v, c->in_v + first, (size_t)n * sizeof *v);
}

dt_status dt_offload_read(dt_offload_store *f, float *m, float *v) {
    copy_ctx c = {.out_m = m, .out_v = v};
    return run(f, true, false, copy_out, &c);
}

dt_status dt_offload_write(dt_offload_store *f, const float *m, const float *v) {
    copy_ctx c = {.in_m = m, .in_v = v};
    return run(f, !(m && v), true, copy_in, &c); /* keeps the moment not given */
}

/* ---- ranges ------------------------------------------------------------------------------ */

/* element i of moment `which` lies in chunk i / C at float (i / C) 2 C + which C + i % C */
static dt_status range_io(dt_offload_store *f, int which, int64_t first, int64_t n, char *buf,
                          bool write) {
    if (first < 0 || n < 0 || first + n > f->count || which < 0 || which > 1)
        return dt_err_set(DT_ERR_ARG, "optimizer offload: range [%lld, +%lld) of moment %d "
                          "outside the %lld elements", (long long)first, (long long)n, which,
                          (long long)f->count);
    int64_t C = f->chunk;
    for (int64_t e = first; e < first + n;) {
        int64_t k = e / C, j = e % C, len = C - j < first + n - e ? C - j : first + n - e;
        off_t at = (off_t)((k * 2 * C + which * C + j) * (int64_t)sizeof(float));
        int64_t fail_at;
        int code = dt_scratch_transfer(f->fd, buf, (size_t)len * sizeof(float), (int64_t)at, write,
                                       &fail_at);
        if (code != 0)
            return dt_err_set(DT_ERR_IO, "optimizer offload: %s %s at byte %lld failed: %s",
                              write ? "writing" : "reading", f->path, (long long)fail_at,
                              dt_scratch_failure(code, write));
        buf += (size_t)len * sizeof(float);
        e += len;
    }
    return DT_OK;
}

dt_status dt_offload_read_range(dt_offload_store *f, int which, int64_t first, int64_t n,
                                float *out) {
    return range_io(f, which, first, n, (char *)out, false);
}

dt_status dt_offload_write_range(dt_offload_store *f, int which, int64_t first, int64_t n,
                                 const float *in) {
    return range_io(f, which, first, n, (char *)(uintptr_t)in, true);
}
