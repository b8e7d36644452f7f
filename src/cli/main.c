/* dtrain: the command-line front end.
 *
 *   dtrain train   [--config FILE] [--section.key=value ...]
 *   dtrain prepare --input FILE|DIR --out DIR [--val-fraction F]
 *   dtrain sample  --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]
 *   dtrain sample  --checkpoint PATH --out FILE.gif [--steps N] [--label L] [--count K]
 *                  [--guidance G] [--seed S]
 *   dtrain schedule --pp P --microbatches M --kind K [--chunks V] [--stats] | --check F --pp P
 *   dtrain plot    --timeline FILE.json [--step N] --out FILE.svg | --metrics FILE.jsonl --out F
 *   dtrain plan    --config FILE --world N [--mem SIZE] [--device NAME] [--top K] [--json]
 *   dtrain help COMMAND | dtrain COMMAND --help | dtrain --version
 *
 * The only place that turns a dt_status into an exit code: 0 done, 1 the run failed, 2 a usage
 * or config error (cli/help.h, README "Command line").
 */
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/help.h"
#include "cli/convert_cmd.h"
#include "cli/plan_auto.h"
#include "cli/plan_cmd.h"
#include "cli/prepare_video.h"
#include "cli/probe_cmd.h"
#include "cli/plot_cmd.h"
#include "cli/schedule_cmd.h"
#include "core/config.h"
#include "core/log.h"
#include "dist/dist.h"
#include "dtrain/version.h"
#include "io/bpe.h"
#include "io/tokens.h"
#include "train/trainer.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"

static int fail(dt_status st) {
    dt_error("%s", dt_err_msg());
    return st == DT_ERR_ARG ? DT_EXIT_USAGE : DT_EXIT_RUN;
}

