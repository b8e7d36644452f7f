/* Initial values of any slice of a parameter arena, and the local <-> full maps of tensor
 * shards. See param.h. */
#include "core/param.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/grow.h"
#include "core/mem.h"
#include "core/rng.h"

void dt_shard_local_shape(const dt_shard *s, int64_t *rows, int64_t *cols) {
    *rows = s->full_rows;
    *cols = s->full_cols;
    if (s->kind == DT_SHARD_ROWS)
        *rows = (s->full_rows + s->parts - 1) / s->parts;
    else if (s->kind == DT_SHARD_COLS)
        *cols = s->full_cols / s->parts;
    else if (s->kind == DT_SHARD_QKV)
        *rows = (s->sec[0] + s->sec[1] + s->sec[2]) / s->parts;
}

int64_t dt_shard_full_row(const dt_shard *s, int index, int64_t i, int64_t *col0) {
    *col0 = 0;
    switch (s->kind) {
    case DT_SHARD_ROWS: {
        int64_t rows = (s->full_rows + s->parts - 1) / s->parts, r = (int64_t)index * rows + i;
        return r < s->full_rows ? r : -1;
    }
    case DT_SHARD_COLS:
        *col0 = (int64_t)index * (s->full_cols / s->parts);
        return i;
    case DT_SHARD_QKV: {
        int64_t start = 0;
        for (int k = 0; k < 3; k++) {
            int64_t piece = s->sec[k] / s->parts;
            if (i < piece)
                return start + (int64_t)index * piece + i;
            i -= piece;
            start += s->sec[k];
        }
        return -1;
    }
    default:
        return i;
    }
}

/* Local elements [a, b) of tensor p (offsets relative to the tensor) from the full tensor's
 * Philox stream, run by run: each local row is one contiguous run of the full tensor. */
static void init_normal(const dt_param *p, uint64_t seed, int64_t a, int64_t b, float *dst) {
    int64_t rows, cols;
    dt_shard_local_shape(&p->shard, &rows, &cols);
    if (p->shard.kind == DT_SHARD_NONE) {
        dt_rng_fill_normal(seed, p->name, a, b - a, 0.0f, p->std, dst);
        return;
    }
    for (int64_t e = a; e < b;) {
        int64_t i = e / cols, j = e % cols, n = cols - j < b - e ? cols - j : b - e, col0;
        int64_t r = dt_shard_full_row(&p->shard, p->shard.index, i, &col0);
        if (r >= 0)
            dt_rng_fill_normal(seed, p->name, r * p->shard.full_cols + col0 + j, n, 0.0f,
                               p->std, dst + (e - a));
        e += n; /* padding rows keep the memset's zeros */
    }
}

void dt_param_init_range(const dt_param *table, int n_params, uint64_t seed, int64_t first,
                         int64_t count, float *out) {
    memset(out, 0, (size_t)count * sizeof *out); /* padding between tensors stays zero */
    int64_t end = first + count;
    for (int i = 0; i < n_params; i++) {
        const dt_param *p = &table[i];
        int64_t a = p->offset > first ? p->offset : first;
        int64_t b = p->offset + p->numel < end ? p->offset + p->numel : end;
        if (a >= b)
            continue;
        float *dst = out + (a - first);
        if (p->init == DT_INIT_NORMAL) {
            init_normal(p, seed, a - p->offset, b - p->offset, dst);
        } else if (p->init == DT_INIT_ONES) {
            for (int64_t e = a; e < b; e++) {
                int64_t col0, cols = p->numel / (p->shape[0] > 0 ? p->shape[0] : 1);
                bool pad = dt_shard_full_row(&p->shard, p->shard.index,
                                             (e - p->offset) / cols, &col0) < 0;
                dst[e - a] = pad ? 0.0f : 1.0f;
            }
        }
    }
}

static void shard_copy(const dt_param *p, int index, float *local, float *full, bool to_full) {
    int64_t rows, cols, col0;
    dt_shard_local_shape(&p->shard, &rows, &cols);
    for (int64_t i = 0; i < rows; i++) {
        int64_t r = dt_shard_full_row(&p->shard, index, i, &col0);
        if (r < 0)
            continue;
        float *f = full + r * p->shard.full_cols + col0, *l = local + i * cols;
        if (to_full)
            memcpy(f, l, (size_t)cols * sizeof *f);
        else
            memcpy(l, f, (size_t)cols * sizeof *l);
    }
}

