/* The inside of a dt_booster, shared by its files (booster.c: set-up, the step, evaluation,
 * checkpoints and export; rebalance.c: pipeline stage boundaries moved by measured time).
 * Nothing outside train/booster.c and train/rebalance.c includes it.
 */
#ifndef DT_TRAIN_BOOSTER_IMPL_H
#define DT_TRAIN_BOOSTER_IMPL_H

#include "dtrain/booster.h"
#include "core/mem.h"
#include "dist/dist.h"
#include "plan/layout.h"
#include "plan/schedule.h"
#include "train/checkpoint.h"
#include "train/engine.h"
#include "train/pipeline.h"
#include "train/source.h"
#include "train/trace.h"

struct dt_booster {
    dt_plugin_config plugin;
    dt_comm *world; /* borrowed */
    dt_mesh *mesh;
    dt_comm *dp;       /* borrowed from the mesh: which rows of the batch this rank reads */
    dt_comm *grad;     /* borrowed: dp x sp, the ranks whose gradients and losses are summed */
    dt_layout lay;     /* this rank's (plan/layout.h): every split below is read from it */
    dt_config lay_cfg; /* what lay was made from (a move of stage boundaries remakes it) */
    /* a DiT's buckets of clip shape (data.buckets; n 0: one shape): each bucket's layout, the
     * one in force (lay is its copy) and each bucket's row bytes */
    dt_buckets bk;
    dt_layout *bucket_lay;
    int bucket;
    size_t bucket_in[DT_MAX_BUCKETS], bucket_tg[DT_MAX_BUCKETS];
    dt_optim_config optim;
    int total_steps;
    dt_lr_schedule_fn lr;
    void *lr_ctx;
    dt_mem *mem;
    dt_engine *engine;
    dt_model *model;        /* borrowed from the engine */
    dt_source *train, *val; /* val NULL: no evaluation */
    /* a micro-batch's rows, or a step's share (rows) under a pipeline, of the sources' rows
     * (in_row and tg_row bytes each) */
    void *inputs, *targets;
    bool doc_mask;   /* token inputs carry document starts */
    float ema_decay; /* the weights' average (dt_engine_opts) */
    /* a ring's rows are cut to this rank's tokens as read (token sequences); a model that
     * reads whole samples (a DiT's clips) takes its own tokens from them */
    int cut;
    size_t in_row, tg_row;
    double data_s; /* seconds this step has spent reading its rows from the sources */
    dt_train_state state;
    /* pipeline (pp > 1) */
    dt_schedule *schedule;
    dt_pipeline *pipeline;
    dt_trace trace;
    bool tracing;
    char timeline[4096];   /* this rank's memory timeline file, "" = none */
    bool stranded;         /* a step failed on this rank while peers may wait for it */
    dt_ckpt_async *saving; /* an async checkpoint save in flight, or NULL */
    int64_t saved_step;    /* the newest checkpoint this run completed, -1: none */
    int rebalance_every;   /* train.rebalance_every / _margin (train/rebalance.c) */
    float rebalance_margin;
};

bool dt_booster__pipelined(const dt_booster *b);

/* ---- buckets of clip shape (booster_buckets.c; no-ops without data.buckets) ---- */
/* b->bk from the spec and each bucket's layout (b->lay: bucket 0's); one error naming the
 * bucket that cannot run */
dt_status dt_booster__bucket_layouts(dt_booster *b, const dt_boost_spec *s);
/* the schedule in force set on every bucket's layout */
dt_status dt_booster__bucket_schedules(dt_booster *b, const char *what);
/* one bucket's training and validation sources, as the spec (of the bucket's shape, batch,
 * seed and folders) asks */
typedef dt_status (*dt_booster_source_fn)(dt_booster *b, const dt_boost_spec *s, dt_source **train,
                                          dt_source **val);
dt_status dt_booster__bucket_sources(dt_booster *b, const dt_boost_spec *s,
                                     dt_booster_source_fn open_one);
/* the shapes the model is built for (dt_model_opts.shapes); returns how many (0: none) */
int dt_booster__model_shapes(const dt_booster *b, dt_model_shape *out);
/* the largest pipeline boundary of any bucket's micro-batch */
dt_status dt_booster__largest_boundary(dt_booster *b, int64_t *floats);
/* bytes of the batch buffer of inputs (or targets) the largest bucket needs */
size_t dt_booster__batch_bytes(const dt_booster *b, bool inputs);
/* the layout, row sizes and model shape of the bucket src's current batch is of */
dt_status dt_booster__enter_bucket(dt_booster *b, const dt_source *src);
static inline bool dt_booster__is_root(const dt_booster *b) { return b->world->rank == 0; }
/* model.init's weights into the engine (rank 0 reads, every rank takes its part) */
dt_status dt_booster__load_weights(dt_booster *b, const char *path);
/* the schedule of b->lay's pipeline, generated or read, validated (collective over world) */
dt_status dt_booster__make_schedule(dt_booster *b);
/* the engine of b->lay (and its pipeline executor under pp): collective over the gradient group */
dt_status dt_booster__build_engine(dt_booster *b);
/* After step b->state.step: train.rebalance_every's check, and a move of the stage boundaries
 * when the chunks' measured times say so (collective over world). */
dt_status dt_booster__rebalance(dt_booster *b);

#endif
