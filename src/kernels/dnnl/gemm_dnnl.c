/* dt_gemm on oneDNN 2.6's matmul primitive (C API), with a per-shape primitive cache.
 *
 * Each distinct shape key gets one primitive plus its memory objects, created on first use and
 * re-pointed at the caller's buffers with dnnl_memory_set_data_handle on every run. When the
 * CPU has no bf16 or fp16 matmul (oneDNN answers "unimplemented": bf16 on AVX2-only parts, and
 * fp16 everywhere in oneDNN 2.6 except AVX512-FP16 parts), the 16-bit operands are widened
 * exactly into fp32 scratch shared by all shapes and the fp32 primitive runs instead.
 * The primitives' scratchpads (oneDNN's packing buffers) are one buffer of the dt_gemm, grown
 * to the largest any shape asks, whatever oneDNN's build would do with them (one per
 * primitive, or one global), so their memory is one known buffer.
 * A dt_gemm belongs to one thread of control; the primitives themselves use OpenMP threads.
 */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/gemm.h"

#define IMPL_LEN 64

/* The normalised shape: leading dimensions resolved (never 0) so equal layouts share a key. */
typedef struct gemm_key {
    int M, N, K;
    bool trans_a, trans_b, accumulate, has_bias, bf16_out;
    dt_dtype dtype;
    int64_t lda, ldb, ldc;
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c, mem_bias; /* mem_bias NULL without bias */
    dnnl_memory_t mem_scratch;                   /* NULL when the primitive needs none */
    size_t scratch_bytes;
    bool widen;       /* 16-bit request served by the fp32 primitive on widened operands
                       * (a bf16 output then goes through wide_c and is rounded after) */
} gemm_entry;

struct dt_gemm {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_entry *entries;
    int n_entries, cap_entries;
    char impl[DT_DTYPE_COUNT][IMPL_LEN]; /* "" until a primitive of that dtype exists */
    /* widened bf16 operands (A and B as stored, dense fp32): one pair shared by every shape,
     * grown to the largest, since calls run one at a time */
    float *wide_a, *wide_b, *wide_c;
    size_t cap_a, cap_b, cap_c;
    void *scratch; /* the primitives' scratchpad, shared likewise */
    size_t cap_scratch;
};

static void entry_destroy(gemm_entry *e) {
    dnnl_memory_destroy(e->mem_a); /* all accept NULL */
    dnnl_memory_destroy(e->mem_b);
    dnnl_memory_destroy(e->mem_c);
    dnnl_memory_destroy(e->mem_bias);
    dnnl_memory_destroy(e->mem_scratch);
    dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

dt_status dt_gemm_init(dt_gemm **out) {
    *out = NULL;
    dt_gemm *g = calloc(1, sizeof *g);
    if (!g)
        return dt_err_set(DT_ERR_OOM, "%s: no memory for the gemm cache", __func__);
    dnnl_status_t ds = dnnl_engine_create(&g->engine, dnnl_cpu, 0);
    if (ds != dnnl_success) {
        free(g);
        return dt_err_set(DT_ERR_DNNL, "%s: dnnl_engine_create failed (dnnl status %d)",
                          __func__, (int)ds);
    }
    ds = dnnl_stream_create(&g->stream, g->engine, dnnl_stream_default_flags);
    if (ds != dnnl_success) {
        dnnl_engine_destroy(g->engine);
        free(g);
        return dt_err_set(DT_ERR_DNNL, "%s: dnnl_stream_create failed (dnnl status %d)",
                          __func__, (int)ds);
    }
    *out = g;
    return DT_OK;
}

void dt_gemm_free(dt_gemm *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n_entries; i++)
        entry_destroy(&g->entries[i]);
    free(g->entries);
    free(g->wide_a);
    free(g->wide_b);
    free(g->wide_c);
    free(g->scratch);
    dnnl_stream_destroy(g->stream);
    dnnl_engine_destroy(g->engine);
    free(g);
}

static bool key_equal(const gemm_key *a, const gemm_key *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->trans_a == b->trans_a &&
           a->trans_b == b->trans_b && a->accumulate == b->accumulate &&
           a->has_bias == b->has_bias && a->bf16_out == b->bf16_out && a->dtype == b->dtype &&
           a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc;
}

