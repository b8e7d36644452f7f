/* Memory accountant: tagged aligned allocations with live/peak bookkeeping, and the optional
 * event log (timeline) of allocations, releases and arena occupancy. See mem.h. */
#include "core/mem.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/grow.h"

typedef struct mem_buf {
    void *ptr;
    size_t bytes;
    dt_mem_cat cat;
    char name[64];
} mem_buf;

struct dt_mem {
    mem_buf *bufs;
    int n_bufs, cap_bufs;
    size_t live[DT_MEM_CAT_COUNT], peak[DT_MEM_CAT_COUNT];
    size_t live_total, peak_total;
    size_t in_use[DT_MEM_CAT_COUNT];
    /* timeline: events[0 .. n_events) of cap_events allocated, max_events at most */
    dt_mem_event *events;
    int n_events, cap_events, max_events;
    int burst, burst_max; /* events since the last reserve, and the most of any such run */
    long long dropped;
    int first_dropped_step;
    double t0;
    int step, mb;
    dt_mem_phase phase;
};

static void log_event(dt_mem *m, dt_mem_event_kind kind, dt_mem_cat cat, const char *name,
                      size_t bytes, int slot, int block);

static const char *cat_names[DT_MEM_CAT_COUNT] = {"params", "grads", "optim",
                                                  "activations", "comm", "temp"};

const char *dt_mem_cat_name(dt_mem_cat cat) {
    return cat >= 0 && cat < DT_MEM_CAT_COUNT ? cat_names[cat] : "?";
}

dt_status dt_mem_init(dt_mem **out) {
    *out = NULL;
    dt_mem *m = calloc(1, sizeof *m);
    if (!m)
        return dt_err_set(DT_ERR_OOM, "memory accountant: out of memory");
    m->mb = -1; /* context: step 0 (set-up), no micro-batch */
    *out = m;
    return DT_OK;
}

void dt_mem_free(dt_mem *m) {
    if (!m)
        return;
    for (int i = 0; i < m->n_bufs; i++)
        free(m->bufs[i].ptr);
    free(m->bufs);
    free(m->events);
    free(m);
}

dt_status dt_mem_alloc(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, void **out) {
    *out = NULL;
    DT_ASSERT(cat >= 0 && cat < DT_MEM_CAT_COUNT);
    mem_buf *grown = dt_grow(m->bufs, &m->cap_bufs, m->n_bufs, sizeof *grown, 64);
    if (!grown)
        return dt_err_set(DT_ERR_OOM, "memory accountant: out of memory");
    m->bufs = grown;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "out of memory allocating %zu bytes for %s (%s)", bytes,
                          name, cat_names[cat]);
    memset(p, 0, rounded ? rounded : 64);
    mem_buf *b = &m->bufs[m->n_bufs++];
    b->ptr = p;
    b->bytes = bytes;
    b->cat = cat;
    snprintf(b->name, sizeof b->name, "%s", name);
    m->live[cat] += bytes;
    m->live_total += bytes;
    if (m->live[cat] > m->peak[cat])
        m->peak[cat] = m->live[cat];
    if (m->live_total > m->peak_total)
        m->peak_total = m->live_total;
    log_event(m, DT_MEM_EV_ALLOC, cat, name, bytes, -1, -1);
    *out = p;
    return DT_OK;
}

void dt_mem_release(dt_mem *m, void *p) {
    if (!p)
        return;
    for (int i = m->n_bufs - 1; i >= 0; i--) {
        if (m->bufs[i].ptr != p)
            continue;
        m->live[m->bufs[i].cat] -= m->bufs[i].bytes;
        m->live_total -= m->bufs[i].bytes;
        log_event(m, DT_MEM_EV_FREE, m->bufs[i].cat, m->bufs[i].name, m->bufs[i].bytes, -1,
                  -1);
        free(p);
        m->bufs[i] = m->bufs[--m->n_bufs];
        return;
    }
    DT_ASSERT(!"dt_mem_release: pointer not owned by this accountant");
}

size_t dt_mem_live(const dt_mem *m, dt_mem_cat cat) { return m->live[cat]; }
size_t dt_mem_peak(const dt_mem *m, dt_mem_cat cat) { return m->peak[cat]; }
size_t dt_mem_live_total(const dt_mem *m) { return m->live_total; }
size_t dt_mem_peak_total(const dt_mem *m) { return m->peak_total; }

static int by_size_desc(const void *a, const void *b) {
    size_t x = ((const mem_buf *)a)->bytes, y = ((const mem_buf *)b)->bytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

void dt_mem_print_table(const dt_mem *m, FILE *f) {
    fprintf(f, "memory            live MiB    peak MiB\n");
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        fprintf(f, "  %-12s %10.2f  %10.2f\n", cat_names[c], m->live[c] / 1048576.0,
                m->peak[c] / 1048576.0);
    fprintf(f, "  %-12s %10.2f  %10.2f\n", "total", m->live_total / 1048576.0,
            m->peak_total / 1048576.0);
    int n = m->n_bufs < 5 ? m->n_bufs : 5;
    if (n == 0)
        return;
    mem_buf *sorted = malloc((size_t)m->n_bufs * sizeof *sorted);
    if (!sorted)
        return;
    memcpy(sorted, m->bufs, (size_t)m->n_bufs * sizeof *sorted);
    qsort(sorted, (size_t)m->n_bufs, sizeof *sorted, by_size_desc);
    fprintf(f, "  largest live buffers:\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "    %-28s %-12s %10.2f MiB\n", sorted[i].name, cat_names[sorted[i].cat],
                sorted[i].bytes / 1048576.0);
    free(sorted);
}

static cJSON *cats_json(const size_t *v, size_t total) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        cJSON_AddNumberToObject(o, cat_names[c], (double)v[c]);
    cJSON_AddNumberToObject(o, "total", (double)total);
    return o;
}

