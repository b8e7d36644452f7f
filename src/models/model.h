/* The model interface: what the engine, the pipeline executor, checkpoints, the booster and
 * the sampler know of a model. A model is a table of operations (dt_model_ops) and the
 * implementation's own state (`self`), as a ggml backend is; GPT-2 and Llama (models/gpt*.c)
 * and the video DiT (models/dit*.c) implement it, and dt_model_create picks the
 * implementation by model.arch, so src/train/ names no model. Slots marked (optional) may
 * be NULL; the dt_model_* wrappers below are the calls, and say what an absent slot means.
 *
 * A model is cut into UNITS, the granularity at which an engine moves weights and gradients
 * (GPT: the embeddings, each block, the final norm and head). Global units are numbered in
 * forward order; a rank holds some of them (all, or its pipeline stages') under LOCAL ids
 * 0..n_units-1 in global order, each a contiguous range of the local parameter arena whose
 * storage the engine may rebind (ZeRO-2/3 buffers). Forward and backward run by global unit
 * range and micro-batch slot; hooks around every unit's work let the engine gather weights
 * just in time and reduce gradients as soon as they are complete.
 * Single-threaded control, as the implementations.
 */
#ifndef DT_MODELS_MODEL_H
#define DT_MODELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/comm.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/param.h"
#include "core/status.h"

/* How a model is built: the largest micro-batch, precision, what the caller binds, the splits
 * it runs under. Zero fields mean fp32 inference on one process holding every unit; B and T
 * must be set. */
/* One shape of clip a DiT trains on (a bucket of data.buckets) and the most clips of it one
 * micro-batch holds. */
typedef struct dt_model_shape {
    int frames, height, width;
    int B;
} dt_model_shape;

typedef struct dt_model_opts {
    int B, T; /* the largest micro-batch the model will see */
    /* a DiT's shapes of clip (data.buckets): the model holds room for the largest of them and
     * dt_model_use_shape switches between them (B and T are then shape 0's); NULL: the
     * config's one shape */
    const dt_model_shape *shapes;
    int n_shapes;
    dt_precision precision;
    bool training;         /* false: no gradients, no backward scratch */
    bool external_weights; /* the caller binds each unit's weights (ZeRO-3 gathers them) */
    bool external_grads;   /* the caller binds each unit's gradients (ZeRO-2/3 buckets) */
    /* Splits (borrowed; NULL = not split). tp: heads, MLP columns and the vocabulary;
     * sp: Ulysses sequence parallelism; sequence_tp: Megatron-SP over the tp ranks. */
    dt_comm *tp, *sp;
    bool sequence_tp;
    /* cp: context parallelism (ring attention); T is then this rank's tokens of a sequence,
     * its chunks (dt_ring_chunks: zigzag or contiguous) in order */
    dt_comm *cp;
    bool cp_zigzag;
    /* Pipeline stages: the global units this rank holds (one flag per global unit, NULL =
     * all), the micro-batches whose activations it holds at once (0 = 1), and the pipeline
     * group (borrowed; NULL = none), over which whole-model gathers are completed. */
    const bool *units;
    int n_slots;
    int n_grads; /* buffers of the gradient crossing a chunk boundary (0 = n_slots) */
    dt_comm *pp;
    bool split_backward; /* keep what weight_units needs, per slot (zero-bubble) */
    /* Activation memory: checkpointing of block l when l % ac_every == 0 (0 = 1), and int8
     * storage of the saved tensors. Gradients stay bit-identical to DT_AC_NONE; int8 storage
     * approximates them. */
    dt_ac_mode ac;
    int ac_every;
    dt_act_compress act_compress;
    /* act_offload = disk: the saved tensors and block inputs go to a file under
     * act_offload_dir (borrowed for init), named by act_offload_tag ("r3"), and come back
     * ahead of the backward; gradients stay bit-identical to keeping them in memory */
    dt_offload act_offload;
    const char *act_offload_dir, *act_offload_tag;
    /* data.doc_mask: each input token is an int32 pair (id, the position in its sequence
     * where its document starts; dt_docs): attention stays within documents and positions
     * restart at each (GPT) */
    bool doc_mask;
} dt_model_opts;

typedef enum dt_model_phase {
    DT_PHASE_FORWARD,
    DT_PHASE_HEAD,     /* the output layer and loss (and its gradient, when training) */
    DT_PHASE_BACKWARD, /* on leave, the unit's gradients are complete for this micro-batch
                        * (split backward: its input gradient; the weights' come later) */
    DT_PHASE_WEIGHTS,  /* split backward's weight-gradient pass */
    DT_PHASE_COUNT
} dt_model_phase;

