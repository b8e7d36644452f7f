/* Pointwise activations (see act.h): tanh-GELU and SwiGLU, forward and accumulating backward.
 *
 * libm's expf/tanhf do not vectorise without -ffast-math, which would make these loops
 * compute-bound; exp_poly below is a branch-free exp (Cody-Waite reduction + degree-7
 * polynomial, ~2 ulp) that GCC vectorises, so the loops stay memory-bound. Blocks of BLOCK
 * elements are shared by OpenMP threads; each element's result is independent of the split.
 * Stateless, allocation-free; _ref twins use libm in double.
 */
#include "kernels/act.h"

#include <math.h>
#include <string.h>

#define BLOCK 16384
#define PAR_MIN (2 * BLOCK)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* c ? a : b as bit masks. A float ternary stays a branch (it is not a MIN/MAX under IEEE
 * rules), GCC then threads the code after it into both arms and, as fp ops may trap, refuses
 * to vectorise the loop. */
static inline float select_f(int c, float a, float b) {
    int32_t ia, ib, m = -(int32_t)c;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    ia = (ia & m) | (ib & ~m);
    memcpy(&a, &ia, 4);
    return a;
}

/* e^x for x clamped to [-87.3, 88.3] (results stay normal floats); NaN stays NaN. */
static inline float exp_poly(float x) {
    x = select_f(x < -87.3f, -87.3f, x);
    x = select_f(x > 88.3f, 88.3f, x);
    /* n = round(x / ln2) by the 1.5*2^23 trick: the integer lands in the mantissa bits */
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693145751953125f; /* ln2 split hi/lo (Cephes): r exact to ~1 ulp */
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t ti, ni; /* unsigned: NaN inputs give garbage bits here, never overflow UB */
    memcpy(&ti, &t, 4);
    ni = (ti - 0x4b400000u + 127u) << 23; /* biased exponent of 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &ni, 4);
    return p * scale;
}

/* gelu_new(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = s (x + c x^3): the sigmoid form
 * needs one exp and is accurate in both tails. */
CLONES static void gelu_fwd_block(float *restrict y, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_S * (v + GELU_C * v * v * v);
        y[i] = v / (1.0f + exp_poly(-2.0f * u));
    }
}

/* d/dx = sig + 2 x sig (1 - sig) s (1 + 3 c x^2), sig = sigmoid(2u); 1 - sig = e * sig with
 * e = exp(-2u) avoids cancelling when sig is near 1. */
CLONES static void gelu_bwd_block(float *restrict dx, const float *restrict x,
                                  const float *restrict dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_S * (v + GELU_C * v * v * v);
        float e = exp_poly(-2.0f * u);
        float sig = 1.0f / (1.0f + e);
        float d = sig + 2.0f * v * sig * (e * sig) * GELU_S * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] += dy[i] * d;
    }
}

CLONES static void swiglu_fwd_block(float *restrict y, const float *restrict gate,
                                    const float *restrict up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + exp_poly(-g)) * up[i];
    }
}

/* dgate += dy * up * sig (1 + g (1 - sig)), dup += dy * g * sig; 1 - sig = e * sig. */
CLONES static void swiglu_bwd_block(float *restrict dgate, float *restrict dup,
                                    const float *restrict gate, const float *restrict up,
                                    const float *restrict dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float e = exp_poly(-g);
        float sig = 1.0f / (1.0f + e);
        dgate[i] += dy[i] * up[i] * sig * (1.0f + g * (e * sig));
        dup[i] += dy[i] * g * sig;
    }
}

void dt_gelu_forward(float *y, const float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        gelu_fwd_block(y + b * BLOCK, x + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_gelu_backward(float *dx, const float *x, const float *dy, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        gelu_bwd_block(dx + o, x + o, dy + o, min64(BLOCK, n - o));
    }
}

void dt_swiglu_forward(float *y, const float *gate, const float *up, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        swiglu_fwd_block(y + o, gate + o, up + o, min64(BLOCK, n - o));
    }
}

void dt_swiglu_backward(float *dgate, float *dup, const float *gate, const float *up,
                        const float *dy, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK;
        swiglu_bwd_block(dgate + o, dup + o, gate + o, up + o, dy + o, min64(BLOCK, n - o));
    }
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
