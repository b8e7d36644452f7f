/* Megatron indexed datasets. See indexed.h.
 *
 * The index is read in pieces through one buffer, so a corpus of millions of sequences costs
 * no memory of its size; what a run needs later is only .bin's descriptor and the token count.
 */
#include "io/indexed.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"

enum { HEADER_BYTES = 9 + 8 + 1 + 8 + 8, PIECE = 8192 };
static const char MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { DTYPE_INT32 = 4, DTYPE_UINT16 = 8 };

static const char *dtype_name(int code) {
    static const char *names[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                  "int64", "float64", "float32", "uint16"};
    return code >= 1 && code <= 8 ? names[code] : "unknown";
}

bool dt_indexed_named(const char *path) {
    char idx[4200];
    struct stat sb;
    if (stat(path, &sb) == 0 || snprintf(idx, sizeof idx, "%s.idx", path) >= (int)sizeof idx)
        return false;
    return stat(idx, &sb) == 0;
}

static dt_status read_at(int fd, const char *path, void *buf, size_t n, int64_t at) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(at + (int64_t)done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: truncated: cannot read %zu bytes at offset "
                              "%lld%s%s",
                              path, n, (long long)at, r < 0 ? ": " : "",
                              r < 0 ? strerror(errno) : "");
        done += (size_t)r;
    }
    return DT_OK;
}

/* The lengths and offsets of every sequence: offsets contiguous from 0; *total their ids. */
static dt_status check_sequences(int fd, const char *idx, uint64_t n_seq, int width,
                                 int64_t *total) {
    int32_t len[PIECE];
    int64_t ptr[PIECE], next = 0;
    int64_t at_len = HEADER_BYTES, at_ptr = HEADER_BYTES + (int64_t)n_seq * 4;
    for (uint64_t i = 0; i < n_seq; i += PIECE) {
        size_t m = n_seq - i < PIECE ? (size_t)(n_seq - i) : PIECE;
        DT_TRY(read_at(fd, idx, len, m * 4, at_len + (int64_t)i * 4));
        DT_TRY(read_at(fd, idx, ptr, m * 8, at_ptr + (int64_t)i * 8));
        for (size_t j = 0; j < m; j++) {
            if (len[j] < 0 || ptr[j] != next * width)
                return dt_err_set(DT_ERR_FORMAT,
                                  "%s: sequence %llu: length %d at byte %lld, "
                                  "expected a length >= 0 at byte %lld (sequences end to end)",
                                  idx, (unsigned long long)(i + j), len[j], (long long)ptr[j],
                                  (long long)(next * width));
            next += len[j];
        }
    }
    *total = next;
    return DT_OK;
}

/* The document index: from sequence 0, never falling, to the sequence count. */
static dt_status check_documents(int fd, const char *idx, uint64_t n_seq, uint64_t n_doc) {
    int64_t doc[PIECE], prev = 0, at = HEADER_BYTES + (int64_t)n_seq * 12;
    for (uint64_t i = 0; i < n_doc; i += PIECE) {
        size_t m = n_doc - i < PIECE ? (size_t)(n_doc - i) : PIECE;
        DT_TRY(read_at(fd, idx, doc, m * 8, at + (int64_t)i * 8));
        for (size_t j = 0; j < m; j++) {
            bool first = i + j == 0, last = i + j == n_doc - 1;
            if ((first && doc[j] != 0) || doc[j] < prev || (uint64_t)doc[j] > n_seq ||
                (last && (uint64_t)doc[j] != n_seq))
                return dt_err_set(DT_ERR_FORMAT,
                                  "%s: document index %llu is %lld; it must "
                                  "rise from 0 to the %llu sequences",
                                  idx, (unsigned long long)(i + j), (long long)doc[j],
                                  (unsigned long long)n_seq);
            prev = doc[j];
        }
    }
    return DT_OK;
}

