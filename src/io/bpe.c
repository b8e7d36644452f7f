/* Byte-level BPE: loading the three file kinds, encoding and decoding. See bpe.h.
 *
 * Every vocabulary is held as raw bytes: the JSON formats' byte-level strings (GPT-2 maps
 * each byte to a printable character, e.g. space to 'Ġ') are mapped back when read. A piece
 * is merged in a small array of parts (a byte range and its token each) with the rank of
 * each adjacent pair beside it: the lowest (leftmost on a tie) merges, and only the ranks
 * next to it change. Pieces up to CACHE_BYTES long are remembered with their ids, as words
 * repeat.
 */
#include "io/bpe_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CACHE_BYTES = 64, CACHE_ENTRIES = 1 << 20 };

/* ---- a map from byte strings to numbers (open addressing, keys in one blob) -------------- */

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static size_t bmap_slot(const bmap *m, const unsigned char *k, size_t n, bool *found) {
    size_t s = hash_bytes(k, n) & (m->n_slots - 1);
    for (;; s = (s + 1) & (m->n_slots - 1)) {
        uint32_t e = m->slots[s];
        if (!e)
            break;
        e--;
        if (m->klen[e] == n && !memcmp(m->keys + m->koff[e], k, n)) {
            *found = true;
            return s;
        }
    }
    *found = false;
    return s;
}

