/* The DiT's shape checks, parameter table, arenas, views and unit ranges (see dit.h); the
 * forward and backward are in dit_fwd.c.
 *
 * Parameter names follow the DiT / Open-Sora PyTorch modules (x_embedder.proj, t_embedder.mlp,
 * y_embedder.embedding_table, blocks.N.{adaLN_modulation.1, attn.qkv, attn.proj, mlp.fc1,
 * mlp.fc2}, final_layer.{adaLN_modulation.1, linear}); the patch embedding's Conv3d weight
 * [C, channels, pt, ph, pw] is stored flattened as a linear [C, channels pt ph pw].
 */
#include "models/dit_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"

dt_status dt_dit_check_config(const dt_dit_config *c) {
    const struct {
        const char *name;
        int v;
    } pos[] = {{"frames", c->frames}, {"channels", c->channels}, {"height", c->height},
               {"width", c->width},   {"pt", c->pt},             {"ph", c->ph},
               {"pw", c->pw},         {"n_layer", c->n_layer},   {"n_head", c->n_head},
               {"n_embd", c->n_embd}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return dt_err_set(DT_ERR_ARG, "dit: %s = %d must be positive", pos[i].name,
                              pos[i].v);
    const struct {
        const char *dim, *patch;
        int n, p;
    } div[] = {{"frames", "pt", c->frames, c->pt},
               {"height", "ph", c->height, c->ph},
               {"width", "pw", c->width, c->pw}};
    for (int i = 0; i < 3; i++)
        if (div[i].n % div[i].p)
            return dt_err_set(DT_ERR_ARG, "dit: %s = %d is not a multiple of the patch %s = %d",
                              div[i].dim, div[i].n, div[i].patch, div[i].p);
    if (c->n_embd % c->n_head)
        return dt_err_set(DT_ERR_ARG, "dit: n_embd = %d is not a multiple of n_head = %d",
                          c->n_embd, c->n_head);
    if (c->n_embd < 6)
        return dt_err_set(DT_ERR_ARG,
                          "dit: n_embd = %d is too small for the 3-D position code (>= 6)",
                          c->n_embd);
    if (c->n_classes < 0)
        return dt_err_set(DT_ERR_ARG, "dit: n_classes = %d must be >= 0", c->n_classes);
    if ((unsigned)c->attn >= DT_DIT_ATTN_COUNT)
        return dt_err_set(DT_ERR_ARG, "dit: attn = %d is not full or spatial_temporal",
                          (int)c->attn);
    int64_t tokens = (int64_t)(c->frames / c->pt) * (c->height / c->ph) * (c->width / c->pw);
    if (tokens > (1 << 24))
        return dt_err_set(DT_ERR_ARG, "dit: %lld tokens per clip is more than 2^24",
                          (long long)tokens);
    return DT_OK;
}

int dt_dit_tokens(const dt_dit_config *c) {
    return (c->frames / c->pt) * (c->height / c->ph) * (c->width / c->pw);
}
int dt_dit_patch_dim(const dt_dit_config *c) { return c->channels * c->pt * c->ph * c->pw; }
int64_t dt_dit_clip_numel(const dt_dit_config *c) {
    return (int64_t)c->frames * c->channels * c->height * c->width;
}

/* ---- parameter table ------------------------------------------------------------------- */

static dt_status add_param(dt_dit *d, const char *name, int64_t rows, int64_t cols,
                           dt_param_init init, float std) {
    dt_param *p;
    return dt_param_append(&d->params, &d->n_params, &d->cap_params, &d->n_total, name, rows,
                           cols, init, std, &p);
}

/* A linear's weight and bias: Xavier's variance 2 / (in + out), or zeros. */
static dt_status add_linear(dt_dit *d, const char *prefix, int out, int in, bool zero) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    DT_TRY(add_param(d, name, out, in, zero ? DT_INIT_ZEROS : DT_INIT_NORMAL,
                     zero ? 0.0f : sqrtf(2.0f / (float)(in + out))));
    snprintf(name, sizeof name, "%s.bias", prefix);
    return add_param(d, name, out, 0, DT_INIT_ZEROS, 0.0f);
}

