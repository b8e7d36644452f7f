/* Pointwise activations (see act.h): tanh-GELU and SwiGLU, forward and accumulating backward.
 *
 * libm's expf/tanhf do not vectorise without -ffast-math; dt_vexp (kernels_impl.h) does, so
 * these loops stay memory-bound. Blocks of BLOCK
 * elements are shared by OpenMP threads; each element's result is independent of the split.
 * Stateless, allocation-free; _ref twins use libm in double.
 */
#include "kernels/act.h"

#include "kernels/cast.h"
#include "kernels/kernels_impl.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define BLOCK 16384
#define PAR_MIN (2 * BLOCK)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* gelu_new(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = s (x + c x^3): the sigmoid form
 * needs one exp and is accurate in both tails. */
CLONES static void gelu_fwd_block(float *restrict y, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_S * (v + GELU_C * v * v * v);
        y[i] = v / (1.0f + dt_vexp(-2.0f * u));
    }
}

/* d/dx = sig + 2 x sig (1 - sig) s (1 + 3 c x^2), sig = sigmoid(2u); 1 - sig = e * sig with
 * e = exp(-2u) avoids cancelling when sig is near 1. */
CLONES static void gelu_bwd_block(float *restrict dx, const float *restrict x,
                                  const float *restrict dy, int64_t n, bool accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_S * (v + GELU_C * v * v * v);
        float e = dt_vexp(-2.0f * u);
        float sig = 1.0f / (1.0f + e);
        float d = sig + 2.0f * v * sig * (e * sig) * GELU_S * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] = accumulate ? dx[i] + dy[i] * d : dy[i] * d;
    }
}

CLONES static void swiglu_fwd_block(float *restrict y, const float *restrict gate,
                                    const float *restrict up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + dt_vexp(-g)) * up[i];
    }
}

/* dgate += dy * up * sig (1 + g (1 - sig)), dup += dy * g * sig; 1 - sig = e * sig. Two
 * loops, not a select in one: GCC does not vectorise a load made only when `accumulate` holds
 * (the selecting loop ran scalar, 20x slower). */
static inline void swiglu_grads(float g, float u, float dy, float *a, float *b) {
    float e = dt_vexp(-g);
    float sig = 1.0f / (1.0f + e);
    *a = dy * u * sig * (1.0f + g * (e * sig));
    *b = dy * g * sig;
}

CLONES static void swiglu_bwd_block(float *restrict dgate, float *restrict dup,
                                    const float *restrict gate, const float *restrict up,
                                    const float *restrict dy, int64_t n, bool accumulate) {
    float a, b;
    if (accumulate)
        for (int64_t i = 0; i < n; i++) {
            swiglu_grads(gate[i], up[i], dy[i], &a, &b);
            dgate[i] += a;
            dup[i] += b;
        }
    else
        for (int64_t i = 0; i < n; i++) {
            swiglu_grads(gate[i], up[i], dy[i], &a, &b);
            dgate[i] = a;
            dup[i] = b;
        }
}

void dt_gelu_forward(float *y, const float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        gelu_fwd_block(y + b * BLOCK, x + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

static void gelu_backward(float *dx, const float *x, const float *dy, int64_t n, bool acc) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        gelu_bwd_block(dx + o, x + o, dy + o, min64(BLOCK, n - o), acc);
    }
}

/* The 16-bit forwards: each block's fp32 result lives on the stack just long enough to be
 * rounded (dt_cast_f32_to_lp, so the bits of the fp32 forward then the cast), and the fp32
 * array is never written. */
void dt_gelu_forward_lp(dt_dtype t, uint16_t *y, const float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        float tmp[BLOCK];
        int64_t o = b * BLOCK, len = min64(BLOCK, n - o);
        gelu_fwd_block(tmp, x + o, len);
        dt_cast_f32_to_lp(t, y + o, tmp, len);
    }
}

void dt_swiglu_forward_lp(dt_dtype t, uint16_t *y, const float *gate, const float *up,
                          int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        float tmp[BLOCK];
        int64_t o = b * BLOCK, len = min64(BLOCK, n - o);
        swiglu_fwd_block(tmp, gate + o, up + o, len);
        dt_cast_f32_to_lp(t, y + o, tmp, len);
    }
}

void dt_gelu_backward(float *dx, const float *x, const float *dy, int64_t n) {
    gelu_backward(dx, x, dy, n, true);
}

void dt_gelu_backward_set(float *dx, const float *x, const float *dy, int64_t n) {
    gelu_backward(dx, x, dy, n, false);
}

void dt_swiglu_forward(float *y, const float *gate, const float *up, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        swiglu_fwd_block(y + o, gate + o, up + o, min64(BLOCK, n - o));
    }
}

static void swiglu_backward(float *dgate, float *dup, const float *gate, const float *up,
                            const float *dy, int64_t n, bool acc) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        swiglu_bwd_block(dgate + o, dup + o, gate + o, up + o, dy + o, min64(BLOCK, n - o),
                         acc);
    }
}

void dt_swiglu_backward(float *dgate, float *dup, const float *gate, const float *up,
                        const float *dy, int64_t n) {
    swiglu_backward(dgate, dup, gate, up, dy, n, true);
}

void dt_swiglu_backward_set(float *dgate, float *dup, const float *gate, const float *up,
                            const float *dy, int64_t n) {
    swiglu_backward(dgate, dup, gate, up, dy, n, false);
}

/* ---- references: the textbook formulas in double with libm ---- */

void dt_gelu_forward_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (float)(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
}

void dt_gelu_backward_ref(float *dx, const float *x, const float *dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], s = sqrt(2 / M_PI);
        double t = tanh(s * (v + 0.044715 * v * v * v));
        double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * s * (1 + 3 * 0.044715 * v * v);
        dx[i] += (float)(dy[i] * d);
    }
}

void dt_swiglu_forward_ref(float *y, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i];
        y[i] = (float)(g / (1 + exp(-g)) * up[i]);
    }
}

void dt_swiglu_backward_ref(float *dgate, float *dup, const float *gate, const float *up,
                            const float *dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i], sig = 1 / (1 + exp(-g));
        dgate[i] += (float)(dy[i] * up[i] * sig * (1 + g * (1 - sig)));
        dup[i] += (float)(dy[i] * g * sig);
    }
}
