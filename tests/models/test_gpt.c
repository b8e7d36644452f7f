/* The whole model against an independent double-precision reference written here from the
 * equations (HF GPT-2 and Llama), for both architectures:
 *   - forward loss equals the reference loss;
 *   - every parameter's gradient (sampled coordinates of every tensor) equals the central
 *     finite difference of the reference loss, computed in double;
 *   - micro-batching: two half batches accumulate the same gradient as one full batch;
 *   - save -> load round trip is exact; bf16 matmuls stay within bf16 tolerance of fp32;
 *   - documents kept apart (doc_mask): packed sequences give the loss and gradients of each
 *     document run as a sequence of its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/mem.h"
#include "core/rng.h"
#include "harness.h"
#include "models/gpt.h"

typedef struct ref {
    const dt_model_config *c;
    const dt_gpt *g;
    const double *w; /* double copy of the arena */
} ref;

static const double *P(const ref *r, const char *fmt, int l) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    const dt_param *p = dt_gpt_find_param(r->g, name);
    if (!p) {
        fprintf(stderr, "reference: no parameter %s\n", name);
        exit(1);
    }
    return r->w + p->offset;
}

/* y[n, out] = x[n, in] W^T (+ b) */
static void lin(double *y, const double *x, const double *W, const double *b, int n, int in,
                int out) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int k = 0; k < in; k++)
                s += x[i * in + k] * W[o * in + k];
            y[i * out + o] = s;
        }
}

static void norm(double *y, const double *x, const double *w, const double *b, int n, int C,
                 double eps, bool rms) {
    for (int i = 0; i < n; i++) {
        const double *xi = x + i * C;
        double mean = 0, var = 0;
        if (!rms) {
            for (int j = 0; j < C; j++)
                mean += xi[j];
            mean /= C;
        }
        for (int j = 0; j < C; j++)
            var += (xi[j] - mean) * (xi[j] - mean);
        var /= C;
        for (int j = 0; j < C; j++)
            y[i * C + j] = (xi[j] - mean) / sqrt(var + eps) * w[j] + (b ? b[j] : 0);
    }
}

static void rope(double *x, int T, int n_heads, int hs, int stride, double theta) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            double *v = x + t * stride + h * hs;
            for (int i = 0; i < hs / 2; i++) {
                double a = t * pow(theta, -2.0 * i / hs), c = cos(a), s = sin(a);
                double x1 = v[i], x2 = v[i + hs / 2];
                v[i] = x1 * c - x2 * s;
                v[i + hs / 2] = x2 * c + x1 * s;
            }
        }
}

