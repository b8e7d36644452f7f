/* Pixel and latent clip shards. See clips.h.
 *
 * The writer buffers one shard (pixels, captions, sources) and commits it through the
 * safetensors writer, so a shard on disk is whole or absent. The reader opens every shard's
 * header (io/safetensors.h's header-only open), keeps each shard's first clip index, its
 * caption ends and an open descriptor, and preads one clip at a time.
 */
#include "io/clips.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/text.h"
#include "io/atomic.h"
#include "io/safetensors.h"

#define FORMAT_NAME "dtrain-clips"

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct bytes {
    char *p;
    int64_t n, cap;
} bytes;

static bool bytes_put(bytes *b, const void *src, int64_t n) {
    if (b->n + n > b->cap) {
        int64_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        char *q = realloc(b->p, (size_t)cap);
        if (!q)
            return false;
        b->p = q, b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, (size_t)n);
    b->n += n;
    return true;
}

struct dt_clips_writer {
    char *dir;
    dt_clip_shape shape;
    double fps;
    int64_t clip_bytes, shard_clips; /* clips a shard holds */
    int shard;                       /* shards written */
    int64_t n, total;                /* clips in the open shard, in all */
    bytes pixels, caption, source, caption_end, source_end, start_ms;
};

dt_status dt_clips_writer_open(const char *dir, dt_clip_shape shape, double fps,
                               int64_t shard_bytes, dt_clips_writer **out) {
    *out = NULL;
    if (shape.frames < 1 || shape.height < 1 || shape.width < 1 || shape.channels != 3 ||
        !(fps > 0) || shard_bytes < 1)
        return dt_err_set(DT_ERR_ARG,
                          "clip shards: %d frames of %dx%d with %d channels at %g "
                          "frames a second, %lld bytes a shard: not a pixel clip shape",
                          shape.frames, shape.height, shape.width, shape.channels, fps,
                          (long long)shard_bytes);
    DT_TRY(dt_mkdirs(dir));
    dt_clips_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return dt_err_set(DT_ERR_OOM, "clip shards in %s: out of memory", dir);
    }
    w->shape = shape;
    w->fps = fps;
    w->clip_bytes = (int64_t)shape.frames * shape.height * shape.width * 3;
    w->shard_clips = shard_bytes / w->clip_bytes > 0 ? shard_bytes / w->clip_bytes : 1;
    *out = w;
    return DT_OK;
}

static dt_status flush_shard(dt_clips_writer *w) {
    if (w->n == 0)
        return DT_OK;
    char path[4096], fps[32];
    if ((size_t)snprintf(path, sizeof path, "%s/clips-%05d.safetensors", w->dir, w->shard) >=
        sizeof path)
        return dt_err_set(DT_ERR_IO, "%s: path too long", w->dir);
    snprintf(fps, sizeof fps, "%.17g", w->fps);
    const dt_clip_shape *s = &w->shape;
    int64_t px[5] = {w->n, s->frames, s->height, s->width, 3}, cap[1] = {w->caption.n},
            src[1] = {w->source.n}, per[1] = {w->n};
    dt_st_writer *st_w = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_st_writer_init(&st_w));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "pixels", DT_ST_U8, 5, px, w->pixels.p));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "caption", DT_ST_U8, 1, cap, w->caption.p));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "caption_end", DT_ST_I64, 1, per, w->caption_end.p));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "source", DT_ST_U8, 1, src, w->source.p));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "source_end", DT_ST_I64, 1, per, w->source_end.p));
    DT_TRY_GOTO(dt_st_writer_add(st_w, "start_ms", DT_ST_I64, 1, per, w->start_ms.p));
    DT_TRY_GOTO(dt_st_writer_set_metadata(st_w, "format", FORMAT_NAME));
    DT_TRY_GOTO(dt_st_writer_set_metadata(st_w, "fps", fps));
    DT_TRY_GOTO(dt_st_writer_commit(st_w, path));
    w->shard++;
    w->n = 0;
    w->pixels.n = w->caption.n = w->source.n = 0;
    w->caption_end.n = w->source_end.n = w->start_ms.n = 0;