bool dt_bpe_map_get(const bmap *m, const unsigned char *k, size_t n, int64_t *val) {
    if (!m->n_slots)
        return false;
    bool found;
    size_t s = bmap_slot(m, k, n, &found);
    if (found)
        *val = m->val[m->slots[s] - 1];
    return found;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static bool bmap_rehash(bmap *m, size_t n_slots) {
    uint32_t *s = calloc(n_slots, sizeof *s);
    if (!s)
        return false;
    free(m->slots);
    m->slots = s;
    m->n_slots = n_slots;
    for (size_t e = 0; e < m->n; e++) {
        bool found;
        size_t at = bmap_slot(m, m->keys + m->koff[e], m->klen[e], &found);
        m->slots[at] = (uint32_t)e + 1;
    }
    return true;
}

/* Adds k -> val; a key already there keeps its value (returns false through *added). */
dt_status dt_bpe_map_put(bmap *m, const unsigned char *k, size_t n, int64_t val, bool *added) {
    if ((m->n + 1) * 2 > m->n_slots && !bmap_rehash(m, m->n_slots ? m->n_slots * 2 : 1024))
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    bool found;
    size_t s = bmap_slot(m, k, n, &found);
    if (added)
        *added = !found;
    if (found)
        return DT_OK;
    if (m->n == m->cap) {
        size_t c = m->cap ? 2 * m->cap : 1024;
        uint32_t *koff = realloc(m->koff, c * sizeof *koff);
        m->koff = koff ? koff : m->koff;
        uint32_t *klen = koff ? realloc(m->klen, c * sizeof *klen) : NULL;
        m->klen = klen ? klen : m->klen;
        int64_t *val = klen ? realloc(m->val, c * sizeof *val) : NULL;
        m->val = val ? val : m->val;
        if (!val)
            return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
        m->cap = c;
    }
    if (!grow((void **)&m->keys, &m->keys_cap, m->keys_len + n + 1, 1))
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    memcpy(m->keys + m->keys_len, k, n);
    m->koff[m->n] = (uint32_t)m->keys_len;
    m->klen[m->n] = (uint32_t)n;
    m->val[m->n] = val;
    m->keys_len += n;
    m->slots[s] = (uint32_t)++m->n;
    return DT_OK;
}

static void bmap_clear(bmap *m) {
    m->n = m->keys_len = 0;
    if (m->slots)
        memset(m->slots, 0, m->n_slots * sizeof *m->slots);
}

static void bmap_free(bmap *m) {
    free(m->keys), free(m->koff), free(m->klen), free(m->val), free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- merges: a pair of ids -> its rank and the id it makes --------------------------------- */

static size_t pmap_slot(const pmap *m, uint64_t key) {
    size_t s = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (m->n_slots - 1);
    while (m->key[s] && m->key[s] != key)
        s = (s + 1) & (m->n_slots - 1);
    return s;
}

static bool pmap_get(const pmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *made) {
    if (!m->n_slots)
        return false;
    size_t s = pmap_slot(m, ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1);
    if (!m->key[s])
        return false;
    *rank = m->rank[s], *made = m->made[s];
    return true;
}

dt_status dt_bpe_pairs_init(pmap *m, size_t count) {
    size_t n = 1024;
    while (n < 2 * count + 2)
        n *= 2;
    m->key = calloc(n, sizeof *m->key);
    m->rank = malloc(n * sizeof *m->rank);
    m->made = malloc(n * sizeof *m->made);
    m->n_slots = n;
    if (!m->key || !m->rank || !m->made)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    return DT_OK;
}

void dt_bpe_pairs_put(pmap *m, int32_t a, int32_t b, int32_t rank, int32_t made) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t s = pmap_slot(m, key);
    if (m->key[s]) /* the first merge of a pair counts */
        return;
    m->key[s] = key, m->rank[s] = rank, m->made[s] = made;
    m->n++;
}

static void pmap_free(pmap *m) { free(m->key), free(m->rank), free(m->made); }

/* ---- the tokenizer ---------------------------------------------------------------------- */

int64_t dt_bpe_vocab_size(const dt_bpe *b) { return b->n_ids; }
int32_t dt_bpe_eot(const dt_bpe *b) { return b->eot; }
dt_bpe_split dt_bpe_split_of(const dt_bpe *b) { return b->split; }
const char *dt_bpe_describe(const dt_bpe *b) { return b->describe; }

void dt_bpe_free(dt_bpe *b) {
    if (!b)
        return;
    bmap_free(&b->vocab);
    bmap_free(&b->cache);
    pmap_free(&b->merges);
    for (int64_t i = 0; b->special && i < b->n_ids; i++)
        free(b->special[i]);
    free(b->special);
    free(b->entry);
    free(b->cache_ids);
    free(b);
}

/* ---- encoding ---------------------------------------------------------------------------- */

typedef struct parts {
    int32_t *len, *id, *rank, *made; /* rank[i], made[i]: the pair (i, i + 1) */
    int n;
} parts;

static void pair_rank(const dt_bpe *b, const unsigned char *p, const int32_t *start, parts *s,
                      int i) {
    s->rank[i] = INT32_MAX;
    if (b->by_token_rank) {
        int64_t v;
        if (dt_bpe_map_get(&b->vocab, p + start[i], (size_t)(s->len[i] + s->len[i + 1]), &v))
            s->rank[i] = s->made[i] = (int32_t)v;
        return;
    }
    int32_t r, m;
    if (pmap_get(&b->merges, s->id[i], s->id[i + 1], &r, &m))
        s->rank[i] = r, s->made[i] = m;
}

static dt_status push(int32_t **ids, int64_t *n, int64_t *cap, const int32_t *v, int64_t k) {
    size_t c = (size_t)*cap;
    if (!grow((void **)ids, &c, (size_t)(*n + k), sizeof **ids))
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory for %lld ids",
                          (long long)(*n + k));
    *cap = (int64_t)c;
    memcpy(*ids + *n, v, (size_t)k * sizeof *v);
    *n += k;
    return DT_OK;
}

static void remember(dt_bpe *b, const unsigned char *p, size_t n, const int32_t *ids, int k) {
    if (n > CACHE_BYTES)
        return;
    if (b->cache.n >= CACHE_ENTRIES) /* a bounded memory: start again */
        bmap_clear(&b->cache), b->cache_len = 0;
    if (!grow((void **)&b->cache_ids, &b->cache_cap, b->cache_len + (size_t)k, sizeof(int32_t)))
        return;
    if (dt_bpe_map_put(&b->cache, p, n, (int64_t)b->cache_len << 20 | k, NULL) != DT_OK)
        return;
    memcpy(b->cache_ids + b->cache_len, ids, (size_t)k * sizeof *ids);
    b->cache_len += (size_t)k;
}

