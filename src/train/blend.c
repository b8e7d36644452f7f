/* A weighted blend of token datasets (data.train = "0.7 PATH_A 0.3 PATH_B"), behind the
 * batch-source interface (source.h).
 *
 * Which dataset each sequence comes from: global row g (g = step * B + row) goes to the
 * dataset whose share is furthest behind its weight, the rule Megatron-LM's blended dataset
 * builds its index with: the d maximising w_d (g + 1) - n_d, n_d the rows d had before g
 * (ties to the first). So any B consecutive rows hold each dataset's share to within one row,
 * and the blend is a pure function of the weights and g: every layout reads the same rows,
 * and a checkpoint's (rows read, step) restores every dataset's position, whatever layout
 * resumes it. Within dataset d, its k-th row is its k-th sequence: consecutive T-token rows
 * from token 0, starting over past its end (sequential), or an offset chosen by Philox keyed
 * by (seed, d, k) (shuffled).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/indexed.h"
#include "io/tokens.h"
#include "train/loader.h"
#include "train/source.h"

enum { MAX_SETS = 16 };

typedef struct blend {
    int n, B, T;
    bool shuffle;
    uint64_t seed;
    dt_tokens set[MAX_SETS];
    double w[MAX_SETS];     /* normalised weights */
    int64_t done[MAX_SETS]; /* rows each dataset gave before this step */
    int64_t step;
    dt_docs docs;
    int32_t *row;  /* [T + 1] */
    uint8_t *mark; /* [T + 1] where the dataset's index starts documents */
    int *pick;    /* [B] this step's dataset of each row */
    int64_t *k;   /* [B] and its index within that dataset */
} blend;

bool dt_blend_spec_is(const char *spec) {
    char *end;
    while (isspace((unsigned char)*spec))
        spec++;
    strtod(spec, &end);
    return end != spec && isspace((unsigned char)*end);
}

/* "w1 path1 w2 path2 ...": weights > 0, finite; paths without spaces. */
static dt_status parse(const char *spec, blend *b, char paths[MAX_SETS][4096]) {
    const char *s = spec;
    double sum = 0;
    b->n = 0;
    for (;;) {
        while (isspace((unsigned char)*s))
            s++;
        if (!*s)
            break;
        if (b->n == MAX_SETS)
            return dt_err_set(DT_ERR_ARG, "data.train blends at most %d datasets", MAX_SETS);
        char *end;
        errno = 0;
        double w = strtod(s, &end);
        if (end == s || errno || !(w > 0) || w > 1e12 || !isspace((unsigned char)*end))
            return dt_err_set(DT_ERR_ARG,
                              "data.train=\"%s\": entry %d needs a weight > 0 "
                              "then a path (\"0.7 A 0.3 B\")",
                              spec, b->n + 1);
        s = end;
        while (isspace((unsigned char)*s))
            s++;
        size_t len = strcspn(s, " \t\r\n");
        if (len == 0 || len >= sizeof paths[0])
            return dt_err_set(DT_ERR_ARG, "data.train=\"%s\": weight %g has no path after it", spec,
                              w);
        memcpy(paths[b->n], s, len);
        paths[b->n][len] = '\0';
        s += len;
        b->w[b->n++] = w;
        sum += w;
    }
    if (b->n < 1)
        return dt_err_set(DT_ERR_ARG, "data.train=\"%s\": no dataset", spec);
    for (int d = 0; d < b->n; d++)
        b->w[d] /= sum;
    return DT_OK;
}

/* The dataset of the row after `rows` rows, given each dataset's count so far. */
static int next_set(const blend *b, int64_t rows, const int64_t *count) {
    int best = 0;
    double most = -1e300;
    for (int d = 0; d < b->n; d++) {
        double behind = b->w[d] * (double)(rows + 1) - (double)count[d];
        if (behind > most)
            most = behind, best = d;
    }
    return best;
}

/* This step's rows: their datasets and indices within them. */
static void assign_step(blend *b) {
    int64_t count[MAX_SETS];
    memcpy(count, b->done, sizeof count);
    for (int r = 0; r < b->B; r++) {
        int d = next_set(b, b->step * b->B + r, count);
        b->pick[r] = d;
        b->k[r] = count[d]++;
    }
}

static int64_t row_start(const blend *b, int d, int64_t k) {
    int64_t n = b->set[d].n_tok, T = b->T;
    if (b->shuffle)
        return (int64_t)(dt_rng_u64(b->seed, "data.blend", ((uint64_t)d << 56) ^ (uint64_t)k) %
                         (uint64_t)(n - T));
    return k % ((n - 1) / T) * T;
}

static void blend_close(void *self) {
    blend *b = self;
    for (int d = 0; d < b->n; d++)
        dt_tokens_close(&b->set[d]);
    free(b->row);
    free(b->mark);
    free(b->pick);
    free(b->k);
    free(b);
}

static size_t blend_input_row_bytes(const void *self) {
    const blend *b = self;
    return dt_token_input_row_bytes(b->T, &b->docs);
}

