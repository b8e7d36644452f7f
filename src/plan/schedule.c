/* plan/schedule: the dt_schedule container and its text form (see schedule.h for the grammar).
 * Generators live in schedule_gen.c, the validator and the unit-time simulation in
 * schedule_check.c. A dt_schedule owns its two arrays; everything here is pure and re-entrant.
 */
#include "plan/schedule.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token spellings, indexed by dt_sched_op. Two letters for messages keep rows readable while
 * staying unambiguous for a parser that reads digits, letters, digits. */
static const char *const op_text[DT_SCHED_OP_COUNT] = {"F", "B", "W", "SA", "RA", "SG", "RG"};

/* Large enough for any real pipeline, small enough that pp * v * m tables stay tiny and no
 * product overflows an int. */
#define MAX_ID 1000000

dt_status dt_sched_alloc(int pp, int n_chunks, int n_mb, const int *n_actions, dt_schedule **out) {
    *out = NULL;
    if (pp < 1 || n_chunks < 1 || n_mb < 1 || pp > MAX_ID || n_mb > MAX_ID ||
        (long long)pp * n_chunks > MAX_ID)
        return dt_err_set(DT_ERR_ARG,
                          "%s: pp %d, chunks %d, micro-batches %d: each must be in "
                          "1..%d",
                          __func__, pp, n_chunks, n_mb, MAX_ID);
    long long total = 0;
    for (int r = 0; r < pp; r++) {
        if (n_actions[r] < 0)
            return dt_err_set(DT_ERR_ARG, "%s: rank %d has %d actions", __func__, r, n_actions[r]);
        total += n_actions[r];
    }
    if (total > 0x7fffffff / 2)
        return dt_err_set(DT_ERR_ARG, "%s: %lld actions is too many", __func__, total);
    dt_schedule *s = calloc(1, sizeof *s);
    if (!s)
        return dt_err_set(DT_ERR_OOM, "%s: schedule header", __func__);
    static uint64_t made;
    s->serial = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
    s->pp = pp;
    s->n_chunks = n_chunks;
    s->n_mb = n_mb;
    s->split = -1;
    s->row = calloc((size_t)pp + 1, sizeof *s->row);
    s->actions = calloc(total ? (size_t)total : 1, sizeof *s->actions);
    if (!s->row || !s->actions) {
        dt_sched_free(s);
        return dt_err_set(DT_ERR_OOM, "%s: %lld actions", __func__, total);
    }
    for (int r = 0; r < pp; r++)
        s->row[r + 1] = s->row[r] + n_actions[r];
    *out = s;
    return DT_OK;
}

void dt_sched_free(dt_schedule *s) {
    if (!s)
        return;
    free(s->row);
    free(s->actions);
    free(s->slots);
    free(s->inbox);
    free(s->grads);
    free(s->fresh);
    free(s);
}

const dt_sched_action *dt_sched_row(const dt_schedule *s, int rank, int *n) {
    *n = s->row[rank + 1] - s->row[rank];
    return s->actions + s->row[rank];
}

const char *dt_sched_action_str(dt_sched_action a, char *buf, size_t n) {
    const char *op = (unsigned)a.op < DT_SCHED_OP_COUNT ? op_text[a.op] : "?";
    snprintf(buf, n, "%d%s%d", a.stage, op, a.mb);
    return buf;
}

dt_status dt_sched_format(const dt_schedule *s, char **text) {
    *text = NULL;
    /* Each token is at most 2 ids of <= 7 digits, 2 letters and a separator. */
    size_t cap = (size_t)s->row[s->pp] * 20 + (size_t)s->pp + 1;
    char *buf = malloc(cap), *p = buf;
    if (!buf)
        return dt_err_set(DT_ERR_OOM, "%s: %zu bytes", __func__, cap);
    for (int r = 0; r < s->pp; r++) {
        int n;
        const dt_sched_action *a = dt_sched_row(s, r, &n);
        for (int i = 0; i < n; i++) {
            char tok[48];
            dt_sched_action_str(a[i], tok, sizeof tok);
            size_t len = strlen(tok);
            if (i)
                *p++ = ',';
            memcpy(p, tok, len);
            p += len;
        }
        *p++ = '\n';
    }
    *p = 0;
    *text = buf;
    return DT_OK;
}

/* ---- parsing ---- */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* A line that carries a row: not blank, not a '#' comment. */
static bool is_row(const char *line, const char *end) {
    while (line < end && is_blank(*line))
        line++;
    return line < end && *line != '#';
}

/* Reads an unsigned decimal at *p (at most MAX_ID); -1 if there is none or it is too big. */
static int read_id(const char **p, const char *end) {
    if (*p >= end || !is_digit(**p))
        return -1;
    long v = 0;
    while (*p < end && is_digit(**p)) {
        v = v * 10 + (**p - '0');
        if (v > MAX_ID)
            return -1;
        (*p)++;
    }
    return (int)v;
}