/* mean cross-entropy of the model on one batch, all in double */
static double ref_loss(const ref *r, const int32_t *tok, const int32_t *tgt, int B, int T) {
    const dt_model_config *c = r->c;
    bool llama = c->arch == DT_ARCH_LLAMA;
    int C = c->n_embd, NH = c->n_head, NKV = dt_gpt_kv_heads(c), hs = C / NH;
    int F = dt_gpt_ffn_hidden(c), V = c->vocab_size, W = (NH + 2 * NKV) * hs;
    double *x = malloc(sizeof(double) * T * C), *ln = malloc(sizeof(double) * T * C);
    double *qkv = malloc(sizeof(double) * T * W), *att = malloc(sizeof(double) * T * C);
    double *tmp = malloc(sizeof(double) * T * C), *h = malloc(sizeof(double) * T * F);
    double *u = malloc(sizeof(double) * T * F), *logits = malloc(sizeof(double) * V);
    double total = 0;
    for (int b = 0; b < B; b++) {
        const double *wte = llama ? P(r, "model.embed_tokens.weight", 0) : P(r, "wte.weight", 0);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < C; j++)
                x[t * C + j] = wte[tok[b * T + t] * C + j] +
                               (llama ? 0 : P(r, "wpe.weight", 0)[t * C + j]);
        for (int l = 0; l < c->n_layer; l++) {
            if (llama) {
                norm(ln, x, P(r, "model.layers.%d.input_layernorm.weight", l), NULL, T, C,
                     c->norm_eps, true);
                lin(qkv, ln, P(r, "model.layers.%d.self_attn.q_proj.weight", l), NULL, T, C, W);
                rope(qkv, T, NH, hs, W, c->rope_theta);
                rope(qkv + NH * hs, T, NKV, hs, W, c->rope_theta);
            } else {
                norm(ln, x, P(r, "h.%d.ln_1.weight", l), P(r, "h.%d.ln_1.bias", l), T, C,
                     c->norm_eps, false);
                lin(qkv, ln, P(r, "h.%d.attn.c_attn.weight", l), P(r, "h.%d.attn.c_attn.bias", l),
                    T, C, W);
            }
            for (int hd = 0; hd < NH; hd++) {
                int kh = hd / (NH / NKV);
                for (int t = 0; t < T; t++) {
                    double s[256], mx = -1e300, z = 0;
                    for (int k = 0; k <= t; k++) {
                        double d = 0;
                        for (int i = 0; i < hs; i++)
                            d += qkv[t * W + hd * hs + i] * qkv[k * W + (NH + kh) * hs + i];
                        s[k] = d / sqrt((double)hs);
                        mx = s[k] > mx ? s[k] : mx;
                    }
                    for (int k = 0; k <= t; k++)
                        z += (s[k] = exp(s[k] - mx));
                    for (int i = 0; i < hs; i++) {
                        double y = 0;
                        for (int k = 0; k <= t; k++)
                            y += s[k] / z * qkv[k * W + (NH + NKV + kh) * hs + i];
                        att[t * C + hd * hs + i] = y;
                    }
                }
            }
            if (llama)
                lin(tmp, att, P(r, "model.layers.%d.self_attn.o_proj.weight", l), NULL, T, C, C);
            else
                lin(tmp, att, P(r, "h.%d.attn.c_proj.weight", l), P(r, "h.%d.attn.c_proj.bias", l),
                    T, C, C);
            for (int i = 0; i < T * C; i++)
                x[i] += tmp[i];
            if (llama) {
                norm(ln, x, P(r, "model.layers.%d.post_attention_layernorm.weight", l), NULL, T, C,
                     c->norm_eps, true);
                lin(h, ln, P(r, "model.layers.%d.mlp.gate_proj.weight", l), NULL, T, C, F);
                lin(u, ln, P(r, "model.layers.%d.mlp.up_proj.weight", l), NULL, T, C, F);
                for (int i = 0; i < T * F; i++)
                    h[i] = h[i] / (1 + exp(-h[i])) * u[i];
                lin(tmp, h, P(r, "model.layers.%d.mlp.down_proj.weight", l), NULL, T, F, C);
            } else {
                norm(ln, x, P(r, "h.%d.ln_2.weight", l), P(r, "h.%d.ln_2.bias", l), T, C,
                     c->norm_eps, false);
                lin(h, ln, P(r, "h.%d.mlp.c_fc.weight", l), P(r, "h.%d.mlp.c_fc.bias", l), T, C, F);
                for (int i = 0; i < T * F; i++) {
                    double v = h[i];
                    h[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                }
                lin(tmp, h, P(r, "h.%d.mlp.c_proj.weight", l), P(r, "h.%d.mlp.c_proj.bias", l),
                    T, F, C);
            }
            for (int i = 0; i < T * C; i++)
                x[i] += tmp[i];
        }
        if (llama)
            norm(ln, x, P(r, "model.norm.weight", 0), NULL, T, C, c->norm_eps, true);
        else
            norm(ln, x, P(r, "ln_f.weight", 0), P(r, "ln_f.bias", 0), T, C, c->norm_eps, false);
        const double *head = llama ? P(r, "lm_head.weight", 0) : wte;
        for (int t = 0; t < T; t++) {
            lin(logits, ln + t * C, head, NULL, 1, C, V);
            double mx = -1e300, z = 0;
            for (int v = 0; v < V; v++)
                mx = logits[v] > mx ? logits[v] : mx;
            for (int v = 0; v < V; v++)
                z += exp(logits[v] - mx);
            total += log(z) + mx - logits[tgt[b * T + t]];
        }
    }
    free(x), free(ln), free(qkv), free(att), free(tmp), free(h), free(u), free(logits);
    return total / (B * T);
}

