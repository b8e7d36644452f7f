/* Attention's bf16 mode on AVX512_BF16: every product (QK^T and PV forward; QK^T again,
 * dP = dy v^T, dq = dS k, dk = dS^T q and dv = P^T dy backward) runs on vdpbf16ps, which
 * multiplies pairs of bf16 operands exactly and adds both products into fp32 accumulators.
 * Compiled with a target attribute into every build; attention.c calls it only where the CPU
 * has AVX512_BF16.
 *
 * vdpbf16ps broadcasts a pair of one operand (two consecutive elements along the summed index)
 * against 16 pairs of the other, so that operand is stored "pair-interleaved": row j of it
 * holds, for each of its 16-wide output columns, the two elements 2j and 2j+1 of the summed
 * index. A task converts (and transposes or interleaves) every operand of its head once into
 * such tiles in a per-thread scratch, and reuses them for all its query and key tiles: k and v
 * for the whole sequence, and in the backward q and dy too. The products are 4 x 64 register
 * blocks (16 accumulators); causal diagonal tiles skip the blocks that lie above the diagonal.
 * Tasks are whole heads (forward: (b, h); backward: (b, kv head)), which have equal causal
 * work, handed out dynamically; every output is produced by one task in a fixed order, so the
 * results do not depend on the thread count.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/kernels_impl.h"

/* GCC's prefer-vector-width lets its loops use zmm; clang ignores a target string with it */
#ifdef __clang__
#define PREFER_512 ""
#else
#define PREFER_512 ",prefer-vector-width=512"
#endif
#define TARGET_BF16 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma" PREFER_512)))
#define INLINE static inline __attribute__((always_inline))

enum { TBR = 64, TBC = 64 }; /* query rows and keys per tile */
/* the band of a causal tile pair (off = q0 - k0 >= 0): query i sees key c iff c <= i + off */
enum { BAND_NONE, BAND_COLS, BAND_KEYS, BAND_QUERIES };

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* 16 elements as fp32: from fp32, or from bf16 (io16) */
INLINE TARGET_BF16 __m512 load16(const void *p, int64_t i, bool io16) {
    if (io16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))),
            16));
    return _mm512_loadu_ps((const float *)p + i);
}

INLINE TARGET_BF16 __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

/* 16 elements as bf16: bf16 storage is copied as it is (rounding a bf16 value to bf16 is the
 * identity), fp32 is rounded */
INLINE TARGET_BF16 __m256i load_bf16x16(const void *p, int64_t i, bool io16) {
    if (io16)
        return _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return to_bf16(_mm512_loadu_ps((const float *)p + i));
}

/* The operands are rows of hs elements at a large stride in the layer's buffers, read once per
 * task: the row AHEAD rows on is fetched while this one is converted. */
enum { AHEAD = 6 };
INLINE void prefetch_row(const void *p, int64_t i, int n, bool io16) {
    const char *a = io16 ? (const char *)((const uint16_t *)p + i) : (const char *)((const float *)p + i);
    for (int b = 0; b < n * (io16 ? 2 : 4); b += 64)
        __builtin_prefetch(a + b, 0, 3);
}

/* dst[i][0:n/2] = the bf16 pairs of row i of src (n % 16 == 0): a left operand, rows as
 * they are */
INLINE TARGET_BF16 void pack_rows(uint32_t *dst, const void *src, int64_t off, int64_t stride,
                                  int nr, int n, bool io16) {
    for (int i = 0; i < nr; i++) {
        if (i + AHEAD < nr)
            prefetch_row(src, off + (i + AHEAD) * stride, n, io16);
        for (int d = 0; d < n; d += 16)
            _mm256_storeu_si256((__m256i *)(dst + (int64_t)i * (n / 2) + d / 2),
                                load_bf16x16(src, off + i * stride + d, io16));
    }
}

