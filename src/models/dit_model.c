/* The video DiT behind the model interface (models/model.h): each operation is the dt_dit
 * call of the same name; a micro-batch is float clip rows and velocity targets (dit.h); the
 * weights file is safetensors with the parameter table's names and the shape as metadata
 * ("arch" = "dit" and the named sizes). No ties, no token logits.
 * Owns the dt_dit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "models/dit.h"

/* the named sizes, in the order dt_model_sizes reports them (the text's last: files written
 * before a DiT had text lack them, and read as 0) */
static const char *const SIZE_KEYS[] = {"n_layer",   "n_head", "n_embd",   "frames",  "channels",
                                        "height",    "width",  "patch_t",  "patch_h", "patch_w",
                                        "n_classes", "attn",   "text_len", "text_dim"};
enum { N_SIZES = sizeof SIZE_KEYS / sizeof SIZE_KEYS[0], ATTN = 11, FIRST_OPTIONAL = 12 };
/* Not a size (a file's weights serve any shift), but how its sampler steps: written beside
 * them, read back by whoever samples the file (absent: 1, no shift). */
static const char SHIFT_KEY[] = "timestep_shift";

/* The file's timestep shift into *shift: a number in 0..DT_DIT_MAX_SHIFT, or absent. */
static dt_status read_shift(const dt_st_file *f, const char *path, float *shift) {
    const char *v = dt_st_metadata(f, SHIFT_KEY);
    if (!v)
        return DT_OK;
    char *end;
    double x = strtod(v, &end);
    if (*end || end == v || !(x >= 0 && x <= DT_DIT_MAX_SHIFT))
        return dt_err_set(DT_ERR_FORMAT, "%s: metadata %s = %.32s is not in 0..%g", path, SHIFT_KEY,
                          v, (double)DT_DIT_MAX_SHIFT);
    *shift = (float)x;
    return DT_OK;
}

static void size_values(const dt_model_config *c, int64_t v[N_SIZES]) {
    int64_t x[N_SIZES] = {c->n_layer,   c->n_head,        c->n_embd,   c->frames,  c->channels,
                          c->height,    c->width,         c->patch_t,  c->patch_h, c->patch_w,
                          c->n_classes, (int64_t)c->attn, c->text_len, c->text_dim};
    memcpy(v, x, sizeof x);
}

/* Sets size k of c (ranges: n_classes >= 0, attn 0 or 1, the text's as dit.h's, the rest
 * >= 1). */
static bool set_size(dt_model_config *c, int k, int64_t v) {
    int lo = k >= 10 ? 0 : 1;
    int64_t hi = k == ATTN ? DT_DIT_ATTN_COUNT - 1
                 : k == 12 ? DT_DIT_MAX_TEXT
                 : k == 13 ? DT_DIT_MAX_TEXT_DIM
                           : 1 << 24;
    if (v < lo || v > hi)
        return false;
    int *f[N_SIZES] = {&c->n_layer,   &c->n_head, &c->n_embd,   &c->frames,  &c->channels,
                       &c->height,    &c->width,  &c->patch_t,  &c->patch_h, &c->patch_w,
                       &c->n_classes, NULL,       &c->text_len, &c->text_dim};
    if (k == ATTN)
        c->attn = (dt_dit_attn)v;
    else
        *f[k] = (int)v;
    return true;
}

typedef struct dit_model {
    dt_model_config cfg;
    dt_dit *d;
} dit_model;

static dt_dit *D(const void *s) { return ((const dit_model *)s)->d; }