/* Called around every unit's work (local unit ids), so an engine can gather weights just in
 * time, prefetch the next unit, and reduce gradients as soon as they are complete. Either
 * may be NULL. */
typedef struct dt_model_hooks {
    void *ctx;
    dt_status (*enter)(void *ctx, int unit, dt_model_phase phase);
    dt_status (*leave)(void *ctx, int unit, dt_model_phase phase);
} dt_model_hooks;

/* One micro-batch as the model reads it. The engine and the pipeline only pass it on; what
 * input and target hold is the model's business: GPT reads int32 token ids [B, T] and int32
 * next-token targets [B, T] (< 0: ignored); a video model may read float clips and their
 * regression targets. target may be NULL where no loss is taken. Borrowed. */
typedef struct dt_batch {
    const void *input, *target;
    int B, T; /* samples, and positions per sample (tokens; a DiT's patches) */
} dt_batch;

/* A tensor two pipeline stages both hold (GPT-2's token embedding on the first stage, which
 * is also the LM head on the last). Their gradients are summed over the engine's `tied`
 * group (the first and last stage of a replica) after each step, so both take the same
 * update and stay bit-identical. `copy`: this stage's tensor duplicates one the other stage
 * holds: not saved, and not counted in the gradient norm. Both stages list their ties in the
 * same order; a stage outside the group, or a model without ties, lists none. */
typedef struct dt_model_tie {
    int param; /* local table index */
    bool copy;
} dt_model_tie;
enum { DT_MODEL_MAX_TIES = 2 };

/* A model's own arenas: fp32 weights (NULL with external weights), gradients (NULL when not
 * training or with external gradients), and a whole 16-bit copy of the weights (NULL in fp32,
 * with external weights, or where the model casts unit by unit). */
typedef struct dt_model_arenas {
    float *w, *g;
    dt_bf16 *lp;
} dt_model_arenas;

/* A named size of the model's shape (recorded in checkpoint manifests and compared when a
 * checkpoint is loaded), e.g. {"n_layer", 12}. key: a static string. */
typedef struct dt_model_size {
    const char *key;
    int64_t value;
} dt_model_size;
enum { DT_MODEL_MAX_SIZES = 16 };

/* Bytes a model moved to and from its activation file (plugin.act_offload = disk), the time
 * its I/O thread spent in them, and the part the computation waited for (the exposed I/O). */
typedef struct dt_model_disk_stats {
    int64_t written, read;
    double busy_s, wait_s;
} dt_model_disk_stats;