/* A config that cannot be read or parsed is a config error whatever the status says. */
static int fail_config(void) {
    dt_error("%s", dt_err_msg());
    return DT_EXIT_USAGE;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The embedded default job prepares its own data the first time. */
static dt_status prepare_default_data(const dt_config *c) {
    dt_config d;
    dt_config_defaults(&d);
    if (c->data.source != DT_SOURCE_TOKENS || strcmp(c->data.train, d.data.train) != 0 ||
        exists(c->data.train))
        return DT_OK;
    if (!exists(FORTUNES_DIR))
        return dt_err_set(DT_ERR_IO,
                          "%s not found and %s missing: install Debian's fortunes "
                          "package (apt-get install fortunes) or set data.train",
                          c->data.train, FORTUNES_DIR);
    int64_t n_train, n_val;
    dt_info("preparing %s from %s (byte-level tokens)", "data/fortunes", FORTUNES_DIR);
    DT_TRY(dt_tokens_prepare_bytes(FORTUNES_DIR, "data/fortunes", 0.1, &n_train, &n_val));
    dt_info("data/fortunes: %lld train tokens, %lld val tokens", (long long)n_train,
            (long long)n_val);
    return DT_OK;
}

/* The same --section.key twice: scripts build a base command and append overrides, so the
 * last one wins, as documented, but never silently (README "Configuration"). */
static void warn_duplicate_override(char **argv, int i) {
    const char *a = argv[i];
    size_t n = strcspn(a, "=");
    for (int j = 2; j < i; j++)
        if (!strncmp(argv[j], a, n) && (argv[j][n] == '=' || argv[j][n] == 0)) {
            dt_warn("train: %.*s is given twice (%s, then %s): the last one wins", (int)n, a,
                    argv[j], a);
            return;
        }
}

/* A training process allocates what it needs before the first step and keeps it. What is
 * malloc'd and freed per step is not ours but Open MPI's: a reduce-scatter's temporaries, tens
 * of MiB each call. glibc serves blocks that large with mmap and unmaps them on free (or trims
 * the heap top), so every step faulted them in again (thousands of page faults per step on
 * the reduce-scatter's root under ZeRO 2/3). Keep freed memory in the heap for reuse. */
static void keep_freed_memory(void) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

static int cmd_train(int argc, char **argv) {
    keep_freed_memory();
    dt_config cfg;
    dt_config_defaults(&cfg);
    bool have_file = false, print_config = false;
    dt_config_sources sources = {0};
    for (int i = 2; i < argc; i++) { /* the file first, so overrides win wherever they stand */
        if (!strcmp(argv[i], "--config") && i + 1 == argc) {
            dt_error("train: --config needs a file: --config FILE (or --config=FILE)");
            return DT_EXIT_USAGE;
        }
        const char *v = dt_cli_option(argc, argv, &i, "--config");
        if (v && !v[0]) {
            dt_error("train: --config needs a file, got an empty name");
            return DT_EXIT_USAGE;
        }
        if (v) {
            if (dt_config_load_file_from(&cfg, v, &sources) != DT_OK)
                return fail_config();
            have_file = true;
        }
    }
    for (int i = 2; i < argc; i++) {
        if (dt_cli_option(argc, argv, &i, "--config"))
            continue;
        if (!strcmp(argv[i], "--print-config")) {
            print_config = true;
            continue;
        }
        if (strncmp(argv[i], "--", 2) != 0 || !strchr(argv[i], '.')) {
            dt_error("train: unexpected argument '%s' (overrides look like --train.steps=100; "
                     "see dtrain train --help)",
                     argv[i]);
            return DT_EXIT_USAGE;
        }
        warn_duplicate_override(argv, i);
        if (dt_config_set(&cfg, argv[i] + 2) != DT_OK)
            return fail_config();
    }
    dt_config_derive(&cfg);
    dt_status st;
    if (print_config) { /* a file that reproduces the run: only a config that could run */
        if (dt_config_validate(&cfg) != DT_OK)
            return fail_config();
        dt_config_print(&cfg, stdout);
        return fflush(stdout) == 0 ? DT_EXIT_OK : DT_EXIT_RUN;
    }
    dt_comm *world = NULL;
    if ((st = dt_dist_init(&argc, &argv, &world)) != DT_OK)
        return fail(st);
    dt_log_setup(world->rank, world->size, DT_LOG_INFO);
    /* rank 0 prepares the default data; the others wait for it and learn its outcome */
    if (!have_file)
        st = dt_comm_agree(world, world->rank == 0 ? prepare_default_data(&cfg) : DT_OK);
    /* plugin.pp_layers = auto: rank 0 measures this machine and balances the stages, every
     * rank runs its answer */
    if (st == DT_OK && dt_cli_plan_is_auto(&cfg)) {
        /* the others nap in the collective (a watched wait) while rank 0 measures: spinning,
         * they would take from the core its rates are measured on */
        dt_comm_watch nap;
        st = dt_comm_watch_init(&nap, cfg.train.comm_timeout > 0 ? cfg.train.comm_timeout : 1e9,
                                world->rank);
        world->watch = st == DT_OK ? &nap : NULL;
        if (st == DT_OK)
            st = dt_comm_agree(world, world->rank == 0 ? dt_cli_plan_auto_layers(&cfg, world->size)
                                                       : DT_OK);
        world->watch = NULL;
        if (st == DT_OK)
            st = dt_comm_broadcast(world, cfg.plugin.pp_layers, sizeof cfg.plugin.pp_layers, 0);
    }
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
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], "--video", 7) && (argv[i][7] == 0 || argv[i][7] == '='))
            return dt_cli_prepare_video(argc, argv);
    const char *input = NULL, *out = NULL, *frac = "0.1", *tokenizer = NULL, *v;
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--input")))
            input = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--val-fraction")))
            frac = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--tokenizer")))
            tokenizer = v;
        else {
            static const char *const with_value[] = {"--input", "--out", "--val-fraction",
                                                     "--tokenizer", NULL};
            dt_cli_bad_arg("prepare", argv[i], with_value);
            return DT_EXIT_USAGE;
        }
    }
    char *end;
    double f = strtod(frac, &end);
    if (!input || !out || *end || !(f > 0 && f < 1)) {
        dt_error("prepare needs --input FILE|DIR and --out DIR (--val-fraction in (0, 1), "
                 "--tokenizer FILE for a BPE vocabulary)");
        return 2;
    }
    int64_t n_train, n_val;
    dt_status st;
    if (tokenizer) {
        dt_bpe *bpe = NULL;
        st = dt_bpe_load(tokenizer, &bpe);
        if (st == DT_OK) {
            dt_info("tokenizer %s: %s", tokenizer, dt_bpe_describe(bpe));
            if (dt_bpe_eot(bpe) < 0)
                dt_warn("tokenizer %s names no end-of-document token: documents follow each "
                        "other unmarked",
                        tokenizer);
            st = dt_tokens_prepare_bpe(input, out, f, bpe, &n_train, &n_val);
        }
        dt_bpe_free(bpe);
    } else {
        st = dt_tokens_prepare_bytes(input, out, f, &n_train, &n_val);
    }
    if (st != DT_OK)
        return fail(st);
    dt_info("%s/train.bin: %lld tokens, %s/val.bin: %lld tokens", out, (long long)n_train, out,
            (long long)n_val);
    return 0;
}