static const dt_model_config *config(const void *s) { return &((const dit_model *)s)->cfg; }
static void bind_unit(void *s, int u, float *w, float *g, dt_bf16 *lp) {
    dt_dit_bind_unit(D(s), u, w, g, lp);
}
static void set_hooks(void *s, const dt_model_hooks *h) { dt_dit_set_hooks(D(s), h); }
static dt_param_tables tables(const void *s) { return dt_dit_tables(D(s)); }
static dt_model_arenas arenas(void *s) {
    return (dt_model_arenas){
        .w = dt_dit_weights(D(s)), .g = dt_dit_grads(D(s)), .lp = dt_dit_weights_lp(D(s))};
}
static dt_comm *tp(const void *s) { return dt_dit_tp(D(s)); }
static void sync_lp(void *s) { dt_dit_sync_lp(D(s)); }
static dt_status forward_units(void *s, int slot, int u0, int u1, const dt_batch *b) {
    return dt_dit_forward_units(D(s), slot, u0, u1, b);
}
static dt_status loss_slot(void *s, int slot, const dt_batch *b, float grad_scale, bool backward,
                           double *loss_sum) {
    return dt_dit_loss_slot(D(s), slot, b, grad_scale, backward, loss_sum);
}
static dt_status backward_units(void *s, int slot, int grad, int u0, int u1, const dt_batch *b,
                                bool split) {
    return dt_dit_backward_units(D(s), slot, grad, u0, u1, b, split);
}
static dt_status weight_units(void *s, int slot, int u0, int u1, const dt_batch *b) {
    return dt_dit_weight_units(D(s), slot, u0, u1, b);
}
static int64_t boundary_count(const void *s, int B, int T) {
    (void)T;
    return dt_dit_boundary_count(D(s), B);
}
static float *boundary(void *s, int slot, int position, int B, int T) {
    (void)T;
    return dt_dit_boundary(D(s), slot, position, B);
}
static float *boundary_grad(void *s, int grad, int B, int T) {
    (void)T;
    return dt_dit_boundary_grad(D(s), grad, B);
}
static void evaluating(void *s, bool on) {
    if (!on)
        dt_dit_drop_saved(D(s));
}
static dt_status gather_full(void *s, const float *local, float *full) {
    return dt_dit_gather_full(D(s), local, full);
}
static double flops_per_sample(const void *s, int T) {
    (void)T; /* a clip is always its S tokens */
    return dt_dit_flops_per_sample(D(s));
}
static dt_status predict(void *s, const dt_batch *b, float *out) {
    return dt_dit_predict(D(s), b, out);
}

static dt_status use_shape(void *s, int k) { return dt_dit_use_shape(D(s), k); }

static int sizes(const void *s, dt_model_size *out) {
    int64_t v[N_SIZES];
    size_values(config(s), v);
    for (int k = 0; k < N_SIZES; k++)
        out[k] = (dt_model_size){SIZE_KEYS[k], v[k]};
    return N_SIZES;
}

static void describe(const void *s, char *out, size_t n) {
    const dt_model_config *c = config(s);
    snprintf(out, n,
             "dit: %d layers, %d heads, n_embd %d, clip %dx%dx%dx%d, patch %dx%dx%d "
             "(%d tokens), attn %s, %d classes",
             c->n_layer, c->n_head, c->n_embd, c->frames, c->channels, c->height, c->width,
             c->patch_t, c->patch_h, c->patch_w,
             dt_dit_tokens(&(dt_dit_config){.frames = c->frames,
                                            .height = c->height,
                                            .width = c->width,
                                            .pt = c->patch_t,
                                            .ph = c->patch_h,
                                            .pw = c->patch_w}),
             dt_dit_attn_name(c->attn), c->n_classes);
}

/* ---- weights files ---------------------------------------------------------------------- */

static dt_status save(const void *s, const float *w, const char *path) {
    const dt_dit *d = D(s);
    dt_st_writer *wr = NULL;
    DT_TRY(dt_st_writer_init(&wr));
    dt_status st = dt_st_writer_set_metadata(wr, "format", "pt");
    if (st == DT_OK)
        st = dt_st_writer_set_metadata(wr, "arch", dt_arch_name(DT_ARCH_DIT));
    int64_t v[N_SIZES];
    size_values(config(s), v);
    for (int k = 0; k < N_SIZES && st == DT_OK; k++) {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)v[k]);
        st = dt_st_writer_set_metadata(wr, SIZE_KEYS[k], text);
    }
    char shift[32];
    snprintf(shift, sizeof shift, "%.9g", (double)config(s)->timestep_shift);
    if (st == DT_OK)
        st = dt_st_writer_set_metadata(wr, SHIFT_KEY, shift);
    for (int i = 0; i < dt_dit_n_full_params(d) && st == DT_OK; i++) {
        const dt_param *p = dt_dit_full_param(d, i);
        st = dt_st_writer_add(wr, p->name, DT_ST_F32, p->ndim, p->shape, w + p->offset);
    }
    if (st == DT_OK)
        st = dt_st_writer_commit(wr, path);
    dt_st_writer_free(wr);
    return st;
}

/* The file is a DiT of this shape: its metadata names no other arch or size. */
static dt_status check_file(const dt_model_config *c, const dt_st_file *f, const char *path) {
    const char *arch = dt_st_metadata(f, "arch");
    if (arch && strcmp(arch, dt_arch_name(DT_ARCH_DIT)) != 0)
        return dt_err_set(DT_ERR_ARG, "%s: the file's model.arch is %s, the run's dit", path, arch);
    int64_t mine[N_SIZES];
    size_values(c, mine);
    for (int k = 0; k < N_SIZES; k++) {
        const char *v = dt_st_metadata(f, SIZE_KEYS[k]);
        char *end;
        long long x = v ? strtoll(v, &end, 10) : 0;
        if (v && (*end || end == v || x != mine[k]))
            return dt_err_set(DT_ERR_ARG, "%s: the file's model.%s is %.32s, the run's %lld", path,
                              SIZE_KEYS[k], v, (long long)mine[k]);
    }
    return DT_OK;
}

