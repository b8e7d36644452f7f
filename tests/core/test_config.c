/* dt_config: defaults and every configs/ file validates, print -> parse round trips exactly,
 * overrides, and each parse and validation error names the key, value and file:line.
 *
 * configs/ is found from __FILE__ (this file is <repo>/tests/core/test_config.c), so the test
 * runs from any build directory. Single-threaded; writes nothing to disk.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "harness.h"

/* The dt_err_msg() of the last failing call contains `want`. */
#define CHECK_ERR(expr, want_st, want)                                                        \
    do {                                                                                      \
        dt_status st_ = (expr);                                                               \
        DT_CHECK(st_ == (want_st) && strstr(dt_err_msg(), want) != NULL,                      \
                 "%s -> %s: '%s' (want %s containing '%s')", #expr, dt_status_str(st_),       \
                 dt_err_msg(), dt_status_str(want_st), want);                                 \
    } while (0)

static dt_status parse(dt_config *c, const char *text) {
    dt_config_defaults(c);
    return dt_config_load_string(c, text, "t.ini");
}

static void repo_path(char *out, size_t n, const char *rel) {
    const char *self = __FILE__, *tail = strstr(self, "tests/core/test_config.c");
    int root = tail ? (int)(tail - self) : 0;
    snprintf(out, n, "%.*s%s", root, self, rel);
}

/* Set a string field the way the parser does: the unused tail zeroed, so memcmp works. */
static void put(char *field, const char *value) {
    memset(field, 0, DT_PATH_MAX);
    snprintf(field, DT_PATH_MAX, "%s", value);
}

static void test_defaults(void) {
    dt_config c;
    dt_config_defaults(&c);
    DT_CHECK_OK(dt_config_validate(&c));
    DT_CHECK(c.model.n_layer == 4 && c.model.n_embd == 128 && c.train.steps == 600,
             "defaults changed: L%d C%d steps %d", c.model.n_layer, c.model.n_embd,
             c.train.steps);
    DT_CHECK(!strcmp(c.train.export_path, "runs/fortunes/model.safetensors"), "export '%s'",
             c.train.export_path);
    DT_CHECK(dt_config_zero_stage(&c) == 0, "zero stage %d", dt_config_zero_stage(&c));
    DT_CHECK(sizeof(dt_arch) == sizeof(int) && sizeof(dt_plugin_type) == sizeof(int),
             "enums are not int-sized: the parser writes them as int");
    DT_CHECK(!strcmp(dt_arch_name(DT_ARCH_LLAMA), "llama") &&
                 !strcmp(dt_precision_name(DT_PREC_BF16), "bf16") &&
                 !strcmp(dt_plugin_type_name(DT_PLUGIN_ZERO2), "zero2") &&
                 !strcmp(dt_lr_schedule_name(DT_SCHED_CONSTANT), "constant") &&
                 !strcmp(dt_arch_name((dt_arch)99), "?"),
             "enum names");
}

