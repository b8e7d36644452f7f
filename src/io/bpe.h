/* Byte-level BPE tokenizers, read from the files the field ships them in:
 *   - a HuggingFace tokenizer.json whose model is BPE over byte-level strings (GPT-2's kind),
 *     with its added (special) tokens;
 *   - GPT-2's encoder.json, with vocab.bpe (the merges) beside it;
 *   - a tiktoken rank file (a base64 token and its rank per line: GPT-2's r50k, cl100k,
 *     Llama 3's), its special tokens and pre-tokenizer known by its size.
 * Text is cut into pieces by the vocabulary's pre-tokenizer (bpe_split.c: GPT-2's or
 * cl100k's pattern), and each piece's bytes are merged pair by pair, the lowest-ranked pair
 * first: by the merges' order for the JSON formats, by the merged token's rank for tiktoken.
 * Special tokens are never made from text: their texts encode as plain text. Decoding is the
 * tokens' bytes concatenated (a special token's text for its id).
 */
#ifndef DT_IO_BPE_H
#define DT_IO_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct dt_bpe dt_bpe;

typedef enum dt_bpe_split { DT_BPE_SPLIT_GPT2, DT_BPE_SPLIT_CL100K } dt_bpe_split;

/* Reads a tokenizer file of the kinds above, found from its content. A file of another kind
 * (another tokenizer.json model, a SentencePiece model, an unknown pre-tokenizer pattern or
 * tiktoken vocabulary) is DT_ERR_FORMAT naming what is supported. */
dt_status dt_bpe_load(const char *path, dt_bpe **out);
void dt_bpe_free(dt_bpe *b);

/* ids are in [0, vocab_size) (special tokens included) */
int64_t dt_bpe_vocab_size(const dt_bpe *b);
/* the end-of-document token (<|endoftext|>, Llama 3's <|end_of_text|>, </s>), or -1 */
int32_t dt_bpe_eot(const dt_bpe *b);
dt_bpe_split dt_bpe_split_of(const dt_bpe *b);
/* "tiktoken rank file, 100277 ids, cl100k pre-tokenizer" */
const char *dt_bpe_describe(const dt_bpe *b);

/* Appends the ids of text[0, n) to (*ids)[*n_ids ...], growing *ids (*cap its capacity). */
dt_status dt_bpe_encode(dt_bpe *b, const char *text, size_t n, int32_t **ids, int64_t *n_ids,
                        int64_t *cap);
/* Appends one id (an end-of-document token) the same way. */
dt_status dt_bpe_append(int32_t **ids, int64_t *n_ids, int64_t *cap, int32_t id);
/* The text of ids, malloc'd and NUL-terminated, its length in *len. An id the vocabulary does
 * not have is DT_ERR_ARG naming it. */
dt_status dt_bpe_decode(const dt_bpe *b, const int32_t *ids, int64_t n, char **out, size_t *len);

/* The end of the pre-tokenizer's piece that starts at s[at] (at < n). */
size_t dt_bpe_split_next(dt_bpe_split kind, const unsigned char *s, size_t n, size_t at);

#endif
