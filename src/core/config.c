/* The run configuration: defaults, INI parsing (inih), overrides and printing; the
 * cross-field validation is in config_check.c.
 *
 * One static const table (`fields`) lists every key with its type and struct offset; the
 * parser, `--section.key=value` overrides, the printer, dt_config_diff and the error
 * messages all walk it, so they cannot disagree. No state outside the caller's structs: the
 * parse context lives on the stack, so concurrent parses on different threads are safe.
 */
#include "core/config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "core/log.h"

typedef char dt_path[DT_PATH_MAX];

typedef enum ftype { T_INT, T_U64, T_FLOAT, T_BOOL, T_STR, T_ENUM } ftype;

typedef struct field {
    const char *name;    /* "section.key", for messages and dt_config_diff */
    const char *section; /* file section == dt_config member */
    const char *key;     /* key in the file (may differ from the C member: export_path) */
    ftype type;
    size_t off, size;
    const char *const *names; /* T_ENUM: value names, index = enum value */
    int n_names;
} field;

static const char *const section_names[] = {"model", "data", "train", "optim", "plugin",
                                            "checkpoint"};
enum { N_SECTIONS = (int)(sizeof section_names / sizeof *section_names) };

static const char *const arch_names[] = {"gpt2", "llama", "dit"};
static const char *const dit_attn_names[] = {"full", "spatial_temporal"};
static const char *const source_names[] = {"tokens", "bounce", "clips", "latents"};
static const char *const precision_names[] = {"fp32", "bf16", "fp16"};
static const char *const schedule_names[] = {"cosine", "constant"};
static const char *const plugin_names[] = {"none", "ddp", "zero1", "zero2", "zero3", "hybrid"};
static const char *const sp_mode_names[] = {"all_to_all", "split_gather"};
static const char *const cp_split_names[] = {"zigzag", "contiguous"};
static const char *const ac_names[] = {"none", "full", "selective"};
static const char *const act_compress_names[] = {"none", "int8"};
static const char *const offload_names[] = {"none", "disk"};
#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
_Static_assert(N_OF(arch_names) == DT_ARCH_COUNT, "arch_names out of sync with dt_arch");
_Static_assert(N_OF(dit_attn_names) == DT_DIT_ATTN_COUNT, "dit_attn_names out of sync");
_Static_assert(N_OF(source_names) == DT_SOURCE_COUNT, "source_names out of sync");
_Static_assert(N_OF(precision_names) == DT_PREC_COUNT, "precision_names out of sync");
_Static_assert(N_OF(schedule_names) == DT_SCHED_COUNT, "schedule_names out of sync");
_Static_assert(N_OF(plugin_names) == DT_PLUGIN_COUNT, "plugin_names out of sync");
_Static_assert(N_OF(sp_mode_names) == DT_SP_MODE_COUNT, "sp_mode_names out of sync");
_Static_assert(N_OF(cp_split_names) == DT_CP_SPLIT_COUNT, "cp_split_names out of sync");
_Static_assert(N_OF(ac_names) == DT_AC_COUNT, "ac_names out of sync");
_Static_assert(N_OF(act_compress_names) == DT_ACT_COMPRESS_COUNT, "act_compress_names out of sync");
_Static_assert(N_OF(offload_names) == DT_OFFLOAD_COUNT, "offload_names out of sync");

/* Adds 0 to the offset, but comparing `&member` with a `T *` fails to compile (distinct
 * pointer types, -Werror) when the table's declared type does not match the struct field. */
#define TYPECHECK(m, T) (0 * sizeof(&((dt_config *)0)->m == (T *)0))
#define FLD(sec, k, member, T, ty, nm, nn)                                                   \
    {#sec "." k, #sec, k, ty, offsetof(dt_config, sec.member) + TYPECHECK(sec.member, T),      \
     sizeof(((dt_config *)0)->sec.member), nm, nn}