fail:
    dt_st_writer_free(st_w);
    return st;
}

dt_status dt_clips_writer_add(dt_clips_writer *w, const uint8_t *pixels, const char *caption,
                              const char *source, int64_t start_ms) {
    int64_t ce = w->caption.n + (int64_t)strlen(caption),
            se = w->source.n + (int64_t)strlen(source);
    if (!bytes_put(&w->pixels, pixels, w->clip_bytes) ||
        !bytes_put(&w->caption, caption, (int64_t)strlen(caption)) ||
        !bytes_put(&w->source, source, (int64_t)strlen(source)) ||
        !bytes_put(&w->caption_end, &ce, 8) || !bytes_put(&w->source_end, &se, 8) ||
        !bytes_put(&w->start_ms, &start_ms, 8))
        return dt_err_set(DT_ERR_OOM, "clip shards in %s: out of memory", w->dir);
    w->n++;
    w->total++;
    return w->n == w->shard_clips ? flush_shard(w) : DT_OK;
}

dt_status dt_clips_writer_finish(dt_clips_writer *w, int64_t *n_clips) {
    DT_TRY(flush_shard(w));
    if (n_clips)
        *n_clips = w->total;
    return DT_OK;
}

void dt_clips_writer_free(dt_clips_writer *w) {
    if (!w)
        return;
    bytes *b[] = {&w->pixels,      &w->caption,    &w->source,
                  &w->caption_end, &w->source_end, &w->start_ms};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        free(b[i]->p);
    free(w->dir);
    free(w);
}

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct shard {
    char *path;
    int fd;
    int64_t first, n;     /* its clips are first .. first + n - 1 of the folder */
    int64_t clips_at;     /* file offset of clip 0 */
    int64_t caption_at;   /* file offset of the caption bytes */
    int64_t *caption_end; /* [n] */
    int64_t text_at;      /* latents with text: file offset of clip 0's text rows */
    int64_t *text_n;      /* [n] each clip's text rows */
    dt_clip_text text;    /* its text's shape ({0} without) */
    dt_st_dtype text_dtype;
} shard;

struct dt_clips {
    dt_clips_kind kind;
    dt_clip_shape shape;
    dt_st_dtype dtype; /* of a stored value */
    double fps;
    int64_t clip_bytes, count;
    shard *s;
    int n_shards;
    void *buf; /* one stored clip */
    dt_clip_text text; /* the text every clip has ({0}: none) */
    dt_st_dtype text_dtype;
    int64_t text_bytes; /* one clip's stored text rows */
    void *text_buf;
};

static int is_shard_name(const struct dirent *e) {
    return e->d_name[0] != '.' && dt_ends_with(e->d_name, ".safetensors");
}

/* the shard paths of a folder in name order, or the path itself when it is a file */
static dt_status list_shards(const char *path, char ***out, int *n) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dt_err_set(DT_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        *out = malloc(sizeof **out);
        if (!*out || !((*out)[0] = strdup(path)))
            return free(*out), dt_err_set(DT_ERR_OOM, "%s: out of memory", path);
        *n = 1;
        return DT_OK;
    }
    struct dirent **names = NULL;
    int k = scandir(path, &names, is_shard_name, alphasort);
    if (k < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot list the folder: %s", path, strerror(errno));
    dt_status st = DT_OK;
    *out = calloc((size_t)(k ? k : 1), sizeof **out);
    for (int i = 0; i < k; i++) {
        size_t len = strlen(path) + strlen(names[i]->d_name) + 2;
        if (*out && ((*out)[i] = malloc(len)))
            snprintf((*out)[i], len, "%s/%s", path, names[i]->d_name);
        else
            st = DT_ERR_OOM;
        free(names[i]);
    }
    free(names);
    *n = k;
    if (st != DT_OK)
        return dt_err_set(DT_ERR_OOM, "%s: out of memory listing shards", path);
    if (k == 0)
        return dt_err_set(DT_ERR_IO, "%s holds no *.safetensors shard", path);
    return DT_OK;
}

