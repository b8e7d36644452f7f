/* The first non-finite element of an arena range, named by its tensor. See finite.h. */
#include "train/finite.h"

#include <math.h>
#include <stdio.h>

bool dt_finite_first_bad(const dt_gpt *g, bool full, const float *x, int64_t first,
                         int64_t count, char *where, size_t n) {
    int np = full ? dt_gpt_n_full_params(g) : dt_gpt_n_params(g);
    for (int i = 0; i < np; i++) {
        const dt_param *p = full ? dt_gpt_full_param(g, i) : dt_gpt_param(g, i);
        int64_t a = p->offset > first ? p->offset : first;
        int64_t b = p->offset + p->numel < first + count ? p->offset + p->numel : first + count;
        for (int64_t e = a; e < b; e++)
            if (!isfinite(x[e - first])) {
                snprintf(where, n, "%s[%lld] = %g", p->name, (long long)(e - p->offset),
                         (double)x[e - first]);
                return true;
            }
    }
    return false;
}