static size_t blend_row_bytes(const void *self) {
    return (size_t)((const blend *)self)->T * sizeof(int32_t);
}

static dt_status blend_rows(const void *self, int row0, int n, void *input, void *target) {
    const blend *b = self;
    size_t in_ints = blend_input_row_bytes(b) / sizeof(int32_t);
    int32_t *in = input, *tg = target;
    for (int r = 0; r < n; r++) {
        int d = b->pick[row0 + r];
        DT_TRY(dt_token_row_read(&b->set[d], row_start(b, d, b->k[row0 + r]), b->T, &b->docs,
                                 b->row, b->mark, in + (int64_t)r * in_ints,
                                 tg + (int64_t)r * b->T));
    }
    return DT_OK;
}

static void blend_advance(void *self) {
    blend *b = self;
    for (int r = 0; r < b->B; r++)
        b->done[b->pick[r]]++;
    b->step++;
    assign_step(b);
}

static void blend_rewind(void *self) {
    blend *b = self;
    memset(b->done, 0, sizeof b->done);
    b->step = 0;
    assign_step(b);
}

/* the position is the rows read so far: every dataset's count follows from it */
static void blend_position(const void *self, int64_t *pos, int64_t *step) {
    const blend *b = self;
    *pos = b->step * b->B;
    *step = b->step;
}

static dt_status blend_seek(void *self, int64_t pos, int64_t step) {
    blend *b = self;
    if (step < 0 || step > ((int64_t)1 << 40) / b->B || pos != step * b->B)
        return dt_err_set(DT_ERR_FORMAT,
                          "data position %lld at step %lld is not a blend's (it "
                          "reads %d rows a step): the checkpoint was saved with other data or "
                          "is damaged",
                          (long long)pos, (long long)step, b->B);
    blend_rewind(b);
    int64_t count[MAX_SETS] = {0};
    for (int64_t g = 0; g < pos; g++)
        count[next_set(b, g, count)]++;
    memcpy(b->done, count, sizeof count);
    b->step = step;
    assign_step(b);
    return DT_OK;
}

bool dt_tokens_spec_indexed(const char *spec) {
    if (!dt_blend_spec_is(spec))
        return dt_indexed_named(spec);
    blend b;
    static char paths[MAX_SETS][4096];
    if (parse(spec, &b, paths) != DT_OK)
        return false;
    for (int d = 0; d < b.n; d++)
        if (!dt_indexed_named(paths[d]))
            return false;
    return true;
}

static const dt_source_ops blend_ops = {
    .close = blend_close,
    .input_row_bytes = blend_input_row_bytes,
    .target_row_bytes = blend_row_bytes,
    .rows = blend_rows,
    .advance = blend_advance,
    .rewind = blend_rewind,
    .position = blend_position,
    .seek = blend_seek,
};

dt_status dt_source_open_blend(const char *spec, int vocab_size, int batch_size, int seq_len,
                               bool shuffle, uint64_t seed, const dt_docs *docs, dt_source **out) {
    *out = NULL;
    blend *b = calloc(1, sizeof *b);
    dt_source *s = calloc(1, sizeof *s);
    char paths[MAX_SETS][4096];
    dt_status st = b && s ? DT_OK : dt_err_set(DT_ERR_OOM, "blend: out of memory");
    if (st == DT_OK) {
        *b = (blend){.B = batch_size,
                     .T = seq_len,
                     .shuffle = shuffle,
                     .seed = seed,
                     .docs = docs ? *docs : (dt_docs){.eot = -1}};
        for (int d = 0; d < MAX_SETS; d++)
            b->set[d].fd = b->set[d].idx_fd = -1;
        st = parse(spec, b, paths);
    }
    int opened = 0;
    for (; st == DT_OK && opened < b->n; opened++) {
        st = dt_tokens_open(paths[opened], vocab_size, &b->set[opened]);
        if (st == DT_OK && b->set[opened].n_tok < (int64_t)seq_len + 2)
            st = dt_err_set(DT_ERR_ARG,
                            "data.train blend: %s holds %lld tokens, fewer than "
                            "one sequence needs (seq_len %d + 2)",
                            paths[opened], (long long)b->set[opened].n_tok, seq_len);
        if (st != DT_OK)
            opened++; /* close what the failed open may hold too */
    }
    if (st == DT_OK) {
        b->row = malloc(((size_t)seq_len + 1) * sizeof *b->row);
        b->mark = malloc((size_t)seq_len + 1);
        b->pick = malloc((size_t)batch_size * sizeof *b->pick);
        b->k = malloc((size_t)batch_size * sizeof *b->k);
        if (!b->row || !b->mark || !b->pick || !b->k)
            st = dt_err_set(DT_ERR_OOM, "blend: out of memory");
    }
    if (st != DT_OK) {
        if (b) {
            b->n = opened;
            blend_close(b);
        }
        free(s);
        return st;
    }
    assign_step(b);
    *s = (dt_source){.ops = &blend_ops, .self = b};
    *out = s;
    return DT_OK;
}
