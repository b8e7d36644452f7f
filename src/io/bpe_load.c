/* Reading byte-level BPE vocabularies: HuggingFace tokenizer.json, GPT-2's encoder.json with
 * vocab.bpe, tiktoken rank files. See bpe.h. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic.h"
#include "io/bpe_impl.h"

#define SUPPORTED                                                                                  \
    "supported are byte-level BPE tokenizers: a HuggingFace tokenizer.json (model BPE, a "         \
    "ByteLevel pre-tokenizer), GPT-2's encoder.json with vocab.bpe beside it, and tiktoken "       \
    "rank files (GPT-2/r50k, p50k, cl100k, Llama 3)"

/* The pre-tokenizer patterns as the files spell them (bpe_split.c implements each). */
static const char *const GPT2_PATTERNS[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const CL100K_PATTERNS[] = {
    /* Llama 3's tokenizer.json and tiktoken's first cl100k */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    /* tiktoken's later spelling, with possessive quantifiers (the same pieces) */
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};

static bool one_of(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list))
            return true;
    return false;
}

/* ---- building -------------------------------------------------------------------------- */

static dt_status ensure_ids(dt_bpe *b, int64_t id, const char *path) {
    if (id < 0 || id >= DT_BPE_MAX_IDS)
        return dt_err_set(DT_ERR_FORMAT, "%s: token id %lld outside [0, %d)", path, (long long)id,
                          DT_BPE_MAX_IDS);
    if (id < b->n_ids)
        return DT_OK;
    int64_t n = id + 1;
    int32_t *entry = realloc(b->entry, (size_t)n * sizeof *entry);
    if (entry)
        b->entry = entry;
    char **special = entry ? realloc(b->special, (size_t)n * sizeof *special) : NULL;
    if (!special)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    b->special = special;
    for (int64_t i = b->n_ids; i < n; i++)
        b->entry[i] = -1, b->special[i] = NULL;
    b->n_ids = n;
    return DT_OK;
}

static dt_status add_token(dt_bpe *b, const unsigned char *bytes, size_t n, int64_t id,
                           const char *path) {
    DT_TRY(ensure_ids(b, id, path));
    if (b->entry[id] >= 0)
        return dt_err_set(DT_ERR_FORMAT, "%s: token id %lld appears twice", path, (long long)id);
    bool added;
    DT_TRY(dt_bpe_map_put(&b->vocab, bytes, n, id, &added));
    if (!added)
        return dt_err_set(DT_ERR_FORMAT, "%s: token id %lld repeats another token's bytes", path,
                          (long long)id);
    b->entry[id] = (int32_t)(b->vocab.n - 1);
    return DT_OK;
}

/* A special token: decoded as its text, never made from text. */
static dt_status add_special(dt_bpe *b, int64_t id, const char *text, const char *path) {
    DT_TRY(ensure_ids(b, id, path));
    int32_t e = b->entry[id];
    if (e >= 0 && (b->vocab.klen[e] != strlen(text) ||
                   memcmp(b->vocab.keys + b->vocab.koff[e], text, strlen(text))))
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: special token %lld (\"%.40s\") is also a "
                          "vocabulary token of other bytes",
                          path, (long long)id, text);
    free(b->special[id]);
    b->special[id] = strdup(text);
    if (!b->special[id])
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    b->entry[id] = -1; /* its bytes stay in the map, unreachable: no merge makes them */
    return DT_OK;
}

/* The single bytes' ids, and the end-of-document token among the specials. */
static dt_status finish(dt_bpe *b, const char *path, const char *kind) {
    for (int c = 0; c < 256; c++) {
        unsigned char k = (unsigned char)c;
        int64_t id;
        if (!dt_bpe_map_get(&b->vocab, &k, 1, &id) || b->entry[id] < 0)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: the vocabulary has no token for byte 0x%02x, "
                              "so it is not a byte-level BPE; %s",
                              path, c, SUPPORTED);
        b->byte_id[c] = (int32_t)id;
    }
    static const char *const eot[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    b->eot = -1;
    for (size_t k = 0; k < sizeof eot / sizeof *eot && b->eot < 0; k++)
        for (int64_t i = 0; i < b->n_ids; i++)
            if (b->special[i] && !strcmp(b->special[i], eot[k])) {
                b->eot = (int32_t)i;
                break;
            }
    snprintf(b->describe, sizeof b->describe, "%s, %lld ids, %s pre-tokenizer", kind,
             (long long)b->n_ids, b->split == DT_BPE_SPLIT_GPT2 ? "GPT-2" : "cl100k");
    return DT_OK;
}

/* ---- GPT-2's byte-level strings ---------------------------------------------------------- */

