/* Row-wise int8 quantisation: the plain reference, a portable OpenMP loop, and AVX2 /
 * AVX-512 row kernels compiled with target attributes and picked at run time (as attention.c
 * picks its AVX2 path), so the library runs on any x86-64. See quant.h.
 *
 * Same bits in every variant: the row maximum is exact whatever the order; q = rint(x * inv)
 * with one rounding of the product, and the vector conversions (cvtps2dq) round half to even
 * in the default MXCSR mode, as lrintf does in the default FE mode; the result is clamped to
 * [-127, 127]. Dequantisation is one product per element.
 */
#include "kernels/quant.h"

#include <immintrin.h>
#include <math.h>

/* ---- one row, scalar -------------------------------------------------------------------- */

static float scale_of(float amax) { return amax / 127.0f; }
static float inv_of(float amax) { return amax > 0 ? 127.0f / amax : 0.0f; }

static int8_t q_of(float v) {
    long r = lrintf(v);
    return (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
}

static void quant_tail(int8_t *q, const float *x, int64_t j, int64_t cols, float inv) {
    for (; j < cols; j++)
        q[j] = q_of(x[j] * inv);
}

static float amax_tail(const float *x, int64_t j, int64_t cols, float m) {
    for (; j < cols; j++)
        m = fmaxf(m, fabsf(x[j]));
    return m;
}

static void quant_row(int8_t *q, float *scale, const float *x, int64_t cols) {
    float m = amax_tail(x, 0, cols, 0.0f);
    *scale = scale_of(m);
    quant_tail(q, x, 0, cols, inv_of(m));
}

static void dequant_row(float *x, const int8_t *q, float s, int64_t cols) {
    for (int64_t j = 0; j < cols; j++)
        x[j] = (float)q[j] * s;
}

/* ---- AVX2 ------------------------------------------------------------------------------- */

#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw")))

TARGET_AVX2 static void quant_row_avx2(int8_t *q, float *scale, const float *x, int64_t cols) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vm = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8)
        vm = _mm256_max_ps(vm, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    float m = amax_tail(x, j, cols, 0.0f);
    for (int i = 0; i < 8; i++)
        m = fmaxf(m, lanes[i]);
    *scale = scale_of(m);
    float inv = inv_of(m);
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (j = 0; j + 8 <= cols; j += 8) {
        __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vinv));
        r = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(q + j), _mm_packs_epi16(p16, p16));
    }
    quant_tail(q, x, j, cols, inv);
}

TARGET_AVX2 static void dequant_row_avx2(float *x, const int8_t *q, float s, int64_t cols) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256i r = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + j)));
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_cvtepi32_ps(r), vs));
    }
    for (; j < cols; j++)
        x[j] = (float)q[j] * s;
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */

TARGET_AVX512 static void quant_row_avx512(int8_t *q, float *scale, const float *x,
                                           int64_t cols) {
    __m512 vm = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16)
        vm = _mm512_max_ps(vm, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
    float m = fmaxf(amax_tail(x, j, cols, 0.0f), _mm512_reduce_max_ps(vm));
    *scale = scale_of(m);
    float inv = inv_of(m);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (j = 0; j + 16 <= cols; j += 16) {
        __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), vinv));
        r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
        _mm_storeu_si128((__m128i *)(q + j), _mm512_cvtepi32_epi8(r));
    }
    quant_tail(q, x, j, cols, inv);
}

TARGET_AVX512 static void dequant_row_avx512(float *x, const int8_t *q, float s, int64_t cols) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {
        __m512i r = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j)));
        _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_cvtepi32_ps(r), vs));
    }
    for (; j < cols; j++)
        x[j] = (float)q[j] * s;
}

/* ---- dispatch --------------------------------------------------------------------------- */

typedef void (*quant_fn)(int8_t *, float *, const float *, int64_t);
typedef void (*dequant_fn)(float *, const int8_t *, float, int64_t);

