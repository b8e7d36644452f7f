/* Documents kept apart (data.doc_mask): the GPT's reading of a batch of (id, document start)
 * pairs. See gpt_impl.h. */
#include "models/gpt_impl.h"

dt_status dt_gpt_read_input(dt_gpt *g, const int32_t *input, int B, int T, const int32_t **ids) {
    *ids = input;
    if (!g->doc_mask)
        return DT_OK;
    /* a token's place in the whole sequence: a ring's chunks counted where they lie */
    int Tc = T / g->n_chunks;
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        int t = (int)(i % T), at = g->chunk[t / Tc] * Tc + t % Tc;
        g->ids[i] = input[2 * i];
        g->doc[i] = input[2 * i + 1];
        g->pos[i] = at - g->doc[i];
        if (g->pos[i] < 0 || g->pos[i] >= g->n_positions)
            return dt_err_set(DT_ERR_ARG,
                              "model: token %lld of the batch starts its document at %d, "
                              "outside its sequence",
                              (long long)i, g->doc[i]);
    }
    g->seq.pos = g->pos;
    g->seq.doc_start = g->doc;
    *ids = g->ids;
    return DT_OK;
}
