/* safetensors files (HuggingFace): an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "F32"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"key": "string", ...}}, then the raw little-endian tensor bytes.
 *
 * Reading validates everything a hostile or truncated file could lie about (header length
 * beyond the file, offsets outside the data section or overlapping, sizes that disagree with
 * dtype x shape, bad JSON) and names the file and the tensor in the error. Writing is atomic
 * (io/atomic.h): a reader never sees a half-written file.
 */
#ifndef DT_IO_SAFETENSORS_H
#define DT_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dt_st_dtype {
    DT_ST_F32,
    DT_ST_BF16,
    DT_ST_F16,
    DT_ST_I32,
    DT_ST_I64,
    DT_ST_U8,
    DT_ST_DTYPE_COUNT
} dt_st_dtype;

typedef struct dt_st_tensor {
    const char *name; /* borrowed from the file object */
    dt_st_dtype dtype;
    int ndim;
    int64_t shape[8];
    size_t nbytes;
    int64_t offset;   /* where its bytes start in the file */
    const void *data; /* borrowed: points into the file's bytes (NULL: dt_st_open_header) */
} dt_st_tensor;

typedef struct dt_st_file dt_st_file;

/* Reads and validates the whole file into memory. */
dt_status dt_st_open(const char *path, dt_st_file **out);
/* The same checks from the header and the file's length alone, for files larger than memory
 * (data shards): tensors have no data, and their bytes are read at `offset` by the caller. */
dt_status dt_st_open_header(const char *path, dt_st_file **out);
void dt_st_close(dt_st_file *f);
int dt_st_count(const dt_st_file *f);
const dt_st_tensor *dt_st_get(const dt_st_file *f, int i);
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name); /* NULL if absent */
const char *dt_st_metadata(const dt_st_file *f, const char *key);     /* NULL if absent */

/* Copy a tensor out as fp32 (converting BF16/F16/F32), checking the expected shape; the error
 * names the file, the tensor and both shapes. */
dt_status dt_st_read_f32(const dt_st_file *f, const char *name, int ndim, const int64_t *shape,
                         float *out);

/* Writer: collect tensors (data borrowed until dt_st_writer_commit), then write atomically. */
typedef struct dt_st_writer dt_st_writer;
dt_status dt_st_writer_init(dt_st_writer **out);
void dt_st_writer_free(dt_st_writer *w);
dt_status dt_st_writer_add(dt_st_writer *w, const char *name, dt_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data);
/* The same for a tensor whose bytes are made at commit, in order, piece by piece: fn gives
 * the piece that starts at byte `offset` of the tensor (*data, *len: 1 to the bytes left;
 * valid until the next call), so a tensor larger than memory streams through a buffer. */
typedef dt_status (*dt_st_source_fn)(void *ctx, int64_t offset, const void **data, size_t *len);
dt_status dt_st_writer_add_source(dt_st_writer *w, const char *name, dt_st_dtype dtype,
                                  int ndim, const int64_t *shape, dt_st_source_fn fn,
                                  void *ctx);
dt_status dt_st_writer_set_metadata(dt_st_writer *w, const char *key, const char *value);
dt_status dt_st_writer_commit(dt_st_writer *w, const char *path);
/* The byte where the data section of the file dt_st_writer_commit would write now begins:
 * tensor i's bytes then start at that plus the sizes of tensors 0..i-1 (added in order, no
 * gaps), so a reader can pread a tensor without parsing the header. */
dt_status dt_st_writer_data_start(const dt_st_writer *w, int64_t *start);

#endif
