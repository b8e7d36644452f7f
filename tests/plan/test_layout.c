/* plan/layout: one rank's layout, without MPI.
 * Checks the worked example of layout.h; that over a matrix of layouts every global batch row
 * is read by exactly one dp rank per (pp, sp, tp) place, in whole micro-batches; that the
 * gradient groups partition the world into groups of dp x sp ranks with places 0..size-1;
 * that every unit is held by exactly one pipeline rank per chunk; where gradients live; each
 * refusal names its key; that a schedule's slots and inbox are recorded per rank; and where
 * boundaries travel in pieces.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "plan/layout.h"

static dt_config base(int L, int B, int T) {
    dt_config c;
    dt_config_defaults(&c);
    c.model.n_layer = L;
    c.train.batch_size = B;
    c.train.seq_len = T;
    c.train.micro_batch_size = 0;
    c.plugin.microbatches = 0;
    return c;
}

static void check_worked_example(void) {
    dt_config c = base(4, 16, 8);
    c.plugin.pp_size = 2;
    c.plugin.tp_size = 2;
    c.train.micro_batch_size = 2;
    dt_layout l;
    DT_CHECK_OK(dt_layout_make(&c, 8, 5, &l));
    DT_CHECK(l.pp_rank == 1 && l.coords[DT_AXIS_DP] == 0 && l.coords[DT_AXIS_SP] == 0 &&
                 l.coords[DT_AXIS_TP] == 1,
             "rank 5 at pp %d dp %d sp %d tp %d", l.pp_rank, l.coords[DT_AXIS_DP],
             l.coords[DT_AXIS_SP], l.coords[DT_AXIS_TP]);
    DT_CHECK(l.dp == 2 && l.rows == 8 && l.row0 == 0 && l.mb == 2 && l.n_mb == 4,
             "dp %d rows %d row0 %d mb %d n_mb %d", l.dp, l.rows, l.row0, l.mb, l.n_mb);
    DT_CHECK(l.grad_size == 2 && l.grad_rank == 0, "grad group %d, place %d", l.grad_size,
             l.grad_rank);
    DT_CHECK(!l.held[0] && !l.held[1] && !l.held[2] && l.held[3] && l.held[4] && l.held[5],
             "rank 5 holds the second half and the final unit");
    DT_CHECK(!l.scheduled && l.n_slots == 1, "a pipeline's schedule is set afterwards");
}

/* Every row of the global batch read once per (pp, sp, tp) place; micro-batches tile rows. */
static void check_rows(const dt_config *c, int world) {
    enum { MAXB = 256 };
    int read[64][MAXB];
    memset(read, 0, sizeof read);
    for (int r = 0; r < world; r++) {
        dt_layout l;
        DT_CHECK_OK(dt_layout_make(c, world, r, &l));
        int place = r % (l.tp * l.sp) + (l.tp * l.sp) * l.pp_rank; /* all but dp */
        DT_CHECK(l.mb * l.n_mb == l.rows && l.rows * l.dp == l.B, "rank %d: %d x %d rows of %d", r,
                 l.mb, l.n_mb, l.B);
        for (int i = 0; i < l.rows; i++)
            read[place][l.row0 + i]++;
        DT_CHECK(l.tokens_mb == (int64_t)l.mb * l.T && l.tokens_sp * l.sp == l.tokens_mb &&
                     l.tokens_rows * l.rows_split == l.tokens_sp,
                 "rank %d: tokens %lld %lld %lld", r, (long long)l.tokens_mb,
                 (long long)l.tokens_sp, (long long)l.tokens_rows);
    }
    int places = world / (world / (c->plugin.pp_size * c->plugin.sp_size * c->plugin.tp_size));
    for (int p = 0; p < places; p++)
        for (int i = 0; i < c->train.batch_size; i++)
            DT_CHECK(read[p][i] == 1, "world %d place %d row %d read %d times", world, p, i,
                     read[p][i]);
}

/* The gradient groups (ranks with equal pp and tp coordinates) have dp x sp members with
 * places 0..size-1, each once. */
