/* The inside of a dt_bpe, shared by bpe.c (maps, encoding, decoding) and bpe_load.c (the
 * file formats). Nothing outside io/bpe*.c includes it. */
#ifndef DT_IO_BPE_IMPL_H
#define DT_IO_BPE_IMPL_H

#include "io/bpe.h"

enum { DT_BPE_MAX_IDS = 1 << 24, MAX_TOKENIZER_FILE = 512 << 20 };

/* A map from byte strings to numbers: open addressing, the keys in one blob. */
typedef struct bmap {
    unsigned char *keys;
    size_t keys_len, keys_cap;
    uint32_t *koff, *klen;
    int64_t *val;
    size_t n, cap;
    uint32_t *slots; /* entry + 1; 0: empty */
    size_t n_slots;  /* a power of two, at least twice n */
} bmap;

/* The merges: a pair of ids -> its rank and the id it makes. */
typedef struct pmap {
    uint64_t *key; /* (a << 32 | b) + 1; 0: empty */
    int32_t *rank, *made;
    size_t n, n_slots;
} pmap;

struct dt_bpe {
    dt_bpe_split split;
    bool by_token_rank; /* tiktoken: a pair's rank is its merged token's (no merges list) */
    bool whole_pieces;  /* a piece that is a token is that token (tiktoken; ignore_merges) */
    bmap vocab;         /* token bytes -> id (special tokens not among them) */
    pmap merges;
    int64_t n_ids;
    int32_t *entry; /* [n_ids] the vocab entry of each id, -1: none or special */
    char **special; /* [n_ids] a special token's text, NULL: not special */
    int32_t byte_id[256];
    int32_t eot;
    char describe[160];
    bmap cache; /* a piece -> (offset << 20 | count) into cache_ids */
    int32_t *cache_ids;
    size_t cache_len, cache_cap;
};

bool dt_bpe_map_get(const bmap *m, const unsigned char *k, size_t n, int64_t *val);
/* Adds k -> val; a key already there keeps its value (*added false). */
dt_status dt_bpe_map_put(bmap *m, const unsigned char *k, size_t n, int64_t val, bool *added);
dt_status dt_bpe_pairs_init(pmap *m, size_t count);
/* Adds (a, b) -> (rank, made); a pair already there keeps the first. */
void dt_bpe_pairs_put(pmap *m, int32_t a, int32_t b, int32_t rank, int32_t made);

#endif
