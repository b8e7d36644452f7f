/* Tests for kernels/xent.c: the window statistics and the gradient against their double _ref
 * twins; the whole pipeline (stats, combine, grad) on one window against a double computation
 * written here and the gradient against central finite differences of the loss; the same
 * pipeline on a row split into p windows with an offset and padding columns (empty windows
 * included), as the vocab-parallel LM head runs it, against the unsplit definition; ignored
 * and out-of-range targets, huge logits (+-1e4), columns past the window untouched, the
 * loss-only path leaving the logits alone, and thread-count independence; all of it for every
 * ISA variant the CPU runs (the others are skipped, and say so). --perf times a chunk of
 * LM-head rows with each variant.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/cast.h"
#include "kernels/isa.h"
#include "kernels/xent.h"

/* loss of one row in double, straight from the definition */
static double loss_d(const double *x, int V, int tgt) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
        mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++)
        sum += exp(x[j] - mx);
    return mx + log(sum) - x[tgt];
}

/* The whole vocabulary in one window: stats, combine, and (grad_scale != 0) the gradient in
 * place, with the fast kernels or their _ref twins. */
static void xent_full(float *x, float *losses, const int32_t *tg, int n, int V, int64_t ld,
                      float grad_scale, bool ref) {
    float *st = malloc(sizeof(float) * 4 * (size_t)n), *scale = st + 3 * n;
    if (grad_scale == 0.0f) {
        (ref ? dt_xent_row_stats_ref : dt_xent_row_stats)(x, ld, n, V, 0, tg, st, st + n,
                                                          st + 2 * n);
        dt_xent_combine(st, 1, 0, n, tg, V, 0.0f, losses, NULL);
    } else {
        (ref ? dt_xent_row_stats_exp_ref : dt_xent_row_stats_exp)(x, ld, n, V, 0, tg, st,
                                                                  st + n, st + 2 * n);
        dt_xent_combine(st, 1, 0, n, tg, V, grad_scale, losses, scale);
        (ref ? dt_xent_grad_ref : dt_xent_grad)(x, ld, n, V, V, 0, tg, scale, grad_scale);
    }
    free(st);
}

static void check_vs_ref(int n, int V, int pad, float scale, float grad_scale) {
    const int64_t ld = V + pad;
    float *a = malloc(sizeof(float) * n * ld), *r = malloc(sizeof(float) * n * ld);
    float *la = malloc(sizeof(float) * n), *lr = malloc(sizeof(float) * n);
    int32_t *tg = malloc(sizeof(int32_t) * n);
    double *xd = malloc(sizeof(double) * V);
    dt_test_fill(a, n * ld, 11 + V, scale);
    for (int i = 0; i < n; i++)
        tg[i] = i % 5 == 3 ? -1 : (int32_t)((i * 7919u + 13) % (unsigned)V);
    memcpy(r, a, sizeof(float) * n * ld);
    xent_full(a, la, tg, n, V, ld, 0.0f, false);
    double worst_d = 0;
    for (int i = 0; i < n; i++) { /* loss against a double computation made here */
        if (tg[i] < 0)
            continue;
        for (int j = 0; j < V; j++)
            xd[j] = a[i * ld + j];
        double want = loss_d(xd, V, tg[i]);
        worst_d = fmax(worst_d, fabs(la[i] - want) / fmax(fabs(want), 1.0));
    }
    DT_CHECK(worst_d < 2e-6, "loss vs double: rel err %.3g (n%d V%d scale %g)", worst_d, n, V,
             scale);
    xent_full(a, la, tg, n, V, ld, grad_scale, false);
    xent_full(r, lr, tg, n, V, ld, grad_scale, true);
    double e_loss = dt_test_nmse(la, lr, n);
    double e_grad = dt_test_nmse(a, r, n * ld);
    double max_abs = 0;
    for (int64_t i = 0; i < n * ld; i++)
        max_abs = fmax(max_abs, fabs((double)a[i] - r[i]));
    bool finite = true, pad_ok = true, ignored_ok = true;
    for (int i = 0; i < n; i++) {
        finite = finite && isfinite(la[i]);
        for (int j = 0; j < V; j++) {
            finite = finite && isfinite(a[i * ld + j]);
            ignored_ok = ignored_ok && (tg[i] >= 0 || a[i * ld + j] == 0);
        }
        for (int j = V; j < ld; j++)
            pad_ok = pad_ok && a[i * ld + j] == r[i * ld + j];
        ignored_ok = ignored_ok && (tg[i] >= 0 || la[i] == 0);
    }
    printf("xent n%d V%d scale %g grad_scale %g: loss nmse %.2g, grad nmse %.2g max abs %.2g, "
           "loss vs double %.2g\n", n, V, scale, grad_scale, e_loss, e_grad, max_abs, worst_d);
    DT_CHECK(e_loss < 1e-12, "loss nmse %.3g (V%d scale %g)", e_loss, V, scale);
    DT_CHECK(e_grad < 1e-11, "grad nmse %.3g (V%d scale %g)", e_grad, V, scale);
    DT_CHECK(max_abs < 1e-6 * fabs(grad_scale) + 1e-30, "grad max abs err %.3g", max_abs);
    DT_CHECK(finite, "non-finite loss or gradient (V%d scale %g)", V, scale);
    DT_CHECK(pad_ok, "columns past V were written");
    DT_CHECK(ignored_ok, "ignored row has a nonzero loss or gradient");
    free(a);
    free(r);
    free(la);
    free(lr);
    free(tg);
    free(xd);
}

