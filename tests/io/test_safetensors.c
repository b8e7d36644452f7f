/* io/safetensors: writer -> reader round trips (F32, BF16, metadata, insertion order, padding),
 * F16 conversion, and one hand-crafted corrupt file per lie a file can tell: each must fail
 * with the right status and a message naming the file, the tensor and the problem.
 * Works in a mkdtemp directory under /tmp that it removes at the end.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "harness.h"
#include "io/safetensors.h"

static char dir[] = "/tmp/dt_st_XXXXXX";
static char bad[600]; /* the path every crafted file is written to */

static void write_raw(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n)
        fprintf(stderr, "cannot write %s\n", path);
    if (f)
        fclose(f);
}

/* A file claiming header length `hlen`, with header text `hdr` and `data_len` zero bytes. */
static void craft_len(uint64_t hlen, const char *hdr, size_t data_len) {
    size_t n = strlen(hdr), total = 8 + n + data_len;
    unsigned char *b = calloc(1, total);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, hdr, n);
    write_raw(bad, b, total);
    free(b);
}

static void craft(const char *hdr, size_t data_len) { craft_len(strlen(hdr), hdr, data_len); }

/* dt_st_open(bad) must fail with `want` and a message holding the path, `what` and `tensor`. */
static void expect_fail(int line, dt_status want, const char *what, const char *tensor) {
    dt_st_file *f = (dt_st_file *)&f; /* must be reset to NULL on failure */
    dt_status st = dt_st_open(bad, &f);
    const char *m = dt_err_msg();
    dt_test_check(st == want, __FILE__, line, "status %s, want %s (%s)", dt_status_str(st),
                  dt_status_str(want), m);
    dt_test_check(f == NULL, __FILE__, line, "*out not NULL after failure");
    dt_test_check(strstr(m, bad) != NULL, __FILE__, line, "message lacks the path: %s", m);
    dt_test_check(strstr(m, what) != NULL, __FILE__, line, "message lacks '%s': %s", what, m);
    if (tensor) {
        char q[128];
        snprintf(q, sizeof q, "\"%s\"", tensor);
        dt_test_check(strstr(m, q) != NULL, __FILE__, line, "message lacks %s: %s", q, m);
    }
    if (st == DT_OK)
        dt_st_close(f);
    /* reading only the header finds the same fault, with the same words */
    char whole[1024];
    snprintf(whole, sizeof whole, "%s", m);
    f = (dt_st_file *)&f;
    st = dt_st_open_header(bad, &f);
    dt_test_check(st == want && f == NULL && !strcmp(dt_err_msg(), whole), __FILE__, line,
                  "header only: %s, %s (whole file: %s)", dt_status_str(st), dt_err_msg(), whole);
    if (st == DT_OK)
        dt_st_close(f);
}
#define EXPECT_FAIL(what, tensor) expect_fail(__LINE__, DT_ERR_FORMAT, what, tensor)

#define T1(body) "{\"t\": {" body "}}" /* one tensor named t */

