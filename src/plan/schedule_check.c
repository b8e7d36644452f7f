/* plan/schedule_check: the schedule validator and the unit-time simulation behind the stats.
 * The validator runs before the first step on every rank, on the same data, so every rank
 * rejects a bad schedule with the same message before any message is sent. Pure: allocates
 * scratch tables only and reports through dt_err_set.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/schedule.h"

/* Shared read-only view of one schedule plus the first-occurrence table. */
typedef struct view {
    const dt_schedule *s;
    int C, m;   /* chunks in the model, micro-batches */
    int *first; /* [op][chunk][mb]: global index of the first such action on its own rank, -1 */
    bool split; /* the schedule has W actions: B is input-gradient only */
} view;

static int key(const view *v, dt_sched_op op, int c, int mb) {
    return ((int)op * v->C + c) * v->m + mb;
}

static bool in_range(const view *v, dt_sched_action a) {
    return (unsigned)a.op < DT_SCHED_OP_COUNT && a.stage >= 0 && a.stage < v->C && a.mb >= 0 &&
           a.mb < v->m;
}

/* The message that answers `a`: its matching send or receive, and the rank holding it. */
static dt_sched_action partner(dt_sched_action a) {
    switch (a.op) {
    case DT_SCHED_OP_SEND_ACT: return (dt_sched_action){DT_SCHED_OP_RECV_ACT, a.stage + 1, a.mb};
    case DT_SCHED_OP_RECV_ACT: return (dt_sched_action){DT_SCHED_OP_SEND_ACT, a.stage - 1, a.mb};
    case DT_SCHED_OP_SEND_GRAD: return (dt_sched_action){DT_SCHED_OP_RECV_GRAD, a.stage - 1, a.mb};
    case DT_SCHED_OP_RECV_GRAD: return (dt_sched_action){DT_SCHED_OP_SEND_GRAD, a.stage + 1, a.mb};
    default: return a;
    }
}

static bool is_msg(dt_sched_op op) { return op >= DT_SCHED_OP_SEND_ACT && op < DT_SCHED_OP_COUNT; }
static bool is_send(dt_sched_op op) {
    return op == DT_SCHED_OP_SEND_ACT || op == DT_SCHED_OP_SEND_GRAD;
}

static dt_status view_init(view *v, const dt_schedule *s) {
    *v = (view){.s = s};
    if (!s || s->pp < 1 || s->n_chunks < 1 || s->n_mb < 1 || !s->row || !s->actions)
        return dt_err_set(DT_ERR_ARG, "schedule: empty or malformed (pp, chunks and micro-batches "
                          "must be >= 1)");
    v->C = s->pp * s->n_chunks;
    v->m = s->n_mb;
    size_t n = (size_t)DT_SCHED_OP_COUNT * v->C * v->m;
    v->first = malloc(n * sizeof *v->first);
    if (!v->first)
        return dt_err_set(DT_ERR_OOM, "schedule validator: %zu entries", n);
    memset(v->first, 0xff, n * sizeof *v->first); /* all -1 */
    for (int r = 0; r < s->pp; r++) {
        for (int g = s->row[r]; g < s->row[r + 1]; g++) {
            dt_sched_action a = s->actions[g];
            /* only actions on their own rank count, so a misplaced one is reported as such and
             * never as the "first" of a pair */
            if (!in_range(v, a) || a.stage % s->pp != r)
                continue;
            int *f = &v->first[key(v, a.op, a.stage, a.mb)];
            if (*f < 0)
                *f = g;
            v->split |= a.op == DT_SCHED_OP_W;
        }
    }
    return DT_OK;
}

static int where(const view *v, dt_sched_action a) {
    return in_range(v, a) ? v->first[key(v, a.op, a.stage, a.mb)] : -1;
}

/* "rank R action I (TOKEN)" for the global action index g. */
static const char *name(const view *v, int g, char *buf, size_t n) {
    int r = 0;
    while (g >= v->s->row[r + 1])
        r++;
    char tok[48];
    snprintf(buf, n, "rank %d action %d (%s)", r, g - v->s->row[r],
             dt_sched_action_str(v->s->actions[g], tok, sizeof tok));
    return buf;
}

