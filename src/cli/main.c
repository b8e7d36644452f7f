/* dtrain: the command-line front end.
 *
 *   dtrain train   [--config FILE] [--section.key=value ...]
 *   dtrain prepare --input FILE|DIR --out DIR [--val-fraction F]
 *   dtrain sample  --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]
 *   dtrain schedule --pp P --microbatches M --kind K [--chunks V] [--stats] | --check F --pp P
 *   dtrain plot    --timeline FILE.json [--step N] --out FILE.svg | --metrics FILE.jsonl --out F
 *   dtrain plan    --config FILE --world N [--mem SIZE] [--device NAME] [--top K] [--json]
 *
 * The only place that turns a dt_status into an exit code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/convert_cmd.h"
#include "cli/plan_cmd.h"
#include "cli/plot_cmd.h"
#include "cli/schedule_cmd.h"
#include "core/config.h"
#include "core/log.h"
#include "dist/dist.h"
#include "io/tokens.h"
#include "train/trainer.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtrain <command> [options]\n"
            "  train   [--config FILE] [--section.key=value ...]\n"
            "          with no config: the built-in small character-level GPT on the text of\n"
            "          Debian's fortunes package (prepared on first use)\n"
            "  prepare --input FILE|DIR --out DIR [--val-fraction 0.1]\n"
            "          byte-level tokenisation into DIR/train.bin and DIR/val.bin\n"
            "  sample  --checkpoint PATH [--prompt TEXT] [--tokens 300] [--temperature 0.8]\n"
            "          [--seed 1]\n"
            "  schedule --pp P --microbatches M --kind gpipe|1f1b|interleaved|zbh1 [--chunks V]\n"
            "          [--stats] | --check FILE --pp P: print or validate a pipeline schedule\n"
            "  plot    --timeline FILE.json [--step N] --out FILE.svg: one step of a memory\n"
            "          timeline (train.mem_timeline) as a picture; --metrics FILE.jsonl\n"
            "          --out FILE.svg: the training curves of train.metrics\n"
            "  plan    --config FILE --world N [--mem 80GiB] [--device a100-80gb|h100-80gb|this]\n"
            "          [--flops 312T] [--bandwidth 300G] [--top K] [--json]: the layouts that\n"
            "          fit, ranked by predicted step time\n"
            "config sections: [model] [data] [train] [optim] [plugin] [checkpoint]; see README\n");
    return f == stderr ? 2 : 0;
}

static int fail(dt_status st) {
    dt_error("%s", dt_err_msg());
    return st == DT_ERR_ARG ? 2 : 1;
}


static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The embedded default job prepares its own data the first time. */
static dt_status prepare_default_data(const dt_config *c) {
    dt_config d;
    dt_config_defaults(&d);
    if (strcmp(c->data.train, d.data.train) != 0 || exists(c->data.train))
        return DT_OK;
    if (!exists(FORTUNES_DIR))
        return dt_err_set(DT_ERR_IO, "%s not found and %s missing: install Debian's fortunes "
                          "package (apt-get install fortunes) or set data.train",
                          c->data.train, FORTUNES_DIR);
    int64_t n_train, n_val;
    dt_info("preparing %s from %s (byte-level tokens)", "data/fortunes", FORTUNES_DIR);
    DT_TRY(dt_tokens_prepare_bytes(FORTUNES_DIR, "data/fortunes", 0.1, &n_train, &n_val));
    dt_info("data/fortunes: %lld train tokens, %lld val tokens", (long long)n_train,
            (long long)n_val);
    return DT_OK;
}

