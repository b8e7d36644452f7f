/* Sequential and shuffled batches over a token shard, and the token source (source.h) that
 * puts them behind the batch-source interface. See loader.h. */
#include "train/loader.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/source.h"

dt_status dt_loader_open(dt_loader *ld, const char *path, int vocab_size, int B, int T,
                         bool shuffle, uint64_t seed, const dt_docs *docs) {
    memset(ld, 0, sizeof *ld);
    DT_TRY(dt_tokens_open(path, vocab_size, &ld->shard));
    if (ld->shard.n_tok < (int64_t)B * T + 1) {
        int64_t have = ld->shard.n_tok;
        dt_tokens_close(&ld->shard);
        return dt_err_set(DT_ERR_ARG, "%s holds %lld tokens, fewer than one batch needs "
                          "(batch_size %d x seq_len %d + 1 = %lld)", path, (long long)have, B, T,
                          (long long)B * T + 1);
    }
    ld->B = B;
    ld->T = T;
    ld->shuffle = shuffle;
    ld->seed = seed;
    ld->docs = docs ? *docs : (dt_docs){.eot = -1};
    ld->row = malloc(((size_t)T + 1) * sizeof *ld->row);
    ld->mark = malloc((size_t)T + 1);
    if (!ld->row || !ld->mark) {
        dt_loader_close(ld);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for a row of %d tokens", path, T + 1);
    }
    return DT_OK;
}

void dt_loader_close(dt_loader *ld) {
    dt_tokens_close(&ld->shard);
    free(ld->row);
    free(ld->mark);
    ld->row = NULL;
    ld->mark = NULL;
}

static int64_t row_start(const dt_loader *ld, int row) {
    if (!ld->shuffle)
        return ld->pos + (int64_t)row * ld->T;
    uint64_t span = (uint64_t)(ld->shard.n_tok - ld->T); /* starts 0 .. n - T - 1 */
    return (int64_t)(dt_rng_u64(ld->seed, "data.shuffle", (uint64_t)ld->step * ld->B + row) %
                     span);
}

size_t dt_token_input_row_bytes(int T, const dt_docs *docs) {
    return (size_t)T * sizeof(int32_t) * (docs && docs->on ? 2 : 1);
}

dt_status dt_token_row_read(const dt_tokens *t, int64_t start, int T, const dt_docs *docs,
                            int32_t *row, uint8_t *mark, int32_t *input, int32_t *target) {
    DT_TRY(dt_tokens_read(t, start, T + 1, row));
    memcpy(target, row + 1, (size_t)T * sizeof *row);
    if (!docs || !docs->on) {
        memcpy(input, row, (size_t)T * sizeof *row);
        return DT_OK;
    }
    memset(mark, 0, (size_t)T + 1);
    DT_TRY(dt_tokens_doc_starts(t, start, T, mark));
    for (int i = 0, doc = 0; i < T; i++) {
        if (i > 0 && (mark[i] || (docs->eot >= 0 && row[i - 1] == docs->eot)))
            doc = i;
        input[2 * i] = row[i];
        input[2 * i + 1] = doc;
    }
    return DT_OK;
}

dt_status dt_loader_rows(const dt_loader *ld, int row0, int n_rows, int32_t *inputs,
                         int32_t *targets) {
    size_t in_ints = dt_token_input_row_bytes(ld->T, &ld->docs) / sizeof(int32_t);
    for (int r = 0; r < n_rows; r++)
        DT_TRY(dt_token_row_read(&ld->shard, row_start(ld, row0 + r), ld->T, &ld->docs, ld->row,
                                 ld->mark, inputs + (int64_t)r * in_ints,
                                 targets + (int64_t)r * ld->T));
    return DT_OK;
}

dt_status dt_loader_seek(dt_loader *ld, int64_t pos, int64_t step) {
    int64_t bt = (int64_t)ld->B * ld->T;
    if (pos < 0 || step < 0 || pos > ld->shard.n_tok - bt - 1)
        return dt_err_set(DT_ERR_FORMAT, "data position %lld is outside %s (%lld tokens; a "
                          "batch of %lld starts at most at %lld): the checkpoint was saved with "
                          "other data or is damaged", (long long)pos, ld->shard.path,
                          (long long)ld->shard.n_tok, (long long)bt + 1,
                          (long long)(ld->shard.n_tok - bt - 1));
    ld->pos = pos;
    ld->step = step;
    return DT_OK;
}

void dt_loader_advance(dt_loader *ld) {
    int64_t bt = (int64_t)ld->B * ld->T;
    ld->step++;
    ld->pos += bt;
    if (ld->pos + bt + 1 > ld->shard.n_tok)
        ld->pos = 0;
}

void dt_loader_rewind(dt_loader *ld) {
    ld->pos = 0;
    ld->step = 0;
}

/* ---- the token source: a dt_loader behind dt_source_ops -------------------------------- */

static void tokens_close(void *self) {
    dt_loader_close(self);
    free(self);
}

static size_t tokens_row_bytes(const void *self) {
    return (size_t)((const dt_loader *)self)->T * sizeof(int32_t);
}

static size_t tokens_input_row_bytes(const void *self) {
    const dt_loader *ld = self;
    return dt_token_input_row_bytes(ld->T, &ld->docs);
}

static dt_status tokens_rows(const void *self, int row0, int n, void *input, void *target) {
    return dt_loader_rows(self, row0, n, input, target);
}

static void tokens_advance(void *self) { dt_loader_advance(self); }
static void tokens_rewind(void *self) { dt_loader_rewind(self); }

static void tokens_position(const void *self, int64_t *pos, int64_t *step) {
    const dt_loader *ld = self;
    *pos = ld->pos;
    *step = ld->step;
}

static dt_status tokens_seek(void *self, int64_t pos, int64_t step) {
    return dt_loader_seek(self, pos, step);
}

static const dt_source_ops tokens_ops = {
    .close = tokens_close,
    .input_row_bytes = tokens_input_row_bytes,
    .target_row_bytes = tokens_row_bytes,
    .rows = tokens_rows,
    .advance = tokens_advance,
    .rewind = tokens_rewind,
    .position = tokens_position,
    .seek = tokens_seek,
};

dt_status dt_source_open_tokens(const char *path, int vocab_size, int batch_size, int seq_len,
                                bool shuffle, uint64_t seed, const dt_docs *docs, dt_source **out) {
    *out = NULL;
    if (dt_blend_spec_is(path))
        return dt_source_open_blend(path, vocab_size, batch_size, seq_len, shuffle, seed, docs,
                                    out);
    dt_loader *ld = calloc(1, sizeof *ld);
    dt_source *s = calloc(1, sizeof *s);
    dt_status st =
        ld && s ? dt_loader_open(ld, path, vocab_size, batch_size, seq_len, shuffle, seed, docs)
                : dt_err_set(DT_ERR_OOM, "token source: out of memory");
    if (st != DT_OK) {
        free(ld);
        free(s);
        return st;
    }
    *s = (dt_source){.ops = &tokens_ops, .self = ld};
    *out = s;
    return DT_OK;
}