static void check_grad_groups(const dt_config *c, int world) {
    int seen[64][64];
    memset(seen, 0, sizeof seen);
    for (int r = 0; r < world; r++) {
        dt_layout l;
        DT_CHECK_OK(dt_layout_make(c, world, r, &l));
        int group = l.pp_rank * l.tp + l.coords[DT_AXIS_TP];
        DT_CHECK(l.grad_rank >= 0 && l.grad_rank < l.grad_size, "rank %d place %d of %d", r,
                 l.grad_rank, l.grad_size);
        seen[group][l.grad_rank]++;
    }
    dt_layout l0;
    DT_CHECK_OK(dt_layout_make(c, world, 0, &l0));
    for (int g = 0; g < l0.pp * l0.tp; g++)
        for (int k = 0; k < l0.grad_size; k++)
            DT_CHECK(seen[g][k] == 1, "group %d place %d: %d ranks", g, k, seen[g][k]);
}

static void check_matrix(void) {
    const int shapes[][4] = {/* pp sp tp world */
                             {1, 1, 1, 1}, {1, 1, 1, 4}, {1, 1, 2, 4}, {1, 2, 1, 4},
                             {2, 1, 1, 4}, {2, 1, 2, 8}, {2, 2, 1, 8}, {1, 2, 2, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int mbs = 0; mbs <= 2; mbs++) {
            dt_config c = base(4, 16, 8);
            c.plugin.pp_size = shapes[i][0];
            c.plugin.sp_size = shapes[i][1];
            c.plugin.tp_size = shapes[i][2];
            c.plugin.sp_mode =
                shapes[i][2] > 1 && shapes[i][1] == 1 ? DT_SP_SPLIT_GATHER : DT_SP_ALL_TO_ALL;
            c.train.micro_batch_size = mbs;
            check_rows(&c, shapes[i][3]);
            check_grad_groups(&c, shapes[i][3]);
        }
}

static void check_stages(void) {
    dt_config c = base(6, 8, 4);
    c.plugin.pp_size = 2;
    c.plugin.pp_chunks = 2;
    c.plugin.pp_schedule[0] = '\0';
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "interleaved");
    c.train.micro_batch_size = 2;
    int holders[8] = {0};
    for (int r = 0; r < 2; r++) {
        dt_layout l;
        DT_CHECK_OK(dt_layout_make(&c, 2, r, &l));
        for (int u = 0; u < 8; u++)
            holders[u] += dt_layout_holds(&l, u);
        dt_schedule *s = NULL;
        DT_CHECK_OK(dt_layout_schedule_make(&l, &c.plugin, &s));
        if (s) {
            DT_CHECK_OK(dt_layout_set_schedule(&l, s, "interleaved"));
            DT_CHECK(l.scheduled && l.n_slots == dt_sched_slots(s, r) &&
                         l.n_inbox == dt_sched_inbox(s, r) && !l.split_backward,
                     "rank %d: slots %d inbox %d", r, l.n_slots, l.n_inbox);
        }
        dt_sched_free(s);
    }
    for (int u = 0; u < 8; u++)
        DT_CHECK(holders[u] == 1, "unit %d held by %d ranks", u, holders[u]);

    /* a schedule for other micro-batches is refused, naming both */
    dt_layout l;
    DT_CHECK_OK(dt_layout_make(&c, 2, 0, &l));
    dt_schedule *other = NULL;
    DT_CHECK_OK(dt_sched_1f1b(2, 4, &other));
    dt_status st = other ? dt_layout_set_schedule(&l, other, "plugin.pp_schedule file x") : DT_OK;
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "pp_chunks 2"), "mismatch: %s", dt_err_msg());
    dt_sched_free(other);

    /* zero-bubble: split backward recorded, and ZeRO 2's gradients whole */
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "zbh1");
    c.plugin.pp_chunks = 1;
    c.plugin.type = DT_PLUGIN_ZERO2;
    const dt_schedule *s;
    dt_schedule *own;
    DT_CHECK_OK(dt_layout_make_scheduled(&c, 2, 1, NULL, &l, &s, &own));
    DT_CHECK(l.split_backward && s == own, "zbh1 splits the backward");
    DT_CHECK(dt_layout_grad_home(&l, 1, 4) == DT_GRAD_WHOLE, "zbh1 + ZeRO 2: whole arena");
    dt_sched_free(own);
}