/* The 16 pairs (lo[c], hi[c]) of two rows' 16 bf16 values, as vdpbf16ps takes them */
INLINE TARGET_BF16 __m512i interleave16(__m256i lo, __m256i hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

/* dst[j][0:n] = the pairs (src[2j][c], src[2j+1][c]) for j < (nr+1)/2, a missing odd row as
 * zeros: an operand summed over its rows, interleaved (n % 16 == 0) */
INLINE TARGET_BF16 void pack_interleave(uint32_t *dst, const void *src, int64_t off, int64_t stride,
                                        int nr, int n, bool io16) {
    for (int j = 0; j < (nr + 1) / 2; j++) {
        for (int a = 2 * j + AHEAD; a < 2 * j + AHEAD + 2 && a < nr; a++)
            prefetch_row(src, off + a * stride, n, io16);
        for (int c = 0; c < n; c += 16) {
            const __m256i lo = load_bf16x16(src, off + 2 * j * stride + c, io16);
            const __m256i hi = 2 * j + 1 < nr
                                   ? load_bf16x16(src, off + (2 * j + 1) * stride + c, io16)
                                   : _mm256_setzero_si256();
            _mm512_storeu_si512(dst + (int64_t)j * n + c, interleave16(lo, hi));
        }
    }
}

/* dst[j][c] = the pair (src[c][2j], src[c][2j+1]) for c < TBC (keys past nc zero), j < hs/2:
 * one key tile transposed, the right operand of q k^T and dy v^T */
INLINE TARGET_BF16 void pack_transposed(uint32_t *dst, const void *src, int64_t off,
                                        int64_t stride, int nc, int hs, bool io16) {
    uint32_t rows[TBC * (hs / 2)];
    pack_rows(rows, src, off, stride, nc, hs, io16);
    for (int j = 0; j < hs / 2; j++) {
        int c = 0;
        for (; c < nc; c++)
            dst[j * TBC + c] = rows[c * (hs / 2) + j];
        for (; c < TBC; c++)
            dst[j * TBC + c] = 0;
    }
}

/* R rows x NCH 16-float vectors of out in registers through the j loop:
 * out[r][c] (+)= sum_{jlo <= j < jhi} dot2(a[r*ars + j*acs], b[j*ldb + c]) */
INLINE TARGET_BF16 void block(float *out, int64_t os, const uint32_t *a, int64_t ars,
                              int64_t acs, const uint32_t *b, int64_t ldb, int jlo, int jhi,
                              bool acc, const int R, const int NCH) {
    __m512 c[4][4];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < NCH; h++)
            c[r][h] = acc ? _mm512_loadu_ps(out + r * os + 16 * h) : _mm512_setzero_ps();
    for (int j = jlo; j < jhi; j++) {
        __m512bh x[4];
        for (int h = 0; h < NCH; h++)
            x[h] = (__m512bh)_mm512_loadu_si512(b + (int64_t)j * ldb + 16 * h);
        for (int r = 0; r < R; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r * ars + j * acs]);
            for (int h = 0; h < NCH; h++)
                c[r][h] = _mm512_dpbf16_ps(c[r][h], ar, x[h]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < NCH; h++)
            _mm512_storeu_ps(out + r * os + 16 * h, c[r][h]);
}

/* out[r][0:n] (+)= sum_{j < K2} dot2(a[r*ars + j*acs], b[j*ldb + 0:n]) for r < nr, n % 16 == 0.
 * The band of a causal diagonal tile skips what is known to be zero or unused: BAND_COLS
 * (out = scores, rows queries, columns keys) leaves the columns past r + off unwritten;
 * BAND_KEYS (rows queries, summed over key pairs) stops at the pair holding key r + off;
 * BAND_QUERIES (rows keys, summed over query pairs) starts at the pair holding query r - off. */
static TARGET_BF16 void mm(float *out, int64_t os, int nr, const uint32_t *a, int64_t ars,
                           int64_t acs, const uint32_t *b, int64_t ldb, int K2, int n, bool acc,
                           int band, int off) {
    for (int r = 0; r < nr; r += 4) {
        const int R = imin(4, nr - r), last = r + R - 1;
        int jlo = 0, jhi = K2, chi = n;
        if (band == BAND_COLS)
            chi = imin(n, last + off + 1);
        else if (band == BAND_KEYS)
            jhi = imin(K2, (last + off) / 2 + 1);
        else if (band == BAND_QUERIES)
            jlo = imax(0, (r - off) / 2);
        for (int c0 = 0; c0 < chi; c0 += 64) {
            const int nch = imin(4, (chi - c0 + 15) / 16);
            float *o = out + r * os + c0;
            const uint32_t *ab = a + r * ars, *bb = b + c0;
#define BLK(RR, NN) \
    case (RR - 1) * 4 + NN - 1: block(o, os, ab, ars, acs, bb, ldb, jlo, jhi, acc, RR, NN); break;
            switch ((R - 1) * 4 + nch - 1) {
                BLK(1, 1) BLK(1, 2) BLK(1, 3) BLK(1, 4) BLK(2, 1) BLK(2, 2) BLK(2, 3) BLK(2, 4)
                BLK(3, 1) BLK(3, 2) BLK(3, 3) BLK(3, 4) BLK(4, 1) BLK(4, 2) BLK(4, 3) BLK(4, 4)
            }
#undef BLK
        }
    }
}

