/* Clips from disk as a batch source: pixel clips or latents (io/clips.h) noised for the
 * rectified-flow objective (models/flow.h), packed as source.h says. A row is a pure function
 * of (seed, the clip's run index) and the folder, so any rank reads any row and a resumed run
 * or another layout sees the same batch. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/clips.h"
#include "models/flow.h"
#include "train/source.h"

typedef struct clips_src {
    dt_clips *clips;
    int64_t numel; /* floats per clip */
    int B;
    bool shuffle;
    uint64_t seed;
    int64_t step;
} clips_src;

static void src_close(void *self) {
    clips_src *s = self;
    dt_clips_close(s->clips);
    free(s);
}

static size_t input_bytes(const void *self) {
    return (size_t)(((const clips_src *)self)->numel + 2) * sizeof(float);
}

static size_t target_bytes(const void *self) {
    return (size_t)((const clips_src *)self)->numel * sizeof(float);
}

/* the folder's clip that run clip `index` reads */
static int64_t clip_of(const clips_src *s, int64_t index) {
    int64_t n = dt_clips_count(s->clips);
    return s->shuffle ? (int64_t)(dt_rng_u64(s->seed, "data.shuffle", (uint64_t)index) %
                                  (uint64_t)n)
                      : index % n;
}

static dt_status src_rows(const void *self, int row0, int n, void *input, void *target) {
    const clips_src *s = self;
    for (int r = 0; r < n; r++) {
        int64_t index = s->step * s->B + row0 + r;
        float *in = (float *)input + (int64_t)r * (s->numel + 2),
              *tg = (float *)target + (int64_t)r * s->numel;
        DT_TRY(dt_clips_read(s->clips, clip_of(s, index), tg));
        in[s->numel] = dt_flow_make_row(s->seed, index, s->numel, in, tg);
        in[s->numel + 1] = 0; /* unconditional */
    }
    return DT_OK;
}

static void src_advance(void *self) { ((clips_src *)self)->step++; }
static void src_rewind(void *self) { ((clips_src *)self)->step = 0; }

static void src_position(const void *self, int64_t *pos, int64_t *step) {
    const clips_src *s = self;
    *pos = s->step * s->B;
    *step = s->step;
}

static dt_status src_seek(void *self, int64_t pos, int64_t step) {
    clips_src *s = self;
    if (step < 0 || step > INT64_MAX / s->B || pos != step * s->B)
        return dt_err_set(DT_ERR_FORMAT, "data position %lld at step %lld is not where a batch "
                          "of %d clips starts (step x batch_size): the checkpoint was saved "
                          "with another batch size or is damaged", (long long)pos,
                          (long long)step, s->B);
    s->step = step;
    return DT_OK;
}

static const dt_source_ops clips_ops = {
    .close = src_close, .input_row_bytes = input_bytes, .target_row_bytes = target_bytes,
    .rows = src_rows, .advance = src_advance, .rewind = src_rewind, .position = src_position,
    .seek = src_seek,
};

static dt_status check_shape(const dt_clip_source_spec *spec, const dt_clips *c) {
    const dt_model_config *m = spec->model;
    dt_clip_shape h = dt_clips_shape(c);
    if (h.frames == m->frames && h.channels == m->channels && h.height == m->height &&
        h.width == m->width)
        return DT_OK;
    return dt_err_set(DT_ERR_ARG, "%s=%s holds clips of %d frames x %d channels x %dx%d, but "
                      "the model takes model.frames=%d, channels=%d, height=%d, width=%d%s",
                      spec->what, spec->path, h.frames, h.channels, h.height, h.width,
                      m->frames, m->channels, m->height, m->width,
                      spec->kind == DT_CLIPS_PIXELS ? " (pixel clips are RGB: channels 3; "
                                                      "prepare them again at the model's size)"
                                                    : "");
}

dt_status dt_source_open_clips(const dt_clip_source_spec *spec, dt_source **out) {
    *out = NULL;
    if (spec->batch_size < 1)
        return dt_err_set(DT_ERR_ARG, "clip source: batch_size %d < 1", spec->batch_size);
    if (spec->model->n_classes != 0)
        return dt_err_set(DT_ERR_ARG, "model.n_classes=%d: clips read from %s carry no class "
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
    clips_src *b = calloc(1, sizeof *b);
    dt_source *s = calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        dt_clips_close(c);
        return dt_err_set(DT_ERR_OOM, "clip source: out of memory");
    }
    const dt_model_config *m = spec->model;
    *b = (clips_src){.clips = c, .B = spec->batch_size, .shuffle = spec->shuffle,
                     .seed = spec->seed,
                     .numel = (int64_t)m->frames * m->channels * m->height * m->width};
    *s = (dt_source){.ops = &clips_ops, .self = b};
    *out = s;
    return DT_OK;
}
