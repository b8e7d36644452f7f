/* Memory accountant: tagged aligned allocations with live/peak bookkeeping. See mem.h. */
#include "core/mem.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
};

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
    *out = m;
    return DT_OK;
}

void dt_mem_free(dt_mem *m) {
    if (!m)
        return;
    for (int i = 0; i < m->n_bufs; i++)
        free(m->bufs[i].ptr);
    free(m->bufs);
    free(m);
}

dt_status dt_mem_alloc(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, void **out) {
    *out = NULL;
    DT_ASSERT(cat >= 0 && cat < DT_MEM_CAT_COUNT);
    if (m->n_bufs == m->cap_bufs) {
        int cap = m->cap_bufs ? 2 * m->cap_bufs : 64;
        mem_buf *b = realloc(m->bufs, (size_t)cap * sizeof *b);
        if (!b)
            return dt_err_set(DT_ERR_OOM, "memory accountant: out of memory");
        m->bufs = b;
        m->cap_bufs = cap;
    }
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
