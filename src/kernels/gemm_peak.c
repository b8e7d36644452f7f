/* Measures dt_gemm's peak FLOP/s. See gemm_peak.h. */
#include "kernels/gemm_peak.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

dt_status dt_gemm_rate(dt_gemm *g, const dt_gemm_shape *shape, double seconds, int min_runs,
                       double *flops) {
    dt_gemm_shape s = *shape;
    size_t es = dt_dtype_size(s.dtype);
    void *a = calloc((size_t)s.M * s.K, es), *b = calloc((size_t)s.K * s.N, es);
    float *c = calloc((size_t)s.M * s.N, sizeof *c);
    dt_status st = DT_OK;
    if (!a || !b || !c) {
        st = dt_err_set(DT_ERR_OOM, "gemm rate: out of memory");
        goto done;
    }
    /* written, so each page is its own: untouched calloc pages all map the one zero page,
     * which would keep the operands in cache whatever their size */
    memset(a, 0, (size_t)s.M * s.K * es);
    memset(b, 0, (size_t)s.K * s.N * es);
    s.lda = s.ldb = s.ldc = 0;
    st = dt_gemm_run(g, &s, a, b, NULL, c); /* creates and warms the primitive */
    double best = 0, start = dt_now();
    for (int i = 0; st == DT_OK && (i < min_runs || dt_now() - start < seconds); i++) {
        double t0 = dt_now();
        st = dt_gemm_run(g, &s, a, b, NULL, c);
        double rate = 2.0 * s.M * s.N * s.K / (dt_now() - t0);
        best = rate > best ? rate : best;
    }
    *flops = best;
done:
    free(a);
    free(b);
    free(c);
    return st;
}

dt_gemm_shape dt_gemm_peak_shape(dt_dtype dtype) {
    return (dt_gemm_shape){.M = 1024, .N = 2304, .K = 768, .trans_b = true, .dtype = dtype};
}

dt_status dt_gemm_peak_flops(dt_gemm *g, dt_dtype dtype, double seconds, double *flops) {
    dt_gemm_shape s = dt_gemm_peak_shape(dtype);
    return dt_gemm_rate(g, &s, seconds, 1, flops);
}
