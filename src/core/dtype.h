/* Element types and the scalar bf16/fp16 <-> fp32 conversions every layer agrees on.
 *
 * bf16 is the top half of an IEEE fp32; fp32 -> bf16 rounds to nearest even (NaN stays NaN),
 * matching PyTorch's and oneDNN's conversion, so a value rounded here equals the value those
 * libraries would produce. fp16 is IEEE binary16; fp32 -> fp16 rounds to nearest even with
 * subnormals, overflow to +-inf and quiet NaNs exactly as x86's F16C (vcvtps2ph) does. Both
 * 16-bit types share one storage type (uint16_t): the dt_dtype next to a buffer says which.
 * Vectorised array casts live in kernels/cast.h.
 */
#ifndef DT_CORE_DTYPE_H
#define DT_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum dt_dtype {
    DT_F32,
    DT_BF16,
    DT_F16,
    DT_DTYPE_COUNT
} dt_dtype;

typedef uint16_t dt_bf16;
typedef uint16_t dt_f16;

static inline size_t dt_dtype_size(dt_dtype t) { return t == DT_F32 ? 4 : 2; }
static inline const char *dt_dtype_name(dt_dtype t) {
    return t == DT_BF16 ? "bf16" : t == DT_F16 ? "fp16" : "fp32";
}

static inline dt_bf16 dt_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (dt_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (dt_bf16)(u >> 16);
}

static inline float dt_bf16_to_f32(dt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16, round to nearest even. |f| >= 65520 (the midpoint past the largest finite
 * value, 65504) becomes +-inf; below 2^-14 the result is subnormal, below 2^-25 a signed zero;
 * a NaN keeps its sign and top payload bits and becomes quiet. */
static inline dt_f16 dt_f16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (dt_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)
        return (dt_f16)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal: rebias the exponent (127 -> 15), round off 13 bits */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (dt_f16)(sign | (r >> 13));
    }
    if (a < 0x33000000u) /* below 2^-25 (half the smallest subnormal): zero */
        return (dt_f16)sign;
    /* subnormal: the count of 2^-24 units is the 24-bit significand shifted by 126 - exp */
    uint32_t shift = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += rem > half || (rem == half && (q & 1u));
    return (dt_f16)(sign | q);
}

/* Exact (every fp16 is an fp32); a NaN becomes quiet, as vcvtph2ps makes it. */
static inline float dt_f16_to_f32(dt_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
    else if (e)
        u = sign | ((e + 112u) << 23) | (m << 13);
    else { /* zero or subnormal m * 2^-24: exact in fp32 */
        float f = (float)m * 5.9604644775390625e-8f;
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