static dt_status bad(const char *path, const char *tensor, const char *why) {
    return dt_err_set(DT_ERR_FORMAT, "%s: tensor \"%s\" %s", path, tensor, why);
}

/* a tensor of one row per clip: [n] of an integer type */
static dt_status per_clip(const dt_st_file *f, const char *path, const char *name, int64_t n,
                          bool required, const dt_st_tensor **out) {
    const dt_st_tensor *t = dt_st_find(f, name);
    *out = t;
    if (!t)
        return required ? bad(path, name, "is missing") : DT_OK;
    if (t->ndim != 1 || t->shape[0] != n || (t->dtype != DT_ST_I64 && t->dtype != DT_ST_I32))
        return bad(path, name, "is not one I32 or I64 per clip");
    return DT_OK;
}

static dt_status read_at(const shard *s, void *dst, size_t len, int64_t at) {
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(s->fd, (char *)dst + got, len - got, at + (int64_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return dt_err_set(DT_ERR_IO, "%s: reading %zu bytes at %lld failed: %s", s->path, len,
                              (long long)at, r < 0 ? strerror(errno) : "the file shrank");
        got += (size_t)r;
    }
    return DT_OK;
}

/* pixels [N, T, H, W, 3] U8 and the caption table */
static dt_status open_pixels(const dt_st_file *f, shard *s, dt_clip_shape *shape, double *fps) {
    const char *p = s->path, *fmt = dt_st_metadata(f, "format"), *rate = dt_st_metadata(f, "fps");
    const dt_st_tensor *px = dt_st_find(f, "pixels"), *cap = dt_st_find(f, "caption"), *end;
    if (!fmt || strcmp(fmt, FORMAT_NAME) || !px)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s is not a pixel clip shard (no \"pixels\" tensor "
                          "and __metadata__ format \"" FORMAT_NAME "\"; dtrain prepare --video "
                          "writes them)",
                          p);
    if (px->dtype != DT_ST_U8 || px->ndim != 5 || px->shape[4] != 3 || px->shape[1] < 1 ||
        px->shape[2] < 1 || px->shape[3] < 1 || px->shape[1] > 1 << 20 || px->shape[2] > 1 << 20 ||
        px->shape[3] > 1 << 20)
        return bad(p, "pixels", "is not U8 [clips, frames, height, width, 3]");
    char *stop = NULL;
    *fps = rate ? strtod(rate, &stop) : 0;
    if (!rate || *stop || !(*fps > 0))
        return dt_err_set(DT_ERR_FORMAT, "%s: __metadata__ \"fps\" is not a positive number", p);
    *shape = (dt_clip_shape){.frames = (int)px->shape[1],
                             .channels = 3,
                             .height = (int)px->shape[2],
                             .width = (int)px->shape[3]};
    s->n = px->shape[0];
    s->clips_at = px->offset;
    if (!cap || cap->dtype != DT_ST_U8 || cap->ndim != 1)
        return bad(p, "caption", "is not U8 [bytes]");
    const dt_st_tensor *other;
    DT_TRY(per_clip(f, p, "source_end", s->n, true, &other));
    DT_TRY(per_clip(f, p, "start_ms", s->n, true, &other));
    DT_TRY(per_clip(f, p, "caption_end", s->n, true, &end));
    if (end->dtype != DT_ST_I64)
        return bad(p, "caption_end", "is not I64");
    s->caption_at = cap->offset;
    if (!(s->caption_end = malloc((size_t)(s->n ? s->n : 1) * 8)))
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for %lld captions", p, (long long)s->n);
    DT_TRY(read_at(s, s->caption_end, (size_t)s->n * 8, end->offset));
    for (int64_t i = 0; i < s->n; i++)
        if (s->caption_end[i] < (i ? s->caption_end[i - 1] : 0) ||
            s->caption_end[i] > cap->shape[0])
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: tensor \"caption_end\" entry %lld (%lld) runs "
                              "backwards or past the %lld caption bytes",
                              p, (long long)i, (long long)s->caption_end[i],
                              (long long)cap->shape[0]);
    return DT_OK;
}

