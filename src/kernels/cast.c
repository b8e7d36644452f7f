/* Array casts and reductions (see cast.h).
 *
 * Work is cut into fixed blocks of BLOCK elements that OpenMP threads share statically; the
 * block bodies are compiled for several ISAs and picked at load time (target_clones), so the
 * library runs on any x86-64 yet uses AVX2/AVX-512 where present. dt_sumsq sums each block in
 * a fixed lane order and adds block sums in index order: its value does not depend on the
 * thread count. The fp16 casts are explicit variants (see dt_cast_f16_variants) picked at
 * run time the same way. Stateless and allocation-free.
 */
#include "kernels/cast.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/bf16_vec.h"

#define BLOCK 16384
#define PAR_MIN (4 * BLOCK) /* below this a parallel region costs more than it saves */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define SUMSQ_LANES 8
#define SUMSQ_GROUP 256 /* block sums kept on the stack per parallel pass */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Branch-free version of dt_bf16_from_f32 (round to nearest even, NaN kept quiet) so the
 * compiler can vectorise the select. */
static inline uint16_t bf16_bits(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* ---- fp32 -> bf16: explicit variants (the compiler's vectorisation of bf16_bits ran at half
 * the speed of these) */

static void bf16_from_ref(dt_bf16 *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt_bf16_from_f32(src[i]);
}

__attribute__((target("avx512f"))) static void bf16_from_avx512(dt_bf16 *restrict dst,
                                                                const float *restrict src,
                                                                int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), dt_bf16_round_avx512(_mm512_loadu_ps(src + i)));
    bf16_from_ref(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static void bf16_from_avx2(dt_bf16 *restrict dst,
                                                           const float *restrict src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            dt_bf16_round_avx2(_mm256_loadu_ps(src + i),
                                               _mm256_loadu_ps(src + i + 8)));
    bf16_from_ref(dst + i, src + i, n - i);
}

int dt_cast_bf16_variants(dt_cast_bf16_variant out[DT_CAST_BF16_MAX_VARIANTS]) {
    int n = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        out[n++] = (dt_cast_bf16_variant){"avx512f", bf16_from_avx512};
    if (__builtin_cpu_supports("avx2"))
        out[n++] = (dt_cast_bf16_variant){"avx2", bf16_from_avx2};
    out[n++] = (dt_cast_bf16_variant){"ref", bf16_from_ref};
    return n;
}

CLONES static void to_f32_block(float *restrict dst, const dt_bf16 *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

CLONES static void round_block(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u = (uint32_t)bf16_bits(u) << 16;
        memcpy(&x[i], &u, 4);
    }
}

/* ---- fp16: explicit variants, since its vector conversions are instructions of their own
 * (vcvtps2ph/vcvtph2ps) that GCC does not derive from the scalar code. The immediate rounding
 * mode (nearest even) overrides MXCSR; tails go through the scalar conversion. */

static void f16_from_ref(dt_f16 *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt_f16_from_f32(src[i]);
}

static void f16_to_ref(float *restrict dst, const dt_f16 *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt_f16_to_f32(src[i]);
}

#define ROUND_NE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx,f16c"))) static void f16_from_f16c(dt_f16 *restrict dst,
                                                              const float *restrict src,
                                                              int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), ROUND_NE));
    f16_from_ref(dst + i, src + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f16_to_f16c(float *restrict dst,
                                                            const dt_f16 *restrict src,
                                                            int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    f16_to_ref(dst + i, src + i, n - i);
}

__attribute__((target("avx512f"))) static void f16_from_avx512(dt_f16 *restrict dst,
                                                               const float *restrict src,
                                                               int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), ROUND_NE));
    f16_from_ref(dst + i, src + i, n - i);
}

__attribute__((target("avx512f"))) static void f16_to_avx512(float *restrict dst,
                                                             const dt_f16 *restrict src,
                                                             int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    f16_to_ref(dst + i, src + i, n - i);
}

/* clang 14's __builtin_cpu_supports does not know "f16c": ask cpuid (leaf 1, ECX) there */
static bool has_f16c(void) {
#if defined(__clang__)
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
    return __builtin_cpu_supports("f16c");
#endif
}