/* Whether `need` runs on its rank before global index g; if not, why into `why`. */
static bool before(const view *v, dt_sched_action need, int g, const char *what, char *why,
                   size_t n) {
    int at = where(v, need);
    char tok[48];
    dt_sched_action_str(need, tok, sizeof tok);
    if (at >= 0 && at < g)
        return true;
    if (at >= 0)
        snprintf(why, n, "%s: %s comes later, at action %d", what, tok,
                 at - v->s->row[need.stage % v->s->pp]);
    else
        snprintf(why, n, "%s: there is no %s on rank %d", what, tok, need.stage % v->s->pp);
    return false;
}

/* Phase 1: everything that can be judged looking at one action and the tables. */
static bool check_action(const view *v, int r, int g, int *in_flight, int limit, char *why,
                         size_t n) {
    const dt_schedule *s = v->s;
    dt_sched_action a = s->actions[g];
    const int c = a.stage, mb = a.mb, pp = s->pp;
    if ((unsigned)a.op >= DT_SCHED_OP_COUNT)
        return snprintf(why, n, "unknown op %d", (int)a.op), false;
    if (c < 0 || c >= v->C)
        return snprintf(why, n, "chunk %d out of range 0..%d (pp %d x %d chunks per rank)", c,
                        v->C - 1, pp, s->n_chunks), false;
    if (mb < 0 || mb >= v->m)
        return snprintf(why, n, "micro-batch %d out of range 0..%d", mb, v->m - 1), false;
    if (c % pp != r)
        return snprintf(why, n, "chunk %d lives on rank %d, not %d", c, c % pp, r), false;
    int f = where(v, a);
    if (f != g) {
        char first[96];
        return snprintf(why, n, "duplicate, first at %s", name(v, f, first, sizeof first)),
               false;
    }
    if (is_msg(a.op)) {
        int peer = partner(a).stage;
        if (peer < 0 || peer >= v->C)
            return snprintf(why, n, "chunk %d is the %s chunk: there is no chunk %d to exchange "
                            "with", c, peer < 0 ? "first" : "last", peer), false;
        if (peer % pp == r)
            return snprintf(why, n, "chunks %d and %d both live on rank %d: they exchange no "
                            "message", c, peer, r), false;
    }
    switch (a.op) {
    case DT_SCHED_OP_F:
        if (c > 0 && (c - 1) % pp == r &&
            !before(v, (dt_sched_action){DT_SCHED_OP_F, c - 1, mb}, g, "F before its input", why,
                    n))
            return false;
        if (c > 0 && (c - 1) % pp != r &&
            !before(v, (dt_sched_action){DT_SCHED_OP_RECV_ACT, c, mb}, g,
                    "F before its input arrives", why, n))
            return false;
        if (limit > 0 && *in_flight + 1 > limit)
            return snprintf(why, n, "%d micro-batches in flight (F done, B not yet), over the "
                            "limit %d", *in_flight + 1, limit), false;
        ++*in_flight;
        return true;
    case DT_SCHED_OP_B:
        if (!before(v, (dt_sched_action){DT_SCHED_OP_F, c, mb}, g, "B before its F", why, n))
            return false;
        if (c + 1 < v->C && (c + 1) % pp == r &&
            !before(v, (dt_sched_action){DT_SCHED_OP_B, c + 1, mb}, g,
                    "B before its output gradient", why, n))
            return false;
        if (c + 1 < v->C && (c + 1) % pp != r &&
            !before(v, (dt_sched_action){DT_SCHED_OP_RECV_GRAD, c, mb}, g,
                    "B before its output gradient arrives", why, n))
            return false;
        --*in_flight;
        return true;
    case DT_SCHED_OP_W:
        if (where(v, (dt_sched_action){DT_SCHED_OP_B, c, mb}) < 0)
            return snprintf(why, n, "W without its B: there is no %dB%d on rank %d", c, mb, r),
                   false;
        return before(v, (dt_sched_action){DT_SCHED_OP_B, c, mb}, g, "W before its B", why, n);
    case DT_SCHED_OP_SEND_ACT:
        if (!before(v, (dt_sched_action){DT_SCHED_OP_F, c, mb}, g, "sends before its F", why, n))
            return false;
        break;
    case DT_SCHED_OP_SEND_GRAD:
        if (!before(v, (dt_sched_action){DT_SCHED_OP_B, c, mb}, g, "sends before its B", why, n))
            return false;
        break;
    default:
        break;
    }
    /* a message: its partner must exist on the peer rank */
    dt_sched_action p = partner(a);
    if (where(v, p) < 0) {
        char tok[48];
        dt_sched_action_str(p, tok, sizeof tok);
        return snprintf(why, n, "no matching %s on rank %d", tok, p.stage % pp), false;
    }
    return true;
}

