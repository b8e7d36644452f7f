/* Rotary position embedding (see rope.h), HF rotate_half convention.
 *
 * The tables follow HF Llama's float32 recipe (inv_freq = 1/theta^(2i/hs) in float, angle =
 * position * inv_freq as one float product, then cos/sin) so dtrain's rotations match PyTorch's
 * to an ulp rather than differing by the float32 angle error (~pos * 6e-8 rad) HF itself makes.
 * Rows (b, t) are split over OpenMP threads; each head rotates in place. Stateless.
 */
#include "kernels/rope.h"

#include <math.h>

#define PAR_MIN 32768
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

void dt_rope_tables(float *cos_t, float *sin_t, int T, int hs, int pos0, float theta) {
    int half = hs / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
        for (int t = 0; t < T; t++) {
            float angle = (float)(pos0 + t) * inv_freq;
            cos_t[(int64_t)t * half + i] = (float)cos((double)angle);
            sin_t[(int64_t)t * half + i] = (float)sin((double)angle);
        }
    }
}

/* One token's NH heads: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s); sign = -1 rotates back. */
CLONES static void rotate_row(float *x, int NH, int hs, const float *restrict c,
                              const float *restrict s, float sign) {
    int half = hs / 2;
    for (int h = 0; h < NH; h++) {
        float *restrict x1 = x + (int64_t)h * hs;
        float *restrict x2 = x1 + half;
        for (int i = 0; i < half; i++) {
            float a = x1[i], b = x2[i], si = sign * s[i];
            x1[i] = a * c[i] - b * si;
            x2[i] = b * c[i] + a * si;
        }
    }
}

static void rope_apply(float *x, int B, int T, int NH, int hs, int64_t row_stride,
                       const float *cos_t, const float *sin_t, const int32_t *pos, float sign) {
    int64_t rows = (int64_t)B * T, half = hs / 2;
#pragma omp parallel for schedule(static) if (rows * NH * hs >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = pos ? pos[r] : r % T;
        rotate_row(x + r * row_stride, NH, hs, cos_t + t * half, sin_t + t * half, sign);
    }
}

void dt_rope_forward(float *x, int B, int T, int NH, int hs, int64_t row_stride, const float *cos_t,
                     const float *sin_t, const int32_t *pos) {
    rope_apply(x, B, T, NH, hs, row_stride, cos_t, sin_t, pos, 1.0f);
}

/* A rotation's adjoint is its inverse: the same angle with sin negated. */
void dt_rope_backward(float *dx, int B, int T, int NH, int hs, int64_t row_stride,
                      const float *cos_t, const float *sin_t, const int32_t *pos) {
    rope_apply(dx, B, T, NH, hs, row_stride, cos_t, sin_t, pos, -1.0f);
}

/* ---- references: plain loops, one thread ---- */

void dt_rope_forward_ref(float *x, int B, int T, int NH, int hs, int64_t row_stride,
                         const float *cos_t, const float *sin_t, const int32_t *pos) {
    int half = hs / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                float *p = x + ((int64_t)b * T + t) * row_stride + (int64_t)h * hs;
                for (int i = 0; i < half; i++) {
                    const int64_t at = (pos ? pos[(int64_t)b * T + t] : t) * half + i;
                    float c = cos_t[at], s = sin_t[at];
                    float x1 = p[i], x2 = p[i + half];
                    p[i] = x1 * c - x2 * s;
                    p[i + half] = x2 * c + x1 * s;
                }
            }
}

void dt_rope_backward_ref(float *dx, int B, int T, int NH, int hs, int64_t row_stride,
                          const float *cos_t, const float *sin_t, const int32_t *pos) {
    int half = hs / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                float *p = dx + ((int64_t)b * T + t) * row_stride + (int64_t)h * hs;
                for (int i = 0; i < half; i++) {
                    const int64_t at = (pos ? pos[(int64_t)b * T + t] : t) * half + i;
                    float c = cos_t[at], s = sin_t[at];
                    float d1 = p[i], d2 = p[i + half];
                    p[i] = d1 * c + d2 * s;
                    p[i + half] = d2 * c - d1 * s;
                }
            }
}
