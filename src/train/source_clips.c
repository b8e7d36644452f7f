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
    float dropout; /* chance a clip's label and text become the null condition */
    int64_t numel; /* floats per clip */
    int text_len, text_dim; /* the model's (0: no text) */
    float shift;            /* the model's timestep shift */
    int64_t text_floats;    /* of an input row */
    int64_t row_floats;     /* an input row: clip, t, label, text */
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
    const clip_src *s = self;
    return (size_t)s->row_floats * sizeof(float);
}

static size_t target_bytes(const void *self) {
    return (size_t)((const clip_src *)self)->numel * sizeof(float);
}

/* The folder clip run clip `index` reads. */
static int64_t folder_clip(const clip_src *s, int64_t index) {
    int64_t n = dt_clips_count(s->clips);
    return s->shuffle
               ? (int64_t)(dt_rng_u64(s->seed, "data.shuffle", (uint64_t)index) % (uint64_t)n)
               : index % n;
}

/* x_0 of run clip `index` into x0 and its label (0: none, n_classes: dropped for guidance) */
static dt_status clip_of(const clip_src *s, int64_t index, float *x0, int32_t *label) {
    *label = 0;
    if (s->clips)
        return dt_clips_read(s->clips, folder_clip(s, index), x0);
    dt_bounce_batch(&s->bounce, s->seed, index, 1, x0, label);
    if (s->n_classes == 0)
        *label = 0;
    else if (dt_flow_drop_label(s->seed, index, s->dropout))
        *label = s->n_classes;
    return DT_OK;
}

/* Run clip `index`'s text row (models/dit.h): its caption's bytes (bouncing shapes, pixel
 * clips), or its text embeddings (latents); n = -1 when dropped for guidance, 0 without a
 * caption. */
static dt_status text_of(const clip_src *s, int64_t index, float *row) {
    memset(row, 0, (size_t)s->text_floats * sizeof *row);
    if (dt_flow_drop_label(s->seed, index, s->dropout)) {
        row[0] = -1;
        return DT_OK;
    }
    if (s->text_dim > 0) { /* latents: [tokens, dim] rows, the model's text_len at most */
        int n;
        DT_TRY(dt_clips_text(s->clips, folder_clip(s, index), row + 1, &n));
        row[0] = (float)n;
        return DT_OK;
    }
    char cap[DT_DIT_MAX_TEXT + 1];
    int n = s->clips ? 0 : dt_bounce_caption(&s->bounce, s->seed, index, cap, sizeof cap);
    if (s->clips) {
        DT_TRY(dt_clips_caption(s->clips, folder_clip(s, index), cap, sizeof cap));
        n = (int)strlen(cap);
    }
    n = n < s->text_len ? n : s->text_len; /* the caption's first text_len bytes */
    row[0] = (float)n;
    for (int i = 0; i < n; i++)
        row[1 + i] = (float)(uint8_t)cap[i];
    return DT_OK;
}

/* x_0 lands in the target row, then x_t goes to the input row and v over x_0, as
 * dt_flow_train computes them; t, the label and the text follow x_t */
static dt_status src_rows(const void *self, int row0, int n, void *input, void *target) {
    const clip_src *s = self;
    for (int r = 0; r < n; r++) {
        int64_t index = s->step * s->B + row0 + r;
        float *in = (float *)input + (int64_t)r * s->row_floats,
              *tg = (float *)target + (int64_t)r * s->numel;
        int32_t label;
        DT_TRY(clip_of(s, index, tg, &label));
        in[s->numel] = dt_flow_make_row(s->seed, index, s->shift, s->numel, in, tg);
        in[s->numel + 1] = (float)label;
        if (s->text_floats)
            DT_TRY(text_of(s, index, in + s->numel + 2));
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
    dt_dit_config dc = dt_dit_config_from_model(m); /* the row layout is the model's */
    c->numel = dt_dit_clip_numel(&dc);
    c->text_len = m->text_len;
    c->text_dim = m->text_dim;
    c->shift = m->timestep_shift;
    c->text_floats = dt_dit_text_floats(&dc);
    c->row_floats = dt_dit_input_floats(&dc);
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
    if (m->text_len > 0 && m->text_dim != 0)
        return dt_err_set(DT_ERR_ARG,
                          "model.text_dim=%d: data.source=bounce captions its "
                          "clips in words, which the model's byte encoder reads; set "
                          "model.text_dim=0",
                          m->text_dim);
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

/* The text a model with text reads: captions of pixel clips (bytes), or latents' text
 * embeddings as wide as model.text_dim and at most model.text_len tokens. */
static dt_status check_text(const dt_clip_source_spec *spec, const dt_clips *c) {
    const dt_model_config *m = spec->model;
    if (m->text_len == 0)
        return DT_OK;
    bool pixels = spec->kind == DT_CLIPS_PIXELS;
    dt_clip_text t = dt_clips_text_shape(c);
    if (pixels && m->text_dim != 0)
        return dt_err_set(DT_ERR_ARG,
                          "model.text_dim=%d: %s=%s holds pixel clips whose "
                          "captions the model's byte encoder reads; set model.text_dim=0",
                          m->text_dim, spec->what, spec->path);
    if (pixels)
        return DT_OK;
    if (m->text_dim == 0 || t.tokens == 0)
        return dt_err_set(DT_ERR_ARG, "model.text_len=%d, text_dim=%d: %s=%s %s", m->text_len,
                          m->text_dim, spec->what, spec->path,
                          t.tokens == 0 ? "holds latents without text embeddings (\"text\", "
                                          "\"text_len\"); train without text (text_len=0)"
                                        : "holds text embeddings; set model.text_dim to their "
                                          "width");
    if (t.dim != m->text_dim || t.tokens > m->text_len)
        return dt_err_set(DT_ERR_ARG,
                          "%s=%s holds text embeddings of %d tokens x %d, but the "
                          "model reads at most model.text_len=%d tokens of model.text_dim=%d",
                          spec->what, spec->path, t.tokens, t.dim, m->text_len, m->text_dim);
    return DT_OK;
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
    if ((st = check_text(spec, c)) != DT_OK) {
        dt_clips_close(c);
        return st;
    }
    clip_src proto = {.shuffle = spec->shuffle, .dropout = spec->label_dropout, .what = "clips"};
    return open_source(spec->model, spec->batch_size, spec->seed, c, &proto, out);
}