typedef struct dt_model_ops {
    void (*free)(void *self);
    const dt_model_config *(*config)(const void *self);

    /* units (local ids: the tables' units) and their storage */
    /* point a unit's views at storage holding its range (w[0] is arena element `first`);
     * NULL leaves that kind of view as it is */
    void (*bind_unit)(void *self, int unit, float *w, float *grad, dt_bf16 *w_lp);
    void (*set_hooks)(void *self, const dt_model_hooks *hooks);

    /* parameter tables: this rank's (the local arena, its units) and the single process's
     * (files); the model's own arenas */
    dt_param_tables (*tables)(const void *self);
    dt_model_arenas (*arenas)(void *self);
    /* the group the tables' shard specs split over (tp; a size-1 comm when not split) */
    dt_comm *(*tp)(const void *self);
    /* (optional: none) the tied tensors held here (see dt_model_tie) into out; how many */
    int (*ties)(const void *self, dt_model_tie out[DT_MODEL_MAX_TIES]);
    /* the fp32 weights changed: refresh (or mark stale) the 16-bit weights made from them */
    void (*sync_lp)(void *self);

    /* Forward over global units [u0, u1) (all held here) on micro-batch slot `slot`: unit 0
     * reads the batch's input, a later first unit the boundary tensor at position u0 - 1;
     * the chunk leaves its output at position u1 - 1 (the last unit: ready for loss_slot). */
    dt_status (*forward_units)(void *self, int slot, int u0, int u1, const dt_batch *b);
    /* The loss of the slot's last forward (which must be the last forward this rank ran)
     * against b->target: loss_sum = the sum of per-position losses; with backward, the
     * gradient of grad_scale * loss_sum is started (continued by backward_units). */
    dt_status (*loss_slot)(void *self, int slot, const dt_batch *b, float grad_scale, bool backward,
                           double *loss_sum);
    /* Backward over [u0, u1) of the slot's micro-batch, with gradient buffer `grad` (of
     * n_grads): from the loss gradient when u1 is the last global unit, else from the
     * gradient of its output placed in boundary_grad(grad); leaves the gradient of its
     * input there. Gradients accumulate. split: input gradients only (and cheap ones), the
     * matmuls' weight gradients come from weight_units later (a model built with
     * split_backward). */
    dt_status (*backward_units)(void *self, int slot, int grad, int u0, int u1, const dt_batch *b,
                                bool split);
    /* (optional: no split backward) the weight gradients split backward left out */
    dt_status (*weight_units)(void *self, int slot, int u0, int u1, const dt_batch *b);
    /* activations and gradients crossing a chunk boundary: boundary_count floats each */
    int64_t (*boundary_count)(const void *self, int B, int T);
    float *(*boundary)(void *self, int slot, int position, int B, int T);
    float *(*boundary_grad)(void *self, int grad, int B, int T);
    /* on: the forwards from here are evaluation, with no backward after them (nothing need
     * be kept for one: a GPT's activations on disk are not written); off: evaluation is over,
     * every slot's saved activations are no longer needed */
    void (*evaluating)(void *self, bool on);

    /* Collective over tp and pp: every rank's local arena -> the full arena (every rank). */
    dt_status (*gather_full)(void *self, const float *local, float *full);

    /* model FLOPs of one sample's forward and backward at sequence length T (for MFU) */
    double (*flops_per_sample)(const void *self, int T);
    /* Weights in the model's exchange format (GPT: HuggingFace safetensors), over FULL arenas
     * (full_numel floats); load fills a whole arena of the model (numel floats). */
    dt_status (*save)(const void *self, const float *weights, const char *path);
    dt_status (*load)(const void *self, float *weights, const char *path);
    /* the named sizes of the shape, in a fixed order; returns how many (<= DT_MODEL_MAX_SIZES) */
    int (*sizes)(const void *self, dt_model_size *out);
    /* (optional) a one-line description for logs, e.g. "2 layers, 4 heads (4 kv), ..." */
    void (*describe)(const void *self, char *out, size_t n);
    /* (optional: the model makes no output to sample from) the model's output for the
     * batch's inputs on a one-process model, out = [B, target floats per sample] (a DiT: the
     * predicted velocity, unpatchified); b->target is not read */
    dt_status (*predict)(void *self, const dt_batch *b, float *out);
    /* (optional: one shape) the following micro-batches are of shape k of the init shapes;
     * what the slots keep of another shape is gone */
    dt_status (*use_shape)(void *self, int k);
    /* (optional: no token sampling) logits [vocab] of the last position of one sequence
     * tokens[0..T) (T <= the init T), on a one-process model */
    dt_status (*logits_last)(void *self, const int32_t *tokens, int T, float *logits);
    /* (optional: the caller zeroes gradients) the unit's gradient storage (-1: every unit's)
     * holds nothing of this step: the next write of each of its gradients overwrites it, as
     * if it had been zeroed (an exact zero may keep its sign); the storage is not touched */
    void (*fresh_grads)(void *self, int unit);
    /* (optional: activations never leave memory) what the activation file has moved since the
     * model was built; false when the model keeps its activations in memory */
    bool (*act_disk_stats)(const void *self, dt_model_disk_stats *out);
} dt_model_ops;

typedef struct dt_model {
    const dt_model_ops *ops; /* static */
    void *self;              /* owned: freed by ops->free */
} dt_model;

/* ---- implementations, picked by model.arch (models/model.c) ------------------------------- */

/* Builds one: *out stays NULL on failure. */
typedef dt_status (*dt_model_create_fn)(const dt_model_config *cfg, const dt_model_opts *opts,
                                        dt_mem *mem, dt_model **out);
dt_status dt_model_create(const dt_model_config *cfg, const dt_model_opts *opts, dt_mem *mem,
                          dt_model **out);
void dt_model_free(dt_model *m);
/* How a run splits one model replica's work: the degrees and the whole sequence. */
typedef struct dt_model_split {
    int tp, sp, cp;   /* tensor, Ulysses and ring (context) parallel degrees, each >= 1 */
    int cp_chunks;    /* chunks of a sequence each ring rank holds: 2 (zigzag) or 1 */
    bool sequence_tp; /* Megatron-SP: the residual rows split over tp */
    int seq_len;      /* a whole sequence's tokens (train.seq_len) */
} dt_model_split;
/* Whether the model splits so: DT_OK, or one error naming the numbers and the sizes that
 * would work. Also checked when a model is built. */
dt_status dt_model_check_split(const dt_model_config *cfg, const dt_model_split *s);
/* The split a plugin config asks for at seq_len. */
dt_model_split dt_model_split_of(const dt_plugin_config *p, int seq_len);
/* dt_model_check_split of every bucket of clip shape of c (data.buckets; none: DT_OK), at its
 * own clip: every bucket that does not split named in one error. */
