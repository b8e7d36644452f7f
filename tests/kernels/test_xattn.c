/* Tests for kernels/xattn.h: the reference backward against central finite differences of
 * sum(w * forward) in double; the run-time variant (forward and backward) against the _ref
 * twins over shapes whose rows start and end inside groups, with keys cut short (n < kv_rows),
 * one key, strides wider than the heads (their other columns untouched), and a group the call
 * holds no row of (its key gradients zero). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/xattn.h"

typedef struct bufs {
    float *q, *k, *v, *o, *lse, *g, *dq, *dk, *dv, *scratch;
    int64_t nq, nkv;
} bufs;

static bufs make(const dt_xattn_shape *s, uint64_t seed) {
    bufs b = {.nq = s->rows * s->q_stride,
              .nkv = (int64_t)s->groups * s->kv_rows * s->kv_stride};
    b.q = malloc(sizeof(float) * b.nq), b.o = malloc(sizeof(float) * b.nq);
    b.g = malloc(sizeof(float) * b.nq), b.dq = malloc(sizeof(float) * b.nq);
    b.k = malloc(sizeof(float) * b.nkv), b.v = malloc(sizeof(float) * b.nkv);
    b.dk = malloc(sizeof(float) * b.nkv), b.dv = malloc(sizeof(float) * b.nkv);
    b.lse = malloc(sizeof(float) * s->rows * s->heads);
    b.scratch = malloc(sizeof(float) * dt_xattn_scratch_count(s));
    dt_test_fill(b.q, b.nq, seed, 1.0f);
    dt_test_fill(b.k, b.nkv, seed + 1, 1.0f);
    dt_test_fill(b.v, b.nkv, seed + 2, 1.0f);
    dt_test_fill(b.g, b.nq, seed + 3, 1.0f);
    /* sentinels in the outputs: the columns past the heads must keep them */
    for (int64_t i = 0; i < b.nq; i++)
        b.o[i] = b.dq[i] = 7.0f;
    for (int64_t i = 0; i < b.nkv; i++)
        b.dk[i] = b.dv[i] = 7.0f;
    return b;
}

static void release(bufs *b) {
    float *p[] = {b->q, b->k, b->v, b->o, b->lse, b->g, b->dq, b->dk, b->dv, b->scratch};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

static double loss(const dt_xattn_shape *s, const bufs *b) {
    float *o = malloc(sizeof(float) * b->nq), *lse = malloc(sizeof(float) * s->rows * s->heads);
    memcpy(o, b->o, sizeof(float) * b->nq);
    dt_xattn_forward_ref(s, b->q, b->k, b->v, o, lse);
    double l = 0;
    for (int64_t i = 0; i < s->rows; i++)
        for (int c = 0; c < s->heads * s->hs; c++)
            l += (double)b->g[i * s->q_stride + c] * o[i * s->q_stride + c];
    free(o);
    free(lse);
    return l;
}

/* the reference backward's dq, dk, dv at a few entries against (L(x + e) - L(x - e)) / 2e */
static void check_finite_differences(void) {
    int32_t n[2] = {3, 2};
    dt_xattn_shape s = {.rows = 5, .row0 = 1, .group_rows = 3, .groups = 2, .heads = 2,
                        .hs = 4, .q_stride = 8, .kv_stride = 8, .kv_rows = 3, .n = n,
                        .scale = 0.5f};
    bufs b = make(&s, 5);
    dt_xattn_forward_ref(&s, b.q, b.k, b.v, b.o, b.lse);
    dt_xattn_backward_ref(&s, b.g, b.q, b.k, b.v, b.o, b.lse, b.dq, b.dk, b.dv);
    struct {
        float *x, *dx;
        int64_t n;
        const char *what;
    } t[3] = {{b.q, b.dq, b.nq, "dq"}, {b.k, b.dk, b.nkv, "dk"}, {b.v, b.dv, b.nkv, "dv"}};
    double worst = 0;
    for (int w = 0; w < 3; w++)
        for (int64_t i = 0; i < t[w].n; i += 3) {
            float keep = t[w].x[i], e = 1e-2f;
            t[w].x[i] = keep + e;
            double up = loss(&s, &b);
            t[w].x[i] = keep - e;
            double down = loss(&s, &b);
            t[w].x[i] = keep;
            double fd = (up - down) / (2 * e), err = fabs(fd - t[w].dx[i]);
            worst = fmax(worst, err);
            DT_CHECK(err < 2e-3, "%s[%lld]: backward %.6f, finite differences %.6f", t[w].what,
                     (long long)i, (double)t[w].dx[i], fd);
        }
    /* key 2 of group 1 is past its n: no gradient */
    DT_CHECK(b.dk[(3 + 2) * 8] == 0 && b.dv[(3 + 2) * 8] == 0, "a key past n has a gradient");
    printf("xattn ref backward vs finite differences: worst %.2g\n", worst);
    release(&b);
}

static void check_variant(const dt_xattn_shape *s, const char *what) {
    bufs b = make(s, 11), r = make(s, 11);
    dt_xattn_forward(s, b.q, b.k, b.v, b.o, b.lse, b.scratch);
    dt_xattn_forward_ref(s, r.q, r.k, r.v, r.o, r.lse);
    dt_xattn_backward(s, b.g, b.q, b.k, b.v, b.o, b.lse, b.dq, b.dk, b.dv, b.scratch);
    dt_xattn_backward_ref(s, r.g, r.q, r.k, r.v, r.o, r.lse, r.dq, r.dk, r.dv);
    const struct {
        const float *got, *want;
        int64_t n;
        const char *name;
    } c[] = {{b.o, r.o, b.nq, "o"},     {b.lse, r.lse, s->rows * s->heads, "lse"},
             {b.dq, r.dq, b.nq, "dq"},  {b.dk, r.dk, b.nkv, "dk"},
             {b.dv, r.dv, b.nkv, "dv"}};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        double e = dt_test_max_rel(c[i].got, c[i].want, c[i].n, 1e-3);
        DT_CHECK(e < 1e-4, "%s: %s max rel error %.3g against _ref", what, c[i].name, e);
    }
    int untouched = 1;
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t col = (int64_t)s->heads * s->hs; col < s->q_stride; col++)
            untouched &= b.o[i * s->q_stride + col] == 7.0f && b.dq[i * s->q_stride + col] == 7.0f;
    DT_CHECK(untouched, "%s: columns past the heads were written", what);
    release(&b);
    release(&r);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_finite_differences();
    int32_t n4[4] = {32, 17, 1, 32}, n3[3] = {5, 5, 3};
    /* rows 40 .. 40 + 150 of 4 groups of 64: group 0 partly, 1 and 2 whole, 3 not at all
     * (rows past 190 belong to group 2's end) */
    dt_xattn_shape a = {.rows = 150, .row0 = 40, .group_rows = 64, .groups = 4, .heads = 4,
                        .hs = 32, .q_stride = 128, .kv_stride = 128, .kv_rows = 32, .n = n4,
                        .scale = 1.0f / sqrtf(32.0f)};
    check_variant(&a, "4 groups, partial rows, n 32/17/1/32");
    /* odd widths and strides wider than the heads */
    dt_xattn_shape b = {.rows = 30, .row0 = 0, .group_rows = 10, .groups = 3, .heads = 3,
                        .hs = 6, .q_stride = 21, .kv_stride = 19, .kv_rows = 7, .n = n3,
                        .scale = 0.4f};
    check_variant(&b, "odd widths, wide strides");
    return DT_TEST_END();
}
