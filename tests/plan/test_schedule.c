/* plan/schedule: pipeline schedules as data, without MPI.
 * Every generator for pp in {1, 2, 4} and micro-batches in {pp, 2 pp, 8} (interleaved with 2
 * chunks) must validate in both p2p modes, survive the text round trip, and match the theory
 * in the unit-time simulation (bubble and peak in-flight micro-batches per rank), and count
 * the boundary gradient buffers a rank needs as the overlap of their intervals. Hand-made
 * bad schedules must be rejected with a message naming the offending action.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "plan/schedule.h"

typedef enum kind { GPIPE, ONE_F_ONE_B, INTERLEAVED, ZBH1, KIND_COUNT } kind;
static const char *const kind_name[KIND_COUNT] = {"gpipe", "1f1b", "interleaved", "zbh1"};

static dt_status generate(kind k, int pp, int m, int v, dt_schedule **out) {
    switch (k) {
    case GPIPE: return dt_sched_gpipe(pp, m, out);
    case ONE_F_ONE_B: return dt_sched_1f1b(pp, m, out);
    case INTERLEAVED: return dt_sched_interleaved(pp, m, v, out);
    default: return dt_sched_zbh1(pp, m, out);
    }
}

static int imin(int a, int b) { return a < b ? a : b; }

/* Peak (chunk, mb) pairs in flight on rank r that the schedule's construction promises. */
static int expected_peak(kind k, int pp, int m, int v, int r) {
    switch (k) {
    case GPIPE: return m; /* every forward before any backward */
    case INTERLEAVED: /* Megatron warm-up plus the first steady forward; all when m == pp */
        return m == pp ? m * v : imin(m * v, (v - 1) * pp + 2 * (pp - 1 - r) + 1);
    default: return imin(pp - r, m); /* 1F1B and ZB-H1 alike */
    }
}

static bool same(const dt_schedule *a, const dt_schedule *b) {
    if (a->pp != b->pp || a->n_chunks != b->n_chunks || a->n_mb != b->n_mb)
        return false;
    for (int r = 0; r <= a->pp; r++)
        if (a->row[r] != b->row[r])
            return false;
    for (int i = 0; i < a->row[a->pp]; i++)
        if (a->actions[i].op != b->actions[i].op || a->actions[i].stage != b->actions[i].stage ||
            a->actions[i].mb != b->actions[i].mb)
            return false;
    return true;
}

/* Boundary gradient buffers rank r needs, from each pair's interval: from its RECV_GRAD (the
 * last chunk: its B) to its SEND_GRAD (chunk 0: its B); the most intervals over one action. */
static int grads_by_intervals(const dt_schedule *s, int r) {
    int n, pairs = s->pp * s->n_chunks * s->n_mb, last = s->pp * s->n_chunks - 1, most = 0;
    const dt_sched_action *a = dt_sched_row(s, r, &n);
    int *from = malloc((size_t)pairs * sizeof *from), *to = malloc((size_t)pairs * sizeof *to);
    for (int k = 0; k < pairs; k++)
        from[k] = to[k] = -1;
    for (int i = 0; i < n; i++) {
        int k = a[i].stage * s->n_mb + a[i].mb;
        if (a[i].op == DT_SCHED_OP_RECV_GRAD || (a[i].op == DT_SCHED_OP_B && a[i].stage == last))
            from[k] = i;
        if (a[i].op == DT_SCHED_OP_SEND_GRAD || (a[i].op == DT_SCHED_OP_B && a[i].stage == 0))
            to[k] = i;
    }
    for (int i = 0; i < n; i++) {
        int live = 0;
        for (int k = 0; k < pairs; k++)
            live += from[k] >= 0 && from[k] <= i && i <= to[k];
        most = live > most ? live : most;
    }
    free(from);
    free(to);
    return most > 0 ? most : 1;
}

