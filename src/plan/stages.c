/* Pipeline chunks as unit ranges. See stages.h. */
#include "plan/stages.h"

#include <stdlib.h>
#include <string.h>

/* The decimal count at s (digits only, at most 8 of them), *end past it; -1 when none. */
static long read_count(const char *s, const char **end) {
    long v = 0;
    int digits = 0;
    while (*s == ' ')
        s++;
    for (; *s >= '0' && *s <= '9' && digits < 9; s++, digits++)
        v = 10 * v + (*s - '0');
    *end = s;
    return digits == 0 || digits > 8 ? -1 : v;
}

static dt_status parse_counts(const char *text, int n, int *counts) {
    const char *s = text;
    for (int i = 0; i < n; i++) {
        const char *end;
        long v = read_count(s, &end);
        if (v < 1 || v > 1 << 20)
            return dt_err_set(DT_ERR_ARG, "plugin.pp_layers=\"%s\": entry %d is not a layer "
                              "count >= 1", text, i + 1);
        counts[i] = (int)v;
        while (*end == ' ')
            end++;
        if (i + 1 < n && *end != ',')
            return dt_err_set(DT_ERR_ARG, "plugin.pp_layers=\"%s\" has %d entries; it needs "
                              "one per model chunk (pp_size x pp_chunks = %d)", text, i + 1, n);
        s = end + (i + 1 < n);
        if (i + 1 == n && *end != '\0')
            return dt_err_set(DT_ERR_ARG, "plugin.pp_layers=\"%s\" has more than %d entries; "
                              "it needs one per model chunk (pp_size x pp_chunks)", text, n);
    }
    return DT_OK;
}

dt_status dt_stage_layers_check(const char *layers) {
    if (!layers || !layers[0] || !strcmp(layers, "auto"))
        return DT_OK;
    int n = 1, counts[DT_MAX_CHUNKS];
    for (const char *s = layers; *s; s++)
        n += *s == ',';
    if (n > DT_MAX_CHUNKS)
        return dt_err_set(DT_ERR_ARG,
                          "plugin.pp_layers=\"%s\" has %d entries; dtrain cuts at "
                          "most %d chunks",
                          layers, n, DT_MAX_CHUNKS);
    return parse_counts(layers, n, counts);
}

dt_status dt_stage_plan_make(int n_layer, int pp, int v, const char *layers, dt_stage_plan *out) {
    int n = pp * v;
    if (pp < 1 || v < 1 || n > DT_MAX_CHUNKS)
        return dt_err_set(DT_ERR_ARG, "pipeline: pp_size %d x pp_chunks %d must be between 1 "
                          "and %d chunks", pp, v, DT_MAX_CHUNKS);
    if (n_layer < n)
        return dt_err_set(DT_ERR_ARG, "model.n_layer=%d cannot fill %d pipeline chunks "
                          "(pp_size %d x pp_chunks %d): every chunk needs a layer", n_layer, n,
                          pp, v);
    int counts[DT_MAX_CHUNKS];
    if (layers && !strcmp(layers, "auto"))
        return dt_err_set(DT_ERR_ARG,
                          "plugin.pp_layers=auto is decided from the time model "
                          "before a run (dtrain train and dtrain plan do it); here it needs "
                          "its counts");
    if (layers && layers[0]) {
        DT_TRY(parse_counts(layers, n, counts));
        int sum = 0;
        for (int i = 0; i < n; i++)
            sum += counts[i];
        if (sum != n_layer)
            return dt_err_set(DT_ERR_ARG, "plugin.pp_layers=\"%s\" adds up to %d layers, but "
                              "model.n_layer=%d", layers, sum, n_layer);
    } else {
        for (int i = 0; i < n; i++)
            counts[i] = n_layer / n + (i < n_layer % n);
    }
    memset(out, 0, sizeof *out);
    out->pp = pp, out->v = v, out->n_layer = n_layer, out->n_chunks = n;
    int layer = 0;
    for (int c = 0; c < n; c++) {
        out->first[c] = c == 0 ? 0 : layer + 1; /* chunk 0 also holds the embedding (unit 0) */
        layer += counts[c];
    }
    out->first[n] = n_layer + 2; /* the last chunk also holds the final unit */
    return DT_OK;
}

void dt_stage_plan_held(const dt_stage_plan *p, int rank, bool *held) {
    for (int u = 0; u < p->n_layer + 2; u++)
        held[u] = false;
    for (int c = rank; c < p->n_chunks; c += p->pp)
        for (int u = p->first[c]; u < p->first[c + 1]; u++)
            held[u] = true;
}