#define F_INT(sec, m) FLD(sec, #m, m, int, T_INT, NULL, 0)
#define F_U64(sec, m) FLD(sec, #m, m, uint64_t, T_U64, NULL, 0)
#define F_FLOAT(sec, m) FLD(sec, #m, m, float, T_FLOAT, NULL, 0)
#define F_BOOL(sec, m) FLD(sec, #m, m, bool, T_BOOL, NULL, 0)
#define F_STR(sec, k, m) FLD(sec, k, m, dt_path, T_STR, NULL, 0)
#define F_ENUM(sec, m, E, nm) FLD(sec, #m, m, E, T_ENUM, nm, N_OF(nm))

/* Printing walks this order, so it is also the order of `dt_config_print` output. */
static const field fields[] = {
    F_ENUM(model, arch, dt_arch, arch_names),
    F_INT(model, n_layer),
    F_INT(model, n_head),
    F_INT(model, n_kv_head),
    F_INT(model, n_embd),
    F_INT(model, vocab_size),
    F_INT(model, max_seq_len),
    F_INT(model, ffn_hidden),
    F_FLOAT(model, rope_theta),
    F_FLOAT(model, norm_eps),
    F_STR(model, "init", init),
    F_INT(model, frames),
    F_INT(model, channels),
    F_INT(model, height),
    F_INT(model, width),
    F_INT(model, patch_t),
    F_INT(model, patch_h),
    F_INT(model, patch_w),
    F_INT(model, n_classes),
    F_ENUM(model, attn, dt_dit_attn, dit_attn_names),
    F_INT(model, text_len),
    F_INT(model, text_dim),
    F_FLOAT(model, timestep_shift),
    F_STR(data, "train", train),
    F_STR(data, "val", val),
    F_STR(data, "tokenizer", tokenizer),
    F_BOOL(data, shuffle),
    F_BOOL(data, doc_mask),
    F_INT(data, eot_token),
    F_INT(data, doc_len),
    F_ENUM(data, source, dt_data_source, source_names),
    F_INT(data, shapes),
    F_STR(data, "buckets", buckets),
    F_FLOAT(data, label_dropout),
    F_INT(train, batch_size),
    F_INT(train, micro_batch_size),
    F_INT(train, seq_len),
    F_INT(train, steps),
    F_U64(train, seed),
    F_INT(train, log_every),
    F_INT(train, eval_every),
    F_INT(train, eval_batches),
    F_INT(train, sample_tokens),
    F_STR(train, "metrics", metrics),
    F_STR(train, "export", export_path),
    F_STR(train, "mem_report", mem_report),
    F_STR(train, "trace", trace),
    F_STR(train, "mem_timeline", mem_timeline),
    F_INT(train, comm_timeout),
    F_FLOAT(train, ema_decay),
    F_INT(train, rebalance_every),
    F_FLOAT(train, rebalance_margin),
    F_FLOAT(optim, lr),
    F_FLOAT(optim, min_lr),
    F_INT(optim, warmup_steps),
    F_ENUM(optim, schedule, dt_lr_schedule, schedule_names),
    F_FLOAT(optim, beta1),
    F_FLOAT(optim, beta2),
    F_FLOAT(optim, eps),
    F_FLOAT(optim, weight_decay),
    F_ENUM(plugin, type, dt_plugin_type, plugin_names),
    F_ENUM(plugin, precision, dt_precision, precision_names),
    F_FLOAT(plugin, grad_clip),
    F_INT(plugin, tp_size),
    F_INT(plugin, sp_size),
    F_INT(plugin, pp_size),
    F_INT(plugin, cp_size),
    F_ENUM(plugin, cp_split, dt_cp_split, cp_split_names),
    F_INT(plugin, zero_stage),
    F_ENUM(plugin, sp_mode, dt_sp_mode, sp_mode_names),
    F_INT(plugin, microbatches),
    F_STR(plugin, "pp_layers", pp_layers),
    F_STR(plugin, "pp_schedule", pp_schedule),
    F_INT(plugin, pp_chunks),
    F_BOOL(plugin, pp_scatter),
    F_FLOAT(plugin, bucket_mb),
    F_BOOL(plugin, overlap),
    F_ENUM(plugin, ac, dt_ac_mode, ac_names),
    F_INT(plugin, ac_every),
    F_ENUM(plugin, act_compress, dt_act_compress, act_compress_names),
    F_ENUM(plugin, offload, dt_offload, offload_names),
    F_STR(plugin, "offload_dir", offload_dir),
    F_ENUM(plugin, act_offload, dt_offload, offload_names),
    F_STR(plugin, "act_offload_dir", act_offload_dir),
    F_INT(plugin, loss_scale_window),
    F_FLOAT(plugin, initial_scale),
    F_FLOAT(plugin, offload_window_mb),
    F_STR(checkpoint, "dir", dir),
    F_INT(checkpoint, every),
    F_STR(checkpoint, "resume", resume),
    F_INT(checkpoint, keep),
    F_BOOL(checkpoint, async),
};
enum { N_FIELDS = (int)(sizeof fields / sizeof *fields) };
_Static_assert(N_FIELDS <=
                   (int)(sizeof((dt_config_sources *)0)->by / sizeof *((dt_config_sources *)0)->by),
               "dt_config_sources.by is too small for the keys");

