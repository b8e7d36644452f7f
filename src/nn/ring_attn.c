/* Ring attention. See ring_attn.h.
 *
 * A rank's keys and values travel packed, token by token [k NKV hs | v NKV hs], so one message
 * moves a block. Forward, step i: this rank holds the block of rank r - i and posts its send
 * to r + 1 and the receive of the next block from r - 1, then computes its query chunks
 * against the block's key chunks (one kernel call per pair and sequence) and merges each
 * pair's (y, lse) into the running result, testing the transfers between calls so they
 * progress while it computes. Backward, step i: the same blocks in the same order; the
 * gradient of the visiting block's keys and values is computed into a fresh buffer, then the
 * sum of the ranks before (received from r - 1) is added to it and the total sent on to
 * r + 1; after cp steps each block's gradient has visited every rank and comes home.
 */
#include "nn/ring_attn.h"

#include <math.h>
#include <string.h>

enum { TAG_KV = 71, TAG_DKV = 72 };

int dt_ring_chunks(int cp, bool zigzag, int rank, int chunk[2]) {
    if (!zigzag) {
        chunk[0] = rank;
        return 1;
    }
    chunk[0] = rank;
    chunk[1] = 2 * cp - 1 - rank;
    return 2;
}

static bool unsplit(const dt_ring *r) { return !r->cp || r->cp->size == 1; }

static int64_t kv_width(const dt_attn_shape *s) { return 2 * (int64_t)s->NKV * s->hs; }

int64_t dt_ring_work_count(const dt_ring *r, const dt_attn_shape *s) {
    if (unsplit(r))
        return 0;
    int n = r->zigzag ? 2 : 1, Tc = s->T / n;
    int64_t block = (int64_t)s->B * s->T * kv_width(s);
    int64_t part = (int64_t)Tc * s->NH * s->hs + (int64_t)s->NH * Tc;
    return 5 * block + part; /* 2 blocks in flight, 3 gradient blocks, one pair's y and lse */
}

/* this rank's k and v, token by token, into one block */
static void pack_kv(const dt_attn_shape *s, const float *k, const float *v, float *kv) {
    int64_t n = (int64_t)s->B * s->T, w = (int64_t)s->NKV * s->hs;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        memcpy(kv + i * 2 * w, k + i * s->kv_stride, (size_t)w * sizeof *kv);
        memcpy(kv + i * 2 * w + w, v + i * s->kv_stride, (size_t)w * sizeof *kv);
    }
}

static void unpack_kv(const dt_attn_shape *s, const float *kv, float *k, float *v) {
    int64_t n = (int64_t)s->B * s->T, w = (int64_t)s->NKV * s->hs;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        memcpy(k + i * s->kv_stride, kv + i * 2 * w, (size_t)w * sizeof *kv);
        memcpy(v + i * s->kv_stride, kv + i * 2 * w + w, (size_t)w * sizeof *kv);
    }
}

typedef enum { PAIR_SKIP, PAIR_FULL, PAIR_DIAGONAL } pair_kind;

static pair_kind pair_of(const dt_attn_shape *s, int q_chunk, int k_chunk) {
    if (!s->causal)
        return PAIR_FULL;
    return k_chunk < q_chunk ? PAIR_FULL : k_chunk == q_chunk ? PAIR_DIAGONAL : PAIR_SKIP;
}

/* The kernel's view of one (sequence b, query chunk qi, key chunk `kc` of the sequence)
 * pair: one sequence of Tc tokens, keys from a packed block; with documents, the query rows'
 * document starts and where the key chunk lies. */
static dt_attn_shape pair_shape(const dt_attn_shape *s, int Tc, pair_kind k, int b, int qi,
                                int kc) {
    dt_attn_shape p = *s;
    p.B = 1;
    p.T = Tc;
    p.kv_stride = kv_width(s);
    p.causal = k == PAIR_DIAGONAL;
    if (s->doc_start) {
        p.doc_start = s->doc_start + (int64_t)b * s->T + (int64_t)qi * Tc;
        p.k_pos0 = kc * Tc;
    }
    return p;
}

/* The ring's place: chunks of this rank and of every rank, the chunk length. */
typedef struct ring_geom {
    int P, me, n, Tc;
    int mine[2];
} ring_geom;

static ring_geom geom_of(const dt_ring *r, const dt_attn_shape *s) {
    ring_geom g = {.P = r->cp->size, .me = r->cp->rank};
    g.n = dt_ring_chunks(g.P, r->zigzag, g.me, g.mine);
    g.Tc = s->T / g.n;
    return g;
}

/* y, lse (running, over the blocks so far) <- their log-sum-exp merge with a pair's (yp, lp):
 * y = y e^(lse - L) + yp e^(lp - L), L = log(e^lse + e^lp). A running lse of -inf (no block
 * yet) takes the pair's values exactly; a pair's -inf (a query that saw none of its keys:
 * documents) changes nothing. yp: [Tc, NH hs]; lse, lp: [NH, Tc]. */
