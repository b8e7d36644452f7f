/* dtrain prepare --video. See prepare_video.h.
 *
 * A file's clips are collected before any is written, so a file that breaks part way adds
 * nothing: the shards hold whole files or none of them.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "cli/prepare_video.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/help.h"
#include "core/clock.h"
#include "core/buckets.h"
#include "core/log.h"
#include "core/text.h"
#include "io/clips.h"
#include "io/video.h"

enum { MAX_CAPTION = 1 << 16 };

/* a flag's number into a field, or out with the reason in dt_err_msg() */
#define TAKE(ok, set)                                                                              \
    do {                                                                                           \
        if (!(ok))                                                                                 \
            return PARSE_BAD;                                                                      \
        set;                                                                                       \
    } while (0)

enum { PARSE_OK, PARSE_BAD, PARSE_SAID };

typedef struct opts {
    const char *in, *out;
    dt_video_spec spec;
    dt_buckets bk; /* --buckets: each file's clips go to its nearest (n 0: spec's shape alone) */
    double val_fraction;
    int64_t shard_bytes;
} opts;

/* ---- the files under a folder, in path order -------------------------------------------- */

static struct {
    char **path;
    int n, cap;
    int oom;
} walk;

static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    if (type != FTW_F || path[ftw->base] == '.' || dt_ends_with(path, ".txt"))
        return 0;
    if (walk.n == walk.cap) {
        int cap = walk.cap ? 2 * walk.cap : 64;
        char **p = realloc(walk.path, (size_t)cap * sizeof *p);
        if (!p)
            return walk.oom = 1;
        walk.path = p, walk.cap = cap;
    }
    if (!(walk.path[walk.n] = strdup(path)))
        return walk.oom = 1;
    walk.n++;
    return 0;
}

static int path_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static dt_status list_videos(const char *dir) {
    if (nftw(dir, visit, 16, FTW_PHYS) != 0)
        return walk.oom
                   ? dt_err_set(DT_ERR_OOM, "%s: out of memory listing files", dir)
                   : dt_err_set(DT_ERR_IO, "%s: cannot read the folder: %s", dir, strerror(errno));
    if (walk.n == 0)
        return dt_err_set(DT_ERR_IO, "%s holds no file to read as a video", dir);
    qsort(walk.path, (size_t)walk.n, sizeof *walk.path, path_cmp);
    return DT_OK;
}

/* FILE.ext -> the text of FILE.txt with its surrounding white space cut, or "" */
static void read_caption(const char *video, char *buf, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s", video);
    char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        *dot = 0;
    strncat(path, ".txt", sizeof path - strlen(path) - 1);
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = buf;
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len &&
           (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == '\t'))
        len--;
    memmove(buf, s, len);
    buf[len] = 0;
}

/* ---- one file's clips, held until the file is read whole --------------------------------- */

typedef struct held {
    uint8_t *pixels;
    int64_t *start_ms;
    int n, cap;
    size_t clip_bytes;
} held;

static dt_status hold(void *ctx, const uint8_t *pixels, int64_t start_ms) {
    held *h = ctx;
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        uint8_t *p = realloc(h->pixels, (size_t)cap * h->clip_bytes);
        if (p)
            h->pixels = p;
        int64_t *s = realloc(h->start_ms, (size_t)cap * sizeof *s);
        if (s)
            h->start_ms = s;
        if (!p || !s)
            return dt_err_set(DT_ERR_OOM, "out of memory holding %d clips", cap);
        h->cap = cap;
    }
    memcpy(h->pixels + (size_t)h->n * h->clip_bytes, pixels, h->clip_bytes);
    h->start_ms[h->n++] = start_ms;
    return DT_OK;
}

typedef struct tally {
    int files, skipped, short_files;
    int64_t clips, decoded;
    char first_skip[512];
} tally;

static dt_status add_file(const opts *o, const dt_video_spec *spec, const char *path,
                          dt_clips_writer *w, held *h, tally *t) {
    static char caption[MAX_CAPTION];
    h->n = 0;
    dt_video_counts n;
    dt_status st = dt_video_clips(path, spec, hold, h, &n);
    t->decoded += n.decoded;
    if (st == DT_ERR_OOM)
        return st;
    if (st != DT_OK) {
        if (t->skipped++ == 0)
            snprintf(t->first_skip, sizeof t->first_skip, "%s", dt_err_msg());
        return DT_OK;
    }
    if (h->n == 0) {
        t->short_files++;
        return DT_OK;
    }
    read_caption(path, caption, sizeof caption);
    const char *source = path + strlen(o->in);
    source += *source == '/';
    for (int i = 0; i < h->n; i++)
        DT_TRY(dt_clips_writer_add(w, h->pixels + (size_t)i * h->clip_bytes, caption, source,
                                   h->start_ms[i]));
    t->files++;
    t->clips += h->n;
    return DT_OK;
}

/* The bucket a file's clips go to: the nearest in aspect ratio; among those, one whose clip
 * the file is long enough to fill (the longest such), then the nearest in pixels a frame. */
