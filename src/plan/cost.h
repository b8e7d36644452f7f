/* The time model: one training step's time on a device described by its rates, from the
 * work the layout gives each rank.
 *
 *   matmuls   FLOPs / the matmul rate: forward 2 x (weights) per token and the LM head;
 *             backward twice the forward, as two products (input and weight gradients; a
 *             split backward runs them as B and W). The rate is the device's peak, or, where
 *             the device can say (dt_plan_device.gemm_rate), its rate at that very shape:
 *             small products run well below the peak
 *   attention the core's FLOPs (causal: half of 4 T hs per head and token; backward twice)
 *             at the attention kernel's own rates, forward and backward apart
 *   pointwise norms and the MLP activation at their measured elements/s; the rest
 *             (residual adds, bias gradients, 16-bit casts of matmul operands, the cross-
 *             entropy, the embedding) as bytes / act_bandwidth (where the device has one and
 *             the tensors fit its act_bytes), else / mem_bandwidth
 *   recompute full activation checkpointing reruns the checkpointed blocks' forward,
 *             selective reruns the attention core
 *   comm      every collective's bus bytes (the convention of core/comm.c) / bandwidth, plus a
 *             latency per call: tensor-parallel region ops and Ulysses all-to-alls inside the
 *             blocks (never hidden), ZeRO's reductions and gathers over dp x sp (hidden behind
 *             the backward when plugin.overlap), pipeline boundary messages
 *   pipeline  the bubble is what the schedule itself gives: every rank's actions are replayed
 *             with these per-action costs, a receive waiting for its send
 * data      a rank's rows of the batch over the source's rate (device data_rate), before its
 *           micro-batches; under a pipeline every stage reads them before its first action
 * Memory-bound passes: the optimizer step (its state streamed once, and the gradient norm,
 * at opt_bandwidth where the device measured it),
 * plugin.offload = disk (the optimizer state read and written through the disk every step)
 * and plugin.act_compress = int8 (each kept tensor read and written once to compress, once to
 * restore). A rate left 0 falls back: attention to the matmul rate, norms and activations to
 * their bytes / mem_bandwidth.
 * The video DiT (model.arch = dit) has its own rows (plan/cost_dit.c): its blocks' products
 * (the adaLN modulations over one row a clip), non-causal attention over the clip, a frame or
 * a position across time, its pointwise passes, and only the collectives it makes (no
 * all-to-all for spatial attention); the device's rates, the pipeline replay (its boundary
 * carries silu(c) too), data parallelism and the optimizer are shared.
 * Pure: no MPI, no tensors; thread-safe when gemm_rate is.
 */
#ifndef DT_PLAN_COST_H
#define DT_PLAN_COST_H

#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "plan/schedule.h"

/* Forward and backward rates of one kernel. */
typedef struct dt_plan_rate2 {
    double fwd, bwd;
} dt_plan_rate2;

/* The three products of a linear layer, whose operands a matmul kernel reads in different
 * orders: the forward x W^T, the input gradient dy W, the weight gradient dy^T x. */
typedef enum { DT_PLAN_GEMM_FWD, DT_PLAN_GEMM_DX, DT_PLAN_GEMM_DW } dt_plan_gemm_op;

/* FLOP/s of one m x k by k x n product of kind op (lp: bf16/fp16 operands); <= 0: use the
 * peak. */
typedef double (*dt_plan_gemm_rate)(void *ctx, int lp, dt_plan_gemm_op op, double m, double n,
                                    double k);

/* The kinds of collective a step runs, as the planner counts their bytes per rank (n: the
 * whole vector's bytes over p ranks): all-reduce 2 n (p - 1) / p, reduce-scatter and
 * all-gather n (p - 1) / p, all-to-all (p - 1) blocks, a message its bytes; each takes latency
 * + bytes / rate. */
typedef enum dt_plan_coll {
    DT_PLAN_ALLREDUCE,
    DT_PLAN_REDUCE_SCATTER,
    DT_PLAN_ALLGATHER,
    DT_PLAN_ALLTOALL,
    DT_PLAN_P2P,
    DT_PLAN_COLL_COUNT
} dt_plan_coll;

enum { DT_PLAN_COLL_SIZES = 8, DT_PLAN_ATTN_SEQS = 8 };

/* The attention kernel's rates over sequences of T tokens (lp: 16-bit modes), whose per-
 * sequence work a short sequence's FLOPs do not show (the DiT's temporal attention over 8
 * frames runs at 0.4x the rate of its spatial attention over 16 tokens here). */
typedef struct dt_plan_attn_seq {
    int lp, T;
    dt_plan_rate2 rate;
} dt_plan_attn_seq;

