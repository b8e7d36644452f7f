/* Writing your own training loop with dtrain's Booster API, ColossalAI style:
 *
 *     plugin  = HybridParallelPlugin(zero_stage=2, precision="fp32", max_norm=1.0)
 *     booster = Booster(plugin=plugin)
 *     model, optimizer, _, dataloader, lr_scheduler = booster.boost(...)
 *     for step ...: loss = booster.step(...)
 *
 * Build: part of the CMake build (build/booster_train), or against an installed dtrain:
 *     cc booster_train.c -o booster_train $(pkg-config --cflags --libs dtrain)
 * Run:
 *     dtrain prepare --input /usr/share/games/fortunes --out data/fortunes
 *     mpirun -np 2 ./booster_train data/fortunes/train.bin data/fortunes/val.bin
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include <dtrain/dtrain.h>

static int my_rank;

/* One line from rank 0. */
static void say(const char *fmt, ...) {
    if (my_rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Your own schedule: linear warmup, then constant. */
static float my_lr(void *ctx, int step) {
    float peak = *(const float *)ctx;
    return step < 10 ? peak * (step + 1) / 10.0f : peak;
}

static int run(dt_comm *world, const char *train, const char *val) {
    dt_config defaults; /* start from dtrain's defaults and change what we want */
    dt_config_defaults(&defaults);
    dt_plugin_config plugin = defaults.plugin;
    plugin.type = DT_PLUGIN_ZERO2;
    plugin.grad_clip = 1.0f;
    dt_model_config model = defaults.model;
    model.n_layer = 2;
    model.n_embd = 64;
    dt_optim_config optim = defaults.optim;
    float peak_lr = 2e-3f;

    dt_booster *booster = NULL;
    dt_status st = dt_booster_init(&plugin, world, &booster);
    dt_boost_spec spec = {.model = &model, .optim = &optim, .train_data = train,
                          .val_data = val, .batch_size = 8, .seq_len = 64, .seed = 42,
                          .lr = my_lr, .lr_ctx = &peak_lr};
    if (st == DT_OK)
        st = dt_booster_boost(booster, &spec);
    double first = NAN, val_loss = NAN;
    dt_step_stats s = {0};
    for (int i = 0; i < 40 && st == DT_OK; i++) {
        st = dt_booster_step(booster, &s);
        if (i == 0)
            first = s.loss;
        if (st == DT_OK && s.step % 10 == 0)
            say("step %lld loss %.4f lr %.2e grad norm %.3f", (long long)s.step, s.loss, s.lr,
                    s.grad_norm);
    }
    if (st == DT_OK && val)
        st = dt_booster_eval(booster, 4, &val_loss);
    if (st == DT_OK)
        say("first loss %.4f, last loss %.4f, val loss %.4f on %d data-parallel ranks",
                first, s.loss, val_loss, dt_booster_dp_size(booster));
    dt_booster_free(booster);
    if (st != DT_OK)
        fprintf(stderr, "booster_train[rank %d]: error: %s\n", my_rank, dt_err_msg());
    return st == DT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: booster_train TRAIN.bin [VAL.bin]\n");
        return 2;
    }
    dt_comm *world = NULL;
    if (dt_dist_init(&argc, &argv, &world) != DT_OK) {
        fprintf(stderr, "booster_train: %s\n", dt_err_msg());
        return 1;
    }
    my_rank = dt_comm_rank(world);
    int rc = run(world, argv[1], argc > 2 ? argv[2] : NULL);
    dt_dist_finalize(world);
    return rc;
}
