/* Tests for kernels/attention.c: the flash-attention kernels against their double-precision
 * _ref twins (several shapes, partial tiles, GQA, causal and not, fused-qkv strides,
 * accumulate semantics, thread-count independence), and the gradients against central finite
 * differences of a naive double attention written here. Every ISA variant the CPU runs is
 * checked (the others are skipped, and say so), in fp32 and in bf16 mode, where the _ref twin
 * rounds the same operands. --perf times fwd+bwd of each variant. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "harness.h"
#include "kernels/attention.h"
#include "kernels/isa.h"

/* Documents the shapes below are made with (attention.h's doc_start, k_pos0): NULL but in the
 * document checks, which set them for the B x T they use */
static const int32_t *g_doc;
static int g_k_pos0;

/* A fused qkv buffer [B, T, (NH + 2 NKV) hs] as the attention layer passes it. */
typedef struct fused {
    dt_attn_shape s;
    int64_t n_qkv, n_y, n_lse;
    float *qkv, *y, *lse, *dy, *dqkv;
} fused;

static fused fused_make(int B, int T, int NH, int NKV, int hs, bool causal, float qk_scale,
                        uint64_t seed) {
    fused f = {0};
    int64_t W = (int64_t)(NH + 2 * NKV) * hs;
    f.s = (dt_attn_shape){.B = B,
                          .T = T,
                          .NH = NH,
                          .NKV = NKV,
                          .hs = hs,
                          .q_stride = W,
                          .kv_stride = W,
                          .scale = 1.0f / sqrtf((float)hs),
                          .causal = causal,
                          .doc_start = g_doc,
                          .k_pos0 = g_k_pos0};
    f.n_qkv = (int64_t)B * T * W;
    f.n_y = (int64_t)B * T * NH * hs;
    f.n_lse = (int64_t)B * NH * T;
    f.qkv = malloc(sizeof(float) * f.n_qkv);
    f.dqkv = calloc(f.n_qkv, sizeof(float));
    f.y = malloc(sizeof(float) * f.n_y);
    f.dy = malloc(sizeof(float) * f.n_y);
    f.lse = malloc(sizeof(float) * f.n_lse);
    dt_test_fill(f.qkv, f.n_qkv, seed, qk_scale);
    dt_test_fill(f.dy, f.n_y, seed + 1, 1.0f);
    return f;
}

static void fused_free(fused *f) {
    free(f->qkv);
    free(f->dqkv);
    free(f->y);
    free(f->dy);
    free(f->lse);
}

static void run_fwd(fused *f, bool ref) {
    const float *q = f->qkv, *k = q + f->s.NH * f->s.hs, *v = k + f->s.NKV * f->s.hs;
    (ref ? dt_attention_forward_ref : dt_attention_forward)(&f->s, f->y, f->lse, q, k, v);
}

static void run_bwd(fused *f, bool ref) {
    const float *q = f->qkv, *k = q + f->s.NH * f->s.hs, *v = k + f->s.NKV * f->s.hs;
    float *dq = f->dqkv, *dk = dq + f->s.NH * f->s.hs, *dv = dk + f->s.NKV * f->s.hs;
    (ref ? dt_attention_backward_ref : dt_attention_backward)(&f->s, dq, dk, dv, f->dy, f->y,
                                                              f->lse, q, k, v);
}

/* nmse of two lse arrays whose -inf entries (queries that saw no key: documents) must agree */
static double lse_nmse(const float *a, const float *b, int64_t n) {
    float *fa = malloc(sizeof(float) * n), *fb = malloc(sizeof(float) * n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) {
        differ += isinf(a[i]) != isinf(b[i]);
        fa[i] = isinf(a[i]) ? 0.0f : a[i];
        fb[i] = isinf(b[i]) ? 0.0f : b[i];
    }
    double e = differ ? INFINITY : dt_test_nmse(fa, fb, n);
    free(fa);
    free(fb);
    return e;
}

/* fast vs ref on one shape; the fast backward gets the fast forward's y and lse, and starts
 * from a pre-filled dqkv to check that it accumulates. */
/* bf16 mode: the _ref twin rounds the same operands, so the two agree to the fp32 sums and
 * the one rounding the twin cannot mirror (P relative to the running max, not the final one);
 * an fp32 reference of the same inputs must be much further away (the test compares like with
 * like, and bf16 mode really rounds). */
