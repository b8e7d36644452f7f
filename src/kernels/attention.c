/* Scaled dot-product attention, FlashAttention style (Dao et al., NeurIPS'22): the forward is
 * alg. 1 (query tile against streamed key tiles, online softmax, save y and lse), the backward
 * is alg. 2 (recompute P from q, k, lse one tile pair at a time). Scratch tiles live on each
 * thread's stack; nothing is allocated. Every output element is produced by one thread in a
 * fixed order, so results do not depend on the OpenMP thread count. The tile bodies are
 * compiled for AVX-512 (16-wide, an 8 x 32 micro-kernel), AVX2+FMA and the baseline ISA, and
 * picked at run time (kernels/isa.h). In bf16 mode on AVX512_BF16 machines attn_bf16.c runs
 * instead (every product on vdpbf16ps); the variants here round the same operands to bf16 and
 * multiply in fp32, which gives the same exact products. The bf16-storage entry points read
 * q, k, v (and y) in bf16 through the same bodies.
 */
#include "kernels/attention.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/isa.h"
#include "kernels/kernels_impl.h"

#define BR 64      /* query rows per tile */
#define BC 64      /* keys per tile: a multiple of 8 so score rows are whole vectors */
#define MAX_HS 256 /* larger heads take the reference path (scratch is sized by hs) */

#define INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
/* GCC's prefer-vector-width lets its loops use zmm; clang ignores a target string with it */
#ifdef __clang__
#define PREFER_512 ""
#else
#define PREFER_512 ",prefer-vector-width=512"
#endif
#define TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma" PREFER_512)))

enum { V_BASE, V_AVX2, V_AVX512 }; /* compile-time variant of the tile bodies */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* out[0:n] += a[0] x0 + a[1] x1 + a[2] x2 + a[3] x3, for one or two output rows. Every tile
 * product below is a sum of rank-1 updates; folding four of them per pass over `out` cuts its
 * loads and stores by four, and updating two rows per pass shares each x load between them.
 * The loop over n is contiguous, so it vectorises. */
INLINE void axpy4(float *restrict out, const float *a, const float *restrict x0,
                  const float *restrict x1, const float *restrict x2, const float *restrict x3,
                  int n) {
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
#pragma omp simd
    for (int d = 0; d < n; d++)
        out[d] += a0 * x0[d] + a1 * x1[d] + a2 * x2[d] + a3 * x3[d];
}

INLINE void axpy4x2(float *restrict o0, float *restrict o1, const float *a, const float *b,
                    const float *restrict x0, const float *restrict x1,
                    const float *restrict x2, const float *restrict x3, int n) {
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    const float b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
#pragma omp simd
    for (int d = 0; d < n; d++) {
        const float v0 = x0[d], v1 = x1[d], v2 = x2[d], v3 = x3[d];
        o0[d] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3;
        o1[d] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3;
    }
}

INLINE void axpy1(float *restrict out, float a, const float *restrict x, int n) {
#pragma omp simd
    for (int d = 0; d < n; d++)
        out[d] += a * x[d];
}

/* Register-blocked micro-kernels for the common widths (n % 16 == 0: hs = 64, 128, ... and the
 * BC-wide score tiles): a 4 x 16 (AVX-512: 8 x 32) block of out stays in registers through
 * the whole j loop, each step 2 loads of x_j, a broadcast of A per row and a multiply-add per
 * accumulator, with no stores. The AVX-512 and AVX2 clones add the terms in the same order
 * with fused multiply-adds (one rounding each), so the two give the same bits: separate
 * multiplies and adds (the build turns off contraction) ran these products at half the FMA
 * rate, fp32 attention at 40-52 GFLOP/s against a 107 GFLOP/s matmul peak on one Zen 5
 * thread. The baseline clone, for a CPU without FMA, multiplies and adds (GCC vector
 * extensions, lowered to SSE pairs); its last bits may differ from the FMA clones'. */
typedef float v8sf __attribute__((vector_size(32)));

/* unaligned vector load/store; macros, since passing AVX vectors by value changes the ABI of
 * the baseline clone */
#define LD8(v, p) memcpy(&(v), (p), sizeof(v8sf))
#define ST8(p, v) memcpy((p), &(v), sizeof(v8sf))

