/* Buckets of clip shape (core/buckets.h): the list parses, bad entries are named, a step's
 * bucket is a pure function of (seed, step) whose shares follow the weights, and a bucket's
 * config has its clip, batch and derived tokens. */
#include <math.h>
#include <string.h>

#include "core/buckets.h"
#include "harness.h"

static void parses(void) {
    dt_buckets bk;
    DT_CHECK_OK(dt_buckets_parse(" 8x24x24:16:2, 4x32x32:8,16x16x16:4:0.5 ", &bk));
    DT_CHECK(bk.n == 3, "%d buckets", bk.n);
    DT_CHECK(bk.b[0].frames == 8 && bk.b[0].height == 24 && bk.b[0].width == 24 &&
                 bk.b[0].batch == 16 && bk.b[0].weight == 2,
             "bucket 0");
    DT_CHECK(bk.b[1].weight == 1 && bk.b[1].batch == 8 && bk.b[2].weight == 0.5, "weights");
    DT_CHECK_OK(dt_buckets_parse("", &bk));
    DT_CHECK(bk.n == 0, "empty list: %d", bk.n);
    const struct {
        const char *spec, *says;
    } bad[] = {{"8x24:16", "bucket 0 \"8x24:16\""},
               {"8x24x24:16, 4x32x32", "bucket 1 \"4x32x32\""},
               {"8x24x24:0", "bucket 0"},
               {"8x24x24:4:-1", "a weight > 0"},
               {"8x24x24:4:2x", "bucket 0"},
               {"8x24x24:4, 8x24x24:2", "buckets 0 and 1 are both 8x24x24"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_status st = dt_buckets_parse(bad[i].spec, &bk);
        DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), bad[i].says), "\"%s\": %s (wanted '%s')",
                 bad[i].spec, dt_err_msg(), bad[i].says);
    }
}

static void draws(void) {
    dt_buckets bk;
    DT_CHECK_OK(dt_buckets_parse("8x8x8:4:2, 4x8x8:4:1, 2x8x8:4:1", &bk));
    enum { STEPS = 40000 };
    int count[3] = {0};
    for (int s = 0; s < STEPS; s++) {
        int k = dt_bucket_of_step(&bk, 7, s);
        DT_CHECK(k >= 0 && k < 3 && k == dt_bucket_of_step(&bk, 7, s), "step %d: %d", s, k);
        count[k]++;
    }
    const double want[3] = {0.5, 0.25, 0.25};
    for (int k = 0; k < 3; k++) /* 5 standard deviations of a binomial share */
        DT_CHECK(fabs((double)count[k] / STEPS - want[k]) < 5 * sqrt(0.25 / STEPS),
                 "bucket %d: share %.4f, weight's %.2f", k, (double)count[k] / STEPS, want[k]);
    int differ = 0;
    for (int s = 0; s < 1000; s++)
        differ += dt_bucket_of_step(&bk, 7, s) != dt_bucket_of_step(&bk, 8, s);
    DT_CHECK(differ > 400, "another seed draws the same buckets (%d of 1000 differ)", differ);
    DT_CHECK_OK(dt_buckets_parse("8x8x8:4", &bk));
    DT_CHECK(dt_bucket_of_step(&bk, 7, 3) == 0, "one bucket");
}

static void configs(void) {
    dt_config c;
    dt_config_defaults(&c);
    c.model.arch = DT_ARCH_DIT;
    c.model.frames = 8, c.model.height = 16, c.model.width = 16;
    c.model.patch_t = 1, c.model.patch_h = 4, c.model.patch_w = 4;
    snprintf(c.data.buckets, sizeof c.data.buckets, "%s", "4x32x16:6");
    dt_buckets bk;
    DT_CHECK_OK(dt_config_buckets(&c, &bk));
    dt_config k = dt_config_of_bucket(&c, &bk.b[0]);
    DT_CHECK(k.model.frames == 4 && k.model.height == 32 && k.model.width == 16 &&
                 k.train.batch_size == 6 && k.train.seq_len == 4 * 8 * 4 && !k.data.buckets[0],
             "bucket config: %dx%dx%d, batch %d, seq_len %d", k.model.frames, k.model.height,
             k.model.width, k.train.batch_size, k.train.seq_len);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    parses();
    draws();
    configs();
    return DT_TEST_END();
}
