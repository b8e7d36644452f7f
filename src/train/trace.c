/* Step timeline as Chrome-trace JSON. See trace.h.
 * Rank 0 collects the spans with one broadcast per rank (count, then the spans as doubles):
 * traces are small (a few spans per micro-batch) and written once, at the end of a run. */
#include "train/trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/grow.h"
#include "io/atomic.h"

enum { FIELDS = 6 }; /* a span as doubles: t0, t1, kind, chunk, mb, step */

static const char *const span_names[DT_SPAN_KIND_COUNT] = {
    "step", "F", "B", "W", "send", "recv", "collective", "optimizer", "FB", "idle"};

const char *dt_span_name(dt_span_kind k) {
    return k >= 0 && k < DT_SPAN_KIND_COUNT ? span_names[k] : "?";
}

dt_status dt_trace_init(dt_trace *t, dt_comm *world) {
    memset(t, 0, sizeof *t);
    DT_TRY(dt_comm_barrier(world));
    t->origin = dt_now();
    return DT_OK;
}

void dt_trace_free(dt_trace *t) {
    free(t->spans);
    memset(t, 0, sizeof *t);
}

double dt_trace_now(const dt_trace *t) { return t ? dt_now() - t->origin : 0; }

dt_status dt_trace_add(dt_trace *t, dt_span_kind k, int chunk, int mb, int step, double t0,
                       double t1) {
    if (!t)
        return DT_OK;
    dt_span *s = dt_grow(t->spans, &t->cap, t->n, sizeof *s, 256);
    if (!s)
        return dt_err_set(DT_ERR_OOM, "trace: out of memory for %d spans", 2 * t->cap);
    t->spans = s;
    t->spans[t->n++] = (dt_span){.t0 = t0, .t1 = t1, .kind = k, .chunk = chunk, .mb = mb,
                                 .step = step};
    return DT_OK;
}

static int by_start(const void *a, const void *b) {
    double x = ((const dt_span *)a)->t0, y = ((const dt_span *)b)->t0;
    return (x > y) - (x < y);
}

/* Calls emit(ctx, t0, t1) for every idle gap inside the step span `st`, over the busy spans
 * sorted[0..n) (sorted by start); returns the busy time (union) inside the step. */
static double gaps(const dt_span *st, const dt_span *sorted, int n,
                   void (*emit)(void *, double, double), void *ctx) {
    double at = st->t0, busy = 0;
    for (int i = 0; i < n; i++) {
        const dt_span *s = &sorted[i];
        if (s->kind == DT_SPAN_STEP || s->t1 <= st->t0 || s->t0 >= st->t1)
            continue;
        double a = s->t0 > at ? s->t0 : at, b = s->t1 < st->t1 ? s->t1 : st->t1;
        if (s->t0 > at && emit)
            emit(ctx, at, s->t0);
        if (b > a)
            busy += b - a;
        at = b > at ? b : at;
    }
    if (st->t1 > at && emit)
        emit(ctx, at, st->t1);
    return busy;
}

static dt_span *sorted_copy(const dt_span *spans, int n) {
    dt_span *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (s) {
        memcpy(s, spans, (size_t)n * sizeof *s);
        qsort(s, (size_t)n, sizeof *s, by_start);
    }
    return s;
}