/* each clip's text rows, checked against the tokens the text holds */
static dt_status read_text_len(shard *s, const dt_st_tensor *len) {
    size_t w = len->dtype == DT_ST_I64 ? 8 : 4, n = (size_t)(s->n ? s->n : 1);
    void *raw = malloc(n * w);
    if (!raw || !(s->text_n = malloc(n * sizeof *s->text_n))) {
        free(raw);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for %lld text lengths", s->path,
                          (long long)s->n);
    }
    dt_status st = read_at(s, raw, (size_t)s->n * w, len->offset);
    for (int64_t i = 0; st == DT_OK && i < s->n; i++) {
        s->text_n[i] = w == 8 ? ((const int64_t *)raw)[i] : ((const int32_t *)raw)[i];
        if (s->text_n[i] < 0 || s->text_n[i] > s->text.tokens)
            st = dt_err_set(DT_ERR_FORMAT,
                            "%s: tensor \"text_len\" entry %lld (%lld) is not "
                            "in 0..%d, the text's tokens",
                            s->path, (long long)i, (long long)s->text_n[i], s->text.tokens);
    }
    free(raw);
    return st;
}

/* latents [N, C, T, H, W] of a float type, and text embeddings that agree with them */
static dt_status open_latents(const dt_st_file *f, shard *s, dt_clip_shape *shape,
                              dt_st_dtype *dtype) {
    const char *p = s->path;
    const dt_st_tensor *x = dt_st_find(f, "latents"), *text = dt_st_find(f, "text"), *len;
    if (!x)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s is not a latent clip shard: it has no \"latents\" "
                          "tensor [clips, channels, frames, height, width]",
                          p);
    bool floats = x->dtype == DT_ST_F32 || x->dtype == DT_ST_BF16 || x->dtype == DT_ST_F16;
    bool dims = x->ndim == 5;
    for (int d = 1; dims && d < 5; d++)
        dims = x->shape[d] >= 1 && x->shape[d] <= 1 << 20;
    if (!floats || !dims)
        return bad(p, "latents",
                   "is not F32, BF16 or F16 [clips, channels, frames, height, "
                   "width]");
    *dtype = x->dtype;
    *shape = (dt_clip_shape){.channels = (int)x->shape[1],
                             .frames = (int)x->shape[2],
                             .height = (int)x->shape[3],
                             .width = (int)x->shape[4]};
    s->n = x->shape[0];
    s->clips_at = x->offset;
    DT_TRY(per_clip(f, p, "text_len", s->n, text != NULL, &len));
    if (text && (text->ndim != 3 || text->shape[0] != s->n || text->dtype == DT_ST_U8 ||
                 text->dtype == DT_ST_I32 || text->dtype == DT_ST_I64 || text->shape[1] < 1 ||
                 text->shape[2] < 1 || text->shape[1] > 1 << 20 || text->shape[2] > 1 << 20))
        return bad(p, "text", "is not a float [clips, tokens, width] with a row per clip");
    if (len && !text)
        return bad(p, "text_len", "comes without the \"text\" it measures");
    if (!text)
        return DT_OK;
    s->text = (dt_clip_text){.tokens = (int)text->shape[1], .dim = (int)text->shape[2]};
    s->text_dtype = text->dtype;
    s->text_at = text->offset;
    return read_text_len(s, len);
}

static bool same_shape(dt_clip_shape a, dt_clip_shape b) {
    return a.frames == b.frames && a.channels == b.channels && a.height == b.height &&
           a.width == b.width;
}