/* The stats kernels against their twins directly, on a window at an offset: max and target
 * logit exactly, the sum and the stored exps to float rounding. */
static void check_stats_vs_ref(void) {
    const int n = 11, V = 777, ld = 800, first = 300;
    float *a = malloc(sizeof(float) * n * ld), *r = malloc(sizeof(float) * n * ld);
    float sa[3 * 11], sr[3 * 11];
    int32_t tg[11];
    for (int i = 0; i < n; i++) /* in the window, before it, after it, ignored */
        tg[i] = i % 4 == 0 ? first + 50 * i : i % 4 == 1 ? i : i % 4 == 2 ? first + V + i : -1;
    dt_test_fill(a, n * ld, 21, 6.0f);
    memcpy(r, a, sizeof(float) * n * ld);
    dt_xent_row_stats(a, ld, n, V, first, tg, sa, sa + n, sa + 2 * n);
    DT_CHECK(memcmp(a, r, sizeof(float) * n * ld) == 0, "dt_xent_row_stats wrote the logits");
    dt_xent_row_stats_ref(r, ld, n, V, first, tg, sr, sr + n, sr + 2 * n);
    DT_CHECK(memcmp(sa, sr, sizeof(float) * n) == 0, "stats max differs from ref");
    DT_CHECK(memcmp(sa + 2 * n, sr + 2 * n, sizeof(float) * n) == 0, "target logit differs");
    DT_CHECK(dt_test_max_rel(sa + n, sr + n, n, 1.0) < 1e-6, "stats sum vs ref %.3g",
             dt_test_max_rel(sa + n, sr + n, n, 1.0));
    for (int i = 0; i < n; i++) {
        bool owned = tg[i] >= first && tg[i] < first + V;
        DT_CHECK(sa[2 * n + i] == (owned ? a[i * ld + tg[i] - first] : 0.0f),
                 "row %d target logit %g", i, sa[2 * n + i]);
        DT_CHECK(tg[i] >= 0 || (sa[i] == 0 && sa[n + i] == 0), "ignored row has stats");
    }
    dt_xent_row_stats_exp(a, ld, n, V, first, tg, sa, sa + n, sa + 2 * n);
    dt_xent_row_stats_exp_ref(r, ld, n, V, first, tg, sr, sr + n, sr + 2 * n);
    DT_CHECK(memcmp(sa, sr, sizeof(float) * n) == 0, "exp stats max differs from ref");
    DT_CHECK(dt_test_max_rel(sa + n, sr + n, n, 1.0) < 1e-6, "exp stats sum differs from ref");
    double e = dt_test_max_rel(a, r, n * ld, 1e-6);
    printf("xent stats window: exps max rel err vs ref %.2g\n", e);
    DT_CHECK(e < 2e-6, "stored exps vs ref: max rel %.3g", e); /* x - mx rounds: ~1 ulp of 12 */
    /* the grad kernel against its twin on the same exps, with padding columns */
    float scale[11];
    for (int i = 0; i < n; i++)
        scale[i] = 0.01f * (i + 1);
    memcpy(r, a, sizeof(float) * n * ld);
    dt_xent_grad(a, ld, n, V - 7, V, first, tg, scale, 0.25f);
    dt_xent_grad_ref(r, ld, n, V - 7, V, first, tg, scale, 0.25f);
    e = dt_test_max_rel(a, r, n * ld, 1e-3);
    DT_CHECK(e < 1e-6, "grad vs ref: max rel %.3g", e);
    bool zero = true;
    for (int i = 0; i < n; i++)
        for (int j = V - 7; j < V; j++)
            zero = zero && a[i * ld + j] == 0.0f;
    DT_CHECK(zero, "padding columns of the gradient are not 0");
    free(a);
    free(r);
}

