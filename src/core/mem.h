/* The memory accountant: every buffer dtrain allocates is tagged with a category and a name.
 *
 * It tracks live and peak bytes per category and the peak of the total (the largest sum of
 * live bytes at any instant, not the sum of per-category peaks). The planner predicts the
 * same categories, so prediction and measurement can be compared line by line.
 * With a timeline started it also logs every allocation and release, and the logical
 * occupancy of preallocated arenas (use/unuse: an arena's part that starts or stops holding
 * something needed later), each with the context the upper layers set (step, phase,
 * micro-batch), into a bounded array that grows only where allocation is allowed anyway.
 * A dt_mem is owned by one thread of control; it is not thread-safe (allocation happens
 * at set-up and between steps, never inside parallel regions).
 */
#ifndef DT_CORE_MEM_H
#define DT_CORE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/status.h"
#include "dtrain/mem.h" /* dt_mem, dt_mem_cat, live/peak figures */

dt_status dt_mem_init(dt_mem **out);
void dt_mem_free(dt_mem *m); /* releases every buffer still live */

/* 64-byte aligned, zero-filled buffer of `bytes` (0 gives a valid unique pointer). */
dt_status dt_mem_alloc(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, void **out);
void dt_mem_release(dt_mem *m, void *p); /* NULL is a no-op */
/* This machine's physical memory in bytes (sysconf), 0 when unknown. */
double dt_mem_physical_bytes(void);


/* ---- timeline ------------------------------------------------------------------------- */

/* What the process is doing when an event happens (set by train/, read by dtrain plot). */
typedef enum dt_mem_phase {
    DT_MEM_PHASE_SETUP,
    DT_MEM_PHASE_FORWARD,
    DT_MEM_PHASE_HEAD, /* the LM head and loss */
    DT_MEM_PHASE_BACKWARD,
    DT_MEM_PHASE_WEIGHTS, /* split backward's weight-gradient pass (W) */
    DT_MEM_PHASE_COLLECTIVE,
    DT_MEM_PHASE_OPTIMIZER,
    DT_MEM_PHASE_EVAL,
    DT_MEM_PHASE_CHECKPOINT,
    DT_MEM_PHASE_EXPORT,
    DT_MEM_PHASE_COUNT
} dt_mem_phase;

typedef enum dt_mem_event_kind {
    DT_MEM_EV_ALLOC,
    DT_MEM_EV_FREE,
    DT_MEM_EV_USE,   /* part of an allocated arena starts holding data needed later */
    DT_MEM_EV_UNUSE, /* ... and stops */
    DT_MEM_EV_KIND_COUNT
} dt_mem_event_kind;

typedef struct dt_mem_event {
    double t;                         /* seconds since the timeline started */
    size_t bytes;
    size_t live[DT_MEM_CAT_COUNT];    /* allocated bytes per category after the event */
    size_t in_use[DT_MEM_CAT_COUNT];  /* bytes marked in use per category after the event */
    int step;                         /* 0: set-up, before step 1 */
    int mb, slot, block;              /* micro-batch, activation slot, block; -1 = none */
    unsigned char kind, cat, phase;   /* dt_mem_event_kind, dt_mem_cat, dt_mem_phase */
    char name[45];
} dt_mem_event;

/* Default cap of dt_mem_timeline_start's callers: ~200 bytes per event, ~50 MiB at most. */
#define DT_MEM_TIMELINE_MAX_EVENTS (1 << 18)

/* Start logging (events before this are not in the log). At most max_events are kept: later
 * events are dropped and counted (dt_mem_dropped), the log's first max_events stay whole. */
dt_status dt_mem_timeline_start(dt_mem *m, int max_events);
/* Room for n more events (within the cap), growing the log geometrically; call it where
 * allocating is allowed (before a step). Inside forward/backward/collectives/the optimizer
 * an event that finds the log full is dropped rather than growing it; in the set-up,
 * checkpoint and export phases the log grows as it fills. Also reserves twice the most events
 * seen between two earlier calls. */
dt_status dt_mem_timeline_reserve(dt_mem *m, int n);
void dt_mem_set_context(dt_mem *m, int step, dt_mem_phase phase, int mb);
void dt_mem_set_phase(dt_mem *m, dt_mem_phase phase);
dt_mem_phase dt_mem_phase_now(const dt_mem *m);
/* The context last set: step (0 = set-up), phase, micro-batch (-1 = none). */
void dt_mem_context(const dt_mem *m, int *step, dt_mem_phase *phase, int *mb);
/* Logical occupancy of an allocated buffer of category cat: `bytes` of it start (use) or stop
 * (unuse) holding data needed later, e.g. a block's saved activations for its backward.
 * Counted in dt_mem_in_use (never more than the category's live bytes is a caller's duty). */
void dt_mem_use(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, int slot, int block);
void dt_mem_unuse(dt_mem *m, dt_mem_cat cat, const char *name, size_t bytes, int slot,
                  int block);
/* A model's (slot, block) saved activation set, `bytes` of activations, marked in use (from
 * its forward) or not (once its backward read it) as "<prefix>.<block>"; *live tracks the
 * mark, so marking it again (a forward nobody's backward read: evaluation) changes nothing. */
void dt_mem_mark_saved(dt_mem *m, const char *prefix, int slot, int block, size_t bytes, bool *live,
                       bool now);
size_t dt_mem_in_use(const dt_mem *m, dt_mem_cat cat);
int dt_mem_n_events(const dt_mem *m); /* 0 when no timeline was started */
const dt_mem_event *dt_mem_event_at(const dt_mem *m, int i);
long long dt_mem_dropped(const dt_mem *m);
const char *dt_mem_phase_name(dt_mem_phase phase);     /* "setup", "forward", ... */
const char *dt_mem_event_kind_name(dt_mem_event_kind k); /* "alloc", "free", "use", "unuse" */
/* {"format": "dtrain-mem-timeline", "version": 1, "rank", "categories", "phases",
 *  "max_events", "dropped", "first_dropped_step" (-1: none), "peak": {cat: bytes, "total"},
 *  "live": {...}, "events": [{"t", "kind", "cat", "name", "bytes", "step", "phase", "mb",
 *  "slot", "block", "live": {cat: bytes, ..., "total"}, "in_use": {cat: bytes, ...}}, ...]} */
dt_status dt_mem_write_timeline(const dt_mem *m, int rank, const char *path);

/* Human table of live/peak per category, plus the largest buffers. */
void dt_mem_print_table(const dt_mem *m, FILE *f);
/* {"peak": {"params":…, …, "total":…}, "live": {…}, "buffers": [{"name","cat","bytes"}…]} */
dt_status dt_mem_write_json(const dt_mem *m, const char *path);

#endif