static void check_generator(kind k, int pp, int m, int v) {
    dt_schedule *s = NULL, *back = NULL;
    char *text = NULL, *text2 = NULL;
    DT_CHECK_OK(generate(k, pp, m, v, &s));
    if (!s)
        return;
    const char *kn = kind_name[k];
    /* both p2p modes, and the memory bound the construction promises (rank 0 holds the most) */
    int limit = expected_peak(k, pp, m, v, 0);
    dt_sched_limits eager = {.max_in_flight = limit}, rdv = {limit, DT_SCHED_P2P_RENDEZVOUS};
    dt_status st = dt_sched_validate(s, &eager);
    DT_CHECK(st == DT_OK, "%s pp %d m %d v %d eager: %s", kn, pp, m, v, dt_err_msg());
    st = dt_sched_validate(s, &rdv);
    DT_CHECK(st == DT_OK, "%s pp %d m %d v %d rendezvous: %s", kn, pp, m, v, dt_err_msg());
    if (limit > 1) {
        dt_sched_limits tight = {.max_in_flight = limit - 1};
        DT_CHECK(dt_sched_validate(s, &tight) == DT_ERR_ARG &&
                     strstr(dt_err_msg(), "in flight"),
                 "%s pp %d m %d: limit %d should be exceeded: %s", kn, pp, m, limit - 1,
                 dt_err_msg());
    }

    /* text round trip: same struct, same text */
    DT_CHECK_OK(dt_sched_format(s, &text));
    if (text && dt_sched_parse(text, &back) == DT_OK) {
        DT_CHECK(same(s, back), "%s pp %d m %d: parse(format(s)) differs", kn, pp, m);
        DT_CHECK_OK(dt_sched_format(back, &text2));
        DT_CHECK(text2 && strcmp(text, text2) == 0, "%s pp %d m %d: text differs", kn, pp, m);
    } else {
        DT_CHECK(false, "%s pp %d m %d: parse failed: %s", kn, pp, m, dt_err_msg());
    }

    /* theory */
    for (int r = 0; r < pp; r++) {
        int got = dt_sched_peak_in_flight(s, r), want = expected_peak(k, pp, m, v, r);
        DT_CHECK(got == want, "%s pp %d m %d v %d rank %d: peak in flight %d, want %d", kn, pp,
                 m, v, r, got, want);
    }
    /* a gradient buffer per pair around its backward, not per slot: one under the schedules
     * of one chunk a rank, whose B follows its gradient's receive */
    for (int r = 0; r < pp; r++) {
        int got = dt_sched_grads(s, r), want = grads_by_intervals(s, r);
        DT_CHECK(got == want && (k == INTERLEAVED || got == 1),
                 "%s pp %d m %d v %d rank %d: %d gradient buffers, intervals say %d", kn, pp, m, v,
                 r, got, want);
    }
    if (k == ZBH1) /* ZB-H1 keeps pp micro-batches between F and W on every rank (section 3.1) */
        for (int r = 0; r < pp; r++) {
            int n, cur = 0, peak = 0;
            const dt_sched_action *a = dt_sched_row(s, r, &n);
            for (int i = 0; i < n; i++) {
                cur += a[i].op == DT_SCHED_OP_F ? 1 : a[i].op == DT_SCHED_OP_W ? -1 : 0;
                peak = cur > peak ? cur : peak;
            }
            DT_CHECK(peak == imin(pp, m), "zbh1 pp %d m %d rank %d: %d between F and W", pp, m,
                     r, peak);
        }
    dt_sched_stats stats;
    DT_CHECK_OK(dt_sched_simulate(s, &stats));
    double p = pp, mm = m, vv = v;
    switch (k) {
    case GPIPE:
    case ONE_F_ONE_B: /* (p-1)/(m+p-1): p-1 slots of F+B=3 at each end of the pipeline */
        DT_CHECK(stats.makespan == 3 * (m + pp - 1), "%s makespan %d", kn, stats.makespan);
        DT_CHECK_CLOSE(stats.bubble, (p - 1) / (mm + p - 1), 1e-12);
        break;
    case INTERLEAVED: /* (p-1)/(v m + p - 1): the ramp costs p-1 chunk-slots, not stage-slots */
        DT_CHECK(stats.makespan == 3 * (m * v + pp - 1), "%s pp %d m %d v %d makespan %d", kn,
                 pp, m, v, stats.makespan);
        DT_CHECK_CLOSE(stats.bubble, (p - 1) / (vv * mm + p - 1), 1e-12);
        break;
    default: /* (p-1)(F+B-W) = p-1 idle per rank: a third of 1F1B's 3(p-1) */
        DT_CHECK(stats.idle == pp * (pp - 1), "%s pp %d m %d: idle %d, want %d", kn, pp, m,
                 stats.idle, pp * (pp - 1));
        DT_CHECK_CLOSE(stats.bubble, (p - 1) / (3 * mm + p - 1), 1e-12);
        break;
    }
    DT_CHECK(stats.peak_in_flight == expected_peak(k, pp, m, v, 0), "%s stats peak %d", kn,
             stats.peak_in_flight);
    free(text);
    free(text2);
    dt_sched_free(back);
    dt_sched_free(s);
}

