/* Token shards (llm.c / nanoGPT .bin format) and the byte-level "prepare" step. See tokens.h.
 *
 * A shard is read with pread, a batch's rows at a time, through the page cache (shared with
 * other ranks reading the same file); it is not mapped, so a file truncated while a run reads
 * it is an error naming it rather than a SIGBUS. The dt_tokens owns the descriptor. Header ints and
 * tokens are little-endian on disk and read as host integers: the host is assumed
 * little-endian (x86-64, aarch64). No shared state; distinct dt_tokens are thread-independent.
 */
#include "io/tokens.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/text.h"
#include "io/atomic.h"
#include "io/bpe.h"
#include "io/indexed.h"

#define HEADER_BYTES ((size_t)DT_TOKENS_HEADER_INTS * sizeof(int32_t))

/* n ids of `width` bytes from `first` by pread into out, widened to int32 in place (from the
 * end, so no id is overwritten before it is read): a shard that shrank under us is an error
 * naming it, never a SIGBUS (a mapping would fault on the vanished pages). */
static dt_status read_tokens(int fd, const char *path, int64_t base, int width, int64_t n_tok,
                             int64_t first, int64_t n, int32_t *out) {
    size_t want = (size_t)n * (size_t)width, done = 0;
    off_t at = (off_t)(base + first * width);
    while (done < want) {
        ssize_t r = pread(fd, (char *)out + done, want - done, at + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return dt_err_set(DT_ERR_IO, "%s: cannot read tokens [%lld, %lld) of the %lld the "
                              "shard held when opened: %s", path, (long long)first,
                              (long long)(first + n), (long long)n_tok,
                              r < 0 ? strerror(errno) : "the file shrank (changed while in use?)");
        done += (size_t)r;
    }
    if (width == 2)
        for (int64_t i = n - 1; i >= 0; i--) {
            uint16_t v;
            memcpy(&v, (char *)out + 2 * i, 2);
            out[i] = v;
        }
    return DT_OK;
}

/* An llm.c shard's header: its id width and count, checked against the file's size. */
/* A file without a shard's magic: nanoGPT's raw uint16 ids (its prepare.py writes no
 * header), if it has a whole number of them; *first is its first int32, for the message if
 * its ids then prove not to be ids. A .bin beside a Megatron index is that dataset's half. */
static dt_status open_raw(const char *path, size_t len, int32_t first, int64_t *n_out) {
    size_t n = strlen(path);
    char prefix[4096];
    bool megatron = n > 4 && n < sizeof prefix && !strcmp(path + n - 4, ".bin") &&
                    snprintf(prefix, sizeof prefix, "%.*s", (int)n - 4, path) > 0 &&
                    dt_indexed_named(prefix);
    if (megatron || len % 2 || len < 4)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: bad magic %d, expected %d (uint16 ids) or %d (uint32 ids): not a "
                          "dtrain/llm.c token shard%s",
                          path, first, DT_TOKENS_MAGIC, DT_TOKENS_MAGIC_U32,
                          megatron  ? "; beside it is a Megatron index: name that dataset by "
                                      "its prefix, without .bin"
                          : len % 2 ? ", nor raw uint16 ids (an odd number of bytes)"
                                    : "");
    *n_out = (int64_t)(len / 2);
    return DT_OK;
}

static dt_status open_shard(const char *path, int *fd_out, int64_t *n_out, int *width_out,
                            bool *raw, int32_t *magic) {
    dt_status st = DT_OK;
    size_t len = 0;
    int fd;
    *raw = false;
    DT_TRY(dt_file_open_regular(path, "token shard", &fd, &len));
    int32_t hdr[3] = {0};
    if (len >= sizeof hdr && pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) {
        st = dt_err_set(DT_ERR_IO, "%s: cannot read the header: %s", path, strerror(errno));
        goto fail;
    }
    *magic = hdr[0];
    if (len < HEADER_BYTES || (hdr[0] != DT_TOKENS_MAGIC && hdr[0] != DT_TOKENS_MAGIC_U32)) {
        DT_TRY_GOTO(open_raw(path, len, hdr[0], n_out));
        *raw = true;
        *width_out = 2;
        *fd_out = fd;
        return DT_OK;
    }
    int width = hdr[0] == DT_TOKENS_MAGIC ? 2 : 4;
    int version = width == 2 ? DT_TOKENS_VERSION : DT_TOKENS_VERSION_U32;
    if (hdr[1] != version) {
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: unsupported token shard version %d, expected %d "
                        "(uint%d tokens)",
                        path, hdr[1], version, 8 * width);
        goto fail;
    }
    int64_t n = hdr[2], held = (int64_t)((len - HEADER_BYTES) / (size_t)width);
    if (n < 0) {
        st = dt_err_set(DT_ERR_FORMAT, "%s: negative token count %lld in the header", path,
                        (long long)n);
        goto fail;
    }
    if (n > held) {
        st = dt_err_set(DT_ERR_FORMAT, "%s: truncated: header says %lld tokens, file holds %lld "
                        "(%zu bytes after the header)", path, (long long)n, (long long)held,
                        len - HEADER_BYTES);
        goto fail;
    }
    if ((size_t)n * (size_t)width != len - HEADER_BYTES) {
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: header says %lld tokens (%lld bytes) but file holds "
                        "%zu bytes after the header: trailing bytes after the tokens",
                        path, (long long)n, (long long)n * width, len - HEADER_BYTES);
        goto fail;
    }
    *fd_out = fd, *n_out = n, *width_out = width;
    return DT_OK;

