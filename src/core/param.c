/* Initial values of any slice of a parameter arena. See param.h. */
#include "core/param.h"

#include <string.h>

#include "core/rng.h"

void dt_param_init_range(const dt_param *table, int n_params, uint64_t seed, int64_t first,
                         int64_t count, float *out) {
    memset(out, 0, (size_t)count * sizeof *out); /* padding between tensors stays zero */
    int64_t end = first + count;
    for (int i = 0; i < n_params; i++) {
        const dt_param *p = &table[i];
        int64_t a = p->offset > first ? p->offset : first;
        int64_t b = p->offset + p->numel < end ? p->offset + p->numel : end;
        if (a >= b)
            continue;
        float *dst = out + (a - first);
        if (p->init == DT_INIT_NORMAL)
            dt_rng_fill_normal(seed, p->name, a - p->offset, b - a, 0.0f, p->std, dst);
        else if (p->init == DT_INIT_ONES)
            for (int64_t j = 0; j < b - a; j++)
                dst[j] = 1.0f;
    }
}