static dt_status open_shard(dt_clips *c, int i) {
    shard *s = &c->s[i];
    dt_st_file *f = NULL;
    dt_clip_shape shape = {0};
    double fps = 0;
    dt_st_dtype dtype = DT_ST_U8;
    dt_status st;
    DT_TRY_GOTO(dt_st_open_header(s->path, &f));
    if ((s->fd = open(s->path, O_RDONLY | O_CLOEXEC)) < 0) {
        st = dt_err_set(DT_ERR_IO, "%s: %s", s->path, strerror(errno));
        goto fail;
    }
    if (c->kind == DT_CLIPS_PIXELS)
        DT_TRY_GOTO(open_pixels(f, s, &shape, &fps));
    else
        DT_TRY_GOTO(open_latents(f, s, &shape, &dtype));
    if (i == 0) {
        c->shape = shape, c->fps = fps, c->dtype = dtype;
        c->text = s->text, c->text_dtype = s->text_dtype;
    } else if (s->text.tokens != c->text.tokens || s->text.dim != c->text.dim ||
               s->text_dtype != c->text_dtype) {
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s holds text of %d tokens x %d; %s holds %d x %d (or another "
                        "dtype): a folder's shards hold one text shape",
                        s->path, s->text.tokens, s->text.dim, c->s[0].path, c->text.tokens,
                        c->text.dim);
        goto fail;
    } else if (!same_shape(shape, c->shape) || fps != c->fps || dtype != c->dtype) {
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s holds clips of %d frames x %d channels x %dx%d (%g "
                        "fps); %s holds %d x %d x %dx%d (%g fps): a folder's shards hold one "
                        "shape",
                        s->path, shape.frames, shape.channels, shape.height, shape.width, fps,
                        c->s[0].path, c->shape.frames, c->shape.channels, c->shape.height,
                        c->shape.width, c->fps);
        goto fail;
    }
    s->first = c->count;
    c->count += s->n;
fail:
    dt_st_close(f);
    return st;
}

dt_status dt_clips_open(const char *path, dt_clips_kind kind, dt_clips **out) {
    *out = NULL;
    dt_clips *c = calloc(1, sizeof *c);
    char **paths = NULL;
    int n = 0;
    dt_status st;
    if (!c) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    c->kind = kind;
    DT_TRY_GOTO(list_shards(path, &paths, &n));
    if (!(c->s = calloc((size_t)n, sizeof *c->s))) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        c->s[i] = (shard){.path = paths[i], .fd = -1};
        paths[i] = NULL;
        c->n_shards++;
        DT_TRY_GOTO(open_shard(c, i));
    }
    if (c->count == 0) {
        st = dt_err_set(DT_ERR_FORMAT, "%s holds no clip", path);
        goto fail;
    }
    size_t elem = kind == DT_CLIPS_PIXELS ? 1 : c->dtype == DT_ST_F32 ? 4 : 2;
    c->clip_bytes =
        (int64_t)elem * c->shape.frames * c->shape.channels * c->shape.height * c->shape.width;
    c->text_bytes = (int64_t)c->text.tokens * c->text.dim * (c->text_dtype == DT_ST_F32 ? 4 : 2);
    if (!(c->buf = malloc((size_t)c->clip_bytes)) ||
        (c->text_bytes && !(c->text_buf = malloc((size_t)c->text_bytes)))) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory for a clip", path);
        goto fail;
    }
    *out = c;
    st = DT_OK;
fail:
    for (int i = 0; i < n; i++)
        free(paths ? paths[i] : NULL);
    free(paths);
    if (st != DT_OK)
        dt_clips_close(c);
    return st;
}

void dt_clips_close(dt_clips *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n_shards; i++) {
        if (c->s[i].fd >= 0)
            close(c->s[i].fd);
        free(c->s[i].path);
        free(c->s[i].caption_end);
        free(c->s[i].text_n);
    }
    free(c->s);
    free(c->buf);
    free(c->text_buf);
    free(c);
}

int64_t dt_clips_count(const dt_clips *c) { return c->count; }
dt_clip_shape dt_clips_shape(const dt_clips *c) { return c->shape; }
double dt_clips_fps(const dt_clips *c) { return c->fps; }