static void check_vs_ref_mode(int B, int T, int NH, int NKV, int hs, bool causal, float qk_scale,
                              bool bf16) {
    fused a = fused_make(B, T, NH, NKV, hs, causal, qk_scale, 100 + T + NH * 7 + NKV);
    fused r = fused_make(B, T, NH, NKV, hs, causal, qk_scale, 100 + T + NH * 7 + NKV);
    a.s.bf16 = r.s.bf16 = bf16;
    run_fwd(&a, false);
    run_fwd(&r, true);
    if (bf16 && hs <= 256) {
        fused f = fused_make(B, T, NH, NKV, hs, causal, qk_scale, 100 + T + NH * 7 + NKV);
        run_fwd(&f, true);
        double e_bf = dt_test_nmse(a.y, r.y, a.n_y), e_32 = dt_test_nmse(a.y, f.y, a.n_y);
        DT_CHECK(e_32 > 30 * e_bf, "bf16 mode: y nmse vs the bf16 ref %.3g, vs the fp32 ref %.3g",
                 e_bf, e_32);
        /* the gradients too: every product's operands are rounded in both */
        fused g = fused_make(B, T, NH, NKV, hs, causal, qk_scale, 100 + T + NH * 7 + NKV);
        g.s.bf16 = true;
        run_fwd(&g, false);
        run_bwd(&g, false);
        run_bwd(&f, true);
        fused rb = fused_make(B, T, NH, NKV, hs, causal, qk_scale, 100 + T + NH * 7 + NKV);
        rb.s.bf16 = true;
        run_fwd(&rb, true);
        run_bwd(&rb, true);
        double g_bf = dt_test_nmse(g.dqkv, rb.dqkv, g.n_qkv), g_32 = dt_test_nmse(g.dqkv, f.dqkv, g.n_qkv);
        DT_CHECK(g_32 > 30 * g_bf, "bf16 mode: dqkv nmse vs the bf16 ref %.3g, vs the fp32 ref %.3g",
                 g_bf, g_32);
        fused_free(&g);
        fused_free(&rb);
        fused_free(&f);
    }
    double e_y = dt_test_nmse(a.y, r.y, a.n_y), e_l = lse_nmse(a.lse, r.lse, a.n_lse);
    float *pre = malloc(sizeof(float) * a.n_qkv);
    dt_test_fill(pre, a.n_qkv, 7, 0.5f);
    memcpy(a.dqkv, pre, sizeof(float) * a.n_qkv);
    run_bwd(&a, false);
    run_bwd(&r, true); /* from zero, with its own y and lse */
    for (int64_t i = 0; i < a.n_qkv; i++)
        a.dqkv[i] -= pre[i];
    /* compare each of dq, dk, dv separately: token rows of the fused buffer split by heads */
    const int64_t W = a.s.q_stride, nq = (int64_t)NH * hs, nkv = (int64_t)NKV * hs;
    double num[3] = {0}, den[3] = {0};
    for (int64_t t = 0; t < (int64_t)B * T; t++)
        for (int64_t c = 0; c < W; c++) {
            int part = c < nq ? 0 : c < nq + nkv ? 1 : 2;
            double d = (double)a.dqkv[t * W + c] - r.dqkv[t * W + c];
            num[part] += d * d;
            den[part] += (double)r.dqkv[t * W + c] * r.dqkv[t * W + c];
        }
    const char *cs = causal ? "causal" : "full";
    const double tol_y = bf16 ? 1e-8 : 1e-10, tol_l = 1e-12;
    /* bf16: an element of P or dS near a rounding boundary rounds to the other neighbour in
     * fp32 (kernel) and double (ref): one bf16 ulp, 2^-8 relative, on a few elements */
    const double tol_g = bf16 ? 1e-7 : 1e-9;
    DT_CHECK(e_y < tol_y, "y nmse %.3g B%d T%d NH%d NKV%d hs%d %s", e_y, B, T, NH, NKV, hs, cs);
    DT_CHECK(e_l < tol_l, "lse nmse %.3g B%d T%d NH%d NKV%d %s", e_l, B, T, NH, NKV, cs);
    const char *names[3] = {"dq", "dk", "dv"};
    double e3[3];
    for (int p = 0; p < 3; p++)
        e3[p] = den[p] > 0 ? num[p] / den[p] : num[p];
    printf("attention %s%s B%d T%d NH%d NKV%d hs%d %s: nmse y %.2g lse %.2g dq %.2g dk %.2g "
           "dv %.2g\n", dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)), bf16 ? " bf16" : "", B, T,
           NH, NKV, hs, cs, e_y, e_l, e3[0], e3[1], e3[2]);
    for (int p = 0; p < 3; p++) {
        double e = e3[p];
        DT_CHECK(e < tol_g, "%s nmse %.3g B%d T%d NH%d NKV%d hs%d %s", names[p], e, B, T, NH, NKV,
                 hs, cs);
    }
    free(pre);
    fused_free(&a);
    fused_free(&r);
}