static dt_status check_index(int fd, const char *idx, size_t size, int *width, int64_t *total) {
    unsigned char h[HEADER_BYTES];
    if (size < HEADER_BYTES)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: %zu bytes, shorter than the %d-byte header of a "
                          "Megatron index",
                          idx, size, HEADER_BYTES);
    DT_TRY(read_at(fd, idx, h, sizeof h, 0));
    uint64_t version, n_seq, n_doc;
    memcpy(&version, h + 9, 8);
    memcpy(&n_seq, h + 18, 8);
    memcpy(&n_doc, h + 26, 8);
    int code = h[17];
    if (memcmp(h, MAGIC, sizeof MAGIC))
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: not a Megatron index (its first bytes are not "
                          "MMIDIDX)",
                          idx);
    if (version != 1)
        return dt_err_set(DT_ERR_FORMAT, "%s: index version %llu; dtrain reads version 1", idx,
                          (unsigned long long)version);
    if (code != DTYPE_UINT16 && code != DTYPE_INT32)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: token ids stored as %s (dtype code %d); dtrain "
                          "reads uint16 (8) or int32 (4)",
                          idx, dtype_name(code), code);
    uint64_t need = HEADER_BYTES + n_seq * 12 + n_doc * 8;
    if (n_seq > ((uint64_t)1 << 40) || n_doc > n_seq + 1 || n_doc < 1 || need > size)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: %llu sequences and %llu document entries need "
                          "%llu bytes; the file has %zu",
                          idx, (unsigned long long)n_seq, (unsigned long long)n_doc,
                          (unsigned long long)need, size);
    *width = code == DTYPE_UINT16 ? 2 : 4;
    DT_TRY(check_sequences(fd, idx, n_seq, *width, total));
    return check_documents(fd, idx, n_seq, n_doc);
}

dt_status dt_indexed_open(const char *prefix, int *fd, int64_t *n_tok, int *width,
                          dt_indexed_docs *docs) {
    char idx[4200], bin[4200];
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    int ifd, bfd;
    size_t isize, bsize;
    DT_TRY(dt_file_open_regular(idx, "Megatron index", &ifd, &isize));
    int64_t total = 0;
    dt_status st = check_index(ifd, idx, isize, width, &total);
    if (st == DT_OK)
        st = dt_file_open_regular(bin, "Megatron data file", &bfd, &bsize);
    if (st != DT_OK) {
        close(ifd);
        return st;
    }
    if ((uint64_t)bsize != (uint64_t)total * (uint64_t)*width) {
        close(bfd);
        close(ifd);
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: %zu bytes, but %s counts %lld ids of %d bytes "
                          "(%lld bytes)%s",
                          bin, bsize, idx, (long long)total, *width, (long long)total * *width,
                          (uint64_t)bsize < (uint64_t)total * (uint64_t)*width ? ": truncated"
                                                                               : "");
    }
    *fd = bfd;
    *n_tok = total;
    if (!docs) {
        close(ifd);
        return DT_OK;
    }
    unsigned char h[HEADER_BYTES];
    DT_TRY(read_at(ifd, idx, h, sizeof h, 0)); /* read and checked above */
    uint64_t n_seq, n_doc;
    memcpy(&n_seq, h + 18, 8);
    memcpy(&n_doc, h + 26, 8);
    *docs = (dt_indexed_docs){.fd = ifd,
                              .n_seq = (int64_t)n_seq,
                              .n_doc = (int64_t)n_doc,
                              .n_tok = total,
                              .width = *width};
    return DT_OK;
}

/* the token document j starts at (the last entry: the end of the data) */
static dt_status doc_start(const dt_indexed_docs *d, const char *path, int64_t j, int64_t *at) {
    int64_t seq, ptr;
    DT_TRY(read_at(d->fd, path, &seq, 8, HEADER_BYTES + d->n_seq * 12 + j * 8));
    if (seq >= d->n_seq) {
        *at = d->n_tok;
        return DT_OK;
    }
    DT_TRY(read_at(d->fd, path, &ptr, 8, HEADER_BYTES + d->n_seq * 4 + seq * 8));
    *at = ptr / d->width;
    return DT_OK;
}

dt_status dt_indexed_doc_starts(const dt_indexed_docs *d, const char *path, int64_t first,
                                int64_t n, uint8_t *mark) {
    int64_t lo = 0, hi = d->n_doc; /* the first document starting past `first` */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, at;
        DT_TRY(doc_start(d, path, mid, &at));
        if (at > first)
            hi = mid;
        else
            lo = mid + 1;
    }
    for (int64_t j = lo; j < d->n_doc; j++) {
        int64_t at;
        DT_TRY(doc_start(d, path, j, &at));
        if (at >= first + n)
            break;
        mark[at - first] = 1;
    }
    return DT_OK;
}