typedef struct dt_plan_device {
    double flops_fp32, flops_16; /* matmul FLOP/s per rank: fp32, and bf16/fp16 operands */
    double bandwidth;            /* bytes/s one rank moves in a collective or a message */
    double latency;              /* seconds per collective call or message */
    double mem_bandwidth;        /* bytes/s read and written from memory (the optimizer step
                                  * streams its state) */
    /* bytes/s read and written by a pass over a tensor of at most act_bytes, where that beats
     * mem_bandwidth (`this`: a CPU's cache holds a micro-batch's activations); 0: none */
    double act_bandwidth, act_bytes;
    /* bytes/s written to and read from the offload files (plugin.offload and act_offload =
     * disk): the disk's sustained rates, not its page cache's */
    double disk_write, disk_read;
    dt_plan_rate2 attn_fp32, attn_16; /* attention core FLOP/s (fwd counts 2 T hs a token and
                                       * head, bwd twice that); 0: the matmul rate */
    int n_attn_seq; /* the same at the sequences listed (`this`: each a model's blocks see) */
    dt_plan_attn_seq attn_seq[DT_PLAN_ATTN_SEQS];
    dt_plan_rate2 norm, act;       /* elements/s: a norm over [tokens, C]; the MLP activation
                                    * over [tokens, F]; 0: from mem_bandwidth */
    dt_plan_rate2 norm_16, act_16; /* the same in 16-bit modes, whose kernels write 16-bit
                                    * copies (`this`); 0: norm and act */
    dt_plan_gemm_rate gemm_rate;   /* NULL: every product at the peak (or as below) */
    void *gemm_ctx;
    /* What a tuned implementation reaches on a datasheet device (presets; 0 = not modelled:
     * `this` is measured, so its rates are already what runs). */
    double gemm_efficiency; /* share of the matmul peak a large product reaches */
    double gemm_half;       /* a product dimension at which it reaches half of that: each
                             * of m, n, k scales the rate by x / (x + gemm_half) */
    double mem_efficiency;  /* share of mem_bandwidth a memory-bound kernel streams at */
    int node_size;          /* ranks joined by `bandwidth` (NVLink); groups spanning nodes */
    double inter_bandwidth; /* move at inter_bandwidth bytes/s a rank (InfiniBand) */
    /* Measured by `dtrain probe` (n_coll 0: not measured): bytes/s a rank moves in each kind
     * of collective, in place of `bandwidth` (a group spanning nodes scales it by
     * inter_bandwidth / bandwidth), at n_coll message sizes coll_at[] (the whole message, as
     * dtrain probe's --mib counts it: an all-reduce's vector, the whole a reduce-scatter
     * splits or an all-gather makes, an all-to-all's send buffer, a message; ascending; 0:
     * every size). A call between two sizes moves at the rate interpolated in the logarithm
     * of its size, one outside them at the nearest size's. And the share of a collective that
     * stays exposed while compute runs beside it (the data-parallel reductions and ZeRO-3's
     * gathers; 0: all of it hides; above 1, up to 2: side by side they take longer than one
     * after the other). */
    int n_coll;
    double coll_at[DT_PLAN_COLL_SIZES];
    double coll[DT_PLAN_COLL_SIZES][DT_PLAN_COLL_COUNT];
    double exposed_share;
    unsigned hides; /* DT_PLAN_HIDE_*: what the device's own software overlaps that dtrain's
                     * CPU runtime does not (the GPU presets: a tuned implementation) */
    /* The device's software reduces tensor-parallel activations in place and lets autograd
     * add the gradients (Megatron-LM on GPUs), so a block makes none of the copies, adds and
     * zeroed sums dtrain's CPU runtime makes around its tp collectives (false: it does) */
    bool tp_in_place;
    /* Ranks sharing one machine's cores (`this`): cores to run on and threads a rank runs;
     * with more threads than cores the step is at least the ranks' CPU time over the cores.
     * 0: a device a rank. */
    int cores, threads;
    /* A measured step over the modelled one (`this`: a training step of one of the layout's
     * ranks, its collectives moving nothing, timed side by side as the run's ranks share the
     * machine, over the time model's step of it on these rates with its collectives free),
     * scaling every pass and the optimizer: what the kernels timed alone
     * miss (operands the step leaves out of cache, calls too short to reach their rate, the
     * neighbours' pull on memory). 0: 1. */
    double step_ratio;
    /* Rows (sequences, clips) of the batch a rank's data source reads or makes a second,
     * before its micro-batches run on them: under a pipeline every stage reads its whole
     * share before the schedule starts (`this`: timed in the measured step). 0: free. */
    double data_rate;
    /* bytes/s the optimizer's update streams its state at in a step (`this`: timed in the
     * measured step, whose arena may sit in a cache mem_bandwidth's copy is far larger than);
     * 0: mem_bandwidth, scaled by step_ratio */
    double opt_bandwidth;
} dt_plan_device;

