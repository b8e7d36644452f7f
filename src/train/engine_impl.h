/* The inside of a dt_engine, shared by its files (engine.c: set-up, the hooks, ZeRO's
 * collectives, the step and the update; engine_state.c: whole-arena state for checkpoints and
 * moves between layouts). Nothing outside train/engine*.c includes it.
 */
#ifndef DT_TRAIN_ENGINE_IMPL_H
#define DT_TRAIN_ENGINE_IMPL_H

#include "optim/adamw.h"
#include "plan/layout.h"
#include "train/engine.h"

enum { N_SLOTS = 2 };

typedef struct unit_buf {
    int wunit;        /* unit whose weights the buffer holds (stage 3), -1 none */
    bool lp_ready;    /* 16-bit copy made for wunit */
    float *w;         /* stage 3 gathered weights */
    dt_bf16 *lp;      /* their bf16/fp16 copy (16-bit modes; type e->mm) */
    dt_comm_req wreq; /* pending gather */
    int gunit;        /* unit whose gradient reduce-scatter is pending, -1 none */
    float *g, *piece; /* stages 2-3: unit gradient, and this rank's reduced part of it */
    dt_comm_req greq;
} unit_buf;

struct dt_engine {
    dt_model *model;
    dt_comm *dp;        /* borrowed */
    dt_comm *pp, *tied; /* borrowed or NULL */
    bool pipelined;     /* pp > 1: the schedule drives forward and backward */
    /* ZeRO 2/3 under a split-backward schedule: a unit's gradients are complete only after
     * its W, long after its backward left it, so they accumulate in one whole local arena
     * (ZeRO-1's gradient memory) and are reduce-scattered once, in finish */
    float *g_whole;
    dt_mem *mem; /* borrowed */
    int zero, n_units;
    dt_grad_home *home; /* [n_units] where each unit's gradients live, decided at init */
    bool lp, overlap;
    dt_dtype mm; /* matmul operand type: what the 16-bit copies hold */
    int64_t n_total, S, own_first, own_count;
    int *counts; /* [n_units + 1][dp]: per unit, then the whole arena (last row) */
    int64_t *ufirst, *ucount;
    float *w_full, *g_full; /* the model's own arenas (stages 0-2 / 0-1), borrowed */
    dt_bf16 *lp_full;
    float *w_shard, *g_shard;
    bool *shard_fresh; /* [n_units] stages 2-3: the unit's piece of g_shard not written this step */
    dt_adamw *opt;
    /* train.ema_decay: the weights' average over the optimizer's range (NULL: none), and
     * whether it still waits for the first update's weights */
    float *ema, ema_decay;
    bool ema_fresh;
    /* stages 0-1: buckets of whole units, reduced once their lowest unit is done */
    int *bucket_of_unit; /* bucket whose lowest unit this is, or -1 */
    int64_t *bucket_first, *bucket_count;
    dt_comm_req *bucket_req;
    int n_buckets;
    bool comm_now;
    /* stages 2-3: two rotating buffers for blocks, one each for the embedding and final units */
    unit_buf slot[N_SLOTS], pers[2];
    /* compute seconds of each held unit between its hooks since the last take (the LM head's
     * apart), global unit ids of the local ones, and when the running unit's work began */
    double *busy, head_busy, t_unit;
    int *global;
};

/* the memory accountant's allocation under the engine's name */
dt_status dt_engine__alloc(dt_engine *e, dt_mem_cat cat, const char *name, size_t bytes, void *out);
/* [dp] elements of each rank's part of `unit` (n_units: of the whole arena) */
int *dt_engine__counts_of(dt_engine *e, int unit);
/* stage 3: no gathered unit is current any more (the shard changed) */
void dt_engine__invalidate_weights(dt_engine *e);
/* the fp32 weights the optimizer updates: its range of the arena, and its length */
float *dt_engine__updated_weights(dt_engine *e);
int64_t dt_engine__updated_count(const dt_engine *e);

#endif