fail:
    close(fd);
    return st;
}

dt_status dt_tokens_open(const char *path, int vocab_size, dt_tokens *out) {
    dt_status st = DT_OK;
    if (!path || !out)
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument", __func__);
    memset(out, 0, sizeof *out);
    out->fd = out->idx_fd = -1;
    int fd, width;
    int64_t n, base;
    bool raw = false;
    int32_t magic = 0;
    dt_indexed_docs docs = {.fd = -1};
    if (dt_indexed_named(path)) {
        DT_TRY(dt_indexed_open(path, &fd, &n, &width, &docs));
        base = 0;
    } else {
        DT_TRY(open_shard(path, &fd, &n, &width, &raw, &magic));
        base = raw ? 0 : (int64_t)HEADER_BYTES;
    }
    if (n < 2) {
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: holds %lld tokens; need at least 2 (an input and its "
                        "target)",
                        path, (long long)n);
        goto fail;
    }
    {
        /* every id below the vocabulary (and, 32 bits wide, below 2^31: ids are int32) */
        uint32_t limit = vocab_size > 0 ? (uint32_t)vocab_size : (uint32_t)INT32_MAX + 1u;
        int32_t chunk[16384];
        for (int64_t i = 0; i < n && (vocab_size > 0 || width == 4); i += 16384) {
            int64_t m = n - i < 16384 ? n - i : 16384;
            DT_TRY_GOTO(read_tokens(fd, path, base, width, n, i, m, chunk));
            for (int64_t j = 0; j < m; j++)
                if ((uint32_t)chunk[j] >= limit) {
                    if (raw) /* read as nanoGPT's raw ids, it is not those either */
                        st = dt_err_set(DT_ERR_FORMAT,
                                        "%s: not a token shard (bad magic %d, "
                                        "expected %d or %d), nor raw uint16 ids under "
                                        "vocab_size %u (id %lld is %u)",
                                        path, magic, DT_TOKENS_MAGIC, DT_TOKENS_MAGIC_U32, limit,
                                        (long long)(i + j), (unsigned)chunk[j]);
                    else
                        st = dt_err_set(DT_ERR_FORMAT, "%s: token %lld has value %u >= %s %u", path,
                                        (long long)(i + j), (unsigned)chunk[j],
                                        vocab_size > 0 ? "vocab_size" : "the id limit", limit);
                    goto fail;
                }
        }
    }
    if (!(out->path = strdup(path))) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    out->fd = fd;
    out->n_tok = n;
    out->width = width;
    out->base = base;
    out->idx_fd = docs.fd;
    out->n_seq = docs.n_seq;
    out->n_doc = docs.n_doc;
    return DT_OK;

fail:
    close(fd);
    if (docs.fd >= 0)
        close(docs.fd);
    return st;
}

dt_status dt_tokens_doc_starts(const dt_tokens *t, int64_t first, int64_t n, uint8_t *mark) {
    if (t->idx_fd < 0)
        return DT_OK;
    char idx[4200];
    snprintf(idx, sizeof idx, "%s.idx", t->path);
    dt_indexed_docs d = {.fd = t->idx_fd,
                         .n_seq = t->n_seq,
                         .n_doc = t->n_doc,
                         .n_tok = t->n_tok,
                         .width = t->width};
    return dt_indexed_doc_starts(&d, idx, first, n, mark);
}