INLINE void kernel_4x16(float *out, int64_t os, const float *a, int64_t ars, int64_t acs,
                        const float *x, int64_t xs, int m) {
    v8sf c00, c01, c10, c11, c20, c21, c30, c31;
    LD8(c00, out);
    LD8(c01, out + 8);
    LD8(c10, out + os);
    LD8(c11, out + os + 8);
    LD8(c20, out + 2 * os);
    LD8(c21, out + 2 * os + 8);
    LD8(c30, out + 3 * os);
    LD8(c31, out + 3 * os + 8);
    for (int j = 0; j < m; j++) {
        const float *xj = x + j * xs, *aj = a + j * acs;
        v8sf x0, x1;
        LD8(x0, xj);
        LD8(x1, xj + 8);
        const float a0 = aj[0], a1 = aj[ars], a2 = aj[2 * ars], a3 = aj[3 * ars];
        c00 += a0 * x0;
        c01 += a0 * x1;
        c10 += a1 * x0;
        c11 += a1 * x1;
        c20 += a2 * x0;
        c21 += a2 * x1;
        c30 += a3 * x0;
        c31 += a3 * x1;
    }
    ST8(out, c00);
    ST8(out + 8, c01);
    ST8(out + os, c10);
    ST8(out + os + 8, c11);
    ST8(out + 2 * os, c20);
    ST8(out + 2 * os + 8, c21);
    ST8(out + 3 * os, c30);
    ST8(out + 3 * os + 8, c31);
}

/* Named accumulators, not arrays: GCC kept an array's copy on the stack in step with its
 * registers, a store per multiply-add. */
#define FMA_ROW256(k, r)                                                                           \
    do {                                                                                           \
        const __m256 b_ = _mm256_broadcast_ss(aj + (r)*ars);                                       \
        c##k##0 = _mm256_fmadd_ps(b_, x0, c##k##0);                                                \
        c##k##1 = _mm256_fmadd_ps(b_, x1, c##k##1);                                                \
    } while (0)

TARGET_AVX2 static void kernel_4x16_fma(float *out, int64_t os, const float *a, int64_t ars,
                                        int64_t acs, const float *x, int64_t xs, int m) {
    __m256 c00 = _mm256_loadu_ps(out), c01 = _mm256_loadu_ps(out + 8);
    __m256 c10 = _mm256_loadu_ps(out + os), c11 = _mm256_loadu_ps(out + os + 8);
    __m256 c20 = _mm256_loadu_ps(out + 2 * os), c21 = _mm256_loadu_ps(out + 2 * os + 8);
    __m256 c30 = _mm256_loadu_ps(out + 3 * os), c31 = _mm256_loadu_ps(out + 3 * os + 8);
    for (int j = 0; j < m; j++) {
        const float *xj = x + j * xs, *aj = a + j * acs;
        const __m256 x0 = _mm256_loadu_ps(xj), x1 = _mm256_loadu_ps(xj + 8);
        FMA_ROW256(0, 0);
        FMA_ROW256(1, 1);
        FMA_ROW256(2, 2);
        FMA_ROW256(3, 3);
    }
    _mm256_storeu_ps(out, c00), _mm256_storeu_ps(out + 8, c01);
    _mm256_storeu_ps(out + os, c10), _mm256_storeu_ps(out + os + 8, c11);
    _mm256_storeu_ps(out + 2 * os, c20), _mm256_storeu_ps(out + 2 * os + 8, c21);
    _mm256_storeu_ps(out + 3 * os, c30), _mm256_storeu_ps(out + 3 * os + 8, c31);
}

#define FMA_ROW512(k, r)                                                                           \
    do {                                                                                           \
        const __m512 b_ = _mm512_set1_ps(aj[(r)*ars]);                                             \
        c##k##0 = _mm512_fmadd_ps(b_, x0, c##k##0);                                                \
        c##k##1 = _mm512_fmadd_ps(b_, x1, c##k##1);                                                \
    } while (0)
#define LOAD_ROW512(k)                                                                             \
    __m512 c##k##0 = _mm512_loadu_ps(out + k * os), c##k##1 = _mm512_loadu_ps(out + k * os + 16)
