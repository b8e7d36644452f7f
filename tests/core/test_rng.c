/* Philox fills: slices equal the whole, moments are right, names separate streams. */
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "harness.h"

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    enum { N = 100001 };
    float *all = malloc(N * sizeof *all), *part = malloc(N * sizeof *part);
    dt_rng_fill_normal(42, "h.0.attn.c_attn.weight", 0, N, 0.0f, 1.0f, all);
    /* a shard starting at an odd offset reproduces the same values */
    dt_rng_fill_normal(42, "h.0.attn.c_attn.weight", 777, 5000, 0.0f, 1.0f, part);
    int same = 1;
    for (int i = 0; i < 5000; i++)
        same &= part[i] == all[777 + i];
    DT_CHECK(same, "shard [777, 5777) differs from the whole tensor's values");
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++)
        s += all[i], s2 += (double)all[i] * all[i];
    double mean = s / N, var = s2 / N - mean * mean;
    DT_CHECK(fabs(mean) < 0.02, "mean %g", mean);
    DT_CHECK(fabs(var - 1) < 0.02, "variance %g", var);
    dt_rng_fill_normal(42, "h.1.attn.c_attn.weight", 0, 1000, 0.0f, 1.0f, part);
    int differ = 0;
    for (int i = 0; i < 1000; i++)
        differ += part[i] != all[i];
    DT_CHECK(differ > 990, "streams of different names coincide (%d differ)", differ);
    dt_rng_fill_normal(43, "h.0.attn.c_attn.weight", 0, 1000, 0.0f, 1.0f, part);
    differ = 0;
    for (int i = 0; i < 1000; i++)
        differ += part[i] != all[i];
    DT_CHECK(differ > 990, "different seeds coincide (%d differ)", differ);
    free(all);
    free(part);
    return DT_TEST_END();
}
