/* Pipeline schedules as data: per rank, the ordered list of compute and point-to-point actions
 * for one training step, plus the pure generators (GPipe, 1F1B, interleaved 1F1B, ZB-H1), the
 * text form users load with `pp_schedule = file:PATH`, and the validator that proves a schedule
 * complete, correctly ordered and deadlock-free before any message is sent.
 * No MPI and no tensors: train/ interprets a dt_schedule; nothing here knows about layers.
 * Every function is pure and thread-safe (errors go to the thread-local dt_err_msg()).
 */
#ifndef DT_PLAN_SCHEDULE_H
#define DT_PLAN_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Model chunks and ranks. The model is cut into pp * n_chunks consecutive chunks, numbered
 * 0..pp*n_chunks-1 in the order the forward pass runs them. Chunk c lives on rank c % pp, so
 * with n_chunks = 1 chunk c is simply stage c, and with n_chunks = v (interleaved) rank r holds
 * chunks r, r+pp, r+2pp, ... An action's `stage` is always this global chunk id and always a
 * chunk of the rank that executes the action.
 *
 * Split backward. A schedule either has no W action at all, and then every B is the full
 * backward (input gradient and weight gradient), or it has W actions, and then every B is the
 * input-gradient half only and every (chunk, mb) needs exactly one W, after its B, on the same
 * rank (zero-bubble, Qi et al. ICLR'24 section 2). There is no per-micro-batch mixing.
 *
 * Messages. SEND_ACT(c, mb) sends chunk c's output activation to the rank of chunk c + 1 and is
 * matched by RECV_ACT(c + 1, mb) there; SEND_GRAD(c, mb) sends the gradient of chunk c's input to
 * the rank of chunk c - 1 and is matched by RECV_GRAD(c - 1, mb) there. Neighbouring chunks on
 * the same rank (pp = 1) exchange nothing: their F/B simply follow each other. */
typedef enum dt_sched_op { /* append-only: the text form and saved schedules use these */
                           DT_SCHED_OP_F,        /* forward of chunk `stage` on micro-batch `mb` */
                           DT_SCHED_OP_B,        /* backward: full, or input-gradient only when the
                                                    schedule has W */
                           DT_SCHED_OP_W,        /* weight-gradient half of a split backward */
                           DT_SCHED_OP_SEND_ACT, /* send chunk `stage`'s output for `mb` to the next
                                                    chunk's rank */
                           DT_SCHED_OP_RECV_ACT, /* receive chunk `stage`'s input for `mb` from the
                                                    previous chunk */
                           DT_SCHED_OP_SEND_GRAD, /* send d(input of `stage`) for `mb` to the
                                                     previous chunk's rank */
                           DT_SCHED_OP_RECV_GRAD, /* receive d(output of `stage`) for `mb` from the
                                                     next chunk's rank */
                           DT_SCHED_OP_COUNT
} dt_sched_op;

/* One step of one rank. All-zero is "forward of chunk 0 on micro-batch 0". */
typedef struct dt_sched_action {
    dt_sched_op op;
    int stage; /* global model chunk id, 0 .. pp*n_chunks-1 (see above) */
    int mb;    /* micro-batch, 0 .. n_mb-1 */
} dt_sched_action;

/* Rank r's actions are actions[row[r] .. row[r+1]), executed in that order. */
typedef struct dt_schedule {
    int pp;                     /* ranks in the pipeline */
    int n_chunks;               /* model chunks per rank (v); 1 unless interleaved */
    int n_mb;                   /* micro-batches per step */
    int *row;                   /* [pp + 1] offsets into actions */
    dt_sched_action *actions;   /* [row[pp]] */
    int *slots, *inbox, *grads; /* [pp] each rank's dt_sched_slots / _inbox / _grads,
                                 * counted once by dt_sched_count (generators and the parser
                                 * call it); NULL: counted at every call */
    bool *fresh;                /* [pp * n_chunks * n_mb] dt_sched_fresh's answers, likewise */
    int split;                  /* dt_sched_split's answer, likewise (-1: not counted) */
    uint64_t serial;            /* unique among the schedules this process made (the time
                                 * model's replay memo tells schedules apart by it) */
} dt_schedule;

/* An empty schedule with room for n_actions[r] actions on rank r (zeroed: fill them in).
 * DT_ERR_ARG on non-positive sizes, DT_ERR_OOM. */
dt_status dt_sched_alloc(int pp, int n_chunks, int n_mb, const int *n_actions, dt_schedule **out);
void dt_sched_free(dt_schedule *s);
/* Rank `rank`'s actions and their count (*n). */
const dt_sched_action *dt_sched_row(const dt_schedule *s, int rank, int *n);

/* Generators. Each returns the compute order of the named schedule with the matching sends and
 * receives already placed; every generated schedule passes dt_sched_validate in both p2p modes
 * (the message order is one global order, see schedule_gen.c). DT_ERR_ARG on bad sizes.
 *   gpipe:       all m forwards, then all m backwards, both in micro-batch order.
 *   1f1b:        PipeDream-flush: rank r runs min(pp-1-r, m) warm-up forwards, then alternates
 *                one forward and one backward, then drains the remaining backwards.
 *   interleaved: Megatron's interleaved 1F1B with v chunks per rank. Needs m % pp == 0: micro-
 *                batches run in rounds of pp through all v local chunks, and the order maps step
 *                k to (chunk, mb) by that round structure; a partial round has no place in it.
 *   zbh1:        ZB-H1 (Qi et al. ICLR'24 section 3.1): split backward, 1F1B's order of F and B
 *                (same peak F-to-B micro-batches per rank), and rank r runs W(i - r) after B(i),
 *                so every rank holds pp micro-batches between F and W and the Ws left over fill
 *                the cool-down bubble. */
dt_status dt_sched_gpipe(int pp, int n_mb, dt_schedule **out);
dt_status dt_sched_1f1b(int pp, int n_mb, dt_schedule **out);
dt_status dt_sched_interleaved(int pp, int n_mb, int n_chunks, dt_schedule **out);
dt_status dt_sched_zbh1(int pp, int n_mb, dt_schedule **out);

/* Text form: one line per rank (line i = rank i), comma-separated tokens <chunk><OP><mb>, where
 * OP is F, B, W, SA (send activation), RA (receive activation), SG (send gradient) or RG
 * (receive gradient), chunk and mb are unsigned decimals: "0F0,0SA0,0F1,0SA1,0RG0,0B0,...".
 * Parsing ignores blanks around tokens, blank lines and lines starting with '#'; pp is the number
 * of rows, n_chunks = ceil((max chunk + 1) / pp), n_mb = max mb + 1. dt_sched_format writes no
 * blanks and no comments, one '\n' after each row, so format(parse(format(s))) == format(s).
 * Parse errors (DT_ERR_FORMAT) name the line, the rank, the token and what was expected. */
dt_status dt_sched_format(const dt_schedule *s, char **text); /* *text: malloc'd, caller frees */
dt_status dt_sched_parse(const char *text, dt_schedule **out);
/* "1B0" into buf (always terminated); returns buf, so it can sit in a printf argument list. */
const char *dt_sched_action_str(dt_sched_action a, char *buf, size_t n);

/* How sends behave in the validator's simulation. EAGER: a send is buffered and never blocks
 * (MPI_Isend / small messages); a receive blocks until the peer has executed the send.
 * RENDEZVOUS: a send also blocks until the peer reaches the matching receive (MPI_Ssend / large
 * messages), which is the order a plain blocking executor must survive. */
typedef enum dt_sched_p2p {
    DT_SCHED_P2P_EAGER,
    DT_SCHED_P2P_RENDEZVOUS,
    DT_SCHED_P2P_COUNT
} dt_sched_p2p;

typedef struct dt_sched_limits {
    int max_in_flight; /* per rank, (chunk, mb) pairs with F done and B not yet; 0 = no limit */
    dt_sched_p2p p2p;  /* default EAGER */
} dt_sched_limits;

/* DT_OK, or DT_ERR_ARG with the first problem in dt_err_msg(), checked in this order:
 *  1. each action, rank by rank in order: chunk/mb in range, chunk on this rank, a peer exists
 *     for a message, no duplicate, F/B/W/sends after what they need (B after its F and after its
 *     output gradient arrived, W after its B, SEND_ACT after the F, SEND_GRAD after the B), every
 *     send/receive matched on the peer rank, in-flight (chunk, mb) pairs within the limit;
 *  2. completeness: one F and one B per (chunk, mb), and one W each iff the schedule has any W;
 *  3. a simulation of all ranks with blocking p2p (`limits->p2p`): on deadlock, every rank's
 *     first blocked action and what it waits for.
 * Messages start "rank R action I (TOKEN): ...". limits may be NULL (all defaults). */
dt_status dt_sched_validate(const dt_schedule *s, const dt_sched_limits *limits);

/* Unit-time simulation, communication free: F = 1, B = 2 (full) or B = 1 and W = 1 (split);
 * a receive completes when its send has run. For interleaved the unit is one chunk, which
 * leaves the fractions unchanged. */
typedef struct dt_sched_stats {
    int makespan;       /* time at which the last rank finishes */
    int busy;           /* compute time of the busiest rank */
    int idle;           /* sum over ranks of (makespan - own compute time) */
    double bubble;      /* idle / (pp * makespan) */
    int peak_in_flight; /* max over ranks of dt_sched_peak_in_flight */
} dt_sched_stats;

/* The schedule must be valid (DT_ERR_ARG with the validator's message otherwise). */
dt_status dt_sched_simulate(const dt_schedule *s, dt_sched_stats *out);
/* Most (chunk, mb) pairs rank `rank` holds at once: F done, B not yet. */
int dt_sched_peak_in_flight(const dt_schedule *s, int rank);

/* What a schedule asks of a rank's memory, read by the runtime and the planner alike. A
 * (chunk, mb) takes an activation slot at its F and gives it back once its input gradient has
 * been sent (chunk 0, which sends none: at its B), or at its W when the backward is split. An
 * input received ahead of its F waits in an inbox buffer, not a slot. */
bool dt_sched_split(const dt_schedule *s); /* a valid schedule has W actions (zero-bubble) */
bool dt_sched_takes_slot(const dt_sched_action *a);
bool dt_sched_gives_slot(const dt_sched_action *a, bool split);
/* The gradient crossing a chunk boundary has a buffer of its own, from its RECV_GRAD (the
 * last chunk, which receives none: its B, which starts it from the loss) to its SEND_GRAD
 * (chunk 0, which sends none: the end of its B); a pair holds one only around its backward,
 * so a rank needs few, not one a slot. */
bool dt_sched_takes_grad(const dt_schedule *s, const dt_sched_action *a);
bool dt_sched_gives_grad(const dt_sched_action *a);
/* Counts every rank's slots and inbox into s once, so planners asking again are answered at
 * once. Call after the actions are final; DT_ERR_OOM. */
dt_status dt_sched_count(dt_schedule *s);
/* For each (chunk, mb) of `rank`: does its B come right after its F of the same pair (no F,
 * B or W of another between), so a checkpointed block's rerun finds its forward still
 * there? Sets fresh[chunk * n_mb + mb] for the rank's pairs (the caller zeroes the
 * pp * n_chunks * n_mb flags). */
void dt_sched_fresh(const dt_schedule *s, int rank, bool *fresh);
/* Most micro-batches whose activations `rank` holds at once (of a valid schedule). */
int dt_sched_slots(const dt_schedule *s, int rank);
/* Most inputs received ahead of their F at once on `rank` (its inbox buffers). */
int dt_sched_inbox(const dt_schedule *s, int rank);
/* Most boundary gradients `rank` holds at once (its gradient buffers; 1 at least). */
int dt_sched_grads(const dt_schedule *s, int rank);

#endif
