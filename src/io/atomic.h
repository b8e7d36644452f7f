/* File helpers of the io layer. Atomic writes: write PATH.tmp.<pid>, fsync it, rename over
 * PATH, fsync the directory; either the old file or the complete new one is visible, never a
 * partial one. That holds for a new path or a regular file; a symlink is followed to its
 * target (which is then written so); a character device or FIFO is written in place (so
 * /dev/null is a sink and /dev/full gives the write's error), never replaced by a file; a
 * directory, block device or socket is an error naming it. */
#ifndef DT_IO_ATOMIC_H
#define DT_IO_ATOMIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

typedef struct dt_atomic_file {
    FILE *f;
    char path[4096], tmp[4200];
    bool in_place; /* a character device or FIFO: written straight, no temporary */
} dt_atomic_file;

dt_status dt_atomic_open(dt_atomic_file *a, const char *path);
dt_status dt_atomic_write(dt_atomic_file *a, const void *data, size_t n);
dt_status dt_atomic_commit(dt_atomic_file *a); /* flush, fsync, rename, fsync dir */
void dt_atomic_abort(dt_atomic_file *a);       /* remove the temporary file */

/* Whole small file in one call (JSON manifests). */
dt_status dt_atomic_write_file(const char *path, const void *data, size_t n);
/* mkdir -p */
dt_status dt_mkdirs(const char *path);

/* Open a regular file for reading: *fd and its size. Missing, unreadable or not a regular
 * file (a directory) is DT_ERR_IO; `what` names the kind of file in the message. */
dt_status dt_file_open_regular(const char *path, const char *what, int *fd, size_t *size);
/* A whole text file, NUL-terminated, in *out (malloc'd; the caller frees). A file larger than
 * max_bytes is DT_ERR_FORMAT; open errors as dt_file_open_regular. */
dt_status dt_read_text(const char *path, const char *what, size_t max_bytes, char **out);

#endif