static int nearest_bucket(const dt_buckets *bk, const dt_video_info *v, double fps) {
    int best = 0;
    double key[3] = {INFINITY, INFINITY, INFINITY};
    for (int k = 0; k < bk->n; k++) {
        const dt_bucket *b = &bk->b[k];
        bool fills = v->seconds <= 0 || b->frames / fps <= v->seconds + 1e-9;
        double ratio = fabs(log((double)v->width / v->height) - log((double)b->width / b->height));
        double mine[3] = {ratio, fills ? -b->frames : 1e9 + b->frames,
                          fabs(log((double)v->width * v->height / ((double)b->width * b->height)))};
        bool better = false;
        for (int i = 0; i < 3; i++) {
            if (fabs(mine[i] - key[i]) > 1e-9) {
                better = mine[i] < key[i];
                break;
            }
        }
        if (better)
            best = k, memcpy(key, mine, sizeof key);
    }
    return best;
}

/* Where the clips of one split go: one shape (OUT/name), or a folder per bucket
 * (OUT/name/FxHxW), each with its writer, held clips and tally. */
typedef struct outputs {
    int n;
    dt_video_spec spec[DT_MAX_BUCKETS];
    char dir[DT_MAX_BUCKETS][4096];
    dt_clips_writer *w[DT_MAX_BUCKETS];
    held h[DT_MAX_BUCKETS];
    tally t[DT_MAX_BUCKETS];
} outputs;

static dt_status open_outputs(const opts *o, const char *name, outputs *out) {
    out->n = o->bk.n ? o->bk.n : 1;
    for (int k = 0; k < out->n; k++) {
        dt_video_spec *s = &out->spec[k];
        *s = o->spec;
        if (o->bk.n) {
            s->frames = o->bk.b[k].frames, s->height = o->bk.b[k].height;
            s->width = o->bk.b[k].width;
            snprintf(out->dir[k], sizeof out->dir[k], "%s/%s/%dx%dx%d", o->out, name, s->frames,
                     s->height, s->width);
        } else {
            snprintf(out->dir[k], sizeof out->dir[k], "%s/%s", o->out, name);
        }
        dt_clip_shape shape = {
            .frames = s->frames, .channels = 3, .height = s->height, .width = s->width};
        out->h[k] = (held){.clip_bytes = (size_t)s->frames * s->height * s->width * 3};
        DT_TRY(dt_clips_writer_open(out->dir[k], shape, s->fps, o->shard_bytes, &out->w[k]));
    }
    return DT_OK;
}

static void free_outputs(outputs *out) {
    for (int k = 0; k < out->n; k++) {
        dt_clips_writer_free(out->w[k]);
        free(out->h[k].pixels);
        free(out->h[k].start_ms);
    }
}

/* the file's bucket, or its reason to be skipped in the bucket-0 tally */
static int bucket_of_file(const opts *o, const char *path, outputs *out) {
    if (o->bk.n <= 1)
        return 0;
    dt_video_info v;
    if (dt_video_probe(path, &v) != DT_OK) {
        tally *t = &out->t[0];
        if (t->skipped++ == 0)
            snprintf(t->first_skip, sizeof t->first_skip, "%s", dt_err_msg());
        return -1;
    }
    return nearest_bucket(&o->bk, &v, o->spec.fps);
}

/* files [first, last) into the shards of each output */
static dt_status write_split(const opts *o, const char *name, int first, int last, outputs *out) {
    dt_status st;
    DT_TRY_GOTO(open_outputs(o, name, out));
    for (int i = first; i < last; i++) {
        int k = bucket_of_file(o, walk.path[i], out);
        if (k >= 0)
            DT_TRY_GOTO(
                add_file(o, &out->spec[k], walk.path[i], out->w[k], &out->h[k], &out->t[k]));
    }
    for (int k = 0; k < out->n; k++)
        DT_TRY_GOTO(dt_clips_writer_finish(out->w[k], NULL));
fail:
    free_outputs(out);
    return st;
}

/* the tallies of every output as one */
static tally total_of(const outputs *out) {
    tally sum = {0};
    for (int k = 0; k < out->n; k++) {
        const tally *t = &out->t[k];
        sum.files += t->files, sum.skipped += t->skipped, sum.short_files += t->short_files;
        sum.clips += t->clips, sum.decoded += t->decoded;
        if (!sum.first_skip[0])
            memcpy(sum.first_skip, t->first_skip, sizeof sum.first_skip);
    }
    return sum;
}

static void report(const opts *o, const char *name, const outputs *out) {
    for (int k = 0; k < out->n; k++) {
        const dt_video_spec *s = &out->spec[k];
        const tally *t = &out->t[k];
        dt_info("%s: %lld clips of %d frames of %dx%d at %g fps from %d files", out->dir[k],
                (long long)t->clips, s->frames, s->height, s->width, s->fps, t->files);
        if (t->short_files)
            dt_info("%s: %d files are shorter than one clip (%d frames at %g fps) and gave none",
                    out->dir[k], t->short_files, s->frames, s->fps);
    }
    tally sum = total_of(out);
    if (sum.skipped)
        dt_warn("%s/%s: %d files skipped; the first: %s", o->out, name, sum.skipped,
                sum.first_skip);
}

