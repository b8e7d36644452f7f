/* Activations on disk (plugin.act_offload = disk), the idea of ZeRO-Infinity's activation
 * offload on a CPU: every (slot, block)'s saved set, with a copy of the block's input, is one
 * record of a spill file (io/spill.h). Two frames in the activations arena carry the sets:
 *
 *   forward of block l      computes into a frame, which is then written out while block
 *                           l + 1 computes into the other;
 *   backward of block l     finds its set in a frame (still there from the forward, or read
 *                           ahead), and asks for block l - 1's to be read into the other
 *                           frame while it computes.
 *
 * So the sets' resident memory is two frames whatever the depth and the micro-batches, and
 * the bytes the backward sees are the bytes the forward wrote: gradients are bit-identical
 * to keeping them in memory. A frame is taken over only after its last request is done; a
 * set is looked up by its (slot, block) tag, which a new forward of that slot and block
 * clears from every other frame. Errors of the transfers reach the caller at the next wait
 * on that frame, at the latest in the same step's backward.
 */
#include "models/gpt_impl.h"

#include <string.h>

bool dt_gpt_offload_interior(const dt_gpt *g, int l) {
    return g->offload && l > 0 && l < g->cfg.n_layer && dt_gpt_holds_block(g, l - 1) &&
           dt_gpt_holds_block(g, l);
}

void dt_gpt_carve_frames(dt_gpt *g, dt_carver *cv, unsigned fields, unsigned q8_fields) {
    size_t x_bytes = dt_gpt_rows_max(g).Nr * g->dims.C * sizeof(float);
    for (int i = 0; i < DT_GPT_FRAMES; i++) {
        dt_gpt_frame *f = &g->frames[i];
        size_t at = cv->used;
        f->base = cv->base ? cv->base + at : NULL;
        f->x = dt_gpt_carve(cv, x_bytes);
        dt_gpt_carve_fields(g, cv, fields, &f->acts);
        if (q8_fields)
            dt_gpt_carve_q8(g, cv, q8_fields, &f->q8);
        f->bytes = cv->used - at;
        f->slot = f->block = -1;
        f->ticket = -1;
        f->pinned = false;
    }
}

/* held blocks before l: a slot's records are its held blocks in order */
static int64_t record_of(const dt_gpt *g, int slot, int l) {
    int before = 0, held = 0;
    for (int b = 0; b < g->cfg.n_layer; b++) {
        held += dt_gpt_holds_block(g, b);
        before += b < l && dt_gpt_holds_block(g, b);
    }
    return (int64_t)slot * held + before;
}

dt_status dt_gpt_offload_open(dt_gpt *g, const char *dir, const char *tag) {
    int held = 0;
    for (int l = 0; l < g->cfg.n_layer; l++)
        held += dt_gpt_holds_block(g, l);
    if (held == 0)
        return DT_OK;
    char name[96];
    snprintf(name, sizeof name, "dtrain-acts-%s", tag && tag[0] ? tag : "r0");
    dt_scratch_spec spec = {.dir = dir,
                            .key = "plugin.act_offload_dir",
                            .name = name,
                            .what = "this rank's activations"};
    return dt_spill_open(&spec, (int64_t)g->n_slots * held, g->frames[0].bytes, &g->spill);
}

void dt_gpt_offload_close(dt_gpt *g) {
    dt_spill_close(g->spill);
    g->spill = NULL;
}

bool dt_gpt_act_disk_stats(const dt_gpt *g, dt_model_disk_stats *out) {
    if (!g->spill)
        return false;
    dt_spill_stats s = dt_spill_stats_of(g->spill);
    *out = (dt_model_disk_stats){
        .written = s.bytes_written, .read = s.bytes_read, .busy_s = s.busy_s, .wait_s = s.wait_s};
    return true;
}

static dt_gpt_frame *holding(dt_gpt *g, int slot, int l) {
    for (int i = 0; i < DT_GPT_FRAMES; i++)
        if (g->frames[i].slot == slot && g->frames[i].block == l)
            return &g->frames[i];
    return NULL;
}

/* A frame nobody is at work on, its last request done, tagged (slot, l) and no other. */
static dt_status take(dt_gpt *g, int slot, int l, dt_gpt_frame **out) {
    dt_gpt_frame *f = NULL;
    for (int k = 0; k < DT_GPT_FRAMES && !f; k++) {
        dt_gpt_frame *c = &g->frames[(g->next_frame + k) % DT_GPT_FRAMES];
        if (!c->pinned)
            f = c;
    }
    if (!f)
        return dt_err_set(DT_ERR_ARG,
                          "model: act_offload has no free frame for block %d of "
                          "slot %d",
                          l, slot);
    g->next_frame = (int)(f - g->frames + 1) % DT_GPT_FRAMES;
    DT_TRY(dt_spill_wait(g->spill, f->ticket));
    f->ticket = -1;
    for (dt_gpt_frame *old; (old = holding(g, slot, l));)
        old->slot = old->block = -1;
    f->slot = slot;
    f->block = l;
    *out = f;
    return DT_OK;
}

dt_status dt_gpt_frame_for_forward(dt_gpt *g, int slot, int l, dt_gpt_frame **out) {
    DT_TRY(take(g, slot, l, out));
    (*out)->pinned = true;
    return DT_OK;
}

void dt_gpt_frame_put(dt_gpt *g, dt_gpt_frame *f, int slot, int l) {
    f->ticket = dt_spill_put(g->spill, record_of(g, slot, l), f->base);
    f->pinned = false;
}

/* (slot, l)'s set into a frame, unless one holds it: returns that frame, request queued */
static dt_status ask(dt_gpt *g, int slot, int l, dt_gpt_frame **out) {
    if ((*out = holding(g, slot, l)))
        return DT_OK;
    DT_TRY(take(g, slot, l, out));
    (*out)->ticket = dt_spill_get(g->spill, record_of(g, slot, l), (*out)->base);
    return DT_OK;
}

dt_status dt_gpt_frame_fetch(dt_gpt *g, int slot, int l, dt_gpt_frame **out) {
    dt_gpt_frame *f;
    DT_TRY(ask(g, slot, l, &f));
    /* a write still in flight only reads the frame, but the backward may reuse its pieces */
    DT_TRY(dt_spill_wait(g->spill, f->ticket));
    f->ticket = -1;
    f->pinned = true;
    *out = f;
    return DT_OK;
}

void dt_gpt_frame_done(dt_gpt_frame *f) { f->pinned = false; }

void dt_gpt_frame_forget(dt_gpt_frame *f) {
    f->pinned = false;
    f->slot = f->block = -1;
}

dt_status dt_gpt_frame_ahead(dt_gpt *g, int slot, int l) {
    dt_gpt_frame *f;
    return ask(g, slot, l, &f);
}