/* Stored shape of A and B: rows x cols of the row-major array the caller passes. */
static int64_t rows_a(const gemm_key *k) { return k->trans_a ? k->K : k->M; }
static int64_t cols_a(const gemm_key *k) { return k->trans_a ? k->M : k->K; }
static int64_t rows_b(const gemm_key *k) { return k->trans_b ? k->N : k->K; }
static int64_t cols_b(const gemm_key *k) { return k->trans_b ? k->K : k->N; }

#define KEY_FMT "%dx%dx%d ta=%d tb=%d acc=%d bias=%d %s%s lda=%lld ldb=%lld ldc=%lld"
#define KEY_ARGS(k)                                                                            \
    (k)->M, (k)->N, (k)->K, (int)(k)->trans_a, (int)(k)->trans_b, (int)(k)->accumulate,        \
        (int)(k)->has_bias, dt_dtype_name((k)->dtype), (k)->bf16_out ? " bf16-out" : "",       \
        (long long)(k)->lda, (long long)(k)->ldb, (long long)(k)->ldc

/* Builds the primitive for key `k` with operand type `dt` and leading dimensions lda/ldb
 * (which differ from the key's for widened operands). Returns the raw dnnl status so the
 * caller can tell "unimplemented" (fall back) from real failures; on failure *what names the
 * failing call. */