dt_status dt_mem_write_json(const dt_mem *m, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "peak", cats_json(m->peak, m->peak_total));
    cJSON_AddItemToObject(root, "live", cats_json(m->live, m->live_total));
    cJSON *bufs = cJSON_AddArrayToObject(root, "buffers");
    for (int i = 0; i < m->n_bufs; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", m->bufs[i].name);
        cJSON_AddStringToObject(b, "cat", cat_names[m->bufs[i].cat]);
        cJSON_AddNumberToObject(b, "bytes", (double)m->bufs[i].bytes);
        cJSON_AddItemToArray(bufs, b);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return dt_err_set(DT_ERR_OOM, "memory report: out of memory");
    FILE *f = fopen(path, "w");
    if (!f) {
        free(text);
        return dt_err_set(DT_ERR_IO, "cannot write memory report %s", path);
    }
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(text);
    return ok ? DT_OK : dt_err_set(DT_ERR_IO, "short write to memory report %s", path);
}

/* ---- timeline ------------------------------------------------------------------------- */

static const char *phase_names[DT_MEM_PHASE_COUNT] = {
    "setup", "forward", "head", "backward", "weights", "collective", "optimizer", "eval",
    "checkpoint", "export"};
static const char *kind_names[DT_MEM_EV_KIND_COUNT] = {"alloc", "free", "use", "unuse"};

const char *dt_mem_phase_name(dt_mem_phase phase) {
    return phase >= 0 && phase < DT_MEM_PHASE_COUNT ? phase_names[phase] : "?";
}

const char *dt_mem_event_kind_name(dt_mem_event_kind k) {
    return k >= 0 && k < DT_MEM_EV_KIND_COUNT ? kind_names[k] : "?";
}

static dt_status grow_events(dt_mem *m, int want) {
    if (want > m->max_events)
        want = m->max_events;
    if (want <= m->cap_events)
        return DT_OK;
    int cap = m->cap_events ? m->cap_events : 1024;
    while (cap < want)
        cap = cap > m->max_events / 2 ? m->max_events : 2 * cap;
    dt_mem_event *e = realloc(m->events, (size_t)cap * sizeof *e);
    if (!e)
        return dt_err_set(DT_ERR_OOM, "memory timeline: out of memory for %d events", cap);
    m->events = e;
    m->cap_events = cap;
    return DT_OK;
}

dt_status dt_mem_timeline_start(dt_mem *m, int max_events) {
    if (max_events < 1)
        return dt_err_set(DT_ERR_ARG, "memory timeline: max_events %d < 1", max_events);
    m->max_events = max_events;
    m->first_dropped_step = -1;
    m->t0 = dt_now();
    return grow_events(m, 4096);
}

dt_status dt_mem_timeline_reserve(dt_mem *m, int n) {
    if (!m->max_events)
        return DT_OK;
    m->burst_max = m->burst > m->burst_max ? m->burst : m->burst_max;
    m->burst = 0;
    int room = n > 2 * m->burst_max ? n : 2 * m->burst_max;
    long long want = (long long)m->n_events + room;
    return grow_events(m, want > m->max_events ? m->max_events : (int)want);
}

void dt_mem_set_context(dt_mem *m, int step, dt_mem_phase phase, int mb) {
    m->step = step;
    m->phase = phase;
    m->mb = mb;
}

void dt_mem_set_phase(dt_mem *m, dt_mem_phase phase) { m->phase = phase; }
dt_mem_phase dt_mem_phase_now(const dt_mem *m) { return m->phase; }

void dt_mem_context(const dt_mem *m, int *step, dt_mem_phase *phase, int *mb) {
    *step = m->step;
    *phase = m->phase;
    *mb = m->mb;
}

/* Where memory is allocated anyway, a full log may grow; elsewhere it drops the event. */
static bool may_grow(const dt_mem *m) {
    return m->phase == DT_MEM_PHASE_SETUP || m->phase == DT_MEM_PHASE_CHECKPOINT ||
           m->phase == DT_MEM_PHASE_EXPORT;
}

