/* Tests for optim/offload.h and AdamW with offloaded moments: the chunk formula and the
 * accountant's window; a file of known values updated chunk by chunk through the window
 * equals the same update in memory for several chunk sizes; AdamW steps with the moments on
 * disk give the bits of dt_adamw_update_ref over whole tensors (and of the in-memory
 * optimizer), bf16 copy included; the fused kernel cut anywhere gives the same bits; errors:
 * an uncreatable or unwritable folder, too little disk, a short write, a short read. Ranges
 * (what checkpoints stream): any [first, first + n) of either moment read straight from the
 * file equals the whole copy's, and written straight to it changes exactly those elements. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/mem.h"
#include "harness.h"
#include "kernels/adamw.h"
#include "optim/adamw.h"
#include "optim/offload.h"

static char dir[64];

static int files_in(const char *d) {
    DIR *h = opendir(d);
    int n = 0;
    for (struct dirent *e; h && (e = readdir(h));)
        n += e->d_name[0] != '.';
    if (h)
        closedir(h);
    return n;
}

static double window_for_chunk(int64_t chunk) { return 16.0 * (double)chunk; }

static void check_chunk_formula(void) {
    DT_CHECK(dt_offload_chunk_for(1 << 24, 64.0 * 1048576) == 4194304, "64 MiB -> 4 Mi floats");
    DT_CHECK(dt_offload_chunk_for(1000, 64.0 * 1048576) == 512, "capped at ceil16(count / 2)");
    DT_CHECK(dt_offload_chunk_for(1001, 64.0 * 1048576) == 512, "ceil(1001 / 2) = 501 -> 512");
    DT_CHECK(dt_offload_chunk_for(1000, 4096) == 256, "4096 bytes: 256 floats");
    DT_CHECK(dt_offload_chunk_for(1000, 1000) == 48, "1000 bytes: floor(1000/256)*16 = 48");
    DT_CHECK(dt_offload_chunk_for(1000, 10) == 16, "at least 16");
    DT_CHECK(dt_offload_chunk_for(0, 1e6) == 16, "empty: 16");
    for (double w = 100; w < 1e7; w *= 3.7)
        DT_CHECK(dt_offload_chunk_for(1 << 20, w) % 16 == 0, "chunk for %g bytes not 16-aligned",
                 w);
}

typedef struct known_ctx {
    int calls;
    int64_t next; /* chunks arrive in order and cover every element once */
} known_ctx;

/* m = 3 m + 1, v = v / 2 - first: any change that depends on the element and its position */
static void known_update(void *ctx, int64_t first, int64_t n, float *m, float *v) {
    known_ctx *c = ctx;
    c->calls++;
    if (first != c->next)
        c->next = -1;
    else
        c->next = first + n;
    for (int64_t i = 0; i < n; i++) {
        m[i] = 3.0f * m[i] + 1.0f;
        v[i] = v[i] * 0.5f - (float)(first + i);
    }
}

/* a file of known values, updated in chunks, equals the update in memory */
static void check_stream(dt_mem *mem, int64_t count, int64_t chunk) {
    dt_offload_opts o = {.dir = dir, .tag = "unit", .window_bytes = window_for_chunk(chunk)};
    dt_offload_store *f;
    size_t before = dt_mem_live(mem, DT_MEM_OPTIM);
    DT_CHECK_OK(dt_offload_init(&o, count, mem, &f));
    if (!f)
        return;
    DT_CHECK(dt_offload_chunk(f) == dt_offload_chunk_for(count, o.window_bytes), "chunk");
    DT_CHECK(dt_mem_live(mem, DT_MEM_OPTIM) - before == (size_t)16 * dt_offload_chunk(f),
             "window is 16 x chunk bytes");
    DT_CHECK(files_in(dir) == 0, "the file has no name in %s", dir);
    float *m = malloc(count * sizeof *m), *v = malloc(count * sizeof *v);
    float *m2 = malloc(count * sizeof *m), *v2 = malloc(count * sizeof *v);
    dt_test_fill(m, count, 11, 2.0f);
    dt_test_fill(v, count, 12, 2.0f);
    DT_CHECK_OK(dt_offload_write(f, m, v));
    known_ctx c = {0};
    for (int pass = 0; pass < 3; pass++)
        DT_CHECK_OK(dt_offload_stream(f, known_update, &c));
    int64_t n_chunks = (count + dt_offload_chunk(f) - 1) / dt_offload_chunk(f);
    DT_CHECK(c.calls == 3 * n_chunks, "count %lld chunk %lld: %d calls", (long long)count,
             (long long)chunk, c.calls);
    known_ctx whole = {0};
    for (int pass = 0; pass < 3; pass++) {
        whole.next = 0;
        known_update(&whole, 0, count, m, v);
    }
    DT_CHECK_OK(dt_offload_read(f, m2, v2));
    DT_CHECK(!memcmp(m, m2, count * sizeof *m) && !memcmp(v, v2, count * sizeof *v),
             "count %lld chunk %lld: streamed update differs from memory", (long long)count,
             (long long)chunk);
    /* one moment written alone leaves the other as it was */
    dt_test_fill(m, count, 13, 1.0f);
    DT_CHECK_OK(dt_offload_write(f, m, NULL));
    DT_CHECK_OK(dt_offload_read(f, m2, v2));
    DT_CHECK(!memcmp(m, m2, count * sizeof *m) && !memcmp(v, v2, count * sizeof *v),
             "writing m alone changed v or missed m");
    dt_offload_free(f);
    DT_CHECK(dt_mem_live(mem, DT_MEM_OPTIM) == before, "window released");
    free(m), free(v), free(m2), free(v2);
}

