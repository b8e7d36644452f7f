/* Memory accountant: live/peak per category and the peak of the total; the timeline's event
 * log (order, live bytes after each event, context, occupancy, the cap and its drops). */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "harness.h"

static void test_timeline(void) {
    dt_mem *m = NULL;
    DT_CHECK_OK(dt_mem_init(&m));
    void *before, *w, *a, *t;
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_TEMP, "before", 7, &before)); /* not logged */
    DT_CHECK_OK(dt_mem_timeline_start(m, 100));
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_PARAMS, "w", 1000, &w));
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_ACTS, "arena", 600, &a));
    dt_mem_set_context(m, 1, DT_MEM_PHASE_FORWARD, 2);
    dt_mem_use(m, DT_MEM_ACTS, "block.saved", 250, 1, 3);
    dt_mem_set_phase(m, DT_MEM_PHASE_BACKWARD);
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_TEMP, "tmp", 40, &t));
    dt_mem_release(m, t);
    dt_mem_unuse(m, DT_MEM_ACTS, "block.saved", 250, 1, 3);
    DT_CHECK(dt_mem_n_events(m) == 6, "%d events, want 6", dt_mem_n_events(m));
    /* kind, cat, bytes, params/acts/temp live after, acts in use after, step, phase, mb */
    const struct {
        int kind, cat;
        size_t bytes, params, acts, temp, in_use;
        int step, phase, mb, slot, block;
        const char *name;
    } want[6] = {
        {DT_MEM_EV_ALLOC, DT_MEM_PARAMS, 1000, 1000, 0, 7, 0, 0, DT_MEM_PHASE_SETUP, -1, -1,
         -1, "w"},
        {DT_MEM_EV_ALLOC, DT_MEM_ACTS, 600, 1000, 600, 7, 0, 0, DT_MEM_PHASE_SETUP, -1, -1,
         -1, "arena"},
        {DT_MEM_EV_USE, DT_MEM_ACTS, 250, 1000, 600, 7, 250, 1, DT_MEM_PHASE_FORWARD, 2, 1, 3,
         "block.saved"},
        {DT_MEM_EV_ALLOC, DT_MEM_TEMP, 40, 1000, 600, 47, 250, 1, DT_MEM_PHASE_BACKWARD, 2, -1,
         -1, "tmp"},
        {DT_MEM_EV_FREE, DT_MEM_TEMP, 40, 1000, 600, 7, 250, 1, DT_MEM_PHASE_BACKWARD, 2, -1, -1,
         "tmp"},
        {DT_MEM_EV_UNUSE, DT_MEM_ACTS, 250, 1000, 600, 7, 0, 1, DT_MEM_PHASE_BACKWARD, 2, 1, 3,
         "block.saved"},
    };
    double t_prev = 0;
    for (int i = 0; i < 6; i++) {
        const dt_mem_event *e = dt_mem_event_at(m, i);
        DT_CHECK(e->kind == want[i].kind && e->cat == want[i].cat && e->bytes == want[i].bytes &&
                     !strcmp(e->name, want[i].name),
                 "event %d: %s %s %s %zu", i, dt_mem_event_kind_name(e->kind),
                 dt_mem_cat_name(e->cat), e->name, e->bytes);
        DT_CHECK(e->live[DT_MEM_PARAMS] == want[i].params && e->live[DT_MEM_ACTS] ==
                     want[i].acts && e->live[DT_MEM_TEMP] == want[i].temp &&
                     e->in_use[DT_MEM_ACTS] == want[i].in_use,
                 "event %d: live %zu/%zu/%zu in use %zu", i, e->live[DT_MEM_PARAMS],
                 e->live[DT_MEM_ACTS], e->live[DT_MEM_TEMP], e->in_use[DT_MEM_ACTS]);
        DT_CHECK(e->step == want[i].step && e->phase == want[i].phase && e->mb == want[i].mb &&
                     e->slot == want[i].slot && e->block == want[i].block,
                 "event %d: step %d phase %s mb %d slot %d block %d", i, e->step,
                 dt_mem_phase_name(e->phase), e->mb, e->slot, e->block);
        DT_CHECK(e->t >= t_prev, "event %d: time went back", i);
        t_prev = e->t;
    }
    DT_CHECK(dt_mem_event_at(m, 6) == NULL, "event past the end");
    const char *path = "test_mem_timeline.json";
    DT_CHECK_OK(dt_mem_write_timeline(m, 0, path));
    FILE *f = fopen(path, "r");
    char buf[8192] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    DT_CHECK(n > 0 && strstr(buf, "\"kind\": \"use\"") && strstr(buf, "\"phase\": \"backward\"") &&
                 strstr(buf, "\"dropped\": 0"),
             "timeline json: %s", buf);
    remove(path);
    dt_mem_free(m);
}