int dt_cast_f16_variants(dt_cast_f16_variant out[DT_CAST_F16_MAX_VARIANTS]) {
    int n = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        out[n++] = (dt_cast_f16_variant){"avx512f", f16_from_avx512, f16_to_avx512};
    if (__builtin_cpu_supports("avx") && has_f16c())
        out[n++] = (dt_cast_f16_variant){"f16c", f16_from_f16c, f16_to_f16c};
    out[n++] = (dt_cast_f16_variant){"ref", f16_from_ref, f16_to_ref};
    return n;
}

/* the fastest variant: the first of the list (cheap: the cpu checks read a cached table) */
static dt_cast_f16_variant best_f16(void) {
    dt_cast_f16_variant v[DT_CAST_F16_MAX_VARIANTS];
    dt_cast_f16_variants(v);
    return v[0];
}

/* Fixed lanes instead of a reduction pragma: the summation order is then part of the code,
 * identical for every ISA clone and thread count. */
CLONES static double sumsq_block(const float *x, int64_t n) {
    double acc[SUMSQ_LANES] = {0};
    int64_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int l = 0; l < SUMSQ_LANES; l++)
            acc[l] += (double)x[i + l] * x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += (double)x[i] * x[i];
    double s = 0;
    for (int l = 0; l < SUMSQ_LANES; l++)
        s += acc[l];
    return s;
}

CLONES static void scale_block(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

CLONES static void add_block(float *restrict y, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void dt_cast_f32_to_bf16(dt_bf16 *dst, const float *src, int64_t n) {
    dt_cast_bf16_variant v[DT_CAST_BF16_MAX_VARIANTS];
    dt_cast_bf16_variants(v); /* the fastest first */
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        v[0].to_bf16(dst + b * BLOCK, src + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_cast_f32_to_bf16_ref(dt_bf16 *dst, const float *src, int64_t n) {
    bf16_from_ref(dst, src, n);
}

void dt_cast_bf16_to_f32(float *dst, const dt_bf16 *src, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        to_f32_block(dst + b * BLOCK, src + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_round_bf16_inplace(float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        round_block(x + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_cast_f32_to_f16(dt_f16 *dst, const float *src, int64_t n) {
    dt_cast_f16_variant v = best_f16();
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        v.to_f16(dst + b * BLOCK, src + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_cast_f16_to_f32(float *dst, const dt_f16 *src, int64_t n) {
    dt_cast_f16_variant v = best_f16();
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        v.to_f32(dst + b * BLOCK, src + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_cast_f32_to_f16_ref(dt_f16 *dst, const float *src, int64_t n) {
    f16_from_ref(dst, src, n);
}

void dt_cast_f16_to_f32_ref(float *dst, const dt_f16 *src, int64_t n) { f16_to_ref(dst, src, n); }

dt_cast_lp_fn dt_cast_f32_to_lp_fn(dt_dtype t) {
    if (t == DT_F16)
        return best_f16().to_f16;
    dt_cast_bf16_variant v[DT_CAST_BF16_MAX_VARIANTS];
    dt_cast_bf16_variants(v); /* the fastest first */
    return v[0].to_bf16;
}

void dt_cast_f32_to_lp(dt_dtype t, uint16_t *dst, const float *src, int64_t n) {
    if (t == DT_F16)
        dt_cast_f32_to_f16(dst, src, n);
    else
        dt_cast_f32_to_bf16(dst, src, n);
}

double dt_sumsq(const float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
    double total = 0;
    for (int64_t g0 = 0; g0 < nb; g0 += SUMSQ_GROUP) {
        double part[SUMSQ_GROUP];
        int64_t ng = min64(SUMSQ_GROUP, nb - g0);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t j = 0; j < ng; j++) {
            int64_t i0 = (g0 + j) * BLOCK;
            part[j] = sumsq_block(x + i0, min64(BLOCK, n - i0));
        }
        for (int64_t j = 0; j < ng; j++)
            total += part[j];
    }
    return total;
}

void dt_scale_inplace(float *x, float s, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        scale_block(x + b * BLOCK, s, min64(BLOCK, n - b * BLOCK));
}

void dt_add_inplace(float *y, const float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        add_block(y + b * BLOCK, x + b * BLOCK, min64(BLOCK, n - b * BLOCK));
}

void dt_zero_f32(float *x, int64_t n) {
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++)
        memset(x + b * BLOCK, 0, (size_t)min64(BLOCK, n - b * BLOCK) * sizeof *x);
}
