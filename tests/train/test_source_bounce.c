/* The bouncing-shapes source packs what models/flow.h defines, recomputed here from the pure
 * functions in double precision: x_t = (1 - t) x_0 + t eps, then t and the label (dropped to
 * the null class at the chosen rate), target eps - x_0, for clip step * B + row. Rows are the
 * same whichever slice asks for them; the position seeks and rejects what no batch starts at;
 * bad shapes and class counts are errors naming the key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/bounce.h"
#include "models/flow.h"
#include "train/source.h"

enum { F = 4, CH = 3, H = 12, W = 12, B = 4 };

static dt_model_config clip_model(int n_classes) {
    return (dt_model_config){.arch = DT_ARCH_DIT, .frames = F, .channels = CH, .height = H,
                             .width = W, .patch_t = 1, .patch_h = 2, .patch_w = 2,
                             .n_classes = n_classes};
}

/* every element of rows [0, n) of step `step` against the definition */
static void check_rows(const float *in, const float *tg, int n, int64_t step, uint64_t seed,
                       int n_classes, float dropout, int shapes) {
    const int64_t N = (int64_t)F * CH * H * W;
    dt_bounce_config bc = dt_bounce_defaults(F, CH, H, W);
    bc.n_shapes = shapes;
    float *x0 = malloc(sizeof(float) * N), *eps = malloc(sizeof(float) * N);
    double worst_x = 0, worst_v = 0;
    int bad_t = 0, bad_label = 0;
    for (int r = 0; r < n; r++) {
        int64_t idx = step * B + r;
        int32_t label;
        dt_bounce_batch(&bc, seed, idx, 1, x0, &label);
        dt_flow_noise(seed, idx, N, eps);
        double t = dt_flow_timestep(seed, idx, 1);
        const float *xi = in + r * (N + 2), *vi = tg + r * N;
        for (int64_t i = 0; i < N; i++) {
            double want_x = (1 - t) * x0[i] + t * eps[i], want_v = (double)eps[i] - x0[i];
            worst_x = fmax(worst_x, fabs(xi[i] - want_x));
            worst_v = fmax(worst_v, fabs(vi[i] - want_v));
        }
        bad_t += xi[N] != (float)t;
        int want_label = n_classes == 0 ? 0
                         : dt_flow_drop_label(seed, idx, dropout) ? n_classes
                                                                  : label;
        bad_label += xi[N + 1] != (float)want_label;
    }
    DT_CHECK(worst_x < 1e-6 && worst_v < 1e-6, "step %lld: x_t off by %g, target by %g",
             (long long)step, worst_x, worst_v);
    DT_CHECK(bad_t == 0 && bad_label == 0, "step %lld: %d wrong t, %d wrong labels",
             (long long)step, bad_t, bad_label);
    free(x0);
    free(eps);
}

static dt_source *open_src(int n_classes, float dropout, int shapes, uint64_t seed) {
    dt_model_config m = clip_model(n_classes);
    dt_bounce_source_spec s = {.model = &m, .shapes = shapes, .label_dropout = dropout,
                               .batch_size = B, .seed = seed};
    dt_source *src = NULL;
    DT_CHECK_OK(dt_source_open_bounce(&s, &src));
    return src;
}

static dt_status open_status(dt_model_config m, int shapes, float dropout) {
    dt_bounce_source_spec s = {.model = &m, .shapes = shapes, .label_dropout = dropout,
                               .batch_size = B, .seed = 1};
    dt_source *src = NULL;
    dt_status st = dt_source_open_bounce(&s, &src);
    dt_source_close(src);
    return st;
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    const int64_t N = (int64_t)F * CH * H * W;
    dt_source *s = open_src(3, 0.3f, 2, 7);
    DT_CHECK(dt_source_input_row_bytes(s) == (size_t)(N + 2) * 4 &&
                 dt_source_target_row_bytes(s) == (size_t)N * 4,
             "row bytes %zu / %zu", dt_source_input_row_bytes(s), dt_source_target_row_bytes(s));
    float *in = malloc(sizeof(float) * B * (N + 2)), *tg = malloc(sizeof(float) * B * N);
    float *in2 = malloc(sizeof(float) * 2 * (N + 2)), *tg2 = malloc(sizeof(float) * 2 * N);
    for (int step = 0; step < 3; step++) {
        DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
        check_rows(in, tg, B, step, 7, 3, 0.3f, 2);
        /* a data-parallel rank's slice is the same rows */
        DT_CHECK_OK(dt_source_rows(s, 1, 2, in2, tg2));
        DT_CHECK(memcmp(in2, in + (N + 2), sizeof(float) * 2 * (N + 2)) == 0 &&
                     memcmp(tg2, tg + N, sizeof(float) * 2 * N) == 0,
                 "step %d: rows 1..2 alone differ from the whole batch's", step);
        int64_t pos, at;
        dt_source_position(s, &pos, &at);
        DT_CHECK(pos == step * B && at == step, "position (%lld, %lld) at step %d",
                 (long long)pos, (long long)at, step);
        dt_source_advance(s);
    }
    /* seek: a saved (position, step) continues exactly; rewind starts over */
    DT_CHECK_OK(dt_source_seek(s, 5 * B, 5));
    DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
    check_rows(in, tg, B, 5, 7, 3, 0.3f, 2);
    DT_CHECK(dt_source_seek(s, 5 * B + 1, 5) == DT_ERR_FORMAT &&
                 strstr(dt_err_msg(), "batch size"),
             "a position between batches: %s", dt_err_msg());
    DT_CHECK(dt_source_seek(s, -B, -1) == DT_ERR_FORMAT, "a negative step was accepted");
    dt_source_rewind(s);
    DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
    check_rows(in, tg, B, 0, 7, 3, 0.3f, 2);
    dt_source_close(s);

    /* label dropout: over 400 clips about p of the labels are the null class; none without */
    s = open_src(3, 0.25f, 1, 3);
    int nulls = 0, total = 0;
    for (int step = 0; step < 100; step++, dt_source_advance(s)) {
        DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
        for (int r = 0; r < B; r++, total++)
            nulls += in[r * (N + 2) + N + 1] == 3.0f;
        if (step == 42)
            check_rows(in, tg, B, step, 3, 3, 0.25f, 1);
    }
    DT_CHECK(nulls > 0.15 * total && nulls < 0.35 * total, "%d null labels of %d at p = 0.25",
             nulls, total);
    dt_source_close(s);
    s = open_src(0, 0.5f, 2, 3); /* unconditional: label 0, dropout unused */
    DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
    check_rows(in, tg, B, 0, 3, 0, 0.5f, 2);
    dt_source_close(s);

    /* bad input names the key */
    DT_CHECK(open_status(clip_model(2), 2, 0.1f) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "model.n_classes=2"),
             "n_classes 2: %s", dt_err_msg());
    DT_CHECK(open_status(clip_model(3), 17, 0.1f) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "data.shapes=17"),
             "17 shapes: %s", dt_err_msg());
    DT_CHECK(open_status(clip_model(3), 2, 1.5f) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "data.label_dropout=1.5"),
             "dropout 1.5: %s", dt_err_msg());
    dt_model_config one = clip_model(3);
    one.channels = 2;
    DT_CHECK(open_status(one, 2, 0.1f) == DT_ERR_ARG && strstr(dt_err_msg(), "channels"),
             "2 channels: %s", dt_err_msg());
    free(in), free(tg), free(in2), free(tg2);
    return DT_TEST_END();
}