static dt_param P(const char *name, int64_t offset, int64_t numel, bool decay) {
    dt_param p = {.ndim = decay ? 2 : 1, .offset = offset, .numel = numel, .decay = decay};
    snprintf(p.name, sizeof p.name, "%s", name);
    p.shape[0] = numel;
    return p;
}

/* AdamW with moments on disk = the reference kernel over whole tensors, bit for bit */
static void check_adamw(dt_mem *mem, int64_t chunk, bool bf16) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_optim_config oc = cfg.optim;
    oc.weight_decay = 0.1f;
    enum { N = 3000, FIRST = 37 }; /* the owned range starts mid-tensor, like a ZeRO shard */
    dt_param table[] = {P("w", 0, 1000, true), P("b", 1008, 21, false), P("w2", 1040, 1960, true)};
    float w[N], g[N], wr[N], mr[N] = {0}, vr[N] = {0}, wm[N];
    dt_bf16 lp[N] = {0}, lpr[N] = {0};
    dt_test_fill(w, N, 1, 1.0f);
    memcpy(wr, w, sizeof w);
    memcpy(wm, w, sizeof w);
    dt_offload_opts o = {.dir = dir, .tag = "adamw", .window_bytes = window_for_chunk(chunk)};
    dt_adamw *disk, *inmem;
    DT_CHECK_OK(dt_adamw_init_offload(&oc, table, 3, FIRST, N - FIRST, &o, mem, &disk));
    DT_CHECK_OK(dt_adamw_init(&oc, table, 3, FIRST, N - FIRST, mem, &inmem));
    if (!disk || !inmem)
        return;
    DT_CHECK(dt_adamw_m(disk) == NULL, "offloaded moments are not in memory");
    for (int t = 1; t <= 4; t++) {
        dt_test_fill(g, N, 100 + t, 1.0f);
        float lr = 1e-2f / t, scale = 0.75f;
        DT_CHECK_OK(dt_adamw_step(disk, w + FIRST, g + FIRST, bf16 ? lp + FIRST : NULL, lr,
                                  scale));
        DT_CHECK_OK(dt_adamw_step(inmem, wm + FIRST, g + FIRST, NULL, lr, scale));
        for (int i = 0; i < 3; i++) {
            const dt_param *p = &table[i];
            int64_t a = p->offset > FIRST ? p->offset : FIRST, n = p->offset + p->numel - a;
            dt_adamw_hparams h = {.lr = lr, .beta1 = oc.beta1, .beta2 = oc.beta2, .eps = oc.eps,
                                  .weight_decay = p->decay ? oc.weight_decay : 0.0f,
                                  .grad_scale = scale, .step = t};
            dt_adamw_update_ref(wr + a, g + a, mr + a, vr + a, bf16 ? lpr + a : NULL, n, &h);
        }
    }
    float m[N], v[N];
    DT_CHECK_OK(dt_adamw_get_moments(disk, m + FIRST, v + FIRST));
    DT_CHECK(!memcmp(w, wr, sizeof w) && !memcmp(w, wm, sizeof w), "chunk %lld: weights differ",
             (long long)chunk);
    DT_CHECK(!memcmp(m + FIRST, mr + FIRST, (N - FIRST) * sizeof *m) &&
                 !memcmp(v + FIRST, vr + FIRST, (N - FIRST) * sizeof *v),
             "chunk %lld: moments differ", (long long)chunk);
    if (bf16)
        DT_CHECK(!memcmp(lp, lpr, sizeof lp), "chunk %lld: bf16 copy differs", (long long)chunk);
    /* set_moments round trip through the file */
    for (int i = FIRST; i < N; i++)
        m[i] = (float)i, v[i] = (float)-i;
    DT_CHECK_OK(dt_adamw_set_moments(disk, m + FIRST, v + FIRST));
    float m2[N], v2[N];
    DT_CHECK_OK(dt_adamw_get_moments(disk, m2 + FIRST, v2 + FIRST));
    DT_CHECK(!memcmp(m + FIRST, m2 + FIRST, (N - FIRST) * sizeof *m) &&
                 !memcmp(v + FIRST, v2 + FIRST, (N - FIRST) * sizeof *v), "moments round trip");
    dt_adamw_free(disk);
    dt_adamw_free(inmem);
}

