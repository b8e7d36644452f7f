/* The loader reads batches in llm.c's order: step i starts at i*B*T, targets are the inputs
 * shifted by one, and it wraps to 0 when the next batch would run past the end. Shuffled
 * batches are a pure function of the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "io/tokens.h"
#include "train/loader.h"
#include "train/source.h"

/* A blend of two shards whose ids say where they come from: A holds 0..99 (row k of A starts
 * at k T), B holds 100 + 0..99. Checked against the greedy rule written out again here: row g
 * goes to the dataset furthest behind w (g + 1); per step, the rows match it, a dp rank's rows
 * are the same tokens, the counts stay within one row of the weights, and seeking to a step
 * gives the batch that advancing to it gives. */
static void test_blend(void) {
    enum { N = 100, B = 5, T = 4, STEPS = 40 };
    uint16_t a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = (uint16_t)i, b[i] = (uint16_t)(100 + i);
    char pa[64], pb[64], spec[200];
    snprintf(pa, sizeof pa, "blend_a_%d.bin", (int)getpid());
    snprintf(pb, sizeof pb, "blend_b_%d.bin", (int)getpid());
    DT_CHECK_OK(dt_tokens_write(pa, a, N));
    DT_CHECK_OK(dt_tokens_write(pb, b, N));
    snprintf(spec, sizeof spec, " 0.3 %s  0.7 %s", pa, pb);
    DT_CHECK(dt_blend_spec_is(spec) && !dt_blend_spec_is(pa), "blend spec detection");
    dt_source *s = NULL;
    DT_CHECK_OK(dt_source_open_tokens(spec, 256, B, T, false, 0, NULL, &s));
    if (!s)
        return;
    double w[2] = {0.3, 0.7};
    int64_t n[2] = {0, 0}, rows = 0;
    int32_t in[B * T], tg[B * T], first[B * T], one[T], tone[T];
    bool match = true, near = true, same_rank = true;
    for (int step = 0; step < STEPS; step++) {
        DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
        if (step == 0)
            memcpy(first, in, sizeof first);
        for (int r = 0; r < B; r++, rows++) {
            int d = w[1] * (rows + 1) - n[1] > w[0] * (rows + 1) - n[0] ? 1 : 0;
            int64_t k = n[d]++;
            int32_t start = (int32_t)(100 * d + k % ((N - 1) / T) * T);
            for (int t = 0; t < T; t++)
                match &= in[r * T + t] == start + t && tg[r * T + t] == start + t + 1;
            near &= n[0] - w[0] * (rows + 1) < 1.0 && w[0] * (rows + 1) - n[0] < 1.0;
        }
        DT_CHECK_OK(dt_source_rows(s, 3, 1, one, tone));
        same_rank &= memcmp(one, in + 3 * T, sizeof one) == 0;
        dt_source_advance(s);
    }
    DT_CHECK(match, "blend rows differ from the greedy rule");
    DT_CHECK(near, "a dataset's rows strayed a row or more from its weight");
    DT_CHECK(same_rank, "a dp rank's rows of the blend differ");
    int64_t pos, step;
    dt_source_position(s, &pos, &step);
    DT_CHECK(pos == (int64_t)STEPS * B && step == STEPS, "position %lld step %lld", (long long)pos,
             (long long)step);
    DT_CHECK_OK(dt_source_seek(s, 0, 0));
    DT_CHECK_OK(dt_source_rows(s, 0, B, in, tg));
    DT_CHECK(memcmp(in, first, sizeof in) == 0, "seek to step 0 differs from the first batch");
    DT_CHECK(dt_source_seek(s, 7, 3) == DT_ERR_FORMAT && strstr(dt_err_msg(), "not a blend's"),
             "a position that is not step x batch: %s", dt_err_msg());
    dt_source_close(s);
    /* resume: a fresh source sought to step 17 reads what advancing 17 steps read */
    dt_source *s1 = NULL, *s2 = NULL;
    DT_CHECK_OK(dt_source_open_tokens(spec, 256, B, T, true, 5, NULL, &s1));
    DT_CHECK_OK(dt_source_open_tokens(spec, 256, B, T, true, 5, NULL, &s2));
    if (s1 && s2) {
        for (int i = 0; i < 17; i++)
            dt_source_advance(s1);
        DT_CHECK_OK(dt_source_seek(s2, 17 * B, 17));
        int32_t x[B * T], y[B * T];
        DT_CHECK_OK(dt_source_rows(s1, 0, B, x, tg));
        DT_CHECK_OK(dt_source_rows(s2, 0, B, y, tg));
        DT_CHECK(memcmp(x, y, sizeof x) == 0, "shuffled blend: seek and advance disagree");
    }
    dt_source_close(s1);
    dt_source_close(s2);
    /* bad specs name the problem */
    const char *bad[][2] = {{"0.5 ", "has no path"}, {"-1 a.bin 1 b.bin", "weight > 0"},
                            {"0.5 nosuch.bin 0.5 x", "nosuch.bin"}};
    for (int i = 0; i < 3; i++) {
        dt_source *x = NULL;
        dt_status st = dt_source_open_blend(bad[i][0], 256, B, T, false, 0, NULL, &x);
        DT_CHECK(st != DT_OK && strstr(dt_err_msg(), bad[i][1]) && !x, "blend \"%s\": %s",
                 bad[i][0], dt_err_msg());
    }
    remove(pa);
    remove(pb);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    test_blend();
    enum { N = 50, B = 2, T = 5 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)i;
    char path[64];
    snprintf(path, sizeof path, "test_loader_%d.bin", (int)getpid());
    DT_CHECK_OK(dt_tokens_write(path, tok, N));
    dt_loader ld;
    DT_CHECK_OK(dt_loader_open(&ld, path, 64, B, T, false, 0, NULL));
    int32_t in[B * T], tg[B * T];
    int64_t expect = 0;
    for (int step = 0; step < 7; step++) {
        DT_CHECK_OK(dt_loader_rows(&ld, 0, B, in, tg));
        int ok = 1;
        for (int i = 0; i < B * T; i++)
            ok &= in[i] == expect + i && tg[i] == expect + i + 1;
        DT_CHECK(ok, "step %d does not start at %lld", step, (long long)expect);
        /* a data-parallel rank's rows are the same tokens */
        int32_t in1[T], tg1[T];
        DT_CHECK_OK(dt_loader_rows(&ld, 1, 1, in1, tg1));
        DT_CHECK(memcmp(in1, in + T, sizeof in1) == 0, "row 1 alone differs");
        dt_loader_advance(&ld);
        expect += B * T;
        if (expect + B * T + 1 > N)
            expect = 0;
    }
    dt_loader_close(&ld);
    DT_CHECK_OK(dt_loader_open(&ld, path, 64, B, T, true, 9, NULL));
    int32_t a[B * T], b[B * T], t0[B * T], again[B * T];
    DT_CHECK_OK(dt_loader_rows(&ld, 0, B, a, t0));
    for (int i = 0; i < B * T; i++)
        DT_CHECK(t0[i] == a[i] + 1, "shuffled target is not the next token");
    dt_loader_advance(&ld);
    DT_CHECK_OK(dt_loader_rows(&ld, 0, B, b, t0));
    ld.step = 0; /* the batch of step 0 again, from the step alone */
    DT_CHECK_OK(dt_loader_rows(&ld, 0, B, again, t0));
    DT_CHECK(memcmp(again, a, sizeof a) == 0, "shuffled batch is not a function of the step");
    DT_CHECK(memcmp(a, b, sizeof a) != 0, "shuffled batches repeat");
    /* a saved position: the last one a batch can start at works, beyond it is an error
     * naming the shard (a damaged or foreign checkpoint) */
    DT_CHECK_OK(dt_loader_seek(&ld, N - B * T - 1, 3));
    DT_CHECK(dt_loader_seek(&ld, N - B * T, 3) == DT_ERR_FORMAT &&
                 strstr(dt_err_msg(), path) && strstr(dt_err_msg(), "outside"),
             "a position past the data: %s", dt_err_msg());
    DT_CHECK(dt_loader_seek(&ld, 1000000000000LL, 3) == DT_ERR_FORMAT, "position 1e12 accepted");
    DT_CHECK(dt_loader_seek(&ld, -1, 3) == DT_ERR_FORMAT, "negative position accepted");
    dt_loader_close(&ld);
    dt_loader l2;
    dt_status st = dt_loader_open(&l2, path, 64, 8, 8, false, 0, NULL);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "fewer than one batch"),
             "a shard smaller than one batch: %s", dt_err_msg());
    remove(path);
    return DT_TEST_END();
}
