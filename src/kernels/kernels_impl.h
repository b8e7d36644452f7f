/* Private to kernels/: the vectorisable exp shared by the activation, attention and
 * cross-entropy loops. Never included from outside src/kernels/.
 *
 * libm's expf does not vectorise without -ffast-math, so these loops would be compute-bound
 * on it. dt_vexp is branch-free (Cody-Waite reduction + degree-7 polynomial, ~2 ulp) and GCC
 * vectorises loops that call it. Clamps and selects work on bit patterns: under GCC's default
 * -ftrapping-math a float compare-and-branch or float->int conversion stops vectorisation.
 */
#ifndef DT_KERNELS_IMPL_H
#define DT_KERNELS_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"

/* c ? a : b as bit masks (a float ternary stays a branch and blocks vectorisation) */
static inline __attribute__((always_inline)) float dt_select_f(int c, float a, float b) {
    int32_t ia, ib, m = -(int32_t)c;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    ia = (ia & m) | (ib & ~m);
    memcpy(&a, &ia, 4);
    return a;
}

/* e^x for x clamped to [-87.3, 88.3] (results stay normal floats: e^-87.3 ~ 1.2e-38, so
 * callers that need exact zeros, like masked attention scores, set them themselves). */
static inline __attribute__((always_inline)) float dt_vexp(float x) {
    x = dt_select_f(x < -87.3f, -87.3f, x);
    x = dt_select_f(x > 88.3f, 88.3f, x);
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

/* The first key (of the call's keys) query (b, t) sees: past the start of its document
 * (attention.h, doc_start); 0 without documents. */
static inline int dt_attn_doc_lo(const dt_attn_shape *s, int b, int t) {
    if (!s->doc_start)
        return 0;
    const int lo = s->doc_start[(int64_t)b * s->T + t] - s->k_pos0;
    return lo > 0 ? lo : 0;
}

/* Attention's bf16 mode on AVX512_BF16 (attn_bf16.c; hs % 16 == 0, hs <= 256): the kernels
 * of attention.h with every product on vdpbf16ps. io16: q, k, v are bf16 (uint16) arrays at
 * the same strides, else fp32; y16: y likewise. They allocate one scratch block per call (a few tiles of the
 * whole sequence per thread) and return false, having done nothing, when it cannot be had. */
bool dt_attn_bf16_forward(const dt_attn_shape *s, void *y, float *lse, const void *q,
                          const void *k, const void *v, bool io16, bool y16);
bool dt_attn_bf16_backward(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                           const float *dy, const void *y, const float *lse, const void *q,
                           const void *k, const void *v, bool io16, bool y16, bool set);

#endif