/* the fused kernel is element-wise: any cut (aligned or not) gives the bits of one call */
static void check_kernel_cuts(void) {
    enum { N = 40000 }; /* over the kernel's threading threshold */
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N];
    dt_test_fill(p, N, 5, 1.0f);
    dt_test_fill(g, N, 6, 1.0f);
    dt_test_fill(m, N, 7, 0.1f);
    for (int i = 0; i < N; i++)
        v[i] = m[i] * m[i];
    memcpy(p2, p, sizeof p), memcpy(m2, m, sizeof m), memcpy(v2, v, sizeof v);
    dt_adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 3};
    dt_adamw_update(p, g, m, v, NULL, N, &h);
    static const int cuts[] = {0, 1, 7, 16, 33, 512, 515, 16384, 16391, 33000, N};
    for (int k = 0; k + 1 < (int)(sizeof cuts / sizeof *cuts); k++) {
        int a = cuts[k], n = cuts[k + 1] - a;
        dt_adamw_update(p2 + a, g + a, m2 + a, v2 + a, NULL, n, &h);
    }
    DT_CHECK(!memcmp(p, p2, sizeof p) && !memcmp(m, m2, sizeof m) && !memcmp(v, v2, sizeof v),
             "kernel over pieces differs from one call");
}

static void check_errors(dt_mem *mem) {
    char path[128];
    dt_offload_store *f = NULL;
    /* a folder under a regular file cannot be created */
    snprintf(path, sizeof path, "%s/plain", dir);
    FILE *plain = fopen(path, "w");
    if (plain)
        fclose(plain);
    snprintf(path, sizeof path, "%s/plain/sub", dir);
    dt_offload_opts o = {.dir = path, .tag = "e", .window_bytes = 4096};
    dt_status st = dt_offload_init(&o, 100, mem, &f);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "cannot be created") &&
                 strstr(dt_err_msg(), path), "uncreatable dir: %s", dt_err_msg());
    snprintf(path, sizeof path, "%s/plain", dir);
    unlink(path);
    /* an existing folder without write permission (root writes anywhere but sysfs) */
    const char *ro = "/sys/kernel";
    char own_ro[96];
    if (geteuid() != 0) {
        snprintf(own_ro, sizeof own_ro, "%s/ro", dir);
        mkdir(own_ro, 0500);
        ro = own_ro;
    }
    o.dir = ro;
    st = dt_offload_init(&o, 100, mem, &f);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "is not writable") &&
                 strstr(dt_err_msg(), ro), "unwritable dir: %s", dt_err_msg());
    if (ro == own_ro)
        rmdir(own_ro);
    /* a state larger than the disk (nothing that large is allocated: the window is 4 KiB) */
    o.dir = dir;
    st = dt_offload_init(&o, (int64_t)1 << 50, mem, &f);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "too small"), "no space: %s",
             dt_err_msg());
    DT_CHECK(files_in(dir) == 0, "failed init left a file in %s", dir);
    DT_CHECK(dt_mem_live(mem, DT_MEM_OPTIM) == 0, "failed init left memory");

    /* a short write during a step: the file size limit (SIGXFSZ ignored, so EFBIG) */
    known_ctx c = {0};
    DT_CHECK_OK(dt_offload_init(&o, 1000, mem, &f));
    if (!f)
        return;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000; /* bytes: inside the first chunk (256 floats each of m and v) */
    setrlimit(RLIMIT_FSIZE, &lim);
    st = dt_offload_stream(f, known_update, &c);
    setrlimit(RLIMIT_FSIZE, &old);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "writing") &&
                 strstr(dt_err_msg(), dt_offload_path(f)), "short write: %s", dt_err_msg());
    /* a short read: the file cut off behind our back (found by its descriptor) */
    char fd_dir[] = "/proc/self/fd", link[512], target[512];
    int cut = 0;
    DIR *h = opendir(fd_dir);
    for (struct dirent *e; h && (e = readdir(h));) {
        snprintf(link, sizeof link, "%s/%s", fd_dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0 && (target[n] = 0, strstr(target, dt_offload_path(f))))
            cut += ftruncate(atoi(e->d_name), 100) == 0;
    }
    if (h)
        closedir(h);
    DT_CHECK(cut == 1, "found the offload file's descriptor (%d)", cut);
    float m[1000];
    st = dt_offload_read(f, m, NULL);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "short read") &&
                 strstr(dt_err_msg(), dt_offload_path(f)), "short read: %s", dt_err_msg());
    dt_offload_free(f);
}

