/* safetensors reader and writer. See safetensors.h.
 *
 * The reader loads the whole file into one buffer owned by the dt_st_file, parses the JSON
 * header with cJSON (kept alive: tensor names and metadata strings are borrowed from it) and
 * validates every field before any tensor is handed out. The writer keeps insertion order and
 * writes through io/atomic.h. Host byte order is assumed little-endian (x86-64, aarch64), as
 * the format is; only the header length is assembled byte by byte. No shared state: distinct
 * objects may be used from distinct threads.
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "io/atomic.h"

/* A header beyond this is not a real checkpoint: HF's own limit is 100 MB too. */
#define HEADER_MAX ((uint64_t)100 * 1000 * 1000)
#define NDIM_MAX 8
/* cJSON numbers are doubles: integers above 2^53 cannot be represented exactly. */
#define JSON_INT_MAX 9007199254740992.0

struct dt_st_file {
    char *path;
    unsigned char *buf;   /* the whole file, or its first head_len bytes (dt_st_open_header) */
    size_t len;           /* the file's length */
    size_t head_len;      /* bytes of it in buf */
    cJSON *root;          /* parsed header; names and metadata are borrowed from it */
    const cJSON *meta;    /* borrowed: the __metadata__ object, or NULL */
    int n;
    dt_st_tensor *t;
};

typedef struct wentry {
    char *name;
    dt_st_dtype dtype;
    int ndim;
    int64_t shape[NDIM_MAX];
    size_t nbytes;
    const void *data; /* borrowed until commit */
    dt_st_source_fn source; /* or the bytes come from here, piece by piece, at commit */
    void *source_ctx;
} wentry;

typedef struct kv {
    char *key, *value;
} kv;

struct dt_st_writer {
    wentry *e;
    int n, cap;
    kv *meta;
    int n_meta, cap_meta;
};

static const char *const dtype_names[DT_ST_DTYPE_COUNT] = {"F32", "BF16", "F16",
                                                            "I32", "I64",  "U8"};
static const size_t dtype_sizes[DT_ST_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1};

static int dtype_parse(const char *s) {
    for (int i = 0; i < DT_ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_names[i]) == 0)
            return i;
    return -1;
}

/* "[768, 3072]" into buf, for error messages. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

/* Reads the whole file. Missing, unreadable or a directory is DT_ERR_IO. */
static dt_status read_all(const char *path, unsigned char **out, size_t *out_len) {
    dt_status st = DT_OK;
    unsigned char *buf = NULL;
    int fd;
    size_t len;
    DT_TRY(dt_file_open_regular(path, "safetensors file", &fd, &len));
    buf = malloc(len ? len : 1);
    if (!buf) {
        st = dt_err_set(DT_ERR_OOM, "%s: cannot allocate %zu bytes to read the file", path, len);
        goto fail;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = dt_err_set(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0) /* shrank while we read: report what is actually there */
            break;
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *out_len = got;
    return DT_OK;

fail:
    free(buf);
    close(fd);
    return st;
}

/* The header's length from the first 8 bytes, checked against the file's length. */
static dt_status header_length(const char *path, const unsigned char *b, size_t len,
                               uint64_t *hlen) {
    if (len < 8)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: file is shorter than 8 bytes (%zu bytes): not a "
                          "safetensors file",
                          path, len);
    *hlen = 0;
    for (int i = 7; i >= 0; i--)
        *hlen = *hlen << 8 | b[i];
    if (*hlen > HEADER_MAX)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: header length %llu is absurd (> 100 MB): not a "
                          "safetensors file or corrupt",
                          path, (unsigned long long)*hlen);
    if (*hlen > len - 8)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: header length %llu is larger than the file (%zu "
                          "bytes): file truncated or corrupt",
                          path, (unsigned long long)*hlen, len);
    return DT_OK;
}