/* The _set backward over a garbage-filled dqkv: the values of accumulating onto zeros (an
 * exact zero may differ in sign), in both modes and through the reference fallback too. */
static void check_set(int B, int T, int NH, int NKV, int hs, bool causal, bool bf16) {
    fused a = fused_make(B, T, NH, NKV, hs, causal, 1.0f, 300 + T + NH);
    a.s.bf16 = bf16;
    run_fwd(&a, false);
    const float *q = a.qkv, *k = q + a.s.NH * a.s.hs, *v = k + a.s.NKV * a.s.hs;
    float *acc = calloc(a.n_qkv, sizeof(float));
    dt_attention_backward(&a.s, acc, acc + a.s.NH * hs, acc + (NH + NKV) * hs, a.dy, a.y, a.lse,
                          q, k, v);
    dt_test_fill(a.dqkv, a.n_qkv, 9, 1e3f);
    float *dq = a.dqkv, *dk = dq + a.s.NH * a.s.hs, *dv = dk + a.s.NKV * a.s.hs;
    dt_attention_backward_set(&a.s, dq, dk, dv, a.dy, a.y, a.lse, q, k, v);
    int64_t bad = 0;
    for (int64_t i = 0; i < a.n_qkv; i++)
        bad += a.dqkv[i] != acc[i];
    DT_CHECK(bad == 0, "backward_set B%d T%d NH%d NKV%d hs%d %s: %lld values differ", B, T, NH,
             NKV, hs, bf16 ? "bf16" : "fp32", (long long)bad);
    free(acc);
    fused_free(&a);
}

static void check_vs_ref(int B, int T, int NH, int NKV, int hs, bool causal, float qk_scale) {
    check_vs_ref_mode(B, T, NH, NKV, hs, causal, qk_scale, false);
    check_vs_ref_mode(B, T, NH, NKV, hs, causal, qk_scale, true);
}

/* Results must not depend on the number of threads: bitwise equal at 1 and 2 threads. */
static void check_thread_independence(bool bf16) {
    fused a = fused_make(2, 100, 4, 2, 32, true, 1.0f, 5);
    fused b = fused_make(2, 100, 4, 2, 32, true, 1.0f, 5);
    a.s.bf16 = b.s.bf16 = bf16;
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    run_fwd(&a, false);
    run_bwd(&a, false);
    omp_set_num_threads(2);
    run_fwd(&b, false);
    run_bwd(&b, false);
    omp_set_num_threads(nt);
    DT_CHECK(memcmp(a.y, b.y, sizeof(float) * a.n_y) == 0, "y differs between 1 and 2 threads");
    DT_CHECK(memcmp(a.dqkv, b.dqkv, sizeof(float) * a.n_qkv) == 0,
             "dqkv differs between 1 and 2 threads");
    fused_free(&a);
    fused_free(&b);
}

/* The bf16-storage entry points against the fp32 ones in bf16 mode on the same bf16 values
 * (q, k, v rounded first; the backward given the bf16 y): the same bits, y rounded once (y16)
 * or not at all (fp32 y). */