void dt_param_shard_to_full(const dt_param *p, int index, const float *local, float *full) {
    shard_copy(p, index, (float *)local, full, true);
}

void dt_param_full_to_shard(const dt_param *p, int index, const float *full, float *local) {
    memset(local, 0, (size_t)p->numel * sizeof *local); /* padding rows */
    shard_copy(p, index, local, (float *)full, false);
}

dt_status dt_param_append(dt_param **table, int *n, int *cap, int64_t *n_total,
                          const char *name, int64_t rows, int64_t cols, dt_param_init init,
                          float std, dt_param **out) {
    dt_param *t = dt_grow(*table, cap, *n, sizeof *t, 64);
    if (!t)
        return dt_err_set(DT_ERR_OOM, "model: out of memory for the parameter table");
    *table = t;
    dt_param *p = &(*table)[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * (cols > 0 ? cols : 1);
    p->offset = *n_total;
    p->decay = p->ndim == 2;
    p->init = init;
    p->std = std;
    p->shard = (dt_shard){.kind = DT_SHARD_NONE, .parts = 1, .full_rows = rows,
                          .full_cols = cols > 0 ? cols : 1};
    *n_total += (p->numel + 15) / 16 * 16;
    *out = p;
    return DT_OK;
}

/* ---- a model's two tables ------------------------------------------------------------------ */

dt_status dt_param_gather_full(const dt_param_tables *t, dt_comm *tp, dt_comm *pp, dt_mem *mem,
                               const float *local, float *full) {
    int p = tp ? tp->size : 1;
    const float *all = local;
    float *gathered = NULL;
    int *counts = calloc((size_t)p, sizeof *counts);
    dt_status st = counts ? DT_OK : dt_err_set(DT_ERR_OOM, "model: out of memory");
    if (st == DT_OK && p > 1 && t->local_numel * p > INT32_MAX)
        st = dt_err_set(DT_ERR_UNSUPPORTED,
                        "model: %lld floats per rank are too many to gather "
                        "in one call",
                        (long long)t->local_numel);
    if (st == DT_OK && p > 1)
        st = dt_mem_alloc(mem, DT_MEM_TEMP, "tp.gather", (size_t)p * t->local_numel * sizeof(float),
                          (void **)&gathered);
    for (int r = 0; st == DT_OK && r < p; r++)
        counts[r] = (int)t->local_numel;
    if (st == DT_OK && p > 1) {
        st = dt_comm_allgather_f32(tp, local, gathered, counts, NULL);
        all = gathered;
    }
    if (st == DT_OK) {
        memset(full, 0, (size_t)t->full_numel * sizeof *full);
        for (int i = 0; i < t->n_local; i++) {
            const dt_param *lp = &t->local[i];
            if (i == t->skip)
                continue;
            int holders = lp->shard.kind == DT_SHARD_NONE ? 1 : p;
            for (int r = 0; r < holders; r++)
                dt_param_shard_to_full(lp, r, all + (size_t)r * t->local_numel + lp->offset,
                                       full + t->full[t->local_full[i]].offset);
        }
    }
    dt_mem_release(mem, gathered);
    free(counts);
    for (int64_t i = 0; st == DT_OK && pp && i < t->full_numel; i += 1 << 28) {
        int64_t n = t->full_numel - i < (1 << 28) ? t->full_numel - i : 1 << 28;
        st = dt_comm_allreduce_f32(pp, full + i, n, NULL);
    }
    return st;
}

void dt_param_take_shard(const dt_param_tables *t, const float *full, float *local) {
    memset(local, 0, (size_t)t->local_numel * sizeof *local);
    for (int i = 0; i < t->n_local; i++) {
        const dt_param *lp = &t->local[i];
        dt_param_full_to_shard(lp, lp->shard.index, full + t->full[t->local_full[i]].offset,
                               local + lp->offset);
    }
}

const dt_param *dt_param_find(const dt_param_tables *t, const char *name) {
    for (int i = 0; i < t->n_local; i++)
        if (strcmp(t->local[i].name, name) == 0)
            return &t->local[i];
    return NULL;
}

void dt_param_unit_range(const dt_param_tables *t, int unit, int64_t *first, int64_t *count) {
    int a = t->unit_param[unit], b = t->unit_param[unit + 1];
    *first = t->local[a].offset;
    *count = (b < t->n_local ? t->local[b].offset : t->local_numel) - *first;
}
