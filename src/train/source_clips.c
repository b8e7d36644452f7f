/* The clip sources of a video DiT: clips of bouncing shapes made from the seed (io/bounce) or
 * read from disk (io/clips: pixel clips or a VAE's latents), noised for the rectified-flow
 * objective (models/flow.h) and packed as source.h says. Clip `index` of the run is row
 * index % B of step index / B; each row is a pure function of (seed, index) and, from disk,
 * the folder, so any rank makes any row and a resumed run or another layout sees the same
 * batch. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/bounce.h"
#include "io/clips.h"
#include "models/flow.h"
#include "train/source.h"

typedef struct clip_src {
    dt_clips *clips; /* from disk, or NULL: bouncing shapes of `bounce` */
    dt_bounce_config bounce;
    bool shuffle;  /* from disk: each row draws a clip of the folder */
    int n_classes; /* bouncing shapes: the model's; 0 = unconditional */
    float dropout; /* chance a clip's label becomes the null class */
    int64_t numel; /* floats per clip */
    int B;         /* global batch */
    uint64_t seed;
    int64_t step;     /* batches handed out so far */
    const char *what; /* the clips, for errors */
} clip_src;

static void src_close(void *self) {
    clip_src *s = self;
    dt_clips_close(s->clips);
    free(s);
}

static size_t input_bytes(const void *self) {
    return (size_t)(((const clip_src *)self)->numel + 2) * sizeof(float);
}

static size_t target_bytes(const void *self) {
    return (size_t)((const clip_src *)self)->numel * sizeof(float);
}

/* x_0 of run clip `index` into x0 and its label (0: none, n_classes: dropped for guidance) */
static dt_status clip_of(const clip_src *s, int64_t index, float *x0, int32_t *label) {
    *label = 0;
    if (s->clips) {
        int64_t n = dt_clips_count(s->clips);
        int64_t at =
            s->shuffle
                ? (int64_t)(dt_rng_u64(s->seed, "data.shuffle", (uint64_t)index) % (uint64_t)n)
                : index % n;
        return dt_clips_read(s->clips, at, x0);
    }
    dt_bounce_batch(&s->bounce, s->seed, index, 1, x0, label);
    if (s->n_classes == 0)
        *label = 0;
    else if (dt_flow_drop_label(s->seed, index, s->dropout))
        *label = s->n_classes;
    return DT_OK;
}

/* x_0 lands in the target row, then x_t goes to the input row and v over x_0, as
 * dt_flow_train computes them; t and the label follow x_t */
static dt_status src_rows(const void *self, int row0, int n, void *input, void *target) {
    const clip_src *s = self;
    for (int r = 0; r < n; r++) {
        int64_t index = s->step * s->B + row0 + r;
        float *in = (float *)input + (int64_t)r * (s->numel + 2),
              *tg = (float *)target + (int64_t)r * s->numel;
        int32_t label;
        DT_TRY(clip_of(s, index, tg, &label));
        in[s->numel] = dt_flow_make_row(s->seed, index, s->numel, in, tg);
        in[s->numel + 1] = (float)label;
    }
    return DT_OK;
}

static void src_advance(void *self) { ((clip_src *)self)->step++; }
static void src_rewind(void *self) { ((clip_src *)self)->step = 0; }

/* the position is the run index of the next batch's first clip */
static void src_position(const void *self, int64_t *pos, int64_t *step) {
    const clip_src *s = self;
    *pos = s->step * s->B;
    *step = s->step;
}

static dt_status src_seek(void *self, int64_t pos, int64_t step) {
    clip_src *s = self;
    if (step < 0 || step > INT64_MAX / s->B || pos != step * s->B)
        return dt_err_set(DT_ERR_FORMAT,
                          "data position %lld at step %lld is not where a batch "
                          "of %d %s starts (step x batch_size): the checkpoint was saved with "
                          "another batch size or is damaged",
                          (long long)pos, (long long)step, s->B, s->what);
    s->step = step;
    return DT_OK;
}

static const dt_source_ops clip_ops = {
    .close = src_close,
    .input_row_bytes = input_bytes,
    .target_row_bytes = target_bytes,
    .rows = src_rows,
    .advance = src_advance,
    .rewind = src_rewind,
    .position = src_position,
    .seek = src_seek,
};