/* ranges across chunk boundaries against the whole copies of dt_offload_read/_write */
static void check_ranges(dt_mem *mem, int64_t count, int64_t chunk) {
    dt_offload_opts o = {.dir = dir, .tag = "range", .window_bytes = window_for_chunk(chunk)};
    dt_offload_store *f = NULL;
    DT_CHECK_OK(dt_offload_init(&o, count, mem, &f));
    float *m = malloc((size_t)count * sizeof *m), *v = malloc((size_t)count * sizeof *v);
    float *got = malloc((size_t)count * sizeof *got), *want[2] = {m, v};
    if (!f || !m || !v || !got)
        goto done;
    for (int64_t i = 0; i < count; i++)
        m[i] = (float)i + 0.25f, v[i] = -(float)i;
    DT_CHECK_OK(dt_offload_write(f, m, v));
    const int64_t cuts[][2] = {{0, count}, {1, count - 1}, {chunk - 1, 2}, {chunk, chunk},
                               {3, 2 * chunk + 5}, {count - 1, 1}, {count / 2, 0}};
    for (int k = 0; k < 7; k++)
        for (int w = 0; w < 2; w++) {
            int64_t a = cuts[k][0], n = cuts[k][1];
            if (a < 0 || a + n > count)
                continue;
            DT_CHECK_OK(dt_offload_read_range(f, w, a, n, got));
            DT_CHECK(n == 0 || memcmp(got, want[w] + a, (size_t)n * sizeof *got) == 0,
                     "moment %d range [%lld, +%lld) of %lld, chunk %lld", w, (long long)a,
                     (long long)n, (long long)count, (long long)chunk);
        }
    /* write v's elements [3, 3 + 2 chunk + 5) as 7s: exactly those change */
    int64_t a = 3, n = 2 * chunk + 5 < count - 3 ? 2 * chunk + 5 : count - 3;
    for (int64_t i = 0; i < n; i++)
        got[i] = 7.0f;
    DT_CHECK_OK(dt_offload_write_range(f, 1, a, n, got));
    for (int64_t i = a; i < a + n; i++)
        v[i] = 7.0f;
    float *m2 = malloc((size_t)count * sizeof *m2);
    if (m2) {
        DT_CHECK_OK(dt_offload_read(f, m2, got));
        DT_CHECK(memcmp(m2, m, (size_t)count * sizeof *m) == 0 &&
                     memcmp(got, v, (size_t)count * sizeof *v) == 0,
                 "a written range changed other elements (chunk %lld)", (long long)chunk);
    }
    free(m2);
    DT_CHECK(dt_offload_read_range(f, 0, count - 1, 2, got) == DT_ERR_ARG &&
                 dt_offload_read_range(f, 2, 0, 1, got) == DT_ERR_ARG, "a range past the end");
done:
    free(got);
    free(v);
    free(m);
    dt_offload_free(f);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/dt_offload_XXXXXX");
    if (!mkdtemp(dir)) {
        DT_CHECK(false, "mkdtemp: %s", strerror(errno));
        return DT_TEST_END();
    }
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    check_chunk_formula();
    static const int64_t chunks[] = {16, 48, 640, 4096};
    for (int k = 0; k < 4; k++) {
        check_stream(mem, 1000, chunks[k]);
        check_stream(mem, 16 * 20, chunks[k]);
        check_adamw(mem, chunks[k], k % 2 == 1);
    }
    check_stream(mem, 0, 16);
    check_ranges(mem, 1000, 48);
    check_ranges(mem, 1000, 16);
    check_ranges(mem, 333, 64);
    check_kernel_cuts();
    check_errors(mem);
    DT_CHECK(files_in(dir) == 0, "files left in %s", dir);
    rmdir(dir);
    dt_mem_free(mem);
    return DT_TEST_END();
}