/* Phase 3: run every rank with blocking point-to-point semantics until all finish or none can
 * move. Compute never blocks (phase 1 proved its inputs come earlier on the same rank). */
static dt_status simulate_p2p(const view *v, dt_sched_p2p mode) {
    const dt_schedule *s = v->s;
    const int pp = s->pp;
    int *pc = calloc((size_t)pp, sizeof *pc);
    bool *sent = calloc((size_t)v->C * v->m * 2, sizeof *sent); /* [grad?][sender chunk][mb] */
    if (!pc || !sent) {
        free(pc);
        free(sent);
        return dt_err_set(DT_ERR_OOM, "schedule validator: simulation tables");
    }
    for (int r = 0; r < pp; r++)
        pc[r] = s->row[r];
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < pp; r++) {
            while (pc[r] < s->row[r + 1]) {
                dt_sched_action a = s->actions[pc[r]];
                if (!is_msg(a.op)) {
                    pc[r]++, progress = true;
                    continue;
                }
                dt_sched_action p = partner(a);
                dt_sched_action snd = is_send(a.op) ? a : p;
                bool *flag = &sent[((snd.op == DT_SCHED_OP_SEND_GRAD) * v->C + snd.stage) * v->m +
                                   snd.mb];
                if (mode == DT_SCHED_P2P_EAGER) {
                    if (!is_send(a.op) && !*flag)
                        break;
                    *flag = true;
                    pc[r]++, progress = true;
                    continue;
                }
                /* rendezvous: both ends must stand at the pair right now */
                int peer = p.stage % pp, pg = pc[peer];
                if (pg >= s->row[peer + 1] || memcmp(&s->actions[pg], &p, sizeof p) != 0)
                    break;
                *flag = true;
                pc[r]++, pc[peer]++, progress = true;
            }
        }
    }
    char msg[1024];
    size_t len = 0;
    bool stuck = false;
    for (int r = 0; r < pp; r++)
        stuck |= pc[r] < s->row[r + 1];
    if (stuck) {
        len += snprintf(msg, sizeof msg, "deadlock with %s sends:",
                        mode == DT_SCHED_P2P_EAGER ? "eager (buffered)" : "rendezvous (blocking)");
        for (int r = 0; r < pp && len < sizeof msg; r++) {
            char at[96], tok[48];
            if (pc[r] >= s->row[r + 1]) {
                len += snprintf(msg + len, sizeof msg - len, "%s rank %d finished", r ? ";" : "",
                                r);
                continue;
            }
            dt_sched_action a = s->actions[pc[r]], p = partner(a);
            name(v, pc[r], at, sizeof at);
            dt_sched_action_str(p, tok, sizeof tok);
            len += snprintf(msg + len, sizeof msg - len, "%s %s %s %s %s rank %d", r ? ";" : "",
                            at, is_send(a.op) ? "blocks until" : "waits for",
                            is_send(a.op) ? "it is received by" : tok,
                            is_send(a.op) ? tok : "from", p.stage % pp);
        }
    }
    free(pc);
    free(sent);
    return stuck ? dt_err_set(DT_ERR_ARG, "%s", msg) : DT_OK;
}