static void merge(const dt_attn_shape *s, int Tc, float *y, float *lse, const float *yp,
                  const float *lp) {
    int NH = s->NH, hs = s->hs;
    int64_t A = (int64_t)NH * hs;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < Tc; t++)
        for (int h = 0; h < NH; h++) {
            float a = lse[(int64_t)h * Tc + t], b = lp[(int64_t)h * Tc + t];
            if (b == -INFINITY)
                continue;
            float m = a > b ? a : b;
            float L = m + logf(expf(a - m) + expf(b - m));
            float wa = expf(a - L), wb = expf(b - L);
            float *yr = y + t * A + (int64_t)h * hs;
            const float *pr = yp + t * A + (int64_t)h * hs;
            for (int j = 0; j < hs; j++)
                yr[j] = wa * yr[j] + wb * pr[j];
            lse[(int64_t)h * Tc + t] = L;
        }
}

/* Progress the given transfers (between kernel calls, so they move while this rank computes). */
static dt_status progress(dt_comm *c, dt_comm_req *reqs, int n) {
    for (int i = 0; i < n; i++) {
        bool done;
        DT_TRY(dt_comm_test(c, &reqs[i], &done));
    }
    return DT_OK;
}

/* Completes every transfer (also after a failure, so none is left posted); the first error. */
static dt_status finish(dt_comm *c, dt_comm_req *reqs, int n, dt_status st) {
    for (int i = 0; i < n; i++) {
        dt_status w = dt_comm_wait(c, &reqs[i]);
        if (st == DT_OK)
            st = w;
    }
    return st;
}

/* The next block's transfer: send `cur` on to r + 1, receive the next from r - 1. */
static dt_status pass_block(const ring_geom *g, dt_comm *c, const float *cur, float *next,
                            int64_t n, int tag, dt_comm_req req[2]) {
    int to = (g->me + 1) % g->P, from = (g->me + g->P - 1) % g->P;
    DT_TRY(dt_comm_recv(c, next, n * (int64_t)sizeof(float), from, tag, &req[0]));
    return dt_comm_send(c, cur, n * (int64_t)sizeof(float), to, tag, &req[1]);
}

/* Forward of the local queries against one visiting block (the chunks `theirs`). */
static dt_status attend_block(const ring_geom *g, const dt_attn_shape *s, const int *theirs,
                              float *y, float *lse, const float *q, const float *kv, float *yp,
                              float *lp, dt_comm *c, dt_comm_req *reqs, int n_reqs) {
    int64_t A = (int64_t)s->NH * s->hs, kvw = kv_width(s), T = s->T, Tc = g->Tc;
    for (int b = 0; b < s->B; b++)
        for (int qi = 0; qi < g->n; qi++)
            for (int kj = 0; kj < g->n; kj++) {
                pair_kind k = pair_of(s, g->mine[qi], theirs[kj]);
                if (k == PAIR_SKIP)
                    continue;
                dt_attn_shape ps = pair_shape(s, (int)Tc, k, b, qi, theirs[kj]);
                const float *kb = kv + (b * T + kj * Tc) * kvw;
                dt_attention_forward(&ps, yp, lp, q + (b * T + qi * Tc) * s->q_stride, kb,
                                     kb + kvw / 2);
                merge(s, (int)Tc, y + (b * T + qi * Tc) * A,
                      lse + ((int64_t)b * g->n + qi) * s->NH * Tc, yp, lp);
                DT_TRY(progress(c, reqs, n_reqs));
            }
    return DT_OK;
}

dt_status dt_ring_attention_forward(const dt_ring *r, const dt_attn_shape *s, float *y, float *lse,
                                    const float *q, const float *k, const float *v, float *work) {
    if (unsplit(r)) {
        dt_attention_forward(s, y, lse, q, k, v);
        return DT_OK;
    }
    ring_geom g = geom_of(r, s);
    dt_comm *c = r->cp;
    int64_t A = (int64_t)s->NH * s->hs, n_tok = (int64_t)s->B * s->T;
    int64_t block = n_tok * kv_width(s);
    float *kv[2] = {work, work + block};
    float *yp = work + 5 * block, *lp = yp + (int64_t)g.Tc * A;
    memset(y, 0, (size_t)(n_tok * A) * sizeof *y);
    for (int64_t i = 0; i < n_tok * s->NH; i++)
        lse[i] = -INFINITY;
    pack_kv(s, k, v, kv[0]);
    dt_status st = DT_OK;
    for (int step = 0; step < g.P && st == DT_OK; step++) {
        dt_comm_req req[2] = {0};
        const float *cur = kv[step & 1];
        if (step + 1 < g.P)
            st = pass_block(&g, c, cur, kv[(step + 1) & 1], block, TAG_KV, req);
        int theirs[2];
        dt_ring_chunks(g.P, r->zigzag, (g.me - step + g.P) % g.P, theirs);
        if (st == DT_OK)
            st = attend_block(&g, s, theirs, y, lse, q, cur, yp, lp, c, req, 2);
        st = finish(c, req, 2, st);
    }
    return st;
}

