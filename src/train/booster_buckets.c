/* A DiT's buckets of clip shape in the booster (data.buckets): a layout per bucket (its batch
 * over dp and into micro-batches, its tokens over the splits), a source per bucket behind one
 * that draws the step's bucket, the model's room for the largest, and the switch to a step's
 * bucket. Without buckets every function here leaves the one-shape run alone.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "train/booster_impl.h"

dt_status dt_booster__bucket_layouts(dt_booster *b, const dt_boost_spec *s) {
    DT_TRY(dt_buckets_parse(s->buckets ? s->buckets : "", &b->bk));
    if (b->bk.n == 0)
        return DT_OK;
    if (s->model->arch != DT_ARCH_DIT)
        return dt_err_set(DT_ERR_ARG, "data.buckets: buckets of clip shape are a DiT's");
    if (s->rebalance_every > 0)
        return dt_err_set(DT_ERR_ARG,
                          "train.rebalance_every=%d with data.buckets: a pipeline's chunk "
                          "times differ from bucket to bucket, so no one cut is measured; "
                          "set train.rebalance_every=0 (plugin.pp_layers cuts by hand)",
                          s->rebalance_every);
    b->bucket_lay = calloc(DT_MAX_BUCKETS, sizeof *b->bucket_lay);
    if (!b->bucket_lay)
        return dt_err_set(DT_ERR_OOM, "booster: out of memory");
    dt_config c = b->lay_cfg;
    snprintf(c.data.buckets, sizeof c.data.buckets, "%s", s->buckets);
    int n;
    DT_TRY(dt_layout_make_buckets(&c, b->world->size, b->world->rank, b->bucket_lay, &n));
    DT_TRY(dt_model_check_buckets(&c)); /* the model's own split rules, per clip */
    b->lay = b->bucket_lay[0];
    b->bucket = 0;
    return DT_OK;
}

dt_status dt_booster__bucket_schedules(dt_booster *b, const char *what) {
    for (int k = 0; k < b->bk.n; k++)
        DT_TRY(
            dt_bucket_wrap(dt_layout_set_schedule(&b->bucket_lay[k], b->schedule, what), &b->bk, k));
    return DT_OK;
}

/* data.train's folder of bucket k's clips: DIR/FxHxW */
static void bucket_path(const char *dir, const dt_bucket *bk, char *out, size_t n) {
    snprintf(out, n, "%s/%dx%dx%d", dir, bk->frames, bk->height, bk->width);
}

dt_status dt_booster__bucket_sources(dt_booster *b, const dt_boost_spec *s,
                                     dt_booster_source_fn open_one) {
    dt_source *train[DT_MAX_BUCKETS] = {0}, *val[DT_MAX_BUCKETS] = {0};
    int n = b->bk.n, opened = 0;
    dt_status st = DT_OK;
    for (int k = 0; k < n && st == DT_OK; k++, opened++) {
        dt_model_config m = *s->model;
        m.frames = b->bk.b[k].frames, m.height = b->bk.b[k].height, m.width = b->bk.b[k].width;
        char tpath[DT_PATH_MAX + 32] = "", vpath[DT_PATH_MAX + 32] = "";
        if (s->train_data && s->train_data[0])
            bucket_path(s->train_data, &b->bk.b[k], tpath, sizeof tpath);
        if (s->val_data && s->val_data[0])
            bucket_path(s->val_data, &b->bk.b[k], vpath, sizeof vpath);
        dt_boost_spec sk = *s;
        sk.model = &m;
        sk.batch_size = b->bk.b[k].batch;
        sk.seed = dt_rng_u64(s->seed, "data.bucket.seed", (uint64_t)k);
        sk.train_data = tpath;
        sk.val_data = vpath;
        st = open_one(b, &sk, &train[k], &val[k]);
        if (st == DT_OK) {
            b->bucket_in[k] = dt_source_input_row_bytes(train[k]);
            b->bucket_tg[k] = dt_source_target_row_bytes(train[k]);
        } else {
            st = dt_bucket_wrap(st, &b->bk, k);
        }
    }
    if (st == DT_OK && val[0] == NULL)
        for (int k = 1; k < n; k++) /* a validation set for some buckets only */
            if (val[k]) {
                st = dt_err_set(DT_ERR_ARG,
                                "data.val: bucket 0 has no validation clips, "
                                "bucket %d has",
                                k);
                break;
            }
    for (int k = 1; st == DT_OK && val[0] && k < n; k++)
        if (!val[k])
            st = dt_bucket_wrap(dt_err_set(DT_ERR_ARG, "data.val has no validation clips of it"),
                             &b->bk, k);
    if (st != DT_OK) {
        for (int k = 0; k < opened; k++) {
            dt_source_close(train[k]);
            dt_source_close(val[k]);
        }
        return st;
    }
    DT_TRY(dt_source_open_buckets(&b->bk, s->seed, train, &b->train));
    if (val[0])
        DT_TRY(dt_source_open_buckets(&b->bk, dt_rng_u64(s->seed, "data.val", 0), val, &b->val));
    b->in_row = b->bucket_in[0];
    b->tg_row = b->bucket_tg[0];
    return DT_OK;
}

int dt_booster__model_shapes(const dt_booster *b, dt_model_shape *out) {
    for (int k = 0; k < b->bk.n; k++)
        out[k] = (dt_model_shape){b->bk.b[k].frames, b->bk.b[k].height, b->bk.b[k].width,
                                  b->bucket_lay[k].mb};
    return b->bk.n;
}

dt_status dt_booster__largest_boundary(dt_booster *b, int64_t *floats) {
    *floats = dt_model_boundary_count(b->model, b->lay.mb, b->lay.T_local);
    for (int k = 0; k < b->bk.n; k++) {
        DT_TRY(dt_model_use_shape(b->model, k));
        int64_t n =
            dt_model_boundary_count(b->model, b->bucket_lay[k].mb, b->bucket_lay[k].T_local);
        *floats = n > *floats ? n : *floats;
    }
    return b->bk.n ? dt_model_use_shape(b->model, b->bucket) : DT_OK;
}

size_t dt_booster__batch_bytes(const dt_booster *b, bool inputs) {
    bool whole_step = dt_booster__pipelined(b); /* the schedule reads every micro-batch */
    if (b->bk.n == 0)
        return (size_t)(whole_step ? b->lay.rows : b->lay.mb) * (inputs ? b->in_row : b->tg_row);
    size_t most = 0;
    for (int k = 0; k < b->bk.n; k++) {
        const dt_layout *l = &b->bucket_lay[k];
        size_t n =
            (size_t)(whole_step ? l->rows : l->mb) * (inputs ? b->bucket_in[k] : b->bucket_tg[k]);
        most = n > most ? n : most;
    }
    return most;
}

dt_status dt_booster__enter_bucket(dt_booster *b, const dt_source *src) {
    int k = b->bk.n ? dt_source_bucket(src) : 0;
    if (k == b->bucket)
        return DT_OK;
    DT_TRY(dt_model_use_shape(b->model, k));
    b->lay = b->bucket_lay[k];
    b->in_row = b->bucket_in[k];
    b->tg_row = b->bucket_tg[k];
    b->bucket = k;
    return DT_OK;
}
