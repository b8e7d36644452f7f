/* io/atomic: whole-file writes replace the old file, leave no temporaries behind, abort
 * removes the temporary, and failures are DT_ERR_IO naming the path; dt_mkdirs is mkdir -p.
 * Works in a mkdtemp directory under /tmp that it removes at the end.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/atomic.h"

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return (int)n;
}

/* Number of entries in dir whose name contains ".tmp." */
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strstr(de->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static bool is_char_device(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISCHR(sb.st_mode);
}

/* Targets that are not regular files: devices and FIFOs written in place (never replaced by
 * a file), a symlink followed to its target, a directory refused. */
static void check_not_regular(const char *dir) {
    char p[512], q[512], buf[64];
    if (is_char_device("/dev/null")) {
        DT_CHECK_OK(dt_atomic_write_file("/dev/null", "gone", 4));
        DT_CHECK(is_char_device("/dev/null"), "/dev/null is no longer a device");
    }
    if (is_char_device("/dev/full")) {
        dt_status st = dt_atomic_write_file("/dev/full", "x", 1);
        DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "/dev/full") &&
                     strstr(dt_err_msg(), "No space"),
                 "/dev/full: %s", dt_err_msg());
        DT_CHECK(is_char_device("/dev/full"), "/dev/full is no longer a device");
    }
    /* a symlink: its target takes the bytes, the link stays a link */
    snprintf(p, sizeof p, "%s/target.txt", dir);
    snprintf(q, sizeof q, "%s/link.txt", dir);
    DT_CHECK_OK(dt_atomic_write_file(p, "old", 3));
    DT_CHECK(symlink("target.txt", q) == 0, "symlink");
    DT_CHECK_OK(dt_atomic_write_file(q, "new!", 4));
    struct stat sb;
    DT_CHECK(lstat(q, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced by a file");
    DT_CHECK(read_text(p, buf, sizeof buf) == 4 && !strcmp(buf, "new!"), "target holds '%s'", buf);
    unlink(q);
    unlink(p);
    /* a dangling link: its target is created */
    DT_CHECK(symlink("made.txt", q) == 0, "symlink");
    DT_CHECK_OK(dt_atomic_write_file(q, "ab", 2));
    snprintf(p, sizeof p, "%s/made.txt", dir);
    DT_CHECK(file_size(p) == 2 && lstat(q, &sb) == 0 && S_ISLNK(sb.st_mode),
             "dangling link's target not made");
    unlink(q);
    unlink(p);
    /* a directory: an error naming it, the directory untouched */
    dt_status st = dt_atomic_write_file(dir, "x", 1);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "a directory"), "directory: %s", dt_err_msg());
    /* a FIFO with no reader: an error at once, not a wait; the FIFO stays */
    snprintf(p, sizeof p, "%s/fifo", dir);
    DT_CHECK(mkfifo(p, 0600) == 0, "mkfifo");
    st = dt_atomic_write_file(p, "x", 1);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "no reader"), "fifo: %s", dt_err_msg());
    DT_CHECK(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    unlink(p);
    DT_CHECK(count_tmp(dir) == 0, "temporaries left behind");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    char dir[] = "/tmp/dt_atomic_XXXXXX", p[512], q[512], buf[256];
    DT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");

    /* write, then overwrite with shorter content: the file is exactly the new bytes */
    snprintf(p, sizeof p, "%s/a.json", dir);
    DT_CHECK_OK(dt_atomic_write_file(p, "{\"x\": 12345}", 12));
    DT_CHECK(read_text(p, buf, sizeof buf) == 12 && strcmp(buf, "{\"x\": 12345}") == 0,
             "first write read back as '%s'", buf);
    DT_CHECK_OK(dt_atomic_write_file(p, "{}", 2));
    DT_CHECK(read_text(p, buf, sizeof buf) == 2 && strcmp(buf, "{}") == 0,
             "overwrite read back as '%s'", buf);
    DT_CHECK(count_tmp(dir) == 0, "temporary files left behind");
    DT_CHECK_OK(dt_atomic_write_file(p, NULL, 0)); /* an empty file is a valid write */
    DT_CHECK(file_size(p) == 0, "empty write gave %ld bytes", file_size(p));

    /* streaming writes; before commit the old file is untouched */
    dt_atomic_file a;
    DT_CHECK_OK(dt_atomic_open(&a, p));
    DT_CHECK_OK(dt_atomic_write(&a, "hello ", 6));
    DT_CHECK_OK(dt_atomic_write(&a, "world", 5));
    DT_CHECK(file_size(p) == 0, "target changed before commit");
    DT_CHECK(count_tmp(dir) == 1, "expected one temporary while writing");
    DT_CHECK_OK(dt_atomic_commit(&a));
    DT_CHECK(read_text(p, buf, sizeof buf) == 11 && strcmp(buf, "hello world") == 0,
             "streamed write read back as '%s'", buf);
    DT_CHECK(count_tmp(dir) == 0, "temporary left after commit");

    /* abort: the temporary goes away and the target keeps its old content */
    DT_CHECK_OK(dt_atomic_open(&a, p));
    DT_CHECK_OK(dt_atomic_write(&a, "junk", 4));
    dt_atomic_abort(&a);
    dt_atomic_abort(&a); /* twice is harmless */
    DT_CHECK(count_tmp(dir) == 0, "abort left the temporary behind");
    DT_CHECK(read_text(p, buf, sizeof buf) == 11, "abort changed the target");

    /* a file in a missing directory: DT_ERR_IO naming the path and the reason */
    snprintf(q, sizeof q, "%s/no/such/dir/x.json", dir);
    dt_status st = dt_atomic_write_file(q, "x", 1);
    DT_CHECK(st == DT_ERR_IO, "missing dir gave %s", dt_status_str(st));
    DT_CHECK(strstr(dt_err_msg(), q) && strstr(dt_err_msg(), "No such file"), "message: %s",
             dt_err_msg());

    /* mkdir -p: nested, idempotent, trailing and doubled slashes */
    snprintf(q, sizeof q, "%s/m/n//o/", dir);
    DT_CHECK_OK(dt_mkdirs(q));
    DT_CHECK_OK(dt_mkdirs(q));
    snprintf(q, sizeof q, "%s/m/n/o/f.txt", dir);
    DT_CHECK_OK(dt_atomic_write_file(q, "ok", 2));
    DT_CHECK(file_size(q) == 2, "write into mkdirs result failed");
    DT_CHECK_OK(dt_mkdirs(dir)); /* an existing absolute path */

    /* a path component that is a regular file */
    snprintf(q, sizeof q, "%s/a.json/sub", dir);
    st = dt_mkdirs(q);
    DT_CHECK(st == DT_ERR_IO, "mkdirs through a file gave %s", dt_status_str(st));
    DT_CHECK(strstr(dt_err_msg(), q) != NULL, "message: %s", dt_err_msg());
    st = dt_mkdirs(p); /* the whole path is an existing file */
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "not a directory"), "message: %s",
             dt_err_msg());
    DT_CHECK(dt_mkdirs("") == DT_ERR_ARG, "empty path accepted");

    check_not_regular(dir);

    /* cleanup */
    snprintf(q, sizeof q, "%s/m/n/o/f.txt", dir);
    unlink(q);
    const char *subs[] = {"/m/n/o", "/m/n", "/m"};
    for (int i = 0; i < 3; i++) {
        snprintf(q, sizeof q, "%s%s", dir, subs[i]);
        rmdir(q);
    }
    unlink(p);
    DT_CHECK(rmdir(dir) == 0, "temporary directory %s not empty at the end", dir);
    return DT_TEST_END();
}