/* The first 8 bytes and the header of a file whose data section stays on disk. */
static dt_status read_head(const char *path, unsigned char **out, size_t *head_len,
                           size_t *file_len) {
    int fd;
    DT_TRY(dt_file_open_regular(path, "safetensors file", &fd, file_len));
    unsigned char len8[8];
    uint64_t hlen = 0;
    dt_status st = DT_OK;
    if (pread(fd, len8, 8, 0) != (ssize_t)(*file_len < 8 ? *file_len : 8)) {
        st = dt_err_set(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        goto fail;
    }
    DT_TRY_GOTO(header_length(path, len8, *file_len, &hlen));
    *head_len = 8 + (size_t)hlen;
    if (!(*out = malloc(*head_len))) {
        st =
            dt_err_set(DT_ERR_OOM, "%s: cannot allocate %zu bytes for the header", path, *head_len);
        goto fail;
    }
    if (pread(fd, *out, *head_len, 0) != (ssize_t)*head_len)
        st = dt_err_set(DT_ERR_IO, "%s: reading the header failed: %s", path,
                        errno ? strerror(errno) : "the file shrank");
fail:
    close(fd);
    return st;
}

/* A JSON number that is an exact non-negative integer <= 2^53; else -1 with *why set. */
static int64_t json_uint(const cJSON *v, const char **why) {
    if (!cJSON_IsNumber(v)) {
        *why = "is not a number";
        return -1;
    }
    double d = v->valuedouble;
    if (!(d == floor(d))) { /* also catches NaN */
        *why = "is not an integer";
        return -1;
    }
    if (d < 0) {
        *why = "is negative";
        return -1;
    }
    if (d > JSON_INT_MAX) {
        *why = "is too large";
        return -1;
    }
    return (int64_t)d;
}

/* Validates one tensor entry and fills *t (offsets into the data section go to begin and end). */
static dt_status parse_tensor(const char *path, const cJSON *e, size_t data_len,
                              size_t file_len, size_t data_start, dt_st_tensor *t,
                              uint64_t *begin, uint64_t *end) {
    const char *nm = e->string, *why = "";
    char sbuf[256];
    if (!cJSON_IsObject(e))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": entry is not a JSON object", path,
                          nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!dt)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": missing \"dtype\"", path, nm);
    if (!sh)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": missing \"shape\"", path, nm);
    if (!off)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": missing \"data_offsets\"", path,
                          nm);
    if (!cJSON_IsString(dt))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is not a string", path,
                          nm);
    int d = dtype_parse(dt->valuestring);
    if (d < 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: tensor \"%s\": unknown dtype \"%.32s\" (dtrain reads F32, BF16, "
                          "F16, I32, I64, U8)", path, nm, dt->valuestring);
    t->dtype = (dt_st_dtype)d;

    if (!cJSON_IsArray(sh))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is not an array", path,
                          nm);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > NDIM_MAX)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": ndim %d > %d", path, nm, ndim,
                          NDIM_MAX);
    t->ndim = ndim;
    /* numel * dtype size must fit in int64; the nbytes check below then bounds it by the file. */
    int64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < ndim; i++) {
        int64_t v = json_uint(cJSON_GetArrayItem(sh, i), &why);
        if (v < 0)
            return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": shape dim %d %s", path, nm, i,
                              why);
        t->shape[i] = v;
        overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    int64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, (int64_t)dtype_sizes[d], &nbytes);
    if (overflow)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": shape %s overflows (too many "
                          "elements)", path, nm, shape_str(ndim, t->shape, sbuf, sizeof sbuf));

    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is not an array "
                          "[begin, end]", path, nm);
    int64_t b = json_uint(cJSON_GetArrayItem(off, 0), &why);
    if (b < 0)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets begin %s", path, nm,
                          why);
    int64_t en = json_uint(cJSON_GetArrayItem(off, 1), &why);
    if (en < 0)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets end %s", path, nm, why);
    if (b > en)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] has "
                          "begin > end", path, nm, (long long)b, (long long)en);
    if ((uint64_t)en > data_len)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets end %lld is beyond the "
                          "data section (%zu bytes): file truncated (header needs %llu bytes, "
                          "file holds %zu)", path, nm, (long long)en, data_len,
                          (unsigned long long)(data_start + (uint64_t)en), file_len);
    if (en - b != nbytes)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] hold %lld "
                          "bytes but %s x %s needs %lld", path, nm, (long long)b, (long long)en,
                          (long long)(en - b), dtype_names[d],
                          shape_str(ndim, t->shape, sbuf, sizeof sbuf), (long long)nbytes);
    t->name = nm;
    t->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    *end = (uint64_t)en;
    return DT_OK;
}

