/* The step timer plays rank 0 of a larger layout in one process (a stand-in world, its peers
 * absent): it trains, and it holds exactly what the planner says rank 0 of that layout holds,
 * category by category, so it runs that rank's shapes and not one rank's whole model. A layout
 * the world does not divide is refused with the mesh's error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "io/tokens.h"
#include "plan/memory.h"
#include "train/trainer.h"

enum { VOCAB = 256, N_TOKENS = 4096 };

static void set(dt_config *c, const char *kv) {
    DT_CHECK(dt_config_set(c, kv) == DT_OK, "%s: %s", kv, dt_err_msg());
}

static dt_config tiny(const char *arch, const char *data) {
    dt_config c;
    dt_config_defaults(&c);
    char kv[4200];
    snprintf(kv, sizeof kv, "model.arch=%s", arch);
    set(&c, kv);
    const char *keys[] = {"model.n_layer=2",    "model.n_head=4",       "model.n_kv_head=2",
                          "model.n_embd=64",    "model.vocab_size=256", "model.max_seq_len=32",
                          "train.seq_len=32",   "train.batch_size=4",   "train.eval_every=0",
                          "checkpoint.every=0", "train.metrics=",       "train.export=",
                          "data.val="};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(arch, "gpt2") != 0 || strncmp(keys[i], "model.n_kv_head", 15) != 0)
            set(&c, keys[i]);
    snprintf(kv, sizeof kv, "data.train=%s", data);
    set(&c, kv);
    return c;
}

/* two steps of rank 0 of `world` ranks of arch with the given plugin keys, and its memory
 * against the plan's for that rank */
static void check_layout(const char *arch, const char *data, int world, const char *const *kv) {
    dt_config c = tiny(arch, data);
    char what[256] = "";
    for (int i = 0; kv[i]; i++) {
        set(&c, kv[i]);
        snprintf(what + strlen(what), sizeof what - strlen(what), " %s", kv[i]);
    }
    dt_step_timer *t = NULL;
    dt_status st = dt_step_timer_init(&c, world, &t);
    DT_CHECK(st == DT_OK, "%s%s on %d: %s", arch, what, world, dt_err_msg());
    if (!t)
        return;
    dt_step_times secs = {0};
    for (int i = 0; i < 2; i++)
        DT_CHECK_OK(dt_step_timer_run(t, &secs));
    DT_CHECK(secs.seconds > 0, "%s%s: a step took %g s", arch, what, secs.seconds);
    /* its parts are timed within it: each took some time, together less than the step */
    DT_CHECK(secs.data_s > 0 && secs.optimizer_s > 0 &&
                 secs.data_s + secs.optimizer_s < secs.seconds,
             "%s%s: a step of %g s read its rows in %g s and updated in %g s", arch, what,
             secs.seconds, secs.data_s, secs.optimizer_s);
    dt_plan_mem want;
    DT_CHECK_OK(dt_plan_memory(&c, world, 0, &(dt_plan_mem_opts){0}, &want));
    const dt_mem *m = dt_step_timer_mem(t);
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)
        DT_CHECK((int64_t)dt_mem_peak(m, (dt_mem_cat)k) == want.cat[k],
                 "%s%s on %d: %s %zu bytes, rank 0's plan %lld", arch, what, world,
                 dt_mem_cat_name((dt_mem_cat)k), dt_mem_peak(m, (dt_mem_cat)k),
                 (long long)want.cat[k]);
    dt_step_timer_free(t);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    char data[64];
    snprintf(data, sizeof data, "test_step_timer_%d.bin", (int)getpid());
    uint16_t *tok = malloc(N_TOKENS * sizeof *tok);
    for (int i = 0; tok && i < N_TOKENS; i++)
        tok[i] = (uint16_t)((i * 37 + 11) % VOCAB);
    DT_CHECK_OK(dt_tokens_write(data, tok, N_TOKENS));
    free(tok);

    const char *one[] = {NULL};
    const char *tp[] = {"plugin.type=hybrid", "plugin.tp_size=2", NULL};
    const char *tp_sg[] = {"plugin.type=hybrid", "plugin.tp_size=2", "plugin.sp_mode=split_gather",
                           "plugin.precision=bf16", NULL};
    const char *ulysses[] = {"plugin.type=hybrid", "plugin.sp_size=2", NULL};
    const char *ring[] = {"plugin.type=hybrid", "plugin.cp_size=2", NULL};
    const char *zero3[] = {"plugin.type=zero3", "plugin.ac=full", NULL};
    const char *zero2_tp[] = {"plugin.type=hybrid", "plugin.tp_size=2", "plugin.zero_stage=2",
                              NULL};
    check_layout("gpt2", data, 1, one);
    check_layout("gpt2", data, 2, tp);
    check_layout("llama", data, 2, tp_sg);
    check_layout("gpt2", data, 2, ulysses);
    check_layout("llama", data, 2, ring);
    check_layout("llama", data, 2, zero3);
    check_layout("gpt2", data, 4, zero2_tp);

    dt_config c = tiny("gpt2", data);
    set(&c, "plugin.type=hybrid");
    set(&c, "plugin.tp_size=2");
    dt_step_timer *t = NULL;
    dt_status st = dt_step_timer_init(&c, 3, &t);
    DT_CHECK(st == DT_ERR_ARG && !t && strstr(dt_err_msg(), "3"),
             "tp 2 on a stand-in world of 3: %s (%s)", dt_status_str(st), dt_err_msg());
    remove(data);
    return DT_TEST_END();
}