static inline int vis(int i, int nc, int off, bool causal) { return causal ? imin(nc, i + off + 1) : nc; }

/* the first key column row q0 + i of a tile sees past its document's start (0: all) */
static inline int doc_col(const dt_attn_shape *s, int b, int q, int k0) {
    return imax(dt_attn_doc_lo(s, b, q) - k0, 0);
}

/* the maximum of row[0:lim], 0 < lim <= TBC (a positive scale commutes with it); the last
 * vector's load is masked too, since row may start inside a tile row (documents) and a full
 * load would read past the tile */
INLINE TARGET_BF16 float row_max(const float *row, int lim) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int c = 0; c < lim; c += 16) {
        const __mmask16 k = lim - c >= 16 ? 0xffff : (__mmask16)((1u << (lim - c)) - 1);
        mx = _mm512_mask_max_ps(mx, k, mx, _mm512_maskz_loadu_ps(k, row + c));
    }
    return _mm512_reduce_max_ps(mx);
}

/* e^x for x <= 0 up to rounding (scores minus their row maximum or their lse), clamped below at
 * -87.3 so results stay normal floats, as dt_vexp does it (Cody-Waite reduction, degree-7
 * Taylor polynomial, about 2 ulp) with fused multiply-adds: the compiled dt_vexp loop's
 * separate multiplies and adds made the softmax rows a third of the forward. Lanes past a
 * row's keys may overflow to inf; the callers' masks drop them. */
INLINE TARGET_BF16 __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* the lanes c0 + [0, 16) that lie below lim */
INLINE __mmask16 below(int c0, int lim) {
    return lim - c0 >= 16 ? 0xffff : lim <= c0 ? 0 : (__mmask16)((1u << (lim - c0)) - 1);
}

/* the lanes c0 + [0, 16) in [lo, lim) */
INLINE __mmask16 within(int c0, int lo, int lim) {
    return (__mmask16)(below(c0, lim) & ~below(c0, lo));
}

/* One forward score row: dst (TBC/2 words) = bf16(e^(row*scale - mx)) on columns [lo, lim),
 * exact zeros elsewhere; returns the sum of the fp32 values before rounding. */
INLINE TARGET_BF16 float softmax_row_bf16(uint32_t *dst, const float *row, float scale, float mx,
                                          int lo, int lim) {
    const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < TBC; c += 16) {
        const __mmask16 k = within(c, lo, lim);
        const __m512 e = _mm512_maskz_mov_ps(
            k, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, row + c), vs, vm)));
        sum = _mm512_add_ps(sum, e);
        _mm256_storeu_si256((__m256i *)(dst + c / 2), to_bf16(e));
    }
    return _mm512_reduce_add_ps(sum);
}

/* ---- forward: one (b, h) per task, alg. 1 of the FlashAttention paper ---- */

/* scratch words of one forward task: k transposed per key tile [tiles][hs/2][TBC], then v
 * interleaved over key pairs [(T+1)/2][hs] */
static size_t fwd_words(int T, int hs) {
    return (size_t)((T + TBC - 1) / TBC) * TBC * (hs / 2) + (size_t)((T + 1) / 2) * hs;
}