static dt_status parse_metadata(const char *path, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return dt_err_set(DT_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", path);
    for (const cJSON *kv = m->child; kv; kv = kv->next)
        if (!cJSON_IsString(kv))
            return dt_err_set(DT_ERR_FORMAT, "%s: \"__metadata__\" key \"%s\" is not a string "
                              "(metadata is a string->string map)", path, kv->string);
    return DT_OK;
}

typedef struct span {
    uint64_t begin, end;
    int idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int name_cmp(const void *a, const void *b) {
    const dt_st_tensor *x = *(const dt_st_tensor *const *)a, *y = *(const dt_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Overlap, gap and duplicate-name checks need the whole table, so they run after every entry.
 * As in HF's own reader, the tensors must tile the data section exactly: a gap or trailing
 * bytes mean a wrong header length (data shifted by a byte) or a damaged file. */
static dt_status check_table(dt_st_file *f, span *sp, uint64_t data_len) {
    const char *path = f->path;
    qsort(sp, (size_t)f->n, sizeof *sp, span_cmp);
    /* Sorted by (begin, end), tiling means each span begins where the previous one ended;
     * empty tensors sit at the position they occupy and take no bytes. */
    uint64_t pos = 0;
    int last = -1; /* index into sp of the span that ended at pos */
    for (int i = 0; i < f->n; i++) {
        if (sp[i].begin < pos)
            return dt_err_set(DT_ERR_FORMAT, "%s: tensors \"%s\" [%llu, %llu] and \"%s\" [%llu, "
                              "%llu] overlap in the data section", path, f->t[sp[last].idx].name,
                              (unsigned long long)sp[last].begin, (unsigned long long)pos,
                              f->t[sp[i].idx].name, (unsigned long long)sp[i].begin,
                              (unsigned long long)sp[i].end);
        if (sp[i].begin > pos)
            return dt_err_set(DT_ERR_FORMAT, "%s: bytes [%llu, %llu) of the data section belong "
                              "to no tensor (before \"%s\"): wrong header length or damaged "
                              "file", path, (unsigned long long)pos,
                              (unsigned long long)sp[i].begin, f->t[sp[i].idx].name);
        pos = sp[i].end;
        last = i;
    }
    if (pos != data_len)
        return dt_err_set(DT_ERR_FORMAT, "%s: %llu trailing bytes after the last tensor (the "
                          "data section holds %llu, the tensors %llu): wrong header length or "
                          "damaged file", path, (unsigned long long)(data_len - pos),
                          (unsigned long long)data_len, (unsigned long long)pos);
    const dt_st_tensor **byname = malloc((f->n > 0 ? (size_t)f->n : 1) * sizeof *byname);
    if (!byname)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory checking names", path);
    for (int i = 0; i < f->n; i++)
        byname[i] = &f->t[i];
    qsort(byname, (size_t)f->n, sizeof *byname, name_cmp);
    for (int i = 1; i < f->n; i++)
        if (strcmp(byname[i - 1]->name, byname[i]->name) == 0) {
            dt_status st = dt_err_set(DT_ERR_FORMAT, "%s: duplicate tensor name \"%s\"", path,
                                      byname[i]->name);
            free(byname);
            return st;
        }
    free(byname);
    return DT_OK;
}

static dt_status parse_header(dt_st_file *f) {
    const char *path = f->path;
    uint64_t hlen = 0;
    DT_TRY(header_length(path, f->buf, f->len, &hlen));
    if (f->head_len < 8 + hlen)
        return dt_err_set(DT_ERR_IO, "%s: the file shrank while it was read", path);
    const char *hdr = (const char *)f->buf + 8, *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!f->root) {
        /* On failure cJSON points `end` at the error; cJSON_GetErrorPtr is a shared global and
         * would race with other threads parsing. */
        long pos = end && end >= hdr && end <= hdr + hlen ? (long)(end - hdr) : -1;
        return dt_err_set(DT_ERR_FORMAT, "%s: header is not valid JSON (error near byte %ld of "
                          "%llu)", path, pos, (unsigned long long)hlen);
    }
    /* Writers pad the header with spaces to 8-byte alignment; anything else after the JSON
     * value means the header length or the JSON is wrong. */
    for (const char *p = end; p && p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return dt_err_set(DT_ERR_FORMAT, "%s: header is not valid JSON (junk after the "
                              "object at byte %ld)", path, (long)(p - hdr));
    if (!cJSON_IsObject(f->root))
        return dt_err_set(DT_ERR_FORMAT, "%s: header is not a JSON object", path);

    size_t data_start = 8 + (size_t)hlen, data_len = f->len - data_start;
    int n = 0;
    for (const cJSON *e = f->root->child; e; e = e->next)
        n += strcmp(e->string, "__metadata__") != 0;
    f->t = calloc((size_t)(n ? n : 1), sizeof *f->t);
    span *sp = calloc((size_t)(n ? n : 1), sizeof *sp);
    if (!f->t || !sp) {
        free(sp);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for %d tensor entries", path, n);
    }
    dt_status st = DT_OK;
    for (const cJSON *e = f->root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (f->meta) {
                st = dt_err_set(DT_ERR_FORMAT, "%s: duplicate \"__metadata__\"", path);
                goto fail;
            }
            DT_TRY_GOTO(parse_metadata(path, e));
            f->meta = e;
            continue;
        }
        dt_st_tensor *t = &f->t[f->n];
        DT_TRY_GOTO(parse_tensor(path, e, data_len, f->len, data_start, t, &sp[f->n].begin,
                                 &sp[f->n].end));
        t->offset = (int64_t)(data_start + sp[f->n].begin);
        t->data = f->head_len == f->len ? f->buf + t->offset : NULL;
        sp[f->n].idx = f->n;
        f->n++;
    }
    DT_TRY_GOTO(check_table(f, sp, data_len));
    free(sp);
    return DT_OK;

fail:
    free(sp);
    return st;
}

static dt_status open_file(const char *path, bool whole, dt_st_file **out) {
    dt_status st = DT_OK;
    if (!path || !out)
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument", __func__);
    *out = NULL;
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", path);
    }
    if (whole) {
        DT_TRY_GOTO(read_all(path, &f->buf, &f->len));
        f->head_len = f->len;
    } else {
        DT_TRY_GOTO(read_head(path, &f->buf, &f->head_len, &f->len));
    }
    DT_TRY_GOTO(parse_header(f));
    *out = f;
    return DT_OK;

fail:
    dt_st_close(f);
    return st;
}

dt_status dt_st_open(const char *path, dt_st_file **out) { return open_file(path, true, out); }

dt_status dt_st_open_header(const char *path, dt_st_file **out) {
    return open_file(path, false, out);
}

void dt_st_close(dt_st_file *f) {
    if (!f)
        return;
    free(f->t);
    cJSON_Delete(f->root);
    free(f->buf);
    free(f->path);
    free(f);
}

int dt_st_count(const dt_st_file *f) { return f ? f->n : 0; }

const dt_st_tensor *dt_st_get(const dt_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name) {
    if (!f || !name)
        return NULL;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *dt_st_metadata(const dt_st_file *f, const char *key) {
    if (!f || !f->meta || !key)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* IEEE half -> float, including subnormals, infinities and NaN. */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;
    } else if (exp != 0) {
        u = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        memcpy(&u, &v, 4);
        u |= sign;
    }
    float r;
    memcpy(&r, &u, 4);
    return r;
}

dt_status dt_st_read_f32(const dt_st_file *f, const char *name, int ndim, const int64_t *shape,
                         float *out) {
    if (!f || !name || !out || (ndim > 0 && !shape) || ndim < 0 || ndim > NDIM_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: bad argument (ndim %d)", __func__, ndim);
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t)
        return dt_err_set(DT_ERR_FORMAT, "%s: no tensor named \"%s\"", f->path, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char want[256], got[256];
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": shape %s in the file, expected %s",
                          f->path, name, shape_str(t->ndim, t->shape, got, sizeof got),
                          shape_str(ndim, shape, want, sizeof want));
    }
    size_t n = t->nbytes / dtype_sizes[t->dtype];
    const unsigned char *p = t->data;
    /* memcpy per element: tensor data need not be aligned in a file from another writer. */
    switch (t->dtype) {
    case DT_ST_F32:
        memcpy(out, p, n * 4);
        return DT_OK;
    case DT_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&out[i], &u, 4);
        }
        return DT_OK;
    case DT_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = f16_to_f32(h);
        }
        return DT_OK;
    default:
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\": dtype %s cannot be read as float "
                          "(expected F32, BF16 or F16)", f->path, name, dtype_names[t->dtype]);
    }
}