dt_status dt_sched_validate(const dt_schedule *s, const dt_sched_limits *limits) {
    dt_sched_limits lim = limits ? *limits : (dt_sched_limits){0};
    if ((unsigned)lim.p2p >= DT_SCHED_P2P_COUNT || lim.max_in_flight < 0)
        return dt_err_set(DT_ERR_ARG, "%s: bad limits (p2p mode %d, max in flight %d)", __func__,
                          (int)lim.p2p, lim.max_in_flight);
    view v;
    DT_TRY(view_init(&v, s));
    dt_status st = DT_OK;
    char why[256], at[96];
    for (int r = 0; r < s->pp && st == DT_OK; r++) {
        int in_flight = 0;
        for (int g = s->row[r]; g < s->row[r + 1]; g++) {
            if (!check_action(&v, r, g, &in_flight, lim.max_in_flight, why, sizeof why)) {
                st = dt_err_set(DT_ERR_ARG, "%s: %s", name(&v, g, at, sizeof at), why);
                break;
            }
        }
    }
    /* Phase 2: completeness, chunk by chunk so the message names the earliest gap. */
    static const dt_sched_op need[] = {DT_SCHED_OP_F, DT_SCHED_OP_B, DT_SCHED_OP_W};
    static const char *const need_name[] = {"F", "B", "W"};
    for (int c = 0; c < v.C && st == DT_OK; c++)
        for (int mb = 0; mb < v.m && st == DT_OK; mb++)
            for (int k = 0; k < (v.split ? 3 : 2) && st == DT_OK; k++)
                if (v.first[key(&v, need[k], c, mb)] < 0)
                    st = dt_err_set(DT_ERR_ARG, "chunk %d micro-batch %d has no %s (expected "
                                    "%d%s%d on rank %d%s)", c, mb, need_name[k], c, need_name[k],
                                    mb, c % s->pp,
                                    k == 2 ? ": the schedule splits B, so every B needs its W"
                                           : "");
    if (st == DT_OK)
        st = simulate_p2p(&v, lim.p2p);
    free(v.first);
    return st;
}

int dt_sched_peak_in_flight(const dt_schedule *s, int rank) {
    int n, cur = 0, peak = 0;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) {
        cur += a[i].op == DT_SCHED_OP_F ? 1 : a[i].op == DT_SCHED_OP_B ? -1 : 0;
        peak = cur > peak ? cur : peak;
    }
    return peak;
}

/* Time by the same blocking rules as the eager simulation: a receive completes at the later of
 * the rank's clock and the moment its send ran; sends and receives take no time. */
dt_status dt_sched_simulate(const dt_schedule *s, dt_sched_stats *out) {
    *out = (dt_sched_stats){0};
    DT_TRY(dt_sched_validate(s, NULL));
    view v;
    DT_TRY(view_init(&v, s));
    const int pp = s->pp, tB = v.split ? 1 : 2;
    int *pc = calloc((size_t)pp, sizeof *pc), *clock = calloc((size_t)pp, sizeof *clock);
    int *busy = calloc((size_t)pp, sizeof *busy);
    int *sent_at = malloc(sizeof(int) * v.C * v.m * 2);
    dt_status st = DT_OK;
    if (!pc || !clock || !busy || !sent_at) {
        st = dt_err_set(DT_ERR_OOM, "%s: tables", __func__);
        goto fail;
    }
    for (int i = 0; i < v.C * v.m * 2; i++)
        sent_at[i] = -1;
    for (int r = 0; r < pp; r++)
        pc[r] = s->row[r];
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < pp; r++) {
            for (; pc[r] < s->row[r + 1]; pc[r]++, progress = true) {
                dt_sched_action a = s->actions[pc[r]];
                int dt = a.op == DT_SCHED_OP_B ? tB : is_msg(a.op) ? 0 : 1;
                clock[r] += dt;
                busy[r] += dt;
                if (!is_msg(a.op))
                    continue;
                dt_sched_action snd = is_send(a.op) ? a : partner(a);
                int *t = &sent_at[((snd.op == DT_SCHED_OP_SEND_GRAD) * v.C + snd.stage) * v.m +
                                  snd.mb];
                if (is_send(a.op))
                    *t = clock[r];
                else if (*t < 0)
                    break;
                else if (*t > clock[r])
                    clock[r] = *t;
            }
        }
    }
    for (int r = 0; r < pp; r++) {
        out->makespan = clock[r] > out->makespan ? clock[r] : out->makespan;
        out->busy = busy[r] > out->busy ? busy[r] : out->busy;
        int peak = dt_sched_peak_in_flight(s, r);
        out->peak_in_flight = peak > out->peak_in_flight ? peak : out->peak_in_flight;
    }
    for (int r = 0; r < pp; r++)
        out->idle += out->makespan - busy[r];
    out->bubble = out->makespan ? (double)out->idle / ((double)pp * out->makespan) : 0;
fail:
    free(sent_at);
    free(busy);
    free(clock);
    free(pc);
    free(v.first);
    return st;
}
