/* Atomic file writes and mkdir -p. See atomic.h.
 *
 * The new bytes go to PATH.tmp.<pid> (the pid keeps two processes writing the same path from
 * sharing a temporary), are fsynced, renamed over PATH, and then the directory is fsynced so
 * the rename itself survives a crash. No global state: safe from any thread that owns its
 * dt_atomic_file.
 */
#include "io/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Writes the directory part of `path` into `dir` ("." when there is none). */
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
    } else if (slash == path) {
        snprintf(dir, cap, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= cap)
            n = cap - 1;
        memcpy(dir, path, n);
        dir[n] = 0;
    }
}

/* fsync the directory holding `path`, so the rename is on disk and not just in the page cache.
 * Some filesystems (tmpfs on old kernels, some network mounts) refuse fsync on a directory
 * with EINVAL; the rename is then as durable as that filesystem allows, so that is not an
 * error. */
static dt_status fsync_dir(const char *path) {
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open directory %s to fsync: %s", path, dir,
                          strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL && e != EROFS)
        return dt_err_set(DT_ERR_IO, "%s: fsync of directory %s failed: %s", path, dir,
                          strerror(e));
    return DT_OK;
}

/* The path a symlink leads to, however many links deep (a missing last target is fine: it is
 * created); `path` itself when it is not a link. */
static dt_status follow_links(const char *path, char *out, size_t cap) {
    char cur[4096], link[4096];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
        return dt_err_set(DT_ERR_ARG, "%.64s...: path too long", path);
    for (int depth = 0;; depth++) {
        struct stat sb;
        if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode))
            break;
        if (depth == 40)
            return dt_err_set(DT_ERR_IO, "%s: too many levels of symbolic links", path);
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0)
            return dt_err_set(DT_ERR_IO, "%s: cannot read the link: %s", path, strerror(errno));
        link[n] = '\0';
        char dir[4096];
        dir_of(cur, dir, sizeof dir);
        int m = link[0] == '/' ? snprintf(cur, sizeof cur, "%s", link)
                               : snprintf(cur, sizeof cur, "%s/%s", dir, link);
        if (m < 0 || m >= (int)sizeof cur)
            return dt_err_set(DT_ERR_ARG, "%s: the link's target path is too long", path);
    }
    if (strlen(cur) >= cap)
        return dt_err_set(DT_ERR_ARG, "%.64s...: path too long", path);
    memcpy(out, cur, strlen(cur) + 1);
    return DT_OK;
}

/* A character device or FIFO that exists at `path`: opened for writing in place. A FIFO with
 * no reader is an error at once, not a wait. */
static dt_status open_in_place(dt_atomic_file *a, const struct stat *sb) {
    int fd = open(a->path, O_WRONLY | (S_ISFIFO(sb->st_mode) ? O_NONBLOCK : 0));
    if (fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open for writing: %s", a->path,
                          errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
    if (S_ISFIFO(sb->st_mode))
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        int e = errno;
        close(fd);
        return dt_err_set(DT_ERR_IO, "%s: %s", a->path, strerror(e));
    }
    a->in_place = true;
    return DT_OK;
}

dt_status dt_atomic_open(dt_atomic_file *a, const char *path) {
    if (!a || !path || !path[0])
        return dt_err_set(DT_ERR_ARG, "%s: NULL or empty path", __func__);
    memset(a, 0, sizeof *a);
    size_t len = strlen(path);
    if (len >= sizeof a->path)
        return dt_err_set(DT_ERR_ARG, "%s: path too long (%zu bytes): %.64s...", __func__, len,
                          path);
    DT_TRY(follow_links(path, a->path, sizeof a->path));
    path = a->path;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))
            return open_in_place(a, &sb);
        return dt_err_set(DT_ERR_IO, "%s: is %s, not a file to write", path,
                          S_ISDIR(sb.st_mode)    ? "a directory"
                          : S_ISBLK(sb.st_mode)  ? "a block device"
                          : S_ISSOCK(sb.st_mode) ? "a socket"
                                                 : "not a regular file");
    }
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f) {
        int e = errno;
        a->tmp[0] = 0; /* nothing to remove on abort */
        return dt_err_set(DT_ERR_IO, "%s: cannot create temporary file %s.tmp.%ld: %s", path,
                          path, (long)getpid(), strerror(e));
    }
    return DT_OK;
}

dt_status dt_atomic_write(dt_atomic_file *a, const void *data, size_t n) {
    if (!a || !a->f)
        return dt_err_set(DT_ERR_ARG, "%s: file is not open", __func__);
    if (n == 0)
        return DT_OK;
    if (!data)
        return dt_err_set(DT_ERR_ARG, "%s: %s: NULL data for %zu bytes", __func__, a->path, n);
    errno = 0;
    if (fwrite(data, 1, n, a->f) != n)
        return dt_err_set(DT_ERR_IO, "%s: write of %zu bytes to %s failed: %s", a->path, n,
                          a->in_place ? a->path : a->tmp, errno ? strerror(errno) : "short write");
    return DT_OK;
}