static void test_round_trip(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/rt.safetensors", dir);
    float w[6] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
    dt_bf16 b[3] = {dt_bf16_from_f32(1.0f), dt_bf16_from_f32(-0.5f), dt_bf16_from_f32(3.140625f)};
    int32_t ids[2] = {7, -9};
    float scalar = 42.0f;
    int64_t sw[2] = {2, 3}, sb[1] = {3}, si[1] = {2};
    dt_st_writer *wr = NULL;
    DT_CHECK_OK(dt_st_writer_init(&wr));
    /* names out of alphabetical order: the writer must keep insertion order */
    DT_CHECK_OK(dt_st_writer_add(wr, "z.weight", DT_ST_F32, 2, sw, w));
    DT_CHECK_OK(dt_st_writer_add(wr, "a.bias", DT_ST_BF16, 1, sb, b));
    DT_CHECK_OK(dt_st_writer_add(wr, "ids", DT_ST_I32, 1, si, ids));
    DT_CHECK_OK(dt_st_writer_add(wr, "scale", DT_ST_F32, 0, NULL, &scalar));
    DT_CHECK_OK(dt_st_writer_set_metadata(wr, "format", "pt"));
    DT_CHECK_OK(dt_st_writer_set_metadata(wr, "step", "6"));
    DT_CHECK_OK(dt_st_writer_set_metadata(wr, "step", "7")); /* replaces */
    DT_CHECK(dt_st_writer_add(wr, "a.bias", DT_ST_F32, 1, sb, w) == DT_ERR_ARG,
             "duplicate name accepted by the writer");
    DT_CHECK(dt_st_writer_add(wr, "__metadata__", DT_ST_F32, 1, sb, w) == DT_ERR_ARG,
             "__metadata__ accepted as a tensor name");
    DT_CHECK_OK(dt_st_writer_commit(wr, p));
    dt_st_writer_free(wr);

    /* header length is a multiple of 8 and the data section is contiguous in insertion order */
    FILE *fp = fopen(p, "rb");
    unsigned char raw[8] = {0};
    DT_CHECK(fp && fread(raw, 1, 8, fp) == 8, "cannot read back %s", p);
    if (fp)
        fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    struct stat st;
    stat(p, &st);
    DT_CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
    DT_CHECK((uint64_t)st.st_size == 8 + hlen + 24 + 6 + 8 + 4, "file size %lld",
             (long long)st.st_size);

    dt_st_file *f = NULL;
    DT_CHECK_OK(dt_st_open(p, &f));
    if (!f)
        return;
    DT_CHECK(dt_st_count(f) == 4, "count %d", dt_st_count(f));
    const char *order[4] = {"z.weight", "a.bias", "ids", "scale"};
    for (int i = 0; i < 4; i++)
        DT_CHECK(dt_st_get(f, i) && strcmp(dt_st_get(f, i)->name, order[i]) == 0,
                 "tensor %d is not %s", i, order[i]);
    DT_CHECK(dt_st_get(f, 4) == NULL && dt_st_get(f, -1) == NULL, "out-of-range get");
    const dt_st_tensor *t0 = dt_st_get(f, 0), *t1 = dt_st_get(f, 1), *t2 = dt_st_get(f, 2);
    DT_CHECK((const char *)t1->data == (const char *)t0->data + 24 &&
                 (const char *)t2->data == (const char *)t1->data + 6,
             "data not contiguous in insertion order");
    DT_CHECK(t0->dtype == DT_ST_F32 && t0->ndim == 2 && t0->shape[0] == 2 && t0->shape[1] == 3 &&
                 t0->nbytes == 24, "z.weight descriptor wrong");
    DT_CHECK(dt_st_find(f, "nope") == NULL, "find of a missing name");
    DT_CHECK(dt_st_metadata(f, "format") && strcmp(dt_st_metadata(f, "format"), "pt") == 0,
             "metadata format");
    DT_CHECK(dt_st_metadata(f, "step") && strcmp(dt_st_metadata(f, "step"), "7") == 0,
             "metadata step");
    DT_CHECK(dt_st_metadata(f, "missing") == NULL, "missing metadata key");

    float out[6];
    DT_CHECK_OK(dt_st_read_f32(f, "z.weight", 2, sw, out));
    DT_CHECK(memcmp(out, w, sizeof w) == 0, "F32 round trip differs");
    DT_CHECK_OK(dt_st_read_f32(f, "a.bias", 1, sb, out));
    DT_CHECK(out[0] == 1.0f && out[1] == -0.5f && out[2] == 3.140625f, "BF16 -> f32: %g %g %g",
             out[0], out[1], out[2]);
    DT_CHECK_OK(dt_st_read_f32(f, "scale", 0, NULL, out));
    DT_CHECK(out[0] == 42.0f, "scalar read %g", out[0]);
    DT_CHECK(memcmp(t2->data, ids, sizeof ids) == 0, "I32 bytes differ");

    /* reading with the wrong shape names the file, the tensor and both shapes */
    int64_t wrong[2] = {3, 2};
    dt_status s = dt_st_read_f32(f, "z.weight", 2, wrong, out);
    DT_CHECK(s == DT_ERR_FORMAT && strstr(dt_err_msg(), p) && strstr(dt_err_msg(), "z.weight") &&
                 strstr(dt_err_msg(), "[2, 3]") && strstr(dt_err_msg(), "[3, 2]"),
             "shape mismatch: %s: %s", dt_status_str(s), dt_err_msg());
    s = dt_st_read_f32(f, "z.weight", 1, wrong, out);
    DT_CHECK(s == DT_ERR_FORMAT && strstr(dt_err_msg(), "[3]"), "ndim mismatch: %s",
             dt_err_msg());
    s = dt_st_read_f32(f, "absent", 1, sb, out);
    DT_CHECK(s == DT_ERR_FORMAT && strstr(dt_err_msg(), "absent"), "missing tensor: %s",
             dt_err_msg());
    s = dt_st_read_f32(f, "ids", 1, si, out);
    DT_CHECK(s == DT_ERR_FORMAT && strstr(dt_err_msg(), "I32"), "I32 as float: %s",
             dt_err_msg());
    dt_st_close(f);
    dt_st_close(NULL);

    /* the header alone: the same table, no data, offsets where the bytes are in the file */
    DT_CHECK_OK(dt_st_open_header(p, &f));
    DT_CHECK(f && dt_st_count(f) == 4 && !strcmp(dt_st_metadata(f, "step"), "7"),
             "header-only table");
    for (int i = 0; f && i < 4; i++) {
        const dt_st_tensor *t = dt_st_get(f, i);
        unsigned char got[24];
        int fd = open(p, O_RDONLY);
        DT_CHECK(t->data == NULL && t->nbytes <= sizeof got &&
                     pread(fd, got, t->nbytes, t->offset) == (ssize_t)t->nbytes,
                 "tensor %s at offset %lld", t->name, (long long)t->offset);
        const void *want[4] = {w, b, ids, &scalar};
        DT_CHECK(memcmp(got, want[i], t->nbytes) == 0, "%s: bytes at its offset differ", t->name);
        close(fd);
    }
    dt_st_close(f);

    /* an empty writer gives a valid file with no tensors */
    DT_CHECK_OK(dt_st_writer_init(&wr));
    DT_CHECK_OK(dt_st_writer_commit(wr, p));
    dt_st_writer_free(wr);
    f = NULL;
    DT_CHECK_OK(dt_st_open(p, &f));
    DT_CHECK(f && dt_st_count(f) == 0 && dt_st_metadata(f, "format") == NULL, "empty file");
    dt_st_close(f);

    /* committing into a missing directory is DT_ERR_IO */
    snprintf(p, sizeof p, "%s/no/dir/x.safetensors", dir);
    DT_CHECK_OK(dt_st_writer_init(&wr));
    s = dt_st_writer_commit(wr, p);
    DT_CHECK(s == DT_ERR_IO && strstr(dt_err_msg(), p), "commit to missing dir: %s",
             dt_err_msg());
    dt_st_writer_free(wr);
}

