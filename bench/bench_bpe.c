/* How fast dtrain's byte-level BPE (io/bpe.h) tokenizes text: one thread, a corpus read into
 * memory (FILE, repeated until it is at least 32 MB, so the word cache sees what a large
 * corpus shows it), encoded REPS times; prints the first pass's MB/s (its word cache starts
 * empty), the best pass's, and ids per byte.
 *
 *   bench_bpe TOKENIZER FILE [REPS (3)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "io/atomic.h"
#include "io/bpe.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_bpe TOKENIZER FILE [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    dt_bpe *b = NULL;
    char *one = NULL;
    if (dt_bpe_load(argv[1], &b) != DT_OK ||
        dt_read_text(argv[2], "text", 1 << 30, &one) != DT_OK) {
        fprintf(stderr, "%s\n", dt_err_msg());
        return 1;
    }
    size_t n1 = strlen(one), copies = (32u << 20) / (n1 ? n1 : 1) + 1, n = n1 * copies;
    char *text = malloc(n);
    for (size_t i = 0; i < copies; i++)
        memcpy(text + i * n1, one, n1);
    int32_t *ids = NULL;
    int64_t cap = 0, count = 0;
    double best = 0, first = 0;
    for (int r = 0; r < reps; r++) {
        count = 0;
        double t0 = dt_now();
        if (dt_bpe_encode(b, text, n, &ids, &count, &cap) != DT_OK) {
            fprintf(stderr, "%s\n", dt_err_msg());
            return 1;
        }
        double mbs = (double)n / (dt_now() - t0) / 1e6;
        best = mbs > best ? mbs : best;
        first = r == 0 ? mbs : first;
    }
    printf("%s: %.1f MB of text, %.1f MB/s the first pass (the word cache empty), %.1f MB/s "
           "best of %d, %.3f ids a byte\n",
           dt_bpe_describe(b), (double)n / 1e6, first, best, reps, (double)count / (double)n);
    free(text), free(ids), free(one);
    dt_bpe_free(b);
    return 0;
}