static TARGET_BF16 void fwd_head(const dt_attn_shape *s, int b, int h, void *y, float *lse,
                                 const void *q, const void *k, const void *v, bool io16,
                                 bool y16, uint32_t *w) {
    const int T = s->T, hs = s->hs, H2 = hs / 2, C = s->NH * hs, kvh = h / (s->NH / s->NKV);
    const int64_t qs = s->q_stride, kvs = s->kv_stride;
    const int64_t qoff = (int64_t)b * T * qs + (int64_t)h * hs;
    const int64_t kvoff = (int64_t)b * T * kvs + (int64_t)kvh * hs;
    uint32_t *kt = w, *vi = w + (size_t)((T + TBC - 1) / TBC) * TBC * H2;
    for (int k0 = 0; k0 < T; k0 += TBC)
        pack_transposed(kt + (int64_t)k0 * H2, k, kvoff + k0 * kvs, kvs, imin(TBC, T - k0), hs,
                        io16);
    pack_interleave(vi, v, kvoff, kvs, T, hs, io16);
    uint32_t qp[TBR * H2], pp[TBR * TBC / 2];
    float sc[TBR * TBC], o[TBR * hs], m[TBR], l[TBR];
    const float scale = s->scale;
    for (int q0 = 0; q0 < T; q0 += TBR) {
        const int nr = imin(TBR, T - q0);
        pack_rows(qp, q, qoff + q0 * qs, qs, nr, hs, io16);
        for (int i = 0; i < nr; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        const int kend = s->causal ? q0 + nr : T;
        /* documents: no query of the tile sees keys before its first query's document */
        const int kfirst = dt_attn_doc_lo(s, b, q0) / TBC * TBC;
        for (int k0 = kfirst; k0 < kend; k0 += TBC) {
            const int nc = imin(TBC, kend - k0), off = q0 - k0;
            mm(sc, TBC, nr, qp, H2, 1, kt + (int64_t)k0 * H2, TBC, H2, TBC, false,
               s->causal ? BAND_COLS : BAND_NONE, off);
            for (int i = 0; i < nr; i++) {
                const float *row = sc + i * TBC;
                const int lim = vis(i, nc, off, s->causal),
                          lo = imin(doc_col(s, b, q0 + i, k0), lim);
                float mx = m[i];
                if (lo == lim) /* nothing seen here: an all-zero row leaves m and l */
                    ;
                else if (scale > 0.0f)
                    mx = fmaxf(mx, row_max(row + lo, lim - lo) * scale);
                else
                    for (int c = lo; c < lim; c++)
                        mx = fmaxf(mx, row[c] * scale);
                /* the first tile a row sees a key in makes m finite; alpha is 0 exactly once,
                 * there (and 1 while the row sees nothing: 0 * anything stays 0) */
                const float alpha = m[i] == -INFINITY ? 0.0f : dt_vexp(m[i] - mx);
                l[i] = l[i] * alpha + softmax_row_bf16(pp + i * (TBC / 2), row, scale, mx, lo, lim);
                m[i] = mx;
                if (k0 > kfirst && alpha != 1.0f) { /* o is first written at kfirst */
                    float *oi = o + i * hs;
#pragma omp simd
                    for (int d = 0; d < hs; d++)
                        oi[d] *= alpha;
                }
            }
            mm(o, hs, nr, pp, TBC / 2, 1, vi + (int64_t)(k0 / 2) * hs, hs, (nc + 1) / 2, hs,
               k0 > kfirst, s->causal ? BAND_KEYS : BAND_NONE, off);
        }
        if (kfirst >= kend) /* no key seen by the whole tile (documents) */
            memset(o, 0, sizeof(float) * nr * hs);
        for (int i = 0; i < nr; i++) {
            /* l = 0: the row saw no key (documents): y = 0, lse = -inf */
            const __m512 inv = _mm512_set1_ps(l[i] > 0.0f ? 1.0f / l[i] : 0.0f);
            const int64_t yo = ((int64_t)b * T + q0 + i) * C + (int64_t)h * hs;
            for (int d = 0; d < hs; d += 16) {
                const __m512 yv = _mm512_mul_ps(_mm512_loadu_ps(o + i * hs + d), inv);
                if (y16)
                    _mm256_storeu_si256((__m256i *)((uint16_t *)y + yo + d), to_bf16(yv));
                else
                    _mm512_storeu_ps((float *)y + yo + d, yv);
            }
            lse[((int64_t)b * s->NH + h) * T + q0 + i] =
                l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
        }
    }
}

bool dt_attn_bf16_forward(const dt_attn_shape *s, void *y, float *lse, const void *q,
                          const void *k, const void *v, bool io16, bool y16) {
    const size_t per = fwd_words(s->T, s->hs);
    uint32_t *buf = malloc(sizeof(uint32_t) * per * (size_t)omp_get_max_threads());
    if (!buf)
        return false;
    const int n_tasks = s->B * s->NH;
#pragma omp parallel
    {
        uint32_t *w = buf + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < n_tasks; t++)
            fwd_head(s, t / s->NH, t % s->NH, y, lse, q, k, v, io16, y16, w);
    }
    free(buf);
    return true;
}