static void log_event(dt_mem *m, dt_mem_event_kind kind, dt_mem_cat cat, const char *name,
                      size_t bytes, int slot, int block) {
    if (!m->max_events)
        return;
    m->burst++;
    if (m->n_events == m->cap_events && may_grow(m) &&
        grow_events(m, m->cap_events + 1) != DT_OK)
        dt_err_clear();
    if (m->n_events == m->cap_events) { /* at the cap, or not allowed to grow here */
        if (m->dropped++ == 0)
            m->first_dropped_step = m->step;
        return;
    }
    dt_mem_event *e = &m->events[m->n_events++];
    e->t = dt_now() - m->t0;
    e->bytes = bytes;
    memcpy(e->live, m->live, sizeof e->live);
    memcpy(e->in_use, m->in_use, sizeof e->in_use);
    e->step = m->step;
    e->mb = m->mb;
    e->slot = slot;
    e->block = block;
    e->kind = (unsigned char)kind;
    e->cat = (unsigned char)cat;
    e->phase = (unsigned char)m->phase;
    snprintf(e->name, sizeof e->name, "%s", name);
}

void dt_mem_use(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, int slot,
                int block) {
    DT_ASSERT(cat >= 0 && cat < DT_MEM_CAT_COUNT);
    m->in_use[cat] += bytes;
    log_event(m, DT_MEM_EV_USE, cat, name, bytes, slot, block);
}

void dt_mem_unuse(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, int slot,
                  int block) {
    DT_ASSERT(cat >= 0 && cat < DT_MEM_CAT_COUNT && m->in_use[cat] >= bytes);
    m->in_use[cat] -= bytes;
    log_event(m, DT_MEM_EV_UNUSE, cat, name, bytes, slot, block);
}

void dt_mem_mark_saved(dt_mem *m, const char *prefix, int slot, int block, size_t bytes, bool *live,
                       bool now) {
    if (*live == now)
        return;
    *live = now;
    char name[64];
    snprintf(name, sizeof name, "%s.%d", prefix, block);
    if (now)
        dt_mem_use(m, DT_MEM_ACTS, name, bytes, slot, block);
    else
        dt_mem_unuse(m, DT_MEM_ACTS, name, bytes, slot, block);
}

size_t dt_mem_in_use(const dt_mem *m, dt_mem_cat cat) { return m->in_use[cat]; }
int dt_mem_n_events(const dt_mem *m) { return m->n_events; }
long long dt_mem_dropped(const dt_mem *m) { return m->dropped; }

const dt_mem_event *dt_mem_event_at(const dt_mem *m, int i) {
    return i >= 0 && i < m->n_events ? &m->events[i] : NULL;
}

/* names are ours, but a JSON string must survive any byte */
static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* {"params": n, ..., "temp": n[, "total": total]} */
static void put_cats(FILE *f, const size_t *v, bool with_total, size_t total) {
    fputc('{', f);
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        fprintf(f, "%s\"%s\": %zu", c ? ", " : "", cat_names[c], v[c]);
    if (with_total)
        fprintf(f, ", \"total\": %zu", total);
    fputc('}', f);
}

static size_t sum_cats(const size_t *v) {
    size_t s = 0;
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
        s += v[c];
    return s;
}

static void put_names(FILE *f, const char *key, const char *const *names, int n) {
    fprintf(f, "\"%s\": [", key);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", names[i]);
    fputs("],\n", f);
}

static void put_event(FILE *f, const dt_mem_event *e) {
    fprintf(f, "{\"t\": %.6f, \"kind\": \"%s\", \"cat\": \"%s\", \"name\": ", e->t,
            kind_names[e->kind], cat_names[e->cat]);
    put_json_string(f, e->name);
    fprintf(f, ", \"bytes\": %zu, \"step\": %d, \"phase\": \"%s\", \"mb\": %d, \"slot\": %d, "
            "\"block\": %d, \"live\": ", e->bytes, e->step, phase_names[e->phase], e->mb,
            e->slot, e->block);
    put_cats(f, e->live, true, sum_cats(e->live));
    fputs(", \"in_use\": ", f);
    put_cats(f, e->in_use, false, 0);
    fputc('}', f);
}

dt_status dt_mem_write_timeline(const dt_mem *m, int rank, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f)
        return dt_err_set(DT_ERR_IO, "cannot write memory timeline %s: %s", path,
                          strerror(errno));
    fprintf(f, "{\"format\": \"dtrain-mem-timeline\", \"version\": 1, \"rank\": %d,\n", rank);
    put_names(f, "categories", cat_names, DT_MEM_CAT_COUNT);
    put_names(f, "phases", phase_names, DT_MEM_PHASE_COUNT);
    fprintf(f, "\"max_events\": %d, \"dropped\": %lld, \"first_dropped_step\": %d,\n",
            m->max_events, m->dropped, m->first_dropped_step);
    fputs("\"peak\": ", f);
    put_cats(f, m->peak, true, m->peak_total); /* not the sum of the peaks */
    fputs(",\n\"live\": ", f);
    put_cats(f, m->live, true, m->live_total);
    fputs(",\n\"events\": [\n", f);
    for (int i = 0; i < m->n_events; i++) {
        put_event(f, &m->events[i]);
        fputs(i + 1 < m->n_events ? ",\n" : "\n", f);
    }
    fputs("]}\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    return ok ? DT_OK : dt_err_set(DT_ERR_IO, "short write to memory timeline %s", path);
}

double dt_mem_physical_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}