static const char *enum_name(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : "?";
}
const char *dt_arch_name(dt_arch a) { return enum_name(arch_names, N_OF(arch_names), (int)a); }
const char *dt_precision_name(dt_precision p) {
    return enum_name(precision_names, N_OF(precision_names), (int)p);
}
dt_dtype dt_precision_mm_type(dt_precision p) {
    return p == DT_PREC_BF16 ? DT_BF16 : p == DT_PREC_FP16 ? DT_F16 : DT_F32;
}
const char *dt_plugin_type_name(dt_plugin_type t) {
    return enum_name(plugin_names, N_OF(plugin_names), (int)t);
}
const char *dt_lr_schedule_name(dt_lr_schedule s) {
    return enum_name(schedule_names, N_OF(schedule_names), (int)s);
}
const char *dt_sp_mode_name(dt_sp_mode m) {
    return enum_name(sp_mode_names, N_OF(sp_mode_names), (int)m);
}

const char *dt_cp_split_name(dt_cp_split s) {
    return enum_name(cp_split_names, N_OF(cp_split_names), (int)s);
}
const char *dt_ac_mode_name(dt_ac_mode m) { return enum_name(ac_names, N_OF(ac_names), (int)m); }
const char *dt_act_compress_name(dt_act_compress m) {
    return enum_name(act_compress_names, N_OF(act_compress_names), (int)m);
}
const char *dt_offload_name(dt_offload m) {
    return enum_name(offload_names, N_OF(offload_names), (int)m);
}

const char *dt_dit_attn_name(dt_dit_attn a) {
    return enum_name(dit_attn_names, N_OF(dit_attn_names), (int)a);
}
const char *dt_data_source_name(dt_data_source s) {
    return enum_name(source_names, N_OF(source_names), (int)s);
}

static void set_str(char *dst, const char *src) {
    memset(dst, 0, DT_PATH_MAX); /* zeroed tail: equal configs are equal bytes */
    strncpy(dst, src, DT_PATH_MAX - 1);
}