/* ---- backward: one (b, kv head) per task, alg. 2 ---- */

/* scratch of one backward task, carved from one block of words */
typedef struct bwd_scratch {
    uint32_t *kt, *vt;    /* [tiles][hs/2][TBC]: k, v transposed per key tile */
    uint32_t *ki;         /* [(T+1)/2][hs]: k interleaved over key pairs */
    uint32_t *qr, *dyr;   /* [T][hs/2]: rows of one head's q, dy */
    uint32_t *qi, *dyi;   /* [(T+1)/2][hs]: interleaved over query pairs */
    float *dd, *dk, *dv;  /* [T]: rowsum(bf16(dy) y); [T][hs]: dk, dv of the task */
} bwd_scratch;

/* sizes of the bwd_scratch arrays, in words, in the order of the struct */
static void bwd_sizes(size_t size[10], int T, int hs) {
    const size_t tiles = (size_t)((T + TBC - 1) / TBC) * TBC * (hs / 2);
    const size_t rows = (size_t)T * (hs / 2), pairs = (size_t)((T + 1) / 2) * hs;
    const size_t sz[10] = {tiles, tiles, pairs, rows, rows, pairs, pairs, (size_t)T,
                           (size_t)T * hs, (size_t)T * hs};
    memcpy(size, sz, sizeof sz);
}

static size_t bwd_words(int T, int hs) {
    size_t size[10], n = 0;
    bwd_sizes(size, T, hs);
    for (int i = 0; i < 10; i++)
        n += size[i];
    return n;
}

static void bwd_carve(bwd_scratch *w, uint32_t *p, int T, int hs) {
    size_t size[10];
    bwd_sizes(size, T, hs);
    uint32_t **slot[7] = {&w->kt, &w->vt, &w->ki, &w->qr, &w->dyr, &w->qi, &w->dyi};
    for (int i = 0; i < 7; i++) {
        *slot[i] = p;
        p += size[i];
    }
    w->dd = (float *)p;
    w->dk = w->dd + size[7];
    w->dv = w->dk + size[8];
}

/* bf16(x) as fp32 */
INLINE TARGET_BF16 __m512 round16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(x)), 16));
}

/* P = e^(S scale - lse) and dS = P (dP - D) scale for 16 keys of one query row (lanes outside
 * k exact zeros) */
INLINE TARGET_BF16 void p_ds16(const float *sr, const float *dr, float scale, float li, float di,
                               __mmask16 k, __m512 *p, __m512 *ds) {
    const __m512 vs = _mm512_set1_ps(scale);
    *p = _mm512_maskz_mov_ps(
        k, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, sr), vs, _mm512_set1_ps(li))));
    *ds = _mm512_maskz_mul_ps(
        k, _mm512_mul_ps(*p, _mm512_sub_ps(_mm512_loadu_ps(dr), _mm512_set1_ps(di))), vs);
}

/* The keys [lo, lim) a query row of a backward tile pair sees */
typedef struct seen {
    int lo, lim;
} seen;

static inline seen seen_by(const dt_attn_shape *s, int b, int q0, int i, int k0, int nc) {
    const int lim = vis(i, nc, q0 - k0, s->causal);
    return (seen){imin(doc_col(s, b, q0 + i, k0), lim), lim};
}

/* Query rows i and i + 1 (a missing last row as zeros) of a backward tile pair, from the score
 * tile p and the dP tile ds to the three bf16 operands of the products that follow, with no fp32
 * copy between: dS as rows (dsr, for dq), P and dS interleaved over the row pair (pi, dsi, for
 * dv and dk). r0, r1: the keys each row sees. */