/* GPT-2 writes byte c as the character U+c where c is printable Latin-1 (33-126, 161-172,
 * 174-255), and the other bytes, in order, as U+0100 onwards. byte_of[cp]: the byte, or -1. */
static void byte_level_table(int byte_of[512]) {
    for (int i = 0; i < 512; i++)
        byte_of[i] = -1;
    int next = 256;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
        byte_of[printable ? c : next++] = c;
    }
}

/* a byte-level string's bytes into out (at most strlen(s) of them) */
static bool from_byte_level(const char *s, const int *byte_of, unsigned char *out, size_t *n) {
    const unsigned char *p = (const unsigned char *)s;
    *n = 0;
    while (*p) {
        uint32_t cp;
        if (p[0] < 0x80)
            cp = p[0], p += 1;
        else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80)
            cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F), p += 2;
        else
            return false; /* byte-level characters are all below U+0800 */
        if (cp >= 512 || byte_of[cp] < 0)
            return false;
        out[(*n)++] = (unsigned char)byte_of[cp];
    }
    return true;
}

static dt_status add_byte_level(dt_bpe *b, const char *s, int64_t id, const int *byte_of,
                                const char *path) {
    size_t len = strlen(s), n;
    unsigned char small[256], *buf = len <= sizeof small ? small : malloc(len);
    if (!buf)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    dt_status st = DT_OK;
    if (!from_byte_level(s, byte_of, buf, &n))
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: token %lld (\"%.40s\") is not a byte-level string; "
                        "%s",
                        path, (long long)id, s, SUPPORTED);
    else
        st = add_token(b, buf, n, id, path);
    if (buf != small)
        free(buf);
    return st;
}

/* The merges in rank order, "A B" each (or [A, B]): the pair's ids and the merged token's. */
static dt_status add_merge(dt_bpe *b, const char *a, const char *c, int32_t rank,
                           const int *byte_of, const char *path) {
    size_t la = strlen(a), lc = strlen(c), na, nc;
    unsigned char *buf = malloc(la + lc + 2);
    if (!buf)
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    dt_status st = DT_OK;
    int64_t ia, ic, im;
    if (!from_byte_level(a, byte_of, buf, &na) || !from_byte_level(c, byte_of, buf + na, &nc) ||
        !dt_bpe_map_get(&b->vocab, buf, na, &ia) || !dt_bpe_map_get(&b->vocab, buf + na, nc, &ic) ||
        !dt_bpe_map_get(&b->vocab, buf, na + nc, &im))
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: merge %d (\"%.40s %.40s\") names a token the "
                        "vocabulary lacks",
                        path, rank, a, c);
    else
        dt_bpe_pairs_put(&b->merges, (int32_t)ia, (int32_t)ic, rank, (int32_t)im);
    free(buf);
    return st;
}

/* ---- HuggingFace tokenizer.json ---------------------------------------------------------- */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The pre-tokenizer: a ByteLevel one (its own GPT-2 pattern unless use_regex is false),
 * or a Sequence of a Split by a known pattern and a ByteLevel without its own. */
static dt_status read_pre_tokenizer(const cJSON *pre, bool *byte_level, int *split,
                                    const char *path) {
    const char *type = str_of(pre, "type");
    if (!type)
        return dt_err_set(DT_ERR_FORMAT, "%s: pre_tokenizer has no type; %s", path, SUPPORTED);
    if (!strcmp(type, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"))
            DT_TRY(read_pre_tokenizer(item, byte_level, split, path));
        return DT_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        *byte_level = true;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: a ByteLevel pre-tokenizer with "
                              "add_prefix_space is not supported; %s",
                              path, SUPPORTED);
        if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex")))
            *split = DT_BPE_SPLIT_GPT2;
        return DT_OK;
    }
    if (!strcmp(type, "Split")) {
        const char *re = str_of(cJSON_GetObjectItemCaseSensitive(pre, "pattern"), "Regex");
        if (re && one_of(re, GPT2_PATTERNS))
            *split = DT_BPE_SPLIT_GPT2;
        else if (re && one_of(re, CL100K_PATTERNS))
            *split = DT_BPE_SPLIT_CL100K;
        else
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: pre-tokenizer pattern \"%.120s\" is not one "
                              "dtrain knows (GPT-2's and cl100k's / Llama 3's are)",
                              path, re ? re : "(not a regex)");
        return DT_OK;
    }
    return dt_err_set(DT_ERR_FORMAT, "%s: pre-tokenizer %s is not supported; %s", path, type,
                      SUPPORTED);
}