void dt_config_defaults(dt_config *c) {
    memset(c, 0, sizeof *c); /* padding too, so memcmp of two configs is meaningful */
    dt_model_config *m = &c->model;
    m->arch = DT_ARCH_GPT2;
    m->n_layer = 4, m->n_head = 4, m->n_kv_head = 0, m->n_embd = 128;
    m->vocab_size = 256, m->max_seq_len = 128, m->ffn_hidden = 0;
    m->rope_theta = 10000.0f, m->norm_eps = 1e-5f;
    m->frames = 8, m->channels = 3, m->height = 16, m->width = 16;
    m->patch_t = 1, m->patch_h = 2, m->patch_w = 2;
    m->n_classes = 0, m->attn = DT_DIT_ATTN_FULL, m->timestep_shift = 1.0f;
    set_str(c->data.train, "data/fortunes/train.bin");
    set_str(c->data.val, "data/fortunes/val.bin");
    c->data.shuffle = false;
    c->data.eot_token = -1;
    c->data.source = DT_SOURCE_TOKENS, c->data.shapes = 2;
    c->data.label_dropout = 0.1f;
    dt_train_config *t = &c->train;
    t->batch_size = 16, t->micro_batch_size = 0, t->seq_len = 128, t->steps = 600;
    t->seed = 1337, t->log_every = 50, t->eval_every = 200, t->eval_batches = 8;
    t->sample_tokens = 300;
    t->rebalance_margin = 0.05f;
    set_str(t->export_path, "runs/fortunes/model.safetensors");
    dt_optim_config *o = &c->optim;
    o->lr = 3e-3f, o->min_lr = 3e-4f, o->warmup_steps = 50, o->schedule = DT_SCHED_COSINE;
    o->beta1 = 0.9f, o->beta2 = 0.95f, o->eps = 1e-8f, o->weight_decay = 0.1f;
    dt_plugin_config *p = &c->plugin;
    p->type = DT_PLUGIN_NONE, p->precision = DT_PREC_FP32, p->grad_clip = 1.0f;
    p->tp_size = 1, p->sp_size = 1, p->pp_size = 1, p->cp_size = 1, p->zero_stage = 0,
    p->bucket_mb = 25.0f;
    p->overlap = true;
    p->pp_chunks = 1;
    p->ac_every = 1;
    set_str(p->offload_dir, "offload");
    set_str(p->act_offload_dir, "offload");
    p->loss_scale_window = 2000;
    p->initial_scale = 65536.0f;
    p->offload_window_mb = 64.0f;
    set_str(p->pp_schedule, "1f1b");
    set_str(c->checkpoint.dir, "runs/fortunes/ckpt");
    c->checkpoint.every = 300, c->checkpoint.keep = 2;
    t->comm_timeout = 300;
}

/* ---- lookup and "did you mean" ---- */

static const field *find_field(const char *section, const char *key) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].section, section) && !strcmp(fields[i].key, key))
            return &fields[i];
    return NULL;
}

static bool known_section(const char *s) {
    for (int i = 0; i < N_SECTIONS; i++)
        if (!strcmp(section_names[i], s))
            return true;
    return false;
}

/* Edit distance counting a swap of neighbours as one edit (optimal string alignment), the
 * commonest typo ("modle"). Names longer than 31 characters are never close. */