/* Backward of the local queries against one visiting block: dq accumulates, the block's key
 * and value gradients accumulate into dkv (packed like the block). */
static dt_status block_backward(const ring_geom *g, const dt_attn_shape *s, const int *theirs,
                                float *dq, float *dkv, const float *dy, const float *y,
                                const float *lse, const float *q, const float *kv, dt_comm *c,
                                dt_comm_req *reqs, int n_reqs) {
    int64_t A = (int64_t)s->NH * s->hs, kvw = kv_width(s), T = s->T, Tc = g->Tc;
    for (int b = 0; b < s->B; b++)
        for (int qi = 0; qi < g->n; qi++)
            for (int kj = 0; kj < g->n; kj++) {
                pair_kind k = pair_of(s, g->mine[qi], theirs[kj]);
                if (k == PAIR_SKIP)
                    continue;
                dt_attn_shape ps = pair_shape(s, (int)Tc, k, b, qi, theirs[kj]);
                int64_t qo = (b * T + qi * Tc), ko = (b * T + kj * Tc) * kvw;
                dt_attention_backward(&ps, dq + qo * s->q_stride, dkv + ko, dkv + ko + kvw / 2,
                                      dy + qo * A, y + qo * A,
                                      lse + ((int64_t)b * g->n + qi) * s->NH * Tc,
                                      q + qo * s->q_stride, kv + ko, kv + ko + kvw / 2);
                DT_TRY(progress(c, reqs, n_reqs));
            }
    return DT_OK;
}

static void zero_q_columns(const dt_attn_shape *s, float *dq) {
    int64_t n = (int64_t)s->B * s->T, w = (int64_t)s->NH * s->hs;
    for (int64_t i = 0; i < n; i++)
        memset(dq + i * s->q_stride, 0, (size_t)w * sizeof *dq);
}

dt_status dt_ring_attention_backward_set(const dt_ring *r, const dt_attn_shape *s, float *dq,
                                         float *dk, float *dv, const float *dy, const float *y,
                                         const float *lse, const float *q, const float *k,
                                         const float *v, float *work) {
    if (unsplit(r)) {
        dt_attention_backward_set(s, dq, dk, dv, dy, y, lse, q, k, v);
        return DT_OK;
    }
    ring_geom g = geom_of(r, s);
    dt_comm *c = r->cp;
    int64_t block = (int64_t)s->B * s->T * kv_width(s);
    size_t bytes = (size_t)block * sizeof(float);
    float *kv[2] = {work, work + block}, *acc[2] = {work + 2 * block, work + 3 * block};
    float *before = work + 4 * block; /* the block's gradient summed by the ranks before */
    int to = (g.me + 1) % g.P, from = (g.me + g.P - 1) % g.P;
    zero_q_columns(s, dq);
    pack_kv(s, k, v, kv[0]);
    dt_comm_req sent[2] = {0}; /* each acc buffer's send, completed before it is reused */
    dt_status st = DT_OK;
    for (int step = 0; step < g.P && st == DT_OK; step++) {
        dt_comm_req req[3] = {0}; /* kv receive, kv send, gradient receive */
        const float *cur = kv[step & 1];
        float *mine = acc[step & 1];
        if (step + 1 < g.P)
            st = pass_block(&g, c, cur, kv[(step + 1) & 1], block, TAG_KV, req);
        if (st == DT_OK && step > 0)
            st = dt_comm_recv(c, before, (int64_t)bytes, from, TAG_DKV, &req[2]);
        if (st == DT_OK)
            st = dt_comm_wait(c, &sent[step & 1]);
        int theirs[2];
        dt_ring_chunks(g.P, r->zigzag, (g.me - step + g.P) % g.P, theirs);
        if (st == DT_OK) {
            memset(mine, 0, bytes);
            st = block_backward(&g, s, theirs, dq, mine, dy, y, lse, q, cur, c, req, 3);
        }
        if (st == DT_OK && step > 0) {
            st = dt_comm_wait(c, &req[2]);
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < block; i++)
                mine[i] = before[i] + mine[i];
        }
        if (st == DT_OK)
            st = dt_comm_send(c, mine, (int64_t)bytes, to, TAG_DKV, &sent[step & 1]);
        st = finish(c, req, 3, st);
    }
    if (st == DT_OK) /* this rank's own block, home after every rank added its share */
        st = dt_comm_recv(c, before, (int64_t)bytes, from, TAG_DKV, NULL);
    st = finish(c, sent, 2, st);
    if (st == DT_OK)
        unpack_kv(s, before, dk, dv);
    return st;
}
