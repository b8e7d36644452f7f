/* The memory model's DiT rows (plan/memory_dit.c) against the DiT itself (models/dit.h), for
 * shapes whose sizes all differ, with and without labels:
 *   - the planner's fixed DiT sizes equal the model's;
 *   - each unit's predicted floats equal the unit's range in the built model's arena, and so
 *     the whole arena (dt_plan_local_units over every unit);
 *   - dt_plan_param_count equals the sum of the model's tensor sizes (unpadded);
 *   - the memory model's params, grads and optim of a one-process DiT run equal what the
 *     model and AdamW allocate (weights, gradients, two moments).
 */
#include <stdio.h>

#include "core/config.h"
#include "core/mem.h"
#include "harness.h"
#include "models/dit.h"
#include "plan/memory.h"
#include "plan/plan_impl.h"

static dt_model_config model_of(const dt_dit_config *d) {
    dt_config c;
    dt_config_defaults(&c);
    dt_model_config m = c.model;
    m.arch = DT_ARCH_DIT;
    m.frames = d->frames, m.channels = d->channels, m.height = d->height, m.width = d->width;
    m.patch_t = d->pt, m.patch_h = d->ph, m.patch_w = d->pw;
    m.n_layer = d->n_layer, m.n_head = d->n_head, m.n_embd = d->n_embd;
    m.n_classes = d->n_classes, m.attn = d->attn;
    return m;
}

static void check_shape(const dt_dit_config *dc) {
    dt_mem *mem = NULL;
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_dit_init(dc, &(dt_dit_opts){.B = 1, .training = true}, mem, &d));
    if (!d) {
        dt_mem_free(mem);
        return;
    }
    dt_model_config m = model_of(dc);
    int n_units = dt_dit_n_units(d);
    int64_t ucount[64];
    DT_CHECK(dt_plan_local_units(&m, 1, NULL, ucount) == n_units, "units %d",
             dt_plan_local_units(&m, 1, NULL, ucount));
    int64_t sum = 0;
    for (int u = 0; u < n_units; u++) {
        int64_t first, count;
        dt_dit_unit_range(d, u, &first, &count);
        DT_CHECK(ucount[u] == count, "L%d C%d classes %d unit %d: predicted %lld floats, the "
                 "model's range %lld", dc->n_layer, dc->n_embd, dc->n_classes, u,
                 (long long)ucount[u], (long long)count);
        sum += ucount[u];
    }
    DT_CHECK(sum == dt_dit_numel(d), "arena: predicted %lld floats, model %lld",
             (long long)sum, (long long)dt_dit_numel(d));
    double params = 0;
    for (int i = 0; i < dt_dit_n_params(d); i++)
        params += (double)dt_dit_param(d, i)->numel;
    DT_CHECK(dt_plan_param_count(&m) == params, "param count: predicted %.0f, model %.0f",
             dt_plan_param_count(&m), params);

    /* one process, fp32: weights, gradients and the two moments of the whole arena */
    dt_config c;
    dt_config_defaults(&c);
    c.model = m;
    c.train.batch_size = 1;
    c.train.seq_len = dt_dit_tokens(dc);
    dt_plan_mem pm;
    DT_CHECK_OK(dt_plan_memory(&c, 1, 0, NULL, &pm));
    int64_t n = dt_dit_numel(d) * (int64_t)sizeof(float);
    DT_CHECK(pm.cat[DT_MEM_PARAMS] == n && pm.cat[DT_MEM_GRADS] == n &&
                 pm.cat[DT_MEM_OPTIM] == 2 * n,
             "state: predicted params %lld grads %lld optim %lld, want %lld, %lld, %lld",
             (long long)pm.cat[DT_MEM_PARAMS], (long long)pm.cat[DT_MEM_GRADS],
             (long long)pm.cat[DT_MEM_OPTIM], (long long)n, (long long)n, (long long)(2 * n));
    dt_dit_free(d);
    dt_mem_free(mem);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK((int)DT_PLAN_DIT_FREQ_DIM == (int)DT_DIT_FREQ_DIM &&
                 (int)DT_PLAN_DIT_MLP_RATIO == (int)DT_DIT_MLP_RATIO,
             "planner's DiT sizes %d, %d; the model's %d, %d", DT_PLAN_DIT_FREQ_DIM,
             DT_PLAN_DIT_MLP_RATIO, DT_DIT_FREQ_DIM, DT_DIT_MLP_RATIO);
    const dt_dit_config shapes[] = {
        {.frames = 6, .channels = 3, .height = 4, .width = 10, .pt = 2, .ph = 2, .pw = 2,
         .n_layer = 3, .n_head = 4, .n_embd = 40, .n_classes = 5,
         .attn = DT_DIT_ATTN_SPATIAL_TEMPORAL},
        {.frames = 5, .channels = 1, .height = 6, .width = 6, .pt = 1, .ph = 3, .pw = 2,
         .n_layer = 2, .n_head = 3, .n_embd = 42, .n_classes = 0, .attn = DT_DIT_ATTN_FULL},
        {.frames = 8, .channels = 3, .height = 16, .width = 16, .pt = 1, .ph = 2, .pw = 2,
         .n_layer = 4, .n_head = 4, .n_embd = 64, .n_classes = 3,
         .attn = DT_DIT_ATTN_SPATIAL_TEMPORAL},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(&shapes[i]);
    return DT_TEST_END();
}