/* dt_plan_device.hides. TP: tensor-parallel collectives with sequence parallelism are cut
 * into tp pieces, each sent while the product of the one before runs (Megatron-Core
 * --tp-comm-overlap): one piece stays exposed, and what the products cannot cover. DP:
 * under a pipeline each stage's gradient reduction runs behind its last micro-batch's
 * backward (--overlap-grad-reduce), and the gather of ZeRO 1/2's update behind the next
 * step's first forward (--overlap-param-gather). */
enum { DT_PLAN_HIDE_TP = 1, DT_PLAN_HIDE_DP = 2 };

typedef struct dt_plan_time {
    double step_s;      /* the slowest rank's step */
    double compute_s;   /* its busy time: matmuls and the tp/sp collectives between them */
    double comm_s;      /* its data-parallel communication not hidden behind compute */
    double bubble;      /* pipeline: idle share of the replayed schedule (0 without pp) */
    double act_disk_s;  /* of compute_s: activation file I/O its computation waits for */
    double cores_s;     /* ranks sharing too few cores: their compute and optimizer time over
                         * the cores, the step's floor (0: not shared) */
    double data_s;      /* of compute_s: reading the rank's rows of the batch */
    double optimizer_s; /* of step_s: the optimizer's update */
} dt_plan_time;

/* The model FLOPs of one training step of c (train.batch_size sequences or clips): forward
 * and backward (twice the forward) of every matmul and of the attention cores (causal: half
 * of 4 T hs a token and head; the DiT's non-causal: all of it, T its block's sequence), no
 * reruns, whatever the layout. */
double dt_plan_step_flops(const dt_config *c);

/* data.doc_mask: the share of causal attention's work (64 x 64 tiles, a diagonal tile half
 * of one) the kernels do on sequences of T tokens packed with documents of doc_len tokens
 * (placed at 16 offsets, averaged): tiles before a query tile's first document are skipped.
 * 1 when doc_len is 0 (unknown: documents as long as the sequence is the safe side). */
double dt_plan_doc_attn_share(int T, int doc_len);

/* Predict one step of a `world`-rank run of c. sched: the pipeline schedule run (borrowed;
 * NULL: generated from plugin.pp_schedule). DT_ERR_ARG when the layout does not split. */
dt_status dt_plan_step_time(const dt_config *c, int world, const dt_plan_device *d,
                            const dt_schedule *sched, dt_plan_time *out);
/* One pipeline stage's part of the step (its ranks alike). */
typedef struct dt_plan_stage_time {
    double compute_s;   /* busy: its passes over its micro-batches, and its rows' reading */
    double idle_s;      /* waiting on its neighbours within the schedule (makespan - busy) */
    double comm_s;      /* its data-parallel communication not hidden behind compute */
    double optimizer_s; /* its update */
} dt_plan_stage_time;
/* dt_plan_step_time, and every stage's part in stages[plugin.pp_size] */
dt_status dt_plan_step_time_stages(const dt_config *c, int world, const dt_plan_device *d,
                                   const dt_schedule *sched, dt_plan_time *out,
                                   dt_plan_stage_time *stages);
/* Tokens a step trains on: train.batch_size x seq_len, or with buckets of clip shape the mean
 * over their shares of the steps (dt_plan_step_time and dt_plan_step_flops are such means too). */
double dt_plan_step_tokens(const dt_config *c);

/* The contiguous cut of L layers (block[l]: seconds of layer l) into n chunks of at least one
 * layer each, the first chunk also carrying `first` seconds (the embedding) and the last
 * `last` (the final unit and head), whose slowest chunk is fastest: counts[n]. */
dt_status dt_plan_balance_layers(const double *block, int L, int n, double first, double last,
                                 int *counts);

/* plugin.pp_layers = auto: the layer counts per pipeline chunk ("4,4,3,1") whose slowest
 * chunk (forward and backward of a micro-batch, the embedding on the first chunk and the LM
 * head on the last counted) is fastest by this time model, written into layers (n_layers
 * bytes). DT_ERR_ARG when the layout does not split or has no pipeline. */
dt_status dt_plan_stage_split(const dt_config *c, int world, const dt_plan_device *d, char *layers,
                              size_t n_layers);

#endif
