/* Unlinked, reserved scratch files. See scratch_file.h. */
#include "io/scratch_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static double mib(double bytes) { return bytes / 1048576.0; }

/* mkdir -p, where an existing folder is fine even when mkdir says EROFS or EACCES */
static dt_status make_dir(const dt_scratch_spec *s) {
    char p[4096];
    const char *dir = s->dir;
    if (!dir[0])
        return dt_err_set(DT_ERR_ARG, "%s is empty", s->key);
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return dt_err_set(DT_ERR_ARG, "%s %s: path too long", s->key, dir);
    for (char *c = p + 1;; c++) {
        bool end = *c == '\0';
        if (*c != '/' && !end)
            continue;
        *c = '\0';
        struct stat sb;
        int err = mkdir(p, 0700) == 0 ? 0 : errno;
        if (err && err != EEXIST && !(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)))
            return dt_err_set(DT_ERR_IO, "%s %s cannot be created: mkdir %s: %s", s->key, dir, p,
                              strerror(err));
        if (end)
            break;
        *c = '/';
    }
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return dt_err_set(DT_ERR_IO, "%s %s cannot be created: %s", s->key, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return dt_err_set(DT_ERR_IO, "%s %s cannot be created: a file of that name exists", s->key,
                          dir);
    return DT_OK;
}

/* Free space first, for a message with both sizes; then the reservation itself, which also
 * catches ranks that share the disk and each fit alone. */
static dt_status reserve(const dt_scratch_spec *s, int fd, const char *path) {
    if (s->bytes == 0)
        return DT_OK;
    struct statvfs sv;
    if (fstatvfs(fd, &sv) == 0 && (double)sv.f_bavail * sv.f_frsize < (double)s->bytes)
        return dt_err_set(DT_ERR_IO, "%s %s is too small: %.1f MiB free, %s needs %.1f MiB", s->key,
                          s->dir, mib((double)sv.f_bavail * sv.f_frsize), s->what,
                          mib((double)s->bytes));
    int r = posix_fallocate(fd, 0, (off_t)s->bytes);
    if (r == ENOSPC || r == EDQUOT)
        return dt_err_set(DT_ERR_IO, "%s %s is too small: reserving %.1f MiB for %s failed: %s",
                          s->key, s->dir, mib((double)s->bytes), s->what, strerror(r));
    if (r != 0)
        return dt_err_set(DT_ERR_IO, "%s %s: reserving %.1f MiB in %s failed: %s", s->key, s->dir,
                          mib((double)s->bytes), path, strerror(r));
    return DT_OK;
}

dt_status dt_scratch_open(const dt_scratch_spec *s, int *fd, char *path, size_t path_cap) {
    *fd = -1;
    DT_TRY(make_dir(s));
    if (snprintf(path, path_cap, "%s/%s-p%ld.bin", s->dir, s->name, (long)getpid()) >=
        (int)path_cap)
        return dt_err_set(DT_ERR_ARG, "%s %s: path too long", s->key, s->dir);
    int f = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (f < 0)
        return dt_err_set(DT_ERR_IO, "%s %s is not writable: cannot create %s: %s", s->key, s->dir,
                          path, strerror(errno));
    /* from here the file has no name: the descriptor keeps it, the kernel removes it */
    if (unlink(path) != 0) {
        int err = errno;
        close(f);
        return dt_err_set(DT_ERR_IO, "%s %s: cannot unlink %s: %s", s->key, s->dir, path,
                          strerror(err));
    }
    dt_status st = reserve(s, f, path);
    if (st != DT_OK) {
        close(f);
        return st;
    }
    *fd = f;
    return DT_OK;
}

int dt_scratch_transfer(int fd, void *buf, size_t n, int64_t at, bool write, int64_t *fail_at) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = write ? pwrite(fd, p, n, (off_t)at) : pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *fail_at = at;
            return r < 0 ? errno : -1;
        }
        p += r;
        at += r;
        n -= (size_t)r;
    }
    return 0;
}

const char *dt_scratch_failure(int code, bool write) {
    if (code > 0)
        return strerror(code);
    return write ? "short write (no bytes written)" : "short read (the file ends early)";
}
