/* The video DiT against an independent double-precision reference written here from the
 * equations (DiT's adaLN-Zero blocks; attention as a MASK over the clip's tokens: all, same
 * frame, same spatial position, where the model permutes rows), for both attention modes, with
 * and without labels, on a clip whose dimensions all differ:
 *   - the forward output equals the reference's;
 *   - every parameter's gradient (sampled coordinates of every tensor) equals the central
 *     finite difference of the reference loss in double;
 *   - adaLN-Zero: at initialisation every block is the identity (a 1-block and a 3-block
 *     model give bit-identical outputs) and only the modulation weights get gradients;
 *   - two half batches accumulate the gradient of the full batch;
 *   - units tile the arena in order, and a unit bound to other storage is read and written
 *     there (the seam a distributed engine uses); FLOPs per clip against a hand count;
 *   - bad shapes and labels are clear errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "harness.h"
#include "models/dit.h"

typedef struct ref {
    const dt_dit_config *c;
    const dt_dit *d;
    const double *w; /* double copy of the arena */
} ref;

static const double *P(const ref *r, const char *fmt, int l) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    const dt_param *p = dt_dit_find_param(r->d, name);
    if (!p) {
        fprintf(stderr, "reference: no parameter %s\n", name);
        exit(1);
    }
    return r->w + p->offset;
}

/* y[n, out] = x[n, in] W^T + b */
static void lin(double *y, const double *x, const double *W, const double *b, int n, int in,
                int out) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o];
            for (int k = 0; k < in; k++)
                s += x[i * in + k] * W[o * in + k];
            y[i * out + o] = s;
        }
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* y = LN(x) (1 + scale) + shift, no affine of its own, eps 1e-6 */
static void modln(double *y, const double *x, const double *shift, const double *scale, int n,
                  int C) {
    for (int i = 0; i < n; i++) {
        double mean = 0, var = 0;
        for (int j = 0; j < C; j++)
            mean += x[i * C + j] / C;
        for (int j = 0; j < C; j++)
            var += (x[i * C + j] - mean) * (x[i * C + j] - mean) / C;
        for (int j = 0; j < C; j++)
            y[i * C + j] = (x[i * C + j] - mean) / sqrt(var + 1e-6) * (1 + scale[j]) + shift[j];
    }
}

