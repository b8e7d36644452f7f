/* Element types and the scalar bf16 <-> fp32 conversions every layer agrees on.
 *
 * bf16 is the top half of an IEEE fp32; fp32 -> bf16 rounds to nearest even (NaN stays NaN),
 * matching PyTorch's and oneDNN's conversion, so a value rounded here equals the value those
 * libraries would produce. Vectorised array casts live in kernels/cast.h.
 */
#ifndef DT_CORE_DTYPE_H
#define DT_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum dt_dtype {
    DT_F32,
    DT_BF16,
    DT_DTYPE_COUNT
} dt_dtype;

typedef uint16_t dt_bf16;

static inline size_t dt_dtype_size(dt_dtype t) { return t == DT_BF16 ? 2 : 4; }
static inline const char *dt_dtype_name(dt_dtype t) { return t == DT_BF16 ? "bf16" : "fp32"; }

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

#endif