/* the clip options of dtrain sample --out, when given without --out: the one they need */
static const char *clip_option_without_out(int argc, char **argv) {
    static const char *const clip[] = {"--steps", "--label", "--count", "--guidance", "--clip"};
    for (int i = 2; i < argc; i++)
        for (size_t k = 0; k < sizeof clip / sizeof *clip; k++)
            if (!strncmp(argv[i], clip[k], strlen(clip[k])) &&
                (argv[i][strlen(clip[k])] == 0 || argv[i][strlen(clip[k])] == '='))
                return clip[k];
    return NULL;
}

/* Limits on what `dtrain sample` is asked for, so no request runs for days: tokens and Euler
 * steps well past any use, clips to a GIF sheet. */
enum { MAX_SAMPLE_TOKENS = 1 << 20, MAX_SAMPLE_STEPS = 10000, MAX_SAMPLE_CLIPS = 1024 };

/* --clip FxHxW: the clip shape to sample */
static bool parse_clip(const char *v, dt_sample_clip_opts *o) {
    char end;
    if (sscanf(v, "%dx%dx%d%c", &o->frames, &o->height, &o->width, &end) != 3 || o->frames < 1 ||
        o->height < 1 || o->width < 1 || o->frames > 4096 || o->height > 8192 || o->width > 8192)
        return dt_err_set(DT_ERR_ARG, "--clip %s is not FRAMESxHEIGHTxWIDTH (e.g. 8x24x24)", v),
               false;
    return true;
}