/* Model output of the whole batch into out[B, clip], all in double. */
static void ref_forward(const ref *r, const float *x, const float *t, const int32_t *labels,
                        int B, double *out) {
    const dt_dit_config *c = r->c;
    int C = c->n_embd, NH = c->n_head, hs = C / NH, F = 4 * C;
    int Tt = c->frames / c->pt, Th = c->height / c->ph, Tw = c->width / c->pw, S = Tt * Th * Tw;
    int Pd = c->channels * c->pt * c->ph * c->pw;
    double *tf = malloc(sizeof(double) * 256), *th = malloc(sizeof(double) * C);
    double *cc = malloc(sizeof(double) * C), *sc = malloc(sizeof(double) * C);
    double *mod = malloc(sizeof(double) * 6 * C), *pt = malloc(sizeof(double) * S * Pd);
    double *h = malloc(sizeof(double) * S * C), *m = malloc(sizeof(double) * S * C);
    double *qkv = malloc(sizeof(double) * S * 3 * C), *att = malloc(sizeof(double) * S * C);
    double *tmp = malloc(sizeof(double) * S * C), *u = malloc(sizeof(double) * S * F);
    double *o = malloc(sizeof(double) * S * Pd), *sc_buf = malloc(sizeof(double) * S);
    int k6 = C / 6;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < 128; i++) {
            double a = 1000.0 * t[b] * exp(-log(10000.0) * i / 128);
            tf[i] = cos(a);
            tf[128 + i] = sin(a);
        }
        lin(th, tf, P(r, "t_embedder.mlp.0.weight", 0), P(r, "t_embedder.mlp.0.bias", 0), 1,
            256, C);
        for (int j = 0; j < C; j++)
            th[j] = silu(th[j]);
        lin(cc, th, P(r, "t_embedder.mlp.2.weight", 0), P(r, "t_embedder.mlp.2.bias", 0), 1, C,
            C);
        if (c->n_classes > 0) {
            int y = labels ? labels[b] : c->n_classes;
            for (int j = 0; j < C; j++)
                cc[j] += P(r, "y_embedder.embedding_table.weight", 0)[y * C + j];
        }
        for (int j = 0; j < C; j++)
            sc[j] = silu(cc[j]);
        /* token s = (f, i, j), its patch (channel, dt, dh, dw) */
        for (int s = 0; s < S; s++) {
            int f = s / (Th * Tw), i = s / Tw % Th, j = s % Tw, k = 0;
            for (int ch = 0; ch < c->channels; ch++)
                for (int a = 0; a < c->pt; a++)
                    for (int e = 0; e < c->ph; e++)
                        for (int g = 0; g < c->pw; g++, k++) {
                            int64_t fr = (int64_t)b * c->frames + f * c->pt + a;
                            pt[s * Pd + k] = x[((fr * c->channels + ch) * c->height +
                                                i * c->ph + e) * c->width + j * c->pw + g];
                        }
        }
        lin(h, pt, P(r, "x_embedder.proj.weight", 0), P(r, "x_embedder.proj.bias", 0), S, Pd, C);
        for (int s = 0; s < S; s++) {
            int p3[3] = {s / (Th * Tw), s / Tw % Th, s % Tw};
            for (int a = 0; a < 3; a++)
                for (int i = 0; i < k6; i++) {
                    double w = pow(10000.0, -(double)i / k6);
                    h[s * C + 2 * k6 * a + i] += sin(p3[a] * w);
                    h[s * C + 2 * k6 * a + k6 + i] += cos(p3[a] * w);
                }
        }
        for (int l = 0; l < c->n_layer; l++) {
            int kind = c->attn == DT_DIT_ATTN_FULL ? 0 : l % 2 == 0 ? 1 : 2;
            lin(mod, sc, P(r, "blocks.%d.adaLN_modulation.1.weight", l),
                P(r, "blocks.%d.adaLN_modulation.1.bias", l), 1, C, 6 * C);
            modln(m, h, mod, mod + C, S, C);
            lin(qkv, m, P(r, "blocks.%d.attn.qkv.weight", l), P(r, "blocks.%d.attn.qkv.bias", l),
                S, C, 3 * C);
            for (int hd = 0; hd < NH; hd++)
                for (int q = 0; q < S; q++) {
                    double mx = -1e300, z = 0;
                    for (int k = 0; k < S; k++) {
                        bool same_frame = q / (Th * Tw) == k / (Th * Tw);
                        bool same_pos = q % (Th * Tw) == k % (Th * Tw);
                        if ((kind == 1 && !same_frame) || (kind == 2 && !same_pos)) {
                            sc_buf[k] = -INFINITY;
                            continue;
                        }
                        double dd = 0;
                        for (int i = 0; i < hs; i++)
                            dd += qkv[q * 3 * C + hd * hs + i] * qkv[k * 3 * C + C + hd * hs + i];
                        sc_buf[k] = dd / sqrt((double)hs);
                        mx = sc_buf[k] > mx ? sc_buf[k] : mx;
                    }
                    for (int k = 0; k < S; k++)
                        z += (sc_buf[k] = exp(sc_buf[k] - mx));
                    for (int i = 0; i < hs; i++) {
                        double y = 0;
                        for (int k = 0; k < S; k++)
                            y += sc_buf[k] / z * qkv[k * 3 * C + 2 * C + hd * hs + i];
                        att[q * C + hd * hs + i] = y;
                    }
                }
            lin(tmp, att, P(r, "blocks.%d.attn.proj.weight", l),
                P(r, "blocks.%d.attn.proj.bias", l), S, C, C);
            for (int i = 0; i < S * C; i++)
                h[i] += mod[2 * C + i % C] * tmp[i];
            modln(m, h, mod + 3 * C, mod + 4 * C, S, C);
            lin(u, m, P(r, "blocks.%d.mlp.fc1.weight", l), P(r, "blocks.%d.mlp.fc1.bias", l), S,
                C, F);
            for (int i = 0; i < S * F; i++) {
                double v = u[i];
                u[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
            }
            lin(tmp, u, P(r, "blocks.%d.mlp.fc2.weight", l), P(r, "blocks.%d.mlp.fc2.bias", l),
                S, F, C);
            for (int i = 0; i < S * C; i++)
                h[i] += mod[5 * C + i % C] * tmp[i];
        }
        lin(mod, sc, P(r, "final_layer.adaLN_modulation.1.weight", 0),
            P(r, "final_layer.adaLN_modulation.1.bias", 0), 1, C, 2 * C);
        modln(m, h, mod, mod + C, S, C);
        lin(o, m, P(r, "final_layer.linear.weight", 0), P(r, "final_layer.linear.bias", 0), S,
            C, Pd);
        for (int s = 0; s < S; s++) {
            int f = s / (Th * Tw), i = s / Tw % Th, j = s % Tw, k = 0;
            for (int ch = 0; ch < c->channels; ch++)
                for (int a = 0; a < c->pt; a++)
                    for (int e = 0; e < c->ph; e++)
                        for (int g = 0; g < c->pw; g++, k++) {
                            int64_t fr = (int64_t)b * c->frames + f * c->pt + a;
                            out[((fr * c->channels + ch) * c->height + i * c->ph + e) *
                                    c->width + j * c->pw + g] = o[s * Pd + k];
                        }
        }
    }
    free(tf), free(th), free(cc), free(sc), free(mod), free(pt), free(h), free(m), free(qkv);
    free(att), free(tmp), free(u), free(o), free(sc_buf);
}

