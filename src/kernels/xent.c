/* Softmax cross-entropy over a window of each logit row, in the three steps of xent.h: window
 * statistics, their combination over windows, and the gradient. Stateless; rows are split
 * over OpenMP threads and each row is done by one thread in a fixed order, so results do not
 * depend on the thread count. The row bodies are compiled for AVX-512 (16-wide), AVX2+FMA and
 * the baseline ISA and picked at run time (kernels/isa.h).
 */
#include "kernels/xent.h"

#include "kernels/cast.h"
#include "kernels/isa.h"
#include "kernels/kernels_impl.h"

#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,prefer-vector-width=512")))
#define SUM_BLOCK 512 /* float partial sums over this many exps, then added in double */

/* One row's window in two passes: the max, then e^(x - max) summed (and stored in place when
 * `store`, a constant after inlining). Subtracting the max keeps every exp <= 1, so logits of
 * any size (+-1e4) neither overflow nor produce NaN. The sum is taken in float over short
 * blocks and the blocks in double; it leaves as a float (the all-gather carries floats), whose
 * one rounding costs ~6e-8 of the loss. `t` is the target's column in the window, or outside
 * [0, V) when another window owns it. */
INLINE void stats_body(float *x, int V, int t, int store, float *mx_out, float *sum_out,
                       float *zt_out) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++)
        mx = x[j] > mx ? x[j] : mx;
    *zt_out = t >= 0 && t < V ? x[t] : 0.0f; /* read before the exps overwrite it */
    double sum = 0.0;
    for (int j0 = 0; j0 < V; j0 += SUM_BLOCK) {
        const int j1 = V - j0 < SUM_BLOCK ? V : j0 + SUM_BLOCK;
        float part = 0.0f;
        if (store) {
#pragma omp simd reduction(+ : part)
            for (int j = j0; j < j1; j++) {
                x[j] = dt_vexp(x[j] - mx);
                part += x[j];
            }
        } else {
#pragma omp simd reduction(+ : part)
            for (int j = j0; j < j1; j++)
                part += dt_vexp(x[j] - mx);
        }
        sum += part;
    }
    *mx_out = mx;
    *sum_out = (float)sum;
}

TARGET_AVX2 static void stats_avx2(float *x, int V, int t, int store, float *m, float *s,
                                   float *z) {
    if (store)
        stats_body(x, V, t, 1, m, s, z);
    else
        stats_body(x, V, t, 0, m, s, z);
}
TARGET_AVX512 static void stats_avx512(float *x, int V, int t, int store, float *m, float *s,
                                       float *z) {
    if (store)
        stats_body(x, V, t, 1, m, s, z);
    else
        stats_body(x, V, t, 0, m, s, z);
}
static void stats_base(float *x, int V, int t, int store, float *m, float *s, float *z) {
    if (store)
        stats_body(x, V, t, 1, m, s, z);
    else
        stats_body(x, V, t, 0, m, s, z);
}
static void (*const STATS[DT_ISA_AVX512 + 1])(float *, int, int, int, float *, float *,
                                              float *) = {stats_base, stats_avx2, stats_avx512};

/* The logits are written only when store != 0 (the _exp entry point owns them mutably). */
static void stats_rows(float *logits, int64_t ld, int n, int V, int first,
                       const int32_t *targets, int store, float *mx, float *sum, float *zt) {
    void (*const f)(float *, int, int, int, float *, float *, float *) =
        STATS[dt_isa_pick(DT_ISA_AVX512)];
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        if (targets[r] < 0) { /* ignored: no work, and the combination skips the row */
            mx[r] = sum[r] = zt[r] = 0.0f;
            continue;
        }
        const int t = targets[r] - first; /* both >= 0: no overflow */
        f(logits + r * ld, V, t, store, mx + r, sum + r, zt + r);
    }
}

void dt_xent_row_stats(const float *logits, int64_t ld, int n, int V, int first,
                       const int32_t *targets, float *mx, float *sum, float *zt) {
    stats_rows((float *)logits, ld, n, V, first, targets, 0, mx, sum, zt);
}

void dt_xent_row_stats_exp(float *logits, int64_t ld, int n, int V, int first,
                           const int32_t *targets, float *mx, float *sum, float *zt) {
    stats_rows(logits, ld, n, V, first, targets, 1, mx, sum, zt);
}