static void check_bf16_io(int B, int T, int NH, int NKV, int hs, bool causal) {
    fused a = fused_make(B, T, NH, NKV, hs, causal, 1.0f, 40 + T + hs);
    a.s.bf16 = true;
    uint16_t *qkv16 = malloc(sizeof(uint16_t) * a.n_qkv), *y16 = malloc(sizeof(uint16_t) * a.n_y);
    float *lse16 = malloc(sizeof(float) * a.n_lse), *d16 = malloc(sizeof(float) * a.n_qkv);
    for (int64_t i = 0; i < a.n_qkv; i++) {
        qkv16[i] = dt_bf16_from_f32(a.qkv[i]);
        a.qkv[i] = dt_bf16_to_f32(qkv16[i]);
    }
    const int64_t nq = (int64_t)NH * hs, nkv = (int64_t)NKV * hs;
    DT_CHECK_OK(dt_attention_forward_bf16(&a.s, y16, true, lse16, qkv16, qkv16 + nq,
                                          qkv16 + nq + nkv));
    run_fwd(&a, false);
    float *y32 = malloc(sizeof(float) * a.n_y), *d32 = malloc(sizeof(float) * a.n_qkv);
    DT_CHECK_OK(dt_attention_forward_bf16(&a.s, y32, false, lse16, qkv16, qkv16 + nq,
                                          qkv16 + nq + nkv));
    int64_t bad = memcmp(y32, a.y, sizeof(float) * a.n_y) != 0;
    for (int64_t i = 0; i < a.n_y; i++) {
        bad += y16[i] != dt_bf16_from_f32(a.y[i]);
        a.y[i] = dt_bf16_to_f32(y16[i]);
    }
    bad += memcmp(lse16, a.lse, sizeof(float) * a.n_lse) != 0;
    dt_test_fill(d16, a.n_qkv, 11, 1e3f);
    DT_CHECK_OK(dt_attention_backward_set_bf16(&a.s, d16, d16 + nq, d16 + nq + nkv, a.dy, y16,
                                               true, lse16, qkv16, qkv16 + nq,
                                               qkv16 + nq + nkv));
    DT_CHECK_OK(dt_attention_backward_set_bf16(&a.s, d32, d32 + nq, d32 + nq + nkv, a.dy, a.y,
                                               false, lse16, qkv16, qkv16 + nq,
                                               qkv16 + nq + nkv));
    run_bwd(&a, false);
    for (int64_t i = 0; i < a.n_qkv; i++)
        bad += (d16[i] != a.dqkv[i]) + (d32[i] != a.dqkv[i]);
    DT_CHECK(bad == 0, "bf16 storage %s B%d T%d NH%d NKV%d hs%d %s: %lld values differ",
             dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)), B, T, NH, NKV, hs,
             causal ? "causal" : "full", (long long)bad);
    free(qkv16);
    free(y16);
    free(y32);
    free(d32);
    free(lse16);
    free(d16);
    fused_free(&a);
}

/* doc[b*T + t] = the first position of token t's document, documents starting at 0 and at
 * each cut of row b (cuts[b], ending at -1) */
static void make_docs(int32_t *doc, int B, int T, const int cuts[][8]) {
    for (int b = 0; b < B; b++)
        for (int t = 0, c = 0, start = 0; t < T; t++) {
            if (cuts[b][c] == t) {
                start = t;
                c++;
            }
            doc[(int64_t)b * T + t] = start;
        }
}

/* Documents kept apart against the independent reading: the fp32 kernel over packed rows
 * equals the reference run on each document as a sequence of its own (y, lse and every
 * gradient; keys of one document get gradients only from its own queries). */
