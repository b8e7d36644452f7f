/* A per-rank timeline of what a training step did (forward, backward, weight-gradient passes,
 * point-to-point waits, collectives, the optimizer), written as one Chrome-trace / Perfetto
 * JSON file: open it in ui.perfetto.dev or chrome://tracing, one row per rank. Idle time is
 * not recorded but derived: every gap inside a step becomes an "idle" span. A pipeline's
 * bubble shows as waits on receives (a stage with nothing to do until its neighbour's data
 * arrives) and idle gaps: everything in a step that is not F, B or W.
 *
 * Recording is a few stores into a growing array; nothing is written until dt_trace_write.
 * Clocks: every rank's origin is taken right after a barrier, so ranks on one machine share
 * a time axis (across machines the skew is the barrier's). One thread of control per rank.
 */
#ifndef DT_TRAIN_TRACE_H
#define DT_TRAIN_TRACE_H

#include <stdint.h>

#include "core/comm.h"
#include "core/status.h"

typedef enum dt_span_kind {
    DT_SPAN_STEP,       /* a whole optimizer step: the frame idle time is measured in */
    DT_SPAN_FORWARD,
    DT_SPAN_BACKWARD,   /* full backward, or the input-gradient half of a split one */
    DT_SPAN_WEIGHT,     /* the weight-gradient half of a split backward */
    DT_SPAN_SEND,       /* waiting for a point-to-point send to complete */
    DT_SPAN_RECV,       /* waiting for a point-to-point receive */
    DT_SPAN_COLLECTIVE, /* gradient reduction and other collectives after the schedule */
    DT_SPAN_OPTIMIZER,
    DT_SPAN_MICRO_BATCH, /* forward and backward of one micro-batch, without a pipeline */
    DT_SPAN_IDLE,       /* derived at write time, never recorded */
    DT_SPAN_KIND_COUNT
} dt_span_kind;

typedef struct dt_span {
    double t0, t1; /* seconds since the trace origin */
    int kind, chunk, mb, step;
} dt_span;

typedef struct dt_trace {
    dt_span *spans;
    int n, cap;
    double origin;
} dt_trace;

/* Collective over `world` (a barrier, then the origin). */
dt_status dt_trace_init(dt_trace *t, dt_comm *world);
void dt_trace_free(dt_trace *t);
/* Seconds since the origin, for a span's start and end (0 when t is NULL: tracing off). */
double dt_trace_now(const dt_trace *t);
/* Record one span; chunk and mb are -1 where they do not apply. t may be NULL (tracing off). */
dt_status dt_trace_add(dt_trace *t, dt_span_kind k, int chunk, int mb, int step, double t0,
                       double t1);
const char *dt_span_name(dt_span_kind k);

/* Idle seconds of one rank's spans within its step spans: each step's length minus the union
 * of the spans inside it. busy_out (may be NULL) gets the union. */
double dt_trace_idle(const dt_span *spans, int n, double *busy_out);

/* Collective over `world`: rank 0 receives every rank's spans and writes `path` (atomically),
 * adding the idle spans. The same status on every rank. */
dt_status dt_trace_write(dt_trace *t, dt_comm *world, const char *path);

#endif