dt_status dt_model_check_buckets(const dt_config *c);
/* Fill the model shape from a weights file's metadata; keys absent keep cfg's values. */
dt_status dt_model_config_from_file(const char *path, dt_model_config *cfg);
/* The shape fields of cfg->arch's model from its named sizes (dt_model_sizes, e.g. read back
 * from a checkpoint manifest; extra entries are ignored): DT_ERR_FORMAT naming the first one
 * missing. */
dt_status dt_model_config_from_sizes(const dt_model_size *sizes, int n, dt_model_config *cfg);

/* ---- calls ------------------------------------------------------------------------------- */

static inline const dt_model_config *dt_model_cfg(const dt_model *m) {
    return m->ops->config(m->self);
}
static inline dt_param_tables dt_model_tables(const dt_model *m) { return m->ops->tables(m->self); }
static inline int dt_model_n_units(const dt_model *m) { return dt_model_tables(m).n_units; }
static inline void dt_model_unit_range(const dt_model *m, int unit, int64_t *first,
                                       int64_t *count) {
    dt_param_tables t = dt_model_tables(m);
    dt_param_unit_range(&t, unit, first, count);
}
static inline void dt_model_bind_unit(dt_model *m, int unit, float *w, float *grad, dt_bf16 *w_lp) {
    m->ops->bind_unit(m->self, unit, w, grad, w_lp);
}
static inline void dt_model_set_hooks(dt_model *m, const dt_model_hooks *hooks) {
    m->ops->set_hooks(m->self, hooks);
}
static inline int dt_model_n_params(const dt_model *m) { return dt_model_tables(m).n_local; }
static inline const dt_param *dt_model_param(const dt_model *m, int i) {
    return &dt_model_tables(m).local[i];
}
static inline int dt_model_n_full_params(const dt_model *m) { return dt_model_tables(m).n_full; }
static inline const dt_param *dt_model_full_param(const dt_model *m, int i) {
    return &dt_model_tables(m).full[i];
}
static inline int64_t dt_model_numel(const dt_model *m) { return dt_model_tables(m).local_numel; }
static inline int64_t dt_model_full_numel(const dt_model *m) {
    return dt_model_tables(m).full_numel;
}
static inline float *dt_model_weights(dt_model *m) { return m->ops->arenas(m->self).w; }
static inline float *dt_model_grads(dt_model *m) { return m->ops->arenas(m->self).g; }
static inline dt_bf16 *dt_model_weights_lp(dt_model *m) { return m->ops->arenas(m->self).lp; }
static inline dt_comm *dt_model_tp(const dt_model *m) { return m->ops->tp(m->self); }
/* the tied tensors held here into out; how many */
static inline int dt_model_ties(const dt_model *m, dt_model_tie out[DT_MODEL_MAX_TIES]) {
    return m->ops->ties ? m->ops->ties(m->self, out) : 0;
}
/* Whether local tensor i is a tied copy (see dt_model_tie): not saved, not in the norm. */
static inline bool dt_model_is_copy(const dt_model *m, int i) {
    dt_model_tie t[DT_MODEL_MAX_TIES];
    for (int k = 0, n = dt_model_ties(m, t); k < n; k++)
        if (t[k].param == i && t[k].copy)
            return true;
    return false;
}
static inline void dt_model_sync_lp(dt_model *m) { m->ops->sync_lp(m->self); }
/* the model's own weights from seed (each tensor's values by full element index, so every
 * layout starts from the single process's), and the 16-bit copies made from them */
static inline void dt_model_init_weights(dt_model *m, uint64_t seed) {
    dt_param_tables t = dt_model_tables(m);
    float *w = dt_model_weights(m);
    DT_ASSERT(w);
    dt_param_init_range(t.local, t.n_local, seed, 0, t.local_numel, w);
    dt_model_sync_lp(m);
}
static inline void dt_model_zero_grad(dt_model *m) {
    float *g = dt_model_grads(m);
    if (g)
        memset(g, 0, (size_t)dt_model_numel(m) * sizeof *g);
}
/* Whether the model overwrites the unit's gradients (-1: all) on their next write; false: it
 * has no fresh_grads and the caller must zero their storage itself. */
static inline bool dt_model_act_disk_stats(const dt_model *m, dt_model_disk_stats *out) {
    return m->ops->act_disk_stats && m->ops->act_disk_stats(m->self, out);
}
static inline bool dt_model_fresh_grads(dt_model *m, int unit) {
    if (!m->ops->fresh_grads)
        return false;
    m->ops->fresh_grads(m->self, unit);
    return true;
}