/* Into a FULL arena (dt_dit_full_numel floats), which the callers scatter to the ranks. */
static dt_status load(const void *s, float *w, const char *path) {
    const dt_dit *d = D(s);
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = check_file(config(s), f, path);
    for (int i = 0; i < dt_dit_n_full_params(d) && st == DT_OK; i++) {
        const dt_param *p = dt_dit_full_param(d, i);
        st = dt_st_read_f32(f, p->name, p->ndim, p->shape, w + p->offset);
    }
    dt_st_close(f);
    return st;
}

dt_status dt_dit_config_from_file(const char *path, dt_model_config *cfg) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_model_config c = *cfg;
    c.arch = DT_ARCH_DIT;
    dt_status st = DT_OK;
    for (int k = 0; k < N_SIZES && st == DT_OK; k++) {
        const char *v = dt_st_metadata(f, SIZE_KEYS[k]);
        char *end;
        long long x = v ? strtoll(v, &end, 10) : 0;
        if (v && (*end || end == v || !set_size(&c, k, x)))
            st = dt_err_set(DT_ERR_FORMAT, "%s: metadata %s = %.32s is not a valid dit size", path,
                            SIZE_KEYS[k], v);
    }
    c.timestep_shift = 1.0f;
    if (st == DT_OK)
        st = read_shift(f, path, &c.timestep_shift);
    dt_st_close(f);
    if (st == DT_OK)
        *cfg = c;
    return st;
}

dt_status dt_dit_config_from_sizes(const dt_model_size *sz, int n, dt_model_config *cfg) {
    dt_model_config c = *cfg;
    for (int k = 0; k < N_SIZES; k++) {
        int i = 0;
        while (i < n && strcmp(sz[i].key, SIZE_KEYS[k]) != 0)
            i++;
        if (i == n && k >= FIRST_OPTIONAL)
            set_size(&c, k, 0);
        else if (i == n || !set_size(&c, k, sz[i].value))
            return dt_err_set(DT_ERR_FORMAT, "model dit: size %s is missing or out of range",
                              SIZE_KEYS[k]);
    }
    *cfg = c;
    return DT_OK;
}

dt_status dt_dit_model_check_split(const dt_model_config *c, const dt_model_split *s) {
    dt_dit_config dc = dt_dit_config_from_model(c);
    DT_TRY(dt_dit_check_config(&dc));
    if (s->seq_len != dt_dit_tokens(&dc))
        return dt_err_set(DT_ERR_ARG,
                          "train.seq_len=%d, but a dit clip is %d tokens "
                          "(frames/patch_t x height/patch_h x width/patch_w)",
                          s->seq_len, dt_dit_tokens(&dc));
    return dt_dit_check_split(&dc, s);
}

static void free_dit(void *s) {
    if (!s)
        return;
    dt_dit_free(D(s));
    free(s);
}

static const dt_model_ops dit_ops = {
    .free = free_dit,
    .config = config,
    .bind_unit = bind_unit,
    .set_hooks = set_hooks,
    .tables = tables,
    .arenas = arenas,
    .tp = tp,
    .sync_lp = sync_lp,
    .evaluating = evaluating,
    .forward_units = forward_units,
    .loss_slot = loss_slot,
    .backward_units = backward_units,
    .weight_units = weight_units,
    .boundary_count = boundary_count,
    .boundary = boundary,
    .boundary_grad = boundary_grad,
    .gather_full = gather_full,
    .flops_per_sample = flops_per_sample,
    .save = save,
    .load = load,
    .sizes = sizes,
    .describe = describe,
    .predict = predict,
    .use_shape = use_shape,
};

dt_status dt_dit_model_create(const dt_model_config *cfg, const dt_model_opts *opts, dt_mem *mem,
                              dt_model **out) {
    *out = NULL;
    dt_model *m = calloc(1, sizeof *m);
    dit_model *s = calloc(1, sizeof *s);
    if (!m || !s) {
        free(m);
        free(s);
        return dt_err_set(DT_ERR_OOM, "model: out of memory");
    }
    s->cfg = *cfg;
    dt_dit_config dc = dt_dit_config_from_model(cfg);
    dt_status st = dt_dit_init_model(&dc, opts, mem, &s->d);
    if (st != DT_OK) {
        free(s);
        free(m);
        return st;
    }
    *m = (dt_model){.ops = &dit_ops, .self = s};
    *out = m;
    return DT_OK;
}
