/* nn/ring_attn under mpirun (np 1, 2, 4): ring attention against the double-precision
 * reference kernel run on the whole sequence. Every rank makes the same whole q, k, v and dy
 * (one seed), keeps the tokens its ring place holds (dt_ring_chunks), runs the ring forward
 * and backward, and compares y, lse and dq, dk, dv with the reference's rows at those
 * positions, within 1e-5 of the largest value. Cases: causal under zigzag and contiguous
 * splits, non-causal, grouped-query heads, q|k|v interleaved in one strided buffer (as the
 * block holds them), two sequences. Also: the chunk assignment covers every chunk once, and
 * zigzag gives every rank the same number of causal (query, key) pairs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "harness.h"
#include "nn/ring_attn.h"

typedef struct ring_case {
    const char *name;
    int B, T, NH, NKV, hs;
    bool causal, zigzag;
} ring_case;

static float *fbuf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* local token t of rank `me` -> its position in the whole sequence */
static int position_of(int P, bool zigzag, int me, int T, int t) {
    int chunk[2], n = dt_ring_chunks(P, zigzag, me, chunk), Tc = T / P / n;
    return chunk[t / Tc] * Tc + t % Tc;
}

static void run_case(dt_comm *c, const ring_case *k) {
    int P = c->size, me = c->rank, B = k->B, T = k->T, Tl = T / P;
    int64_t W = (int64_t)(k->NH + 2 * k->NKV) * k->hs, A = (int64_t)k->NH * k->hs;
    int64_t ko = A, vo = A + (int64_t)k->NKV * k->hs;
    float *qkv = fbuf(B * T * W), *dy = fbuf(B * T * A), *y = fbuf(B * T * A);
    float *lse = fbuf(B * k->NH * T), *dqkv = fbuf(B * T * W);
    dt_test_fill(qkv, B * T * W, 11, 1.5f);
    dt_test_fill(dy, B * T * A, 12, 1.0f);
    dt_attn_shape full = {.B = B, .T = T, .NH = k->NH, .NKV = k->NKV, .hs = k->hs,
                          .q_stride = W, .kv_stride = W, .scale = 1.0f / sqrtf((float)k->hs),
                          .causal = k->causal};
    dt_attention_forward_ref(&full, y, lse, qkv, qkv + ko, qkv + vo);
    dt_attention_backward_ref(&full, dqkv, dqkv + ko, dqkv + vo, dy, y, lse, qkv, qkv + ko,
                              qkv + vo);
    /* this rank's tokens, and the reference's values at them */
    float *lq = fbuf(B * Tl * W), *ldy = fbuf(B * Tl * A), *ly = fbuf(B * Tl * A);
    float *llse = fbuf(B * k->NH * Tl), *ldq = fbuf(B * Tl * W);
    float *want_y = fbuf(B * Tl * A), *want_lse = fbuf(B * k->NH * Tl), *want_d = fbuf(B * Tl * W);
    int chunk[2], n = dt_ring_chunks(P, k->zigzag, me, chunk), Tc = Tl / n;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            int64_t g = (int64_t)b * T + position_of(P, k->zigzag, me, T, t), l = (int64_t)b * Tl + t;
            memcpy(lq + l * W, qkv + g * W, (size_t)W * sizeof(float));
            memcpy(ldy + l * A, dy + g * A, (size_t)A * sizeof(float));
            memcpy(want_y + l * A, y + g * A, (size_t)A * sizeof(float));
            memcpy(want_d + l * W, dqkv + g * W, (size_t)W * sizeof(float));
            for (int h = 0; h < k->NH; h++) /* the ring's lse is chunk by chunk */
                want_lse[(((int64_t)b * n + t / Tc) * k->NH + h) * Tc + t % Tc] =
                    lse[((int64_t)b * k->NH + h) * T + (g - (int64_t)b * T)];
        }
    if (P == 1) /* one rank: the kernel's own [B, NH, T] layout */
        memcpy(want_lse, lse, (size_t)B * k->NH * T * sizeof(float));
    dt_attn_shape s = full;
    s.T = Tl;
    dt_ring ring = {.cp = c, .zigzag = k->zigzag};
    float *work = fbuf(dt_ring_work_count(&ring, &s));
    DT_CHECK_OK(dt_ring_attention_forward(&ring, &s, ly, llse, lq, lq + ko, lq + vo, work));
    DT_CHECK_OK(dt_ring_attention_backward_set(&ring, &s, ldq, ldq + ko, ldq + vo, ldy, ly, llse,
                                               lq, lq + ko, lq + vo, work));
    double ey = dt_test_max_rel(ly, want_y, B * Tl * A, 1.0);
    double el = dt_test_max_rel(llse, want_lse, B * k->NH * Tl, 1.0);
    double ed = dt_test_max_rel(ldq, want_d, B * Tl * W, 1.0);
    DT_CHECK(ey < 1e-5 && el < 1e-5 && ed < 1e-5,
             "%s on %d ranks (rank %d): y %.2e, lse %.2e, dq|dk|dv %.2e from the reference",
             k->name, P, me, ey, el, ed);
    free(work);
    free(want_d), free(want_lse), free(want_y), free(ldq), free(llse), free(ly), free(ldy), free(lq);
    free(dqkv), free(lse), free(y), free(dy), free(qkv);
}

/* Every chunk held by exactly one rank; zigzag's causal pairs the same on every rank. */
static void test_assignment(void) {
    for (int P = 1; P <= 8; P++)
        for (int zz = 0; zz < 2; zz++) {
            int n_chunks = P * (zz ? 2 : 1), seen[16] = {0}, pairs[8] = {0};
            for (int r = 0; r < P; r++) {
                int ch[2], n = dt_ring_chunks(P, zz, r, ch);
                for (int i = 0; i < n; i++) {
                    seen[ch[i]]++;
                    pairs[r] += ch[i] + 1; /* causal: chunk c sees chunks 0..c */
                }
            }
            bool once = true, balanced = true;
            for (int c = 0; c < n_chunks; c++)
                once &= seen[c] == 1;
            for (int r = 1; r < P; r++)
                balanced &= pairs[r] == pairs[0];
            DT_CHECK(once, "cp %d %s: every chunk held once", P, zz ? "zigzag" : "contiguous");
            if (zz)
                DT_CHECK(balanced, "cp %d zigzag: causal work equal on every rank", P);
        }
}

int main(int argc, char **argv) {
    dt_comm *w = NULL;
    if (dt_dist_init(&argc, &argv, &w) != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    DT_TEST_BEGIN(argc, argv);
    test_assignment();
    int P = w->size;
    const ring_case cases[] = {
        {"causal zigzag", 2, 16 * P, 2, 2, 8, true, true},
        {"causal contiguous", 2, 8 * P, 2, 2, 8, true, false},
        {"non-causal", 1, 8 * P, 2, 2, 8, false, false},
        {"causal zigzag, grouped-query", 1, 8 * P, 4, 2, 16, true, true},
        {"non-causal zigzag, grouped-query", 2, 4 * P, 4, 1, 8, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case(w, &cases[i]);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
