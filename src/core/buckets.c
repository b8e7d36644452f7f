/* Parsing data.buckets and choosing a step's bucket (buckets.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buckets.h"
#include "core/rng.h"

static bool is_sep(char ch) { return ch == ',' || ch == ' ' || ch == '\t'; }

/* A positive int at *s, then *s past it; false when there is none or it is out of range. */
static bool read_int(const char **s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (end == *s || errno || v < 1 || v > (1 << 24))
        return false;
    *out = (int)v;
    *s = end;
    return true;
}

static dt_status parse_one(const char **s, int k, dt_bucket *b) {
    const char *start = *s;
    int len = 0;
    while (start[len] && !is_sep(start[len]))
        len++;
    b->weight = 1;
    bool ok = read_int(s, &b->frames) && **s == 'x' && (++*s, read_int(s, &b->height)) &&
              **s == 'x' && (++*s, read_int(s, &b->width)) && **s == ':' &&
              (++*s, read_int(s, &b->batch));
    if (ok && **s == ':') {
        char *end;
        b->weight = strtod(++*s, &end);
        ok = end != *s && b->weight > 0 && b->weight < 1e9;
        *s = end;
    }
    if (!ok || (**s && !is_sep(**s)))
        return dt_err_set(DT_ERR_ARG,
                          "data.buckets: bucket %d \"%.*s\" is not FRAMESxHEIGHTxWIDTH:BATCH "
                          "or FRAMESxHEIGHTxWIDTH:BATCH:WEIGHT (positive integers, a weight "
                          "> 0), e.g. 8x24x24:16:2",
                          k, len, start);
    return DT_OK;
}

dt_status dt_buckets_parse(const char *spec, dt_buckets *out) {
    *out = (dt_buckets){0};
    const char *s = spec;
    for (;;) {
        while (is_sep(*s))
            s++;
        if (!*s)
            return DT_OK;
        if (out->n == DT_MAX_BUCKETS)
            return dt_err_set(DT_ERR_ARG, "data.buckets: more than %d buckets", DT_MAX_BUCKETS);
        DT_TRY(parse_one(&s, out->n, &out->b[out->n]));
        const dt_bucket *b = &out->b[out->n];
        for (int j = 0; j < out->n; j++)
            if (out->b[j].frames == b->frames && out->b[j].height == b->height &&
                out->b[j].width == b->width)
                return dt_err_set(DT_ERR_ARG, "data.buckets: buckets %d and %d are both %dx%dx%d",
                                  j, out->n, b->frames, b->height, b->width);
        out->n++;
    }
}

dt_status dt_config_buckets(const dt_config *c, dt_buckets *out) {
    return dt_buckets_parse(c->data.buckets, out);
}

dt_config dt_config_of_bucket(const dt_config *c, const dt_bucket *b) {
    dt_config r = *c;
    r.model.frames = b->frames;
    r.model.height = b->height;
    r.model.width = b->width;
    r.train.batch_size = b->batch;
    r.data.buckets[0] = '\0';
    dt_config_derive(&r);
    return r;
}

int dt_bucket_of_step(const dt_buckets *bk, uint64_t seed, int64_t step) {
    if (bk->n <= 1)
        return 0;
    double sum = 0;
    for (int k = 0; k < bk->n; k++)
        sum += bk->b[k].weight;
    /* 53 random bits: a uniform double in [0, 1) */
    double u = (double)(dt_rng_u64(seed, "data.bucket", (uint64_t)step) >> 11) * 0x1p-53;
    double x = u * sum;
    for (int k = 0; k < bk->n; k++) {
        if (x < bk->b[k].weight)
            return k;
        x -= bk->b[k].weight;
    }
    return bk->n - 1;
}

const char *dt_bucket_name(const dt_bucket *b, char *out, int n) {
    snprintf(out, (size_t)n, "%dx%dx%d (batch %d)", b->frames, b->height, b->width, b->batch);
    return out;
}

dt_status dt_bucket_wrap(dt_status st, const dt_buckets *bk, int k) {
    if (st == DT_OK)
        return DT_OK;
    char name[64];
    return dt_err_wrap(st, "data.buckets: bucket %d, %s: ", k,
                       dt_bucket_name(&bk->b[k], name, sizeof name));
}

void dt_bucket_errors_add(dt_bucket_errors *e, dt_status st, const dt_buckets *bk, int k) {
    if (st == DT_OK)
        return;
    char name[64];
    size_t used = strlen(e->text);
    snprintf(e->text + used, sizeof e->text - used, "%sbucket %d, %s: %s", e->n ? "; " : "", k,
             dt_bucket_name(&bk->b[k], name, sizeof name), dt_err_msg());
    e->n++;
}

dt_status dt_bucket_errors_status(const dt_bucket_errors *e) {
    return e->n ? dt_err_set(DT_ERR_ARG, "data.buckets: %s", e->text) : DT_OK;
}
