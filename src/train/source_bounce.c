/* The bouncing-shapes batch source of a video DiT: clips from io/bounce, noised for the
 * rectified-flow objective of models/flow.h, packed as source.h says. Each row is a pure
 * function of (seed, the clip's global index), so any rank makes any row, and a resumed run
 * or another layout sees the same batch. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "io/bounce.h"
#include "models/flow.h"
#include "train/source.h"

typedef struct bounce_src {
    dt_bounce_config clip;
    int64_t numel;  /* floats per clip */
    int n_classes;  /* the model's; 0 = unconditional */
    float dropout;  /* chance a clip's label becomes the null class */
    int B;          /* global batch */
    uint64_t seed;
    int64_t step;   /* batches handed out so far */
} bounce_src;

static void src_close(void *self) { free(self); }

static size_t input_bytes(const void *self) {
    return (size_t)(((const bounce_src *)self)->numel + 2) * sizeof(float);
}

static size_t target_bytes(const void *self) {
    return (size_t)((const bounce_src *)self)->numel * sizeof(float);
}

/* One clip: x_0 lands in the target row, then x_t goes to the input row and v over x_0, as
 * dt_flow_train computes them. */
static void make_row(const bounce_src *s, int64_t index, float *in, float *tg) {
    int32_t label;
    dt_bounce_batch(&s->clip, s->seed, index, 1, tg, &label);
    float t = dt_flow_make_row(s->seed, index, s->numel, in, tg);
    if (s->n_classes == 0)
        label = 0;
    else if (dt_flow_drop_label(s->seed, index, s->dropout))
        label = s->n_classes;
    in[s->numel] = t;
    in[s->numel + 1] = (float)label;
}

static dt_status src_rows(const void *self, int row0, int n, void *input, void *target) {
    const bounce_src *s = self;
    float *in = input, *tg = target;
    for (int r = 0; r < n; r++)
        make_row(s, s->step * s->B + row0 + r, in + (int64_t)r * (s->numel + 2),
                 tg + (int64_t)r * s->numel);
    return DT_OK;
}

static void src_advance(void *self) { ((bounce_src *)self)->step++; }
static void src_rewind(void *self) { ((bounce_src *)self)->step = 0; }

/* the position is the global index of the next batch's first clip */
static void src_position(const void *self, int64_t *pos, int64_t *step) {
    const bounce_src *s = self;
    *pos = s->step * s->B;
    *step = s->step;
}

static dt_status src_seek(void *self, int64_t pos, int64_t step) {
    bounce_src *s = self;
    if (step < 0 || step > INT64_MAX / s->B || pos != step * s->B)
        return dt_err_set(DT_ERR_FORMAT, "data position %lld at step %lld is not where a batch "
                          "of %d bouncing-shapes clips starts (step x batch_size): the checkpoint "
                          "was saved with another batch size or is damaged", (long long)pos,
                          (long long)step, s->B);
    s->step = step;
    return DT_OK;
}

static const dt_source_ops bounce_ops = {
    .close = src_close, .input_row_bytes = input_bytes, .target_row_bytes = target_bytes,
    .rows = src_rows, .advance = src_advance, .rewind = src_rewind, .position = src_position,
    .seek = src_seek,
};

dt_status dt_source_open_bounce(const dt_bounce_source_spec *spec, dt_source **out) {
    *out = NULL;
    const dt_model_config *m = spec->model;
    dt_bounce_config clip = dt_bounce_defaults(m->frames, m->channels, m->height, m->width);
    clip.n_shapes = spec->shapes;
    if (dt_bounce_check(&clip) != DT_OK)
        return dt_err_wrap(DT_ERR_ARG, "data.source=bounce with data.shapes=%d on clips of "
                           "model.frames=%d, channels=%d, height=%d, width=%d: ", spec->shapes,
                           m->frames, m->channels, m->height, m->width);
    if (m->n_classes != 0 && m->n_classes < DT_BOUNCE_KIND_COUNT)
        return dt_err_set(DT_ERR_ARG, "model.n_classes=%d: data.source=bounce labels each clip "
                          "with the kind of its shapes, 0..%d; use n_classes=0 (unconditional) "
                          "or at least %d", m->n_classes, DT_BOUNCE_KIND_COUNT - 1,
                          DT_BOUNCE_KIND_COUNT);
    if (!(spec->label_dropout >= 0 && spec->label_dropout <= 1))
        return dt_err_set(DT_ERR_ARG, "data.label_dropout=%g is not in [0, 1]",
                          (double)spec->label_dropout);
    if (spec->batch_size < 1)
        return dt_err_set(DT_ERR_ARG, "bounce source: batch_size %d < 1", spec->batch_size);
    bounce_src *b = calloc(1, sizeof *b);
    dt_source *s = calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        return dt_err_set(DT_ERR_OOM, "bounce source: out of memory");
    }
    *b = (bounce_src){.clip = clip, .n_classes = m->n_classes, .dropout = spec->label_dropout,
                      .B = spec->batch_size, .seed = spec->seed,
                      .numel = (int64_t)m->frames * m->channels * m->height * m->width};
    *s = (dt_source){.ops = &bounce_ops, .self = b};
    *out = s;
    return DT_OK;
}
