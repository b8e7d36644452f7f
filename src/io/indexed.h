/* Megatron indexed datasets, the format Megatron-LM, NeMo and GPT-NeoX preprocessing writes:
 * PREFIX.bin holds every sequence's token ids end to end; PREFIX.idx holds the header
 * ("MMIDIDX\0\0", version 1 as <Q, the ids' dtype code as <B, the sequence count and the
 * document-index count as <Q), then each sequence's length (int32), its byte offset in .bin
 * (int64) and the document index (int64: the sequence each document starts at, from 0 to the
 * sequence count). All little-endian.
 *
 * dtrain reads the sequences as one stream of tokens, ids stored as uint16 (dtype code 8) or
 * int32 (code 4); where documents start is read from the index on demand (data.doc_mask). The
 * index is validated whole at open and not held in memory: offsets contiguous from 0, lengths
 * not negative, the document index rising from 0 to the sequence count, and .bin exactly the
 * ids the index counts. Thread-independent.
 */
#ifndef DT_IO_INDEXED_H
#define DT_IO_INDEXED_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

/* Whether `path` names a dataset by prefix: it is not a file itself and PREFIX.idx exists. */
bool dt_indexed_named(const char *path);
/* An open index, for where documents start: its descriptor (the owner closes it) and counts */
typedef struct dt_indexed_docs {
    int fd;
    int64_t n_seq, n_doc, n_tok;
    int width;
} dt_indexed_docs;

/* Validates PREFIX.idx against PREFIX.bin; on success *fd reads .bin (the caller closes it),
 * *n_tok ids of *width bytes from offset 0, and (docs not NULL) *docs holds the index open.
 * DT_ERR_FORMAT / DT_ERR_IO naming the file. */
dt_status dt_indexed_open(const char *prefix, int *fd, int64_t *n_tok, int *width,
                          dt_indexed_docs *docs);
/* mark[i] = 1 where a document starts at token first + i (i in [0, n)), else left as it is:
 * a binary search of the document index, then its entries up to first + n. */
dt_status dt_indexed_doc_starts(const dt_indexed_docs *d, const char *path, int64_t first,
                                int64_t n, uint8_t *mark);

#endif