static dt_model_config tiny(dt_arch arch) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_model_config m = cfg.model;
    m.arch = arch;
    m.n_layer = 2;
    m.n_head = 4;
    m.n_kv_head = arch == DT_ARCH_LLAMA ? 2 : 0;
    m.n_embd = 32;
    m.vocab_size = 48;
    m.max_seq_len = 16;
    m.ffn_hidden = arch == DT_ARCH_LLAMA ? 48 : 0;
    return m;
}

/* make the gains and biases non-trivial so their gradients are exercised */
static void perturb_all(dt_gpt *g) {
    float *w = dt_gpt_weights(g);
    for (int i = 0; i < dt_gpt_n_params(g); i++) {
        const dt_param *p = dt_gpt_param(g, i);
        float noise[4096];
        int64_t n = p->numel < 4096 ? p->numel : 4096;
        dt_rng_fill_normal(99, p->name, 0, n, 0.0f, p->ndim == 1 ? 0.2f : 0.05f, noise);
        for (int64_t j = 0; j < n; j++)
            w[p->offset + j] += noise[j];
    }
    dt_gpt_sync_lp(g);
}

static void batch(int32_t *tok, int32_t *tgt, int n, int V) {
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(dt_rng_u64(5, "tok", i) % V);
        tgt[i] = (int32_t)(dt_rng_u64(5, "tgt", i) % V);
    }
}