/* The fused gradient + 16-bit rounding equals dt_xent_grad followed by the cast, bit for bit,
 * into rows at their own stride (the columns past width untouched), ignored rows included;
 * and the same bits when the 16-bit rows are written over the fp32 ones, at a stride of
 * twice theirs (each over its own start) or at a narrower one (rows moving down; n = 40 rows
 * run in batches of 1, 1, 2, 4, ...). */
static void check_grad_lp(dt_dtype t) {
    const int n = 40, V = 1000, width = 1003, ld = 1010, ld_lp = 1024, first = 40;
    float *a = malloc(sizeof(float) * n * ld), *r = malloc(sizeof(float) * n * ld);
    float *in_place = malloc(sizeof(float) * n * ld), *narrow = malloc(sizeof(float) * n * ld);
    uint16_t *lp = malloc(sizeof(uint16_t) * n * ld_lp), *want = malloc(sizeof(uint16_t) * width);
    int32_t tg[40];
    float scale[40];
    for (int i = 0; i < n; i++) {
        tg[i] = i % 3 == 0 ? first + 90 * i : i % 3 == 1 ? first + V + i : -1;
        scale[i] = 0.02f * (i + 1);
    }
    dt_test_fill(a, n * ld, 33, 1.0f);
    memcpy(r, a, sizeof(float) * n * ld);
    memcpy(in_place, a, sizeof(float) * n * ld);
    memcpy(narrow, a, sizeof(float) * n * ld);
    memset(lp, 0x5a, sizeof(uint16_t) * n * ld_lp);
    dt_xent_grad_lp(a, ld, n, V, width, first, tg, scale, 0.5f, t, lp, ld_lp);
    dt_xent_grad_lp(in_place, ld, n, V, width, first, tg, scale, 0.5f, t, (uint16_t *)in_place,
                    2 * (int64_t)ld);
    dt_xent_grad_lp(narrow, ld, n, V, width, first, tg, scale, 0.5f, t, (uint16_t *)narrow, ld_lp);
    dt_xent_grad(r, ld, n, V, width, first, tg, scale, 0.5f);
    int64_t bad = 0, bad_in_place = 0, bad_narrow = 0, touched = 0;
    for (int i = 0; i < n; i++) {
        dt_cast_f32_to_lp(t, want, r + (int64_t)i * ld, width);
        bad += memcmp(want, lp + (int64_t)i * ld_lp, sizeof(uint16_t) * width) != 0;
        bad_in_place += memcmp(want, in_place + (int64_t)i * ld, sizeof(uint16_t) * width) != 0;
        bad_narrow +=
            memcmp(want, (uint16_t *)narrow + (int64_t)i * ld_lp, sizeof(uint16_t) * width) != 0;
        for (int j = width; j < ld_lp; j++)
            touched += lp[(int64_t)i * ld_lp + j] != 0x5a5a;
    }
    DT_CHECK(bad == 0, "%s: %lld rows of dt_xent_grad_lp differ from grad + cast", dt_dtype_name(t),
             (long long)bad);
    DT_CHECK(touched == 0, "%s: dt_xent_grad_lp wrote %lld values past width", dt_dtype_name(t),
             (long long)touched);
    DT_CHECK(bad_in_place == 0,
             "%s: %lld rows of dt_xent_grad_lp written over their own fp32 "
             "rows differ from grad + cast",
             dt_dtype_name(t), (long long)bad_in_place);
    DT_CHECK(bad_narrow == 0,
             "%s: %lld rows of dt_xent_grad_lp written over the fp32 rows at "
             "a narrower stride differ from grad + cast",
             dt_dtype_name(t), (long long)bad_narrow);
    free(in_place);
    free(narrow);
    free(a);
    free(r);
    free(lp);
    free(want);
}