/* Parse `text`, validate it under `lim` and expect a failure mentioning every needle. */
static void expect_bad(const char *what, const char *text, dt_sched_limits lim,
                       const char *needle1, const char *needle2) {
    dt_schedule *s = NULL;
    dt_status st = dt_sched_parse(text, &s);
    DT_CHECK(st == DT_OK, "%s: parse: %s", what, dt_err_msg());
    if (!s)
        return;
    st = dt_sched_validate(s, &lim);
    const char *msg = dt_err_msg();
    DT_CHECK(st == DT_ERR_ARG && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)),
             "%s: got '%s' (%s), want '%s'%s%s", what, st == DT_OK ? "ok" : msg,
             dt_status_str(st), needle1, needle2 ? " and " : "", needle2 ? needle2 : "");
    if (dt_test.perf) /* --perf doubles as --verbose here: show the messages */
        printf("  %-28s %s\n", what, msg);
    dt_sched_free(s);
}

static void expect_parse_error(const char *text, const char *needle1, const char *needle2) {
    dt_schedule *s = NULL;
    dt_status st = dt_sched_parse(text, &s);
    const char *msg = dt_err_msg();
    DT_CHECK(st == DT_ERR_FORMAT && !s && strstr(msg, needle1) && strstr(msg, needle2),
             "parse '%s': got '%s', want '%s' and '%s'", text, st == DT_OK ? "ok" : msg, needle1,
             needle2);
    dt_sched_free(s);
}

static void check_bad_schedules(void) {
    dt_sched_limits eager = {0}, rdv = {.p2p = DT_SCHED_P2P_RENDEZVOUS};
    /* rank 0 sends micro-batch 0's activation that rank 1 never receives */
    expect_bad("missing receive", "0F0,0SA0,0RG0,0B0\n1F0,1B0,1SG0\n", eager,
               "rank 0 action 1 (0SA0): no matching 1RA0 on rank 1", NULL);
    expect_bad("B before its F", "0F0,0SA0,0RG0,0B0\n1RA0,1B0,1F0,1SG0\n", eager,
               "rank 1 action 1 (1B0): B before its F: 1F0 comes later, at action 2", NULL);
    /* Cross-wise: rank 0 sends mb 1 forward while rank 1 sends mb 0's gradient back. Fine with
     * buffered sends; with rendezvous each send waits for a receive the other never reaches. */
    const char *cross = "0F0,0SA0,0F1,0SA1,0RG0,0B0,0RG1,0B1\n"
                        "1RA0,1F0,1B0,1SG0,1RA1,1F1,1B1,1SG1\n";
    dt_schedule *s = NULL;
    DT_CHECK_OK(dt_sched_parse(cross, &s));
    if (s)
        DT_CHECK(dt_sched_validate(s, &eager) == DT_OK, "cross-wise, eager: %s", dt_err_msg());
    dt_sched_free(s);
    expect_bad("cross-wise rendezvous", cross, rdv,
               "rank 0 action 3 (0SA1) blocks until it is received by 1RA1 rank 1",
               "rank 1 action 3 (1SG0) blocks until it is received by 0RG0 rank 0");
    /* both ranks receive first: no buffering helps */
    expect_bad("receive-first deadlock", "0F0,0RG0,0SA0,0B0\n1RA0,1F0,1B0,1SG0\n", eager,
               "rank 0 action 1 (0RG0) waits for 1SG0 from rank 1",
               "rank 1 action 0 (1RA0) waits for 0SA0 from rank 0");
    expect_bad("too many in flight", "0F0,0F1,0F2,0B0,0B1,0B2\n", (dt_sched_limits){2, 0},
               "rank 0 action 2 (0F2): 3 micro-batches in flight (F done, B not yet), over the "
               "limit 2", NULL);
    expect_bad("W without B", "0F0,0W0\n", eager,
               "rank 0 action 1 (0W0): W without its B: there is no 0B0 on rank 0", NULL);
    expect_bad("W before B", "0F0,0W0,0B0\n", eager,
               "rank 0 action 1 (0W0): W before its B: 0B0 comes later, at action 2", NULL);
    expect_bad("duplicate F", "0F0,0F0,0B0\n", eager,
               "rank 0 action 1 (0F0): duplicate, first at rank 0 action 0 (0F0)", NULL);
    expect_bad("missing W in split", "0F0,0B0,0W0,0F1,0B1\n", eager,
               "chunk 0 micro-batch 1 has no W", NULL);
    expect_bad("missing B", "0F0,0F1,0B0\n", eager, "chunk 0 micro-batch 1 has no B", NULL);
    expect_bad("wrong rank", "0F0,1F0\n1B0\n", eager,
               "rank 0 action 1 (1F0): chunk 1 lives on rank 1, not 0", NULL);
    expect_bad("F before its input", "0F0,0SA0,0RG0,0B0\n1F0,1RA0,1B0,1SG0\n", eager,
               "rank 1 action 0 (1F0): F before its input arrives: 1RA0 comes later", NULL);
    expect_bad("send to nobody", "0F0,0SA0,0B0\n", eager,
               "rank 0 action 1 (0SA0): chunk 0 is the last chunk", NULL);
    expect_bad("send before F", "0SA0,0F0,0RG0,0B0\n1RA0,1F0,1B0,1SG0\n", eager,
               "rank 0 action 0 (0SA0): sends before its F", NULL);

    expect_parse_error("0F0,0X1\n", "line 1 (rank 0), token 1 '0X1'", "expected an op");
    expect_parse_error("0F0,,0B0\n", "token 1 ''", "empty token");
    expect_parse_error("0F", "token 0 '0F'", "expected a micro-batch number");
    expect_parse_error("F0", "token 0 'F0'", "expected a chunk number");
    expect_parse_error("0F0 0B0", "'0F0 0B0'", "expected ','");
    expect_parse_error("# a comment\n0F0,1SA0\n\n1Q0\n", "line 4 (rank 1), token 0 '1Q0'",
                       "expected an op");
    expect_parse_error("\n# nothing\n", "no rows", "one line of actions per rank");
    /* blanks, comments and CRLF are tolerated and sizes inferred */
    DT_CHECK_OK(dt_sched_parse("# two ranks\r\n 0F0 , 0SA0,0RG0,0B0\r\n\n1RA0,1F0,1B0,1SG0", &s));
    if (s) {
        DT_CHECK(s->pp == 2 && s->n_chunks == 1 && s->n_mb == 1 && s->row[2] == 8,
                 "parsed pp %d chunks %d mb %d actions %d", s->pp, s->n_chunks, s->n_mb,
                 s->row[2]);
        DT_CHECK_OK(dt_sched_validate(s, &rdv));
    }
    dt_sched_free(s);
}

