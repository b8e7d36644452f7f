/* The AVX-512-BF16 tile product of attention's bf16 mode: vdpbf16ps multiplies pairs of bf16
 * operands exactly and adds both products into an fp32 accumulator. Compiled with a target
 * attribute into every build; attention.c calls it only where the CPU has AVX512_BF16.
 */
#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* R rows x NCH 16-float vectors of out, kept in registers through the whole j loop (at most
 * 4 x 4 = 16 accumulators, 4 operand vectors and a broadcast: 21 of the 32 zmm). */
static inline __attribute__((always_inline)) TARGET_BF16 void
block(float *out, int64_t os, const uint32_t *a, int64_t as, const uint32_t *b, int K2, int n,
      bool acc, const int R, const int NCH) {
    __m512 c[4][4];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < NCH; h++)
            c[r][h] = acc ? _mm512_loadu_ps(out + r * os + 16 * h) : _mm512_setzero_ps();
    for (int j = 0; j < K2; j++) {
        __m512bh x[4];
        for (int h = 0; h < NCH; h++)
            x[h] = (__m512bh)_mm512_loadu_si512(b + (int64_t)j * n + 16 * h);
        for (int r = 0; r < R; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r * as + j]);
            for (int h = 0; h < NCH; h++)
                c[r][h] = _mm512_dpbf16_ps(c[r][h], ar, x[h]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < NCH; h++)
            _mm512_storeu_ps(out + r * os + 16 * h, c[r][h]);
}

TARGET_BF16 void dt_attn_dpbf16(float *out, int64_t os, int nr, const uint32_t *a, int64_t as,
                                const uint32_t *b, int K2, int n, bool acc) {
    if (n % 64 == 0)
        for (int c0 = 0; c0 < n; c0 += 64) {
            int r = 0;
            for (; r + 4 <= nr; r += 4)
                block(out + r * os + c0, os, a + r * as, as, b + c0, K2, n, acc, 4, 4);
            for (; r < nr; r++)
                block(out + r * os + c0, os, a + r * as, as, b + c0, K2, n, acc, 1, 4);
        }
    else
        for (int c0 = 0; c0 < n; c0 += 16) {
            int r = 0;
            for (; r + 4 <= nr; r += 4)
                block(out + r * os + c0, os, a + r * as, as, b + c0, K2, n, acc, 4, 1);
            for (; r < nr; r++)
                block(out + r * os + c0, os, a + r * as, as, b + c0, K2, n, acc, 1, 1);
        }
}
