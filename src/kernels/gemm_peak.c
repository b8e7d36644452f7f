/* Measures dt_gemm's peak FLOP/s. See gemm_peak.h. */
#include "kernels/gemm_peak.h"

#include <stdlib.h>

#include "core/clock.h"

dt_status dt_gemm_peak_flops(dt_gemm *g, dt_dtype dtype, double seconds, double *flops) {
    enum { M = 1024, N = 2304, K = 768 };
    size_t es = dt_dtype_size(dtype);
    void *a = calloc((size_t)M * K, es), *b = calloc((size_t)K * N, es);
    float *c = calloc((size_t)M * N, sizeof *c);
    dt_status st = DT_OK;
    if (!a || !b || !c) {
        st = dt_err_set(DT_ERR_OOM, "gemm peak: out of memory");
        goto done;
    }
    /* weights used transposed, as every linear layer's forward does */
    dt_gemm_shape s = {.M = M, .N = N, .K = K, .trans_b = true, .dtype = dtype};
    st = dt_gemm_run(g, &s, a, b, NULL, c); /* creates and warms the primitive */
    double best = 0, start = dt_now();
    while (st == DT_OK && dt_now() - start < seconds) {
        double t0 = dt_now();
        st = dt_gemm_run(g, &s, a, b, NULL, c);
        double rate = 2.0 * M * N * K / (dt_now() - t0);
        best = rate > best ? rate : best;
    }
    *flops = best;
done:
    free(a);
    free(b);
    free(c);
    return st;
}
