/* plan/schedule_gen: the pure schedule generators (GPipe, 1F1B, interleaved 1F1B, ZB-H1).
 * Each generator only decides the order of F/B/W on every rank; one shared pass, place_comm,
 * then inserts the sends and receives so that the result cannot deadlock even with blocking
 * rendezvous sends. Allocates only the returned schedule and scratch; re-entrant.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/schedule.h"

/* Compute orders under construction: rank r's actions are a[r * cap .. r * cap + n[r]). */
typedef struct order {
    int pp, n_chunks, n_mb, cap;
    bool split; /* B is input-gradient only and W actions follow */
    int *n;
    dt_sched_action *a;
} order;

static dt_status order_init(order *o, int pp, int n_chunks, int n_mb, bool split) {
    *o = (order){.pp = pp, .n_chunks = n_chunks, .n_mb = n_mb, .split = split};
    o->cap = 3 * n_chunks * n_mb;
    o->n = calloc((size_t)pp, sizeof *o->n);
    o->a = calloc((size_t)pp * o->cap, sizeof *o->a);
    if (!o->n || !o->a) {
        free(o->n);
        free(o->a);
        return dt_err_set(DT_ERR_OOM, "schedule generator: %d x %d actions", pp, o->cap);
    }
    return DT_OK;
}

static void order_free(order *o) {
    free(o->n);
    free(o->a);
}

static void push(order *o, int rank, dt_sched_op op, int stage, int mb) {
    DT_ASSERT(o->n[rank] < o->cap);
    o->a[rank * o->cap + o->n[rank]++] = (dt_sched_action){.op = op, .stage = stage, .mb = mb};
}

static int duration(const order *o, dt_sched_op op) {
    return op == DT_SCHED_OP_B && !o->split ? 2 : 1;
}

/* One event of a rank's final list, sorted by (time, cls, kind, chunk, mb). */
typedef struct event {
    int time; /* compute: its start; message: when the data exists (producer's finish) */
    int cls;  /* 0 message, 1 compute: a receive goes before a compute starting at its time */
    int kind, chunk, mb; /* message key, identical on both ends: kind 0 act / 1 grad, sender */
    dt_sched_action a;
    uint64_t key; /* the five above packed in their order (event_key), unique on a rank */
} event;

/* time < 2^24 (a makespan is under 3 pp x chunks x n_mb <= 3 2^22), chunk < 2^18, mb < 2^16 */
static uint64_t event_key(const event *e) {
    return (uint64_t)e->time << 36 | (uint64_t)e->cls << 35 | (uint64_t)e->kind << 34 |
           (uint64_t)e->chunk << 16 | (uint64_t)e->mb;
}

static int event_cmp(const void *x, const void *y) {
    const event *a = x, *b = y;
    return (a->key > b->key) - (a->key < b->key);
}

/* Insert the messages and pack the schedule.
 *
 * First a unit-time run of the compute order (comm free) gives every F/B its start and finish.
 * A message exists from its producer's finish t; on both ranks it is placed at t, before any
 * compute that starts at or after t and after any that started before. Sorting every rank's
 * messages by the same key (t, kind, sender chunk, mb) makes each rank's message sequence a
 * subsequence of one global order. That rules out deadlock even when sends block until received:
 * the globally first message not yet done has every earlier action of both its ranks either
 * compute (never blocks) or an earlier, hence completed, message; so both ranks reach it. */