static int edit_distance(const char *a, const char *b) {
    int na = (int)strlen(a), nb = (int)strlen(b);
    if (na > 31 || nb > 31)
        return 1000;
    int d[32][32];
    for (int i = 0; i <= na; i++)
        for (int j = 0; j <= nb; j++) {
            if (!i || !j) {
                d[i][j] = i + j;
                continue;
            }
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

static bool close_enough(const char *typed, int d) {
    int len = (int)strlen(typed);
    return d <= (len < 6 ? 1 : len < 12 ? 2 : 3);
}

/* The best suggestion for an unknown key: a near miss in the same section, else the same
 * (or a near) key in another section ("model.lr" -> "optim.lr"). NULL when nothing is close. */
static const field *suggest_key(const char *section, const char *key) {
    const field *best = NULL;
    int best_d = 1000;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (int i = 0; i < N_FIELDS; i++) {
            bool same = !strcmp(fields[i].section, section);
            if (same != (pass == 0))
                continue;
            int d = edit_distance(key, fields[i].key);
            if (d < best_d && close_enough(key, d))
                best = &fields[i], best_d = d;
        }
    return best;
}

static const char *suggest_section(const char *s) {
    const char *best = NULL;
    int best_d = 1000;
    for (int i = 0; i < N_SECTIONS; i++) {
        int d = edit_distance(s, section_names[i]);
        if (d < best_d && close_enough(s, d))
            best = section_names[i], best_d = d;
    }
    return best;
}

static dt_status unknown_section(const char *section, const char *where) {
    const char *hint = suggest_section(section);
    char dym[96] = "";
    if (hint)
        snprintf(dym, sizeof dym, "did you mean [%s]? ", hint);
    return dt_err_set(DT_ERR_ARG,
                      "unknown section [%s] in %s (%svalid: model, data, train, optim, plugin, "
                      "checkpoint)",
                      section, where, dym);
}

static dt_status unknown_key(const char *section, const char *key, const char *where) {
    const field *hint = suggest_key(section, key);
    if (hint)
        return dt_err_set(DT_ERR_ARG, "unknown key %s.%s in %s; did you mean %s?", section, key,
                          where, hint->name);
    return dt_err_set(DT_ERR_ARG, "unknown key %s.%s in %s (configs/default.ini lists every key)",
                      section, key, where);
}

/* ---- values ---- */

/* Trim, drop a trailing ` # comment` and surrounding "quotes" from a file value into out.
 * Returns an error text or NULL. inih has already cut ` ; comment` and leading blanks. */
static const char *clean_value(const char *raw, bool comments, char *out, size_t n) {
    while (*raw == ' ' || *raw == '\t')
        raw++;
    size_t len;
    if (*raw == '"') {
        const char *end = strchr(raw + 1, '"');
        if (!end)
            return "unterminated \"quoted\" value";
        const char *rest = end + 1;
        while (*rest == ' ' || *rest == '\t' || *rest == '\r' || *rest == '\n')
            rest++;
        if (*rest && !(comments && *rest == '#'))
            return "unexpected text after the closing quote";
        raw++;
        len = (size_t)(end - raw);
    } else {
        len = strlen(raw);
        if (comments) /* '#' starts a comment at the start or after a blank: a#b is a value */
            for (size_t i = 0; i < len; i++)
                if (raw[i] == '#' && (i == 0 || raw[i - 1] == ' ' || raw[i - 1] == '\t')) {
                    len = i;
                    break;
                }
        while (len && strchr(" \t\r\n", raw[len - 1]))
            len--;
    }
    if (len >= n)
        return "value is too long";
    memcpy(out, raw, len);
    out[len] = 0;
    return NULL;
}

static bool fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return false;
}

/* Parse `v` into the field of *c. On failure writes the reason ("'12x' is not an integer")
 * into why and returns false. */
static bool parse_value(const field *f, const char *v, dt_config *c, char *why, size_t n) {
    char *p = (char *)c + f->off, *end = NULL;
    errno = 0;
    switch (f->type) {
    case T_INT: {
        long x = strtol(v, &end, 10);
        if (end == v || *end)
            return fail(why, n, "'%s' is not an integer", v);
        if (errno == ERANGE || x < -2147483647L - 1 || x > 2147483647L)
            return fail(why, n, "'%s' is out of range for an integer", v);
        int i = (int)x;
        memcpy(p, &i, sizeof i);
        return true;
    }
    case T_U64: {
        const char *s = v;
        while (*s == ' ' || *s == '\t')
            s++;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || *s == '-') /* strtoull silently negates "-1" */
            return fail(why, n, "'%s' is not a non-negative integer", v);
        if (errno == ERANGE)
            return fail(why, n, "'%s' does not fit in 64 bits", v);
        uint64_t u = (uint64_t)x;
        memcpy(p, &u, sizeof u);
        return true;
    }
    case T_FLOAT: {
        float x = strtof(v, &end);
        if (end == v || *end)
            return fail(why, n, "'%s' is not a number", v);
        if (errno == ERANGE || !isfinite(x))
            return fail(why, n, "'%s' is out of range for a float", v);
        memcpy(p, &x, sizeof x);
        return true;
    }
    case T_BOOL: {
        static const char *const yes[] = {"true", "1", "yes", "on"};
        static const char *const no[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            int hit = !strcasecmp(v, yes[i]) ? 1 : !strcasecmp(v, no[i]) ? 2 : 0;
            if (hit) {
                bool b = hit == 1;
                memcpy(p, &b, sizeof b);
                return true;
            }
        }
        return fail(why, n, "'%s' is not a boolean (use true/false, yes/no, on/off or 1/0)", v);
    }
    case T_ENUM: {
        for (int i = 0; i < f->n_names; i++)
            if (!strcmp(v, f->names[i])) {
                DT_ASSERT(f->size == sizeof i); /* enums are int-sized on our ABIs */
                memcpy(p, &i, sizeof i);
                return true;
            }
        int k = snprintf(why, n, "'%s' is not one of ", v);
        for (int i = 0; i < f->n_names && k > 0 && (size_t)k < n; i++)
            k += snprintf(why + k, n - (size_t)k, "%s%s", i ? "|" : "", f->names[i]);
        return false;
    }
    case T_STR:
        if (strlen(v) >= DT_PATH_MAX)
            return fail(why, n, "value is %zu characters long; the limit is %d", strlen(v),
                     DT_PATH_MAX - 1);
        set_str(p, v);
        return true;
    }
    snprintf(why, n, "internal error: unknown field type");
    return false;
}