static dt_status build_table(dt_dit *d) {
    const dt_dit_config *c = &d->cfg;
    int C = d->C, L = c->n_layer;
    d->unit_first[0] = 0;
    DT_TRY(add_linear(d, "x_embedder.proj", C, d->P, false));
    DT_TRY(add_linear(d, "t_embedder.mlp.0", C, DT_DIT_FREQ_DIM, false));
    DT_TRY(add_linear(d, "t_embedder.mlp.2", C, C, false));
    if (c->n_classes > 0)
        DT_TRY(add_param(d, "y_embedder.embedding_table.weight", c->n_classes + 1, C,
                         DT_INIT_NORMAL, 0.02f));
    d->n_embed_params = d->n_params;
    char name[96];
    for (int l = 0; l < L; l++) {
        d->unit_first[l + 1] = d->n_params;
        const struct {
            const char *what;
            int out, in;
            bool zero;
        } lin[] = {{"adaLN_modulation.1", 6 * C, C, true},
                   {"attn.qkv", 3 * C, C, false},
                   {"attn.proj", C, C, false},
                   {"mlp.fc1", d->F, C, false},
                   {"mlp.fc2", C, d->F, false}};
        for (int i = 0; i < 5; i++) {
            snprintf(name, sizeof name, "blocks.%d.%s", l, lin[i].what);
            DT_TRY(add_linear(d, name, lin[i].out, lin[i].in, lin[i].zero));
        }
    }
    d->per_layer = L > 0 ? (d->n_params - d->n_embed_params) / L : 0;
    d->unit_first[L + 1] = d->n_params;
    DT_TRY(add_linear(d, "final_layer.adaLN_modulation.1", 2 * C, C, true));
    DT_TRY(add_linear(d, "final_layer.linear", d->P, C, true));
    d->unit_first[L + 2] = d->n_params;
    return DT_OK;
}

/* ---- views ------------------------------------------------------------------------------ */

static void view_linear(dt_linear *l, const dt_param *wp, float *w, float *g, int64_t first) {
    const dt_param *bp = wp + 1;
    l->out = (int)wp->shape[0];
    l->in = (int)wp->shape[1];
    if (w) {
        l->w = w + (wp->offset - first);
        l->b = w + (bp->offset - first);
    }
    if (g) {
        l->dw = g + (wp->offset - first);
        l->db = g + (bp->offset - first);
    }
    l->w_lp = NULL;
}

void dt_dit_bind_unit(dt_dit *d, int unit, float *w, float *grad) {
    int L = d->cfg.n_layer;
    DT_ASSERT(unit >= 0 && unit < L + 2);
    if (!d->training)
        grad = NULL;
    const dt_param *p = &d->params[d->unit_first[unit]];
    int64_t first = p->offset;
    if (unit == 0) {
        view_linear(&d->x_emb, p, w, grad, first);
        view_linear(&d->t_fc1, p + 2, w, grad, first);
        view_linear(&d->t_fc2, p + 4, w, grad, first);
        if (d->cfg.n_classes > 0) {
            if (w)
                d->y_table = w + (p[6].offset - first);
            if (grad)
                d->dy_table = grad + (p[6].offset - first);
        }
    } else if (unit <= L) {
        dt_dit_block *b = &d->blocks[unit - 1];
        dt_linear *lin[5] = {&b->ada, &b->qkv, &b->proj, &b->fc1, &b->fc2};
        for (int i = 0; i < 5; i++)
            view_linear(lin[i], p + 2 * i, w, grad, first);
    } else {
        view_linear(&d->final_ada, p, w, grad, first);
        view_linear(&d->final_lin, p + 2, w, grad, first);
    }
}

int dt_dit_n_units(const dt_dit *d) { return d->cfg.n_layer + 2; }

void dt_dit_unit_range(const dt_dit *d, int unit, int64_t *first, int64_t *count) {
    DT_ASSERT(unit >= 0 && unit < d->cfg.n_layer + 2);
    int a = d->unit_first[unit], b = d->unit_first[unit + 1];
    *first = d->params[a].offset;
    *count = (b < d->n_params ? d->params[b].offset : d->n_total) - *first;
}

/* ---- activations ------------------------------------------------------------------------ */