static double ref_loss(const ref *r, const float *x, const float *t, const int32_t *labels,
                       int B, const float *R, double *out) {
    ref_forward(r, x, t, labels, B, out);
    double s = 0;
    for (int64_t i = 0; i < B * dt_dit_clip_numel(r->c); i++)
        s += out[i] * R[i];
    return s;
}

static dt_dit_config tiny(dt_dit_attn attn, int n_classes) {
    return (dt_dit_config){.frames = 4, .channels = 2, .height = 6, .width = 4, .pt = 2,
                           .ph = 2, .pw = 1, .n_layer = 2, .n_head = 2, .n_embd = 12,
                           .n_classes = n_classes, .attn = attn};
}

/* Forward and gradients of one configuration against the reference. */
static void check_model(dt_dit_attn attn, int n_classes, bool with_labels) {
    dt_dit_config c = tiny(attn, n_classes);
    int B = 2;
    int64_t n = dt_dit_clip_numel(&c) * B;
    dt_mem *mem;
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = B, .training = true}, mem, &d));
    if (!d)
        return;
    /* every weight random (gates and final layer non-zero, so every gradient flows) */
    int64_t nw = dt_dit_numel(d);
    dt_test_fill(dt_dit_weights(d), nw, 11 + attn, 0.4f);
    float *x = malloc(sizeof(float) * n), *R = malloc(sizeof(float) * n);
    dt_test_fill(x, n, 3, 1.0f);
    dt_test_fill(R, n, 5, 1.0f);
    float t[2] = {0.3f, 0.85f};
    int32_t labels[2] = {1, n_classes};
    const int32_t *lab = with_labels ? labels : NULL;
    dt_dit_zero_grad(d);
    DT_CHECK_OK(dt_dit_forward(d, x, t, lab, NULL, B));
    DT_CHECK_OK(dt_dit_backward(d, R, B));

    double *w = malloc(sizeof(double) * nw), *out = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < nw; i++)
        w[i] = dt_dit_weights(d)[i];
    ref r = {.c = &c, .d = d, .w = w};
    ref_loss(&r, x, t, lab, B, R, out);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs(dt_dit_output(d)[i] - out[i]));
        mx = fmax(mx, fabs(out[i]));
    }
    DT_CHECK(err <= 2e-5 * mx, "attn %d classes %d: forward max |diff| %.3g of max %.3g", attn,
             n_classes, err, mx);

    /* central differences in double, up to 6 coordinates of every tensor */
    double worst = 0;
    const float *g = dt_dit_grads(d);
    for (int i = 0; i < dt_dit_n_params(d); i++) {
        const dt_param *p = dt_dit_param(d, i);
        double gmax = 0;
        for (int64_t k = 0; k < p->numel; k++)
            gmax = fmax(gmax, fabs(g[p->offset + k]));
        for (int s = 0; s < 6; s++) {
            int64_t k = p->offset + (int64_t)((s * 7919 + i * 104729) % p->numel);
            double h = 1e-5, w0 = w[k];
            w[k] = w0 + h;
            double lp = ref_loss(&r, x, t, lab, B, R, out);
            w[k] = w0 - h;
            double lm = ref_loss(&r, x, t, lab, B, R, out);
            w[k] = w0;
            double fd = (lp - lm) / (2 * h), an = g[k];
            double e = fabs(an - fd) / fmax(fabs(fd), fmax(1e-2 * gmax, 1e-6));
            worst = fmax(worst, e);
            DT_CHECK(e < 1e-3, "attn %d classes %d labels %d: d %s[%lld] = %.8g, fd %.8g", attn,
                     n_classes, with_labels, p->name, (long long)(k - p->offset), an, fd);
        }
    }
    printf("attn %s classes %d labels %d: forward max |diff| %.2e (max |y| %.2f), gradient max "
           "rel err %.2e over %d tensors\n",
           attn == DT_DIT_ATTN_FULL ? "full" : "spatial_temporal", n_classes, with_labels, err,
           mx, worst, dt_dit_n_params(d));

    /* two half batches accumulate the full batch's gradient */
    float *full = malloc(sizeof(float) * nw);
    memcpy(full, dt_dit_grads(d), sizeof(float) * nw);
    dt_dit_zero_grad(d);
    int64_t half = n / 2;
    for (int b = 0; b < 2; b++) {
        DT_CHECK_OK(dt_dit_forward(d, x + b * half, t + b, lab ? lab + b : NULL, NULL, 1));
        DT_CHECK_OK(dt_dit_backward(d, R + b * half, 1));
    }
    double gmax = 0;
    for (int64_t i = 0; i < nw; i++)
        gmax = fmax(gmax, fabs(full[i]));
    double mb = dt_test_max_rel(dt_dit_grads(d), full, nw, 1e-3 * gmax);
    DT_CHECK(mb < 1e-4, "micro-batches: gradient differs by %.3g", mb);
    free(full), free(w), free(out), free(x), free(R);
    dt_dit_free(d);
    dt_mem_free(mem);
}