static void test_config_files(void) {
    char dir[1024], path[1400];
    repo_path(dir, sizeof dir, "configs");
    DIR *d = opendir(dir);
    DT_CHECK(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".ini"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        dt_config c;
        dt_config_defaults(&c);
        DT_CHECK_OK(dt_config_load_file(&c, path));
        DT_CHECK_OK(dt_config_validate(&c));
        n++;
    }
    closedir(d);
    DT_CHECK(n >= 5, "found %d configs in %s", n, dir);

    /* default.ini is exactly the built-in defaults, over a base that differs everywhere */
    dt_config def, c;
    dt_config_defaults(&def);
    memset(&c, 0, sizeof c);
    repo_path(path, sizeof path, "configs/default.ini");
    DT_CHECK_OK(dt_config_load_file(&c, path));
    const char *diff = dt_config_diff(&c, &def);
    DT_CHECK(diff == NULL, "configs/default.ini differs from dt_config_defaults at %s", diff);

    dt_config_defaults(&c);
    repo_path(path, sizeof path, "configs/tiny-llama.ini");
    DT_CHECK_OK(dt_config_load_file(&c, path));
    DT_CHECK(c.model.arch == DT_ARCH_LLAMA && c.model.n_layer == 2 && c.model.n_head == 4 &&
                 c.model.n_kv_head == 2 && c.model.n_embd == 64 && c.train.seq_len == 32 &&
                 c.train.batch_size == 4 && c.train.steps == 6 && c.train.eval_every == 0 &&
                 c.train.log_every == 1 && c.train.sample_tokens == 0 &&
                 c.checkpoint.every == 0 && c.train.export_path[0] == 0,
             "tiny-llama.ini values");
    dt_config_defaults(&c);
    repo_path(path, sizeof path, "configs/gpt2-124m.ini");
    DT_CHECK_OK(dt_config_load_file(&c, path));
    DT_CHECK(c.model.n_layer == 12 && c.model.n_embd == 768 && c.model.vocab_size == 50257 &&
                 c.model.max_seq_len == 1024 && c.train.seq_len == 256 &&
                 c.optim.lr == 6e-4f && c.optim.min_lr == 6e-5f && c.optim.warmup_steps == 100,
             "gpt2-124m.ini values");
}

static void test_round_trip(void) {
    dt_config a, b;
    dt_config_defaults(&a);
    a.model.arch = DT_ARCH_LLAMA, a.model.n_kv_head = 2, a.model.ffn_hidden = 320;
    a.model.rope_theta = 500000.0f, a.model.norm_eps = 1.2345678e-6f;
    put(a.model.init, "dir with spaces/#not a comment;x.st");
    put(a.data.val, "a#b");
    a.data.shuffle = true;
    a.train.seed = 18446744073709551615ull, a.train.micro_batch_size = 4;
    a.optim.lr = 3e-4f, a.optim.min_lr = 1.0f / 3.0f * 1e-5f, a.optim.beta2 = 0.999f;
    a.optim.schedule = DT_SCHED_CONSTANT, a.optim.eps = 1e-30f;
    a.plugin.type = DT_PLUGIN_HYBRID, a.plugin.precision = DT_PREC_BF16;
    a.plugin.zero_stage = 1, a.plugin.grad_clip = 0.0f, a.plugin.bucket_mb = 12.5f;
    a.checkpoint.keep = 0;
    put(a.checkpoint.resume, "auto");
    put(a.train.metrics, "runs/metrics.jsonl");

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dt_config_print(&a, f);
    fclose(f);
    dt_config_defaults(&b);
    DT_CHECK_OK(dt_config_load_string(&b, text, "printed"));
    const char *diff = dt_config_diff(&a, &b);
    DT_CHECK(diff == NULL, "round trip differs at %s; printed:\n%s", diff, text);
    DT_CHECK(memcmp(&a, &b, sizeof a) == 0, "round trip: structs differ byte-wise");
    DT_CHECK(strstr(text, "rope_theta = 500000\n") && strstr(text, "lr = 0.0003\n") &&
                 strstr(text, "export = \"runs/fortunes/model.safetensors\"\n"),
             "printed floats/strings are not in their short form:\n%s", text);
    free(text);

    /* the defaults print and parse back too, over a zeroed base */
    dt_config_defaults(&a);
    text = NULL;
    f = open_memstream(&text, &len);
    dt_config_print(&a, f);
    fclose(f);
    memset(&b, 0, sizeof b);
    DT_CHECK_OK(dt_config_load_string(&b, text, "printed"));
    DT_CHECK(memcmp(&a, &b, sizeof a) == 0, "defaults round trip differs at %s",
             dt_config_diff(&a, &b));
    free(text);

    b.optim.beta1 = 0.8f;
    diff = dt_config_diff(&a, &b);
    DT_CHECK(diff && !strcmp(diff, "optim.beta1"), "diff found %s", diff ? diff : "nothing");
}