#define STORE_ROW512(k)                                                                            \
    _mm512_storeu_ps(out + k * os, c##k##0), _mm512_storeu_ps(out + k * os + 16, c##k##1)

/* 8 x 32 in sixteen 16-float accumulators (of 32 zmm registers). */
TARGET_AVX512 static void kernel_8x32_fma(float *out, int64_t os, const float *a, int64_t ars,
                                          int64_t acs, const float *x, int64_t xs, int m) {
    LOAD_ROW512(0);
    LOAD_ROW512(1);
    LOAD_ROW512(2);
    LOAD_ROW512(3);
    LOAD_ROW512(4);
    LOAD_ROW512(5);
    LOAD_ROW512(6);
    LOAD_ROW512(7);
    for (int j = 0; j < m; j++) {
        const float *xj = x + j * xs, *aj = a + j * acs;
        const __m512 x0 = _mm512_loadu_ps(xj), x1 = _mm512_loadu_ps(xj + 16);
        FMA_ROW512(0, 0);
        FMA_ROW512(1, 1);
        FMA_ROW512(2, 2);
        FMA_ROW512(3, 3);
        FMA_ROW512(4, 4);
        FMA_ROW512(5, 5);
        FMA_ROW512(6, 6);
        FMA_ROW512(7, 7);
    }
    STORE_ROW512(0);
    STORE_ROW512(1);
    STORE_ROW512(2);
    STORE_ROW512(3);
    STORE_ROW512(4);
    STORE_ROW512(5);
    STORE_ROW512(6);
    STORE_ROW512(7);
}

/* out[r][0:n] += sum_{j<m} A[r][j] x_j[0:n] for r < nrows: a small GEMM, out += A X, with
 * A[r][j] = a[r * ars + j * acs] (either orientation of a stored tile) and x_j = x + j * xs. */
/* Causal tiles on the diagonal are half zeros. A band says which part of the product can be
 * nonzero: row r needs only terms j in [r - lo, r + hi] and output columns c <= r + col. The
 * micro-kernel path skips what lies outside (whole 4-row, 16-column blocks), which is exact:
 * the skipped terms are products with zeros, the skipped outputs are masked afterwards. */
typedef struct band {
    int lo, hi, col;
} band;
#define NO_BAND ((band){1 << 29, 1 << 29, 1 << 29})

INLINE void gemm_acc(float *out, int64_t os, int nrows, const float *a, int64_t ars, int64_t acs,
                     const float *x, int64_t xs, int m, int n, band bd, const int isa) {
    int r = 0;
    if (isa >= V_AVX512 && n % 32 == 0)
        for (; r + 8 <= nrows; r += 8) {
            const int jlo = r - bd.lo > 0 ? r - bd.lo : 0;
            const int jhi = imin(m, r + 7 + bd.hi + 1), chi = imin(n, r + 7 + bd.col + 1);
            if (jhi <= jlo)
                continue;
            for (int c0 = 0; c0 < chi; c0 += 32)
                kernel_8x32_fma(out + r * os + c0, os, a + r * ars + jlo * acs, ars, acs,
                                x + jlo * xs + c0, xs, jhi - jlo);
        }
    if (n % 16 == 0)
        for (; r + 4 <= nrows; r += 4) {
            const int jlo = r - bd.lo > 0 ? r - bd.lo : 0;
            const int jhi = imin(m, r + 3 + bd.hi + 1), chi = imin(n, r + 3 + bd.col + 1);
            if (jhi <= jlo)
                continue;
            for (int c0 = 0; c0 < chi; c0 += 16)
                if (isa >= V_AVX2)
                    kernel_4x16_fma(out + r * os + c0, os, a + r * ars + jlo * acs, ars, acs,
                                    x + jlo * xs + c0, xs, jhi - jlo);
                else
                    kernel_4x16(out + r * os + c0, os, a + r * ars + jlo * acs, ars, acs,
                                x + jlo * xs + c0, xs, jhi - jlo);
        }
    for (; r + 2 <= nrows; r += 2) {
        const float *ar = a + r * ars, *br = ar + ars;
        float *o0 = out + r * os, *o1 = o0 + os;
        int j = 0;
        for (; j + 4 <= m; j += 4) {
            const float aj[4] = {ar[j * acs], ar[(j + 1) * acs], ar[(j + 2) * acs],
                                 ar[(j + 3) * acs]};
            const float bj[4] = {br[j * acs], br[(j + 1) * acs], br[(j + 2) * acs],
                                 br[(j + 3) * acs]};
            axpy4x2(o0, o1, aj, bj, x + j * xs, x + (j + 1) * xs, x + (j + 2) * xs,
                    x + (j + 3) * xs, n);
        }
        for (; j < m; j++) {
            axpy1(o0, ar[j * acs], x + j * xs, n);
            axpy1(o1, br[j * acs], x + j * xs, n);
        }
    }
    for (; r < nrows; r++) {
        const float *ar = a + r * ars;
        float *o0 = out + r * os;
        int j = 0;
        for (; j + 4 <= m; j += 4) {
            const float aj[4] = {ar[j * acs], ar[(j + 1) * acs], ar[(j + 2) * acs],
                                 ar[(j + 3) * acs]};
            axpy4(o0, aj, x + j * xs, x + (j + 1) * xs, x + (j + 2) * xs, x + (j + 3) * xs, n);
        }
        for (; j < m; j++)
            axpy1(o0, ar[j * acs], x + j * xs, n);
    }
}

/* s[i][0:BC] = sum_d a_i[d] bt[d][0:BC] for i < nr: one [nr, hs] x [hs, BC] tile product,
 * with bt the transposed key (or value) tile packed by pack_t. */
INLINE void tile_abt(float *restrict s, const float *a, int64_t a_stride, const float *bt,
                     int nr, int hs, band bd, const int isa) {
    if (nr <= 0) /* also tells GCC the memset size cannot be negative */
        return;
    memset(s, 0, sizeof(float) * (size_t)nr * BC);
    gemm_acc(s, BC, nr, a, a_stride, 1, bt, BC, hs, BC, bd, isa);
}

/* x rounded to bf16 (nearest even) and back: the operand a bf16 matmul would see */
static inline float bf16_round(float x) { return dt_bf16_to_f32(dt_bf16_from_f32(x)); }

/* element i of an operand array: fp32, or bf16 (io16: the 16-bit entry points) */
static inline float ld(const void *p, int64_t i, bool io16) {
    return io16 ? dt_bf16_to_f32(((const dt_bf16 *)p)[i]) : ((const float *)p)[i];
}

/* dst[i][0:n] = src[off + i*stride + 0:n] for i < nr, rounded to bf16 when `round`: a tile of
 * operand rows (bf16 mode) */
INLINE void pack_round(float *restrict dst, const void *src, int64_t off, int64_t stride, int nr,
                       int n, bool round, bool io16) {
    for (int i = 0; i < nr; i++)
        for (int d = 0; d < n; d++) {
            const float x = ld(src, off + i * stride + d, io16);
            dst[i * n + d] = round ? bf16_round(x) : x;
        }
}

/* bt[d][c] = src[c][d] (rounded to bf16 when `round`): the transpose makes the score rows
 * contiguous over keys. Columns past nc are zeroed so whole-vector loops over BC read defined
 * values. */
INLINE void pack_t(float *restrict bt, const void *src, int64_t off, int64_t stride, int nc,
                   int hs, bool round, bool io16) {
    for (int c = 0; c < nc; c++)
        for (int d = 0; d < hs; d++) {
            const float x = ld(src, off + c * stride + d, io16);
            bt[d * BC + c] = round ? bf16_round(x) : x;
        }
    if (nc < BC)
        for (int d = 0; d < hs; d++)
            memset(bt + d * BC + nc, 0, (BC - nc) * sizeof *bt);
}

/* The keys row i of a tile sees, columns [lo, lim): inside the sequence and, when causal, not
 * above the diagonal (key k0+c <= query q0+i); with documents, not before the query's
 * document (lo > 0). lo == lim: none. */
typedef struct seen {
    int lo, lim;
} seen;

static inline seen visible(const dt_attn_shape *s, int b, int i, int nc, int q0, int k0) {
    const int lim = s->causal ? imin(nc, q0 + i - k0 + 1) : nc;
    const int lo = dt_attn_doc_lo(s, b, q0 + i) - k0;
    return (seen){lo <= 0 ? 0 : imin(lo, lim), lim};
}

/* row[0:BC] = exp(scale * row - sub) on the visible columns and exactly 0 elsewhere. The
 * masked columns are zeroed after the exp rather than selected inside it (a select would let
 * GCC sink the exp into a branch and stop vectorising). */
INLINE void exp_row(float *row, float scale, float sub, seen v) {
#pragma omp simd
    for (int c = 0; c < BC; c++)
        row[c] = dt_vexp(row[c] * scale - sub);
    memset(row, 0, v.lo * sizeof *row);
    if (v.lim < BC)
        memset(row + v.lim, 0, (BC - v.lim) * sizeof *row);
}

/* The first key tile any query of the tile at q0 sees (documents start no earlier than the
 * tile's first query's) */
static inline int first_key_tile(const dt_attn_shape *s, int b, int q0) {
    return dt_attn_doc_lo(s, b, q0) / BC * BC;
}

/* The operands of one call: fp32, or (io16) q, k, v in bf16 and (y16) y in bf16; io16
 * implies bf16 mode. */
typedef struct io {
    const void *q, *k, *v;
    void *y;
    const float *dy;
    float *lse, *dq, *dk, *dv;
    bool io16, y16, set;
} io;

/* One query tile of one (b, h) through all its key tiles: alg. 1 of the FlashAttention paper.
 * The running max m and sum l rescale the output accumulator whenever the max grows, so the
 * result equals softmax(S) V without keeping S. */
INLINE void fwd_tile(const dt_attn_shape *s, int b, int h, int q0, const io *x, const int isa) {
    const int T = s->T, hs = s->hs, nr = imin(BR, T - q0);
    const int kvh = h / (s->NH / s->NKV);
    const int64_t qoff = ((int64_t)b * T + q0) * s->q_stride + (int64_t)h * hs;
    const int64_t kvoff = (int64_t)b * T * s->kv_stride + (int64_t)kvh * hs;
    float kt[hs * BC], o[BR * hs];
    float sc[BR * BC], m[BR], l[BR];
    /* bf16 mode: q, k, P and v rounded (qr, vr) */
    const bool bf = s->bf16 || x->io16;
    float qr[bf ? BR * hs : 1], vr[bf ? BC * hs : 1];
    const float *qa = (const float *)x->q + qoff;
    int64_t qas = s->q_stride;
    if (bf) {
        pack_round(qr, x->q, qoff, s->q_stride, nr, hs, true, x->io16);
        qa = qr;
        qas = hs;
    }
    memset(o, 0, sizeof(float) * nr * hs);
    for (int i = 0; i < nr; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const int kend = s->causal ? q0 + nr : T;
    for (int k0 = first_key_tile(s, b, q0); k0 < kend; k0 += BC) {
        const int nc = imin(BC, kend - k0);
        const int64_t koff = kvoff + (int64_t)k0 * s->kv_stride;
        pack_t(kt, x->k, koff, s->kv_stride, nc, hs, bf, x->io16);
        /* query q0+i sees key k0+c iff c <= i + (q0 - k0): that bounds the score columns,
         * and the keys j summed over in P v */
        const int off = q0 - k0;
        const band cols = s->causal ? (band){1 << 29, 1 << 29, off} : NO_BAND;
        const band diag = s->causal ? (band){1 << 29, off, 1 << 29} : NO_BAND;
        tile_abt(sc, qa, qas, kt, nr, hs, cols, isa);
        for (int i = 0; i < nr; i++) {
            float *row = sc + i * BC;
            const seen v = visible(s, b, i, nc, q0, k0);
            if (v.lo == v.lim) { /* a row of documents that start later: nothing to add */
                memset(row, 0, BC * sizeof *row);
                continue;
            }
            const float scale = s->scale;
            float mx = m[i], sum = 0.0f;
#pragma omp simd reduction(max : mx)
            for (int c = v.lo; c < v.lim; c++)
                mx = row[c] * scale > mx ? row[c] * scale : mx;
            /* the first tile a row sees a key in makes m finite; alpha = e^(m_old - m_new) is
             * 0 exactly once, there */
            const float alpha = m[i] == -INFINITY ? 0.0f : dt_vexp(m[i] - mx);
            exp_row(row, s->scale, mx, v);
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < BC; c++)
                sum += row[c];
            l[i] = l[i] * alpha + sum;
            m[i] = mx;
            if (bf)
                for (int c = v.lo; c < v.lim; c++)
                    row[c] = bf16_round(row[c]);
            if (alpha != 1.0f) {
                float *oi = o + i * hs;
#pragma omp simd
                for (int d = 0; d < hs; d++)
                    oi[d] *= alpha;
            }
        }
        if (bf) {
            pack_round(vr, x->v, koff, s->kv_stride, nc, hs, true, x->io16);
            gemm_acc(o, hs, nr, sc, BC, 1, vr, hs, nc, hs, diag, isa);
        } else
            gemm_acc(o, hs, nr, sc, BC, 1, (const float *)x->v + koff, s->kv_stride, nc, hs,
                     diag, isa);
    }
    const int C = s->NH * hs;
    for (int i = 0; i < nr; i++) {
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f; /* l = 0: the row saw no key */
        const int64_t yo = ((int64_t)b * T + q0 + i) * C + (int64_t)h * hs;
        for (int d = 0; d < hs; d++) {
            const float yd = o[i * hs + d] * inv;
            if (x->y16)
                ((dt_bf16 *)x->y)[yo + d] = dt_bf16_from_f32(yd);
            else
                ((float *)x->y)[yo + d] = yd;
        }
        x->lse[((int64_t)b * s->NH + h) * T + q0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

/* All gradients that flow through kv head g of batch b: alg. 2 of the FlashAttention paper,
 * key tiles outer (dk, dv tiles stay on the stack), the query heads of the group and their
 * query tiles inner. dq rows of those heads are touched by this task only, so no races.
 * set: the task zeroes its dq rows first and writes dk, dv rows instead of adding (the bits
 * of accumulating into zeros), so the caller need not zero the whole gradient. bf16 mode: the
 * operands of the five products (q, k; dy, v; P, dS) are rounded to bf16, the sums stay fp32. */
INLINE void bwd_task(const dt_attn_shape *s, int b, int g, const io *x, const int isa) {
    const int T = s->T, hs = s->hs, C = s->NH * hs, group = s->NH / s->NKV;
    const int64_t qs = s->q_stride, kvs = s->kv_stride;
    const int64_t kv_off = (int64_t)b * T * kvs + (int64_t)g * hs;
    for (int t = 0; x->set && t < T; t++)
        memset(x->dq + ((int64_t)b * T + t) * qs + (int64_t)g * group * hs, 0,
               sizeof(float) * group * hs);
    const bool bf = s->bf16 || x->io16;
    float kt[hs * BC], vt[hs * BC], dkt[BC * hs], dvt[BC * hs];
    float p[BR * BC], ds[BR * BC], dd[BR];
    /* bf16 mode: rounded rows of k, q, dy and a rounded copy of P */
    float kr[bf ? BC * hs : 1], qr[bf ? BR * hs : 1], dyr[bf ? BR * hs : 1], pr[bf ? BR * BC : 1];
    for (int k0 = 0; k0 < T; k0 += BC) {
        const int nc = imin(BC, T - k0);
        const int64_t koff = kv_off + (int64_t)k0 * kvs;
        pack_t(kt, x->k, koff, kvs, nc, hs, bf, x->io16);
        pack_t(vt, x->v, koff, kvs, nc, hs, bf, x->io16);
        const float *ka = (const float *)x->k + koff;
        int64_t kas = kvs;
        if (bf) {
            pack_round(kr, x->k, koff, kvs, nc, hs, true, x->io16);
            ka = kr;
            kas = hs;
        }
        memset(dkt, 0, sizeof(float) * nc * hs);
        memset(dvt, 0, sizeof(float) * nc * hs);
        for (int h = g * group; h < (g + 1) * group; h++) {
            /* causal: queries before k0 see none of these keys; documents: nor do queries
             * whose document starts past them, and those of later tiles start later still */
            for (int q0 = s->causal ? k0 : 0; q0 < T && dt_attn_doc_lo(s, b, q0) < k0 + nc;
                 q0 += BR) {
                const int nr = imin(BR, T - q0);
                const int64_t row0 = (int64_t)b * T + q0;
                const int64_t qoff = row0 * qs + (int64_t)h * hs, yoff = row0 * C + (int64_t)h * hs;
                const float *qa = (const float *)x->q + qoff, *dya = x->dy + yoff;
                int64_t qas = qs, dyas = C;
                if (bf) {
                    pack_round(qr, x->q, qoff, qs, nr, hs, true, x->io16);
                    pack_round(dyr, x->dy, yoff, C, nr, hs, true, false);
                    qa = qr;
                    dya = dyr;
                    qas = dyas = hs;
                }
                const float *lb = x->lse + ((int64_t)b * s->NH + h) * T + q0;
                float *dqb = x->dq + qoff;
                /* P = exp(S - lse): the forward's softmax, rebuilt from the saved lse */
                /* key c is visible to query i iff c <= i + off: it bounds the score columns
                 * of a query row, the keys summed into dq, and (i >= c - off) the queries
                 * summed into dk, dv */
                const int off = q0 - k0;
                const band cols = s->causal ? (band){1 << 29, 1 << 29, off} : NO_BAND;
                const band qrows = s->causal ? (band){1 << 29, off, 1 << 29} : NO_BAND;
                const band krows = s->causal ? (band){off, 1 << 29, 1 << 29} : NO_BAND;
                tile_abt(p, qa, qas, kt, nr, hs, cols, isa);
                for (int i = 0; i < nr; i++) {
                    exp_row(p + i * BC, s->scale, lb[i], visible(s, b, i, nc, q0, k0));
                    /* D_i = rowsum(dy_i * y_i) = sum_j P_ij dP_ij (alg. 2, line 19), of the
                     * dy that dP sees */
                    float acc = 0.0f;
                    for (int d = 0; d < hs; d++)
                        acc += dya[i * dyas + d] * ld(x->y, yoff + i * C + d, x->y16);
                    dd[i] = acc;
                }
                /* dP = dy v^T, then dS = P (dP - D), pre-multiplied by scale for dq and dk */
                tile_abt(ds, dya, dyas, vt, nr, hs, cols, isa);
                for (int i = 0; i < nr; i++) {
                    float *dsr = ds + i * BC;
                    const float *pi = p + i * BC, di = dd[i], sc = s->scale;
#pragma omp simd
                    for (int c = 0; c < BC; c++)
                        dsr[c] = pi[c] * (dsr[c] - di) * sc;
                }
                const float *pa = p;
                if (bf) {
                    for (int e = 0; e < nr * BC; e++) {
                        pr[e] = bf16_round(p[e]);
                        ds[e] = bf16_round(ds[e]);
                    }
                    pa = pr;
                }
                gemm_acc(dqb, qs, nr, ds, BC, 1, ka, kas, nc, hs, qrows, isa);  /* dq += dS k */
                gemm_acc(dvt, hs, nc, pa, 1, BC, dya, dyas, nr, hs, krows, isa); /* dv += P^T dy */
                gemm_acc(dkt, hs, nc, ds, 1, BC, qa, qas, nr, hs, krows, isa);  /* dk += dS^T q */
            }
        }
        for (int c = 0; c < nc; c++) {
            float *dkr = x->dk + kv_off + (int64_t)(k0 + c) * kvs;
            float *dvr = x->dv + kv_off + (int64_t)(k0 + c) * kvs;
            if (x->set) {
                memcpy(dkr, dkt + c * hs, sizeof(float) * hs);
                memcpy(dvr, dvt + c * hs, sizeof(float) * hs);
            } else {
                axpy1(dkr, 1.0f, dkt + c * hs, hs);
                axpy1(dvr, 1.0f, dvt + c * hs, hs);
            }
        }
    }
}

/* Heavy causal tiles (late queries) are handed out first for a better dynamic balance. */
INLINE void fwd_task(const dt_attn_shape *s, int task, const io *x, const int isa) {
    const int nqt = (s->T + BR - 1) / BR;
    const int qt = nqt - 1 - task % nqt, bh = task / nqt;
    fwd_tile(s, bh / s->NH, bh % s->NH, qt * BR, x, isa);
}

/* One clone of the task bodies per variant; the AVX-512-BF16 machines run the AVX-512 clone
 * where attn_bf16.c does not apply (fp32 mode, head sizes not a multiple of 16). */
static void fwd_base(const dt_attn_shape *s, int t, const io *x) { fwd_task(s, t, x, V_BASE); }
TARGET_AVX2 static void fwd_avx2(const dt_attn_shape *s, int t, const io *x) {
    fwd_task(s, t, x, V_AVX2);
}
TARGET_AVX512 static void fwd_avx512(const dt_attn_shape *s, int t, const io *x) {
    fwd_task(s, t, x, V_AVX512);
}
static void bwd_base(const dt_attn_shape *s, int b, int g, const io *x) {
    bwd_task(s, b, g, x, V_BASE);
}
TARGET_AVX2 static void bwd_avx2(const dt_attn_shape *s, int b, int g, const io *x) {
    bwd_task(s, b, g, x, V_AVX2);
}
TARGET_AVX512 static void bwd_avx512(const dt_attn_shape *s, int b, int g, const io *x) {
    bwd_task(s, b, g, x, V_AVX512);
}

static void (*const FWD[DT_ISA_COUNT])(const dt_attn_shape *, int, const io *) = {
    fwd_base, fwd_avx2, fwd_avx512, fwd_avx512};
static void (*const BWD[DT_ISA_COUNT])(const dt_attn_shape *, int, int, const io *) = {
    bwd_base, bwd_avx2, bwd_avx512, bwd_avx512};

static bool use_ref(const dt_attn_shape *s) {
    return s->hs > MAX_HS || s->hs <= 0 || s->NKV <= 0 || s->NH % s->NKV != 0;
}

/* attn_bf16.c takes bf16 mode on AVX512_BF16 machines for head sizes of whole vectors */
static bool use_dpbf16(const dt_attn_shape *s, bool io16) {
    return (s->bf16 || io16) && s->hs % 16 == 0 && dt_isa_pick(DT_ISA_AVX512BF16) == DT_ISA_AVX512BF16;
}

static void forward(const dt_attn_shape *s, const io *x) {
    if (use_dpbf16(s, x->io16) &&
        dt_attn_bf16_forward(s, x->y, x->lse, x->q, x->k, x->v, x->io16, x->y16))
        return;
    const int n_tasks = s->B * s->NH * ((s->T + BR - 1) / BR);
    void (*const f)(const dt_attn_shape *, int, const io *) = FWD[dt_isa_pick(DT_ISA_AVX512BF16)];
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < n_tasks; t++)
        f(s, t, x);
}

static void backward(const dt_attn_shape *s, const io *x) {
    if (use_dpbf16(s, x->io16) &&
        dt_attn_bf16_backward(s, x->dq, x->dk, x->dv, x->dy, x->y, x->lse, x->q, x->k, x->v,
                              x->io16, x->y16, x->set))
        return;
    const int n_tasks = s->B * s->NKV;
    void (*const f)(const dt_attn_shape *, int, int, const io *) =
        BWD[dt_isa_pick(DT_ISA_AVX512BF16)];
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < n_tasks; t++)
        f(s, t / s->NKV, t % s->NKV, x);
}

void dt_attention_forward(const dt_attn_shape *s, float *y, float *lse, const float *q,
                          const float *k, const float *v) {
    if (use_ref(s))
        dt_attention_forward_ref(s, y, lse, q, k, v);
    else
        forward(s, &(io){.q = q, .k = k, .v = v, .y = y, .lse = lse});
}

static void backward_f32(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                         const float *dy, const float *y, const float *lse, const float *q,
                         const float *k, const float *v, bool set) {
    if (use_ref(s)) {
        if (set) /* the reference accumulates: zero the rows of q, k and v first */
            for (int64_t r = 0; r < (int64_t)s->B * s->T; r++) {
                memset(dq + r * s->q_stride, 0, sizeof(float) * s->NH * s->hs);
                memset(dk + r * s->kv_stride, 0, sizeof(float) * s->NKV * s->hs);
                memset(dv + r * s->kv_stride, 0, sizeof(float) * s->NKV * s->hs);
            }
        dt_attention_backward_ref(s, dq, dk, dv, dy, y, lse, q, k, v);
        return;
    }
    backward(s, &(io){.q = q, .k = k, .v = v, .y = (void *)y, .dy = dy, .lse = (float *)lse,
                      .dq = dq, .dk = dk, .dv = dv, .set = set});
}

void dt_attention_backward(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                           const float *dy, const float *y, const float *lse, const float *q,
                           const float *k, const float *v) {
    backward_f32(s, dq, dk, dv, dy, y, lse, q, k, v, false);
}

void dt_attention_backward_set(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                               const float *dy, const float *y, const float *lse,
                               const float *q, const float *k, const float *v) {
    backward_f32(s, dq, dk, dv, dy, y, lse, q, k, v, true);
}

/* hs > MAX_HS in bf16 storage: the reference on fp32 copies (exact: bf16 values are fp32's) */
static float *widen(const dt_bf16 *a, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; f && i < n; i++)
        f[i] = dt_bf16_to_f32(a[i]);
    return f;
}

/* elements spanned by B*T rows of stride `stride` whose last row holds `width` values */
static int64_t span(const dt_attn_shape *s, int64_t stride, int64_t width) {
    return ((int64_t)s->B * s->T - 1) * stride + width;
}

/* The fp32 copies the reference path runs on: q, k, v, and y when it is bf16 (y16): widened
 * from it (read_y, the backward) or room for the forward to write. y itself otherwise. */
typedef struct wide_ops {
    float *q, *k, *v, *y;
    bool y_owned;
} wide_ops;

static void wide_free(wide_ops *w) {
    free(w->q);
    free(w->k);
    free(w->v);
    if (w->y_owned)
        free(w->y);
}

static dt_status widen_ops(const dt_attn_shape *s, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, void *y, bool y16, bool read_y, wide_ops *w) {
    const int64_t nkv = span(s, s->kv_stride, (int64_t)s->NKV * s->hs);
    const int64_t ny = (int64_t)s->B * s->T * s->NH * s->hs;
    *w = (wide_ops){.q = widen(q, span(s, s->q_stride, (int64_t)s->NH * s->hs)),
                    .k = widen(k, nkv), .v = widen(v, nkv), .y = y, .y_owned = y16};
    if (y16)
        w->y = read_y ? widen(y, ny) : malloc(sizeof(float) * (size_t)(ny > 0 ? ny : 1));
    if (w->q && w->k && w->v && w->y)
        return DT_OK;
    wide_free(w);
    return dt_err_set(DT_ERR_OOM, "attention: no memory for fp32 copies of q, k, v (B %d, T %d, "
                      "%d heads of %d)", s->B, s->T, s->NH, s->hs);
}

dt_status dt_attention_forward_bf16(const dt_attn_shape *s, void *y, bool y16, float *lse,
                                    const uint16_t *q, const uint16_t *k, const uint16_t *v) {
    if (!use_ref(s)) {
        forward(s, &(io){.q = q, .k = k, .v = v, .y = y, .lse = lse, .io16 = true, .y16 = y16});
        return DT_OK;
    }
    wide_ops w;
    DT_TRY(widen_ops(s, q, k, v, y, y16, false, &w));
    dt_attn_shape sb = *s;
    sb.bf16 = true;
    dt_attention_forward_ref(&sb, w.y, lse, w.q, w.k, w.v);
    const int64_t ny = (int64_t)s->B * s->T * s->NH * s->hs;
    for (int64_t i = 0; y16 && i < ny; i++)
        ((dt_bf16 *)y)[i] = dt_bf16_from_f32(w.y[i]);
    wide_free(&w);
    return DT_OK;
}

dt_status dt_attention_backward_set_bf16(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                                         const float *dy, const void *y, bool y16,
                                         const float *lse, const uint16_t *q, const uint16_t *k,
                                         const uint16_t *v) {
    if (!use_ref(s)) {
        backward(s, &(io){.q = q, .k = k, .v = v, .y = (void *)y, .dy = dy, .lse = (float *)lse,
                          .dq = dq, .dk = dk, .dv = dv, .io16 = true, .y16 = y16, .set = true});
        return DT_OK;
    }
    wide_ops w;
    DT_TRY(widen_ops(s, q, k, v, (void *)y, y16, true, &w));
    dt_attn_shape sb = *s;
    sb.bf16 = true;
    backward_f32(&sb, dq, dk, dv, dy, w.y, lse, w.q, w.k, w.v, true);
    wide_free(&w);
    return DT_OK;
}