/* adaLN-Zero: DiT's initialisation makes every block the identity. */
static void check_identity_at_init(void) {
    dt_dit_config c = tiny(DT_DIT_ATTN_SPATIAL_TEMPORAL, 3);
    int B = 2;
    int64_t n = dt_dit_clip_numel(&c) * B;
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    float *x = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
    dt_test_fill(x, n, 9, 1.0f);
    float t[2] = {0.1f, 0.6f};
    int32_t labels[2] = {0, 2};
    for (int L = 1; L <= 3; L += 2) {
        c.n_layer = L;
        dt_dit *d = NULL;
        DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = B, .training = true}, mem, &d));
        if (!d)
            break;
        dt_dit_init_weights(d, 1234);
        float *out = dt_dit_output(d);
        DT_CHECK_OK(dt_dit_forward(d, x, t, labels, NULL, B));
        double mx = 0;
        for (int64_t i = 0; i < n; i++)
            mx = fmax(mx, fabs(out[i]));
        DT_CHECK(mx == 0, "L=%d: the zero final layer predicts %g, want 0", L, mx);
        /* make the final layer non-zero (same values for both depths): the output then shows
         * the residual stream, which the identity blocks leave untouched */
        const char *fin[2] = {"final_layer.linear.weight", "final_layer.adaLN_modulation.1.weight"};
        for (int i = 0; i < 2; i++) {
            const dt_param *p = dt_dit_find_param(d, fin[i]);
            dt_test_fill(dt_dit_weights(d) + p->offset, p->numel, 77 + i, 0.3f);
        }
        DT_CHECK_OK(dt_dit_forward(d, x, t, labels, NULL, B));
        if (L == 1)
            memcpy(y1, out, sizeof(float) * n);
        else
            DT_CHECK(!memcmp(y1, out, sizeof(float) * n),
                     "3 blocks at init differ from 1 block: blocks are not the identity");
        /* with zero gates only the modulations (and what precedes the blocks) get gradients */
        float *R = malloc(sizeof(float) * n);
        dt_test_fill(R, n, 4, 1.0f);
        dt_dit_zero_grad(d);
        DT_CHECK_OK(dt_dit_backward(d, R, B));
        for (int i = 0; i < dt_dit_n_params(d); i++) {
            const dt_param *p = dt_dit_param(d, i);
            if (strncmp(p->name, "blocks.", 7))
                continue;
            double s = 0;
            for (int64_t k = 0; k < p->numel; k++)
                s += fabs(dt_dit_grads(d)[p->offset + k]);
            bool ada = strstr(p->name, "adaLN") != NULL;
            DT_CHECK(ada ? s > 0 : s == 0, "at init %s has |grad| %g", p->name, s);
        }
        free(R);
        dt_dit_free(d);
    }
    free(x), free(y1);
    dt_mem_free(mem);
}

