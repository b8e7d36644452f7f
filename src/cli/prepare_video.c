/* dtrain prepare --video. See prepare_video.h.
 *
 * A file's clips are collected before any is written, so a file that breaks part way adds
 * nothing: the shards hold whole files or none of them.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "cli/prepare_video.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/help.h"
#include "core/clock.h"
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

static dt_status add_file(const opts *o, const char *path, dt_clips_writer *w, held *h, tally *t) {
    static char caption[MAX_CAPTION];
    h->n = 0;
    dt_video_counts n;
    dt_status st = dt_video_clips(path, &o->spec, hold, h, &n);
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

/* files [first, last) into the shards of OUT/name */
static dt_status write_split(const opts *o, const char *name, int first, int last, tally *t) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", o->out, name);
    const dt_video_spec *s = &o->spec;
    dt_clip_shape shape = {
        .frames = s->frames, .channels = 3, .height = s->height, .width = s->width};
    held h = {.clip_bytes = (size_t)s->frames * s->height * s->width * 3};
    dt_clips_writer *w = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_clips_writer_open(dir, shape, s->fps, o->shard_bytes, &w));
    for (int i = first; i < last; i++)
        DT_TRY_GOTO(add_file(o, walk.path[i], w, &h, t));
    DT_TRY_GOTO(dt_clips_writer_finish(w, NULL));
fail:
    dt_clips_writer_free(w);
    free(h.pixels);
    free(h.start_ms);
    return st;
}

static void report(const opts *o, const char *name, const tally *t) {
    dt_info("%s/%s: %lld clips of %d frames of %dx%d at %g fps from %d files", o->out, name,
            (long long)t->clips, o->spec.frames, o->spec.height, o->spec.width, o->spec.fps,
            t->files);
    if (t->short_files)
        dt_info("%s/%s: %d files are shorter than one clip (%d frames at %g fps) and gave none",
                o->out, name, t->short_files, o->spec.frames, o->spec.fps);
    if (t->skipped)
        dt_warn("%s/%s: %d files skipped; the first: %s", o->out, name, t->skipped, t->first_skip);
}

static dt_status prepare(const opts *o) {
    DT_TRY(list_videos(o->in));
    int n_val = (int)(walk.n * o->val_fraction);
    tally train = {0}, val = {0};
    double t0 = dt_now();
    DT_TRY(write_split(o, "train", 0, walk.n - n_val, &train));
    if (n_val > 0)
        DT_TRY(write_split(o, "val", walk.n - n_val, walk.n, &val));
    double secs = dt_now() - t0;
    if (train.clips == 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: no training clip came out of %d files (%d "
                          "unreadable%s%s; %d shorter than one clip of %d frames at %g fps)",
                          o->in, walk.n - n_val, train.skipped,
                          train.skipped ? ", the first: " : "", train.first_skip, train.short_files,
                          o->spec.frames, o->spec.fps);
    report(o, "train", &train);
    if (n_val > 0)
        report(o, "val", &val);
    else
        dt_info("no validation clips: %d files x --val-fraction %g is under one file", walk.n,
                o->val_fraction);
    int64_t frames = (train.clips + val.clips) * o->spec.frames,
            decoded = train.decoded + val.decoded;
    dt_info("%lld clip frames from %lld decoded in %.2f s: %.0f clip frames/s, %.0f decoded/s",
            (long long)frames, (long long)decoded, secs, secs > 0 ? (double)frames / secs : 0.0,
            secs > 0 ? (double)decoded / secs : 0.0);
    return DT_OK;
}

static int parse(int argc, char **argv, opts *o) {
    const char *v;
    int64_t x;
    for (int i = 2; i < argc; i++) {
        if ((v = dt_cli_option(argc, argv, &i, "--video")))
            o->in = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--out")))
            o->out = v;
        else if ((v = dt_cli_option(argc, argv, &i, "--frames")))
            TAKE(dt_cli_int("--frames", v, 1, 4096, &x), o->spec.frames = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--height")))
            TAKE(dt_cli_int("--height", v, 1, 8192, &x), o->spec.height = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--width")))
            TAKE(dt_cli_int("--width", v, 1, 8192, &x), o->spec.width = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--clips-per-video")))
            TAKE(dt_cli_int("--clips-per-video", v, 0, 1 << 30, &x), o->spec.max_clips = (int)x);
        else if ((v = dt_cli_option(argc, argv, &i, "--shard-mb")))
            TAKE(dt_cli_int("--shard-mb", v, 1, 1 << 20, &x), o->shard_bytes = x << 20);
        else if ((v = dt_cli_option(argc, argv, &i, "--fps"))) {
            if (!dt_cli_real("--fps", v, 1e-3, 1000, &o->spec.fps))
                return PARSE_BAD;
        } else if ((v = dt_cli_option(argc, argv, &i, "--val-fraction"))) {
            if (!dt_cli_real("--val-fraction", v, 0, 0.999, &o->val_fraction))
                return PARSE_BAD;
        } else {
            static const char *const with_value[] = {
                "--video",           "--out",          "--frames",   "--height", "--width", "--fps",
                "--clips-per-video", "--val-fraction", "--shard-mb", NULL};
            dt_cli_bad_arg("prepare", argv[i], with_value);
            return PARSE_SAID;
        }
    }
    if (!o->in || !o->out) {
        dt_err_set(DT_ERR_ARG, "prepare --video DIR needs --out DIR");
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