static dnnl_status_t build(dt_gemm *g, const gemm_key *k, dnnl_data_type_t dt, int64_t lda,
                           int64_t ldb, gemm_entry *e, char *impl, const char **what) {
    dnnl_memory_desc_t da, db, dc, dbias;
    /* Logical A is [M,K]: element (m,k) sits at m*lda+k, or at k*lda+m when stored [K,M]. */
    dnnl_dims_t dims_a = {k->M, k->K}, dims_b = {k->K, k->N}, dims_c = {k->M, k->N};
    dnnl_dims_t dims_bias = {1, k->N};
    dnnl_dims_t st_a = {k->trans_a ? 1 : lda, k->trans_a ? lda : 1};
    dnnl_dims_t st_b = {k->trans_b ? 1 : ldb, k->trans_b ? ldb : 1};
    dnnl_dims_t st_c = {k->ldc, 1}, st_bias = {k->N, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    dnnl_status_t ds;

#define STEP(call)                                                                             \
    do {                                                                                       \
        ds = (call);                                                                           \
        if (ds != dnnl_success) {                                                              \
            *what = #call;                                                                     \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)
    STEP(dnnl_memory_desc_init_by_strides(&da, 2, dims_a, dt, st_a));
    STEP(dnnl_memory_desc_init_by_strides(&db, 2, dims_b, dt, st_b));
    /* a bf16 C from the bf16 primitive only: the fp32 fallback writes fp32 scratch */
    dnnl_data_type_t ct = k->bf16_out && dt == dnnl_bf16 ? dnnl_bf16 : dnnl_f32;
    STEP(dnnl_memory_desc_init_by_strides(&dc, 2, dims_c, ct, st_c));
    STEP(dnnl_memory_desc_init_by_strides(&dbias, 2, dims_bias, dnnl_f32, st_bias));
    STEP(dnnl_matmul_desc_init(&md, &da, &db, k->has_bias ? &dbias : NULL, &dc));
    STEP(dnnl_primitive_attr_create(&attr));
    STEP(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->accumulate) {
        /* C += A·B is a "sum" post-op: oneDNN reads the old C before overwriting it. */
        STEP(dnnl_post_ops_create(&ops));
        STEP(dnnl_post_ops_append_sum(ops, 1.0f));
        STEP(dnnl_primitive_attr_set_post_ops(attr, ops));
    }
    STEP(dnnl_primitive_desc_create(&pd, &md, attr, g->engine, NULL));
    const char *name = NULL;
    STEP(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name));
    snprintf(impl, IMPL_LEN, "%s", name ? name : "?");
    STEP(dnnl_primitive_create(&e->prim, pd));
    /* No buffers yet: every run points the memory objects at the caller's arrays. */
    STEP(dnnl_memory_create(&e->mem_a, &da, g->engine, DNNL_MEMORY_NONE));
    STEP(dnnl_memory_create(&e->mem_b, &db, g->engine, DNNL_MEMORY_NONE));
    STEP(dnnl_memory_create(&e->mem_c, &dc, g->engine, DNNL_MEMORY_NONE));
    if (k->has_bias)
        STEP(dnnl_memory_create(&e->mem_bias, &dbias, g->engine, DNNL_MEMORY_NONE));
    const dnnl_memory_desc_t *ds_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = ds_md ? dnnl_memory_desc_get_size(ds_md) : 0;
    if (e->scratch_bytes)
        STEP(dnnl_memory_create(&e->mem_scratch, ds_md, g->engine, DNNL_MEMORY_NONE));
#undef STEP
done:
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    return ds;
}

static dt_status entry_create(dt_gemm *g, const gemm_key *k, gemm_entry *e) {
    memset(e, 0, sizeof *e);
    e->key = *k;
    const char *what = "";
    char impl[IMPL_LEN] = "";
    dnnl_data_type_t dt = k->dtype == DT_BF16 ? dnnl_bf16 : k->dtype == DT_F16 ? dnnl_f16
                                                                               : dnnl_f32;
    dnnl_status_t ds = build(g, k, dt, k->lda, k->ldb, e, impl, &what);
    if (ds == dnnl_unimplemented && k->dtype != DT_F32) {
        /* No 16-bit kernel on this CPU: same math on exactly widened operands. The scratch
         * holds A and B as stored but dense, so its leading dimension is the column count. */
        entry_destroy(e);
        e->key = *k;
        e->widen = true;
        gemm_key wk = *k; /* the fp32 C of the fallback is dense scratch when bf16 out */
        wk.ldc = k->bf16_out ? k->N : k->ldc;
        ds = build(g, &wk, dnnl_f32, cols_a(k), cols_b(k), e, impl, &what);
        snprintf(impl, IMPL_LEN, "fp32 fallback");
    }
    if (ds != dnnl_success) {
        entry_destroy(e);
        return dt_err_set(DT_ERR_DNNL, "dt_gemm_run: %s failed for " KEY_FMT " (dnnl status %d)",
                          what, KEY_ARGS(k), (int)ds);
    }
    memcpy(g->impl[k->dtype], impl, IMPL_LEN);
    return DT_OK;
}

static dt_status lookup(dt_gemm *g, const gemm_key *k, gemm_entry **out) {
    /* Linear scan: a model uses a few dozen shapes, and a miss costs a primitive creation
     * that dwarfs the scan; the most recent hit moves to the front so repeats are O(1). */
    for (int i = 0; i < g->n_entries; i++) {
        if (key_equal(&g->entries[i].key, k)) {
            if (i > 0) {
                gemm_entry t = g->entries[i];
                memmove(&g->entries[1], &g->entries[0], sizeof t * (size_t)i);
                g->entries[0] = t;
            }
            *out = &g->entries[0];
            return DT_OK;
        }
    }
    if (g->n_entries == g->cap_entries) {
        int cap = g->cap_entries ? 2 * g->cap_entries : 16;
        gemm_entry *p = realloc(g->entries, sizeof *p * (size_t)cap);
        if (!p)
            return dt_err_set(DT_ERR_OOM, "dt_gemm_run: no memory for the primitive cache");
        g->entries = p;
        g->cap_entries = cap;
    }
    gemm_entry e;
    DT_TRY(entry_create(g, k, &e));
    memmove(&g->entries[1], &g->entries[0], sizeof e * (size_t)g->n_entries);
    g->entries[0] = e;
    g->n_entries++;
    *out = &g->entries[0];
    return DT_OK;
}

/* 16-bit rows x cols (row stride ld) -> dense fp32; exact, since every bf16 and fp16 value
 * is an fp32 value. */
static void widen(float *dst, const uint16_t *src, dt_dtype t, int64_t rows, int64_t cols,
                  int64_t ld) {
    if (t == DT_F16) {
        if (ld == cols) {
            dt_cast_f16_to_f32(dst, src, rows * cols);
            return;
        }
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) /* inside a parallel region the cast runs serially */
            dt_cast_f16_to_f32(dst + r * cols, src + r * ld, cols);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const dt_bf16 *s = src + r * ld;
        float *d = dst + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            uint32_t u = (uint32_t)s[c] << 16;
            memcpy(&d[c], &u, 4);
        }
    }
}