static void check_grad_home(void) {
    DT_CHECK(dt_grad_home_of(0, false, false, 3, 6) == DT_GRAD_ARENA, "ZeRO 0: arena");
    DT_CHECK(dt_grad_home_of(1, true, true, 0, 6) == DT_GRAD_ARENA, "ZeRO 1: arena");
    DT_CHECK(dt_grad_home_of(2, false, false, 3, 6) == DT_GRAD_ROTATING, "ZeRO 2 block");
    DT_CHECK(dt_grad_home_of(3, false, false, 0, 6) == DT_GRAD_PINNED, "ZeRO 3 embedding");
    DT_CHECK(dt_grad_home_of(3, false, false, 5, 6) == DT_GRAD_PINNED, "ZeRO 3 head");
    DT_CHECK(dt_grad_home_of(2, false, true, 5, 6) == DT_GRAD_PINNED_STEP, "pipelined head");
    DT_CHECK(dt_grad_home_of(2, false, true, 2, 6) == DT_GRAD_ROTATING, "pipelined block");
    DT_CHECK(dt_grad_home_of(3, true, true, 2, 6) == DT_GRAD_WHOLE, "split backward");
}

/* 4-byte floats against 1000-byte buckets, units filled from the last: 100 + 200 floats
 * reach the bound at unit 3; 150 + 150 at unit 1; unit 0 closes whatever is left. */
static void check_grad_buckets(void) {
    int64_t floats[5] = {10, 150, 150, 200, 100};
    int closes[5];
    DT_CHECK(dt_grad_buckets(floats, 5, 1000, closes) == 3, "three buckets");
    DT_CHECK(closes[4] == -1 && closes[3] == 0 && closes[2] == -1 && closes[1] == 1 &&
                 closes[0] == 2,
             "closes %d %d %d %d %d", closes[0], closes[1], closes[2], closes[3], closes[4]);
    DT_CHECK(dt_grad_buckets(floats, 5, 1e9, closes) == 1 && closes[0] == 0 && closes[4] == -1,
             "one bucket of everything, closed by unit 0");
    DT_CHECK(dt_grad_buckets(floats, 5, 1, closes) == 5 && closes[4] == 0 && closes[0] == 4,
             "a bucket a unit, the last unit's first");
}

/* plugin.pp_scatter is in force only where a stage's tp ranks hold the same whole boundary;
 * the pieces tile it, as even as whole floats allow (10 over 4: 2, 3, 2, 3) */
static void check_scatter(void) {
    dt_config c = base(4, 8, 4);
    c.plugin.pp_scatter = true;
    c.plugin.pp_size = 2, c.plugin.tp_size = 2;
    dt_layout l;
    DT_CHECK_OK(dt_layout_make(&c, 4, 3, &l));
    DT_CHECK(l.pp_scatter, "pp 2 x tp 2 pieces its boundaries");
    c.plugin.sp_mode = DT_SP_SPLIT_GATHER;
    DT_CHECK_OK(dt_layout_make(&c, 4, 3, &l));
    DT_CHECK(!l.pp_scatter, "Megatron-SP's boundary is already split over tp");
    c.plugin.sp_mode = DT_SP_ALL_TO_ALL;
    c.model.arch = DT_ARCH_DIT, c.model.text_len = 12;
    DT_CHECK_OK(dt_layout_make(&c, 4, 3, &l));
    DT_CHECK(!l.pp_scatter, "a DiT's text gradient differs between tp ranks: whole");
    c.model.text_len = 0;
    DT_CHECK_OK(dt_layout_make(&c, 4, 3, &l));
    DT_CHECK(l.pp_scatter, "a DiT without text pieces its boundaries");
    c.model.arch = DT_ARCH_GPT2;
    c.plugin.sp_mode = DT_SP_ALL_TO_ALL, c.plugin.tp_size = 1;
    DT_CHECK_OK(dt_layout_make(&c, 2, 1, &l));
    DT_CHECK(!l.pp_scatter, "tp 1: nothing to piece");
    c.plugin.pp_size = 1, c.plugin.tp_size = 2;
    DT_CHECK_OK(dt_layout_make(&c, 2, 1, &l));
    DT_CHECK(!l.pp_scatter, "pp 1: no boundary");
    int64_t first[4], count[4], want_first[4] = {0, 2, 5, 7}, want_count[4] = {2, 3, 2, 3};
    for (int k = 0; k < 4; k++) {
        dt_layout_piece(10, 4, k, &first[k], &count[k]);
        DT_CHECK(first[k] == want_first[k] && count[k] == want_count[k],
                 "piece %d of 10 over 4: [%lld, +%lld)", k, (long long)first[k],
                 (long long)count[k]);
    }
}