/* ---- writer ---- */

dt_status dt_st_writer_init(dt_st_writer **out) {
    if (!out)
        return dt_err_set(DT_ERR_ARG, "%s: NULL out", __func__);
    *out = calloc(1, sizeof **out);
    if (!*out)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    return DT_OK;
}

void dt_st_writer_free(dt_st_writer *w) {
    if (!w)
        return;
    for (int i = 0; i < w->n; i++)
        free(w->e[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->e);
    free(w->meta);
    free(w);
}

dt_status dt_st_writer_add(dt_st_writer *w, const char *name, dt_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data) {
    if (!w || !name || !name[0] || (ndim > 0 && !shape))
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument or empty name", __func__);
    if ((int)dtype < 0 || dtype >= DT_ST_DTYPE_COUNT)
        return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": bad dtype %d", __func__, name,
                          (int)dtype);
    if (ndim < 0 || ndim > NDIM_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": ndim %d outside [0, %d]", __func__,
                          name, ndim, NDIM_MAX);
    if (strcmp(name, "__metadata__") == 0)
        return dt_err_set(DT_ERR_ARG, "%s: \"__metadata__\" is reserved", __func__);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return dt_err_set(DT_ERR_ARG, "%s: duplicate tensor name \"%s\"", __func__, name);
    int64_t numel = 1, nbytes;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(numel, shape[i], &numel))
            return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": bad dim %d = %lld", __func__, name,
                              i, (long long)shape[i]);
    if (__builtin_mul_overflow(numel, (int64_t)dtype_sizes[dtype], &nbytes) ||
        (double)nbytes > JSON_INT_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": too many bytes", __func__, name);
    if (nbytes > 0 && !data)
        return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": NULL data", __func__, name);
    wentry *grown = dt_grow(w->e, &w->cap, w->n, sizeof *grown, 16);
    if (!grown)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    w->e = grown;
    wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name)))
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        e->shape[i] = shape[i];
    e->nbytes = (size_t)nbytes;
    e->data = data;
    w->n++;
    return DT_OK;
}