static void format_value(const field *f, const dt_config *c, char *out, size_t n) {
    const char *p = (const char *)c + f->off;
    int i = 0;
    uint64_t u = 0;
    float x = 0;
    bool b = false;
    memcpy(f->type == T_U64 ? (void *)&u : f->type == T_FLOAT ? (void *)&x
                            : f->type == T_BOOL ? (void *)&b : (void *)&i,
           p, f->type == T_STR ? 0 : f->size);
    switch (f->type) {
    case T_INT: snprintf(out, n, "%d", i); return;
    case T_U64: snprintf(out, n, "%" PRIu64, u); return;
    case T_BOOL: snprintf(out, n, "%s", b ? "true" : "false"); return;
    case T_ENUM: snprintf(out, n, "%s", enum_name(f->names, f->n_names, i)); return;
    case T_STR: snprintf(out, n, "\"%s\"", p); return;
    case T_FLOAT:
        if (x == floorf(x) && fabsf(x) < 1e7f) { /* 10000, not 1e+04 */
            snprintf(out, n, "%.0f", (double)x);
            return;
        }
        /* the shortest text that reads back to the same float (at most 9 digits) */
        for (int prec = 1; prec <= 9; prec++) {
            snprintf(out, n, "%.*g", prec, (double)x);
            if (strtof(out, NULL) == x)
                return;
        }
        return;
    }
}

/* ---- files and strings, through inih ---- */

typedef struct parse_ctx {
    dt_config *cfg;
    const char *origin;
    const char *text; /* whole input, NUL-terminated */
    size_t pos;
    int lineno;   /* lines handed to inih so far == the line the handler is looking at */
    int err_line; /* line of the first error we found (0: none); inih reports syntax ones */
    int seen[N_FIELDS]; /* the line each key was set on (0: not yet): a key twice is an error */
    dt_config_sources *sources; /* which file set each key before (NULL: not tracked) */
    dt_status err_st;
    char err[900];
} parse_ctx;

static void ctx_fail(parse_ctx *x) {
    if (!x->err_line) { /* keep the first error: the message is already in dt_err_msg */
        x->err_line = x->lineno;
        x->err_st = DT_ERR_ARG;
        snprintf(x->err, sizeof x->err, "%s", dt_err_msg());
    }
}

/* fgets-style reader over the text. It counts lines (the handler has no line number in this
 * inih build), strips leading blanks so an indented key is not taken for inih's multi-line
 * continuation, and turns a line longer than inih's buffer into an error rather than letting
 * inih split it into two bogus lines. */