static void check_refusals(void) {
    struct {
        int world, B, mbs, n_mb, type;
        const char *names;
    } bad[] = {
        {4, 6, 0, 0, DT_PLUGIN_NONE, "train.batch_size=6"},
        {2, 8, 3, 0, DT_PLUGIN_NONE, "train.micro_batch_size=3"},
        {2, 8, 0, 3, DT_PLUGIN_NONE, "plugin.microbatches=3"},
        {2, 8, 2, 4, DT_PLUGIN_NONE, "disagree"},
        {3, 9, 0, 0, DT_PLUGIN_NONE, NULL}, /* fine */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_config c = base(2, bad[i].B, 4);
        c.train.micro_batch_size = bad[i].mbs;
        c.plugin.microbatches = bad[i].n_mb;
        dt_layout l;
        dt_status st = dt_layout_make(&c, bad[i].world, 0, &l);
        if (!bad[i].names)
            DT_CHECK(st == DT_OK, "case %zu: %s", i, dt_err_msg());
        else
            DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), bad[i].names), "case %zu: %s", i,
                     dt_err_msg());
    }
    dt_config c = base(2, 8, 4);
    c.plugin.type = DT_PLUGIN_DDP;
    c.plugin.zero_stage = 2;
    dt_layout l;
    DT_CHECK(dt_layout_make(&c, 2, 0, &l) == DT_ERR_ARG && strstr(dt_err_msg(), "ddp"),
             "ddp with a ZeRO stage: %s", dt_err_msg());
    c = base(2, 8, 4);
    c.plugin.tp_size = 3;
    DT_CHECK(dt_layout_make(&c, 4, 0, &l) == DT_ERR_ARG && strstr(dt_err_msg(), "tp_size 3"),
             "tp 3 on 4 ranks: %s", dt_err_msg());
    c = base(DT_MAX_CHUNKS + 1, 8, 4);
    DT_CHECK(dt_layout_make(&c, 1, 0, &l) != DT_OK && strstr(dt_err_msg(), "model.n_layer"),
             "too many layers: %s", dt_err_msg());
    c = base(2, 8, 4);
    DT_CHECK(dt_layout_make(&c, 2, 2, &l) == DT_ERR_ARG, "rank 2 of 2");
}

static void check_reruns(void) {
    dt_config c = base(4, 8, 4);
    c.plugin.ac = DT_AC_FULL;
    c.plugin.ac_every = 2;
    dt_layout l;
    DT_CHECK_OK(dt_layout_make(&c, 1, 0, &l));
    DT_CHECK(dt_layout_rerun(&l, 0) == DT_PLAN_RERUN_BLOCK &&
                 dt_layout_rerun(&l, 1) == DT_PLAN_RERUN_NONE &&
                 dt_layout_rerun(&l, 2) == DT_PLAN_RERUN_BLOCK,
             "full every 2nd block");
    c.plugin.ac = DT_AC_SELECTIVE;
    c.plugin.ac_every = 1;
    DT_CHECK_OK(dt_layout_make(&c, 1, 0, &l));
    DT_CHECK(dt_layout_rerun(&l, 3) == DT_PLAN_RERUN_ATTENTION, "selective");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_worked_example();
    check_matrix();
    check_stages();
    check_grad_home();
    check_grad_buckets();
    check_scatter();
    check_refusals();
    check_reruns();
    return DT_TEST_END();
}
