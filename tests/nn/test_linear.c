/* Linear layer forward and backward against double precision, in fp32, bf16 and fp16 matmul
 * modes; backward accumulates, or overwrites the weight gradients with grad_set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/cast.h"
#include "nn/linear.h"

enum { N = 13, IN = 24, OUT = 17 };

static void reference(const float *x, const float *w, const float *b, const float *dy,
                      double *y, double *dx, double *dw, double *db, dt_dtype mm) {
    float xr[N * IN], wr[OUT * IN], dyr[N * OUT];
    memcpy(xr, x, sizeof xr), memcpy(wr, w, sizeof wr), memcpy(dyr, dy, sizeof dyr);
    if (mm == DT_BF16) { /* what bf16 operands keep */
        dt_round_bf16_inplace(xr, N * IN);
        dt_round_bf16_inplace(wr, OUT * IN);
        dt_round_bf16_inplace(dyr, N * OUT);
    }
    if (mm == DT_F16) { /* what fp16 operands keep (the scalar IEEE rounding) */
        for (int i = 0; i < N * IN; i++)
            xr[i] = dt_f16_to_f32(dt_f16_from_f32(xr[i]));
        for (int i = 0; i < OUT * IN; i++)
            wr[i] = dt_f16_to_f32(dt_f16_from_f32(wr[i]));
        for (int i = 0; i < N * OUT; i++)
            dyr[i] = dt_f16_to_f32(dt_f16_from_f32(dyr[i]));
    }
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OUT; o++) {
            double s = b[o];
            for (int k = 0; k < IN; k++)
                s += (double)xr[i * IN + k] * wr[o * IN + k];
            y[i * OUT + o] = s;
        }
    memset(dx, 0, sizeof(double) * N * IN);
    memset(dw, 0, sizeof(double) * OUT * IN);
    memset(db, 0, sizeof(double) * OUT);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OUT; o++) {
            db[o] += dy[i * OUT + o];
            for (int k = 0; k < IN; k++) {
                dx[i * IN + k] += (double)dyr[i * OUT + o] * wr[o * IN + k];
                dw[o * IN + k] += (double)dyr[i * OUT + o] * xr[i * IN + k];
            }
        }
}

static double max_err(const float *got, const double *want, int n, double base) {
    double e = 0;
    for (int i = 0; i < n; i++)
        e = fmax(e, fabs(got[i] - (want[i] + base)));
    return e;
}

static void check(dt_gemm *g, dt_dtype mm) {
    float x[N * IN], w[OUT * IN], b[OUT], dy[N * OUT], y[N * OUT], dx[N * IN], dw[OUT * IN],
        db[OUT];
    dt_bf16 w_lp[OUT * IN], x_lp[N * IN], dy_lp[N * OUT];
    dt_test_fill(x, N * IN, 1, 1.0f);
    dt_test_fill(w, OUT * IN, 2, 0.5f);
    dt_test_fill(b, OUT, 3, 0.5f);
    dt_test_fill(dy, N * OUT, 4, 1.0f);
    if (mm != DT_F32)
        dt_cast_f32_to_lp(mm, w_lp, w, OUT * IN);
    /* pre-filled gradients: backward must add to them */
    for (int i = 0; i < N * IN; i++)
        dx[i] = 1.0f;
    for (int i = 0; i < OUT * IN; i++)
        dw[i] = 1.0f;
    for (int i = 0; i < OUT; i++)
        db[i] = 1.0f;
    dt_linear l = {.in = IN, .out = OUT, .w = w, .b = b, .dw = dw, .db = db,
                   .w_lp = mm != DT_F32 ? w_lp : NULL};
    dt_nn_ctx ctx = {.gemm = g, .mm_type = mm};
    DT_CHECK_OK(dt_linear_forward(&ctx, &l, x, x_lp, N, y));
    DT_CHECK_OK(dt_linear_backward(&ctx, &l, x, x_lp, dy, dy_lp, N, dx));
    static double ry[N * OUT], rdx[N * IN], rdw[OUT * IN], rdb[OUT];
    reference(x, w, b, dy, ry, rdx, rdw, rdb, mm);
    const char *name = dt_dtype_name(mm);
    DT_CHECK(max_err(y, ry, N * OUT, 0) < 1e-5, "%s y err %g", name, max_err(y, ry, N * OUT, 0));
    DT_CHECK(max_err(dx, rdx, N * IN, 1) < 1e-5, "%s dx err %g", name,
             max_err(dx, rdx, N * IN, 1));
    DT_CHECK(max_err(dw, rdw, OUT * IN, 1) < 1e-5, "%s dw err %g", name,
             max_err(dw, rdw, OUT * IN, 1));
    DT_CHECK(max_err(db, rdb, OUT, 1) < 1e-5, "%s db err %g", name, max_err(db, rdb, OUT, 1));

    /* forward_lp on the rounded input: the bits of the forward on the fp32 one */
    if (mm != DT_F32) {
        float y_lp[N * OUT];
        DT_CHECK_OK(dt_linear_forward_lp(&ctx, &l, x_lp, N, y_lp));
        DT_CHECK(memcmp(y, y_lp, sizeof y) == 0, "%s forward_lp differs", name);
    } else {
        DT_CHECK(dt_linear_forward_lp(&ctx, &l, x_lp, N, y) == DT_ERR_ARG, "fp32 forward_lp");
    }
    /* bf16 output (bf16 mode only): the fp32 output rounded once, bias included */
    dt_bf16 y16[N * OUT], want16[N * OUT];
    if (mm == DT_BF16) {
        DT_CHECK_OK(dt_linear_forward_bf16_out(&ctx, &l, x_lp, N, y16));
        dt_cast_f32_to_bf16(want16, y, N * OUT);
        DT_CHECK(memcmp(y16, want16, sizeof y16) == 0, "bf16 forward_bf16_out differs from "
                 "the rounded fp32 output");
    } else {
        DT_CHECK(dt_linear_forward_bf16_out(&ctx, &l, x_lp, N, y16) == DT_ERR_ARG,
                 "%s forward_bf16_out accepted", name);
    }

    /* grad_set: dw and db overwritten (garbage before), the bits of accumulating onto zeros */
    float dw0[OUT * IN] = {0}, db0[OUT] = {0};
    dt_linear acc = l;
    acc.dw = dw0, acc.db = db0;
    DT_CHECK_OK(dt_linear_backward(&ctx, &acc, x, x_lp, dy, dy_lp, N, NULL));
    dt_test_fill(dw, OUT * IN, 5, 100.0f);
    dt_test_fill(db, OUT, 6, 100.0f);
    l.grad_set = true;
    DT_CHECK_OK(dt_linear_backward(&ctx, &l, x, x_lp, dy, dy_lp, N, NULL));
    DT_CHECK(memcmp(dw, dw0, sizeof dw) == 0, "%s grad_set dw differs", name);
    DT_CHECK(memcmp(db, db0, sizeof db) == 0, "%s grad_set db differs", name);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_gemm *g;
    DT_CHECK_OK(dt_gemm_init(&g));
    check(g, DT_F32);
    check(g, DT_BF16);
    check(g, DT_F16);
    dt_gemm_free(g);
    return DT_TEST_END();
}