/* Past the cap, events are counted, not kept; the log never grows in a step's phases. */
static void test_timeline_cap(void) {
    dt_mem *m = NULL;
    DT_CHECK_OK(dt_mem_init(&m));
    DT_CHECK_OK(dt_mem_timeline_start(m, 5000));
    void *a;
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_ACTS, "arena", 1 << 20, &a));
    dt_mem_set_context(m, 3, DT_MEM_PHASE_FORWARD, 0);
    for (int i = 0; i < 3000; i++) /* the first 4096 fit the initial log */
        dt_mem_use(m, DT_MEM_ACTS, "b", 1, 0, i);
    dt_mem_set_context(m, 4, DT_MEM_PHASE_BACKWARD, 0);
    for (int i = 0; i < 3000; i++)
        dt_mem_unuse(m, DT_MEM_ACTS, "b", 1, 0, i);
    DT_CHECK(dt_mem_n_events(m) == 4096 && dt_mem_dropped(m) == 6001 - 4096,
             "inside steps: %d events, %lld dropped", dt_mem_n_events(m), dt_mem_dropped(m));
    DT_CHECK(dt_mem_in_use(m, DT_MEM_ACTS) == 0, "in use %zu after the drops",
             dt_mem_in_use(m, DT_MEM_ACTS));
    DT_CHECK_OK(dt_mem_timeline_reserve(m, 100000)); /* grows to the cap, no further */
    dt_mem_set_context(m, 5, DT_MEM_PHASE_CHECKPOINT, -1);
    for (int i = 0; i < 2000; i++)
        dt_mem_use(m, DT_MEM_ACTS, "b", 1, 0, i);
    DT_CHECK(dt_mem_n_events(m) == 5000 && dt_mem_dropped(m) == 6001 - 4096 + 1096,
             "at the cap: %d events, %lld dropped", dt_mem_n_events(m), dt_mem_dropped(m));
    const char *path = "test_mem_timeline_cap.json";
    DT_CHECK_OK(dt_mem_write_timeline(m, 0, path));
    FILE *f = fopen(path, "r");
    char buf[512] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    DT_CHECK(n > 0 && strstr(buf, "\"first_dropped_step\": 4") &&
                 strstr(buf, "\"max_events\": 5000"),
             "timeline header: %s", buf);
    remove(path);
    dt_mem_free(m);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_mem *m = NULL;
    DT_CHECK_OK(dt_mem_init(&m));
    void *a, *b, *c;
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_PARAMS, "w", 1000, &a));
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_ACTS, "x", 500, &b));
    DT_CHECK(((uintptr_t)a & 63) == 0, "not 64-byte aligned");
    dt_mem_release(m, b);
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_TEMP, "t", 200, &c));
    DT_CHECK(dt_mem_peak(m, DT_MEM_ACTS) == 500, "acts peak");
    DT_CHECK(dt_mem_live(m, DT_MEM_ACTS) == 0, "acts live");
    DT_CHECK(dt_mem_peak_total(m) == 1500, "peak total %zu, want 1500 (not the sum of peaks)",
             dt_mem_peak_total(m));
    DT_CHECK(dt_mem_live_total(m) == 1200, "live total %zu", dt_mem_live_total(m));
    const char *path = "test_mem_report.json";
    DT_CHECK_OK(dt_mem_write_json(m, path));
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    DT_CHECK(n > 0 && strstr(buf, "\"activations\":\t500") && strstr(buf, "\"total\":\t1500"),
             "json report lacks the peaks: %s", buf);
    remove(path);
    dt_mem_free(m);
    test_timeline();
    test_timeline_cap();
    return DT_TEST_END();
}