/* Reference: plain loops in double. */
static void stats_ref(float *logits, int64_t ld, int n, int V, int first,
                      const int32_t *targets, int store, float *mx, float *sum, float *zt) {
    for (int r = 0; r < n; r++) {
        float *x = logits + r * ld;
        mx[r] = sum[r] = zt[r] = 0.0f;
        if (targets[r] < 0)
            continue;
        const int t = targets[r] - first;
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++)
            m = x[j] > m ? x[j] : m;
        zt[r] = t >= 0 && t < V ? x[t] : 0.0f;
        for (int j = 0; j < V; j++) {
            double e = exp(x[j] - m);
            s += e;
            if (store)
                x[j] = (float)e;
        }
        mx[r] = (float)m;
        sum[r] = (float)s;
    }
}

void dt_xent_row_stats_ref(const float *logits, int64_t ld, int n, int V, int first,
                           const int32_t *targets, float *mx, float *sum, float *zt) {
    stats_ref((float *)logits, ld, n, V, first, targets, 0, mx, sum, zt);
}

void dt_xent_row_stats_exp_ref(float *logits, int64_t ld, int n, int V, int first,
                               const int32_t *targets, float *mx, float *sum, float *zt) {
    stats_ref(logits, ld, n, V, first, targets, 1, mx, sum, zt);
}

/* Rescaling each window's sum to the global max is the online-softmax identity
 * sum_j e^(x_j - M) = sum_k e^(mx_k - M) sum_{j in k} e^(x_j - mx_k) (Milakov & Gimelshein,
 * "Online normalizer calculation for softmax", 2018, section 3). Everything is in double and
 * in window order, so every rank gets the same bits. The loss is formed in double: with large
 * logits, M + log S - z would lose digits to cancellation in float. A window with sum 0 is
 * empty (a nonempty one has sum >= 1: its max contributes e^0) and is skipped, so its
 * mx = -inf never meets another -inf. The gradient factor is taken as e^(mx_me - M) / S rather
 * than e^(mx_me - lse): with one window it is then exactly grad_scale / S. */
void dt_xent_combine(const float *stats, int p, int me, int n, const int32_t *targets,
                     int vocab_size, float grad_scale, float *losses, float *scale) {
    const int64_t blk = 3 * (int64_t)n;
    for (int r = 0; r < n; r++) {
        const int32_t tgt = targets[r];
        if (tgt < 0) {
            losses[r] = 0.0f;
            if (scale)
                scale[r] = 0.0f;
            continue;
        }
        double M = -INFINITY, S = 0.0, z = 0.0;
        for (int k = 0; k < p; k++) {
            const float *b = stats + k * blk;
            if (b[n + r] > 0.0f && b[r] > M)
                M = b[r];
        }
        for (int k = 0; k < p; k++) {
            const float *b = stats + k * blk;
            if (b[n + r] > 0.0f)
                S += (double)b[n + r] * exp((double)b[r] - M);
            z += b[2 * n + r];
        }
        const int bad = tgt >= vocab_size;
        losses[r] = bad ? NAN : (float)(M + log(S) - z);
        if (scale) {
            const float *b = stats + me * blk;
            scale[r] = bad || !(b[n + r] > 0.0f)
                           ? 0.0f
                           : (float)((double)grad_scale * exp((double)b[r] - M) / S);
        }
    }
}

/* One pass: scale the stored exps, subtract the one-hot where this window owns the target,
 * and zero the padding columns (so their weight rows get no gradient). */
INLINE void grad_body(float *e, int V, int width, int t, float f, float gs) {
#pragma omp simd
    for (int j = 0; j < V; j++)
        e[j] *= f;
    if (t >= 0 && t < V)
        e[t] -= gs;
    if (width > V)
        memset(e + V, 0, sizeof(float) * (size_t)(width - V));
}