/* Hands out 64-byte aligned pieces of an arena; with base == NULL it only measures. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static float *carve(carver *cv, size_t floats) {
    float *p = cv->base ? (float *)(cv->base + cv->used) : NULL;
    cv->used += (floats * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

/* The "dit.activations" arena: what the backward reads (and the forward's output). */
static void carve_acts(dt_dit *d, carver *cv) {
    size_t B = (size_t)d->B, N = B * d->S, C = (size_t)d->C, P = (size_t)d->P;
    size_t L = (size_t)d->cfg.n_layer, NH = (size_t)d->NH, F = (size_t)d->F;
    d->pos = carve(cv, (size_t)d->S * C);
    d->patches = carve(cv, N * P);
    d->tfreq = carve(cv, B * DT_DIT_FREQ_DIM);
    d->th = carve(cv, B * C);
    d->ts = carve(cv, B * C);
    d->c = carve(cv, B * C);
    d->sc = carve(cv, B * C);
    d->res = carve(cv, (L + 1) * N * C);
    for (size_t l = 0; l < L; l++) {
        dt_dit_acts *a = &d->acts[l];
        a->mod = carve(cv, B * 6 * C);
        a->aff = carve(cv, B * 4 * C);
        a->mean1 = carve(cv, N);
        a->rstd1 = carve(cv, N);
        a->m1 = carve(cv, N * C);
        a->qkv = carve(cv, N * 3 * C);
        a->y = carve(cv, N * C);
        a->lse = carve(cv, N * NH);
        a->a = carve(cv, N * C);
        a->x2 = carve(cv, N * C);
        a->mean2 = carve(cv, N);
        a->rstd2 = carve(cv, N);
        a->m2 = carve(cv, N * C);
        a->h = carve(cv, N * F);
        a->f = carve(cv, N * C);
    }
    d->modf = carve(cv, B * 2 * C);
    d->afff = carve(cv, B * 2 * C);
    d->meanf = carve(cv, N);
    d->rstdf = carve(cv, N);
    d->mf = carve(cv, N * C);
    d->tok_out = carve(cv, N * P);
    d->out = carve(cv, B * (size_t)dt_dit_clip_numel(&d->cfg));
    d->labels = (int32_t *)carve(cv, B);
}

/* The "dit.transients" arena: shared by every block, not kept between calls. */
static void carve_scratch(dt_dit *d, carver *cv) {
    size_t B = (size_t)d->B, N = B * d->S, C = (size_t)d->C, F = (size_t)d->F;
    d->qkv_rows = carve(cv, N * 3 * C);
    d->att_rows = carve(cv, N * C);
    d->gel = carve(cv, N * F);
    if (!d->training)
        return;
    d->dtok = carve(cv, N * (size_t)d->P);
    d->dres = carve(cv, N * C);
    d->dA = carve(cv, N * C);
    d->dB = carve(cv, N * C);
    d->dg = carve(cv, N * F);
    d->dh = carve(cv, N * F);
    d->dqkv = carve(cv, N * 3 * C);
    d->dqkvp = carve(cv, N * 3 * C);
    d->dattp = carve(cv, N * C);
    d->dmod = carve(cv, B * 6 * C);
    d->dsc = carve(cv, B * C);
    d->dc = carve(cv, B * C);
    d->dts = carve(cv, B * C);
    d->dth = carve(cv, B * C);
}

static dt_status alloc_carved(dt_dit *d, dt_mem_cat cat, const char *name,
                              void (*plan)(dt_dit *, carver *), void **arena) {
    carver cv = {0};
    plan(d, &cv);
    DT_TRY(dt_mem_alloc(d->mem, cat, name, cv.used, arena));
    cv = (carver){.base = *arena};
    plan(d, &cv);
    return DT_OK;
}

/* Fixed 3-D sinusoidal positions: n_embd splits into three groups of 2k channels (k =
 * n_embd / 6) for the token's frame, row and column index; each group holds sin(p w_i) then
 * cos(p w_i), w_i = 10000^(-i/k) (the Transformer's code per axis, as DiT's 2-D one);
 * channels past 6k stay 0. */
static void fill_positions(dt_dit *d) {
    int C = d->C, k = C / 6;
    for (int tt = 0; tt < d->Tt; tt++)
        for (int hh = 0; hh < d->Th; hh++)
            for (int ww = 0; ww < d->Tw; ww++) {
                float *row = d->pos + ((size_t)(tt * d->Th + hh) * d->Tw + ww) * C;
                memset(row, 0, (size_t)C * sizeof *row);
                int p3[3] = {tt, hh, ww};
                for (int a = 0; a < 3; a++)
                    for (int i = 0; i < k; i++) {
                        double w = pow(10000.0, -(double)i / k);
                        row[2 * k * a + i] = (float)sin(p3[a] * w);
                        row[2 * k * a + k + i] = (float)cos(p3[a] * w);
                    }
            }
}

