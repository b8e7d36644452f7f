/* Fused AdamW step (see adamw.h), one pass over p, g, m, v (and the optional bf16 copy).
 *
 * Element-wise in float exactly in PyTorch's order of operations (torch.optim.AdamW,
 * single-tensor path); only the bias corrections are computed in double, as Python does.
 * Blocks of BLOCK elements are shared by OpenMP threads; every element's result is
 * independent of the split. Stateless, allocation-free.
 */
#include "kernels/adamw.h"

#include "kernels/cast.h"

#include <math.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#define BLOCK 16384
#define PAR_MIN (2 * BLOCK)
#define CHUNK 512 /* elements per pass of the three inner loops: all in L1 */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* The per-step scalars, rounded to float where PyTorch passes them to a float kernel. */
typedef struct adamw_coef {
    float decay;      /* 1 - lr * wd */
    float b1, omb1;   /* beta1, 1 - beta1 */
    float b2, omb2;   /* beta2, 1 - beta2 */
    float bc2_sqrt;   /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step;   /* -lr / (1 - beta1^t) */
    float grad_scale;
} adamw_coef;

static adamw_coef make_coef(const dt_adamw_hparams *h) {
    double bc1 = 1.0 - pow((double)h->beta1, h->step);
    double bc2 = 1.0 - pow((double)h->beta2, h->step);
    adamw_coef c = {
        .decay = (float)(1.0 - (double)h->lr * h->weight_decay),
        .b1 = h->beta1,
        .omb1 = (float)(1.0 - (double)h->beta1),
        .b2 = h->beta2,
        .omb2 = (float)(1.0 - (double)h->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = h->eps,
        .neg_step = (float)(-(double)h->lr / bc1),
        .grad_scale = h->grad_scale,
    };
    return c;
}

/* p.mul_(decay); m.mul_(b1).add_(g, alpha=1-b1); v.mul_(b2).addcmul_(g, g, value=1-b2);
 * denom = v.sqrt() / bc2_sqrt + eps; p.addcdiv_(m, denom, value=-step_size).
 * The library is built with -fno-math-errno, so sqrtf vectorises at the clone's full width
 * (vsqrtps is correctly rounded: the bits of the scalar sqrtf). With a 4-wide SSE root loop of
 * its own and a compiler-vectorised bf16 copy the update took 1.7x the time of a plain stream
 * with the same traffic at one thread, now 1.4x (the two divisions and the root per element,
 * which PyTorch's bits need, are the rest). Short loops per chunk measured faster than one
 * loop doing everything, and software prefetching slower. */
/* The 16-bit copy of a chunk of new weights is made while it is in L1, by the cast that
 * dt_cast_f32_to_lp runs (its bits). */
CLONES static void adamw_block(float *restrict p, const float *restrict g, float *restrict m,
                               float *restrict v, uint16_t *restrict pb, dt_cast_lp_fn to_lp,
                               int64_t n, const adamw_coef *cp) {
    const adamw_coef c = *cp;
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int len = n - i0 < CHUNK ? (int)(n - i0) : CHUNK;
        float *restrict pc = p + i0, *restrict mc = m + i0, *restrict vc = v + i0;
        const float *restrict gc = g + i0;
        for (int i = 0; i < len; i++) {
            float gi = gc[i] * c.grad_scale;
            mc[i] = mc[i] * c.b1 + c.omb1 * gi;
            vc[i] = vc[i] * c.b2 + c.omb2 * gi * gi;
        }
        for (int i = 0; i < len; i++) {
            float denom = sqrtf(vc[i]) / c.bc2_sqrt + c.eps;
            pc[i] = pc[i] * c.decay + c.neg_step * mc[i] / denom;
        }
        if (pb)
            to_lp(pb + i0, pc, len);
    }
}

static void update(float *p, const float *g, float *m, float *v, uint16_t *p_lp,
                   dt_cast_lp_fn to_lp, int64_t n, const dt_adamw_hparams *h) {
    adamw_coef c = make_coef(h);
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * BLOCK, len = n - o < BLOCK ? n - o : BLOCK;
        adamw_block(p + o, g + o, m + o, v + o, p_lp ? p_lp + o : NULL, to_lp, len, &c);
    }
}

void dt_adamw_update(float *p, const float *g, float *m, float *v, dt_bf16 *p_bf16, int64_t n,
                     const dt_adamw_hparams *h) {
    update(p, g, m, v, p_bf16, dt_cast_f32_to_lp_fn(DT_BF16), n, h);
}

void dt_adamw_update_f16(float *p, const float *g, float *m, float *v, dt_f16 *p_f16, int64_t n,
                         const dt_adamw_hparams *h) {
    update(p, g, m, v, p_f16, dt_cast_f32_to_lp_fn(DT_F16), n, h);
}

void dt_adamw_update_ref(float *p, const float *g, float *m, float *v, dt_bf16 *p_bf16,
                         int64_t n, const dt_adamw_hparams *h) {
    adamw_coef c = make_coef(h);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * c.grad_scale;
        p[i] *= c.decay;
        m[i] = m[i] * c.b1 + c.omb1 * gi;
        v[i] = v[i] * c.b2 + c.omb2 * gi * gi;
        p[i] += c.neg_step * m[i] / (sqrtf(v[i]) / c.bc2_sqrt + c.eps);
        if (p_bf16)
            p_bf16[i] = dt_bf16_from_f32(p[i]);
    }
}