static dt_status place_comm(const order *o, dt_schedule **out) {
    const int pp = o->pp, C = pp * o->n_chunks, m = o->n_mb;
    const size_t ecap = (size_t)o->cap + 4 * (size_t)o->n_chunks * m; /* + 2 sends, 2 receives */
    dt_status st = DT_OK;
    int *finF = malloc(sizeof(int) * C * m), *finB = malloc(sizeof(int) * C * m);
    int *start = malloc(sizeof(int) * pp * o->cap), *pos = calloc(pp, sizeof(int));
    int *clock = calloc(pp, sizeof(int)), *n_ev = calloc(pp, sizeof(int));
    event *ev = malloc(sizeof(event) * pp * ecap);
    dt_schedule *s = NULL;
    if (!finF || !finB || !start || !pos || !clock || !n_ev || !ev) {
        st = dt_err_set(DT_ERR_OOM, "schedule generator: simulation tables");
        goto fail;
    }
    for (int i = 0; i < C * m; i++)
        finF[i] = finB[i] = -1;
    /* Longest path through the compute DAG: advance every rank while its next action's inputs
     * have known finish times. */
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < pp; r++) {
            for (; pos[r] < o->n[r]; pos[r]++) {
                dt_sched_action a = o->a[r * o->cap + pos[r]];
                int id = a.stage * m + a.mb, ready = 0;
                if (a.op == DT_SCHED_OP_F && a.stage > 0)
                    ready = finF[id - m];
                else if (a.op == DT_SCHED_OP_B && a.stage < C - 1)
                    ready = finB[id + m];
                if (ready < 0)
                    break;
                int t0 = clock[r] > ready ? clock[r] : ready;
                clock[r] = t0 + duration(o, a.op);
                start[r * o->cap + pos[r]] = t0;
                if (a.op == DT_SCHED_OP_F)
                    finF[id] = clock[r];
                else if (a.op == DT_SCHED_OP_B)
                    finB[id] = clock[r];
                progress = true;
            }
        }
    }
    for (int r = 0; r < pp; r++)
        DT_ASSERT(pos[r] == o->n[r]); /* a generator emitted an order that cannot run */

    for (int r = 0; r < pp; r++) {
        event *e = ev + r * ecap;
        for (int i = 0; i < o->n[r]; i++)
            e[n_ev[r]++] =
                (event){.time = start[r * o->cap + i], .cls = 1, .a = o->a[r * o->cap + i]};
    }
    for (int c = 0; c < C; c++) {
        for (int mb = 0; mb < m; mb++) {
            int id = c * m + mb;
            if (c + 1 < C && (c + 1) % pp != c % pp) { /* activation c -> c+1 */
                event msg = {.time = finF[id], .cls = 0, .kind = 0, .chunk = c, .mb = mb};
                event *snd = ev + (c % pp) * ecap + n_ev[c % pp]++;
                *snd = msg;
                snd->a = (dt_sched_action){DT_SCHED_OP_SEND_ACT, c, mb};
                event *rcv = ev + ((c + 1) % pp) * ecap + n_ev[(c + 1) % pp]++;
                *rcv = msg;
                rcv->a = (dt_sched_action){DT_SCHED_OP_RECV_ACT, c + 1, mb};
            }
            if (c > 0 && (c - 1) % pp != c % pp) { /* gradient c -> c-1 */
                event msg = {.time = finB[id], .cls = 0, .kind = 1, .chunk = c, .mb = mb};
                event *snd = ev + (c % pp) * ecap + n_ev[c % pp]++;
                *snd = msg;
                snd->a = (dt_sched_action){DT_SCHED_OP_SEND_GRAD, c, mb};
                event *rcv = ev + ((c - 1) % pp) * ecap + n_ev[(c - 1) % pp]++;
                *rcv = msg;
                rcv->a = (dt_sched_action){DT_SCHED_OP_RECV_GRAD, c - 1, mb};
            }
        }
    }
    DT_TRY_GOTO(dt_sched_alloc(pp, o->n_chunks, m, n_ev, &s));
    for (int r = 0; r < pp; r++) {
        event *e = ev + r * ecap;
        for (int i = 0; i < n_ev[r]; i++)
            e[i].key = event_key(&e[i]);
        qsort(e, (size_t)n_ev[r], sizeof *e, event_cmp);
        for (int i = 0; i < n_ev[r]; i++)
            s->actions[s->row[r] + i] = e[i].a;
    }
    DT_TRY_GOTO(dt_sched_count(s));
    *out = s;
    s = NULL;
fail:
    dt_sched_free(s);
    free(ev);
    free(n_ev);
    free(clock);
    free(pos);
    free(start);
    free(finB);
    free(finF);
    return st;
}

static dt_status check_sizes(const char *who, int pp, int n_mb, int n_chunks) {
    if (pp < 1 || n_mb < 1 || n_chunks < 1 || pp > 4096 || n_mb > 1 << 16 || n_chunks > 64 ||
        (long long)pp * n_chunks * n_mb > 1 << 22)
        return dt_err_set(DT_ERR_ARG,
                          "%s: pp %d, micro-batches %d, chunks %d: need pp in "
                          "1..4096, micro-batches in 1..65536, chunks in 1..64 and at most 2^22 "
                          "(chunk, micro-batch) pairs",
                          who, pp, n_mb, n_chunks);
    return DT_OK;
}

/* Common tail: pack the order with messages, free the order. */
static dt_status finish(order *o, dt_schedule **out) {
    dt_status st = place_comm(o, out);
    order_free(o);
    return st;
}

dt_status dt_sched_gpipe(int pp, int n_mb, dt_schedule **out) {
    *out = NULL;
    DT_TRY(check_sizes(__func__, pp, n_mb, 1));
    order o;
    DT_TRY(order_init(&o, pp, 1, n_mb, false));
    for (int r = 0; r < pp; r++) {
        for (int mb = 0; mb < n_mb; mb++)
            push(&o, r, DT_SCHED_OP_F, r, mb);
        for (int mb = 0; mb < n_mb; mb++)
            push(&o, r, DT_SCHED_OP_B, r, mb);
    }
    return finish(&o, out);
}

/* PipeDream-flush (Narayanan et al. 2021, section 2.2): rank r holds at most pp - r micro-batches,
 * the fewest that still keep it busy once the first gradient comes back. */