static inline dt_status dt_model_forward_units(dt_model *m, int slot, int u0, int u1,
                                               const dt_batch *b) {
    return m->ops->forward_units(m->self, slot, u0, u1, b);
}
static inline dt_status dt_model_loss_slot(dt_model *m, int slot, const dt_batch *b,
                                           float grad_scale, bool backward, double *loss_sum) {
    return m->ops->loss_slot(m->self, slot, b, grad_scale, backward, loss_sum);
}
static inline dt_status dt_model_backward_units(dt_model *m, int slot, int grad, int u0, int u1,
                                                const dt_batch *b, bool split) {
    return m->ops->backward_units(m->self, slot, grad, u0, u1, b, split);
}
static inline dt_status dt_model_weight_units(dt_model *m, int slot, int u0, int u1,
                                              const dt_batch *b) {
    if (!m->ops->weight_units)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model %s: no split backward",
                          dt_arch_name(dt_model_cfg(m)->arch));
    return m->ops->weight_units(m->self, slot, u0, u1, b);
}
/* The whole model (every unit held here) on slot 0: forward, loss, backward. */
static inline dt_status dt_model_forward(dt_model *m, const dt_batch *b) {
    return dt_model_forward_units(m, 0, 0, dt_model_n_units(m), b);
}
static inline dt_status dt_model_loss(dt_model *m, const dt_batch *b, float grad_scale,
                                      bool backward, double *loss_sum) {
    return dt_model_loss_slot(m, 0, b, grad_scale, backward, loss_sum);
}
static inline dt_status dt_model_backward(dt_model *m, const dt_batch *b) {
    return dt_model_backward_units(m, 0, 0, 0, dt_model_n_units(m), b, false);
}
static inline int64_t dt_model_boundary_count(const dt_model *m, int B, int T) {
    return m->ops->boundary_count(m->self, B, T);
}
static inline float *dt_model_boundary(dt_model *m, int slot, int position, int B, int T) {
    return m->ops->boundary(m->self, slot, position, B, T);
}
static inline float *dt_model_boundary_grad(dt_model *m, int grad, int B, int T) {
    return m->ops->boundary_grad(m->self, grad, B, T);
}
static inline void dt_model_begin_eval(dt_model *m) { m->ops->evaluating(m->self, true); }
static inline void dt_model_drop_saved(dt_model *m) { m->ops->evaluating(m->self, false); }
static inline dt_status dt_model_gather_full(dt_model *m, const float *local, float *full) {
    return m->ops->gather_full(m->self, local, full);
}
/* this rank's local arena out of a full one (no communication) */
static inline void dt_model_take_shard(const dt_model *m, const float *full, float *local) {
    dt_param_tables t = dt_model_tables(m);
    dt_param_take_shard(&t, full, local);
}
static inline double dt_model_flops_per_sample(const dt_model *m, int T) {
    return m->ops->flops_per_sample(m->self, T);
}
static inline dt_status dt_model_save(const dt_model *m, const float *weights, const char *path) {
    return m->ops->save(m->self, weights, path);
}
static inline dt_status dt_model_load(const dt_model *m, float *weights, const char *path) {
    return m->ops->load(m->self, weights, path);
}
static inline int dt_model_sizes(const dt_model *m, dt_model_size out[DT_MODEL_MAX_SIZES]) {
    return m->ops->sizes(m->self, out);
}
/* "" when the model has no description */
static inline void dt_model_describe(const dt_model *m, char *out, size_t n) {
    if (n > 0)
        out[0] = 0;
    if (m->ops->describe)
        m->ops->describe(m->self, out, n);
}
static inline dt_status dt_model_logits_last(dt_model *m, const int32_t *tokens, int T,
                                             float *logits) {
    if (!m->ops->logits_last)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model %s makes no token logits to sample from",
                          dt_arch_name(dt_model_cfg(m)->arch));
    return m->ops->logits_last(m->self, tokens, T, logits);
}

static inline dt_status dt_model_use_shape(dt_model *m, int k) {
    if (m->ops->use_shape)
        return m->ops->use_shape(m->self, k);
    return k == 0 ? DT_OK
                  : dt_err_set(DT_ERR_UNSUPPORTED, "model %s trains on one shape of input",
                               dt_arch_name(dt_model_cfg(m)->arch));
}

static inline dt_status dt_model_predict(dt_model *m, const dt_batch *b, float *out) {
    if (!m->ops->predict)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model %s has no predict operation",
                          dt_arch_name(dt_model_cfg(m)->arch));
    return m->ops->predict(m->self, b, out);
}

#endif
