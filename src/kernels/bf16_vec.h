/* Private to kernels/: round-to-nearest-even fp32 -> bf16 on vector registers, the bits of
 * dt_bf16_from_f32 (NaN kept quiet: (u >> 16) | 0x40; else (u + 0x7fff + lsb) >> 16). Plain
 * AVX-512F / AVX2 integer ops, not vcvtneps2bf16, which flushes subnormals to zero. Shared by
 * the casts (cast.c), the fused column sum (reduce.c) and AdamW's copy (adamw.c). */
#ifndef DT_KERNELS_BF16_VEC_H
#define DT_KERNELS_BF16_VEC_H

#include <immintrin.h>

/* 16 floats -> 16 bf16 */
__attribute__((target("avx512f"))) static inline __m256i dt_bf16_round_avx512(__m512 f) {
    __m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i q = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}

/* 8 floats -> 8 bf16 in the low halves of 32-bit lanes */
__attribute__((target("avx2"))) static inline __m256i dt_bf16_round32_avx2(__m256 f) {
    __m256i u = _mm256_castps_si256(f), hi = _mm256_srli_epi32(u, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    /* |u| <= 0x7fffffff: the signed compare is the unsigned one */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, q, nan);
}

/* 16 floats (a, b) -> 16 bf16 in order: packus interleaves the 128-bit lanes (a0-3 b0-3 a4-7
 * b4-7), the permute restores the order */
__attribute__((target("avx2"))) static inline __m256i dt_bf16_round_avx2(__m256 a, __m256 b) {
    __m256i p = _mm256_packus_epi32(dt_bf16_round32_avx2(a), dt_bf16_round32_avx2(b));
    return _mm256_permute4x64_epi64(p, 0xd8);
}

#endif
