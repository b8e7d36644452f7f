/* Token shards in the llm.c / nanoGPT format: a header of 256 little-endian int32 (magic,
 * version, token count, rest zero), then `count` tokens. Two kinds, as llm.c writes them
 * (dev/data/data_common.py): GPT-2's, magic 20240520 version 1, uint16 ids; and Llama 3's,
 * magic 20240801 version 7, uint32 ids, for vocabularies past 65536. Both read alike, and so
 * does a Megatron indexed dataset (io/indexed.h) named by its prefix: its sequences, end to end,
 * and nanoGPT's raw .bin (its prepare.py's uint16 ids with no header): a file without a
 * shard's magic is read so, its ids then validated like any shard's (a damaged shard's header
 * is not ids below the vocabulary: the error names both readings).
 *
 * dt_tokens_open validates the whole shard: magic, version, a count that matches the file size
 * (a truncated shard is named as such), and every token < vocab_size; dt_tokens_read then
 * reads tokens by pread, and a file that shrank since is an error naming it.
 */
#ifndef DT_IO_TOKENS_H
#define DT_IO_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define DT_TOKENS_MAGIC 20240520 /* uint16 ids */
#define DT_TOKENS_VERSION 1
#define DT_TOKENS_MAGIC_U32 20240801 /* uint32 ids */
#define DT_TOKENS_VERSION_U32 7
#define DT_TOKENS_HEADER_INTS 256

typedef struct dt_tokens {
    int fd;       /* -1 when closed */
    int64_t n_tok;
    int width;    /* bytes an id: 2 or 4 */
    int64_t base; /* byte offset of token 0 in the file: past a shard's header, 0 in a Megatron
                   * dataset's .bin */
    char *path;   /* for messages */
    int idx_fd;   /* a Megatron dataset's index (where documents start); -1: none */
    int64_t n_seq, n_doc;
} dt_tokens;

/* vocab_size > 0: every token must be < vocab_size, else an error naming the first offender
 * (a uint32 id must fit an int32 in any case). */
dt_status dt_tokens_open(const char *path, int vocab_size, dt_tokens *out);
void dt_tokens_close(dt_tokens *t);
/* Tokens [first, first + n) into out, as int32 whatever their width on disk; DT_ERR_IO naming
 * the file when it can no longer give them. */
dt_status dt_tokens_read(const dt_tokens *t, int64_t first, int64_t n, int32_t *out);
/* mark[i] = 1 where the dataset's document index starts a document at token first + i (a
 * Megatron dataset; other files have none and leave mark as it is). */
dt_status dt_tokens_doc_starts(const dt_tokens *t, int64_t first, int64_t n, uint8_t *mark);
/* Atomic writes of a shard: uint16 ids (GPT-2's kind) and uint32 ids (Llama 3's kind). */
dt_status dt_tokens_write(const char *path, const uint16_t *tok, int64_t n_tok);
dt_status dt_tokens_write_u32(const char *path, const uint32_t *tok, int64_t n_tok);

/* Byte-level tokenizer (vocab 256): reads text files (a directory: every regular file in it,
 * sorted by name, skipping fortune's .dat/.u8 index files), splits the bytes 90/10 into
 * DIR/train.bin and DIR/val.bin. Reports the counts through n_train/n_val (may be NULL). */
dt_status dt_tokens_prepare_bytes(const char *input, const char *out_dir, double val_fraction,
                                  int64_t *n_train, int64_t *n_val);

/* The same with a byte-level BPE (io/bpe.h): each input file is one document, its ids
 * followed by the tokenizer's end-of-document token (when it names one); the ids are split
 * by position, and the shards hold uint16 ids when the vocabulary fits (<= 65536 ids), else
 * uint32. */
struct dt_bpe;
dt_status dt_tokens_prepare_bpe(const char *input, const char *out_dir, double val_fraction,
                                struct dt_bpe *bpe, int64_t *n_train, int64_t *n_val);

#endif
