/* Sequential and shuffled batches over a token shard. See loader.h. */
#include "train/loader.h"

#include <string.h>

#include "core/rng.h"

dt_status dt_loader_open(dt_loader *ld, const char *path, int vocab_size, int B, int T,
                         bool shuffle, uint64_t seed) {
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
    return DT_OK;
}

void dt_loader_close(dt_loader *ld) { dt_tokens_close(&ld->shard); }

static int64_t row_start(const dt_loader *ld, int row) {
    if (!ld->shuffle)
        return ld->pos + (int64_t)row * ld->T;
    uint64_t span = (uint64_t)(ld->shard.n_tok - ld->T); /* starts 0 .. n - T - 1 */
    return (int64_t)(dt_rng_u64(ld->seed, "data.shuffle", (uint64_t)ld->step * ld->B + row) %
                     span);
}

void dt_loader_rows(const dt_loader *ld, int row0, int n_rows, int32_t *inputs,
                    int32_t *targets) {
    for (int r = 0; r < n_rows; r++) {
        const uint16_t *src = ld->shard.tok + row_start(ld, row0 + r);
        int32_t *in = inputs + (int64_t)r * ld->T, *tg = targets + (int64_t)r * ld->T;
        for (int t = 0; t < ld->T; t++) {
            in[t] = src[t];
            tg[t] = src[t + 1];
        }
    }
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