double dt_trace_idle(const dt_span *spans, int n, double *busy_out) {
    dt_span *s = sorted_copy(spans, n);
    double idle = 0, busy = 0;
    for (int i = 0; s && i < n; i++) {
        if (s[i].kind != DT_SPAN_STEP)
            continue;
        double b = gaps(&s[i], s, n, NULL, NULL);
        busy += b;
        idle += (s[i].t1 - s[i].t0) - b;
    }
    free(s);
    if (busy_out)
        *busy_out = busy;
    return idle;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

typedef struct writer {
    char *buf;
    size_t len, cap;
    bool oom, first;
    int rank;
} writer;

__attribute__((format(printf, 2, 3))) static void put(writer *w, const char *fmt, ...) {
    if (w->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(w->buf + w->len, w->cap - w->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && w->len + (size_t)n < w->cap) {
            w->len += (size_t)n;
            return;
        }
        size_t cap = w->cap * 2 + (size_t)(n > 0 ? n : 0) + 1024;
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->oom = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
}

static void event(writer *w, const char *name, const char *cat, double t0, double t1, int chunk,
                  int mb, int step) {
    put(w, "%s\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, "
        "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"chunk\": %d, \"mb\": %d, \"step\": %d}}",
        w->first ? "" : ",", name, cat, w->rank, 1e6 * t0, 1e6 * (t1 - t0), chunk, mb, step);
    w->first = false;
}

typedef struct idle_ctx {
    writer *w;
    int step;
} idle_ctx;

static void emit_idle(void *ctx, double a, double b) {
    idle_ctx *c = ctx;
    event(c->w, "idle", "idle", a, b, -1, -1, c->step);
}

static void rank_events(writer *w, int rank, const dt_span *spans, int n) {
    w->rank = rank;
    put(w, "%s\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": "
        "{\"name\": \"rank %d\"}}", w->first ? "" : ",", rank, rank);
    w->first = false;
    dt_span *s = sorted_copy(spans, n);
    for (int i = 0; s && i < n; i++) {
        const dt_span *x = &s[i];
        bool compute = x->kind <= DT_SPAN_WEIGHT || x->kind == DT_SPAN_MICRO_BATCH ||
                       x->kind == DT_SPAN_OPTIMIZER;
        const char *cat = x->kind == DT_SPAN_STEP ? "step" : compute ? "compute" : "communication";
        char name[32];
        if (x->mb >= 0)
            snprintf(name, sizeof name, "%s%d", dt_span_name(x->kind), x->mb);
        else
            snprintf(name, sizeof name, "%s", dt_span_name(x->kind));
        event(w, name, cat, x->t0, x->t1, x->chunk, x->mb, x->step);
        if (x->kind == DT_SPAN_STEP) {
            idle_ctx c = {.w = w, .step = x->step};
            gaps(x, s, n, emit_idle, &c);
        }
    }
    if (!s)
        w->oom = true;
    free(s);
}

static void to_doubles(const dt_span *s, int n, double *d) {
    for (int i = 0; i < n; i++) {
        double *r = d + (size_t)i * FIELDS;
        r[0] = s[i].t0, r[1] = s[i].t1, r[2] = s[i].kind, r[3] = s[i].chunk, r[4] = s[i].mb;
        r[5] = s[i].step;
    }
}

static void from_doubles(const double *d, int n, dt_span *s) {
    for (int i = 0; i < n; i++) {
        const double *r = d + (size_t)i * FIELDS;
        s[i] = (dt_span){.t0 = r[0], .t1 = r[1], .kind = (int)r[2], .chunk = (int)r[3],
                         .mb = (int)r[4], .step = (int)r[5]};
    }
}

dt_status dt_trace_write(dt_trace *t, dt_comm *world, const char *path) {
    writer w = {.first = true};
    dt_status st = DT_OK;
    bool root = world->rank == 0;
    if (root)
        put(&w, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    for (int r = 0; r < world->size; r++) {
        int64_t n = r == world->rank ? t->n : 0;
        DT_TRY(dt_comm_broadcast(world, &n, sizeof n, r));
        double *d = malloc((size_t)(n > 0 ? n : 1) * FIELDS * sizeof *d);
        dt_span *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
        dt_status local = d && s ? DT_OK : dt_err_set(DT_ERR_OOM, "trace: out of memory");
        local = dt_comm_agree(world, local);
        if (local == DT_OK) {
            if (r == world->rank)
                to_doubles(t->spans, (int)n, d);
            local = dt_comm_broadcast(world, d, n * FIELDS * (int64_t)sizeof *d, r);
        }
        if (local == DT_OK && root) {
            from_doubles(d, (int)n, s);
            rank_events(&w, r, s, (int)n);
        }
        free(d);
        free(s);
        if (local != DT_OK) {
            free(w.buf);
            return local;
        }
    }
    if (root) {
        put(&w, "\n]}\n");
        st = w.oom ? dt_err_set(DT_ERR_OOM, "trace: out of memory writing %s", path)
                   : dt_atomic_write_file(path, w.buf, w.len);
    }
    free(w.buf);
    return dt_comm_agree(world, st);
}