static void test_syntax(void) {
    dt_config c;
    DT_CHECK_OK(parse(&c, "# comment\n; comment\n\n[model]\n  n_layer = 7   # seven\n"
                          "\tn_head=2 ; two\narch = \"llama\"   # quoted enum\n"
                          "init = \"my model.st\"  # quoted path\n[data]\nshuffle = ON\n"
                          "val = \"\"\n[train]\nexport = a#b\nseed: 42\n"
                          "[optim]\nlr = 3e-4\nmin_lr = .5e-4\n"));
    DT_CHECK(c.model.n_layer == 7 && c.model.n_head == 2 && c.model.arch == DT_ARCH_LLAMA,
             "model L%d H%d arch %d", c.model.n_layer, c.model.n_head, (int)c.model.arch);
    DT_CHECK(!strcmp(c.model.init, "my model.st"), "init '%s'", c.model.init);
    DT_CHECK(c.data.shuffle && c.data.val[0] == 0, "data shuffle %d val '%s'", c.data.shuffle,
             c.data.val);
    DT_CHECK(!strcmp(c.train.export_path, "a#b") && c.train.seed == 42, "export '%s' seed %llu",
             c.train.export_path, (unsigned long long)c.train.seed);
    DT_CHECK(c.optim.lr == 3e-4f && c.optim.min_lr == 0.5e-4f, "lr %g min_lr %g",
             (double)c.optim.lr, (double)c.optim.min_lr);
    DT_CHECK(c.train.steps == 600, "untouched key changed: steps %d", c.train.steps);
    const char *bools[] = {"true", "1", "yes", "on", "false", "0", "no", "off"};
    for (int i = 0; i < 8; i++) {
        char t[64];
        snprintf(t, sizeof t, "[data]\nshuffle = %s\n", bools[i]);
        DT_CHECK_OK(parse(&c, t));
        DT_CHECK(c.data.shuffle == (i < 4), "shuffle = %s gave %d", bools[i], c.data.shuffle);
    }
}