dt_status dt_atomic_commit(dt_atomic_file *a) {
    dt_status st = DT_OK;
    if (!a || !a->f)
        return dt_err_set(DT_ERR_ARG, "%s: file is not open", __func__);
    /* fflush moves stdio's buffer to the kernel; fsync moves the kernel's to the disk. Both
     * must succeed before the rename, or a crash could expose a file with missing tail. */
    if (fflush(a->f) != 0) {
        st = dt_err_set(DT_ERR_IO, "%s: flushing %s failed: %s", a->path,
                        a->in_place ? a->path : a->tmp, strerror(errno));
        goto fail;
    }
    if (!a->in_place && fsync(fileno(a->f)) != 0 && errno != EINVAL) {
        st = dt_err_set(DT_ERR_IO, "%s: fsync of %s failed: %s", a->path, a->tmp,
                        strerror(errno));
        goto fail;
    }
    FILE *f = a->f;
    a->f = NULL;
    if (fclose(f) != 0) {
        st = dt_err_set(DT_ERR_IO, "%s: closing %s failed: %s", a->path,
                        a->in_place ? a->path : a->tmp, strerror(errno));
        goto fail;
    }
    if (a->in_place)
        return DT_OK;
    if (rename(a->tmp, a->path) != 0) {
        st = dt_err_set(DT_ERR_IO, "%s: rename from %s failed: %s", a->path, a->tmp,
                        strerror(errno));
        goto fail;
    }
    a->tmp[0] = 0; /* renamed: nothing left to clean up */
    return fsync_dir(a->path);

fail:
    dt_atomic_abort(a);
    return st;
}

void dt_atomic_abort(dt_atomic_file *a) {
    if (!a)
        return;
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
    }
    if (a->tmp[0]) {
        unlink(a->tmp);
        a->tmp[0] = 0;
    }
}

dt_status dt_atomic_write_file(const char *path, const void *data, size_t n) {
    dt_atomic_file a;
    dt_status st = dt_atomic_open(&a, path);
    if (st != DT_OK)
        return st;
    DT_TRY_GOTO(dt_atomic_write(&a, data, n));
    return dt_atomic_commit(&a); /* cleans up after itself on failure */

fail:
    dt_atomic_abort(&a);
    return st;
}

/* mkdir one component; an existing directory is fine, an existing file is not. */
static dt_status mkdir_one(const char *full, const char *part) {
    if (mkdir(part, 0755) == 0)
        return DT_OK;
    int e = errno;
    struct stat sb;
    if (e == EEXIST && stat(part, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return DT_OK;
        return dt_err_set(DT_ERR_IO, "%s: cannot create directory: %s exists and is not a "
                          "directory", full, part);
    }
    return dt_err_set(DT_ERR_IO, "%s: cannot create directory %s: %s", full, part, strerror(e));
}

dt_status dt_mkdirs(const char *path) {
    if (!path || !path[0])
        return dt_err_set(DT_ERR_ARG, "%s: NULL or empty path", __func__);
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf)
        return dt_err_set(DT_ERR_ARG, "%s: path too long (%zu bytes): %.64s...", __func__, len,
                          path);
    memcpy(buf, path, len + 1);
    /* Create every prefix ending before a '/', then the whole path; skipping the leading '/'
     * and repeated slashes ("a//b") so no empty component is ever passed to mkdir. */
    for (size_t i = 1; i < len; i++) {
        if (buf[i] != '/' || buf[i - 1] == '/')
            continue;
        buf[i] = 0;
        dt_status st = mkdir_one(path, buf);
        buf[i] = '/';
        if (st != DT_OK)
            return st;
    }
    return mkdir_one(path, buf);
}

dt_status dt_file_open_regular(const char *path, const char *what, int *fd, size_t *size) {
    *fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO with no writer: refused, not waited on */
    if (*fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    struct stat sb;
    dt_status st = DT_OK;
    if (fstat(*fd, &sb) != 0)
        st = dt_err_set(DT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = dt_err_set(DT_ERR_IO, "%s: not a regular file", path);
    if (st != DT_OK) {
        close(*fd);
        *fd = -1;
        return st;
    }
    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
    *size = (size_t)sb.st_size;
    return DT_OK;
}

dt_status dt_read_text(const char *path, const char *what, size_t max_bytes, char **out) {
    *out = NULL;
    int fd;
    size_t size;
    DT_TRY(dt_file_open_regular(path, what, &fd, &size));
    dt_status st = DT_OK;
    char *buf = NULL;
    if (size > max_bytes)
        st = dt_err_set(DT_ERR_FORMAT, "%s: %zu bytes, more than the %zu a %s may have", path,
                        size, max_bytes, what);
    else if (!(buf = malloc(size + 1)))
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory for %zu bytes", path, size);
    for (size_t got = 0; st == DT_OK && got < size;) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n <= 0)
            st = dt_err_set(DT_ERR_IO, "%s: cannot read %s: %s", path, what,
                            n < 0 ? strerror(errno) : "file shrank while reading");
        else
            got += (size_t)n;
    }
    close(fd);
    if (st != DT_OK) {
        free(buf);
        return st;
    }
    buf[size] = '\0';
    *out = buf;
    return DT_OK;
}
