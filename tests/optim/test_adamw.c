/* AdamW over a parameter table: per-tensor weight decay, a shard's update equals the same
 * elements of the whole-arena update (ZeRO relies on it), the LR schedule's shape, and
 * PyTorch's clipping factor. */
#include <math.h>
#include <string.h>

#include "core/config.h"
#include "core/mem.h"
#include "harness.h"
#include "optim/adamw.h"

static dt_param P(const char *name, int64_t offset, int64_t numel, bool decay) {
    dt_param p = {.ndim = decay ? 2 : 1, .offset = offset, .numel = numel, .decay = decay};
    strcpy(p.name, name);
    p.shape[0] = numel;
    return p;
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_optim_config oc = cfg.optim;
    oc.weight_decay = 0.5f;
    enum { N = 100 };
    dt_param table[] = {P("w", 0, 60, true), P("b", 64, 30, false)}; /* 4 floats of padding */
    float w_full[N], w_part[N], g[N];
    dt_test_fill(w_full, N, 1, 1.0f);
    dt_test_fill(g, N, 2, 0.1f);
    memcpy(w_part, w_full, sizeof w_full);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_adamw *full, *a, *b;
    DT_CHECK_OK(dt_adamw_init(&oc, table, 2, 0, N, mem, &full));
    /* two shards cutting the first tensor in the middle */
    DT_CHECK_OK(dt_adamw_init(&oc, table, 2, 0, 37, mem, &a));
    DT_CHECK_OK(dt_adamw_init(&oc, table, 2, 37, N - 37, mem, &b));
    for (int step = 0; step < 3; step++) {
        dt_adamw_step(full, w_full, g, NULL, 1e-2f, 0.5f);
        dt_adamw_step(a, w_part, g, NULL, 1e-2f, 0.5f);
        dt_adamw_step(b, w_part + 37, g + 37, NULL, 1e-2f, 0.5f);
    }
    DT_CHECK(memcmp(w_full, w_part, sizeof w_full) == 0, "sharded update differs from whole");
    /* decay only where the table says so: with zero gradient, a bias does not move */
    float w1[N] = {0}, g0[N] = {0};
    for (int i = 0; i < N; i++)
        w1[i] = 1.0f;
    dt_adamw *c;
    DT_CHECK_OK(dt_adamw_init(&oc, table, 2, 0, N, mem, &c));
    dt_adamw_step(c, w1, g0, NULL, 0.1f, 1.0f);
    DT_CHECK_CLOSE(w1[10], 1.0 - 0.1 * 0.5, 1e-6);
    DT_CHECK(w1[70] == 1.0f, "bias decayed to %g", w1[70]);
    DT_CHECK(dt_adamw_steps_taken(c) == 1, "step count");

    /* schedule: warmup reaches lr, cosine ends at min_lr, constant stays */
    oc.lr = 1.0f, oc.min_lr = 0.1f, oc.warmup_steps = 4, oc.schedule = DT_SCHED_COSINE;
    DT_CHECK_CLOSE(dt_lr_at(&oc, 0, 20), 0.25, 1e-6);
    DT_CHECK_CLOSE(dt_lr_at(&oc, 3, 20), 1.0, 1e-6);
    DT_CHECK_CLOSE(dt_lr_at(&oc, 4, 20), 1.0, 1e-6);
    DT_CHECK_CLOSE(dt_lr_at(&oc, 12, 20), 0.1 + 0.45 * (1 + cos(M_PI * 0.5)), 1e-6);
    DT_CHECK(dt_lr_at(&oc, 19, 20) > 0.1f && dt_lr_at(&oc, 19, 20) < 0.11f, "near min_lr");
    oc.schedule = DT_SCHED_CONSTANT;
    DT_CHECK_CLOSE(dt_lr_at(&oc, 15, 20), 1.0, 1e-7);
    /* clipping factor as torch.nn.utils.clip_grad_norm_ */
    DT_CHECK_CLOSE(dt_clip_coef(4.0, 1.0f), 1.0 / (4.0 + 1e-6), 1e-7);
    DT_CHECK(dt_clip_coef(0.5, 1.0f) == 1.0f, "no clipping below the threshold");
    DT_CHECK(dt_clip_coef(100.0, 0.0f) == 1.0f, "grad_clip 0 is off");
    dt_adamw_free(full), dt_adamw_free(a), dt_adamw_free(b), dt_adamw_free(c);
    DT_CHECK(dt_mem_live(mem, DT_MEM_OPTIM) == 0, "moments not released");
    dt_mem_free(mem);
    return DT_TEST_END();
}
