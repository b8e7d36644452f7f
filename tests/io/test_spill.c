/* io/spill: records written and read back by the I/O thread hold the caller's bytes; a read
 * queued behind a write of the same record sees it without a wait in between; many requests
 * in flight (more than the queue) keep their order; the file is reserved at open and gone
 * from the folder at once; a failed write and a short read fail their request and every later
 * one with the file's name, and a wait on an earlier request still succeeds. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"
#include "io/spill.h"

static char dir[64];

static int files_in(const char *path) {
    int n = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void fill(unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31 + (size_t)seed * 7 + (i >> 8));
}

static dt_scratch_spec spec_of(const char *name) {
    return (dt_scratch_spec){
        .dir = dir, .key = "plugin.act_offload_dir", .name = name, .what = "the test's records"};
}

static void check_round_trip(void) {
    enum { N = 40, BYTES = 3 * 4096 + 100 };
    dt_scratch_spec sp = spec_of("rt");
    dt_spill *s = NULL;
    DT_CHECK_OK(dt_spill_open(&sp, N, BYTES, &s));
    if (!s)
        return;
    DT_CHECK(files_in(dir) == 0, "the spill file is not unlinked");
    DT_CHECK(dt_spill_record_bytes(s) == BYTES, "record size");
    unsigned char *out = malloc((size_t)N * BYTES), *in = calloc((size_t)N, BYTES);
    for (int r = 0; r < N; r++)
        fill(out + (size_t)r * BYTES, BYTES, r);
    /* every record written, in reverse, with no wait: more requests than the queue holds */
    int64_t last = -1;
    for (int r = N - 1; r >= 0; r--)
        last = dt_spill_put(s, r, out + (size_t)r * BYTES);
    for (int r = 0; r < N; r++)
        last = dt_spill_get(s, r, in + (size_t)r * BYTES);
    DT_CHECK_OK(dt_spill_wait(s, last));
    DT_CHECK(!memcmp(in, out, (size_t)N * BYTES), "records read back differ");
    /* a write then a read of one record, queued back to back */
    unsigned char a[BYTES], b[BYTES];
    fill(a, BYTES, 99);
    dt_spill_put(s, 7, a);
    DT_CHECK_OK(dt_spill_wait(s, dt_spill_get(s, 7, b)));
    DT_CHECK(!memcmp(a, b, BYTES), "a read queued after a write missed it");
    dt_spill_stats st = dt_spill_stats_of(s);
    DT_CHECK(
        st.bytes_written == (int64_t)(N + 1) * BYTES && st.bytes_read == (int64_t)(N + 1) * BYTES,
        "stats: %lld written, %lld read", (long long)st.bytes_written, (long long)st.bytes_read);
    dt_spill_close(s);
    free(out);
    free(in);
}

static void check_errors(void) {
    dt_spill *s = NULL;
    /* larger than the disk: an error at open, no file left */
    dt_scratch_spec sp = spec_of("big");
    dt_status st = dt_spill_open(&sp, (int64_t)1 << 40, 1 << 20, &s);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "too small") &&
                 strstr(dt_err_msg(), "plugin.act_offload_dir"),
             "no space: %s", dt_err_msg());
    DT_CHECK(files_in(dir) == 0, "a failed open left a file");
    /* a write past the file size limit (SIGXFSZ ignored, so EFBIG) */
    enum { BYTES = 8192 };
    sp = spec_of("err");
    DT_CHECK_OK(dt_spill_open(&sp, 4, BYTES, &s));
    if (!s)
        return;
    unsigned char buf[BYTES];
    fill(buf, BYTES, 1);
    int64_t first = dt_spill_put(s, 0, buf);
    DT_CHECK_OK(dt_spill_wait(s, first));
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = BYTES + 100;
    setrlimit(RLIMIT_FSIZE, &lim);
    int64_t bad = dt_spill_put(s, 2, buf);
    int64_t after = dt_spill_get(s, 0, buf);
    st = dt_spill_wait(s, after);
    setrlimit(RLIMIT_FSIZE, &old);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "writing") &&
                 strstr(dt_err_msg(), "byte 16384"),
             "failed write: %s", dt_err_msg());
    DT_CHECK(dt_spill_wait(s, bad) == DT_ERR_IO, "the failed request itself succeeds");
    DT_CHECK_OK(dt_spill_wait(s, first));
    dt_spill_close(s);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/dtrain-spill-XXXXXX");
    if (!mkdtemp(dir)) {
        DT_CHECK(false, "mkdtemp: %s", strerror(errno));
        return DT_TEST_END();
    }
    check_round_trip();
    check_errors();
    rmdir(dir);
    return DT_TEST_END();
}