static int cmd_train(int argc, char **argv) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_status st;
    bool have_file = false;
    for (int i = 2; i < argc; i++) { /* the file first, so overrides win wherever they stand */
        const char *v = dt_cli_option(argc, argv, &i, "--config");
        if (v) {
            if ((st = dt_config_load_file(&cfg, v)) != DT_OK)
                return fail(st);
            have_file = true;
        }
    }
    for (int i = 2; i < argc; i++) {
        if (dt_cli_option(argc, argv, &i, "--config"))
            continue;
        if (strncmp(argv[i], "--", 2) != 0 || !strchr(argv[i], '.')) {
            dt_error("unexpected argument '%s' (overrides look like --train.steps=100)", argv[i]);
            return 2;
        }
        if ((st = dt_config_set(&cfg, argv[i] + 2)) != DT_OK)
            return fail(st);
    }
    dt_comm *world = NULL;
    if ((st = dt_dist_init(&argc, &argv, &world)) != DT_OK)
        return fail(st);
    dt_log_setup(world->rank, world->size, DT_LOG_INFO);
    /* rank 0 prepares the default data; the others wait for it and learn its outcome */
    if (!have_file)
        st = dt_comm_agree(world, world->rank == 0 ? prepare_default_data(&cfg) : DT_OK);
    bool stranded = false;
    if (st == DT_OK)
        st = dt_train_run(&cfg, world, &stranded);
    int rc = st == DT_OK ? 0 : fail(st);
    if (stranded && world->size > 1)
        dt_dist_abort(world, rc); /* the other ranks may be waiting for this one */
    dt_dist_finalize(world);
    return rc;
}

static int cmd_prepare(int argc, char **argv) {
    const char *input = NULL, *out = NULL, *frac = "0.1", *v;
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--input")))
            input = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--val-fraction")))
            frac = v;
        else
            return usage(stderr);
    }
    char *end;
    double f = strtod(frac, &end);
    if (!input || !out || *end || !(f > 0 && f < 1)) {
        dt_error("prepare needs --input FILE|DIR and --out DIR (--val-fraction in (0, 1))");
        return 2;
    }
    int64_t n_train, n_val;
    dt_status st = dt_tokens_prepare_bytes(input, out, f, &n_train, &n_val);
    if (st != DT_OK)
        return fail(st);
    dt_info("%s/train.bin: %lld tokens, %s/val.bin: %lld tokens", out, (long long)n_train, out,
            (long long)n_val);
    return 0;
}

static int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *v;
    int tokens = 300;
    float temperature = 0.8f;
    unsigned long long seed = 1;
    for (int i = 2; i < argc; i++) {
        char *end = NULL;
        if ((v = dt_cli_option(argc, argv, &i, "--checkpoint")))
            ckpt = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--prompt")))
            prompt = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--tokens")))
            tokens = (int)strtol(v, &end, 10);
        else if ((v = dt_cli_option(argc, argv, &i, "--temperature")))
            temperature = strtof(v, &end);
        else if ((v = dt_cli_option(argc, argv, &i, "--seed")))
            seed = strtoull(v, &end, 10);
        else
            return usage(stderr);
        if (end && (*end || end == v)) {
            dt_error("'%s' is not a number (%s)", v, argv[i]);
            return 2;
        }
    }
    if (!ckpt || tokens < 1) {
        dt_error("sample needs --checkpoint PATH (a step folder or a .safetensors file)");
        return 2;
    }
    dt_status st = dt_sample_run(ckpt, prompt, tokens, temperature, seed);
    return st == DT_OK ? 0 : fail(st);
}

int main(int argc, char **argv) {
    dt_log_setup(0, 1, DT_LOG_INFO);
    if (argc < 2)
        return usage(stderr);
    if (strcmp(argv[1], "train") == 0)
        return cmd_train(argc, argv);
    if (strcmp(argv[1], "prepare") == 0)
        return cmd_prepare(argc, argv);
    if (strcmp(argv[1], "sample") == 0)
        return cmd_sample(argc, argv);
    if (strcmp(argv[1], "schedule") == 0)
        return dt_cli_schedule(argc, argv);
    if (strcmp(argv[1], "plot") == 0)
        return dt_cli_plot(argc, argv);
    if (strcmp(argv[1], "plan") == 0)
        return dt_cli_plan(argc, argv);
    if (strcmp(argv[1], "convert") == 0)
        return dt_cli_convert(argc, argv);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0)
        return usage(stdout);
    dt_error("unknown command '%s' (commands: train, prepare, sample, schedule, plan, plot; "
             "see dtrain --help)",
             argv[1]);
    return 2;
}