/* A row of `vocab` logits split into p windows of w = ceil(vocab / p) columns (the last ones
 * partly or wholly padding), each window in its own [n, ld] buffer as a tp rank holds it: stats
 * per window, the combination on every "rank", the gradient per window, against the unsplit
 * definition in double. */
static void check_windows(int n, int vocab, int p, float scale, bool ref) {
    const int w = (vocab + p - 1) / p, ld = w + 3;
    const float gs = 0.5f;
    float *full = malloc(sizeof(float) * n * vocab), *win = malloc(sizeof(float) * p * n * ld);
    float *st = malloc(sizeof(float) * 3 * p * n), *sc = malloc(sizeof(float) * n);
    float *loss = malloc(sizeof(float) * p * n);
    double *xd = malloc(sizeof(double) * vocab);
    int32_t *tg = malloc(sizeof(int32_t) * n);
    dt_test_fill(full, n * vocab, 5 + vocab + p, scale);
    for (int i = 0; i < n; i++)
        tg[i] = i % 6 == 5 ? -1 : i % 6 == 4 ? vocab + (i % (p * w - vocab + 1))
                                              : (int32_t)((i * 131u + 7) % (unsigned)vocab);
    for (int k = 0; k < p; k++) /* window k: global columns [k w, (k + 1) w), padding = 9 */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < ld; j++) {
                int gj = k * w + j;
                win[((int64_t)k * n + i) * ld + j] = j < w && gj < vocab ? full[i * vocab + gj]
                                                                         : 9.0f;
            }
    for (int k = 0; k < p; k++) {
        int nv = vocab - k * w < 0 ? 0 : vocab - k * w > w ? w : vocab - k * w;
        float *blk = st + 3 * k * n;
        (ref ? dt_xent_row_stats_exp_ref : dt_xent_row_stats_exp)(
            win + (int64_t)k * n * ld, ld, n, nv, k * w, tg, blk, blk + n, blk + 2 * n);
    }
    double worst_l = 0, worst_g = 0;
    bool pad_zero = true, beyond_ok = true, same_loss = true, bad_ok = true;
    for (int k = 0; k < p; k++) {
        int nv = vocab - k * w < 0 ? 0 : vocab - k * w > w ? w : vocab - k * w;
        float *x = win + (int64_t)k * n * ld;
        dt_xent_combine(st, p, k, n, tg, vocab, gs, loss + k * n, sc);
        (ref ? dt_xent_grad_ref : dt_xent_grad)(x, ld, n, nv, w, k * w, tg, sc, gs);
        same_loss = same_loss && memcmp(loss, loss + k * n, sizeof(float) * n) == 0;
        for (int i = 0; i < n; i++) {
            for (int j = nv; j < w; j++)
                pad_zero = pad_zero && x[i * ld + j] == 0.0f;
            for (int j = w; j < ld; j++)
                beyond_ok = beyond_ok && x[i * ld + j] == 9.0f;
            if (tg[i] < 0 || tg[i] >= vocab) {
                for (int j = 0; j < w; j++)
                    bad_ok = bad_ok && x[i * ld + j] == 0.0f;
                bad_ok = bad_ok && (tg[i] < 0 ? loss[k * n + i] == 0.0f : isnan(loss[k * n + i]));
                continue;
            }
            for (int j = 0; j < vocab; j++)
                xd[j] = full[i * vocab + j];
            double want = loss_d(xd, vocab, tg[i]), mx = -INFINITY, sum = 0;
            worst_l = fmax(worst_l, fabs(loss[k * n + i] - want) / fmax(fabs(want), 1.0));
            for (int j = 0; j < vocab; j++)
                mx = fmax(mx, xd[j]);
            for (int j = 0; j < vocab; j++)
                sum += exp(xd[j] - mx);
            for (int j = 0; j < nv; j++) {
                int gj = k * w + j;
                double g = (exp(xd[gj] - mx) / sum - (gj == tg[i])) * gs;
                worst_g = fmax(worst_g, fabs(x[i * ld + j] - g));
            }
        }
    }
    printf("xent windows vocab %d p %d scale %g%s: loss rel err %.2g, grad max abs err %.2g\n",
           vocab, p, scale, ref ? " (ref)" : "", worst_l, worst_g);
    DT_CHECK(worst_l < 2e-6, "split loss vs double: rel %.3g (vocab %d p %d)", worst_l, vocab, p);
    DT_CHECK(worst_g < 1e-6 * gs, "split grad vs double: abs %.3g (vocab %d p %d)", worst_g,
             vocab, p);
    DT_CHECK(pad_zero, "padding columns got a gradient (vocab %d p %d)", vocab, p);
    DT_CHECK(beyond_ok, "columns past the window were written (vocab %d p %d)", vocab, p);
    DT_CHECK(same_loss, "losses differ between windows' combinations (vocab %d p %d)", vocab, p);
    DT_CHECK(bad_ok, "ignored / out-of-range rows: loss or gradient wrong (vocab %d p %d)",
             vocab, p);
    free(full);
    free(win);
    free(st);
    free(sc);
    free(loss);
    free(xd);
    free(tg);
}