TARGET_AVX2 static void grad_avx2(float *e, int V, int width, int t, float f, float gs) {
    grad_body(e, V, width, t, f, gs);
}
TARGET_AVX512 static void grad_avx512(float *e, int V, int width, int t, float f, float gs) {
    grad_body(e, V, width, t, f, gs);
}
static void grad_base(float *e, int V, int width, int t, float f, float gs) {
    grad_body(e, V, width, t, f, gs);
}
static void (*const GRAD[DT_ISA_AVX512 + 1])(float *, int, int, int, float, float) = {
    grad_base, grad_avx2, grad_avx512};

/* Elements per rounding block of cast_row: 512 bytes of stack. */
enum { CAST_ROW_BLOCK = 256 };

/* Rounds a gradient row into lp a block at a time through the stack, so lp may start where the
 * row starts: block j's 16-bit values land on fp32 elements [j/2, (j+m)/2), all read by then
 * (the casts themselves take non-overlapping operands). */
static void cast_row(dt_cast_lp_fn cast, uint16_t *lp, const float *x, int width) {
    uint16_t blk[CAST_ROW_BLOCK];
    for (int j = 0; j < width; j += CAST_ROW_BLOCK) {
        int m = width - j < CAST_ROW_BLOCK ? width - j : CAST_ROW_BLOCK;
        cast(blk, x + j, m);
        memcpy(lp + j, blk, sizeof(uint16_t) * (size_t)m);
    }
}

/* With the 16-bit rows written over the fp32 ones (lp == e, ld_lp <= 2 ld), the rows from a
 * that may run at once: those whose 16-bit row starts where its fp32 row does (ld_lp = 2 ld)
 * or ends below row a's fp32 row (every row before a is done). Row a alone always may: its
 * 16-bit row starts at or below its fp32 row, and cast_row's writes trail its reads. At a
 * stride of ld_lp < 2 ld the batches about double: 1, 1, 2, 4, ... rows. */
static int in_place_batch_end(int64_t ld, int n, int width, int64_t ld_lp, int a) {
    int b = a + 1;
    while (b < n && (ld_lp == 2 * ld || b * ld_lp + width <= 2 * a * ld))
        b++;
    return b;
}

/* The gradient rows in place (an ignored row's are zeros), each then cast into lp when cast is
 * given. */
static void grad_rows(float *e, int64_t ld, int n, int V, int width, int first,
                      const int32_t *targets, const float *scale, float grad_scale,
                      dt_cast_lp_fn cast, uint16_t *lp, int64_t ld_lp) {
    void (*const f)(float *, int, int, int, float, float) = GRAD[dt_isa_pick(DT_ISA_AVX512)];
    bool in_place = cast && (void *)lp == (void *)e;
    for (int a = 0; a < n;) {
        int b = in_place ? in_place_batch_end(ld, n, width, ld_lp, a) : n;
#pragma omp parallel for schedule(static)
        for (int r = a; r < b; r++) {
            float *x = e + r * ld;
            if (targets[r] < 0)
                memset(x, 0, sizeof(float) * (size_t)width);
            else
                f(x, V, width, targets[r] - first, scale[r], grad_scale);
            if (cast)
                cast_row(cast, lp + r * ld_lp, x, width);
        }
        a = b;
    }
}

void dt_xent_grad(float *e, int64_t ld, int n, int V, int width, int first, const int32_t *targets,
                  const float *scale, float grad_scale) {
    grad_rows(e, ld, n, V, width, first, targets, scale, grad_scale, NULL, NULL, 0);
}

void dt_xent_grad_lp(float *e, int64_t ld, int n, int V, int width, int first,
                     const int32_t *targets, const float *scale, float grad_scale, dt_dtype t,
                     uint16_t *lp, int64_t ld_lp) {
    grad_rows(e, ld, n, V, width, first, targets, scale, grad_scale, dt_cast_f32_to_lp_fn(t), lp,
              ld_lp);
}

void dt_xent_grad_ref(float *e, int64_t ld, int n, int V, int width, int first,
                      const int32_t *targets, const float *scale, float grad_scale) {
    for (int r = 0; r < n; r++) {
        float *x = e + r * ld;
        const int t = targets[r] - first;
        for (int j = 0; j < width; j++) {
            double g = 0.0;
            if (targets[r] >= 0 && j < V)
                g = (double)x[j] * scale[r] - (j == t ? (double)grad_scale : 0.0);
            x[j] = (float)g;
        }
    }
}
