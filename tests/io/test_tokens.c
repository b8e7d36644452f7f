/* io/tokens: shard round trip, hand-crafted bad shards (magic, version, truncation, trailing
 * bytes, too few tokens, token >= vocab), and the byte-level prepare step on a small directory
 * holding a .dat index, a hidden file, a subdirectory and a symlink that must be read once.
 * Works in a mkdtemp directory under /tmp that it removes at the end.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/tokens.h"

static char dir[] = "/tmp/dt_tok_XXXXXX";
static char bad[600];

static void write_raw(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n)
        fprintf(stderr, "cannot write %s\n", path);
    if (f)
        fclose(f);
}

/* A shard with the given header fields, `n_file` tokens 0, 1, 2, ... and `extra` zero bytes. */
static void craft(int32_t magic, int32_t version, int32_t count, int n_file, size_t extra) {
    size_t n = 1024 + 2 * (size_t)n_file + extra;
    unsigned char *b = calloc(1, n);
    int32_t h[3] = {magic, version, count};
    memcpy(b, h, sizeof h);
    for (int i = 0; i < n_file; i++) {
        uint16_t t = (uint16_t)i;
        memcpy(b + 1024 + 2 * i, &t, 2);
    }
    write_raw(bad, b, n);
    free(b);
}

static void expect_fail(int line, int vocab, dt_status want, const char *what,
                        const char *what2) {
    dt_tokens t;
    memset(&t, 0xab, sizeof t); /* must be zeroed on failure */
    dt_status st = dt_tokens_open(bad, vocab, &t);
    const char *m = dt_err_msg();
    dt_test_check(st == want, __FILE__, line, "status %s, want %s (%s)", dt_status_str(st),
                  dt_status_str(want), m);
    dt_test_check(t.fd == -1 && t.path == NULL && t.n_tok == 0, __FILE__, line,
                  "dt_tokens not cleared on failure");
    dt_test_check(strstr(m, bad) != NULL, __FILE__, line, "message lacks the path: %s", m);
    dt_test_check(strstr(m, what) != NULL, __FILE__, line, "message lacks '%s': %s", what, m);
    if (what2)
        dt_test_check(strstr(m, what2) != NULL, __FILE__, line, "message lacks '%s': %s", what2,
                      m);
    if (st == DT_OK)
        dt_tokens_close(&t);
}
#define EXPECT_FAIL(vocab, what, what2) expect_fail(__LINE__, vocab, DT_ERR_FORMAT, what, what2)

