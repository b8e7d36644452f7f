/* The search of `dtrain plan`: every layout dtrain can run on N ranks (meshes of tp, sp and
 * its mode, the ring, pp with each schedule and its stage boundaries, micro-batch sizes, and
 * the memory levers), each checked by dtrain's own rules and predicted (memory on every
 * pipeline stage, step time). Used by plan_cmd.c, which ranks and prints them. */
#ifndef DT_CLI_PLAN_SEARCH_H
#define DT_CLI_PLAN_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mem.h"
#include "core/status.h"
#include "plan/cost.h"
#include "plan/schedule.h"

typedef struct dt_plan_cand {
    dt_config c;
    int dp;
    int64_t cat[DT_MEM_CAT_COUNT], total; /* the largest rank's (over pipeline stages) */
    double step_s; /* NAN until timed: the search times only what fits (dt_cli_plan_time) */
    bool fits;
    int64_t order; /* the search's count when it was found: equal ranks keep this order */
} dt_plan_cand;

/* The candidates the search keeps: the best `keep` in rank order (dt_cli_plan_rank_cmp; at
 * most 2 keep + 64 held while searching: a candidate is 8 KiB and a search finds 10^5), the
 * one of least memory among all (the first of equals), and how many there were. */
typedef struct dt_plan_cands {
    dt_plan_cand *v;
    int n, cap, keep; /* keep: set by the caller, > 0 */
    int64_t seen;
    dt_plan_cand smallest;
    bool base_seen; /* the configuration as given was among them */
} dt_plan_cands;

/* Rank order: what fits first, by step time (ties: less memory); what does not, by memory;
 * then the order found. */
int dt_cli_plan_rank_cmp(const void *a, const void *b);
/* out's candidates sorted in rank order, the best out->keep of them kept. */
void dt_cli_plan_rank(dt_plan_cands *out);

enum { DT_PLAN_MAX_PINS = 32 };

/* The --plugin.KEY=VALUE and --train.KEY=VALUE assignments of the command line: the
 * enumeration keeps them. */
typedef struct dt_plan_pins {
    const char *set[DT_PLAN_MAX_PINS];
    int n;
} dt_plan_pins;

/* Whether dtrain runs layout c on `world` ranks: the mesh, the config's own checks, the
 * rank's layout, the model's split and the schedule. given: the schedule to run (borrowed;
 * validated here unless `trusted`, a generator's), or NULL: the one plugin.pp_schedule names,
 * generated into *own (the caller frees it). */
dt_status dt_cli_plan_check_layout(const dt_config *c, int world, const dt_schedule *given,
                                   bool trusted, dt_schedule **own);
/* ranks of one model replica: every split but data parallelism */
int dt_cli_plan_replica_ranks(const dt_plugin_config *p);
/* Every layout of base on `world` ranks that keeps the pinned keys, predicted, into *out
 * (out->keep set; unsorted: dt_cli_plan_rank; the caller frees out->v). The configuration as
 * given is always among them. */
dt_status dt_cli_plan_search(const dt_config *base, int world, const dt_plan_device *dev,
                             int64_t mem, const dt_plan_pins *pinned, dt_plan_cands *out);
/* The step time of candidates [0, n) not yet timed (those that do not fit: ranked by memory,
 * they are timed only to be shown). */
dt_status dt_cli_plan_time(dt_plan_cand *v, int n, int world, const dt_plan_device *dev);

#endif
