/* Memory figures of a run (public API): every buffer dtrain allocates is counted in one
 * category; a booster's accountant (dt_booster_mem) reports live and peak bytes per category
 * and the peak of the total (the largest sum at any instant). The planner (dtrain plan)
 * predicts the same categories. Ownership: the dt_mem belongs to the booster (opaque; valid
 * until dt_booster_free). Thread-safety: read it from the thread that drives the booster.
 */
#ifndef DTRAIN_MEM_H
#define DTRAIN_MEM_H

#include <stddef.h>

#include "dtrain/export.h"

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

DT_API size_t dt_mem_live(const dt_mem *m, dt_mem_cat cat);
DT_API size_t dt_mem_peak(const dt_mem *m, dt_mem_cat cat);
DT_API size_t dt_mem_live_total(const dt_mem *m);
DT_API size_t dt_mem_peak_total(const dt_mem *m);
/* "params", "grads", "optim", ... (static strings, the JSON keys of mem_report) */
DT_API const char *dt_mem_cat_name(dt_mem_cat cat);

#endif