INLINE TARGET_BF16 void grad_row_pair(uint32_t *dsr, uint32_t *pi, uint32_t *dsi, const float *p,
                                      const float *ds, int i, int nr, const float *lse,
                                      const float *dd, float scale, seen r0, seen r1) {
    const bool two = i + 1 < nr;
    for (int c = 0; c < TBC; c += 16) {
        __m512 p0, d0, p1 = _mm512_setzero_ps(), d1 = _mm512_setzero_ps();
        p_ds16(p + i * TBC + c, ds + i * TBC + c, scale, lse[i], dd[i], within(c, r0.lo, r0.lim),
               &p0, &d0);
        if (two)
            p_ds16(p + (i + 1) * TBC + c, ds + (i + 1) * TBC + c, scale, lse[i + 1], dd[i + 1],
                   within(c, r1.lo, r1.lim), &p1, &d1);
        const __m256i d0h = to_bf16(d0), d1h = to_bf16(d1);
        _mm256_storeu_si256((__m256i *)(dsr + i * (TBC / 2) + c / 2), d0h);
        if (two)
            _mm256_storeu_si256((__m256i *)(dsr + (i + 1) * (TBC / 2) + c / 2), d1h);
        _mm512_storeu_si512(pi + (i / 2) * TBC + c, interleave16(to_bf16(p0), to_bf16(p1)));
        _mm512_storeu_si512(dsi + (i / 2) * TBC + c, interleave16(d0h, d1h));
    }
}