static void check_arch(dt_arch arch) {
    const char *an = arch == DT_ARCH_GPT2 ? "gpt2" : "llama";
    dt_model_config mc = tiny(arch);
    enum { B = 2, T = 8 };
    dt_mem *mem;
    dt_gpt *g;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_gpt_opts opts = {.B = B, .T = T, .precision = DT_PREC_FP32, .training = true};
    DT_CHECK_OK(dt_gpt_init(&mc, &opts, mem, &g));
    dt_gpt_init_weights(g, 7);
    perturb_all(g);
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, B * T, mc.vocab_size);

    double loss_sum;
    dt_gpt_zero_grad(g);
    DT_CHECK_OK(dt_gpt_forward(g, tok, B, T));
    DT_CHECK_OK(dt_gpt_loss(g, tgt, B, T, 1.0f / (B * T), true, &loss_sum));
    DT_CHECK_OK(dt_gpt_backward(g, tok, B, T));

    int64_t n = dt_gpt_numel(g);
    double *wd = malloc(sizeof(double) * n);
    const float *w = dt_gpt_weights(g), *grad = dt_gpt_grads(g);
    for (int64_t i = 0; i < n; i++)
        wd[i] = w[i];
    ref r = {.c = &mc, .g = g, .w = wd};
    double want = ref_loss(&r, tok, tgt, B, T);
    DT_CHECK(fabs(loss_sum / (B * T) - want) < 1e-5 * fabs(want), "%s loss %.9g vs reference %.9g",
             an, loss_sum / (B * T), want);

    /* finite differences in double on sampled coordinates of every tensor */
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dt_gpt_n_params(g); i++) {
        const dt_param *p = dt_gpt_param(g, i);
        double gmax = 0;
        for (int64_t j = 0; j < p->numel; j++)
            gmax = fmax(gmax, fabs(grad[p->offset + j]));
        for (int s = 0; s < 4; s++) {
            int64_t j = p->offset + (int64_t)(dt_rng_u64(11, p->name, s) % p->numel);
            double h = 1e-5, keep = wd[j];
            wd[j] = keep + h;
            double lp = ref_loss(&r, tok, tgt, B, T);
            wd[j] = keep - h;
            double lm = ref_loss(&r, tok, tgt, B, T);
            wd[j] = keep;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(grad[j] - fd) / (fabs(fd) + 1e-2 * gmax + 1e-9);
            if (err > worst) {
                worst = err;
                worst_name = p->name;
            }
        }
    }
    DT_CHECK(worst < 2e-3, "%s: worst gradient error %.3g in %s", an, worst, worst_name);

    /* two micro-batches of one sequence accumulate the full batch's gradient */
    float *full = malloc(sizeof(float) * n);
    memcpy(full, grad, sizeof(float) * n);
    dt_gpt_zero_grad(g);
    for (int b = 0; b < B; b++) {
        double part;
        DT_CHECK_OK(dt_gpt_forward(g, tok + b * T, 1, T));
        DT_CHECK_OK(dt_gpt_loss(g, tgt + b * T, 1, T, 1.0f / (B * T), true, &part));
        DT_CHECK_OK(dt_gpt_backward(g, tok + b * T, 1, T));
    }
    DT_CHECK(dt_test_nmse(grad, full, n) < 1e-10, "%s micro-batch gradient nmse %g", an,
             dt_test_nmse(grad, full, n));

    /* dt_gpt_fresh_grads instead of zeroing: the first writes overwrite whatever the arena
     * held (garbage here; the padding between tensors stays as it was, so it starts zero), the
     * later micro-batch adds: the same values as zeroing first (== also equates the two signs
     * an exact zero may take) */
    float *micro = malloc(sizeof(float) * n);
    memcpy(micro, grad, sizeof(float) * n);
    float *gw = dt_gpt_grads(g);
    for (int i = 0; i < dt_gpt_n_params(g); i++) {
        const dt_param *p = dt_gpt_param(g, i);
        dt_test_fill(gw + p->offset, p->numel, 40 + i, 1e3f);
    }
    for (int round = 0; round < 2; round++) {
        dt_gpt_fresh_grads(g, -1);
        int mb = round == 0 ? B : 1;
        for (int b = 0; b < B; b += mb) {
            double part;
            DT_CHECK_OK(dt_gpt_forward(g, tok + b * T, mb, T));
            DT_CHECK_OK(dt_gpt_loss(g, tgt + b * T, mb, T, 1.0f / (B * T), true, &part));
            DT_CHECK_OK(dt_gpt_backward(g, tok + b * T, mb, T));
        }
        const float *want_g = round == 0 ? full : micro;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += grad[i] != want_g[i];
        DT_CHECK(bad == 0, "%s fresh_grads (%d per micro-batch): %lld gradients differ from "
                 "zeroing first", an, mb, (long long)bad);
    }
    free(micro);

    /* save -> load is exact */
    char path[64];
    snprintf(path, sizeof path, "test_gpt_%s.safetensors", an);
    DT_CHECK_OK(dt_gpt_save(g, dt_gpt_weights(g), path));
    dt_gpt *g2;
    dt_model_config mc2 = tiny(DT_ARCH_GPT2);
    mc2.n_layer = 1;
    DT_CHECK_OK(dt_gpt_config_from_file(path, &mc2));
    DT_CHECK(mc2.arch == mc.arch && mc2.n_layer == mc.n_layer && mc2.n_embd == mc.n_embd &&
                 dt_gpt_kv_heads(&mc2) == dt_gpt_kv_heads(&mc),
             "%s config from file metadata differs", an);
    dt_gpt_opts opts2 = {.B = B, .T = T, .precision = DT_PREC_BF16};
    DT_CHECK_OK(dt_gpt_init(&mc2, &opts2, mem, &g2));
    DT_CHECK_OK(dt_gpt_load(g2, dt_gpt_weights(g2), path));
    dt_gpt_sync_lp(g2);
    DT_CHECK(memcmp(dt_gpt_weights(g2), w, sizeof(float) * n) == 0, "%s round trip differs", an);

    /* bf16 matmuls: loss within bf16 tolerance of fp32 */
    double loss_bf16;
    DT_CHECK_OK(dt_gpt_forward(g2, tok, B, T));
    DT_CHECK_OK(dt_gpt_loss(g2, tgt, B, T, 0, false, &loss_bf16));
    DT_CHECK(fabs(loss_bf16 - loss_sum) < 1e-2 * fabs(loss_sum), "%s bf16 loss %g vs fp32 %g", an,
             loss_bf16 / (B * T), loss_sum / (B * T));
    remove(path);
    dt_gpt_free(g2);
    free(full);
    free(wd);
    dt_gpt_free(g);
    dt_mem_free(mem);
}

