/* Scratch files for state that spills out of memory (the optimizer's moments, the
 * activations kept for the backward): created in a folder the user names, unlinked at once
 * (the descriptor keeps the file, so it is gone after a normal exit, an error or a kill),
 * and with its whole size reserved up front (posix_fallocate), so a full disk is an error at
 * start-up, never a failed write in the middle of a step. */
#ifndef DT_IO_SCRATCH_FILE_H
#define DT_IO_SCRATCH_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct dt_scratch_spec {
    const char *dir;  /* created (with its parents) when missing */
    const char *key;  /* the config key that named dir, for messages: "plugin.offload_dir" */
    const char *name; /* file name stem, unique per rank: "dtrain-optim-r3" (the pid is added) */
    const char *what; /* what the space is for, for messages: "this rank's optimizer state" */
    int64_t bytes;
} dt_scratch_spec;

/* Opens the scratch file of s: *fd, and its (now unlinked) name in path[path_cap]. Errors
 * (DT_ERR_IO, naming the folder and the sizes): dir not creatable or not writable, too
 * little free space (statvfs, then the reservation). On error no file is left. */
dt_status dt_scratch_open(const dt_scratch_spec *s, int *fd, char *path, size_t path_cap);

/* pread (write false) or pwrite of all n bytes at byte `at`, resumed after partial
 * transfers and EINTR. Returns 0, or the errno of the failed call, or -1 for a transfer
 * that moved no bytes (a read past the end); *fail_at is then the byte offset. */
int dt_scratch_transfer(int fd, void *buf, size_t n, int64_t at, bool write, int64_t *fail_at);

/* The message for a failed transfer's code (dt_scratch_transfer's return value). */
const char *dt_scratch_failure(int code, bool write);

#endif