static dt_status check_shape(const dt_gemm_shape *s, const void *A, const void *B,
                             const float *bias, const void *C, gemm_key *k) {
    if (s->M < 0 || s->N < 0 || s->K < 0 || (int)s->dtype < 0 || s->dtype >= DT_DTYPE_COUNT)
        return dt_err_set(DT_ERR_ARG, "dt_gemm_run: bad shape %dx%dx%d dtype %d", s->M, s->N,
                          s->K, (int)s->dtype);
    memset(k, 0, sizeof *k);
    k->M = s->M, k->N = s->N, k->K = s->K;
    k->trans_a = s->trans_a, k->trans_b = s->trans_b, k->accumulate = s->accumulate;
    k->has_bias = bias != NULL;
    k->dtype = s->dtype;
    k->lda = s->lda ? s->lda : cols_a(k);
    k->ldb = s->ldb ? s->ldb : cols_b(k);
    k->ldc = s->ldc ? s->ldc : k->N;
    if (k->lda < cols_a(k) || k->ldb < cols_b(k) || k->ldc < k->N)
        return dt_err_set(DT_ERR_ARG, "dt_gemm_run: leading dimension too small for " KEY_FMT,
                          KEY_ARGS(k));
    if (bias && s->accumulate)
        return dt_err_set(DT_ERR_ARG, "dt_gemm_run: bias with accumulate for " KEY_FMT,
                          KEY_ARGS(k));
    if ((!A && s->K && s->M) || (!B && s->K && s->N) || (!C && s->M && s->N))
        return dt_err_set(DT_ERR_ARG, "dt_gemm_run: NULL operand for " KEY_FMT, KEY_ARGS(k));
    return DT_OK;
}

/* The shared widening buffer holds at least n floats (grows only on a larger shape). */
static dt_status grow(float **buf, size_t *cap, size_t n, const gemm_key *k) {
    if (n <= *cap)
        return DT_OK;
    float *p = realloc(*buf, n * sizeof *p);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "dt_gemm_run: no memory for 16-bit widening " KEY_FMT,
                          KEY_ARGS(k));
    *buf = p;
    *cap = n;
    return DT_OK;
}

/* The shared scratchpad holds at least n bytes, 64-byte aligned as oneDNN wants. */
static dt_status grow_scratch(dt_gemm *g, size_t n, const gemm_key *k) {
    if (n <= g->cap_scratch)
        return DT_OK;
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "dt_gemm_run: no memory for a %zu-byte scratchpad " KEY_FMT,
                          n, KEY_ARGS(k));
    free(g->scratch);
    g->scratch = p;
    g->cap_scratch = n;
    return DT_OK;
}

