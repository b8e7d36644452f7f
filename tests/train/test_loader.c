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

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    enum { N = 50, B = 2, T = 5 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)i;
    char path[64];
    snprintf(path, sizeof path, "test_loader_%d.bin", (int)getpid());
    DT_CHECK_OK(dt_tokens_write(path, tok, N));
    dt_loader ld;
    DT_CHECK_OK(dt_loader_open(&ld, path, 64, B, T, false, 0));
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
    DT_CHECK_OK(dt_loader_open(&ld, path, 64, B, T, true, 9));
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
    dt_status st = dt_loader_open(&l2, path, 64, 8, 8, false, 0);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "fewer than one batch"),
             "a shard smaller than one batch: %s", dt_err_msg());
    remove(path);
    return DT_TEST_END();
}
