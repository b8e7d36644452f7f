/* How fast a blend of token datasets hands out batches (train/blend.c), against what a
 * training step consumes: the rows of GPT-2 124M batches (8 x 1024 tokens) read from a blend
 * of the datasets named, for SECONDS, one thread, as one data-parallel rank of 2 reads half of
 * each batch. Prints tokens/s and the process's peak resident memory. With "docs", the rows
 * carry document starts (data.doc_mask: after id 50256, and where a Megatron dataset's
 * document index starts one).
 *
 *   bench_blend "0.7 PREFIX_A 0.3 PREFIX_B" [SECONDS (3)] [docs]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/clock.h"
#include "train/source.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_blend \"W1 PATH1 W2 PATH2\" [SECONDS]\n");
        return 2;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    enum { B = 8, T = 1024, RANKS = 2 };
    dt_source *s = NULL;
    dt_docs docs = {.on = argc > 3 && !strcmp(argv[3], "docs"), .eot = 50256};
    if (dt_source_open_tokens(argv[1], 50257, B, T, false, 1, &docs, &s) != DT_OK) {
        fprintf(stderr, "%s\n", dt_err_msg());
        return 1;
    }
    static int32_t in[2 * B / RANKS * T], tg[B / RANKS * T];
    long long rows = 0;
    double t0 = dt_now();
    while (dt_now() - t0 < seconds) {
        if (dt_source_rows(s, 0, B / RANKS, in, tg) != DT_OK) {
            fprintf(stderr, "%s\n", dt_err_msg());
            return 1;
        }
        dt_source_advance(s);
        rows += B / RANKS;
    }
    double dt = dt_now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("blend%s: %.3g tokens/s for one of %d ranks (%lld rows of %d in %.1f s); peak RSS %.1f "
           "MiB\n",
           docs.on ? " with documents" : "", rows * (double)T / dt, RANKS, rows, T, dt,
           ru.ru_maxrss / 1024.0);
    dt_source_close(s);
    return 0;
}
