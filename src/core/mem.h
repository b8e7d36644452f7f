/* The memory accountant: every buffer dtrain allocates is tagged with a category and a name.
 *
 * It tracks live and peak bytes per category and the peak of the total (the largest sum of
 * live bytes at any instant, not the sum of per-category peaks). The planner predicts the
 * same categories, so prediction and measurement can be compared line by line.
 * A dt_mem is owned by one thread of control; it is not thread-safe (allocation happens
 * at set-up and between steps, never inside parallel regions).
 */
#ifndef DT_CORE_MEM_H
#define DT_CORE_MEM_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

typedef enum dt_mem_cat {
    DT_MEM_PARAMS,
    DT_MEM_GRADS,
    DT_MEM_OPTIM,
    DT_MEM_ACTS,
    DT_MEM_COMM,
    DT_MEM_TEMP,
    DT_MEM_CAT_COUNT
} dt_mem_cat;

typedef struct dt_mem dt_mem;

dt_status dt_mem_init(dt_mem **out);
void dt_mem_free(dt_mem *m); /* releases every buffer still live */

/* 64-byte aligned, zero-filled buffer of `bytes` (0 gives a valid unique pointer). */
dt_status dt_mem_alloc(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, void **out);
void dt_mem_release(dt_mem *m, void *p); /* NULL is a no-op */

size_t dt_mem_live(const dt_mem *m, dt_mem_cat cat);
size_t dt_mem_peak(const dt_mem *m, dt_mem_cat cat);
size_t dt_mem_live_total(const dt_mem *m);
size_t dt_mem_peak_total(const dt_mem *m);
const char *dt_mem_cat_name(dt_mem_cat cat); /* "params", "grads", "optim", ... (JSON keys) */

/* Human table of live/peak per category, plus the largest buffers. */
void dt_mem_print_table(const dt_mem *m, FILE *f);
/* {"peak": {"params":…, …, "total":…}, "live": {…}, "buffers": [{"name","cat","bytes"}…]} */
dt_status dt_mem_write_json(const dt_mem *m, const char *path);

#endif