static void test_shards(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/rt.bin", dir);
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++)
        tok[i] = (uint16_t)(i * 37 % 50257);
    DT_CHECK_OK(dt_tokens_write(p, tok, 1000));
    struct stat sb;
    DT_CHECK(stat(p, &sb) == 0 && sb.st_size == 1024 + 2000, "shard size %lld",
             (long long)sb.st_size);
    dt_tokens t = {0};
    DT_CHECK_OK(dt_tokens_open(p, 50257, &t));
    int32_t back[1000];
    bool same = t.n_tok == 1000 && t.width == 2 && dt_tokens_read(&t, 0, 1000, back) == DT_OK;
    for (int i = 0; same && i < 1000; i++)
        same = back[i] == tok[i];
    DT_CHECK(same, "round trip differs (n_tok %lld)", (long long)t.n_tok);
    /* outside the shard: an argument error, nothing read */
    DT_CHECK(dt_tokens_read(&t, 999, 2, back) == DT_ERR_ARG, "read past the end accepted");
    /* the file shrinks while open (another process rewrote it): an error naming the file,
     * never a SIGBUS */
    DT_CHECK(truncate(p, 1024 + 1000) == 0, "truncate failed");
    dt_status rs = dt_tokens_read(&t, 400, 200, back);
    DT_CHECK(rs == DT_ERR_IO && strstr(dt_err_msg(), p) && strstr(dt_err_msg(), "shrank"),
             "read of a shrunk shard: %s (%s)", dt_status_str(rs), dt_err_msg());
    DT_CHECK_OK(dt_tokens_read(&t, 0, 500, back)); /* what is still there reads */
    dt_tokens_close(&t);
    dt_tokens_close(&t); /* closing twice is harmless */
    DT_CHECK(t.fd == -1 && t.path == NULL, "close did not clear the handle");
    DT_CHECK_OK(dt_tokens_write(p, tok, 1000));
    DT_CHECK_OK(dt_tokens_open(p, 0, &t)); /* vocab 0: no range check */
    dt_tokens_close(&t);

    /* a token >= vocab: the message names the index, the value and the vocab size */
    snprintf(bad, sizeof bad, "%s", p);
    EXPECT_FAIL(1000, "token 28 has value 1036", ">= vocab_size 1000");

    snprintf(bad, sizeof bad, "%s/missing.bin", dir);
    expect_fail(__LINE__, 0, DT_ERR_IO, "No such file", NULL);
    snprintf(bad, sizeof bad, "%s", dir);
    expect_fail(__LINE__, 0, DT_ERR_IO, "not a regular file", NULL);

    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    write_raw(bad, "", 0);
    EXPECT_FAIL(0, "bad magic 0", "not a dtrain/llm.c token shard");
    write_raw(bad, tok, 999); /* an odd number of bytes: not uint16 ids either */
    EXPECT_FAIL(0, "not a dtrain/llm.c token shard", "nor raw uint16 ids");
    /* no header: nanoGPT's raw uint16 ids, read as such (and checked against the vocab) */
    write_raw(bad, tok, sizeof tok);
    {
        dt_tokens raw;
        int32_t back[1000];
        DT_CHECK_OK(dt_tokens_open(bad, 65536, &raw));
        DT_CHECK(raw.n_tok == 1000 && raw.width == 2 && raw.base == 0, "raw: %lld tokens",
                 (long long)raw.n_tok);
        DT_CHECK_OK(dt_tokens_read(&raw, 0, 1000, back));
        bool same = true;
        for (int i = 0; i < 1000; i++)
            same &= back[i] == tok[i];
        DT_CHECK(same, "raw ids read back differently");
        dt_tokens_close(&raw);
    }
    /* a damaged shard's header is no ids below the vocabulary: both readings named */
    craft(20240521, 1, 10, 10, 0);
    EXPECT_FAIL(256, "not a token shard (bad magic 20240521, expected 20240520",
                "nor raw uint16 ids under vocab_size 256");
    craft(0x46554747, 1, 10, 10, 0); /* "GGUF": some other binary */
    EXPECT_FAIL(256, "expected 20240520", "nor raw uint16 ids");
    craft(DT_TOKENS_MAGIC, 2, 10, 10, 0);
    EXPECT_FAIL(0, "version 2", "expected 1");
    craft(DT_TOKENS_MAGIC, 1, 100, 60, 0);
    EXPECT_FAIL(0, "truncated: header says 100 tokens, file holds 60", NULL);
    craft(DT_TOKENS_MAGIC, 1, 10, 10, 1); /* half a token at the end */
    EXPECT_FAIL(0, "header says 10 tokens (20 bytes) but file holds 21 bytes", "trailing");
    craft(DT_TOKENS_MAGIC, 1, 10, 12, 0);
    EXPECT_FAIL(0, "header says 10 tokens (20 bytes) but file holds 24 bytes", "trailing");
    craft(DT_TOKENS_MAGIC, 1, -5, 10, 0);
    EXPECT_FAIL(0, "negative token count -5", NULL);
    craft(DT_TOKENS_MAGIC, 1, 1, 1, 0);
    EXPECT_FAIL(0, "holds 1 tokens; need at least 2", NULL);
    craft(DT_TOKENS_MAGIC, 1, 0, 0, 0);
    EXPECT_FAIL(0, "need at least 2", NULL);
    craft(DT_TOKENS_MAGIC, 1, 300, 300, 0);
    EXPECT_FAIL(256, "token 256 has value 256 >= vocab_size 256", NULL);
    craft(DT_TOKENS_MAGIC, 1, 256, 256, 0);
    DT_CHECK_OK(dt_tokens_open(bad, 256, &t));
    dt_tokens_close(&t);
    unlink(bad);
    unlink(p);

    snprintf(p, sizeof p, "%s/no/dir/x.bin", dir);
    dt_status st = dt_tokens_write(p, tok, 10);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), p), "write to missing dir: %s",
             dt_err_msg());
}