static void check_docs_separately(int B, int T, int NH, int NKV, int hs, const int32_t *doc) {
    g_doc = doc;
    fused a = fused_make(B, T, NH, NKV, hs, true, 1.0f, 900 + T);
    g_doc = NULL;
    fused r = fused_make(B, T, NH, NKV, hs, true, 1.0f, 900 + T);
    run_fwd(&a, false);
    run_bwd(&a, false);
    const int64_t W = a.s.q_stride, A = (int64_t)NH * hs, nq = A, nkv = (int64_t)NKV * hs;
    float *lse = malloc(sizeof(float) * NH * T);
    for (int b = 0; b < B; b++)
        for (int s0 = 0; s0 < T;) {
            int e = s0 + 1;
            while (e < T && doc[(int64_t)b * T + e] == s0)
                e++;
            dt_attn_shape ds = r.s;
            ds.B = 1;
            ds.T = e - s0;
            const int64_t row = (int64_t)b * T + s0;
            const float *q = r.qkv + row * W;
            float *dq = r.dqkv + row * W;
            dt_attention_forward_ref(&ds, r.y + row * A, lse, q, q + nq, q + nq + nkv);
            dt_attention_backward_ref(&ds, dq, dq + nq, dq + nq + nkv, r.dy + row * A,
                                      r.y + row * A, lse, q, q + nq, q + nq + nkv);
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < ds.T; t++)
                    r.lse[((int64_t)b * NH + h) * T + s0 + t] = lse[(int64_t)h * ds.T + t];
            s0 = e;
        }
    double e_y = dt_test_nmse(a.y, r.y, a.n_y), e_l = dt_test_nmse(a.lse, r.lse, a.n_lse);
    double e_g = dt_test_nmse(a.dqkv, r.dqkv, a.n_qkv);
    printf("attention %s documents B%d T%d NH%d NKV%d hs%d vs each document alone: nmse y %.2g "
           "lse %.2g dqkv %.2g\n",
           dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)), B, T, NH, NKV, hs, e_y, e_l, e_g);
    DT_CHECK(e_y < 1e-10 && e_l < 1e-12 && e_g < 1e-9,
             "documents vs each document alone: nmse y %.3g lse %.3g dqkv %.3g", e_y, e_l, e_g);
    free(lse);
    fused_free(&a);
    fused_free(&r);
}

/* Documents (attention.h's doc_start) through every check of one variant: packed rows with
 * one-token documents, documents across tile edges and a row of two; then a ring's pairs of
 * chunks: keys all before the queries (not causal, some queries seeing none) and a diagonal
 * pair whose keys start at position 64. */
static void check_docs(void) {
    enum { B = 2, T = 150 };
    static const int cuts[B][8] = {{1, 2, 70, 71, 140, -1}, {100, -1}};
    static int32_t doc[B * T];
    make_docs(doc, B, T, cuts);
    check_docs_separately(B, T, 4, 2, 64, doc);
    check_docs_separately(B, T, 2, 1, 13, doc);
    g_doc = doc;
    check_vs_ref(B, T, 4, 2, 64, true, 1.0f);
    check_vs_ref(B, T, 2, 1, 13, true, 1.0f);
    check_vs_ref(B, T, 2, 2, 300, true, 1.0f); /* hs > MAX_HS: the reference path */
    check_set(B, T, 4, 2, 64, true, false);
    check_set(B, T, 4, 2, 64, true, true);
    check_bf16_io(B, T, 4, 2, 64, true);
    static int32_t before[64], diagonal[64]; /* queries at positions 64..127 */
    for (int t = 0; t < 64; t++) {
        before[t] = t < 20 ? 10 : t < 40 ? 40 : t < 54 ? 64 : 100;
        diagonal[t] = t < 30 ? 64 : 94;
    }
    g_doc = before;
    check_vs_ref(1, 64, 2, 1, 32, false, 1.0f);
    check_vs_ref(1, 64, 2, 1, 13, false, 1.0f);
    g_doc = diagonal;
    g_k_pos0 = 64;
    check_vs_ref(1, 64, 2, 1, 32, true, 1.0f);
    g_doc = NULL;
    g_k_pos0 = 0;
}

/* L = sum(w * y) of a naive attention in double, on the fused layout. */
static double naive_loss(const dt_attn_shape *s, const double *qkv, const float *w) {
    const int T = s->T, hs = s->hs, group = s->NH / s->NKV;
    const int64_t W = s->q_stride;
    double L = 0, *p = malloc(sizeof(double) * T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *qt = qkv + ((int64_t)b * T + t) * W + h * hs;
                int n = s->causal ? t + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    const double *kj = qkv + ((int64_t)b * T + j) * W + (s->NH + h / group) * hs;
                    double a = 0;
                    for (int d = 0; d < hs; d++)
                        a += qt[d] * kj[d];
                    p[j] = a * s->scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < n; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int d = 0; d < hs; d++) {
                    double yd = 0;
                    for (int j = 0; j < n; j++)
                        yd += p[j] * qkv[((int64_t)b * T + j) * W + (s->NH + s->NKV + h / group) * hs + d];
                    L += w[((int64_t)b * T + t) * s->NH * hs + h * hs + d] * yd / sum;
                }
            }
    free(p);
    return L;
}