/* One token [tok, end) (blanks already trimmed) into *a, or a message in err. */
static bool parse_token(const char *tok, const char *end, dt_sched_action *a, char *err, size_t n) {
    const char *p = tok;
    int stage = read_id(&p, end);
    if (stage < 0) {
        snprintf(err, n, "expected a chunk number (0..%d) first", MAX_ID);
        return false;
    }
    const char *op = p;
    while (p < end && ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')))
        p++;
    int k = -1;
    for (int o = 0; o < DT_SCHED_OP_COUNT; o++)
        if ((size_t)(p - op) == strlen(op_text[o]) && memcmp(op, op_text[o], p - op) == 0)
            k = o;
    if (k < 0) {
        snprintf(err, n, "expected an op F, B, W, SA, RA, SG or RG after the chunk number");
        return false;
    }
    int mb = read_id(&p, end);
    if (mb < 0) {
        snprintf(err, n, "expected a micro-batch number (0..%d) after the op", MAX_ID);
        return false;
    }
    if (p != end) {
        snprintf(err, n, "expected ',' or the end of the line after the micro-batch number");
        return false;
    }
    *a = (dt_sched_action){.op = (dt_sched_op)k, .stage = stage, .mb = mb};
    return true;
}

/* Two passes over the text: count rows and tokens, then allocate and fill. */
dt_status dt_sched_parse(const char *text, dt_schedule **out) {
    *out = NULL;
    int pp = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        e = e ? e : l + strlen(l);
        pp += is_row(l, e);
        l = *e ? e + 1 : e;
    }
    if (pp == 0)
        return dt_err_set(DT_ERR_FORMAT, "schedule: no rows (expected one line of actions per "
                                         "rank, e.g. 0F0,0SA0,0RG0,0B0)");
    int *n_actions = calloc((size_t)pp, sizeof *n_actions);
    if (!n_actions)
        return dt_err_set(DT_ERR_OOM, "%s: %d rows", __func__, pp);
    int r = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        e = e ? e : l + strlen(l);
        if (is_row(l, e)) {
            n_actions[r] = 1;
            for (const char *c = l; c < e; c++)
                n_actions[r] += *c == ',';
            r++;
        }
        l = *e ? e + 1 : e;
    }
    /* Sizes are provisional (1 chunk, 1 micro-batch) until every token is read. */
    dt_schedule *s = NULL;
    dt_status st = dt_sched_alloc(pp, 1, 1, n_actions, &s);
    free(n_actions);
    if (st != DT_OK)
        return st;
    int max_stage = 0, max_mb = 0, line = 0;
    r = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        e = e ? e : l + strlen(l);
        line++;
        if (is_row(l, e)) {
            dt_sched_action *a = s->actions + s->row[r];
            int i = 0;
            for (const char *t = l; t <= e; i++) {
                const char *te = memchr(t, ',', (size_t)(e - t));
                te = te ? te : e;
                const char *b = t, *be = te;
                while (b < be && is_blank(*b))
                    b++;
                while (be > b && is_blank(be[-1]))
                    be--;
                char why[160];
                if (b == be) {
                    snprintf(why, sizeof why, "expected an action like 0F0 (empty token)");
                    st = DT_ERR_FORMAT;
                } else if (!parse_token(b, be, &a[i], why, sizeof why)) {
                    st = DT_ERR_FORMAT;
                }
                if (st != DT_OK) {
                    dt_sched_free(s);
                    return dt_err_set(st, "schedule line %d (rank %d), token %d '%.*s': %s", line,
                                      r, i, (int)(be - b > 40 ? 40 : be - b), b, why);
                }
                max_stage = a[i].stage > max_stage ? a[i].stage : max_stage;
                max_mb = a[i].mb > max_mb ? a[i].mb : max_mb;
                t = te + 1;
            }
            r++;
        }
        l = *e ? e + 1 : e;
    }
    s->n_chunks = max_stage / pp + 1;
    s->n_mb = max_mb + 1;
    st = dt_sched_count(s);
    if (st != DT_OK) {
        dt_sched_free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

/* ---- what a schedule asks of a rank's memory ---------------------------------------------- */

/* A valid schedule has a W for every (chunk, mb) or for none, so rank 0's row tells. */
bool dt_sched_split(const dt_schedule *s) {
    if (s->split >= 0)
        return s->split;
    for (int i = 0; i < s->row[1]; i++)
        if (s->actions[i].op == DT_SCHED_OP_W)
            return true;
    return false;
}

bool dt_sched_takes_slot(const dt_sched_action *a) { return a->op == DT_SCHED_OP_F; }

bool dt_sched_gives_slot(const dt_sched_action *a, bool split) {
    if (split)
        return a->op == DT_SCHED_OP_W;
    return a->op == DT_SCHED_OP_SEND_GRAD || (a->op == DT_SCHED_OP_B && a->stage == 0);
}

bool dt_sched_takes_grad(const dt_schedule *s, const dt_sched_action *a) {
    return a->op == DT_SCHED_OP_RECV_GRAD ||
           (a->op == DT_SCHED_OP_B && a->stage == s->pp * s->n_chunks - 1);
}

bool dt_sched_gives_grad(const dt_sched_action *a) {
    return a->op == DT_SCHED_OP_SEND_GRAD || (a->op == DT_SCHED_OP_B && a->stage == 0);
}

static int count_slots(const dt_schedule *s, int rank);
static int count_inbox(const dt_schedule *s, int rank);
static int count_grads(const dt_schedule *s, int rank);

static void count_fresh(const dt_schedule *s, int rank, bool *fresh) {
    int n, prev = -1;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) {
        dt_sched_op op = a[i].op;
        if (op != DT_SCHED_OP_F && op != DT_SCHED_OP_B && op != DT_SCHED_OP_W)
            continue;
        if (op == DT_SCHED_OP_B && a[i].stage >= 0 && a[i].mb >= 0 &&
            a[i].stage < s->pp * s->n_chunks && a[i].mb < s->n_mb)
            fresh[a[i].stage * s->n_mb + a[i].mb] = prev >= 0 && a[prev].op == DT_SCHED_OP_F &&
                                                    a[prev].stage == a[i].stage &&
                                                    a[prev].mb == a[i].mb;
        prev = i;
    }
}

