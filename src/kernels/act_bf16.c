/* The activations on bf16 storage (see act.h): tanh-GELU and SwiGLU reading the bf16 matmul
 * outputs that bf16 mode keeps (autocast's storage), math in fp32 on their exact values.
 *
 * Variants picked at run time (kernels/isa.h): the portable loop (dt_vexp, which GCC
 * vectorises), the same loop compiled for AVX2+FMA, and AVX-512 intrinsics whose exp scales
 * by vscalefps and whose reciprocals are vrcp14ps plus one Newton step (about 1 ulp); the
 * forwards also have an AVX512_BF16 variant that rounds by vcvtneps2bf16 (nearest even, as
 * the others, except that results below bf16's normal range, 1.2e-38, become zero). Each
 * element's result is independent of the thread split, so the thread count changes no bit.
 * Blocks of BLOCK elements are shared by OpenMP threads. Stateless, allocation-free; _ref
 * twins are plain C in double.
 */
#include "kernels/act.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/isa.h"
#include "kernels/kernels_impl.h"

#define BLOCK 16384
#define PAR_MIN (2 * BLOCK)
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
/* (no prefer-vector-width: the intrinsics fix the width, and clang rejects that key) */
#define AVX512_FEATURES "avx512f,avx512bw,avx512dq,avx512vl,fma"
#define TARGET_AVX512 __attribute__((target(AVX512_FEATURES)))
#define TARGET_AVX512BF16 __attribute__((target(AVX512_FEATURES ",avx512bf16")))

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static inline __attribute__((always_inline)) float widen(dt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* round to nearest even, NaN kept quiet: dt_cast_f32_to_bf16's bits, branch-free */
static inline __attribute__((always_inline)) dt_bf16 narrow(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (dt_bf16)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* ---- the portable loops (also compiled for AVX2): the formulas of act.c ---- */

/* gelu_new(x) = x * sigmoid(2u), u = s (x + c x^3); d/dx = sig + 2 x sig (1 - sig) s (1 + 3 c
 * x^2), with 1 - sig = e sig, e = exp(-2u) (act.c) */
#define GELU_FWD_BODY                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                          \
        float v = widen(x[i]);                                                                 \
        float u = GELU_S * (v + GELU_C * v * v * v);                                           \
        y[i] = narrow(v / (1.0f + dt_vexp(-2.0f * u)));                                        \
    }
#define GELU_BWD_BODY                                                                          \
    for (int64_t i = 0; i < n; i++) {                                                          \
        float v = widen(x[i]);                                                                 \
        float u = GELU_S * (v + GELU_C * v * v * v);                                           \
        float e = dt_vexp(-2.0f * u);                                                          \
        float sig = 1.0f / (1.0f + e);                                                         \
        dx[i] = dy[i] * (sig + 2.0f * v * sig * (e * sig) * GELU_S *                           \
                                   (1.0f + 3.0f * GELU_C * v * v));                            \
    }
#define SWIGLU_FWD_BODY                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                          \
        float g = widen(gate[i]);                                                              \
        y[i] = narrow(g / (1.0f + dt_vexp(-g)) * widen(up[i]));                                \
    }
#define SWIGLU_BWD_BODY                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                          \
        float g = widen(gate[i]), e = dt_vexp(-g);                                             \
        float sig = 1.0f / (1.0f + e);                                                         \
        dgate[i] = dy[i] * widen(up[i]) * sig * (1.0f + g * (e * sig));                        \
        dup[i] = dy[i] * g * sig;                                                              \
    }

#define GELU_FWD_ARGS dt_bf16 *restrict y, const dt_bf16 *restrict x, int64_t n
#define GELU_BWD_ARGS float *restrict dx, const dt_bf16 *restrict x, const float *restrict dy, int64_t n
#define SWIGLU_FWD_ARGS                                                                        \
    dt_bf16 *restrict y, const dt_bf16 *restrict gate, const dt_bf16 *restrict up, int64_t n
#define SWIGLU_BWD_ARGS                                                                        \
    float *restrict dgate, float *restrict dup, const dt_bf16 *restrict gate,                  \
        const dt_bf16 *restrict up, const float *restrict dy, int64_t n

static void gelu_fwd_base(GELU_FWD_ARGS) { GELU_FWD_BODY }
static void gelu_bwd_base(GELU_BWD_ARGS) { GELU_BWD_BODY }
static void swiglu_fwd_base(SWIGLU_FWD_ARGS) { SWIGLU_FWD_BODY }
static void swiglu_bwd_base(SWIGLU_BWD_ARGS) { SWIGLU_BWD_BODY }
TARGET_AVX2 static void gelu_fwd_avx2(GELU_FWD_ARGS) { GELU_FWD_BODY }
TARGET_AVX2 static void gelu_bwd_avx2(GELU_BWD_ARGS) { GELU_BWD_BODY }
TARGET_AVX2 static void swiglu_fwd_avx2(SWIGLU_FWD_ARGS) { SWIGLU_FWD_BODY }
TARGET_AVX2 static void swiglu_bwd_avx2(SWIGLU_BWD_ARGS) { SWIGLU_BWD_BODY }