dt_status dt_tokens_read(const dt_tokens *t, int64_t first, int64_t n, int32_t *out) {
    if (!t || t->fd < 0 || first < 0 || n < 0 || first > t->n_tok - n)
        return dt_err_set(DT_ERR_ARG, "%s: tokens [%lld, +%lld) outside the shard %s of %lld",
                          __func__, (long long)first, (long long)n,
                          t && t->path ? t->path : "(closed)", t ? (long long)t->n_tok : 0LL);
    return read_tokens(t->fd, t->path, t->base, t->width, t->n_tok, first, n, out);
}

void dt_tokens_close(dt_tokens *t) {
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->idx_fd >= 0)
        close(t->idx_fd);
    free(t->path);
    memset(t, 0, sizeof *t);
    t->fd = t->idx_fd = -1;
}

static void header_fill(int32_t *hdr, int64_t n_tok, int width) {
    memset(hdr, 0, HEADER_BYTES);
    hdr[0] = width == 2 ? DT_TOKENS_MAGIC : DT_TOKENS_MAGIC_U32;
    hdr[1] = width == 2 ? DT_TOKENS_VERSION : DT_TOKENS_VERSION_U32;
    hdr[2] = (int32_t)n_tok;
}

static dt_status write_shard(const char *path, const void *tok, int64_t n_tok, int width) {
    if (!path || n_tok < 0 || (n_tok > 0 && !tok))
        return dt_err_set(DT_ERR_ARG, "%s: bad argument (n_tok %lld)", __func__,
                          (long long)n_tok);
    if (n_tok > INT32_MAX) /* the header stores the count as int32 */
        return dt_err_set(DT_ERR_ARG, "%s: %s: %lld tokens exceed one shard's int32 count",
                          __func__, path, (long long)n_tok);
    dt_status st = DT_OK;
    int32_t hdr[DT_TOKENS_HEADER_INTS];
    header_fill(hdr, n_tok, width);
    dt_atomic_file a;
    DT_TRY(dt_atomic_open(&a, path));
    DT_TRY_GOTO(dt_atomic_write(&a, hdr, sizeof hdr));
    DT_TRY_GOTO(dt_atomic_write(&a, tok, (size_t)n_tok * (size_t)width));
    return dt_atomic_commit(&a);

fail:
    dt_atomic_abort(&a);
    return st;
}

dt_status dt_tokens_write(const char *path, const uint16_t *tok, int64_t n_tok) {
    return write_shard(path, tok, n_tok, 2);
}

dt_status dt_tokens_write_u32(const char *path, const uint32_t *tok, int64_t n_tok) {
    return write_shard(path, tok, n_tok, 4);
}

/* Writes bytes[0..n) as a shard of uint16 tokens, widening in chunks so no second full-size
 * buffer is needed. */
static dt_status write_byte_shard(const char *path, const unsigned char *bytes, int64_t n) {
    dt_status st = DT_OK;
    int32_t hdr[DT_TOKENS_HEADER_INTS];
    header_fill(hdr, n, 2);
    uint16_t chunk[8192];
    dt_atomic_file a;
    DT_TRY(dt_atomic_open(&a, path));
    DT_TRY_GOTO(dt_atomic_write(&a, hdr, sizeof hdr));
    for (int64_t i = 0; i < n; i += 8192) {
        int64_t m = n - i < 8192 ? n - i : 8192;
        for (int64_t j = 0; j < m; j++)
            chunk[j] = bytes[i + j];
        DT_TRY_GOTO(dt_atomic_write(&a, chunk, (size_t)m * sizeof *chunk));
    }
    return dt_atomic_commit(&a);

fail:
    dt_atomic_abort(&a);
    return st;
}

typedef struct src_file {
    char *path;
    dev_t dev;
    ino_t ino;
} src_file;

typedef struct src_list {
    src_file *f;
    int n, cap;
} src_list;

static void src_list_free(src_list *l) {
    for (int i = 0; i < l->n; i++)
        free(l->f[i].path);
    free(l->f);
    l->f = NULL;
    l->n = l->cap = 0;
}

static dt_status src_list_push(src_list *l, const char *path, const struct stat *sb) {
    src_file *f = dt_grow(l->f, &l->cap, l->n, sizeof *f, 64);
    if (!f)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory listing input files", path);
    l->f = f;
    if (!(l->f[l->n].path = strdup(path)))
        return dt_err_set(DT_ERR_OOM, "%s: out of memory listing input files", path);
    l->f[l->n].dev = sb->st_dev;
    l->f[l->n].ino = sb->st_ino;
    l->n++;
    return DT_OK;
}

static int src_cmp(const void *a, const void *b) {
    return strcmp(((const src_file *)a)->path, ((const src_file *)b)->path);
}

typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int pos; /* index in the name-sorted list */
} file_id;

static int file_id_cmp(const void *a, const void *b) {
    const file_id *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Regular files directly inside `dir`, sorted by name, skipping hidden files and fortune's
 * .dat/.u8 files (in Debian's fortunes, NAME.u8 is a symlink back to NAME). Other symlinks are
 * followed, but a file reached through several names is read once: the first name in sorted
 * order wins. */
static dt_status list_dir(const char *dir, src_list *l) {
    dt_status st = DT_OK;
    DIR *d = opendir(dir);
    if (!d)
        return dt_err_set(DT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *de;
    char path[4096];
    while ((errno = 0, de = readdir(d))) {
        const char *nm = de->d_name;
        if (nm[0] == '.' || dt_ends_with(nm, ".dat") || dt_ends_with(nm, ".u8"))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, nm) >= sizeof path) {
            st = dt_err_set(DT_ERR_IO, "%s/%s: path too long", dir, nm);
            goto fail;
        }
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue; /* subdirectories, sockets and dangling links carry no text */
        DT_TRY_GOTO(src_list_push(l, path, &sb));
    }
    if (errno) {
        st = dt_err_set(DT_ERR_IO, "%s: reading directory failed: %s", dir, strerror(errno));
        goto fail;
    }
    closedir(d);
    if (l->n > 1) /* qsort(NULL, 0) is undefined */
        qsort(l->f, (size_t)l->n, sizeof *l->f, src_cmp);
    /* Drop later names of an already-listed file: sort positions by (dev, inode, position),
     * so the first name of each file leads its group, and mark the rest. */
    file_id *ids = malloc((l->n > 0 ? (size_t)l->n : 1) * sizeof *ids);
    if (!ids)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory listing input files", dir);
    for (int i = 0; i < l->n; i++)
        ids[i] = (file_id){l->f[i].dev, l->f[i].ino, i};
    if (l->n > 1)
        qsort(ids, (size_t)l->n, sizeof *ids, file_id_cmp);
    for (int i = 1; i < l->n; i++)
        if (ids[i].dev == ids[i - 1].dev && ids[i].ino == ids[i - 1].ino) {
            free(l->f[ids[i].pos].path);
            l->f[ids[i].pos].path = NULL;
        }
    free(ids);
    int kept = 0;
    for (int i = 0; i < l->n; i++)
        if (l->f[i].path)
            l->f[kept++] = l->f[i];
    l->n = kept;
    return DT_OK;

fail:
    closedir(d);
    return st;
}

/* Appends the whole of `path` to *buf (growing it). */
static dt_status append_file(const char *path, unsigned char **buf, size_t *len, size_t *cap) {
    dt_status st = DT_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt_err_set(DT_ERR_IO, "%s: cannot open input: %s", path, strerror(errno));
    for (;;) {
        if (*cap - *len < 65536) {
            size_t ncap = *cap ? 2 * *cap : (size_t)1 << 20;
            unsigned char *nb = realloc(*buf, ncap);
            if (!nb) {
                st = dt_err_set(DT_ERR_OOM, "%s: out of memory reading input (%zu bytes)", path,
                                ncap);
                goto fail;
            }
            *buf = nb;
            *cap = ncap;
        }
        size_t r = fread(*buf + *len, 1, *cap - *len, f);
        *len += r;
        if (r == 0)
            break;
    }
    if (ferror(f)) {
        st = dt_err_set(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    return DT_OK;

fail:
    fclose(f);
    return st;
}

/* the input's files, sorted (a directory) or itself (a file) */
static dt_status list_input(const char *input, src_list *l) {
    struct stat sb;
    if (stat(input, &sb) != 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot read input: %s", input, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return list_dir(input, l);
    if (S_ISREG(sb.st_mode))
        return src_list_push(l, input, &sb);
    return dt_err_set(DT_ERR_IO, "%s: input is neither a file nor a directory", input);
}

/* train and val token counts of a corpus of `total`; each shard needs two */
static dt_status split_counts(const char *input, int64_t total, double val_fraction, int64_t *n_tr,
                              int64_t *n_va) {
    *n_tr = (int64_t)((double)total * (1.0 - val_fraction));
    *n_va = total - *n_tr;
    if (*n_tr < 2 || *n_va < 2)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: input too small: %lld tokens give %lld train and "
                          "%lld val tokens; each shard needs at least 2",
                          input, (long long)total, (long long)*n_tr, (long long)*n_va);
    if (*n_tr > INT32_MAX || *n_va > INT32_MAX)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: input of %lld tokens is too large for one shard "
                          "(int32 token count)",
                          input, (long long)total);
    return DT_OK;
}

static dt_status shard_path(const char *out_dir, const char *name, char *path, size_t cap) {
    DT_TRY(dt_mkdirs(out_dir));
    if ((size_t)snprintf(path, cap, "%s/%s", out_dir, name) >= cap)
        return dt_err_set(DT_ERR_ARG, "%s: output directory path too long", out_dir);
    return DT_OK;
}

/* ids [0, n) as a shard of uint16 (wide false) or uint32 ids */
static dt_status write_ids(const char *path, const int32_t *ids, int64_t n, bool wide) {
    void *buf = malloc((size_t)(n > 0 ? n : 1) * (wide ? 4 : 2));
    if (!buf)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for %lld ids", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (wide)
            ((uint32_t *)buf)[i] = (uint32_t)ids[i];
        else
            ((uint16_t *)buf)[i] = (uint16_t)ids[i];
    dt_status st = wide ? dt_tokens_write_u32(path, buf, n) : dt_tokens_write(path, buf, n);
    free(buf);
    return st;
}

dt_status dt_tokens_prepare_bpe(const char *input, const char *out_dir, double val_fraction,
                                struct dt_bpe *bpe, int64_t *n_train, int64_t *n_val) {
    if (!(val_fraction > 0 && val_fraction < 1))
        return dt_err_set(DT_ERR_ARG, "%s: val_fraction %g outside (0, 1)", __func__, val_fraction);
    src_list l = {0};
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    int32_t *ids = NULL, eot = dt_bpe_eot(bpe);
    int64_t n = 0, ids_cap = 0, n_tr, n_va;
    dt_status st;
    DT_TRY_GOTO(list_input(input, &l));
    for (int i = 0; i < l.n; i++) {
        len = 0;
        DT_TRY_GOTO(append_file(l.f[i].path, &buf, &len, &cap));
        DT_TRY_GOTO(dt_bpe_encode(bpe, (const char *)buf, len, &ids, &n, &ids_cap));
        if (eot >= 0)
            DT_TRY_GOTO(dt_bpe_append(&ids, &n, &ids_cap, eot));
    }
    DT_TRY_GOTO(split_counts(input, n, val_fraction, &n_tr, &n_va));
    bool wide = dt_bpe_vocab_size(bpe) > 65536;
    char path[4096];
    DT_TRY_GOTO(shard_path(out_dir, "train.bin", path, sizeof path));
    DT_TRY_GOTO(write_ids(path, ids, n_tr, wide));
    DT_TRY_GOTO(shard_path(out_dir, "val.bin", path, sizeof path));
    DT_TRY_GOTO(write_ids(path, ids + n_tr, n_va, wide));
    if (n_train)
        *n_train = n_tr;
    if (n_val)
        *n_val = n_va;
fail:
    free(ids);
    free(buf);
    src_list_free(&l);
    return st;
}

dt_status dt_tokens_prepare_bytes(const char *input, const char *out_dir, double val_fraction,
                                  int64_t *n_train, int64_t *n_val) {
    if (!input || !out_dir)
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument", __func__);
    if (!(val_fraction > 0 && val_fraction < 1))
        return dt_err_set(DT_ERR_ARG, "%s: val_fraction %g outside (0, 1)", __func__,
                          val_fraction);
    dt_status st = DT_OK;
    src_list l = {0};
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    DT_TRY_GOTO(list_input(input, &l));
    for (int i = 0; i < l.n; i++)
        DT_TRY_GOTO(append_file(l.f[i].path, &buf, &len, &cap));
    if (len == 0) {
        st = dt_err_set(DT_ERR_FORMAT, "%s: input is empty (%d files, 0 bytes)", input, l.n);
        goto fail;
    }
    /* One byte is one token; the split is by position, so val is the tail of the corpus. */
    int64_t n_tr, n_va;
    DT_TRY_GOTO(split_counts(input, (int64_t)len, val_fraction, &n_tr, &n_va));
    char path[4096];
    DT_TRY_GOTO(shard_path(out_dir, "train.bin", path, sizeof path));
    DT_TRY_GOTO(write_byte_shard(path, buf, n_tr));
    DT_TRY_GOTO(shard_path(out_dir, "val.bin", path, sizeof path));
    DT_TRY_GOTO(write_byte_shard(path, buf + n_tr, n_va));
    if (n_train)
        *n_train = n_tr;
    if (n_val)
        *n_val = n_va;

fail:
    free(buf);
    src_list_free(&l);
    return st;
}
