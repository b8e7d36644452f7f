/* The trace's idle time is each step minus the union of its spans, and the written file is
 * one JSON document with the recorded and the derived idle spans. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "train/trace.h"

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_span s[] = {
        {.t0 = 0, .t1 = 10, .kind = DT_SPAN_STEP},
        {.t0 = 1, .t1 = 3, .kind = DT_SPAN_FORWARD, .mb = 0},
        {.t0 = 2, .t1 = 4, .kind = DT_SPAN_RECV, .mb = 1}, /* overlaps the forward */
        {.t0 = 6, .t1 = 7, .kind = DT_SPAN_BACKWARD, .mb = 0},
        {.t0 = 9, .t1 = 12, .kind = DT_SPAN_OPTIMIZER}, /* runs past the step's end */
        {.t0 = 20, .t1 = 24, .kind = DT_SPAN_STEP, .step = 1},
        {.t0 = 20, .t1 = 24, .kind = DT_SPAN_FORWARD, .step = 1},
    };
    double busy, idle = dt_trace_idle(s, 7, &busy);
    /* step 0: busy [1,4) + [6,7) + [9,10) = 5 of 10; step 1 fully busy */
    DT_CHECK(fabs(idle - 5) < 1e-12, "idle %g, expected 5", idle);
    DT_CHECK(fabs(busy - 9) < 1e-12, "busy %g, expected 9", busy);

    dt_comm *one;
    DT_CHECK_OK(dt_comm_local_init("world", &one));
    dt_trace t;
    DT_CHECK_OK(dt_trace_init(&t, one));
    for (int i = 0; i < 5; i++)
        DT_CHECK_OK(dt_trace_add(&t, (dt_span_kind)s[i].kind, 0, s[i].mb, 0, s[i].t0, s[i].t1));
    DT_CHECK_OK(dt_trace_add(NULL, DT_SPAN_FORWARD, 0, 0, 0, 0, 1)); /* tracing off */
    char path[] = "/tmp/dt_trace_XXXXXX";
    int fd = mkstemp(path);
    DT_CHECK(fd >= 0, "mkstemp");
    DT_CHECK_OK(dt_trace_write(&t, one, path));
    FILE *f = fopen(path, "r");
    char buf[8192] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    remove(path);
    DT_CHECK(n > 0 && strstr(buf, "\"traceEvents\""), "no traceEvents in %s", buf);
    int idles = 0;
    for (const char *p = buf; (p = strstr(p, "\"name\": \"idle\"")); p++)
        idles++;
    DT_CHECK(idles == 3, "%d idle spans, expected 3 ([0,1), [4,6), [7,9))", idles);
    DT_CHECK(strstr(buf, "\"name\": \"F0\"") && strstr(buf, "\"name\": \"recv1\""),
             "recorded spans missing");
    dt_trace_free(&t);
    dt_comm_free(one);
    return DT_TEST_END();
}