/* ---- AVX-512 ---- */

/* the first lanes of m: bf16 -> fp32 (exact) */
TARGET_AVX512 static inline __m512 load_bf16_n(const dt_bf16 *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 fp32 -> 16 bf16, round to nearest even, NaN quiet (narrow()'s bits) */
TARGET_AVX512 static inline __m256i to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* e^x for x <= 88.3 (larger x clamped there, as dt_vexp; below -87.3 vscalefps goes on into
 * the subnormals and to 0): x = n ln2 + r, |r| <= ln2/2, Cephes' expf polynomial for e^r
 * (written as one Horner chain), and 2^n applied by vscalefps. */
TARGET_AVX512 static inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 1 / d for d in [1, inf): vrcp14ps and one Newton step */
TARGET_AVX512 static inline __m512 recip512(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* gelu on 16 lanes: y = v sig, and (bwd) the derivative; -2u = v (-2s - 2sc v^2) */
TARGET_AVX512 static inline __m512 gelu512(__m512 v, __m512 *dgelu) {
    __m512 v2 = _mm512_mul_ps(v, v);
    __m512 k2 = _mm512_fmadd_ps(_mm512_set1_ps(-2.0f * GELU_S * GELU_C), v2,
                                _mm512_set1_ps(-2.0f * GELU_S));
    __m512 e = exp512(_mm512_mul_ps(v, k2));
    __m512 sig = recip512(_mm512_add_ps(e, _mm512_set1_ps(1.0f)));
    if (dgelu) {
        __m512 k = _mm512_fmadd_ps(_mm512_set1_ps(3.0f * GELU_C), v2, _mm512_set1_ps(1.0f));
        __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f * GELU_S), v),
                                 _mm512_mul_ps(sig, _mm512_mul_ps(e, sig)));
        *dgelu = _mm512_fmadd_ps(t, k, sig);
    }
    return _mm512_mul_ps(v, sig);
}

/* the forwards' loops, for a rounding `round` (to_bf16, or vcvtneps2bf16) */
#define GELU_FWD_512(round)                                                                    \
    for (int64_t i = 0; i < n; i += 16) {                                                      \
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);                 \
        __m512 y16 = gelu512(load_bf16_n(x + i, m), NULL);                                     \
        _mm256_mask_storeu_epi16(y + i, m, round(y16));                                        \
    }
#define SWIGLU_FWD_512(round)                                                                  \
    for (int64_t i = 0; i < n; i += 16) {                                                      \
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);                 \
        __m512 g = load_bf16_n(gate + i, m), e;                                                \
        __m512 s = sigmoid512(g, &e);                                                          \
        __m512 y16 = _mm512_mul_ps(_mm512_mul_ps(g, s), load_bf16_n(up + i, m));               \
        _mm256_mask_storeu_epi16(y + i, m, round(y16));                                        \
    }

TARGET_AVX512BF16 static inline __m256i cvtne_bf16(__m512 v) {
    return (__m256i)_mm512_cvtneps_pbh(v);
}

TARGET_AVX512 static void gelu_fwd_avx512(GELU_FWD_ARGS) { GELU_FWD_512(to_bf16) }
TARGET_AVX512BF16 static void gelu_fwd_avx512bf16(GELU_FWD_ARGS) { GELU_FWD_512(cvtne_bf16) }

TARGET_AVX512 static void gelu_bwd_avx512(GELU_BWD_ARGS) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 d;
        gelu512(load_bf16_n(x + i, m), &d);
        _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), d));
    }
}

TARGET_AVX512 static inline __m512 sigmoid512(__m512 g, __m512 *e) {
    *e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return recip512(_mm512_add_ps(*e, _mm512_set1_ps(1.0f)));
}

TARGET_AVX512 static void swiglu_fwd_avx512(SWIGLU_FWD_ARGS) { SWIGLU_FWD_512(to_bf16) }
TARGET_AVX512BF16 static void swiglu_fwd_avx512bf16(SWIGLU_FWD_ARGS) {
    SWIGLU_FWD_512(cvtne_bf16)
}