/* the loss-only path computes losses and leaves the logits as they were */
static void check_loss_only(void) {
    const int n = 4, V = 333;
    float *x = malloc(sizeof(float) * n * V), *x0 = malloc(sizeof(float) * n * V), l[4], lr[4];
    int32_t tg[4] = {0, 332, -5, 100};
    dt_test_fill(x, n * V, 5, 4.0f);
    memcpy(x0, x, sizeof(float) * n * V);
    xent_full(x, l, tg, n, V, V, 0.0f, false);
    DT_CHECK(memcmp(x, x0, sizeof(float) * n * V) == 0, "loss-only path modified the logits");
    xent_full(x0, lr, tg, n, V, V, 0.0f, true);
    for (int i = 0; i < n; i++)
        DT_CHECK_CLOSE(l[i], lr[i], 1e-6);
    DT_CHECK(l[2] == 0.0f, "ignored row loss %g", l[2]);
    free(x);
    free(x0);
}

/* d loss / d x_j = softmax_j - [j == t], against central differences in double */
static void check_fd(void) {
    const int V = 257;
    float *x = malloc(sizeof(float) * V), l;
    double *xd = malloc(sizeof(double) * V);
    int32_t tg = 42;
    dt_test_fill(x, V, 77, 3.0f);
    for (int j = 0; j < V; j++)
        xd[j] = x[j];
    xent_full(x, &l, &tg, 1, V, V, 1.0f, false);
    double worst = 0, eps = 1e-5;
    for (int j = 0; j < V; j++) {
        double x0 = xd[j];
        xd[j] = x0 + eps;
        double lp = loss_d(xd, V, tg);
        xd[j] = x0 - eps;
        double lm = loss_d(xd, V, tg);
        xd[j] = x0;
        worst = fmax(worst, fabs((lp - lm) / (2 * eps) - x[j]));
    }
    printf("xent fd: max abs err %.3g\n", worst);
    DT_CHECK(worst < 1e-6, "xent gradient vs finite differences: max abs err %.3g", worst);
    free(x);
    free(xd);
}