/* F16 is read (HF checkpoints in half precision), including subnormals and infinities. */
static void test_f16(void) {
    const char *hdr = T1("\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]");
    size_t n = strlen(hdr);
    unsigned char b[8 + 128] = {0};
    b[0] = (unsigned char)n;
    memcpy(b + 8, hdr, n);
    uint16_t h[6] = {0x3c00, 0xc000, 0x3800, 0x0001, 0x7c00, 0x7bff};
    memcpy(b + 8 + n, h, sizeof h);
    write_raw(bad, b, 8 + n + sizeof h);
    dt_st_file *f = NULL;
    DT_CHECK_OK(dt_st_open(bad, &f));
    float out[6];
    int64_t shape[1] = {6};
    DT_CHECK_OK(dt_st_read_f32(f, "t", 1, shape, out));
    DT_CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 0x1p-24f &&
                 out[4] == __builtin_inff() && out[5] == 65504.0f,
             "F16 -> f32: %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5]);
    dt_st_close(f);
}

static void test_corrupt(void) {
    /* missing file and a directory: DT_ERR_IO */
    snprintf(bad, sizeof bad, "%s/missing.safetensors", dir);
    expect_fail(__LINE__, DT_ERR_IO, "No such file", NULL);
    snprintf(bad, sizeof bad, "%s", dir);
    expect_fail(__LINE__, DT_ERR_IO, "not a regular file", NULL);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);

    write_raw(bad, "\x10\0\0\0\0", 5);
    EXPECT_FAIL("shorter than 8 bytes", NULL);
    write_raw(bad, "", 0);
    EXPECT_FAIL("shorter than 8 bytes", NULL);
    craft_len(100, "{}", 10);
    EXPECT_FAIL("larger than the file", NULL);
    craft_len((uint64_t)1 << 40, "{}", 0);
    EXPECT_FAIL("absurd", NULL);
    craft_len(~(uint64_t)0, "{}", 0); /* 2^64-1: no wraparound in the size arithmetic */
    EXPECT_FAIL("absurd", NULL);

    craft("{\"t\": ", 0);
    EXPECT_FAIL("not valid JSON", NULL);
    craft("{}   x  ", 0);
    EXPECT_FAIL("not valid JSON", NULL);
    craft("\xff\xfe\x00{", 0);
    EXPECT_FAIL("not valid JSON", NULL);
    craft("[1, 2]  ", 0);
    EXPECT_FAIL("not a JSON object", NULL);
    craft("\"str\"", 0);
    EXPECT_FAIL("not a JSON object", NULL);

    craft("{\"t\": 5}", 0);
    EXPECT_FAIL("not a JSON object", "t");
    craft(T1("\"shape\":[2],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("missing \"dtype\"", "t");
    craft(T1("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("missing \"shape\"", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2]"), 8);
    EXPECT_FAIL("missing \"data_offsets\"", "t");
    craft(T1("\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("\"dtype\" is not a string", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("\"shape\" is not an array", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"a\":0}"), 8);
    EXPECT_FAIL("\"data_offsets\" is not an array", "t");
    craft(T1("\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("unknown dtype \"F64\"", "t");
    craft(T1("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 8);
    EXPECT_FAIL("unknown dtype", "t");

    craft(T1("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("dim 0 is negative", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2,2.5],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("dim 1 is not an integer", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("dim 0 is too large", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("dim 0 is not a number", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("overflows", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]"), 8);
    EXPECT_FAIL("ndim 9 > 8", "t");

    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]"), 8);
    EXPECT_FAIL("not an array [begin, end]", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]"), 16);
    EXPECT_FAIL("not an array [begin, end]", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]"), 8);
    EXPECT_FAIL("begin > end", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 8);
    EXPECT_FAIL("begin is negative", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]"), 8);
    EXPECT_FAIL("end is not a number", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"), 12);
    EXPECT_FAIL("truncated", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1000000,1000008]"), 8);
    EXPECT_FAIL("beyond the data section", "t");
    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 8);
    EXPECT_FAIL("needs 8", "t");
    craft(T1("\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]"), 16);
    EXPECT_FAIL("hold 16 bytes but BF16 x [2, 2] needs 8", "t");

    craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16);
    EXPECT_FAIL("overlap", "b");
    craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[15,16]}}", 16);
    EXPECT_FAIL("overlap", "a");
    craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    EXPECT_FAIL("duplicate tensor name", "a");

    craft("{\"__metadata__\":{\"k\":1}}", 0);
    EXPECT_FAIL("\"__metadata__\" key \"k\" is not a string", NULL);
    craft("{\"__metadata__\":[\"k\"]}", 0);
    EXPECT_FAIL("\"__metadata__\" is not a JSON object", NULL);

    /* the tensors must tile the data section: a gap before a tensor, or bytes after the
     * last one, is a wrong header length or damage (as HF's reader says too) */
    craft("{\"__metadata__\":{\"k\":\"v\"},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]}}    ", 16);
    EXPECT_FAIL("bytes [0, 8) of the data section belong to no tensor", NULL);
    craft(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 9);
    EXPECT_FAIL("1 trailing bytes after the last tensor", NULL);
    /* a header length lowered by one: the padding's last space becomes the data's first byte */
    craft_len(strlen(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]") "  ") - 1,
              T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]") "  ", 8);
    EXPECT_FAIL("1 trailing bytes after the last tensor", NULL);

    /* a good file with an empty tensor (taking no bytes where it sits) opens */
    craft("{\"__metadata__\":{\"k\":\"v\"},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]}}    ", 8);
    dt_st_file *f = NULL;
    DT_CHECK_OK(dt_st_open(bad, &f));
    DT_CHECK(f && dt_st_count(f) == 2 && strcmp(dt_st_metadata(f, "k"), "v") == 0,
             "valid hand-made file");
    dt_st_close(f);

    /* a real file cut short: the last tensor runs past the end */
    char p[600];
    snprintf(p, sizeof p, "%s/cut.safetensors", dir);
    float w[64] = {0};
    int64_t sh[1] = {64};
    dt_st_writer *wr = NULL;
    DT_CHECK_OK(dt_st_writer_init(&wr));
    DT_CHECK_OK(dt_st_writer_add(wr, "h.0.mlp.weight", DT_ST_F32, 1, sh, w));
    DT_CHECK_OK(dt_st_writer_commit(wr, p));
    dt_st_writer_free(wr);
    struct stat sb;
    stat(p, &sb);
    DT_CHECK(truncate(p, sb.st_size - 10) == 0, "truncate failed");
    snprintf(bad, sizeof bad, "%s", p);
    EXPECT_FAIL("truncated", "h.0.mlp.weight");
    unlink(p);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    test_round_trip();
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    test_f16();
    test_corrupt();
    char p[600];
    snprintf(p, sizeof p, "%s/rt.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/bad.safetensors", dir);
    unlink(p);
    DT_CHECK(rmdir(dir) == 0, "temporary directory %s not empty at the end", dir);
    return DT_TEST_END();
}