dt_status dt_dit_init(const dt_dit_config *cfg, const dt_dit_opts *opts, dt_mem *mem,
                      dt_dit **out) {
    *out = NULL;
    DT_TRY(dt_dit_check_config(cfg));
    if (opts->B <= 0)
        return dt_err_set(DT_ERR_ARG, "dit: B = %d clips per forward must be positive",
                          opts->B);
    dt_status st = DT_OK;
    dt_dit *d = calloc(1, sizeof *d);
    if (!d)
        return dt_err_set(DT_ERR_OOM, "dit: out of memory");
    d->cfg = *cfg;
    d->mem = mem;
    d->B = opts->B;
    d->training = opts->training;
    d->Tt = cfg->frames / cfg->pt;
    d->Th = cfg->height / cfg->ph;
    d->Tw = cfg->width / cfg->pw;
    d->S = dt_dit_tokens(cfg);
    d->P = dt_dit_patch_dim(cfg);
    d->C = cfg->n_embd;
    d->NH = cfg->n_head;
    d->F = DT_DIT_MLP_RATIO * cfg->n_embd;
    int L = cfg->n_layer;
    d->unit_first = calloc((size_t)L + 3, sizeof *d->unit_first);
    d->blocks = calloc((size_t)L, sizeof *d->blocks);
    d->acts = calloc((size_t)L, sizeof *d->acts);
    if (!d->unit_first || !d->blocks || !d->acts) {
        st = dt_err_set(DT_ERR_OOM, "dit: out of memory");
        goto fail;
    }
    DT_TRY_GOTO(build_table(d));
    DT_TRY_GOTO(dt_gemm_init(&d->gemm));
    d->ctx = (dt_nn_ctx){.gemm = d->gemm, .mm_type = DT_F32};
    size_t n = (size_t)d->n_total;
    DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_PARAMS, "dit.weights", n * sizeof(float),
                             (void **)&d->w));
    if (d->training)
        DT_TRY_GOTO(dt_mem_alloc(mem, DT_MEM_GRADS, "dit.grads", n * sizeof(float),
                                 (void **)&d->g));
    for (int u = 0; u < L + 2; u++) {
        int64_t first, count;
        dt_dit_unit_range(d, u, &first, &count);
        dt_dit_bind_unit(d, u, d->w + first, d->g ? d->g + first : NULL);
    }
    DT_TRY_GOTO(alloc_carved(d, DT_MEM_ACTS, "dit.activations", carve_acts, &d->act_arena));
    DT_TRY_GOTO(alloc_carved(d, DT_MEM_TEMP, "dit.transients", carve_scratch, &d->tmp_arena));
    fill_positions(d);
    *out = d;
    return DT_OK;
fail:
    dt_dit_free(d);
    return st;
}

void dt_dit_free(dt_dit *d) {
    if (!d)
        return;
    dt_mem_release(d->mem, d->tmp_arena);
    dt_mem_release(d->mem, d->act_arena);
    dt_mem_release(d->mem, d->g);
    dt_mem_release(d->mem, d->w);
    dt_gemm_free(d->gemm);
    free(d->acts);
    free(d->blocks);
    free(d->unit_first);
    free(d->params);
    free(d);
}

const dt_dit_config *dt_dit_config_of(const dt_dit *d) { return &d->cfg; }
int dt_dit_max_batch(const dt_dit *d) { return d->B; }

void dt_dit_init_weights(dt_dit *d, uint64_t seed) {
    dt_param_init_range(d->params, d->n_params, seed, 0, d->n_total, d->w);
}

void dt_dit_zero_grad(dt_dit *d) {
    if (d->g)
        memset(d->g, 0, (size_t)d->n_total * sizeof *d->g);
}

int dt_dit_n_params(const dt_dit *d) { return d->n_params; }
const dt_param *dt_dit_param(const dt_dit *d, int i) { return &d->params[i]; }
const dt_param *dt_dit_find_param(const dt_dit *d, const char *name) {
    for (int i = 0; i < d->n_params; i++)
        if (!strcmp(d->params[i].name, name))
            return &d->params[i];
    return NULL;
}
int64_t dt_dit_numel(const dt_dit *d) { return d->n_total; }
float *dt_dit_weights(dt_dit *d) { return d->w; }
float *dt_dit_grads(dt_dit *d) { return d->g; }
float *dt_dit_output(dt_dit *d) { return d->out; }

double dt_dit_flops_per_sample(const dt_dit *d) {
    double S = d->S, C = d->C, P = d->P, F = d->F, L = d->cfg.n_layer;
    double tokens = P * C + L * (3 * C * C + C * C + 2 * C * F) + C * P; /* MACs per token */
    double clip = DT_DIT_FREQ_DIM * C + C * C + L * 6 * C * C + 2 * C * C; /* per clip */
    double attn = 0; /* QK^T and PV: 2 T' C MACs per token, T' the sequence length seen */
    for (int l = 0; l < d->cfg.n_layer; l++) {
        bool st = d->cfg.attn == DT_DIT_ATTN_SPATIAL_TEMPORAL;
        double Tl = !st ? S : l % 2 == 0 ? (double)d->Th * d->Tw : d->Tt;
        attn += 2 * Tl * C;
    }
    return 3.0 * 2.0 * (S * (tokens + attn) + clip);
}