/* Gradients of the fast kernels (dy = w) against central differences of naive_loss. */
static void check_fd(int B, int T, int NH, int NKV, int hs, bool causal) {
    fused f = fused_make(B, T, NH, NKV, hs, causal, 1.5f, 900 + T + NKV);
    run_fwd(&f, false);
    run_bwd(&f, false);
    double *x = malloc(sizeof(double) * f.n_qkv);
    for (int64_t i = 0; i < f.n_qkv; i++)
        x[i] = f.qkv[i];
    const double eps = 1e-4;
    double worst = 0, gmax = 0;
    for (int n = 0; n < 240; n++) {
        int64_t i = (int64_t)((n * 2654435761u) % (uint64_t)f.n_qkv);
        double x0 = x[i];
        x[i] = x0 + eps;
        double lp = naive_loss(&f.s, x, f.dy);
        x[i] = x0 - eps;
        double lm = naive_loss(&f.s, x, f.dy);
        x[i] = x0;
        double fd = (lp - lm) / (2 * eps);
        worst = fmax(worst, fabs(fd - f.dqkv[i]));
        gmax = fmax(gmax, fabs(fd));
    }
    printf("attention fd T%d NKV%d %s: max err %.3g, max grad %.3g\n", T, NKV,
           causal ? "causal" : "full", worst, gmax);
    DT_CHECK(gmax > 0 && worst <= 1e-4 * gmax, "fd: max err %.3g vs max grad %.3g (T%d NKV%d %s)",
             worst, gmax, T, NKV, causal ? "causal" : "full");
    free(x);
    fused_free(&f);
}

/* One `perf` line: forward QK^T and PV, 4 B NH T^2 hs, halved for causal; backward 2.5x
 * (5 products) */
static void print_perf(const char *mode, const dt_attn_shape *s, double tf, double tb) {
    double fl = 4.0 * s->B * s->NH * (double)s->T * s->T * s->hs / 2;
    printf("perf attention %s%s causal B=%d T=%d NH=%d NKV=%d hs=%d threads=%d: fwd %.2f ms "
           "(%.1f GFLOP/s), bwd %.2f ms (%.1f GFLOP/s), fwd+bwd %.2f ms (%.1f GFLOP/s)\n",
           dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)), mode, s->B, s->T, s->NH, s->NKV, s->hs,
           omp_get_max_threads(), tf * 1e3, fl / tf * 1e-9, tb * 1e3, 2.5 * fl / tb * 1e-9,
           (tf + tb) * 1e3, 3.5 * fl / (tf + tb) * 1e-9);
}

static void perf(int B, int T, int NH, int NKV, int hs, bool bf16) {
    fused f = fused_make(B, T, NH, NKV, hs, true, 1.0f, 3);
    f.s.bf16 = bf16;
    run_fwd(&f, false);
    run_bwd(&f, false);
    double tf = 1e30, tb = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = dt_test_seconds();
        run_fwd(&f, false);
        double t1 = dt_test_seconds();
        run_bwd(&f, false);
        double t2 = dt_test_seconds();
        tf = fmin(tf, t1 - t0);
        tb = fmin(tb, t2 - t1);
    }
    print_perf(bf16 ? " bf16" : "", &f.s, tf, tb);
    fused_free(&f);
}

/* The bf16-storage entry points as a bf16 run's block calls them (q|k|v and y in bf16), times
 * like perf() */
static void perf16(int B, int T, int NH, int NKV, int hs) {
    fused f = fused_make(B, T, NH, NKV, hs, true, 1.0f, 5);
    f.s.bf16 = true;
    uint16_t *qkv16 = malloc(sizeof(uint16_t) * f.n_qkv), *y16 = malloc(sizeof(uint16_t) * f.n_y);
    for (int64_t i = 0; i < f.n_qkv; i++)
        qkv16[i] = dt_bf16_from_f32(f.qkv[i]);
    const uint16_t *q = qkv16, *k = q + (int64_t)NH * hs, *v = k + (int64_t)NKV * hs;
    float *dq = f.dqkv, *dk = dq + (int64_t)NH * hs, *dv = dk + (int64_t)NKV * hs;
    double tf = 1e30, tb = 1e30;
    for (int rep = 0; rep < 6; rep++) { /* the first warms up */
        double t0 = dt_test_seconds();
        DT_CHECK_OK(dt_attention_forward_bf16(&f.s, y16, true, f.lse, q, k, v));
        double t1 = dt_test_seconds();
        DT_CHECK_OK(
            dt_attention_backward_set_bf16(&f.s, dq, dk, dv, f.dy, y16, true, f.lse, q, k, v));
        double t2 = dt_test_seconds();
        tf = rep ? fmin(tf, t1 - t0) : tf;
        tb = rep ? fmin(tb, t2 - t1) : tb;
    }
    print_perf(" bf16-storage", &f.s, tf, tb);
    free(qkv16);
    free(y16);
    fused_free(&f);
}