static dt_status load_hf(dt_bpe *b, const cJSON *root, const char *path) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = str_of(model, "type");
    if (type && strcmp(type, "BPE"))
        return dt_err_set(DT_ERR_FORMAT, "%s: tokenizer.json model %s; %s", path, type, SUPPORTED);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return dt_err_set(DT_ERR_FORMAT, "%s: a normalizer (%s) is not supported; %s", path,
                          str_of(norm, "type") ? str_of(norm, "type") : "?", SUPPORTED);
    bool byte_level = false;
    int split = -1;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre))
        DT_TRY(read_pre_tokenizer(pre, &byte_level, &split, path));
    if (!byte_level || split < 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: no byte-level pre-tokenizer with a pattern "
                          "(a SentencePiece-style BPE?); %s",
                          path, SUPPORTED);
    b->split = (dt_bpe_split)split;
    b->whole_pieces = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    int byte_of[512];
    byte_level_table(byte_of);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *item;
    if (!cJSON_IsObject(vocab))
        return dt_err_set(DT_ERR_FORMAT, "%s: model.vocab is not an object", path);
    cJSON_ArrayForEach(item, vocab) {
        if (!cJSON_IsNumber(item))
            return dt_err_set(DT_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id", path,
                              item->string);
        DT_TRY(add_byte_level(b, item->string, (int64_t)item->valuedouble, byte_of, path));
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    DT_TRY(dt_bpe_pairs_init(&b->merges, (size_t)cJSON_GetArraySize(merges)));
    int32_t rank = 0;
    cJSON_ArrayForEach(item, merges) {
        char *space = cJSON_IsString(item) ? strchr(item->valuestring, ' ') : NULL;
        const cJSON *x = cJSON_GetArrayItem(item, 0), *y = cJSON_GetArrayItem(item, 1);
        if (space) {
            *space = 0;
            dt_status st = add_merge(b, item->valuestring, space + 1, rank, byte_of, path);
            *space = ' ';
            DT_TRY(st);
        } else if (cJSON_IsString(x) && cJSON_IsString(y)) {
            DT_TRY(add_merge(b, x->valuestring, y->valuestring, rank, byte_of, path));
        } else {
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: model.merges[%d] is neither \"A B\" nor "
                              "[A, B]",
                              path, rank);
        }
        rank++;
    }
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        const char *content = str_of(item, "content");
        if (!cJSON_IsNumber(id) || !content)
            return dt_err_set(DT_ERR_FORMAT, "%s: an added token lacks its id or content", path);
        DT_TRY(add_special(b, (int64_t)id->valuedouble, content, path));
    }
    return finish(b, path, "HuggingFace tokenizer.json");
}

/* ---- GPT-2's encoder.json + vocab.bpe ---------------------------------------------------- */

static dt_status load_gpt2(dt_bpe *b, const cJSON *root, const char *path) {
    char merges_path[4200];
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) + 1 : 0;
    snprintf(merges_path, sizeof merges_path, "%.*svocab.bpe", dir, path);
    char *text = NULL;
    dt_status st = dt_read_text(merges_path, "GPT-2 merges (vocab.bpe beside encoder.json)",
                                MAX_TOKENIZER_FILE, &text);
    if (st != DT_OK)
        return st;
    b->split = DT_BPE_SPLIT_GPT2;
    int byte_of[512];
    byte_level_table(byte_of);
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (!cJSON_IsNumber(item)) {
            st = dt_err_set(DT_ERR_FORMAT, "%s: entry \"%.40s\" is not an id", path, item->string);
            goto done;
        }
        int64_t id = (int64_t)item->valuedouble;
        if (!strcmp(item->string, "<|endoftext|>"))
            st = add_special(b, id, item->string, path);
        else
            st = add_byte_level(b, item->string, id, byte_of, path);
        if (st != DT_OK)
            goto done;
    }
    size_t lines = 1;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    if ((st = dt_bpe_pairs_init(&b->merges, lines)) != DT_OK)
        goto done;
    int32_t rank = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = 0;
        if (!len || !strncmp(line, "#version", 8))
            continue;
        char *space = strchr(line, ' ');
        if (!space) {
            st = dt_err_set(DT_ERR_FORMAT, "%s: merge %d (\"%.40s\") is not \"A B\"", merges_path,
                            rank, line);
            goto done;
        }
        *space = 0;
        if ((st = add_merge(b, line, space + 1, rank++, byte_of, merges_path)) != DT_OK)
            goto done;
    }
    st = finish(b, path, "GPT-2 encoder.json + vocab.bpe");
done:
    free(text);
    return st;
}

/* ---- tiktoken rank files ----------------------------------------------------------------- */