static void test_parse_errors(void) {
    dt_config c;
    CHECK_ERR(parse(&c, "[model]\nn_layer = 2\n[foo]\nx = 1\n"), DT_ERR_ARG,
              "unknown section [foo] in t.ini:3");
    CHECK_ERR(parse(&c, "[model]\n[foo]\n"), DT_ERR_ARG, "unknown section [foo] in t.ini:2");
    CHECK_ERR(parse(&c, "[foo]\nx = 1\n"), DT_ERR_ARG,
              "(valid: model, data, train, optim, plugin, checkpoint)");
    CHECK_ERR(parse(&c, "[modle]\nn_layer = 1\n"), DT_ERR_ARG, "did you mean [model]?");
    CHECK_ERR(parse(&c, "[model]\n\nn_layers = 2\n"), DT_ERR_ARG,
              "unknown key model.n_layers in t.ini:3; did you mean model.n_layer?");
    CHECK_ERR(parse(&c, "[model]\nlr = 1\n"), DT_ERR_ARG, "did you mean optim.lr?");
    CHECK_ERR(parse(&c, "[model]\nzzzzzz = 1\n"), DT_ERR_ARG, "unknown key model.zzzzzz in");
    CHECK_ERR(parse(&c, "n_layer = 1\n"), DT_ERR_ARG, "before any [section]");
    CHECK_ERR(parse(&c, "[train]\nlog_every = 1\nsteps = 12x\n"), DT_ERR_ARG,
              "train.steps: '12x' is not an integer in t.ini:3");
    CHECK_ERR(parse(&c, "[train]\nsteps = 99999999999\n"), DT_ERR_ARG,
              "train.steps: '99999999999' is out of range");
    CHECK_ERR(parse(&c, "[train]\nsteps =\n"), DT_ERR_ARG, "train.steps: '' is not an integer");
    CHECK_ERR(parse(&c, "[train]\nseed = -1\n"), DT_ERR_ARG,
              "train.seed: '-1' is not a non-negative integer");
    CHECK_ERR(parse(&c, "[optim]\nlr = 3e-4x\n"), DT_ERR_ARG,
              "optim.lr: '3e-4x' is not a number in t.ini:2");
    CHECK_ERR(parse(&c, "[optim]\nlr = 1e99\n"), DT_ERR_ARG, "optim.lr: '1e99' is out of range");
    CHECK_ERR(parse(&c, "[optim]\nlr = nan\n"), DT_ERR_ARG, "optim.lr: 'nan' is out of range");
    CHECK_ERR(parse(&c, "[data]\nshuffle = maybe\n"), DT_ERR_ARG,
              "data.shuffle: 'maybe' is not a boolean");
    CHECK_ERR(parse(&c, "[plugin]\nprecision = bf16-mixed\n"), DT_ERR_ARG,
              "plugin.precision: 'bf16-mixed' is not one of fp32|bf16|fp16 in t.ini:2");
    CHECK_ERR(parse(&c, "[plugin]\ntype = zero4\n"), DT_ERR_ARG,
              "'zero4' is not one of none|ddp|zero1|zero2|zero3|hybrid");
    CHECK_ERR(parse(&c, "[model]\narch = GPT2\n"), DT_ERR_ARG, "is not one of gpt2|llama");
    CHECK_ERR(parse(&c, "[optim]\nschedule = linear\n"), DT_ERR_ARG,
              "is not one of cosine|constant");
    CHECK_ERR(parse(&c, "[model]\ninit = \"abc\n"), DT_ERR_ARG, "model.init: unterminated");
    CHECK_ERR(parse(&c, "[model]\ninit = \"a\" b\n"), DT_ERR_ARG, "after the closing quote");
    CHECK_ERR(parse(&c, "[model]\nn_layer = 2\nthis is not ini\n"), DT_ERR_ARG,
              "cannot parse 'this is not ini' in t.ini:3");
    CHECK_ERR(parse(&c, "[model\n"), DT_ERR_ARG, "in t.ini:1");
    /* the first error wins, whether inih's or ours */
    CHECK_ERR(parse(&c, "[train]\nsteps = x\ngarbage\n"), DT_ERR_ARG, "in t.ini:2");
    CHECK_ERR(parse(&c, "[train]\ngarbage\nsteps = x\n"), DT_ERR_ARG, "in t.ini:2");

    char big[600];
    int k = snprintf(big, sizeof big, "[model]\n# %0250d\ninit = \"", 0);
    memset(big + k, 'x', 300);
    snprintf(big + k + 300, sizeof big - (size_t)k - 300, "\"\n");
    CHECK_ERR(parse(&c, big), DT_ERR_ARG, "in t.ini:3; shorten it");

    /* a failed load leaves the config as it was */
    dt_config_defaults(&c);
    dt_status st = dt_config_load_string(&c, "[model]\nn_layer = 9\nn_head = x\n", "t.ini");
    DT_CHECK(st == DT_ERR_ARG && c.model.n_layer == 4, "failed load changed n_layer to %d",
             c.model.n_layer);

    CHECK_ERR(dt_config_load_file(&c, "/nonexistent/dir/job.ini"), DT_ERR_IO,
              "/nonexistent/dir/job.ini");
}

