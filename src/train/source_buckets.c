/* A source over buckets of clip shape (source.h): each step one bucket's source, chosen by
 * (seed, step), hands out that step's rows. Every sub-source is kept at the run's step, so
 * its rows are the ones it would make at that step alone: any rank, layout or resumed run
 * reads the same batch. */
#include <stdlib.h>

#include "train/source.h"

typedef struct bucket_src {
    dt_buckets bk;
    dt_source *sub[DT_MAX_BUCKETS];
    uint64_t seed;
    int64_t step;
    int cur; /* the step's bucket */
} bucket_src;

static void close_all(void *self) {
    bucket_src *s = self;
    for (int k = 0; k < s->bk.n; k++)
        dt_source_close(s->sub[k]);
    free(s);
}

static const dt_source *current(const void *self) {
    const bucket_src *s = self;
    return s->sub[s->cur];
}
static size_t input_bytes(const void *self) { return dt_source_input_row_bytes(current(self)); }
static size_t target_bytes(const void *self) { return dt_source_target_row_bytes(current(self)); }
static dt_status rows(const void *self, int row0, int n, void *input, void *target) {
    return dt_source_rows(current(self), row0, n, input, target);
}

/* every bucket's source at the run's step, and the step's bucket */
static dt_status go_to(bucket_src *s, int64_t step) {
    for (int k = 0; k < s->bk.n; k++)
        DT_TRY(dt_source_seek(s->sub[k], step * s->bk.b[k].batch, step));
    s->step = step;
    s->cur = dt_bucket_of_step(&s->bk, s->seed, step);
    return DT_OK;
}

/* a step past a valid one always seeks (step x batch never overflows for steps a run makes) */
static void advance(void *self) {
    bucket_src *s = self;
    dt_status st = go_to(s, s->step + 1);
    DT_ASSERT(st == DT_OK);
}
static void rewind_all(void *self) {
    dt_status st = go_to(self, 0);
    DT_ASSERT(st == DT_OK);
}
static void position(const void *self, int64_t *pos, int64_t *step) {
    const bucket_src *s = self;
    *pos = *step = s->step;
}
static dt_status seek(void *self, int64_t pos, int64_t step) {
    if (step < 0 || pos != step)
        return dt_err_set(DT_ERR_FORMAT,
                          "data position %lld at step %lld: a run over buckets of clip shape "
                          "saves its step as its position; the checkpoint was saved by a run "
                          "without data.buckets or is damaged",
                          (long long)pos, (long long)step);
    return go_to(self, step);
}
static int bucket(const void *self) { return ((const bucket_src *)self)->cur; }

static const dt_source_ops bucket_ops = {
    .close = close_all,
    .input_row_bytes = input_bytes,
    .target_row_bytes = target_bytes,
    .rows = rows,
    .advance = advance,
    .rewind = rewind_all,
    .position = position,
    .seek = seek,
    .bucket = bucket,
};

dt_status dt_source_open_buckets(const dt_buckets *bk, uint64_t seed, dt_source *const *subs,
                                 dt_source **out) {
    *out = NULL;
    bucket_src *b = calloc(1, sizeof *b);
    dt_source *s = calloc(1, sizeof *s);
    if (!b || !s || bk->n < 1) {
        for (int k = 0; k < bk->n; k++)
            dt_source_close(subs[k]);
        free(b);
        free(s);
        return bk->n < 1 ? dt_err_set(DT_ERR_ARG, "bucket source: no buckets")
                         : dt_err_set(DT_ERR_OOM, "bucket source: out of memory");
    }
    b->bk = *bk;
    b->seed = seed;
    for (int k = 0; k < bk->n; k++)
        b->sub[k] = subs[k];
    *s = (dt_source){.ops = &bucket_ops, .self = b};
    dt_status st = go_to(b, 0);
    if (st != DT_OK) {
        dt_source_close(s);
        return st;
    }
    *out = s;
    return DT_OK;
}