static void check_arguments(void) {
    dt_schedule *s = NULL;
    DT_CHECK(dt_sched_interleaved(4, 6, 2, &s) == DT_ERR_ARG && !s &&
                 strstr(dt_err_msg(), "micro-batches 6 % pp 4 != 0"),
             "interleaved m %% pp: %s", dt_err_msg());
    DT_CHECK(dt_sched_1f1b(0, 4, &s) == DT_ERR_ARG && !s, "pp 0 accepted");
    DT_CHECK(dt_sched_gpipe(2, 0, &s) == DT_ERR_ARG && !s, "m 0 accepted");
    dt_sched_free(NULL);
}

/* Worked numbers quoted in the header/report: 1F1B pp 4 m 8 has bubble 3/11, ZB-H1 3/27. */
static void check_worked_example(void) {
    dt_schedule *a = NULL, *b = NULL;
    dt_sched_stats sa, sb;
    DT_CHECK_OK(dt_sched_1f1b(4, 8, &a));
    DT_CHECK_OK(dt_sched_zbh1(4, 8, &b));
    if (a && b && dt_sched_simulate(a, &sa) == DT_OK && dt_sched_simulate(b, &sb) == DT_OK) {
        DT_CHECK_CLOSE(sa.bubble, 3.0 / 11, 1e-12);
        DT_CHECK_CLOSE(sb.bubble, 3.0 / 27, 1e-12);
        DT_CHECK(3 * sb.idle == sa.idle, "ZB-H1 idle %d vs 1F1B %d: want a third", sb.idle,
                 sa.idle);
    }
    if (dt_test.perf && b) {
        char *t = NULL;
        if (dt_sched_format(b, &t) == DT_OK)
            printf("zbh1 pp 4 m 8:\n%s", t);
        free(t);
    }
    dt_sched_free(a);
    dt_sched_free(b);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    static const int pps[] = {1, 2, 4};
    for (int k = 0; k < KIND_COUNT; k++)
        for (int i = 0; i < 3; i++) {
            int pp = pps[i], ms[] = {pp, 2 * pp, 8};
            for (int j = 0; j < 3; j++) {
                if (j > 0 && ms[j] == ms[j - 1])
                    continue;
                if (j == 2 && ms[2] == ms[0])
                    continue;
                check_generator((kind)k, pp, ms[j], k == INTERLEAVED ? 2 : 1);
            }
        }
    check_generator(INTERLEAVED, 2, 8, 3); /* v = 3 too */
    check_bad_schedules();
    check_arguments();
    check_worked_example();
    return DT_TEST_END();
}