/* C is float (or, k->bf16_out, dt_bf16) */
static dt_status run(dt_gemm *g, const gemm_key *kp, const void *A, const void *B,
                     const float *bias, void *C) {
    gemm_key k = *kp;
    if (k.M == 0 || k.N == 0)
        return DT_OK;
    if (k.K == 0) { /* empty sum: oneDNN rejects zero dims, and the answer is trivial */
        if (!k.accumulate)
            for (int64_t m = 0; m < k.M; m++)
                for (int64_t n = 0; n < k.N; n++) {
                    float v = bias ? bias[n] : 0.0f;
                    if (k.bf16_out)
                        ((dt_bf16 *)C)[m * k.ldc + n] = dt_bf16_from_f32(v);
                    else
                        ((float *)C)[m * k.ldc + n] = v;
                }
        return DT_OK;
    }
    gemm_entry *e;
    DT_TRY(lookup(g, &k, &e));
    const void *a = A, *b = B;
    void *c = C;
    if (e->widen && k.bf16_out) {
        DT_TRY(grow(&g->wide_c, &g->cap_c, (size_t)(k.M * k.N), &k));
        c = g->wide_c;
    }
    if (e->widen) {
        DT_TRY(grow(&g->wide_a, &g->cap_a, (size_t)(rows_a(&k) * cols_a(&k)), &k));
        DT_TRY(grow(&g->wide_b, &g->cap_b, (size_t)(rows_b(&k) * cols_b(&k)), &k));
        widen(g->wide_a, A, k.dtype, rows_a(&k), cols_a(&k), k.lda);
        widen(g->wide_b, B, k.dtype, rows_b(&k), cols_b(&k), k.ldb);
        a = g->wide_a;
        b = g->wide_b;
    }
    DT_TRY(grow_scratch(g, e->scratch_bytes, &k));
    /* oneDNN only reads SRC/WEIGHTS/BIAS; its handle setter just takes a non-const void *. */
    dnnl_status_t ds;
    const char *what = "dnnl_memory_set_data_handle";
    if ((ds = dnnl_memory_set_data_handle(e->mem_a, (void *)a)) != dnnl_success ||
        (ds = dnnl_memory_set_data_handle(e->mem_b, (void *)b)) != dnnl_success ||
        (ds = dnnl_memory_set_data_handle(e->mem_c, c)) != dnnl_success ||
        (bias && (ds = dnnl_memory_set_data_handle(e->mem_bias, (void *)bias)) != dnnl_success) ||
        (e->mem_scratch &&
         (ds = dnnl_memory_set_data_handle(e->mem_scratch, g->scratch)) != dnnl_success))
        goto fail;
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, e->mem_a}, {DNNL_ARG_WEIGHTS, e->mem_b}, {DNNL_ARG_DST, e->mem_c}};
    int n_args = 3;
    if (bias)
        args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->mem_bias};
    if (e->mem_scratch)
        args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->mem_scratch};
    what = "dnnl_primitive_execute";
    if ((ds = dnnl_primitive_execute(e->prim, g->stream, n_args, args)) != dnnl_success)
        goto fail;
    what = "dnnl_stream_wait";
    if ((ds = dnnl_stream_wait(g->stream)) != dnnl_success)
        goto fail;
    if (c != C) /* the fallback's fp32 result, rounded once */
        for (int64_t m = 0; m < k.M; m++)
            dt_cast_f32_to_bf16((dt_bf16 *)C + m * k.ldc, g->wide_c + m * k.N, k.N);
    return DT_OK;
fail:
    return dt_err_set(DT_ERR_DNNL, "dt_gemm_run: %s failed for " KEY_FMT " (dnnl status %d)",
                      what, KEY_ARGS(&k), (int)ds);
}

dt_status dt_gemm_run(dt_gemm *g, const dt_gemm_shape *s, const void *A, const void *B,
                      const float *bias, float *C) {
    gemm_key k;
    DT_TRY(check_shape(s, A, B, bias, C, &k));
    return run(g, &k, A, B, bias, C);
}

dt_status dt_gemm_run_bf16_out(dt_gemm *g, const dt_gemm_shape *s, const void *A,
                               const void *B, const float *bias, dt_bf16 *C) {
    gemm_key k;
    DT_TRY(check_shape(s, A, B, bias, C, &k));
    if (k.dtype != DT_BF16 || k.accumulate)
        return dt_err_set(DT_ERR_ARG, "dt_gemm_run_bf16_out: bf16 operands and no accumulate, "
                          "not " KEY_FMT, KEY_ARGS(&k));
    k.bf16_out = true;
    return run(g, &k, A, B, bias, C);
}

const char *dt_gemm_impl_name(dt_gemm *g, dt_dtype dtype) {
    if (!g || dtype < 0 || dtype >= DT_DTYPE_COUNT)
        return "?";
    if (!g->impl[dtype][0]) {
        /* Nothing of this dtype ran yet: probe a typical shape so logs can name the kernel
         * before the first step. A probe failure leaves the name unknown, not an error. */
        gemm_key k = {.M = 64, .N = 64, .K = 64, .dtype = dtype, .lda = 64, .ldb = 64,
                      .ldc = 64};
        gemm_entry *e;
        if (lookup(g, &k, &e) != DT_OK)
            return "unknown";
    }
    return g->impl[dtype];
}
