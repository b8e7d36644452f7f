/* Optimizer state on disk (the idea of ZeRO-Infinity, Rajbhandari et al., SC'21, on a
 * CPU): AdamW's two moment arrays of `count` floats live in one file, and an update streams
 * them chunk by chunk through a bounded, double-buffered window in memory: a background
 * thread (pthreads) reads chunk i+1 and writes chunk i-1 back while chunk i is updated.
 *
 * The file is created with a name unique to the run (tag and pid) and unlinked at once: it
 * lives as long as its descriptor, so it is gone after a normal exit, an error, or a kill.
 * Its space is reserved at init (posix_fallocate), so a full disk is an error before the
 * first step, never a failed write later. The window is the only memory counted (category
 * optim, "adamw.offload_window"). One thread of control owns a dt_offload_store; the I/O
 * thread exists only inside dt_offload_stream and the copy calls.
 */
#ifndef DT_OPTIM_OFFLOAD_H
#define DT_OPTIM_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"

typedef struct dt_offload_store dt_offload_store;

typedef struct dt_offload_opts {
    const char *dir;     /* created (with its parents) when missing */
    const char *tag;     /* part of the file name, unique per rank: "r3" */
    double window_bytes; /* memory for the window; see dt_offload_chunk_for */
} dt_offload_opts;

/* Floats per chunk for `count` elements and a window of `window_bytes`: the window holds two
 * slots of (m, v) chunks, 16 bytes per chunk float, so
 *   chunk = max(16, min(floor(window_bytes / 256) * 16, ceil16(ceil(count / 2))))
 * and the accountant's buffer is exactly 16 * chunk bytes. Chunk boundaries are multiples of
 * 16 floats. The cap at half the state keeps the window within 16 x 16 bytes of the moments
 * it replaces (8 * count), and gives the double buffer at least two chunks to overlap. */
int64_t dt_offload_chunk_for(int64_t count, double window_bytes);

/* Creates dir when missing and the file in it, reserves 8 * ceil(count / chunk) * chunk bytes
 * of disk, all zero (fresh moments). Errors: dir not creatable or not writable, too little
 * free space (statvfs, then the reservation), each naming the folder and the sizes. */
dt_status dt_offload_init(const dt_offload_opts *o, int64_t count, dt_mem *mem,
                          dt_offload_store **out);
/* Closes (and so removes) the file and frees the window. */
void dt_offload_free(dt_offload_store *f);

int64_t dt_offload_chunk(const dt_offload_store *f);
const char *dt_offload_path(const dt_offload_store *f);

/* Called for each chunk [first, first + n) of the elements, in order, with that chunk's
 * moments m[n], v[n] in the window; it may change them. Must not fail. */
typedef void (*dt_offload_fn)(void *ctx, int64_t first, int64_t n, float *m, float *v);

/* Streams every chunk through fn: read ahead, update, write back. A failed or short read or
 * write is DT_ERR_IO naming the file and byte offset; the file's moments are then undefined
 * (the step must not be taken as done). */
dt_status dt_offload_stream(dt_offload_store *f, dt_offload_fn fn, void *ctx);

/* Copies of all `count` moments out of and into the file; m or v may be NULL (that moment is
 * left alone). */
dt_status dt_offload_read(dt_offload_store *f, float *m, float *v);
dt_status dt_offload_write(dt_offload_store *f, const float *m, const float *v);

/* Elements [first, first + n) of one moment (which: 0 m, 1 v) straight between the file and
 * the caller's buffer, by pread/pwrite, with no window and no thread: for checkpoints, which
 * stream a rank's moments through their own bounded buffer. A failed or short transfer is
 * DT_ERR_IO naming the file and byte offset. */
dt_status dt_offload_read_range(dt_offload_store *f, int which, int64_t first, int64_t n,
                                float *out);
dt_status dt_offload_write_range(dt_offload_store *f, int which, int64_t first, int64_t n,
                                 const float *in);

#endif