static char *read_line(char *str, int num, void *stream) {
    parse_ctx *x = stream;
    const char *s = x->text + x->pos;
    if (!*s)
        return NULL;
    size_t len = strcspn(s, "\n");
    x->pos += len + (s[len] == '\n');
    x->lineno++;
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    if (len + 2 > (size_t)num) {
        if (*s != '#' && *s != ';') { /* a long comment is harmless: drop it */
            if (!x->err_line) {
                dt_err_set(DT_ERR_ARG,
                           "line is %zu characters long, over the %d the INI reader accepts, "
                           "in %s:%d; shorten it or pass the value as --section.key=value",
                           len, num - 3, x->origin, x->lineno);
                ctx_fail(x);
            }
        }
        len = 0;
    }
    if (len && *s == '[' && !x->err_line) { /* inih calls no handler for a section line */
        size_t close = strcspn(s, "]\n");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(close - 1 < 63 ? close - 1 : 63), s + 1);
        if (close < len && !known_section(name)) {
            char where[600];
            snprintf(where, sizeof where, "%.500s:%d", x->origin, x->lineno);
            unknown_section(name, where);
            ctx_fail(x);
        }
    }
    memcpy(str, s, len);
    str[len] = '\n';
    str[len + 1] = 0;
    return str;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    parse_ctx *x = user;
    if (x->err_line)
        return 1; /* report only the first problem; later ones may be its consequences */
    char where[640];
    snprintf(where, sizeof where, "%s:%d", x->origin, x->lineno);
    if (!*section) {
        dt_err_set(DT_ERR_ARG, "key '%s' in %s comes before any [section]", name, where);
        ctx_fail(x);
        return 0;
    }
    if (!known_section(section)) {
        unknown_section(section, where);
        ctx_fail(x);
        return 0;
    }
    const field *f = find_field(section, name);
    if (!f) {
        unknown_key(section, name, where);
        ctx_fail(x);
        return 0;
    }
    int *seen = &x->seen[f - fields];
    if (*seen) { /* which one was meant is a guess: refuse rather than let the last win */
        dt_err_set(DT_ERR_ARG, "%s is set twice in %s, on lines %d and %d; keep one", f->name,
                   x->origin, *seen, x->lineno);
        ctx_fail(x);
        return 0;
    }
    *seen = x->lineno;
    char v[DT_PATH_MAX + 8], why[256];
    const char *bad = clean_value(value, true, v, sizeof v);
    if (bad) {
        dt_err_set(DT_ERR_ARG, "%s: %s in %s", f->name, bad, where);
        ctx_fail(x);
        return 0;
    }
    if (!parse_value(f, v, x->cfg, why, sizeof why)) {
        dt_err_set(DT_ERR_ARG, "%s: %s in %s", f->name, why, where);
        ctx_fail(x);
        return 0;
    }
    if (x->sources) {
        const char **by = &x->sources->by[f - fields];
        if (*by && strcmp(*by, x->origin) != 0)
            dt_warn("%s.%s is set by %s and again by %s: the last one wins", section, name, *by,
                    x->origin);
        *by = x->origin;
    }
    return 1;
}

static dt_status load_string(dt_config *c, const char *text, const char *origin,
                             dt_config_sources *sources) {
    if (!c || !text)
        return dt_err_set(DT_ERR_ARG, "%s: NULL config or text", __func__);
    dt_config tmp = *c; /* *c changes only when the whole input is good */
    parse_ctx x = {
        .cfg = &tmp, .origin = origin ? origin : "<string>", .text = text, .sources = sources};
    int rc = ini_parse_stream(read_line, &x, on_key, &x);
    if (rc < 0)
        return dt_err_set(DT_ERR_OOM, "%s: inih failed (%d) on %s", __func__, rc, x.origin);
    if (rc > 0 && (!x.err_line || rc < x.err_line)) { /* inih's own syntax error came first */
        const char *s = text;
        for (int i = 1; i < rc && *s; i++)
            s += strcspn(s, "\n") + (s[strcspn(s, "\n")] == '\n');
        while (*s == ' ' || *s == '\t')
            s++;
        int len = (int)strcspn(s, "\r\n");
        return dt_err_set(DT_ERR_ARG,
                          "cannot parse '%.*s%s' in %s:%d (expected [section] or key = value)",
                          len > 60 ? 60 : len, s, len > 60 ? "..." : "", x.origin, rc);
    }
    if (x.err_line)
        return dt_err_set(x.err_st, "%s", x.err);
    *c = tmp;
    return DT_OK;
}

dt_status dt_config_load_string(dt_config *c, const char *text, const char *origin) {
    return load_string(c, text, origin, NULL);
}

dt_status dt_config_load_file(dt_config *c, const char *path) {
    return dt_config_load_file_from(c, path, NULL);
}