dt_status dt_sched_count(dt_schedule *s) {
    free(s->slots);
    free(s->inbox);
    free(s->grads);
    free(s->fresh);
    s->slots = s->inbox = s->grads = NULL;
    s->fresh = NULL;
    s->split = -1;
    size_t pairs = (size_t)s->pp * s->n_chunks * s->n_mb;
    int *slots = malloc((size_t)s->pp * sizeof *slots),
        *inbox = malloc((size_t)s->pp * sizeof *inbox),
        *grads = malloc((size_t)s->pp * sizeof *grads);
    bool *fresh = calloc(pairs, sizeof *fresh);
    if (!slots || !inbox || !grads || !fresh) {
        free(slots), free(inbox), free(grads), free(fresh);
        return dt_err_set(DT_ERR_OOM, "%s: out of memory", __func__);
    }
    for (int r = 0; r < s->pp; r++) {
        slots[r] = count_slots(s, r);
        inbox[r] = count_inbox(s, r);
        grads[r] = count_grads(s, r);
        count_fresh(s, r, fresh);
    }
    s->slots = slots;
    s->inbox = inbox;
    s->grads = grads;
    s->fresh = fresh;
    s->split = dt_sched_split(s);
    return DT_OK;
}

void dt_sched_fresh(const dt_schedule *s, int rank, bool *fresh) {
    if (!s->fresh) {
        count_fresh(s, rank, fresh);
        return;
    }
    int n;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) /* the rank's pairs: those it runs a B of */
        if (a[i].op == DT_SCHED_OP_B) {
            int k = a[i].stage * s->n_mb + a[i].mb;
            fresh[k] = s->fresh[k];
        }
}

int dt_sched_slots(const dt_schedule *s, int rank) {
    return s->slots ? s->slots[rank] : count_slots(s, rank);
}

int dt_sched_inbox(const dt_schedule *s, int rank) {
    return s->inbox ? s->inbox[rank] : count_inbox(s, rank);
}

int dt_sched_grads(const dt_schedule *s, int rank) {
    return s->grads ? s->grads[rank] : count_grads(s, rank);
}

/* Counted for a valid schedule, where each (chunk, mb) has one F and one release. */
static int count_slots(const dt_schedule *s, int rank) {
    int n, live = 0, peak = 0;
    bool split = dt_sched_split(s);
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) {
        if (dt_sched_takes_slot(&a[i]))
            peak = ++live > peak ? live : peak;
        else if (dt_sched_gives_slot(&a[i], split))
            live--;
    }
    return peak;
}

static int count_inbox(const dt_schedule *s, int rank) {
    int n, live = 0, peak = 0;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) {
        if (a[i].op == DT_SCHED_OP_RECV_ACT)
            peak = ++live > peak ? live : peak;
        else if (a[i].op == DT_SCHED_OP_F && a[i].stage > 0 && live > 0)
            live--; /* a chunk with a predecessor consumed its received input */
    }
    return peak;
}

static int count_grads(const dt_schedule *s, int rank) {
    int n, live = 0, peak = 1;
    const dt_sched_action *a = dt_sched_row(s, rank, &n);
    for (int i = 0; i < n; i++) {
        if (dt_sched_takes_grad(s, &a[i]))
            peak = ++live > peak ? live : peak;
        if (dt_sched_gives_grad(&a[i]) && live > 0)
            live--;
    }
    return peak;
}