/* merge the parts of piece p[0, n) */
static void merge(const dt_bpe *b, const unsigned char *p, size_t n, int32_t *start, parts *s) {
    s->n = (int)n;
    for (size_t i = 0; i < n; i++)
        start[i] = (int32_t)i, s->len[i] = 1, s->id[i] = b->byte_id[p[i]];
    for (int i = 0; i + 1 < s->n; i++)
        pair_rank(b, p, start, s, i);
    while (s->n > 1) {
        int best = -1;
        for (int i = 0; i + 1 < s->n; i++)
            if (s->rank[i] != INT32_MAX && (best < 0 || s->rank[i] < s->rank[best]))
                best = i;
        if (best < 0)
            break;
        s->id[best] = s->made[best];
        s->len[best] += s->len[best + 1];
        int tail = s->n - best - 2; /* parts after the one merged away */
        memmove(start + best + 1, start + best + 2, (size_t)tail * sizeof *start);
        memmove(s->len + best + 1, s->len + best + 2, (size_t)tail * sizeof *s->len);
        memmove(s->id + best + 1, s->id + best + 2, (size_t)tail * sizeof *s->id);
        memmove(s->rank + best + 1, s->rank + best + 2, (size_t)tail * sizeof *s->rank);
        memmove(s->made + best + 1, s->made + best + 2, (size_t)tail * sizeof *s->made);
        s->n--;
        if (best > 0)
            pair_rank(b, p, start, s, best - 1);
        if (best + 1 < s->n)
            pair_rank(b, p, start, s, best);
    }
}

static dt_status encode_piece(dt_bpe *b, const unsigned char *p, size_t n, int32_t **ids,
                              int64_t *n_ids, int64_t *cap) {
    int64_t v;
    if (b->whole_pieces && dt_bpe_map_get(&b->vocab, p, n, &v)) {
        int32_t id = (int32_t)v;
        return push(ids, n_ids, cap, &id, 1);
    }
    if (n <= CACHE_BYTES && dt_bpe_map_get(&b->cache, p, n, &v))
        return push(ids, n_ids, cap, b->cache_ids + (v >> 20), v & ((1 << 20) - 1));
    int32_t small[5 * 64];
    int32_t *buf = n <= 64 ? small : malloc(5 * n * sizeof *buf);
    if (!buf)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory for a piece of %zu bytes", n);
    parts s = {.len = buf + n, .id = buf + 2 * n, .rank = buf + 3 * n, .made = buf + 4 * n};
    merge(b, p, n, buf, &s);
    remember(b, p, n, s.id, s.n);
    dt_status st = push(ids, n_ids, cap, s.id, s.n);
    if (buf != small)
        free(buf);
    return st;
}

dt_status dt_bpe_encode(dt_bpe *b, const char *text, size_t n, int32_t **ids, int64_t *n_ids,
                        int64_t *cap) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t at = 0; at < n;) {
        size_t end = dt_bpe_split_next(b->split, s, n, at);
        DT_TRY(encode_piece(b, s + at, end - at, ids, n_ids, cap));
        at = end;
    }
    return DT_OK;
}

dt_status dt_bpe_append(int32_t **ids, int64_t *n_ids, int64_t *cap, int32_t id) {
    return push(ids, n_ids, cap, &id, 1);
}

dt_status dt_bpe_decode(const dt_bpe *b, const int32_t *ids, int64_t n, char **out, size_t *len) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= b->n_ids || (b->entry[id] < 0 && !b->special[id]))
            return dt_err_set(DT_ERR_ARG,
                              "tokenizer: id %d at position %lld is not in the "
                              "vocabulary (%lld ids)",
                              id, (long long)i, (long long)b->n_ids);
        total += b->special[id] ? strlen(b->special[id]) : b->vocab.klen[b->entry[id]];
    }
    char *s = malloc(total + 1);
    if (!s)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory for %zu bytes of text", total);
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        const void *src = b->special[id] ? (const void *)b->special[id]
                                         : b->vocab.keys + b->vocab.koff[b->entry[id]];
        size_t k = b->special[id] ? strlen(b->special[id]) : b->vocab.klen[b->entry[id]];
        memcpy(s + at, src, k);
        at += k;
    }
    s[at] = 0;
    *out = s;
    *len = at;
    return DT_OK;
}