static void put(const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/in/%s", dir, name);
    write_raw(p, text, strlen(text));
}

static void test_prepare(void) {
    char in[256], out[256], p[600];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(out, sizeof out, "%s/out/deep", dir);
    DT_CHECK(mkdir(in, 0755) == 0, "mkdir %s", in);
    /* sorted by name: a.txt, b.txt, link (-> a.txt: skipped, already read), sub/ skipped */
    put("b.txt", "BBBBBBBBBB");
    put("a.txt", "AAAAAAAAAA");
    put("b.dat", "index bytes that must not be tokens");
    put("b.u8", "utf-8 index that must not be tokens");
    put(".hidden", "hidden");
    snprintf(p, sizeof p, "%s/link", in);
    DT_CHECK(symlink("a.txt", p) == 0, "symlink failed");
    snprintf(p, sizeof p, "%s/dangling", in);
    DT_CHECK(symlink("nowhere", p) == 0, "symlink failed");
    snprintf(p, sizeof p, "%s/sub", in);
    DT_CHECK(mkdir(p, 0755) == 0, "mkdir sub");

    int64_t n_train = -1, n_val = -1;
    DT_CHECK_OK(dt_tokens_prepare_bytes(in, out, 0.1, &n_train, &n_val));
    DT_CHECK(n_train == 18 && n_val == 2, "split %lld / %lld, want 18 / 2", (long long)n_train,
             (long long)n_val);
    dt_tokens t = {0};
    snprintf(p, sizeof p, "%s/train.bin", out);
    DT_CHECK_OK(dt_tokens_open(p, 256, &t));
    int32_t got[18] = {0};
    int ok = t.n_tok == 18 && dt_tokens_read(&t, 0, 18, got) == DT_OK;
    for (int i = 0; ok && i < 18; i++)
        ok = got[i] == (i < 10 ? 'A' : 'B');
    DT_CHECK(ok, "train.bin holds the wrong bytes (n_tok %lld)", (long long)t.n_tok);
    dt_tokens_close(&t);
    snprintf(p, sizeof p, "%s/val.bin", out);
    DT_CHECK_OK(dt_tokens_open(p, 256, &t));
    DT_CHECK(t.n_tok == 2 && dt_tokens_read(&t, 0, 2, got) == DT_OK && got[0] == 'B' &&
                 got[1] == 'B', "val.bin wrong");
    dt_tokens_close(&t);

    /* a single file as input; out_dir already exists */
    snprintf(p, sizeof p, "%s/a.txt", in);
    DT_CHECK_OK(dt_tokens_prepare_bytes(p, out, 0.5, &n_train, &n_val));
    DT_CHECK(n_train == 5 && n_val == 5, "single file split %lld / %lld", (long long)n_train,
             (long long)n_val);

    /* too small for two shards of >= 2 tokens, empty, missing, bad fraction */
    put("tiny", "abc");
    snprintf(p, sizeof p, "%s/tiny", in);
    dt_status st = dt_tokens_prepare_bytes(p, out, 0.1, NULL, NULL);
    DT_CHECK(st == DT_ERR_FORMAT && strstr(dt_err_msg(), p) && strstr(dt_err_msg(), "too small"),
             "tiny input: %s: %s", dt_status_str(st), dt_err_msg());
    snprintf(p, sizeof p, "%s/empty", dir);
    DT_CHECK(mkdir(p, 0755) == 0, "mkdir empty");
    st = dt_tokens_prepare_bytes(p, out, 0.1, NULL, NULL);
    DT_CHECK(st == DT_ERR_FORMAT && strstr(dt_err_msg(), p) && strstr(dt_err_msg(), "empty"),
             "empty input: %s: %s", dt_status_str(st), dt_err_msg());
    rmdir(p);
    snprintf(p, sizeof p, "%s/missing", dir);
    st = dt_tokens_prepare_bytes(p, out, 0.1, NULL, NULL);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), p), "missing input: %s", dt_err_msg());
    DT_CHECK(dt_tokens_prepare_bytes(in, out, 1.0, NULL, NULL) == DT_ERR_ARG,
             "val_fraction 1 accepted");

    const char *names[] = {"a.txt", "b.txt", "b.dat", "b.u8", ".hidden", "link", "dangling",
                           "tiny"};
    for (int i = 0; i < 8; i++) {
        snprintf(p, sizeof p, "%s/%s", in, names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/sub", in);
    rmdir(p);
    rmdir(in);
    snprintf(p, sizeof p, "%s/train.bin", out);
    unlink(p);
    snprintf(p, sizeof p, "%s/val.bin", out);
    unlink(p);
    rmdir(out);
    snprintf(p, sizeof p, "%s/out", dir);
    rmdir(p);
}

/* Llama 3's kind of shard (llm.c: magic 20240801, version 7, uint32 ids), its bytes laid out
 * here by hand as the published format has them, not by dtrain's writer; then dtrain's
 * writer gives the same bytes. */
static void test_shards_u32(void) {
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/u32.bin", dir);
    snprintf(q, sizeof q, "%s/u32_dtrain.bin", dir);
    enum { N = 300 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)((uint64_t)i * 104729u % 262144u); /* up to Gemma's 256k and past */
    int32_t hdr[256] = {20240801, 7, N};
    FILE *f = fopen(p, "wb");
    DT_CHECK(f && fwrite(hdr, 4, 256, f) == 256 && fwrite(tok, 4, N, f) == N && !fclose(f),
             "writing %s", p);
    dt_tokens t = {0};
    DT_CHECK_OK(dt_tokens_open(p, 262144, &t));
    int32_t back[N];
    bool same = t.n_tok == N && t.width == 4 && dt_tokens_read(&t, 0, N, back) == DT_OK;
    for (int i = 0; same && i < N; i++)
        same = back[i] == (int32_t)tok[i];
    DT_CHECK(same, "uint32 shard read back differs (width %d)", t.width);
    DT_CHECK(dt_tokens_read(&t, 7, 3, back) == DT_OK && back[0] == (int32_t)tok[7] &&
                 back[2] == (int32_t)tok[9],
             "a read from the middle");
    dt_tokens_close(&t);
    DT_CHECK_OK(dt_tokens_write_u32(q, tok, N));
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    bool equal = a && b;
    for (int ca = 0, cb = 0; equal && ca != EOF;) {
        ca = fgetc(a), cb = fgetc(b);
        equal = ca == cb;
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    DT_CHECK(equal, "dtrain's uint32 shard differs from the format's bytes");
    /* a Llama 3 vocabulary: an id past it is named */
    snprintf(bad, sizeof bad, "%s", p);
    EXPECT_FAIL(128256, "has value", ">= vocab_size 128256");
    /* an id past int32 is refused even unchecked against a vocabulary */
    tok[5] = 0x80000001u;
    DT_CHECK_OK(dt_tokens_write_u32(q, tok, N));
    snprintf(bad, sizeof bad, "%s", q);
    EXPECT_FAIL(0, "token 5 has value 2147483649", "the id limit");
    /* the version must be Llama 3's */
    hdr[1] = 1;
    f = fopen(p, "wb");
    DT_CHECK(f && fwrite(hdr, 4, 256, f) == 256 && fwrite(tok, 4, N, f) == N && !fclose(f),
             "rewriting %s", p);
    snprintf(bad, sizeof bad, "%s", p);
    EXPECT_FAIL(0, "version 1, expected 7", "uint32");
    unlink(p);
    unlink(q);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    test_shards();
    test_shards_u32();
    test_prepare();
    DT_CHECK(rmdir(dir) == 0, "temporary directory %s not empty at the end", dir);
    return DT_TEST_END();
}