TARGET_AVX512 static void swiglu_bwd_avx512(SWIGLU_BWD_ARGS) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = load_bf16_n(gate + i, m), u = load_bf16_n(up + i, m), e;
        __m512 dy16 = _mm512_maskz_loadu_ps(m, dy + i);
        __m512 s = sigmoid512(g, &e);
        __m512 gs = _mm512_mul_ps(g, s);
        /* dgate = dy up sig (1 + g e sig), dup = dy g sig */
        __m512 k = _mm512_fmadd_ps(gs, e, _mm512_set1_ps(1.0f));
        __m512 dg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dy16, u), s), k);
        _mm512_mask_storeu_ps(dgate + i, m, dg);
        _mm512_mask_storeu_ps(dup + i, m, _mm512_mul_ps(dy16, gs));
    }
}

/* ---- dispatch ---- */

typedef void (*gelu_fwd_fn)(GELU_FWD_ARGS);
typedef void (*gelu_bwd_fn)(GELU_BWD_ARGS);
typedef void (*swiglu_fwd_fn)(SWIGLU_FWD_ARGS);
typedef void (*swiglu_bwd_fn)(SWIGLU_BWD_ARGS);
static const gelu_fwd_fn GELU_FWD[] = {gelu_fwd_base, gelu_fwd_avx2, gelu_fwd_avx512,
                                       gelu_fwd_avx512bf16};
static const gelu_bwd_fn GELU_BWD[] = {gelu_bwd_base, gelu_bwd_avx2, gelu_bwd_avx512};
static const swiglu_fwd_fn SWIGLU_FWD[] = {swiglu_fwd_base, swiglu_fwd_avx2, swiglu_fwd_avx512,
                                           swiglu_fwd_avx512bf16};
static const swiglu_bwd_fn SWIGLU_BWD[] = {swiglu_bwd_base, swiglu_bwd_avx2, swiglu_bwd_avx512};

#define FOR_BLOCKS(call)                                                                       \
    do {                                                                                       \
        int64_t nb_ = (n + BLOCK - 1) / BLOCK;                                                 \
        _Pragma("omp parallel for schedule(static) if (n >= PAR_MIN)")                         \
        for (int64_t b_ = 0; b_ < nb_; b_++) {                                                 \
            int64_t o = b_ * BLOCK, len = min64(BLOCK, n - o);                                 \
            call;                                                                              \
        }                                                                                      \
    } while (0)

void dt_gelu_forward_bf16(dt_bf16 *y, const dt_bf16 *x, int64_t n) {
    gelu_fwd_fn f = GELU_FWD[dt_isa_pick(DT_ISA_AVX512BF16)];
    FOR_BLOCKS(f(y + o, x + o, len));
}

void dt_gelu_backward_bf16_set(float *dx, const dt_bf16 *x, const float *dy, int64_t n) {
    gelu_bwd_fn f = GELU_BWD[dt_isa_pick(DT_ISA_AVX512)];
    FOR_BLOCKS(f(dx + o, x + o, dy + o, len));
}

void dt_swiglu_forward_bf16(dt_bf16 *y, const dt_bf16 *gate, const dt_bf16 *up, int64_t n) {
    swiglu_fwd_fn f = SWIGLU_FWD[dt_isa_pick(DT_ISA_AVX512BF16)];
    FOR_BLOCKS(f(y + o, gate + o, up + o, len));
}

void dt_swiglu_backward_bf16_set(float *dgate, float *dup, const dt_bf16 *gate,
                                 const dt_bf16 *up, const float *dy, int64_t n) {
    swiglu_bwd_fn f = SWIGLU_BWD[dt_isa_pick(DT_ISA_AVX512)];
    FOR_BLOCKS(f(dgate + o, dup + o, gate + o, up + o, dy + o, len));
}

/* ---- references: the textbook formulas in double, rounded once to the output type ---- */

static dt_bf16 narrow_d(double v) { return dt_bf16_from_f32((float)v); }

void dt_gelu_forward_bf16_ref(dt_bf16 *y, const dt_bf16 *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = widen(x[i]);
        y[i] = narrow_d(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
}

void dt_gelu_backward_bf16_set_ref(float *dx, const dt_bf16 *x, const float *dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = widen(x[i]), s = sqrt(2 / M_PI);
        double t = tanh(s * (v + 0.044715 * v * v * v));
        double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * s * (1 + 3 * 0.044715 * v * v);
        dx[i] = (float)(dy[i] * d);
    }
}

void dt_swiglu_forward_bf16_ref(dt_bf16 *y, const dt_bf16 *gate, const dt_bf16 *up,
                                int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = widen(gate[i]);
        y[i] = narrow_d(g / (1 + exp(-g)) * widen(up[i]));
    }
}

void dt_swiglu_backward_bf16_set_ref(float *dgate, float *dup, const dt_bf16 *gate,
                                     const dt_bf16 *up, const float *dy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = widen(gate[i]), sig = 1 / (1 + exp(-g));
        dgate[i] = (float)(dy[i] * widen(up[i]) * sig * (1 + g * (1 - sig)));
        dup[i] = (float)(dy[i] * g * sig);
    }
}
