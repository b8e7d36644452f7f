/* Shared inside plan/ (memory.c, memory_dit.c, comm.c, cost.c): the padded parameter arena
 * unit by unit, and what activation checkpointing reruns. Nothing outside plan/ includes it. */
#ifndef DT_PLAN_PLAN_IMPL_H
#define DT_PLAN_PLAN_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "plan/layout.h"
#include "plan/schedule.h"

/* Floats of each unit this tp rank holds (held[u] for u in 0..L+1; NULL: all), in unit order,
 * each tensor its tp shard padded to 16 floats (GPT-2: a stage with the head but not the
 * embedding adds its copy of wte to the final unit). Returns the number of units. */
int dt_plan_local_units(const dt_model_config *m, int tp, const bool *held, int64_t *ucount);

/* The video DiT (plan/memory_dit.c). Its fixed sizes, as models/dit.h has them (plan/ does not
 * include models/; tests/plan/test_memory_dit.c holds the two equal). */
enum { DT_PLAN_DIT_FREQ_DIM = 256, DT_PLAN_DIT_MLP_RATIO = 4 };
/* Floats of DiT unit u (0: embedders, 1..L: blocks, L+1: final layer) on one of `tp` ranks,
 * tensors padded to 16 floats. */
int64_t dt_plan_dit_unit_floats(const dt_model_config *m, int u, int tp);
/* The DiT's parameters, unpadded (dt_plan_param_count's answer for model.arch = dit). */
double dt_plan_dit_param_count(const dt_model_config *m);
/* One rank of a DiT run, as the memory model sees it. */
typedef struct dt_plan_dit_rank {
    int B;                          /* clips per micro-batch */
    int sp;                         /* Ulysses degree: this rank's rows are B S / (cp sp) */
    int cp, cp_chunks;              /* the ring, and the chunks of a clip a ring rank holds */
    int tp;                         /* Megatron degree: heads and MLP columns split */
    bool sequence_tp;               /* Megatron-SP: the residual rows split over tp too */
    bool split;                     /* split backward (zero-bubble): per-slot weight-pass
                                     * output gradients */
    int n_slots;                    /* micro-batches whose activations are held at once */
    int n_grads;                    /* boundary gradient buffers (the schedule's) */
    const bool *held;               /* [L + 2] units this rank holds */
    const dt_plugin_config *plugin; /* ac, ac_every */
    bool lp, training;              /* 16-bit matmuls; gradients and backward scratch */
} dt_plan_dit_rank;
/* Bytes of the DiT's "dit.activations" and "dit.transients" arenas on that rank. */
void dt_plan_dit_arenas(const dt_model_config *m, const dt_plan_dit_rank *r, int64_t *acts,
                        int64_t *temp);
/* The trainer's batch buffers for `rows` clips: inputs (x_t, t, label) and targets (v). */
void dt_plan_dit_batch_bytes(const dt_model_config *m, int rows, int64_t *inputs, int64_t *targets);
/* One pipeline boundary tensor of B clips: this rank's residual rows (B S / sp / rows_split)
 * and silu(c) [B, C]. */
int64_t dt_plan_dit_boundary_bytes(const dt_model_config *m, int B, int cp, int sp, int rows_split);

/* The block of units [u0, u1) whose rerun is skipped when its backward follows its own
 * forward at once (models/gpt_ac.c: the shared set still holds the last checkpointed block's
 * forward); -1 when none is (no checkpointed block, or act_compress, which always restores). */
int dt_plan_fresh_block(const dt_plugin_config *p, int u0, int u1, int n_layer);

#endif