static void check_thread_independence(void) {
    const int n = 9, V = 1001;
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V), la[9], lb[9];
    int32_t tg[9];
    for (int i = 0; i < n; i++)
        tg[i] = i * 100;
    dt_test_fill(a, n * V, 3, 8.0f);
    memcpy(b, a, sizeof(float) * n * V);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    xent_full(a, la, tg, n, V, V, 0.5f, false);
    omp_set_num_threads(2);
    xent_full(b, lb, tg, n, V, V, 0.5f, false);
    omp_set_num_threads(nt);
    DT_CHECK(memcmp(a, b, sizeof(float) * n * V) == 0 && memcmp(la, lb, sizeof la) == 0,
             "xent differs between 1 and 2 threads");
    free(a);
    free(b);
}

static void perf(int n, int V) {
    float *x = malloc(sizeof(float) * n * V), *x0 = malloc(sizeof(float) * n * V);
    float *l = malloc(sizeof(float) * n);
    int32_t *tg = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        tg[i] = (i * 31) % V;
    dt_test_fill(x0, (int64_t)n * V, 1, 5.0f);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        memcpy(x, x0, sizeof(float) * n * V);
        double t0 = dt_test_seconds();
        xent_full(x, l, tg, n, V, V, 1.0f / n, false);
        best = fmin(best, dt_test_seconds() - t0);
    }
    printf("perf xent %s n=%d V=%d threads=%d: %.3f ms, %.2f ns/logit\n",
           dt_isa_name(dt_isa_pick(DT_ISA_AVX512)), n, V, omp_get_max_threads(), best * 1e3, best * 1e9 / ((double)n * V));
    free(x);
    free(x0);
    free(l);
    free(tg);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    for (int isa = 0; isa <= DT_ISA_AVX512; isa++) {
        if (!dt_isa_supported((dt_isa)isa)) {
            printf("SKIP xent variant %s: this CPU does not run it\n", dt_isa_name((dt_isa)isa));
            continue;
        }
        dt_isa_set_cap((dt_isa)isa);
        printf("xent variant %s\n", dt_isa_name(dt_isa_pick(DT_ISA_AVX512)));
        check_vs_ref(7, 1000, 0, 4.0f, 1.0f / 7);
        check_vs_ref(13, 50257, 3, 8.0f, 1.0f / 13); /* GPT-2 vocab, padded rows */
        check_vs_ref(5, 100, 4, 1e4f, 1.0f);         /* logits +-1e4: one-hot softmax, no NaN */
        check_vs_ref(6, 31, 0, 0.0f, 2.0f);          /* all-equal logits: uniform softmax */
        check_stats_vs_ref();
        check_grad_lp(DT_BF16);
        check_grad_lp(DT_F16);
        for (int ref = 0; ref < 2; ref++) {
            check_windows(12, 1000, 1, 4.0f, ref);
            check_windows(12, 37, 2, 4.0f, ref);   /* 19 + 18 valid, 1 padding column */
            check_windows(12, 50, 4, 4.0f, ref);   /* 13 x 3 + 11 valid */
            check_windows(12, 5, 4, 3.0f, ref);    /* w = 2: the last window is all padding */
            check_windows(12, 3001, 3, 1e4f, ref); /* huge logits: other windows' exps underflow */
        }
        check_loss_only();
        check_fd();
        check_thread_independence();
        if (dt_test.perf)
            perf(64, 50257);
    }
    dt_isa_set_cap(DT_ISA_COUNT - 1);
    return DT_TEST_END();
}