dt_status dt_st_writer_add_source(dt_st_writer *w, const char *name, dt_st_dtype dtype,
                                  int ndim, const int64_t *shape, dt_st_source_fn fn,
                                  void *ctx) {
    static const char none; /* add() wants data; commit reads the source instead */
    if (!fn)
        return dt_err_set(DT_ERR_ARG, "%s: tensor \"%s\": NULL source", __func__,
                          name ? name : "?");
    DT_TRY(dt_st_writer_add(w, name, dtype, ndim, shape, &none));
    w->e[w->n - 1].source = fn;
    w->e[w->n - 1].source_ctx = ctx;
    return DT_OK;
}

/* A source tensor's bytes, in the pieces its callback hands out. */
static dt_status write_source(dt_atomic_file *a, const wentry *e) {
    for (size_t at = 0; at < e->nbytes;) {
        const void *piece = NULL;
        size_t len = 0;
        DT_TRY(e->source(e->source_ctx, (int64_t)at, &piece, &len));
        if (!piece || len == 0 || len > e->nbytes - at)
            return dt_err_set(DT_ERR_ARG, "tensor \"%s\": its source gave a piece of %zu bytes "
                              "at byte %zu of %zu", e->name, len, at, e->nbytes);
        DT_TRY(dt_atomic_write(a, piece, len));
        at += len;
    }
    return DT_OK;
}