static void test_overrides(void) {
    dt_config c;
    dt_config_defaults(&c);
    DT_CHECK_OK(dt_config_set(&c, "train.steps=5"));
    DT_CHECK_OK(dt_config_set(&c, "optim.lr=1e-3"));
    DT_CHECK_OK(dt_config_set(&c, "plugin.type=zero2"));
    DT_CHECK_OK(dt_config_set(&c, "data.shuffle=yes"));
    DT_CHECK_OK(dt_config_set(&c, "train.export=out dir/#1.st"));
    DT_CHECK_OK(dt_config_set(&c, "model.init=\"quoted.st\""));
    DT_CHECK_OK(dt_config_set(&c, "checkpoint.resume="));
    DT_CHECK(c.train.steps == 5 && c.optim.lr == 1e-3f && c.plugin.type == DT_PLUGIN_ZERO2 &&
                 c.data.shuffle && !strcmp(c.train.export_path, "out dir/#1.st") &&
                 !strcmp(c.model.init, "quoted.st") && c.checkpoint.resume[0] == 0,
             "overrides not applied");
    DT_CHECK(dt_config_zero_stage(&c) == 2, "zero2 -> stage %d", dt_config_zero_stage(&c));
    CHECK_ERR(dt_config_set(&c, "train.steps"), DT_ERR_ARG, "has no '='");
    CHECK_ERR(dt_config_set(&c, "steps=5"), DT_ERR_ARG, "needs a section: --train.steps=5?");
    CHECK_ERR(dt_config_set(&c, "foo.bar=1"), DT_ERR_ARG, "unknown section [foo]");
    CHECK_ERR(dt_config_set(&c, "train.step=5"), DT_ERR_ARG, "did you mean train.steps?");
    CHECK_ERR(dt_config_set(&c, "train.steps=12x"), DT_ERR_ARG,
              "train.steps: '12x' is not an integer in override --train.steps=12x");
    char big[DT_PATH_MAX + 32];
    int k = snprintf(big, sizeof big, "model.init=");
    memset(big + k, 'y', DT_PATH_MAX);
    big[k + DT_PATH_MAX] = 0;
    CHECK_ERR(dt_config_set(&c, big), DT_ERR_ARG,
              "model.init: value is 512 characters long; the limit is 511");
    DT_CHECK(c.train.steps == 5, "failed override changed steps to %d", c.train.steps);
}

/* Apply overrides to the defaults and expect validation to fail with `st` and `want`. */
static void bad(const char *const *sets, dt_status st, const char *want) {
    dt_config c;
    dt_config_defaults(&c);
    for (int i = 0; sets[i]; i++)
        DT_CHECK_OK(dt_config_set(&c, sets[i]));
    CHECK_ERR(dt_config_validate(&c), st, want);
}
#define BAD(st, want, ...) bad((const char *const[]){__VA_ARGS__, NULL}, st, want)