static dt_status prepare(const opts *o) {
    DT_TRY(list_videos(o->in));
    int n_val = (int)(walk.n * o->val_fraction);
    static outputs train_out, val_out;
    train_out = (outputs){0}, val_out = (outputs){0};
    double t0 = dt_now();
    DT_TRY(write_split(o, "train", 0, walk.n - n_val, &train_out));
    if (n_val > 0)
        DT_TRY(write_split(o, "val", walk.n - n_val, walk.n, &val_out));
    double secs = dt_now() - t0;
    tally train = total_of(&train_out), val = total_of(&val_out);
    if (train.clips == 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: no training clip came out of %d files (%d "
                          "unreadable%s%s; %d shorter than one clip of %d frames at %g fps)",
                          o->in, walk.n - n_val, train.skipped,
                          train.skipped ? ", the first: " : "", train.first_skip, train.short_files,
                          train_out.spec[0].frames, o->spec.fps);
    report(o, "train", &train_out);
    if (n_val > 0)
        report(o, "val", &val_out);
    else
        dt_info("no validation clips: %d files x --val-fraction %g is under one file", walk.n,
                o->val_fraction);
    int64_t frames = 0, decoded = train.decoded + val.decoded;
    for (int k = 0; k < train_out.n; k++)
        frames += (train_out.t[k].clips + val_out.t[k].clips) * train_out.spec[k].frames;
    dt_info("%lld clip frames from %lld decoded in %.2f s: %.0f clip frames/s, %.0f decoded/s",
            (long long)frames, (long long)decoded, secs, secs > 0 ? (double)frames / secs : 0.0,
            secs > 0 ? (double)decoded / secs : 0.0);
    return DT_OK;
}

static int parse(int argc, char **argv, opts *o) {
    const char *v;
    int64_t x;
    bool sized = false; /* --frames, --height or --width given */
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--video")))
            o->in = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            o->out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--frames")) && (sized = true))
            TAKE(dt_cli_int("--frames", v, 1, 4096, &x), o->spec.frames = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--height")) && (sized = true))
            TAKE(dt_cli_int("--height", v, 1, 8192, &x), o->spec.height = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--width")) && (sized = true))
            TAKE(dt_cli_int("--width", v, 1, 8192, &x), o->spec.width = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--clips-per-video")))
            TAKE(dt_cli_int("--clips-per-video", v, 0, 1 << 30, &x), o->spec.max_clips = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--shard-mb")))
            TAKE(dt_cli_int("--shard-mb", v, 1, 1 << 20, &x), o->shard_bytes = x << 20);
        else if ((v = dt_cli_option(argc, argv, &i, "--fps"))) {
            if (!dt_cli_real("--fps", v, 1e-3, 1000, &o->spec.fps))
                return PARSE_BAD;
        } else if ((v = dt_cli_option(argc, argv, &i, "--buckets"))) {
            if (dt_buckets_parse(v, &o->bk) != DT_OK)
                return PARSE_BAD;
        } else if ((v = dt_cli_option(argc, argv, &i, "--val-fraction"))) {
            if (!dt_cli_real("--val-fraction", v, 0, 0.999, &o->val_fraction))
                return PARSE_BAD;
        } else {
            static const char *const with_value[] = {"--video",
                                                     "--out",
                                                     "--frames",
                                                     "--height",
                                                     "--width",
                                                     "--fps",
                                                     "--clips-per-video",
                                                     "--val-fraction",
                                                     "--shard-mb",
                                                     "--buckets",
                                                     NULL};
            dt_cli_bad_arg("prepare", argv[i], with_value);
            return PARSE_SAID;
        }
    }
    if (!o->in || !o->out) {
        dt_err_set(DT_ERR_ARG, "prepare --video DIR needs --out DIR");
        return PARSE_BAD;
    }
    if (o->bk.n && sized) {
        dt_err_set(DT_ERR_ARG, "prepare --video: --buckets names the clip shapes; leave out "
                               "--frames, --height and --width");
        return PARSE_BAD;
    }
    return PARSE_OK;
}

int dt_cli_prepare_video(int argc, char **argv) {
    opts o = {.spec = {.frames = 8, .height = 32, .width = 32, .fps = 8},
              .val_fraction = 0.1,
              .shard_bytes = (int64_t)256 << 20};
    int parsed = parse(argc, argv, &o);
    if (parsed != PARSE_OK) {
        if (parsed == PARSE_BAD)
            dt_error("%s", dt_err_msg());
        return DT_EXIT_USAGE;
    }
    dt_status st = prepare(&o);
    for (int i = 0; i < walk.n; i++)
        free(walk.path[i]);
    free(walk.path);
    if (st == DT_OK)
        return DT_EXIT_OK;
    dt_error("%s", dt_err_msg());
    return st == DT_ERR_ARG ? DT_EXIT_USAGE : DT_EXIT_RUN;
}
