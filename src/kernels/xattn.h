/* Cross-attention to short key sets: a DiT's tokens attending to their clip's text.
 *
 * Query rows are cut into groups (clips) of group_rows consecutive rows of a flattened batch,
 * of which the call holds rows [row0, row0 + rows) (a rank's part, which may start or end
 * inside a group); group g attends, head by head, to its own keys: rows g kv_rows .. of k and
 * v, the first n[g] of them. Non-causal, one softmax per row and head over at most
 * DT_XATTN_MAX_KEYS keys. Unlike the flash kernel (attention.h) the keys are few and
 * shared by a whole group, so a group's head keeps its keys and values transposed in scratch
 * and a row's scores are vector sums over the keys.
 *
 * OpenMP over (group, head) inside; the variants are compiled per ISA and picked at run time
 * (avx512f, avx2, baseline); _ref twins are plain loops with libm, for the tests.
 */
#ifndef DT_KERNELS_XATTN_H
#define DT_KERNELS_XATTN_H

#include <stdint.h>

enum { DT_XATTN_MAX_KEYS = 1024 };

typedef struct dt_xattn_shape {
    int64_t rows, row0;  /* the call's query rows, where they start in the flattened batch */
    int64_t group_rows;  /* query rows of a group */
    int groups, heads;   /* groups (g = row / group_rows - the first's), heads of hs columns */
    int hs;
    int64_t q_stride;    /* row stride of q, o, dout, dq (>= heads hs) */
    int64_t kv_stride;   /* row stride of k, v, dk, dv */
    int kv_rows;         /* key rows a group owns (its first n[g] attended) */
    const int32_t *n;    /* [groups] keys of each group, 1..kv_rows */
    float scale;         /* of the scores, 1 / sqrt(hs) */
} dt_xattn_shape;

/* Floats of the scratch the passes need: groups heads 2 hs kv_rows. */
int64_t dt_xattn_scratch_count(const dt_xattn_shape *s);

/* o [rows, q_stride] (this head's columns written) and lse [rows, heads]. */
void dt_xattn_forward(const dt_xattn_shape *s, const float *q, const float *k, const float *v,
                      float *o, float *lse, float *scratch);
/* From dout: dq (the call's rows, its heads' columns, overwritten), dk and dv (every group's
 * kv_rows key rows, its heads' columns, overwritten: zero past a group's n). */
void dt_xattn_backward(const dt_xattn_shape *s, const float *dout, const float *q,
                       const float *k, const float *v, const float *o, const float *lse,
                       float *dq, float *dk, float *dv, float *scratch);

void dt_xattn_forward_ref(const dt_xattn_shape *s, const float *q, const float *k,
                          const float *v, float *o, float *lse);
void dt_xattn_backward_ref(const dt_xattn_shape *s, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse,
                           float *dq, float *dk, float *dv);

#endif