static void test_validate(void) {
    const dt_status A = DT_ERR_ARG;
    { /* a vocabulary past 16-bit ids is the model's to have (Llama 3: 128256) */
        dt_config c;
        dt_config_defaults(&c);
        DT_CHECK_OK(dt_config_set(&c, "model.vocab_size=128256"));
        DT_CHECK_OK(dt_config_validate(&c));
    }
    BAD(A, "model.n_layer=0 must be > 0", "model.n_layer=0");
    BAD(A, "model.timestep_shift=3: the flow's timestep shift is a DiT's",
        "model.timestep_shift=3");
    BAD(A, "model.timestep_shift=-1 must be in 0..1000 (0 or 1 = no shift)", "model.arch=dit",
        "data.source=bounce", "model.timestep_shift=-1");
    BAD(A, "model.n_head=-1 must be > 0", "model.n_head=-1");
    BAD(A, "model.n_embd=0 must be > 0", "model.n_embd=0");
    BAD(A, "model.vocab_size=0 must be > 0", "model.vocab_size=0");
    BAD(A, "model.max_seq_len=0 must be > 0", "model.max_seq_len=0");
    BAD(A, "train.batch_size=0 must be > 0", "train.batch_size=0");
    BAD(A, "train.seq_len=0 must be > 0", "train.seq_len=0");
    BAD(A, "train.steps=-1 must be >= 0", "train.steps=-1");
    BAD(A, "model.n_embd=100 is not divisible by model.n_head=8", "model.n_embd=100",
        "model.n_head=8");
    BAD(A, "head size must be even", "model.arch=llama", "model.n_embd=12", "model.n_head=4");
    BAD(A, "model.n_kv_head=3 does not divide model.n_head=4", "model.arch=llama",
        "model.n_kv_head=3");
    BAD(A, "model.n_kv_head=2: gpt2 has no grouped-query attention", "model.n_kv_head=2");
    BAD(A, "train.seq_len=256 is longer than model.max_seq_len=128", "train.seq_len=256");
    BAD(A, "train.micro_batch_size=5 does not divide train.batch_size=16",
        "train.micro_batch_size=5");
    BAD(A, "optim.lr=-1 must be >= 0", "optim.lr=-1", "optim.min_lr=-2");
    BAD(A, "optim.min_lr=0.01 is greater than optim.lr=0.003", "optim.min_lr=0.01");
    BAD(A, "optim.beta1=1 must be in [0, 1)", "optim.beta1=1");
    BAD(A, "optim.beta2=-0.1 must be in [0, 1)", "optim.beta2=-0.1");
    BAD(A, "optim.eps=0 must be > 0", "optim.eps=0");
    BAD(A, "optim.weight_decay=-0.1 must be >= 0", "optim.weight_decay=-0.1");
    BAD(A, "plugin.grad_clip=-1 must be >= 0", "plugin.grad_clip=-1");
    BAD(A, "optim.warmup_steps=-5 must be >= 0", "optim.warmup_steps=-5");
    BAD(A, "train.log_every=0 must be >= 1", "train.log_every=0");
    BAD(A, "train.eval_every=-1 must be >= 0", "train.eval_every=-1");
    BAD(A, "train.eval_batches=0 must be >= 1", "train.eval_batches=0");
    BAD(A, "checkpoint.every=-1 must be >= 0", "checkpoint.every=-1");
    BAD(A, "checkpoint.keep=-1 must be >= 0", "checkpoint.keep=-1");
    BAD(A, "checkpoint.every=300 needs checkpoint.dir", "checkpoint.dir=");
    BAD(A, "checkpoint.resume=\"auto\" needs checkpoint.dir", "checkpoint.dir=",
        "checkpoint.every=0", "checkpoint.resume=auto");
    BAD(A, "plugin.pp_size=0 must be >= 1", "plugin.pp_size=0");
    BAD(A, "plugin.zero_stage=4 must be 0, 1, 2 or 3", "plugin.zero_stage=4");
    BAD(A, "plugin.sp_mode=split_gather splits the sequence over the tp_size ranks",
        "plugin.sp_mode=split_gather", "plugin.sp_size=2");
    BAD(A, "plugin.pp_schedule=\"zb\" is not gpipe, 1f1b, interleaved, zbh1 or file:PATH",
        "plugin.pp_schedule=zb");
    BAD(A, "plugin.pp_schedule=interleaved needs plugin.pp_chunks >= 2",
        "plugin.pp_schedule=interleaved");
    BAD(A, "plugin.zero_stage=1 contradicts plugin.type=zero2", "plugin.type=zero2",
        "plugin.zero_stage=1");
    BAD(A, "plugin.zero_stage=2 needs plugin.type=zero2 or hybrid", "plugin.zero_stage=2");
    BAD(A, "plugin.initial_scale=0.5 must be between 1 and 2^32", "plugin.precision=fp16",
        "plugin.initial_scale=0.5");
    BAD(A, "plugin.loss_scale_window=0 must be >= 1", "plugin.loss_scale_window=0");
    /* every problem is reported at once, and an ARG problem outranks an unsupported one */
    BAD(A,
        "model.n_embd=100 is not divisible by model.n_head=8; train.seq_len=256 is longer than "
        "model.max_seq_len=128; optim.eps=0 must be > 0; plugin.pp_chunks=0 must be >= 1",
        "model.n_embd=100", "model.n_head=8", "train.seq_len=256", "optim.eps=0",
        "plugin.pp_chunks=0");
    dt_config tp;
    dt_config_defaults(&tp);
    DT_CHECK_OK(dt_config_set(&tp, "plugin.tp_size=2"));
    DT_CHECK_OK(dt_config_set(&tp, "plugin.sp_size=2"));
    DT_CHECK_OK(dt_config_validate(&tp));
    dt_config f16;
    dt_config_defaults(&f16);
    DT_CHECK_OK(dt_config_set(&f16, "plugin.precision=fp16"));
    DT_CHECK_OK(dt_config_validate(&f16));

    dt_config c;
    dt_config_defaults(&c);
    DT_CHECK_OK(dt_config_set(&c, "plugin.type=zero3"));
    DT_CHECK_OK(dt_config_set(&c, "plugin.zero_stage=3"));
    DT_CHECK_OK(dt_config_validate(&c));
    DT_CHECK(dt_config_zero_stage(&c) == 3, "zero3 -> %d", dt_config_zero_stage(&c));
    DT_CHECK_OK(dt_config_set(&c, "plugin.type=hybrid"));
    DT_CHECK_OK(dt_config_set(&c, "plugin.zero_stage=1"));
    DT_CHECK_OK(dt_config_validate(&c));
    DT_CHECK(dt_config_zero_stage(&c) == 1, "hybrid zero_stage 1 -> %d",
             dt_config_zero_stage(&c));
    DT_CHECK_OK(dt_config_set(&c, "model.arch=llama"));
    DT_CHECK_OK(dt_config_set(&c, "model.n_kv_head=1"));
    DT_CHECK_OK(dt_config_set(&c, "train.micro_batch_size=4"));
    DT_CHECK_OK(dt_config_validate(&c));

    /* optimizer offload */
    BAD(A, "plugin.offload_window_mb=0 must be > 0", "plugin.offload_window_mb=0");
    BAD(A, "plugin.offload=disk needs plugin.offload_dir", "plugin.offload=disk",
        "plugin.offload_dir=");
    DT_CHECK_OK(dt_config_set(&c, "plugin.offload=disk"));
    DT_CHECK_OK(dt_config_set(&c, "plugin.offload_window_mb=0.5"));
    DT_CHECK_OK(dt_config_validate(&c));
}

