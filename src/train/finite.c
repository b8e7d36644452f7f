/* Non-finite values: where they are, and the errors that name them. See finite.h. */
#include "train/finite.h"

#include <math.h>
#include <stdio.h>

#include "core/comm.h"
#include "train/engine.h"

bool dt_finite_first_bad(const dt_model *g, bool full, const float *x, int64_t first,
                         int64_t count, char *where, size_t n) {
    int np = full ? dt_model_n_full_params(g) : dt_model_n_params(g);
    for (int i = 0; i < np; i++) {
        const dt_param *p = full ? dt_model_full_param(g, i) : dt_model_param(g, i);
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

/* Collective over world: where the first non-finite weight (grads false) or reduced gradient
 * is, agreed: the lowest rank that holds one sends "on rank R at TENSOR[i] = v" to all, so
 * every rank reports the same. *found false when no rank holds one. */
static dt_status locate(dt_engine *e, dt_comm *world, bool grads, char *where, size_t n,
                       bool *found) {
    const float *x;
    int64_t first, count;
    char mine[200] = "";
    dt_engine_own_range(e, grads, &x, &first, &count);
    bool bad = dt_finite_first_bad(dt_engine_model(e), false, x, first, count, mine, sizeof mine);
    /* the lowest bad rank: the largest (size - rank) over the bad ones */
    int32_t top = bad ? world->size - world->rank : 0;
    DT_TRY(dt_comm_allreduce_max_i32(world, &top, 1));
    int who = top > 0 ? world->size - top : -1;
    *found = who >= 0;
    if (!*found)
        return DT_OK;
    char msg[256];
    snprintf(msg, sizeof msg, "on rank %d at %s", world->rank, mine);
    DT_TRY(dt_comm_broadcast(world, msg, sizeof msg, who));
    snprintf(where, n, "%s", msg);
    return DT_OK;
}

dt_status dt_finite_check_weights(dt_engine *e, dt_comm *world, int64_t step, float grad_clip,
                                  const char *what) {
    char where[256];
    bool found;
    DT_TRY(locate(e, world, false, where, sizeof where, &found));
    if (!found)
        return DT_OK;
    return dt_err_set(DT_ERR_ARG, "after step %lld the weights are not finite (first %s): "
                      "not %s; nothing was written. Training diverged: lower optim.lr%s",
                      (long long)step, where, what,
                      grad_clip > 0 ? "" : " or set plugin.grad_clip");
}

dt_status dt_finite_step_error(dt_engine *e, dt_comm *world, int step, float lr,
                               float grad_clip) {
    char where[256];
    bool found;
    DT_TRY(locate(e, world, false, where, sizeof where, &found));
    if (found) /* the weights went first: the previous update (or a file) made them so */
        return dt_err_set(DT_ERR_ARG, "step %d: the weights are not finite before its update "
                          "(first %s); training diverged at an earlier step (lr %g): lower "
                          "optim.lr%s", step, where, (double)lr,
                          grad_clip > 0 ? "" : " or set plugin.grad_clip");
    DT_TRY(locate(e, world, true, where, sizeof where, &found));
    char clip[96] = " or set plugin.grad_clip";
    if (grad_clip > 0)
        snprintf(clip, sizeof clip, " (plugin.grad_clip=%g is set: clipping cannot repair a "
                 "non-finite gradient)", (double)grad_clip);
    if (!found)
        snprintf(where, sizeof where, "in no single element: the sum of squares overflowed");
    return dt_err_set(DT_ERR_ARG, "step %d: the gradients are not finite (first %s); nothing "
                      "was updated or saved. Lower optim.lr (the step's lr: %g)%s", step, where,
                      (double)lr, clip);
}
