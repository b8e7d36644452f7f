/* Shared inside plan/ by the time model's two halves: cost.c (the device's rates, GPT-2 and
 * Llama blocks, the pipeline replay, data parallelism and the optimizer) and cost_dit.c (the
 * video DiT's units). Nothing outside plan/ includes it. Pure; thread-safe when the device's
 * gemm_rate is.
 */
#ifndef DT_PLAN_COST_IMPL_H
#define DT_PLAN_COST_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/buckets.h"
#include "core/config.h"
#include "plan/cost.h"
#include "plan/schedule.h"
#include "plan/stages.h"

/* One layout's work on one rank, as the time model sees it. */
typedef struct dt_plan_work {
    const dt_config *c;
    const dt_plan_device *d;
    double rate;                   /* the matmul peak of the run's operand type */
    dt_plan_rate2 attn, norm, act; /* resolved: no zero left */
    bool lp;                       /* 16-bit matmul operands */
    int tp, sp, dp, pp, v, L, T, n_mb, zero, grad_p;
    bool gpt2, sg, dit;
    double N, Nt, Nr, C, W, A, F, V, hs, NH; /* local widths, as doubles (DiT: T = S tokens a
                                              * clip, F = 4 C / tp) */
    double B;                                /* sequences (DiT: clips) per micro-batch */
    double block_floats;    /* a GPT block unit's local weights (its 16-bit cast) */
    double boundary;        /* bytes of one pipeline boundary message */
    double boundary_gather; /* plugin.pp_scatter: seconds to all-gather a received one */
    double mem_bw;          /* bytes/s a memory-bound kernel streams at */
    double act_bw;          /* ... over a micro-batch's activations (dt_plan_pass_bw) */
    /* bytes/s a rank moves in each group's collectives: inside a node, or across nodes */
    double bw_tp, bw_sp, bw_grad, bw_pp, bw_cp;
    int cp;            /* the ring of context parallelism */
    bool zigzag;       /* its balanced split (contiguous: the last rank does the most) */
    double ring_block; /* bytes of one key/value block a ring rank passes on */
    double act_disk;   /* plugin.act_offload = disk: bytes of a block's record; 0: off */
    double attn_share; /* of causal attention's tiles computed (data.doc_mask: below 1) */
} dt_plan_work;
/* The attention kernel's rates over sequences of T tokens: the device's at T where it has
 * them, else its one rate (attn) */
dt_plan_rate2 dt_plan_attn_at(const dt_plan_work *w, double T);
/* bytes/s of a pass over a tensor of `bytes`: the device's act_bandwidth where it fits its
 * act_bytes, else mem_bw */
double dt_plan_pass_bw(const dt_plan_work *w, double bytes);

/* What stays exposed of a pass's tensor-parallel collectives `comm` beside its products
 * `gemm`: all of it, unless the device's software hides them (DT_PLAN_HIDE_TP) */
double dt_plan_cost_tp_exposed(const dt_plan_work *w, double comm, double gemm);
/* Seconds of a block's tensor-parallel region collectives, and of its Ulysses all-to-alls,
 * in its forward (backward false) or backward, before any hiding */
double dt_plan_cost_block_tp(const dt_plan_work *w, bool backward);
double dt_plan_cost_block_sp(const dt_plan_work *w, bool backward);
/* Seconds of one Ulysses all-to-all of a tensor `width` wide over the micro-batch's N rows:
 * blocks of (N / sp) rows x (width / sp) to each of the sp - 1 peers; 0 without Ulysses */
double dt_plan_cost_a2a(const dt_plan_work *w, double width);
/* Seconds of a block pass's memory moves around its tp all-reduces (forward or backward) */
double dt_plan_cost_tp_copies(const dt_plan_work *w, bool backward);

/* The gradient group's traffic of a step: reductions (hideable behind the backward), the
 * weights' all-gathers, and the calls: the communication ledger's exact bytes (plan/comm.c);
 * for ZeRO-3 under a pipeline (not in the ledger) the same collectives counted per unit:
 * ZeRO 0/1 all-reduce the arena once, ZeRO 2/3 reduce-scatter it every micro-batch, ZeRO 1/2
 * all-gather it after the update, ZeRO 3 gathers every unit for forward and backward. n: the
 * rank's local arena in floats. */
typedef struct dt_plan_dp_traffic {
    double reduce_bytes, gather_bytes;
    int64_t reduce_calls, gather_calls;
} dt_plan_dp_traffic;
dt_plan_dp_traffic dt_plan_dp_traffic_of(const dt_plan_work *w, int world, int rank,
                                         const dt_schedule *sched, double n);
/* What stays exposed of `comm` seconds of collectives run beside `compute` seconds: what
 * does not fit behind it, and the device's exposed share of what does */