/* Under AddressSanitizer an impossible allocation must return NULL, as glibc's does, rather than
 * end the test (check_bf16_oom); the environment's ASAN_OPTIONS still apply on top. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* The reference path of bf16 storage (hs > the packed kernels' limit) widens the operands to
 * fp32; when that cannot be allocated it is an error, not silently missing output. The shape is
 * too large to allocate, so the (tiny) operands are never read. */
static void check_bf16_oom(void) {
    dt_attn_shape s = {.B = 1 << 20, .T = 1 << 20, .NH = 1, .NKV = 1, .hs = 512,
                       .q_stride = 3 * 512, .kv_stride = 3 * 512, .scale = 1, .causal = true,
                       .bf16 = true};
    uint16_t qkv[3 * 512] = {0};
    float y[512], lse[1], d[3 * 512];
    DT_CHECK(dt_attention_forward_bf16(&s, y, false, lse, qkv, qkv + 512, qkv + 1024) ==
                 DT_ERR_OOM, "forward: out of memory reported");
    DT_CHECK(dt_attention_backward_set_bf16(&s, d, d + 512, d + 1024, y, y, false, lse, qkv,
                                            qkv + 512, qkv + 1024) == DT_ERR_OOM,
             "backward: out of memory reported");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_bf16_oom();
    check_set(2, 37, 4, 2, 64, true, false);
    check_set(2, 37, 4, 2, 64, true, true);
    check_set(1, 20, 2, 1, 16, false, false);
    check_set(1, 8, 2, 2, 300, true, false); /* hs > MAX_HS: the reference path */
    for (int isa = 0; isa < DT_ISA_COUNT; isa++) {
        if (!dt_isa_supported((dt_isa)isa)) {
            printf("SKIP attention variant %s: this CPU does not run it\n",
                   dt_isa_name((dt_isa)isa));
            continue;
        }
        dt_isa_set_cap((dt_isa)isa);
        for (int causal = 0; causal <= 1; causal++) {
            check_vs_ref(1, 37, 2, 2, 16, causal, 1.0f);  /* one partial tile */
            check_vs_ref(2, 100, 4, 2, 64, causal, 1.0f); /* GQA 2:1, partial second tile */
            check_vs_ref(1, 100, 4, 1, 32, causal, 2.0f); /* MQA, peaked softmax */
            check_vs_ref(1, 128, 3, 3, 64, causal, 1.0f); /* whole tiles */
            check_vs_ref(1, 70, 2, 1, 13, causal, 1.0f);  /* odd head size */
            check_vs_ref(1, 5, 2, 2, 300, causal, 1.0f);  /* hs > MAX_HS: reference path */
        }
        check_vs_ref(1, 1, 2, 1, 64, true, 1.0f);
        for (int causal = 0; causal <= 1; causal++) {
            check_bf16_io(2, 100, 4, 2, 64, causal);
            check_bf16_io(1, 70, 2, 1, 13, causal);
            check_bf16_io(1, 5, 2, 2, 300, causal); /* the reference path */
        }
        check_thread_independence(false);
        check_thread_independence(true);
        check_docs();
        if (dt_test.perf) {
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                perf(4, 256, 12, 12, 64, bf16);
                perf(8, 256, 6, 6, 64, bf16);
                perf(1, 1024, 12, 12, 64, bf16);
            }
            perf16(4, 256, 12, 12, 64);
            perf16(8, 256, 6, 6, 64);
        }
    }
    dt_isa_set_cap(DT_ISA_COUNT - 1);
    check_fd(1, 37, 2, 2, 8, true);
    check_fd(1, 100, 4, 2, 8, true);
    check_fd(2, 70, 4, 1, 8, false);
    return DT_TEST_END();
}