/* doc_mask: two packed rows of documents (one of a single token) through the model built for
 * them, against the same weights run on each document as a sequence of its own (positions
 * from 0, no other document to see): the same loss and gradients. */
static void check_docs(dt_arch arch) {
    const char *an = arch == DT_ARCH_GPT2 ? "gpt2" : "llama";
    dt_model_config mc = tiny(arch);
    enum { B = 2, T = 16 };
    static const int starts[B][4] = {{0, 5, 6, T}, {0, 9, T, -1}};
    dt_mem *mem;
    dt_gpt *g, *one;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_gpt_opts po = {
        .B = B, .T = T, .precision = DT_PREC_FP32, .training = true, .doc_mask = true};
    dt_gpt_opts so = {.B = 1, .T = T, .precision = DT_PREC_FP32, .training = true};
    DT_CHECK_OK(dt_gpt_init(&mc, &po, mem, &g));
    DT_CHECK_OK(dt_gpt_init(&mc, &so, mem, &one));
    dt_gpt_init_weights(g, 7);
    perturb_all(g);
    int64_t n = dt_gpt_numel(g);
    memcpy(dt_gpt_weights(one), dt_gpt_weights(g), sizeof(float) * n);
    dt_gpt_sync_lp(one);
    int32_t tok[B * T], tgt[B * T], pairs[2 * B * T];
    batch(tok, tgt, B * T, mc.vocab_size);
    for (int b = 0; b < B; b++)
        for (int d = 0; starts[b][d] < T; d++)
            for (int t = starts[b][d]; t < starts[b][d + 1]; t++) {
                pairs[2 * (b * T + t)] = tok[b * T + t];
                pairs[2 * (b * T + t) + 1] = starts[b][d];
            }
    double packed, alone = 0;
    dt_gpt_zero_grad(g);
    DT_CHECK_OK(dt_gpt_forward(g, pairs, B, T));
    DT_CHECK_OK(dt_gpt_loss(g, tgt, B, T, 1.0f / (B * T), true, &packed));
    DT_CHECK_OK(dt_gpt_backward(g, pairs, B, T));
    dt_gpt_zero_grad(one);
    for (int b = 0; b < B; b++)
        for (int d = 0; starts[b][d] < T; d++) {
            int s0 = b * T + starts[b][d], len = starts[b][d + 1] - starts[b][d];
            double part;
            DT_CHECK_OK(dt_gpt_forward(one, tok + s0, 1, len));
            DT_CHECK_OK(dt_gpt_loss(one, tgt + s0, 1, len, 1.0f / (B * T), true, &part));
            DT_CHECK_OK(dt_gpt_backward(one, tok + s0, 1, len));
            alone += part;
        }
    double e = dt_test_nmse(dt_gpt_grads(g), dt_gpt_grads(one), n);
    printf("%s documents packed vs each alone: loss %.9g vs %.9g, gradient nmse %.3g\n", an, packed,
           alone, e);
    DT_CHECK(fabs(packed - alone) < 1e-5 * fabs(alone) && e < 1e-10,
             "%s documents: packed loss %.9g vs each document alone %.9g, gradient nmse %.3g", an,
             packed, alone, e);
    dt_gpt_free(one);
    dt_gpt_free(g);
    dt_mem_free(mem);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_arch(DT_ARCH_GPT2);
    check_arch(DT_ARCH_LLAMA);
    check_docs(DT_ARCH_GPT2);
    check_docs(DT_ARCH_LLAMA);
    return DT_TEST_END();
}