/* a source of B clips a step of the model's shape; takes clips (closed on failure) */
static dt_status open_source(const dt_model_config *m, int B, uint64_t seed, dt_clips *clips,
                             const clip_src *proto, dt_source **out) {
    clip_src *c = calloc(1, sizeof *c);
    dt_source *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        dt_clips_close(clips);
        return dt_err_set(DT_ERR_OOM, "clip source: out of memory");
    }
    *c = *proto;
    c->clips = clips;
    c->B = B;
    c->seed = seed;
    c->numel = (int64_t)m->frames * m->channels * m->height * m->width;
    *s = (dt_source){.ops = &clip_ops, .self = c};
    *out = s;
    return DT_OK;
}

/* ---- bouncing shapes ---------------------------------------------------------------------- */

dt_status dt_source_open_bounce(const dt_bounce_source_spec *spec, dt_source **out) {
    *out = NULL;
    const dt_model_config *m = spec->model;
    dt_bounce_config clip = dt_bounce_defaults(m->frames, m->channels, m->height, m->width);
    clip.n_shapes = spec->shapes;
    if (dt_bounce_check(&clip) != DT_OK)
        return dt_err_wrap(DT_ERR_ARG,
                           "data.source=bounce with data.shapes=%d on clips of "
                           "model.frames=%d, channels=%d, height=%d, width=%d: ",
                           spec->shapes, m->frames, m->channels, m->height, m->width);
    if (m->n_classes != 0 && m->n_classes < DT_BOUNCE_KIND_COUNT)
        return dt_err_set(DT_ERR_ARG,
                          "model.n_classes=%d: data.source=bounce labels each clip "
                          "with the kind of its shapes, 0..%d; use n_classes=0 (unconditional) "
                          "or at least %d",
                          m->n_classes, DT_BOUNCE_KIND_COUNT - 1, DT_BOUNCE_KIND_COUNT);
    if (!(spec->label_dropout >= 0 && spec->label_dropout <= 1))
        return dt_err_set(DT_ERR_ARG, "data.label_dropout=%g is not in [0, 1]",
                          (double)spec->label_dropout);
    if (spec->batch_size < 1)
        return dt_err_set(DT_ERR_ARG, "bounce source: batch_size %d < 1", spec->batch_size);
    clip_src proto = {.bounce = clip,
                      .n_classes = m->n_classes,
                      .dropout = spec->label_dropout,
                      .what = "bouncing-shapes clips"};
    return open_source(m, spec->batch_size, spec->seed, NULL, &proto, out);
}

/* ---- from disk ---------------------------------------------------------------------------- */

static dt_status check_shape(const dt_clip_source_spec *spec, const dt_clips *c) {
    const dt_model_config *m = spec->model;
    dt_clip_shape h = dt_clips_shape(c);
    if (h.frames == m->frames && h.channels == m->channels && h.height == m->height &&
        h.width == m->width)
        return DT_OK;
    return dt_err_set(DT_ERR_ARG,
                      "%s=%s holds clips of %d frames x %d channels x %dx%d, but "
                      "the model takes model.frames=%d, channels=%d, height=%d, width=%d%s",
                      spec->what, spec->path, h.frames, h.channels, h.height, h.width, m->frames,
                      m->channels, m->height, m->width,
                      spec->kind == DT_CLIPS_PIXELS ? " (pixel clips are RGB: channels 3; "
                                                      "prepare them again at the model's size)"
                                                    : "");
}

dt_status dt_source_open_clips(const dt_clip_source_spec *spec, dt_source **out) {
    *out = NULL;
    if (spec->batch_size < 1)
        return dt_err_set(DT_ERR_ARG, "clip source: batch_size %d < 1", spec->batch_size);
    if (spec->model->n_classes != 0)
        return dt_err_set(DT_ERR_ARG,
                          "model.n_classes=%d: clips read from %s carry no class "
                          "label; train an unconditional model (n_classes = 0)",
                          spec->model->n_classes, spec->what);
    dt_clips *c = NULL;
    dt_status st = dt_clips_open(spec->path, (dt_clips_kind)spec->kind, &c);
    if (st != DT_OK)
        return dt_err_wrap(st, "%s: ", spec->what);
    if ((st = check_shape(spec, c)) != DT_OK) {
        dt_clips_close(c);
        return st;
    }
    clip_src proto = {.shuffle = spec->shuffle, .what = "clips"};
    return open_source(spec->model, spec->batch_size, spec->seed, c, &proto, out);
}