dt_status dt_config_load_file_from(dt_config *c, const char *path, dt_config_sources *s) {
    if (!path)
        return dt_err_set(DT_ERR_ARG, "%s: NULL path", __func__);
    /* non-blocking, so a FIFO with no writer is refused at once instead of waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return dt_err_set(DT_ERR_IO, "cannot open config file '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        close(fd);
        return dt_err_set(DT_ERR_ARG, "config file '%s' is %s, not a file", path,
                          S_ISDIR(sb.st_mode)    ? "a directory"
                          : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                                 : "a device");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dt_err_set(DT_ERR_IO, "cannot open config file '%s': %s", path, strerror(errno));
    }
    enum { MAX_BYTES = 1 << 20 };
    char *buf = malloc(MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return dt_err_set(DT_ERR_OOM, "%s: no memory to read '%s'", __func__, path);
    }
    size_t n = fread(buf, 1, MAX_BYTES + 1, f);
    dt_status st = DT_OK;
    if (ferror(f))
        st = dt_err_set(DT_ERR_IO, "cannot read config file '%s': %s", path, strerror(errno));
    else if (n > MAX_BYTES)
        st = dt_err_set(DT_ERR_ARG, "config file '%s' is larger than 1 MiB", path);
    else if (memchr(buf, 0, n))
        st = dt_err_set(DT_ERR_ARG, "config file '%s' contains a NUL byte (binary file?)", path);
    fclose(f);
    if (st == DT_OK) {
        buf[n] = 0;
        st = load_string(c, buf, path, s);
    }
    free(buf);
    return st;
}

dt_status dt_config_set(dt_config *c, const char *assignment) {
    if (!c || !assignment)
        return dt_err_set(DT_ERR_ARG, "%s: NULL config or assignment", __func__);
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (!eq)
        return dt_err_set(DT_ERR_ARG, "override '%s' has no '=': expected --section.key=value",
                          assignment);
    char where[600];
    snprintf(where, sizeof where, "override --%.500s", assignment);
    if (!dot || dot > eq) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - assignment < 63 ? eq - assignment : 63),
                 assignment);
        for (int i = 0; i < N_FIELDS; i++)
            if (!strcmp(fields[i].key, key))
                return dt_err_set(DT_ERR_ARG, "override '%s' needs a section: --%s=%s?",
                                  assignment, fields[i].name, eq + 1);
        return dt_err_set(DT_ERR_ARG, "override '%s' needs a section: --section.key=value",
                          assignment);
    }
    char section[64], key[64];
    if (dot - assignment >= (ptrdiff_t)sizeof section || eq - dot - 1 >= (ptrdiff_t)sizeof key)
        return dt_err_set(DT_ERR_ARG, "unknown key (name too long) in %s", where);
    snprintf(section, sizeof section, "%.*s", (int)(dot - assignment), assignment);
    snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
    if (!known_section(section))
        return unknown_section(section, where);
    const field *f = find_field(section, key);
    if (!f)
        return unknown_key(section, key, where);
    char v[DT_PATH_MAX + 8], why[256];
    const char *bad = clean_value(eq + 1, false, v, sizeof v); /* '#' is literal here */
    if (bad)
        return dt_err_set(DT_ERR_ARG, "%s: %s in %s", f->name, bad, where);
    if (!parse_value(f, v, c, why, sizeof why))
        return dt_err_set(DT_ERR_ARG, "%s: %s in %s", f->name, why, where);
    return DT_OK;
}

void dt_config_print(const dt_config *c, FILE *f) {
    fprintf(f, "# dtrain configuration (dt_config_print): every key; loads back as a file\n");
    const char *section = "";
    for (int i = 0; i < N_FIELDS; i++) {
        if (strcmp(section, fields[i].section)) {
            section = fields[i].section;
            fprintf(f, "\n[%s]\n", section);
        }
        char v[DT_PATH_MAX + 8];
        format_value(&fields[i], c, v, sizeof v);
        fprintf(f, "%s = %s\n", fields[i].key, v);
    }
}

const char *dt_config_diff(const dt_config *a, const dt_config *b) {
    for (int i = 0; i < N_FIELDS; i++) {
        const char *pa = (const char *)a + fields[i].off, *pb = (const char *)b + fields[i].off;
        bool same = fields[i].type == T_STR ? !strncmp(pa, pb, DT_PATH_MAX)
                                            : !memcmp(pa, pb, fields[i].size);
        if (!same)
            return fields[i].name;
    }
    return NULL;
}