double dt_plan_behind(const dt_plan_work *w, double comm, double compute);
/* The last micro-batch's backward unit by unit (ZeRO 0/1 without a pipeline or a split
 * backward, where the engine posts each bucket of gradients as that backward completes it):
 * each of the U units' local floats and backward seconds, unit 0 the embedding. */
typedef struct dt_plan_last_backward {
    int U;
    const int64_t *floats;
    const double *secs;
} dt_plan_last_backward;
/* What stays exposed of the buckets' all-reduces (t_reduce seconds over `calls` buckets, the
 * time on the wire split by their floats, a latency each): a bucket starts when the backward
 * completes its lowest unit and the bucket before it is done (one at a time on the group's
 * links), and only what runs before that backward ends hides, at the device's exposed share.
 * A bucket that fills late hides little: the default 25 MB can hold most of a small model. */
double dt_plan_buckets_exposed(const dt_plan_work *w, const dt_plan_last_backward *lb,
                               double t_reduce, int64_t calls);

/* Ring attention's exposed seconds (plan/cost.c) around attention of `at` seconds: forward,
 * or backward (blocks and their gradients). 0 without a ring. */
double dt_plan_cost_ring(const dt_plan_work *w, bool backward, double at);

/* A chunk's passes on one micro-batch: forward, backward (the input half when split), the
 * split backward's weight pass, and the backward when it follows the chunk's own forward at
 * once (its rerun skipped). */
typedef struct dt_plan_chunk_cost {
    double f, b, wgt, b_fresh;
    double io; /* of f, b and wgt: activation file I/O not hidden (act_offload = disk) */
} dt_plan_chunk_cost;

/* A linear layer's forward and its backward's two products, in seconds. */
typedef struct dt_plan_linear_s {
    double fwd, dx, dw;
} dt_plan_linear_s;

/* Seconds of a tensor-parallel collective over p ranks moving `bytes` (its bus bytes):
 * latency + bytes / bandwidth, 0 for a group of one; an all-reduce of n bytes; an all-gather
 * or reduce-scatter of a whole of n bytes, each at its own kind's rate (a reduce-scatter adds
 * as it moves: about half an all-gather's rate on two ranks here). */
double dt_plan_cost_coll(const dt_plan_work *w, int p, double bytes, dt_plan_coll kind);
/* bytes/s of a kind of collective over a group whose links give group_bw, for a whole
 * message of `whole` bytes (dt_plan_device's coll_at) */
double dt_plan_kind_bw(const dt_plan_device *d, double group_bw, dt_plan_coll kind, double whole);
/* the whole message of a call that moves `bytes` (its bus bytes) over a group of p ranks */
double dt_plan_coll_whole(dt_plan_coll kind, int p, double bytes);
double dt_plan_cost_allreduce(const dt_plan_work *w, int p, double n);
double dt_plan_cost_gather(const dt_plan_work *w, int p, double n);
double dt_plan_cost_reduce_scatter(const dt_plan_work *w, int p, double n);
/* Seconds of an m x k by k x n product at the device's rate for that shape. */
double dt_plan_cost_gemm(const dt_plan_work *w, dt_plan_gemm_op op, double m, double n, double k);
/* Adds a linear [m, in] -> [m, out] to acc. */
void dt_plan_cost_add_linear(const dt_plan_work *w, double m, double in, double out,
                             dt_plan_linear_s *acc);

/* The video DiT (plan/cost_dit.c): every chunk's passes of one micro-batch. */
void dt_plan_dit_chunk_costs(const dt_plan_work *w, const dt_stage_plan *sp, bool split,
                             dt_plan_chunk_cost *out);
/* Each of the DiT's L + 2 units' backward on one micro-batch (no split), in seconds */
void dt_plan_dit_unit_backwards(const dt_plan_work *w, double *b);

/* The DiT's model FLOPs of one training step over `clips` clips: the forward and backward
 * (twice the forward) of every matmul and of the attention cores (non-causal: 4 T hs a token
 * and head, T the length of the sequence the block's attention sees), no reruns. */
double dt_plan_dit_step_flops(const dt_model_config *m, double clips);
/* Buckets of clip shape (data.buckets) of a DiT's config (n 0: none, or not a DiT); the step's
 * FLOPs and time (and each stage's, stages may be NULL) as means over their shares of the
 * steps (cost_dit.c). */
dt_buckets dt_plan_buckets_of(const dt_config *c);
double dt_plan_flops_of_buckets(const dt_config *c, const dt_buckets *bk);
dt_status dt_plan_time_of_buckets(const dt_config *c, const dt_buckets *bk, int world,
                                  const dt_plan_device *d, const dt_schedule *given,
                                  dt_plan_time *out, dt_plan_stage_time *stages);

#endif
