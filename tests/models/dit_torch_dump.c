/* The C side of the DiT's PyTorch cross-check (tests/models/torch_dit.py): builds a small video
 * DiT through the public dt_dit_* API, gives every tensor random non-zero values (so that no
 * gradient is zero by the adaLN-Zero initialisation), runs one rectified-flow training step -
 * forward of x_t = (1 - t) x0 + t eps, the MSE against v = eps - x0, backward, one AdamW
 * update - and writes everything PyTorch needs to redo and judge it into one safetensors file:
 *   w.NAME, g.NAME, u.NAME   initial weights, gradients, updated weights of every parameter
 *   x0, eps [B, frames, channels, height, width], t [B], labels [B] (I32, n_classes = null)
 *   text [B, 1 + TEXT_LEN max(TEXT_DIM, 1)]  with text: each clip's text row (models/dit.h):
 *                            clip 0 TEXT_LEN tokens, clip 1 half as many, clip 2 none
 *   out [B, frames, channels, height, width]   the model's output (the predicted velocity)
 *   __metadata__             the shape, the AdamW hyper-parameters, the loss (%.17g) and
 *                            the model's FLOPs per trained clip
 *
 *   dit_torch_dump OUT.safetensors full|spatial_temporal N_CLASSES [TEXT_LEN TEXT_DIM]
 *
 * Not a test by itself (tests/models/torch_dit.sh runs it and then PyTorch). One process.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "models/dit.h"
#include "models/flow.h"
#include "optim/adamw.h"

enum { B = 3, SEED = 7 };

/* The AdamW step the file records; torch_dit.py reads these from the metadata. */
static const dt_optim_config OPTIM = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                                      .eps = 1e-6f, .weight_decay = 0.1f};

/* Every tensor the DiT initialises to zero (biases, adaLN modulations, the final linear) gets
 * N(0, 0.05^2) values instead: the cross-check wants every path of the backward live. */
static void randomise_zeros(dt_dit *d) {
    float *w = dt_dit_weights(d);
    for (int i = 0; i < dt_dit_n_params(d); i++) {
        const dt_param *p = dt_dit_param(d, i);
        if (p->init == DT_INIT_ZEROS)
            dt_rng_fill_normal(SEED + 1, p->name, 0, p->numel, 0.0f, 0.05f, w + p->offset);
    }
}

/* Adds "PREFIX.NAME" for every parameter, viewing arena `a` (the names are kept in *names,
 * which the caller frees after the commit). */
static dt_status add_params(dt_st_writer *wr, const dt_dit *d, const char *prefix,
                            const float *a, char (*names)[112]) {
    for (int i = 0; i < dt_dit_n_params(d); i++) {
        const dt_param *p = dt_dit_param(d, i);
        snprintf(names[i], sizeof names[i], "%s.%s", prefix, p->name);
        DT_TRY(dt_st_writer_add(wr, names[i], DT_ST_F32, p->ndim, p->shape, a + p->offset));
    }
    return DT_OK;
}

static dt_status set_meta_int(dt_st_writer *wr, const char *key, long long v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    return dt_st_writer_set_metadata(wr, key, s);
}

static dt_status set_meta_num(dt_st_writer *wr, const char *key, double v) {
    char s[40];
    snprintf(s, sizeof s, "%.17g", v);
    return dt_st_writer_set_metadata(wr, key, s);
}

/* Each clip's text row: n tokens (TEXT_LEN, half, -1) of random bytes or embeddings; the
 * values past n are junk the model must ignore. */
static void make_text(const dt_dit_config *c, float *text) {
    int64_t tf = dt_dit_text_floats(c), per = c->text_dim > 0 ? c->text_dim : 1;
    for (int b = 0; b < B; b++) {
        float *r = text + b * tf;
        r[0] = b == 0 ? (float)c->text_len : b == 1 ? (float)(c->text_len / 2) : -1.0f;
        if (c->text_dim > 0) {
            dt_rng_fill_normal(SEED, "dump.text", b * (tf - 1), tf - 1, 0.0f, 1.0f, r + 1);
            continue;
        }
        for (int64_t i = 0; i < c->text_len * per; i++)
            r[1 + i] = i < r[0] ? (float)(dt_rng_u64(SEED, "dump.bytes", b * tf + i) % 256) : 0;
    }
}