/* Units tile the arena; binding one to outside storage moves its reads and gradient writes. */
static void check_units(void) {
    dt_dit_config c = tiny(DT_DIT_ATTN_SPATIAL_TEMPORAL, 3);
    int B = 2;
    int64_t n = dt_dit_clip_numel(&c) * B;
    dt_mem *mem;
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = B, .training = true}, mem, &d));
    if (!d)
        return;
    int U = dt_dit_n_units(d);
    DT_CHECK(U == c.n_layer + 2, "%d units, want %d", U, c.n_layer + 2);
    int64_t at = 0;
    for (int u = 0; u < U; u++) {
        int64_t first, count;
        dt_dit_unit_range(d, u, &first, &count);
        DT_CHECK(first == at && count > 0, "unit %d at %lld (+%lld), want %lld", u,
                 (long long)first, (long long)count, (long long)at);
        at = first + count;
    }
    DT_CHECK(at == dt_dit_numel(d), "units end at %lld of %lld", (long long)at,
             (long long)dt_dit_numel(d));
    int64_t nw = dt_dit_numel(d);
    float *w = dt_dit_weights(d);
    dt_test_fill(w, nw, 21, 0.3f);
    float *x = malloc(sizeof(float) * n), *R = malloc(sizeof(float) * n);
    float *y0 = malloc(sizeof(float) * n), *g0 = malloc(sizeof(float) * nw);
    dt_test_fill(x, n, 22, 1.0f);
    dt_test_fill(R, n, 23, 1.0f);
    float t[2] = {0.2f, 0.7f};
    int32_t lab[2] = {0, 2};
    dt_dit_zero_grad(d);
    DT_CHECK_OK(dt_dit_forward(d, x, t, lab, NULL, B));
    DT_CHECK_OK(dt_dit_backward(d, R, B));
    memcpy(y0, dt_dit_output(d), sizeof(float) * n);
    memcpy(g0, dt_dit_grads(d), sizeof(float) * nw);
    /* block 1 (global unit 2) moves out: its own arena range is poisoned, so a result equal to
     * the first one proves the model reads the bound copy and writes gradients there */
    int64_t first, count;
    dt_dit_unit_range(d, 2, &first, &count);
    float *wb = malloc(sizeof(float) * count), *gb = calloc((size_t)count, sizeof(float));
    memcpy(wb, w + first, sizeof(float) * count);
    for (int64_t i = 0; i < count; i++)
        w[first + i] = NAN;
    dt_dit_bind_unit(d, 2, wb, gb, NULL);
    dt_dit_zero_grad(d);
    DT_CHECK_OK(dt_dit_forward(d, x, t, lab, NULL, B));
    DT_CHECK_OK(dt_dit_backward(d, R, B));
    DT_CHECK(!memcmp(y0, dt_dit_output(d), sizeof(float) * n), "bound unit: another output");
    DT_CHECK(!memcmp(gb, g0 + first, sizeof(float) * count), "bound unit: another gradient");
    double stray = 0;
    for (int64_t i = 0; i < count; i++)
        stray += fabs(dt_dit_grads(d)[first + i]);
    DT_CHECK(stray == 0, "the unit's own gradient range was written (%g)", stray);
    /* FLOPs: 6 x (S (per-token MACs + attention MACs) + per-clip MACs), counted by hand for
     * this shape: S = 24 tokens, P = 8, C = 12, F = 48, spatial T' = 12, temporal T' = 2 */
    DT_CHECK_CLOSE(dt_dit_flops_per_sample(d), 6.0 * (24 * (3648 + 336) + 5232), 1e-12);
    free(wb), free(gb), free(x), free(R), free(y0), free(g0);
    dt_dit_free(d);
    c.attn = DT_DIT_ATTN_FULL;
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = 1, .training = false}, mem, &d));
    if (d)
        DT_CHECK_CLOSE(dt_dit_flops_per_sample(d), 6.0 * (24 * (3648 + 1152) + 5232), 1e-12);
    dt_dit_free(d);
    dt_mem_free(mem);
}

