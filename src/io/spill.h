/* Records that spill to disk: a scratch file (io/scratch_file.h) of n fixed-size records,
 * each written from and read back into the caller's memory by one background thread, in the
 * order the caller asks for them. A request returns a ticket at once; dt_spill_wait blocks
 * until that request (and so every earlier one) is done. So a caller overlaps the transfer
 * of one record with its own work on another, and a read queued after a write of the same
 * record sees that write. The caller must not touch a buffer between asking and waiting.
 *
 * The first failed transfer makes its request and every later one fail with one message
 * naming the file, the byte offset and the reason; records are then undefined. One thread
 * of control owns a dt_spill. */
#ifndef DT_IO_SPILL_H
#define DT_IO_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "io/scratch_file.h"

typedef struct dt_spill dt_spill;

/* What the thread moved and how long the caller waited for it (the transfer time it did
 * not hide). */
typedef struct dt_spill_stats {
    int64_t bytes_written, bytes_read;
    double wait_s; /* in dt_spill_wait */
    double busy_s; /* the thread's time in pread/pwrite */
} dt_spill_stats;

/* spec->bytes is ignored: the file holds n_records x record_bytes. */
dt_status dt_spill_open(const dt_scratch_spec *spec, int64_t n_records, size_t record_bytes,
                        dt_spill **out);
/* Finishes what is queued, stops the thread, closes (and so removes) the file. */
void dt_spill_close(dt_spill *s);

int64_t dt_spill_put(dt_spill *s, int64_t record, const void *buf); /* ticket */
int64_t dt_spill_get(dt_spill *s, int64_t record, void *buf);       /* ticket */
dt_status dt_spill_wait(dt_spill *s, int64_t ticket);               /* a ticket < 0: none */

size_t dt_spill_record_bytes(const dt_spill *s);
dt_spill_stats dt_spill_stats_of(const dt_spill *s);

#endif