dt_status dt_st_writer_set_metadata(dt_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value)
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument", __func__);
    char *v = strdup(value);
    if (!v)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[i].key, key) == 0) { /* setting a key again replaces its value */
            free(w->meta[i].value);
            w->meta[i].value = v;
            return DT_OK;
        }
    kv *m = dt_grow(w->meta, &w->cap_meta, w->n_meta, sizeof *m, 8);
    if (!m) {
        free(v);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    }
    w->meta = m;
    char *k = strdup(key);
    if (!k) {
        free(v);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    }
    w->meta[w->n_meta++] = (kv){k, v};
    return DT_OK;
}

/* Integers go in as raw JSON text so they are always printed as plain digits (cJSON would
 * print large doubles with an exponent, which the Rust reference parser rejects). */
static cJSON *raw_int(int64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", (long long)v);
    return cJSON_CreateRaw(s);
}

/* Builds the header JSON; the caller frees the returned string. */
static char *build_header(const dt_st_writer *w) {
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    if (w->n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto fail;
        for (int i = 0; i < w->n_meta; i++)
            if (!cJSON_AddStringToObject(m, w->meta[i].key, w->meta[i].value))
                goto fail;
    }
    int64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const wentry *e = &w->e[i];
        /* key order as in the reference writer: dtype, shape, data_offsets */
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        cJSON *dt = t ? cJSON_AddStringToObject(t, "dtype", dtype_names[e->dtype]) : NULL;
        cJSON *sh = dt ? cJSON_AddArrayToObject(t, "shape") : NULL;
        cJSON *o = sh ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        if (!o)
            goto fail;
        for (int d = 0; d < e->ndim; d++)
            cJSON_AddItemToArray(sh, raw_int(e->shape[d]));
        cJSON_AddItemToArray(o, raw_int(off));
        off += (int64_t)e->nbytes;
        cJSON_AddItemToArray(o, raw_int(off));
        if (cJSON_GetArraySize(sh) != e->ndim || cJSON_GetArraySize(o) != 2)
            goto fail; /* a raw_int allocation failed */
    }
    text = cJSON_PrintUnformatted(root);

fail:
    cJSON_Delete(root);
    return text;
}

dt_status dt_st_writer_data_start(const dt_st_writer *w, int64_t *start) {
    char *hdr = build_header(w);
    if (!hdr)
        return dt_err_set(DT_ERR_OOM, "safetensors: out of memory building the header");
    *start = 8 + (int64_t)(strlen(hdr) + 7) / 8 * 8; /* as dt_st_writer_commit pads it */
    free(hdr);
    return DT_OK;
}

dt_status dt_st_writer_commit(dt_st_writer *w, const char *path) {
    if (!w || !path)
        return dt_err_set(DT_ERR_ARG, "%s: NULL argument", __func__);
    dt_status st = DT_OK;
    dt_atomic_file a = {0};
    char *hdr = build_header(w);
    if (!hdr)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory building the header", path);
    /* Pad with spaces so the data section starts 8-byte aligned, as the reference does. */
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
    DT_TRY_GOTO(dt_atomic_open(&a, path));
    DT_TRY_GOTO(dt_atomic_write(&a, len8, 8));
    DT_TRY_GOTO(dt_atomic_write(&a, hdr, hlen));
    DT_TRY_GOTO(dt_atomic_write(&a, spaces, padded - hlen));
    for (int i = 0; i < w->n; i++)
        DT_TRY_GOTO(w->e[i].source ? write_source(&a, &w->e[i])
                                   : dt_atomic_write(&a, w->e[i].data, w->e[i].nbytes));
    free(hdr);
    return dt_atomic_commit(&a);

fail:
    dt_atomic_abort(&a);
    free(hdr);
    return st;
}