static void expect_error(dt_dit_config c, const char *needle) {
    dt_status st = dt_dit_check_config(&c);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), needle), "want an error naming '%s', got %s",
             needle, st ? dt_err_msg() : "OK");
}

static void check_errors(void) {
    dt_dit_config c = tiny(DT_DIT_ATTN_FULL, 3);
    DT_CHECK_OK(dt_dit_check_config(&c));
    dt_dit_config bad = c;
    bad.height = 7;
    expect_error(bad, "height = 7 is not a multiple of the patch ph = 2");
    bad = c;
    bad.frames = 5;
    expect_error(bad, "frames = 5 is not a multiple of the patch pt = 2");
    bad = c;
    bad.n_head = 5;
    expect_error(bad, "n_embd = 12 is not a multiple of n_head = 5");
    bad = c;
    bad.pw = 0;
    expect_error(bad, "pw = 0 must be positive");
    bad = c;
    bad.attn = DT_DIT_ATTN_COUNT;
    expect_error(bad, "attn = 2");
    dt_mem *mem;
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = 1, .training = false}, mem, &d));
    if (d) {
        float *x = calloc((size_t)dt_dit_clip_numel(&c) * 2, sizeof(float));
        float t[2] = {0.5f, 0.5f};
        int32_t lab = 4;
        DT_CHECK(dt_dit_forward(d, x, t, &lab, NULL, 1) == DT_ERR_ARG &&
                     strstr(dt_err_msg(), "label 4 of clip 0 is outside 0..3"),
                 "bad label: %s", dt_err_msg());
        DT_CHECK(dt_dit_forward(d, x, t, NULL, NULL, 2) == DT_ERR_ARG &&
                     strstr(dt_err_msg(), "B = 2 clips"),
                 "too many clips: %s", dt_err_msg());
        DT_CHECK(dt_dit_backward(d, x, 1) == DT_ERR_ARG, "backward without training");
        free(x);
    }
    dt_dit_free(d);
    dt_mem_free(mem);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_model(DT_DIT_ATTN_FULL, 0, false);
    check_model(DT_DIT_ATTN_FULL, 3, true);
    check_model(DT_DIT_ATTN_SPATIAL_TEMPORAL, 0, false);
    check_model(DT_DIT_ATTN_SPATIAL_TEMPORAL, 3, true);
    check_model(DT_DIT_ATTN_SPATIAL_TEMPORAL, 3, false);
    check_identity_at_init();
    check_units();
    check_errors();
    return DT_TEST_END();
}
