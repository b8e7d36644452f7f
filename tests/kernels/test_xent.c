/* Tests for kernels/xent.c: the fast kernel against its double _ref twin and a double
 * computation written here, the gradient against central finite differences of the loss,
 * ignored targets, huge logits (+-1e4), padding past V untouched, grad_scale = 0 leaving the
 * logits alone, and thread-count independence. --perf times a chunk of LM-head rows. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
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

static void check_vs_ref(int n, int V, int pad, float scale, float grad_scale) {
    const int64_t ld = V + pad;
    float *a = malloc(sizeof(float) * n * ld), *r = malloc(sizeof(float) * n * ld);
    float *la = malloc(sizeof(float) * n), *lr = malloc(sizeof(float) * n);
    int32_t *tg = malloc(sizeof(int32_t) * n);
    dt_test_fill(a, n * ld, 11 + V, scale);
    for (int i = 0; i < n; i++)
        tg[i] = i % 5 == 3 ? -1 : (int32_t)((i * 7919u + 13) % (unsigned)V);
    memcpy(r, a, sizeof(float) * n * ld);
    double worst_d = 0;
    for (int i = 0; i < n; i++) { /* loss against a double computation made here */
        if (tg[i] < 0)
            continue;
        double *xd = malloc(sizeof(double) * V);
        for (int j = 0; j < V; j++)
            xd[j] = a[i * ld + j];
        double want = loss_d(xd, V, tg[i]);
        free(xd);
        dt_xent_forward_backward(a + i * ld, la + i, tg + i, 1, V, ld, 0.0f);
        worst_d = fmax(worst_d, fabs(la[i] - want) / fmax(fabs(want), 1.0));
    }
    DT_CHECK(worst_d < 2e-6, "loss vs double: rel err %.3g (n%d V%d scale %g)", worst_d, n, V,
             scale);
    dt_xent_forward_backward(a, la, tg, n, V, ld, grad_scale);
    dt_xent_forward_backward_ref(r, lr, tg, n, V, ld, grad_scale);
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
            ignored_ok = ignored_ok && (tg[i] >= 0 || grad_scale == 0 || a[i * ld + j] == 0);
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
}

/* grad_scale = 0 computes losses only and leaves the logits as they were */
static void check_loss_only(void) {
    const int n = 4, V = 333;
    float *x = malloc(sizeof(float) * n * V), *x0 = malloc(sizeof(float) * n * V), l[4], lr[4];
    int32_t tg[4] = {0, 332, -5, 100};
    dt_test_fill(x, n * V, 5, 4.0f);
    memcpy(x0, x, sizeof(float) * n * V);
    dt_xent_forward_backward(x, l, tg, n, V, V, 0.0f);
    DT_CHECK(memcmp(x, x0, sizeof(float) * n * V) == 0, "grad_scale 0 modified the logits");
    dt_xent_forward_backward_ref(x0, lr, tg, n, V, V, 0.0f);
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
    dt_xent_forward_backward(x, &l, &tg, 1, V, V, 1.0f);
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
    dt_xent_forward_backward(a, la, tg, n, V, V, 0.5f);
    omp_set_num_threads(2);
    dt_xent_forward_backward(b, lb, tg, n, V, V, 0.5f);
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
        dt_xent_forward_backward(x, l, tg, n, V, V, 1.0f / n);
        best = fmin(best, dt_test_seconds() - t0);
    }
    printf("perf xent n=%d V=%d threads=%d: %.3f ms, %.2f ns/logit\n", n, V,
           omp_get_max_threads(), best * 1e3, best * 1e9 / ((double)n * V));
    free(x);
    free(x0);
    free(l);
    free(tg);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_vs_ref(7, 1000, 0, 4.0f, 1.0f / 7);
    check_vs_ref(13, 50257, 3, 8.0f, 1.0f / 13); /* GPT-2 vocab, padded rows */
    check_vs_ref(5, 100, 4, 1e4f, 1.0f);         /* logits +-1e4: one-hot softmax, no NaN */
    check_vs_ref(6, 31, 0, 0.0f, 2.0f);          /* all-equal logits: uniform softmax */
    check_loss_only();
    check_fd();
    check_thread_independence();
    if (dt_test.perf)
        perf(64, 50257);
    return DT_TEST_END();
}
