/* Buckets of clip shape (data.buckets): a video DiT trains on several (frames, height, width)
 * shapes in one run, as Open-Sora's bucket_config does. Each bucket has its own global batch
 * and a sampling weight; each step every rank takes the same bucket, a pure function of (seed,
 * step), so every layout and a resumed run see the same sequence of buckets.
 *
 * Written "FxHxW:BATCH[:WEIGHT]" and separated by commas or spaces, e.g.
 * "8x24x24:16:2, 4x32x32:8" (weight 1 when left out). No buckets: the run's one shape is
 * model.frames x height x width with train.batch_size. Pure; thread-safe.
 */
#ifndef DT_CORE_BUCKETS_H
#define DT_CORE_BUCKETS_H

#include <stdint.h>

#include "core/status.h"
#include "dtrain/config.h"

enum { DT_MAX_BUCKETS = 16 };

typedef struct dt_bucket {
    int frames, height, width;
    int batch;     /* global batch, in clips */
    double weight; /* > 0; its share of the steps is weight / the sum of weights */
} dt_bucket;

typedef struct dt_buckets {
    int n; /* 0: none (one shape) */
    dt_bucket b[DT_MAX_BUCKETS];
} dt_buckets;

/* DT_ERR_ARG naming the bucket and what is wrong with it ("" gives n = 0). */
dt_status dt_buckets_parse(const char *spec, dt_buckets *out);
/* The buckets of c (data.buckets), or none when it is empty; DT_ERR_ARG as dt_buckets_parse. */
dt_status dt_config_buckets(const dt_config *c, dt_buckets *out);
/* c as a run of bucket b alone: its clip shape, its batch, the sequence derived. */
dt_config dt_config_of_bucket(const dt_config *c, const dt_bucket *b);
/* The bucket of step `step` (0 when there are none). */
int dt_bucket_of_step(const dt_buckets *bk, uint64_t seed, int64_t step);
/* "8x24x24 (batch 16)" into out, for messages. */
const char *dt_bucket_name(const dt_bucket *b, char *out, int n);

/* st, its message prefixed "data.buckets: bucket k, 8x24x24 (batch 16): " (DT_OK as is). */
dt_status dt_bucket_wrap(dt_status st, const dt_buckets *bk, int k);

/* The problems of several buckets as one error: each bad bucket named with its reason. */
typedef struct dt_bucket_errors {
    char text[768];
    int n;
} dt_bucket_errors;
/* st != DT_OK: bucket k of bk and dt_err_msg() join the list (as many as fit). */
void dt_bucket_errors_add(dt_bucket_errors *e, dt_status st, const dt_buckets *bk, int k);
/* DT_OK, or DT_ERR_ARG "data.buckets: bucket 1, 2x12x16 (batch 4): ...; bucket 2, ...". */
dt_status dt_bucket_errors_status(const dt_bucket_errors *e);

#endif