/* plugin.ac / ac_every / act_compress: int8 with nothing left to compress is refused */
static void test_validate_act_memory(void) {
    BAD(DT_ERR_ARG, "plugin.act_compress=int8 has nothing to compress under plugin.ac=full "
        "with plugin.ac_every=1", "plugin.ac=full", "plugin.act_compress=int8");
    BAD(DT_ERR_ARG, "plugin.ac_every=2 and model.n_layer=1", "plugin.ac=full",
        "plugin.ac_every=2", "model.n_layer=1", "plugin.act_compress=int8");
    BAD(DT_ERR_ARG, "plugin.ac_every=0 must be >= 1", "plugin.ac=full", "plugin.ac_every=0");
    const char *const good[][3] = {
        {"plugin.ac=full", "plugin.ac_every=2", "plugin.act_compress=int8"},
        {"plugin.ac=selective", "plugin.act_compress=int8", NULL},
        {"plugin.ac=full", NULL, NULL},
        {"plugin.act_compress=int8", NULL, NULL}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        dt_config c;
        dt_config_defaults(&c);
        for (int k = 0; k < 3 && good[i][k]; k++)
            DT_CHECK_OK(dt_config_set(&c, good[i][k]));
        DT_CHECK_OK(dt_config_validate(&c));
    }
}

/* A key set twice in one input is refused, naming both lines; the config is untouched.
 * The same key in two sections is two keys. data.train empty is a validation error. */
static void test_duplicates(void) {
    dt_config c;
    dt_config_defaults(&c);
    dt_status st = dt_config_load_string(&c, "[train]\nsteps = 2\n\n[train]\nsteps = 3\n",
                                          "dup.ini");
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "train.steps is set twice in dup.ini, "
                                        "on lines 2 and 5"), "duplicate key: %s", dt_err_msg());
    dt_config d;
    dt_config_defaults(&d);
    DT_CHECK(dt_config_diff(&c, &d) == NULL, "a refused file changed the config");
    DT_CHECK_OK(dt_config_load_string(&c, "[train]\nseed = 2\n[data]\nshuffle = true\n",
                                      "ok.ini"));
    dt_config_defaults(&c);
    c.data.train[0] = 0;
    st = dt_config_validate(&c);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "data.train is empty"), "empty "
             "data.train: %s", dt_err_msg());
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    test_defaults();
    test_config_files();
    test_round_trip();
    test_syntax();
    test_parse_errors();
    test_overrides();
    test_validate();
    test_validate_act_memory();
    test_duplicates();
    return DT_TEST_END();
}