dt_status dt_sched_1f1b(int pp, int n_mb, dt_schedule **out) {
    *out = NULL;
    DT_TRY(check_sizes(__func__, pp, n_mb, 1));
    order o;
    DT_TRY(order_init(&o, pp, 1, n_mb, false));
    for (int r = 0; r < pp; r++) {
        int warm = pp - 1 - r < n_mb ? pp - 1 - r : n_mb;
        for (int mb = 0; mb < warm; mb++)
            push(&o, r, DT_SCHED_OP_F, r, mb);
        for (int i = 0; i < n_mb - warm; i++) {
            push(&o, r, DT_SCHED_OP_F, r, warm + i);
            push(&o, r, DT_SCHED_OP_B, r, i);
        }
        for (int mb = n_mb - warm; mb < n_mb; mb++)
            push(&o, r, DT_SCHED_OP_B, r, mb);
    }
    return finish(&o, out);
}

/* Virtual step k of rank r in the interleaved order -> (global chunk, micro-batch). */
static void push_step(order *o, int r, dt_sched_op op, int k) {
    const int pp = o->pp, v = o->n_chunks;
    int local = (k / pp) % v;
    if (op == DT_SCHED_OP_B)
        local = v - 1 - local; /* backward walks the chunks in reverse */
    push(o, r, op, local * pp + r, (k / (pp * v)) * pp + k % pp);
}

/* Megatron-LM's interleaved 1F1B (Narayanan et al. SC'21, section 2.2; megatron/core
 * pipeline_parallel/schedules.py). Virtual step k of a rank covers micro-batch
 * (k / (pp v)) pp + k % pp on local chunk (k / pp) % v (reversed for backward): micro-batches go
 * through the local chunks in rounds of pp. Warm-up is 2 (pp - 1 - r) + (v - 1) pp forwards
 * (all of them when m == pp, as Megatron does), then one forward and one backward per step. */
dt_status dt_sched_interleaved(int pp, int n_mb, int n_chunks, dt_schedule **out) {
    *out = NULL;
    DT_TRY(check_sizes(__func__, pp, n_mb, n_chunks));
    if (n_mb % pp != 0)
        return dt_err_set(DT_ERR_ARG,
                          "%s: micro-batches %d %% pp %d != 0: the interleaved order "
                          "runs micro-batches through the chunks in rounds of pp",
                          __func__, n_mb, pp);
    const int v = n_chunks, total = n_mb * v;
    order o;
    DT_TRY(order_init(&o, pp, v, n_mb, false));
    for (int r = 0; r < pp; r++) {
        int warm = n_mb == pp ? total : 2 * (pp - 1 - r) + (v - 1) * pp;
        warm = warm < total ? warm : total;
        for (int k = 0; k < warm; k++)
            push_step(&o, r, DT_SCHED_OP_F, k);
        for (int i = 0; i < total - warm; i++) {
            push_step(&o, r, DT_SCHED_OP_F, warm + i);
            push_step(&o, r, DT_SCHED_OP_B, i);
        }
        for (int k = total - warm; k < total; k++)
            push_step(&o, r, DT_SCHED_OP_B, k);
    }
    return finish(&o, out);
}

/* ZB-H1 (Qi et al. ICLR'24, section 3.1 "memory efficient schedule"): 1F1B's order of F and B
 * (so rank r holds at most pp - r micro-batches between F and B, rank 0 as many as in 1F1B),
 * with each W run after a later B: rank r runs W(i - r) right after B(i), which gives every rank
 * the same pp micro-batches between F and W. Delaying W by r lets B, the only pass on the
 * critical path back up the pipeline, start r slots earlier on rank r; the Ws left over fill the
 * cool-down, leaving a bubble of (pp - 1)(T_F + T_B - T_W) instead of 1F1B's
 * (pp - 1)(T_F + T_B + T_W): a third of it when the three passes cost the same. */
dt_status dt_sched_zbh1(int pp, int n_mb, dt_schedule **out) {
    *out = NULL;
    DT_TRY(check_sizes(__func__, pp, n_mb, 1));
    order o;
    DT_TRY(order_init(&o, pp, 1, n_mb, true));
    for (int r = 0; r < pp; r++) {
        int warm = pp - 1 - r < n_mb ? pp - 1 - r : n_mb, w = 0;
        for (int mb = 0; mb < warm; mb++)
            push(&o, r, DT_SCHED_OP_F, r, mb);
        for (int b = 0; b < n_mb; b++) {
            if (warm + b < n_mb)
                push(&o, r, DT_SCHED_OP_F, r, warm + b);
            push(&o, r, DT_SCHED_OP_B, r, b);
            if (b >= r)
                push(&o, r, DT_SCHED_OP_W, r, w++);
        }
        while (w < n_mb)
            push(&o, r, DT_SCHED_OP_W, r, w++);
    }
    return finish(&o, out);
}