static int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *tokenizer = NULL, *v;
    int tokens = 300;
    float temperature = 0.8f;
    unsigned long long seed = 1;
    uint64_t seed64;
    bool temperature_given = false;
    dt_sample_clip_opts clips = {.steps = 32, .count = 4};
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        int64_t n;
        double x;
        if ((v = dt_cli_option(argc, argv, &i, "--checkpoint")))
            ckpt = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--prompt")))
            prompt = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--tokenizer")))
            tokenizer = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--tokens")))
            ok = dt_cli_int("--tokens", v, 1, MAX_SAMPLE_TOKENS, &n), tokens = (int)n;
        else if ((v = dt_cli_option(argc, argv, &i, "--temperature")))
            ok = dt_cli_real("--temperature", v, 0, 100, &x), temperature = (float)x,
            temperature_given = true;
        else if ((v = dt_cli_option(argc, argv, &i, "--seed")))
            ok = dt_cli_seed("--seed", v, &seed64), seed = seed64;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            clips.out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--steps")))
            ok = dt_cli_int("--steps", v, 1, MAX_SAMPLE_STEPS, &n), clips.steps = (int)n;
        else if ((v = dt_cli_option(argc, argv, &i, "--label")))
            ok = dt_cli_int("--label", v, INT32_MIN, INT32_MAX, &n), clips.label = (int)n,
            clips.has_label = true;
        else if ((v = dt_cli_option(argc, argv, &i, "--count")))
            ok = dt_cli_int("--count", v, 1, MAX_SAMPLE_CLIPS, &n), clips.count = (int)n;
        else if ((v = dt_cli_option(argc, argv, &i, "--clip")))
            ok = parse_clip(v, &clips);
        else if ((v = dt_cli_option(argc, argv, &i, "--guidance")))
            ok = dt_cli_real("--guidance", v, 0, 100, &x), clips.guidance = (float)x;
        else if (!strcmp(argv[i], "--raw"))
            clips.raw = true;
        else {
            static const char *const with_value[] = {
                "--checkpoint", "--prompt", "--tokenizer", "--tokens", "--temperature",
                "--seed",       "--out",    "--steps",     "--label",  "--count",
                "--guidance",   "--clip",   NULL};
            dt_cli_bad_arg("sample", argv[i], with_value);
            return DT_EXIT_USAGE;
        }
        if (!ok) {
            dt_error("sample: %s", dt_err_msg());
            return DT_EXIT_USAGE;
        }
    }
    if (!ckpt || !ckpt[0]) {
        dt_error("sample needs --checkpoint PATH (a step folder or a .safetensors file)");
        return 2;
    }
    if (clips.out && !clips.out[0]) {
        dt_error("sample: --out needs a file name (FILE.gif)");
        return 2;
    }
    const char *clip_opt = clip_option_without_out(argc, argv);
    if (clips.out && temperature_given) {
        dt_error("sample: --temperature is for text; a clip is sampled by --steps and --guidance");
        return 2;
    }
    if (!clips.out && clip_opt) {
        dt_error("sample: %s samples clips and needs --out FILE.gif", clip_opt);
        return 2;
    }
    dt_status st;
    if (clips.out) {
        clips.checkpoint = ckpt;
        clips.prompt = prompt;
        clips.seed = seed;
        st = dt_sample_clips_run(&clips);
    } else {
        st = dt_sample_run(ckpt, clips.raw, tokenizer, prompt, tokens, temperature, seed);
    }
    if (st == DT_OK && clips.out)
        dt_info("%d clips written to %s", clips.count, clips.out);
    return st == DT_OK ? 0 : fail(st);
}

/* A write to standard output that failed (a full disk, /dev/full, a closed descriptor) fails
 * the command, however it ended: the output a user asked for is not there. */
static int finish_stdout(int rc) {
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad)
        bad = true, e = errno;
    if (!bad)
        return rc;
    dt_error("writing standard output failed: %s", e ? strerror(e) : "write error");
    return rc ? rc : DT_EXIT_RUN;
}

static int run(int argc, char **argv) {
    if (argc < 2)
        return dt_cli_usage(stderr);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        return dt_cli_usage(stdout);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("dtrain %s\n", dt_version());
        return DT_EXIT_OK;
    }
    if (!strcmp(cmd, "help")) {
        if (argc == 2)
            return dt_cli_usage(stdout);
        if (argc > 3) {
            dt_error("help takes one command (commands: " DT_CLI_COMMANDS ")");
            return DT_EXIT_USAGE;
        }
        return dt_cli_help(argv[2]);
    }
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } table[] = {
        {"train", cmd_train},          {"prepare", cmd_prepare}, {"sample", cmd_sample},
        {"schedule", dt_cli_schedule}, {"plan", dt_cli_plan},    {"plot", dt_cli_plot},
        {"convert", dt_cli_convert},   {"probe", dt_cli_probe},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(cmd, table[i].name))
            return dt_cli_wants_help(argc, argv) ? dt_cli_help(cmd) : table[i].run(argc, argv);
    dt_error("unknown command '%s' (commands: " DT_CLI_COMMANDS "; see dtrain --help)", cmd);
    return DT_EXIT_USAGE;
}

int main(int argc, char **argv) {
    dt_log_setup(0, 1, DT_LOG_INFO);
    return finish_stdout(run(argc, argv));
}