static dt_status dump(const char *path, dt_dit_attn attn, int n_classes, int text_len,
                      int text_dim) {
    const dt_dit_config cfg = {.frames = 6,
                               .channels = 3,
                               .height = 4,
                               .width = 10,
                               .pt = 2,
                               .ph = 2,
                               .pw = 2,
                               .n_layer = 3,
                               .n_head = 4,
                               .n_embd = 40,
                               .n_classes = n_classes,
                               .attn = attn,
                               .text_len = text_len,
                               .text_dim = text_dim};
    dt_status st = DT_OK;
    dt_mem *mem = NULL;
    dt_dit *d = NULL;
    dt_adamw *opt = NULL;
    dt_st_writer *wr = NULL;
    float *buf = NULL;
    char(*names)[112] = NULL;
    DT_TRY_GOTO(dt_mem_init(&mem));
    DT_TRY_GOTO(dt_dit_init(&cfg, &(dt_dit_opts){.B = B, .training = true}, mem, &d));
    dt_dit_init_weights(d, SEED);
    randomise_zeros(d);
    int64_t clip = dt_dit_clip_numel(&cfg), n = dt_dit_numel(d), all = B * clip;
    int64_t tf = dt_dit_text_floats(&cfg);
    int np = dt_dit_n_params(d);
    /* x0, eps, x_t, v, dout, out: [B, clip] each; w0, g, w1: the arena; the text rows */
    buf = malloc(sizeof(float) * (size_t)(6 * all + 3 * n + B * tf + 1));
    names = calloc((size_t)3 * np, sizeof *names);
    if (!buf || !names) {
        st = dt_err_set(DT_ERR_OOM, "dit_torch_dump: out of memory");
        goto fail;
    }
    float *x0 = buf, *eps = x0 + all, *xt = eps + all, *v = xt + all, *dout = v + all;
    float *out = dout + all, *w0 = out + all, *g = w0 + n, *w1 = g + n, *text = w1 + n;
    if (tf)
        make_text(&cfg, text);
    float t[B];
    int32_t labels[B];
    dt_rng_fill_normal(SEED, "dump.x0", 0, all, 0.0f, 1.0f, x0);
    for (int b = 0; b < B; b++) {
        /* the trainer's draws: logit-normal t and per-clip noise */
        t[b] = dt_flow_timestep(SEED, b, 1);
        dt_flow_noise(SEED, b, clip, eps + b * clip);
        /* a label per clip; the last clip gets the null class (classifier-free training) */
        labels[b] = b == B - 1 ? n_classes : (int32_t)(dt_rng_u64(SEED, "dump.y", b) %
                                                      (uint64_t)(n_classes ? n_classes : 1));
        for (int64_t i = 0; i < clip; i++) {
            xt[b * clip + i] = (1.0f - t[b]) * x0[b * clip + i] + t[b] * eps[b * clip + i];
            v[b * clip + i] = eps[b * clip + i] - x0[b * clip + i];
        }
    }
    memcpy(w0, dt_dit_weights(d), sizeof(float) * (size_t)n);
    dt_dit_zero_grad(d);
    DT_TRY_GOTO(dt_dit_forward(d, xt, t, n_classes ? labels : NULL, tf ? text : NULL, B));
    memcpy(out, dt_dit_output(d), sizeof(float) * (size_t)all);
    double loss = dt_flow_mse(out, v, all, 1.0f, dout);
    DT_TRY_GOTO(dt_dit_backward(d, dout, B));
    memcpy(g, dt_dit_grads(d), sizeof(float) * (size_t)n);
    DT_TRY_GOTO(dt_adamw_init(&OPTIM, dt_dit_param(d, 0), np, 0, n, mem, &opt));
    DT_TRY_GOTO(dt_adamw_step(opt, dt_dit_weights(d), dt_dit_grads(d), NULL, OPTIM.lr, 1.0f));
    memcpy(w1, dt_dit_weights(d), sizeof(float) * (size_t)n);

    DT_TRY_GOTO(dt_st_writer_init(&wr));
    DT_TRY_GOTO(add_params(wr, d, "w", w0, names));
    DT_TRY_GOTO(add_params(wr, d, "g", g, names + np));
    DT_TRY_GOTO(add_params(wr, d, "u", w1, names + 2 * np));
    int64_t shape[5] = {B, cfg.frames, cfg.channels, cfg.height, cfg.width}, nb = B;
    DT_TRY_GOTO(dt_st_writer_add(wr, "x0", DT_ST_F32, 5, shape, x0));
    DT_TRY_GOTO(dt_st_writer_add(wr, "eps", DT_ST_F32, 5, shape, eps));
    DT_TRY_GOTO(dt_st_writer_add(wr, "out", DT_ST_F32, 5, shape, out));
    DT_TRY_GOTO(dt_st_writer_add(wr, "t", DT_ST_F32, 1, &nb, t));
    DT_TRY_GOTO(dt_st_writer_add(wr, "labels", DT_ST_I32, 1, &nb, labels));
    int64_t tshape[2] = {B, tf};
    if (tf)
        DT_TRY_GOTO(dt_st_writer_add(wr, "text", DT_ST_F32, 2, tshape, text));
    const struct {
        const char *key;
        int v;
    } ints[] = {{"frames", cfg.frames}, {"channels", cfg.channels}, {"height", cfg.height},
                {"width", cfg.width},   {"patch_t", cfg.pt},        {"patch_h", cfg.ph},
                {"patch_w", cfg.pw},    {"n_layer", cfg.n_layer},   {"n_head", cfg.n_head},
                {"n_embd", cfg.n_embd}, {"n_classes", n_classes},   {"text_len", text_len},
                {"text_dim", text_dim}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        DT_TRY_GOTO(set_meta_int(wr, ints[i].key, ints[i].v));
    DT_TRY_GOTO(dt_st_writer_set_metadata(wr, "attn", dt_dit_attn_name(attn)));
    DT_TRY_GOTO(set_meta_num(wr, "loss", loss));
    DT_TRY_GOTO(set_meta_num(wr, "flops_per_clip", dt_dit_flops_per_sample(d)));
    DT_TRY_GOTO(set_meta_num(wr, "lr", OPTIM.lr));
    DT_TRY_GOTO(set_meta_num(wr, "beta1", OPTIM.beta1));
    DT_TRY_GOTO(set_meta_num(wr, "beta2", OPTIM.beta2));
    DT_TRY_GOTO(set_meta_num(wr, "eps", OPTIM.eps));
    DT_TRY_GOTO(set_meta_num(wr, "weight_decay", OPTIM.weight_decay));
    DT_TRY_GOTO(dt_st_writer_commit(wr, path));
    printf("dit_torch_dump: %s, %d classes, %lld parameters, loss %.9g -> %s\n",
           dt_dit_attn_name(attn), n_classes, (long long)n, loss, path);
fail:
    dt_st_writer_free(wr);
    free(names);
    free(buf);
    dt_adamw_free(opt);
    dt_dit_free(d);
    dt_mem_free(mem);
    return st;
}

int main(int argc, char **argv) {
    dt_dit_attn attn = DT_DIT_ATTN_COUNT;
    bool args = argc == 4 || argc == 6;
    for (int a = 0; args && a < DT_DIT_ATTN_COUNT; a++)
        if (!strcmp(argv[2], dt_dit_attn_name((dt_dit_attn)a)))
            attn = (dt_dit_attn)a;
    int n_classes = args ? atoi(argv[3]) : -1;
    int text_len = argc == 6 ? atoi(argv[4]) : 0, text_dim = argc == 6 ? atoi(argv[5]) : 0;
    if (attn == DT_DIT_ATTN_COUNT || n_classes < 0 || text_len < 0 || text_dim < 0) {
        fprintf(stderr, "usage: dit_torch_dump OUT.safetensors full|spatial_temporal N_CLASSES "
                        "[TEXT_LEN TEXT_DIM]\n");
        return 2;
    }
    dt_status st = dump(argv[1], attn, n_classes, text_len, text_dim);
    if (st != DT_OK) {
        fprintf(stderr, "dit_torch_dump: %s: %s\n", dt_status_str(st), dt_err_msg());
        return 1;
    }
    return 0;
}