static int b64(int c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* standard base64 (padded) of s[0, n) into out; false if it is not */
static bool from_base64(const char *s, size_t n, unsigned char *out, size_t *len) {
    if (n % 4)
        return false;
    *len = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            v[k] = s[i + k] == '=' && i + 4 == n && k >= 2 ? (pad++, 0) : b64(s[i + k]);
            if (v[k] < 0 || (pad && s[i + k] != '='))
                return false;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        out[(*len)++] = (unsigned char)(w >> 16);
        if (pad < 2)
            out[(*len)++] = (unsigned char)(w >> 8);
        if (pad < 1)
            out[(*len)++] = (unsigned char)w;
    }
    return true;
}

/* The tiktoken vocabularies dtrain knows, by their count of ranks: the pre-tokenizer, the
 * ids of the whole vocabulary, and the special tokens (tiktoken's openai_public.py; Meta's
 * Llama 3 tokenizer.py). */
static dt_status tiktoken_specials(dt_bpe *b, int64_t ranks, const char *path) {
    if (ranks == 50256 || ranks == 50280) { /* r50k (GPT-2) and p50k */
        b->split = DT_BPE_SPLIT_GPT2;
        return add_special(b, 50256, "<|endoftext|>", path);
    }
    if (ranks == 100256) { /* cl100k */
        b->split = DT_BPE_SPLIT_CL100K;
        static const struct {
            int id;
            const char *text;
        } s[] = {{100257, "<|endoftext|>"},
                 {100258, "<|fim_prefix|>"},
                 {100259, "<|fim_middle|>"},
                 {100260, "<|fim_suffix|>"},
                 {100276, "<|endofprompt|>"}};
        for (size_t i = 0; i < sizeof s / sizeof *s; i++)
            DT_TRY(add_special(b, s[i].id, s[i].text, path));
        return DT_OK;
    }
    if (ranks == 128000) { /* Llama 3: 256 special ids from 128000 */
        b->split = DT_BPE_SPLIT_CL100K;
        static const char *const named[] = {
            "<|begin_of_text|>",   "<|end_of_text|>",   NULL, NULL,        NULL, NULL,
            "<|start_header_id|>", "<|end_header_id|>", NULL, "<|eot_id|>"};
        int reserved = 0;
        for (int i = 0; i < 256; i++) {
            char text[48];
            if (i < 10 && named[i])
                snprintf(text, sizeof text, "%s", named[i]);
            else
                snprintf(text, sizeof text, "<|reserved_special_token_%d|>", reserved++);
            DT_TRY(add_special(b, 128000 + i, text, path));
        }
        return DT_OK;
    }
    return dt_err_set(DT_ERR_FORMAT,
                      "%s: a tiktoken rank file of %lld tokens, not one dtrain "
                      "knows (r50k 50256, p50k 50280, cl100k 100256, Llama 3 128000)",
                      path, (long long)ranks);
}

static dt_status load_tiktoken(dt_bpe *b, char *text, const char *path) {
    int64_t ranks = 0;
    b->by_token_rank = b->whole_pieces = true;
    unsigned char buf[512];
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *space = strchr(line, ' '), *end;
        size_t len;
        long long rank = space ? strtoll(space + 1, &end, 10) : -1;
        if (!space || (size_t)(space - line) > 4 * sizeof buf / 3 || *end != 0 ||
            !from_base64(line, (size_t)(space - line), buf, &len))
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: line %lld is not \"BASE64 RANK\" (not a "
                              "tiktoken rank file); %s",
                              path, (long long)ranks + 1, SUPPORTED);
        DT_TRY(add_token(b, buf, len, rank, path));
        ranks++;
    }
    DT_TRY(tiktoken_specials(b, ranks, path));
    return finish(b, path, "tiktoken rank file");
}

/* ---- the file ------------------------------------------------------------------------------ */

dt_status dt_bpe_load(const char *path, dt_bpe **out) {
    *out = NULL;
    char *text = NULL;
    DT_TRY(dt_read_text(path, "tokenizer", MAX_TOKENIZER_FILE, &text));
    dt_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        free(text);
        return dt_err_set(DT_ERR_OOM, "tokenizer: out of memory");
    }
    dt_status st;
    const char *c = text;
    while (isspace((unsigned char)*c))
        c++;
    if (*c == '{') {
        cJSON *root = cJSON_Parse(c);
        if (!root)
            st = dt_err_set(DT_ERR_FORMAT, "%s: not valid JSON (near \"%.30s\")", path,
                            cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
        else if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "model")))
            st = load_hf(b, root, path); /* encoder.json may hold a token "model" */
        else
            st = load_gpt2(b, root, path);
        cJSON_Delete(root);
    } else {
        st = load_tiktoken(b, text, path);
    }
    free(text);
    if (st != DT_OK) {
        dt_bpe_free(b);
        return st;
    }
    *out = b;
    return DT_OK;
}