static const struct {
    const char *name;
    quant_fn quant;
    dequant_fn dequant;
} ISAS[DT_QUANT_ISA_COUNT] = {
    [DT_QUANT_ISA_PORTABLE] = {"portable", quant_row, dequant_row},
    [DT_QUANT_ISA_AVX2] = {"avx2", quant_row_avx2, dequant_row_avx2},
    [DT_QUANT_ISA_AVX512] = {"avx512", quant_row_avx512, dequant_row_avx512},
};

bool dt_quant_isa_supported(dt_quant_isa isa) {
    switch (isa) {
    case DT_QUANT_ISA_PORTABLE: return true;
    case DT_QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DT_QUANT_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    default: return false;
    }
}

const char *dt_quant_isa_name(dt_quant_isa isa) {
    return isa >= 0 && isa < DT_QUANT_ISA_COUNT ? ISAS[isa].name : "?";
}

static dt_quant_isa best(void) {
    for (int i = DT_QUANT_ISA_COUNT - 1; i > 0; i--)
        if (dt_quant_isa_supported((dt_quant_isa)i))
            return (dt_quant_isa)i;
    return DT_QUANT_ISA_PORTABLE;
}

void dt_quant_int8_rows_isa(dt_quant_isa isa, int8_t *q, float *scale, const float *x,
                            int64_t rows, int64_t cols) {
    quant_fn f = ISAS[isa].quant;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++)
        f(q + i * cols, scale + i, x + i * cols, cols);
}

void dt_dequant_int8_rows_isa(dt_quant_isa isa, float *x, const int8_t *q, const float *scale,
                              int64_t rows, int64_t cols) {
    dequant_fn f = ISAS[isa].dequant;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++)
        f(x + i * cols, q + i * cols, scale[i], cols);
}

void dt_quant_int8_rows(int8_t *q, float *scale, const float *x, int64_t rows, int64_t cols) {
    dt_quant_int8_rows_isa(best(), q, scale, x, rows, cols);
}

void dt_dequant_int8_rows(float *x, const int8_t *q, const float *scale, int64_t rows,
                          int64_t cols) {
    dt_dequant_int8_rows_isa(best(), x, q, scale, rows, cols);
}

/* ---- reference -------------------------------------------------------------------------- */

void dt_quant_int8_rows_bf16(int8_t *q, float *scale, const dt_bf16 *x, int64_t rows,
                             int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const dt_bf16 *xr = x + r * cols;
        float m = 0.0f;
        for (int64_t j = 0; j < cols; j++)
            m = fmaxf(m, fabsf(dt_bf16_to_f32(xr[j])));
        scale[r] = scale_of(m);
        float inv = inv_of(m);
        for (int64_t j = 0; j < cols; j++)
            q[r * cols + j] = q_of(dt_bf16_to_f32(xr[j]) * inv);
    }
}

void dt_dequant_int8_rows_bf16(dt_bf16 *x, const int8_t *q, const float *scale, int64_t rows,
                               int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            x[r * cols + j] = dt_bf16_from_f32((float)q[r * cols + j] * scale[r]);
}

void dt_quant_int8_rows_ref(int8_t *q, float *scale, const float *x, int64_t rows,
                            int64_t cols) {
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols;
        float m = 0.0f;
        for (int64_t j = 0; j < cols; j++)
            m = fabsf(xr[j]) > m ? fabsf(xr[j]) : m;
        scale[i] = m / 127.0f;
        float inv = m > 0 ? 127.0f / m : 0.0f;
        for (int64_t j = 0; j < cols; j++) {
            float r = rintf(xr[j] * inv);
            q[i * cols + j] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
        }
    }
}

void dt_dequant_int8_rows_ref(float *x, const int8_t *q, const float *scale, int64_t rows,
                              int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * cols + j] = (float)q[i * cols + j] * scale[i];
}