/* the shard that holds clip i, by bisection over the shards' first clips */
static const shard *shard_of(const dt_clips *c, int64_t i) {
    int lo = 0, hi = c->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->s[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &c->s[lo];
}

/* n stored values from element `at`, `stride` apart, as floats: pixels mapped to [-1, 1] */
static void convert(const dt_clips *c, int64_t at, int64_t stride, int64_t n, float *out) {
    switch (c->dtype) {
    case DT_ST_U8:
        for (int64_t k = 0; k < n; k++)
            out[k] = ((const uint8_t *)c->buf)[at + k * stride] / 127.5f - 1.0f;
        return;
    case DT_ST_F32:
        for (int64_t k = 0; k < n; k++)
            out[k] = ((const float *)c->buf)[at + k * stride];
        return;
    case DT_ST_BF16:
        for (int64_t k = 0; k < n; k++)
            out[k] = dt_bf16_to_f32(((const dt_bf16 *)c->buf)[at + k * stride]);
        return;
    default:
        for (int64_t k = 0; k < n; k++)
            out[k] = dt_f16_to_f32(((const dt_f16 *)c->buf)[at + k * stride]);
    }
}

dt_status dt_clips_read(const dt_clips *c, int64_t i, float *out) {
    if (i < 0 || i >= c->count)
        return dt_err_set(DT_ERR_ARG, "clip %lld of %lld", (long long)i, (long long)c->count);
    const shard *s = shard_of(c, i);
    DT_TRY(read_at(s, c->buf, (size_t)c->clip_bytes, s->clips_at + (i - s->first) * c->clip_bytes));
    const dt_clip_shape *h = &c->shape;
    int64_t hw = (int64_t)h->height * h->width;
    /* stored [T, H, W, 3] (pixels: a plane's values 3 apart) or [C, T, H, W] (latents: a
     * plane together); out [T, C, H, W] */
    bool pixels = c->kind == DT_CLIPS_PIXELS;
    for (int t = 0; t < h->frames; t++)
        for (int ch = 0; ch < h->channels; ch++)
            convert(c, pixels ? (int64_t)t * hw * 3 + ch : ((int64_t)ch * h->frames + t) * hw,
                    pixels ? 3 : 1, hw, out + ((int64_t)t * h->channels + ch) * hw);
    return DT_OK;
}

dt_status dt_clips_caption(const dt_clips *c, int64_t i, char *buf, size_t cap) {
    if (i < 0 || i >= c->count || cap == 0)
        return dt_err_set(DT_ERR_ARG, "caption of clip %lld of %lld", (long long)i,
                          (long long)c->count);
    buf[0] = 0;
    if (c->kind != DT_CLIPS_PIXELS)
        return DT_OK;
    const shard *s = shard_of(c, i);
    int64_t k = i - s->first, b = k ? s->caption_end[k - 1] : 0, len = s->caption_end[k] - b;
    if (len > (int64_t)cap - 1)
        len = (int64_t)cap - 1;
    DT_TRY(read_at(s, buf, (size_t)len, s->caption_at + b));
    buf[len] = 0;
    return DT_OK;
}

dt_clip_text dt_clips_text_shape(const dt_clips *c) { return c->text; }

dt_status dt_clips_text(const dt_clips *c, int64_t i, float *out, int *n) {
    if (i < 0 || i >= c->count || !c->text_bytes)
        return dt_err_set(DT_ERR_ARG, "text of clip %lld of %lld (%s)", (long long)i,
                          (long long)c->count, c->text_bytes ? "a folder with text" : "none");
    const shard *s = shard_of(c, i);
    DT_TRY(read_at(s, c->text_buf, (size_t)c->text_bytes,
                   s->text_at + (i - s->first) * c->text_bytes));
    int64_t m = (int64_t)c->text.tokens * c->text.dim;
    const void *b = c->text_buf;
    for (int64_t k = 0; k < m; k++)
        out[k] = c->text_dtype == DT_ST_F32    ? ((const float *)b)[k]
                 : c->text_dtype == DT_ST_BF16 ? dt_bf16_to_f32(((const dt_bf16 *)b)[k])
                                               : dt_f16_to_f32(((const dt_f16 *)b)[k]);
    *n = (int)s->text_n[i - s->first];
    return DT_OK;
}