static TARGET_BF16 void bwd_group(const dt_attn_shape *s, int b, int g, float *dq, float *dk,
                                  float *dv, const float *dy, const void *y, const float *lse,
                                  const void *q, const void *k, const void *v, bool io16,
                                  bool y16, bool set, const bwd_scratch *w) {
    const int T = s->T, hs = s->hs, H2 = hs / 2, C = s->NH * hs, group = s->NH / s->NKV;
    const int64_t qs = s->q_stride, kvs = s->kv_stride;
    const int64_t kvoff = (int64_t)b * T * kvs + (int64_t)g * hs;
    const int band_c = s->causal ? BAND_COLS : BAND_NONE;
    const int band_k = s->causal ? BAND_KEYS : BAND_NONE;
    const int band_q = s->causal ? BAND_QUERIES : BAND_NONE;
    for (int k0 = 0; k0 < T; k0 += TBC) {
        pack_transposed(w->kt + (int64_t)k0 * H2, k, kvoff + k0 * kvs, kvs, imin(TBC, T - k0),
                        hs, io16);
        pack_transposed(w->vt + (int64_t)k0 * H2, v, kvoff + k0 * kvs, kvs, imin(TBC, T - k0),
                        hs, io16);
    }
    pack_interleave(w->ki, k, kvoff, kvs, T, hs, io16);
    float p[TBR * TBC], ds[TBR * TBC];
    uint32_t dsr[TBR * TBC / 2], pi[TBR * TBC / 2], dsi[TBR * TBC / 2];
    const float scale = s->scale;
    if (s->doc_start) { /* tiles no query sees are skipped: every gradient adds into zeros */
        memset(w->dk, 0, sizeof(float) * (size_t)T * hs);
        memset(w->dv, 0, sizeof(float) * (size_t)T * hs);
        for (int t = 0; set && t < T; t++)
            memset(dq + (int64_t)b * T * qs + t * qs + (int64_t)g * group * hs, 0,
                   sizeof(float) * group * hs);
    }
    for (int h = g * group; h < (g + 1) * group; h++) {
        const int64_t qoff = (int64_t)b * T * qs + (int64_t)h * hs;
        const int64_t yoff = (int64_t)b * T * C + (int64_t)h * hs;
        const float *lh = lse + ((int64_t)b * s->NH + h) * T;
        pack_rows(w->qr, q, qoff, qs, T, hs, io16);
        pack_interleave(w->qi, q, qoff, qs, T, hs, io16);
        pack_rows(w->dyr, dy, yoff, C, T, hs, false);
        pack_interleave(w->dyi, dy, yoff, C, T, hs, false);
        for (int t = 0; t < T; t++) { /* D_t = rowsum(dy_t y_t) = sum_j P_tj dP_tj */
            if (t + AHEAD < T)
                prefetch_row(y, yoff + (t + AHEAD) * C, hs, y16);
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < hs; d += 16)
                acc = _mm512_fmadd_ps(round16(_mm512_loadu_ps(dy + yoff + t * C + d)),
                                      load16(y, yoff + t * C + d, y16), acc);
            w->dd[t] = _mm512_reduce_add_ps(acc);
        }
        for (int k0 = 0; k0 < T; k0 += TBC) {
            const int nc = imin(TBC, T - k0);
            /* causal: queries before k0 see none of these keys; documents: nor do queries
             * whose document starts past them, and those of later tiles start later still */
            for (int q0 = s->causal ? k0 : 0; q0 < T && dt_attn_doc_lo(s, b, q0) < k0 + nc;
                 q0 += TBR) {
                const int nr = imin(TBR, T - q0), off = q0 - k0;
                /* the first products into dq (with set) and into the task's dk, dv write
                 * rather than add: every row of them gets one at k0 = 0, and at the first
                 * query tile of the group's first head (with documents all were zeroed) */
                const bool dq_acc = !set || k0 > 0 || s->doc_start;
                const bool kv_acc = h > g * group || q0 > (s->causal ? k0 : 0) || s->doc_start;
                /* P = exp(S - lse), the forward's softmax; dP = dy v^T */
                mm(p, TBC, nr, w->qr + (int64_t)q0 * H2, H2, 1, w->kt + (int64_t)k0 * H2, TBC, H2,
                   TBC, false, band_c, off);
                mm(ds, TBC, nr, w->dyr + (int64_t)q0 * H2, H2, 1, w->vt + (int64_t)k0 * H2, TBC,
                   H2, TBC, false, band_c, off);
                for (int i = 0; i < nr; i += 2)
                    grad_row_pair(dsr, pi, dsi, p, ds, i, nr, lh + q0, w->dd + q0, scale,
                                  seen_by(s, b, q0, i, k0, nc), seen_by(s, b, q0, i + 1, k0, nc));
                /* dq += dS k; dk += dS^T q; dv += P^T dy */
                mm(dq + qoff + (int64_t)q0 * qs, qs, nr, dsr, TBC / 2, 1,
                   w->ki + (int64_t)(k0 / 2) * hs, hs, (nc + 1) / 2, hs, dq_acc, band_k, off);
                mm(w->dk + (int64_t)k0 * hs, hs, nc, dsi, 1, TBC, w->qi + (int64_t)(q0 / 2) * hs,
                   hs, (nr + 1) / 2, hs, kv_acc, band_q, off);
                mm(w->dv + (int64_t)k0 * hs, hs, nc, pi, 1, TBC, w->dyi + (int64_t)(q0 / 2) * hs,
                   hs, (nr + 1) / 2, hs, kv_acc, band_q, off);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        float *dkr = dk + kvoff + t * kvs, *dvr = dv + kvoff + t * kvs;
        for (int b4 = 0; t + AHEAD < T && b4 < hs * 4; b4 += 64) { /* rows written ahead */
            __builtin_prefetch((char *)(dkr + AHEAD * kvs) + b4, 1, 3);
            __builtin_prefetch((char *)(dvr + AHEAD * kvs) + b4, 1, 3);
        }
        const float *sk = w->dk + (int64_t)t * hs, *sv = w->dv + (int64_t)t * hs;
#pragma omp simd
        for (int d = 0; d < hs; d++) {
            dkr[d] = set ? sk[d] : dkr[d] + sk[d];
            dvr[d] = set ? sv[d] : dvr[d] + sv[d];
        }
    }
}

bool dt_attn_bf16_backward(const dt_attn_shape *s, float *dq, float *dk, float *dv,
                           const float *dy, const void *y, const float *lse, const void *q,
                           const void *k, const void *v, bool io16, bool y16, bool set) {
    const size_t per = bwd_words(s->T, s->hs);
    uint32_t *buf = malloc(sizeof(uint32_t) * per * (size_t)omp_get_max_threads());
    if (!buf)
        return false;
    const int n_tasks = s->B * s->NKV;
#pragma omp parallel
    {
        bwd_scratch w;
        bwd_carve(&w, buf + per * (size_t)omp_get_thread_num(), s->T, s->hs);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < n_tasks; t++)
            bwd_group(s, t / s->NKV, t % s->NKV, dq, dk, dv, dy, y, lse, q, k, v, io16, y16, set,
                      &w);
    }
    free(buf);
    return true;
}
