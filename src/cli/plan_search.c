/* The layouts `dtrain plan` considers and their predictions. See plan_search.h. */
#include "cli/plan_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_auto.h"
#include "models/model.h"
#include "core/buckets.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/mesh.h"
#include "plan/stages.h"

int dt_cli_plan_rank_cmp(const void *a, const void *b) {
    const dt_plan_cand *x = a, *y = b;
    if (x->fits != y->fits)
        return x->fits ? -1 : 1;
    if (x->fits && x->step_s != y->step_s)
        return x->step_s < y->step_s ? -1 : 1;
    if (x->total != y->total)
        return x->total < y->total ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

void dt_cli_plan_rank(dt_plan_cands *l) {
    qsort(l->v, (size_t)l->n, sizeof *l->v, dt_cli_plan_rank_cmp);
    if (l->n > l->keep)
        l->n = l->keep;
}

static dt_status push(dt_plan_cands *l, dt_plan_cand *x) {
    x->order = l->seen++;
    if (x->order == 0 || x->total < l->smallest.total)
        l->smallest = *x;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        dt_plan_cand *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return dt_err_set(DT_ERR_OOM, "plan: out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *x;
    if (l->n >= 2 * l->keep + 64) /* the worse half can never be shown */
        dt_cli_plan_rank(l);
    return DT_OK;
}

/* ---- which layouts are valid ------------------------------------------------------------ */

/* Each bucket of clip shape (data.buckets) splits as the run splits it (booster_buckets.c). */
static dt_status check_buckets(const dt_config *c, int world) {
    dt_layout lays[DT_MAX_BUCKETS];
    int n;
    DT_TRY(dt_layout_make_buckets(c, world, 0, lays, &n));
    return dt_model_check_buckets(c);
}

/* given: the schedule to run (borrowed; validated here unless `trusted`, a generator's), or
 * NULL: the one plugin.pp_schedule names, generated into *own (the caller frees it;
 * generators make valid schedules). */
dt_status dt_cli_plan_check_layout(const dt_config *c, int world, const dt_schedule *given,
                                   bool trusted, dt_schedule **own) {
    const dt_plugin_config *p = &c->plugin;
    *own = NULL;
    dt_mesh_dims d;
    DT_TRY(dt_mesh_infer(world, p->pp_size, p->cp_size, p->sp_size, p->tp_size, &d));
    DT_TRY(dt_config_validate(c));
    DT_TRY(check_buckets(c, world));
    dt_buckets bk;
    DT_TRY(dt_config_buckets(c, &bk));
    /* over buckets the run never takes the config's own clip: bucket 0's schedule is theirs */
    dt_config first;
    if (bk.n)
        first = dt_config_of_bucket(c, &bk.b[0]);
    const dt_config *run = bk.n ? &first : c;
    dt_layout l;
    const dt_schedule *s;
    DT_TRY(dt_layout_make_scheduled(run, world, 0, given, &l, &s, own));
    dt_model_split ms = dt_model_split_of(p, run->train.seq_len);
    DT_TRY(dt_model_check_split(&run->model, &ms));
    dt_sched_limits lim = {.p2p = DT_SCHED_P2P_RENDEZVOUS};
    return given && !trusted ? dt_err_wrap(dt_sched_validate(given, &lim), "plugin.pp_schedule=%s",
                                           p->pp_schedule)
                             : DT_OK;
}

/* ---- predictions -------------------------------------------------------------------------- */

/* ranks of one model replica: every split but data parallelism */
int dt_cli_plan_replica_ranks(const dt_plugin_config *p) {
    return p->tp_size * p->sp_size * p->cp_size * p->pp_size;
}

static dt_status predict(dt_plan_cand *x, int world, const dt_plan_device *dev, int64_t mem,
                         const dt_schedule *sched) {
    const dt_plugin_config *p = &x->c.plugin;
    int stride = world / p->pp_size; /* rank (pp r, 0, 0, 0, 0) = r * dp * cp * sp * tp */
    memset(x->cat, 0, sizeof x->cat);
    x->total = 0;
    dt_plan_mem_opts o = {.at_export = true, .schedule = sched};
    for (int r = 0; r < p->pp_size; r++) {
        dt_plan_mem m;
        DT_TRY(dt_plan_memory(&x->c, world, r * stride, &o, &m));
        if (m.total > x->total) {
            x->total = m.total;
            memcpy(x->cat, m.cat, sizeof x->cat);
        }
    }
    x->fits = x->total <= mem;
    x->step_s = NAN;
    /* what does not fit is ranked by memory alone; a schedule read from a file is timed now,
     * while it is in hand */
    if (!x->fits && strncmp(p->pp_schedule, "file:", 5) != 0)
        return DT_OK;
    dt_plan_time t;
    DT_TRY(dt_plan_step_time(&x->c, world, dev, sched, &t));
    x->step_s = t.step_s;
    return DT_OK;
}

dt_status dt_cli_plan_time(dt_plan_cand *v, int n, int world, const dt_plan_device *dev) {
    for (int i = 0; i < n; i++) {
        if (!isnan(v[i].step_s))
            continue;
        dt_plan_time t;
        DT_TRY(dt_plan_step_time(&v[i].c, world, dev, NULL, &t));
        v[i].step_s = t.step_s;
    }
    return DT_OK;
}

/* ---- enumeration ------------------------------------------------------------------------ */

/* The schedules of the candidates in hand: the memory levers share one (it depends only on
 * pp, micro-batches, chunks and the kind), and other splits with the same pipeline and
 * data-parallel degree meet it again, so the last SCHED_CACHE generated are kept. */
enum { SCHED_CACHE = 16 };
typedef struct sched_entry {
    dt_schedule *s;
    int pp, n_mb, v;
    char kind[sizeof((dt_plugin_config *)0)->pp_schedule];
} sched_entry;
typedef struct sched_cache {
    sched_entry e[SCHED_CACHE];
    int next; /* the entry the next schedule replaces */
} sched_cache;

typedef struct space {
    const dt_config *base;
    int world;
    const dt_plan_device *dev;
    int64_t mem;
    dt_plan_cands *out;
    const dt_plan_pins *pinned;
    sched_cache *cache;
} space;

/* Whether the command line pinned plugin.`key`. */
static bool is_pinned(const space *sp, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < sp->pinned->n; i++)
        if (!strncmp(sp->pinned->set[i], key, n) && sp->pinned->set[i][n] == '=')
            return true;
    return false;
}

/* A candidate keeps every pinned key when assigning it again changes nothing. */
static bool keeps_pins(const space *sp, const dt_config *c) {
    for (int i = 0; i < sp->pinned->n; i++) {
        dt_config again = *c;
        if (dt_config_set(&again, sp->pinned->set[i]) != DT_OK ||
            memcmp(&again.plugin, &c->plugin, sizeof again.plugin) ||
            memcmp(&again.train, &c->train, sizeof again.train))
            return false;
    }
    return true;
}

/* The cached schedule that is x's (NULL: none yet, or x has no pipeline). */
static const dt_schedule *cached_schedule(const space *sp, const dt_plan_cand *x) {
    const dt_plugin_config *p = &x->c.plugin;
    dt_layout l;
    if (p->pp_size < 2 || dt_layout_make(&x->c, sp->world, 0, &l) != DT_OK)
        return NULL;
    for (int i = 0; i < SCHED_CACHE; i++) {
        const sched_entry *k = &sp->cache->e[i];
        if (k->s && k->pp == l.pp && k->n_mb == l.n_mb && k->v == l.stages.v &&
            !strcmp(k->kind, p->pp_schedule))
            return k->s;
    }
    return NULL;
}

static void cache_schedule(const space *sp, const dt_plan_cand *x, dt_schedule *s) {
    sched_cache *c = sp->cache;
    sched_entry *k = &c->e[c->next];
    c->next = (c->next + 1) % SCHED_CACHE;
    dt_sched_free(k->s);
    *k = (sched_entry){.s = s, .pp = s->pp, .n_mb = s->n_mb, .v = s->n_chunks};
    snprintf(k->kind, sizeof k->kind, "%s", x->c.plugin.pp_schedule);
}

static void free_cache(sched_cache *c) {
    for (int i = 0; i < SCHED_CACHE; i++)
        dt_sched_free(c->e[i].s);
}

static dt_status consider(const space *sp, dt_plan_cand *x) {
    if (!keeps_pins(sp, &x->c) || dt_cli_plan_resolve_auto(&x->c, sp->world, sp->dev) != DT_OK)
        return DT_OK;
    const dt_schedule *sched = cached_schedule(sp, x);
    dt_schedule *own = NULL;
    if (dt_cli_plan_check_layout(&x->c, sp->world, sched, true, &own) != DT_OK)
        return DT_OK; /* not a layout dtrain runs */
    if (own)
        cache_schedule(sp, x, own);
    sched = own ? own : sched;
    x->dp = sp->world / dt_cli_plan_replica_ranks(&x->c.plugin);
    dt_status st = predict(x, sp->world, sp->dev, sp->mem, sched);
    if (st != DT_OK)
        return DT_OK;
    if (!memcmp(&x->c.plugin, &sp->base->plugin, sizeof x->c.plugin) &&
        !memcmp(&x->c, sp->base, sizeof *sp->base))
        sp->out->base_seen = true;
    return push(sp->out, x);
}

/* ZeRO stage z with the plugin.type that runs it: a pinned type keeps its own stage (zero1-3;
 * ddp and none: 0) or, for hybrid, takes z as its zero_stage; unpinned, hybrid for z > 0 and
 * plain data parallelism for 0. false: the pinned type does not run stage z. */
static bool set_stage(const space *sp, dt_plugin_config *p, int z) {
    if (!is_pinned(sp, "plugin.type")) {
        p->type = z ? DT_PLUGIN_HYBRID : DT_PLUGIN_NONE;
        p->zero_stage = z;
        return true;
    }
    p->type = sp->base->plugin.type;
    if (p->type == DT_PLUGIN_HYBRID) {
        p->zero_stage = z;
        return true;
    }
    p->zero_stage = 0;
    dt_config c = {.plugin = *p};
    return dt_config_zero_stage(&c) == z;
}

/* The memory levers on one mesh and schedule: ZeRO stage, precision (fp32 and one 16-bit
 * format: the config's when it names one, else bf16; fp16 has bf16's memory), checkpointing
 * (none, selective, full, full every 2nd block), activation compression, offload, and a GPT's
 * activations on disk. Pruned: compression only where a block keeps activations (not under
 * full checkpointing of every block); activations on disk only at the lean end (with the
 * optimizer on disk, without compression, with no or full checkpointing) where that layout
 * does not fit with its activations in memory, and not when plugin.act_offload is pinned.
 * plugin.ac_every given on the command line replaces the levers' 1 and 2. */
static dt_status levers(const space *sp, dt_plan_cand *x) {
    dt_precision lp = sp->base->plugin.precision == DT_PREC_FP16 ? DT_PREC_FP16 : DT_PREC_BF16;
    const dt_precision precs[] = {lp, DT_PREC_FP32};
    static const struct {
        dt_ac_mode ac;
        int every;
    } acs[] = {{DT_AC_NONE, 1}, {DT_AC_SELECTIVE, 1}, {DT_AC_FULL, 1}, {DT_AC_FULL, 2}};
    bool every_pinned = is_pinned(sp, "plugin.ac_every");
    bool try_acts_disk = x->c.model.arch != DT_ARCH_DIT && !is_pinned(sp, "plugin.act_offload");
    int grad_p = sp->world / (x->c.plugin.tp_size * x->c.plugin.pp_size);
    for (int z = 0; z <= (grad_p > 1 ? 3 : 0); z++) {
        if (!set_stage(sp, &x->c.plugin, z))
            continue;
        for (int pi = 0; pi < 2; pi++)
            for (int ai = 0; ai < 4; ai++)
                for (int q = 0; q < 2; q++) {
                    bool twin_fits = false;
                    for (int off = 0; off < 4; off++) {
                        int every = every_pinned ? sp->base->plugin.ac_every : acs[ai].every;
                        bool acts_disk = off >= 2;
                        if (acts_disk && twin_fits)
                            continue; /* the same layout fits with its activations in memory */
                        if ((every_pinned && acs[ai].every == 2) ||
                            (acs[ai].every == 2 && x->c.model.n_layer < 2) ||
                            (q && acs[ai].ac == DT_AC_FULL && every == 1) ||
                            (acts_disk && (!try_acts_disk || q || off == 2 ||
                                           acs[ai].ac == DT_AC_SELECTIVE || acs[ai].every == 2)))
                            continue;
                        dt_plugin_config *p = &x->c.plugin;
                        p->precision = precs[pi];
                        p->ac = acs[ai].ac;
                        p->ac_every = every;
                        p->act_compress = q ? DT_ACT_COMPRESS_INT8 : DT_ACT_COMPRESS_NONE;
                        p->offload = off % 2 ? DT_OFFLOAD_DISK : DT_OFFLOAD_NONE;
                        if (try_acts_disk)
                            p->act_offload = acts_disk ? DT_OFFLOAD_DISK : DT_OFFLOAD_NONE;
                        if (off && !p->offload_dir[0])
                            snprintf(p->offload_dir, sizeof p->offload_dir, "offload");
                        x->fits = false;
                        DT_TRY(consider(sp, x));
                        if (off == 1)
                            twin_fits = x->fits;
                    }
                }
    }
    return DT_OK;
}

/* Stage boundaries: the even split and, where the time model balances the stages otherwise
 * (the embedding and the LM head weigh on the end stages), that one too. */
static dt_status splits(const space *sp, dt_plan_cand *x) {
    dt_plugin_config *p = &x->c.plugin;
    if (p->pp_size < 2 || is_pinned(sp, "plugin.pp_layers"))
        return levers(sp, x);
    p->pp_layers[0] = '\0';
    DT_TRY(levers(sp, x));
    char layers[sizeof p->pp_layers];
    dt_stage_plan even, balanced;
    int L = x->c.model.n_layer;
    if (dt_plan_stage_split(&x->c, sp->world, sp->dev, layers, sizeof layers) != DT_OK ||
        dt_stage_plan_make(L, p->pp_size, p->pp_chunks, NULL, &even) != DT_OK ||
        dt_stage_plan_make(L, p->pp_size, p->pp_chunks, layers, &balanced) != DT_OK ||
        !memcmp(even.first, balanced.first, sizeof even.first))
        return DT_OK;
    memcpy(p->pp_layers, layers, sizeof layers);
    dt_status st = levers(sp, x);
    p->pp_layers[0] = '\0';
    return st;
}

/* Micro-batch sizes, with gradient accumulation over the rest of a dp rank's rows: every
 * power of two that divides the rows, and the rows themselves (at most the 6 largest, and 1);
 * a pipeline keeps at least pp micro-batches. A pinned train.micro_batch_size or
 * plugin.microbatches is the only one tried. */
static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* Over buckets of clip shape every bucket splits into the same number of micro-batches
 * (plugin.microbatches): the counts that divide every bucket's rows, 1, 2, 4, ... and all. */
static dt_status bucket_micro_batches(const space *sp, dt_plan_cand *x, int dp,
                                      const dt_buckets *bk) {
    int g = 0, pp = x->c.plugin.pp_size;
    for (int k = 0; k < bk->n; k++) {
        if (bk->b[k].batch % dp)
            return DT_OK;
        g = gcd(g, bk->b[k].batch / dp);
    }
    x->c.train.micro_batch_size = 0;
    for (int count = 1; count <= g; count = count < g && 2 * count > g ? g : 2 * count) {
        if (g % count || count < pp)
            continue;
        x->c.plugin.microbatches = count;
        DT_TRY(splits(sp, x));
    }
    return DT_OK;
}

static dt_status micro_batches(const space *sp, dt_plan_cand *x, int dp) {
    int B = sp->base->train.batch_size, rows = B / dp, pp = x->c.plugin.pp_size;
    dt_buckets bk;
    if (dt_config_buckets(sp->base, &bk) == DT_OK && bk.n &&
        !is_pinned(sp, "plugin.microbatches") && !is_pinned(sp, "train.micro_batch_size") &&
        x->c.plugin.cp_size == 1)
        return bucket_micro_batches(sp, x, dp, &bk);
    if (rows < 1 || B % dp)
        return DT_OK;
    if (is_pinned(sp, "train.micro_batch_size") || is_pinned(sp, "plugin.microbatches")) {
        x->c.train.micro_batch_size = sp->base->train.micro_batch_size;
        x->c.plugin.microbatches = sp->base->plugin.microbatches;
        return splits(sp, x);
    }
    /* A ring only pays at one sequence a micro-batch: m sequences of a cp-ring hold as many
     * tokens a rank as m / 2 of a ring half its size, which moves less. */
    if (x->c.plugin.cp_size > 1) {
        x->c.train.micro_batch_size = 1;
        x->c.plugin.microbatches = 0;
        return splits(sp, x);
    }
    enum { MAX_SIZES = 6 };
    int size[32], n = 0;
    for (int mb = rows; mb >= 1; mb = mb % 2 ? 0 : mb / 2) /* rows, rows/2, ... while even */
        size[n++] = mb;
    for (int mb = 1; mb < size[n - 1]; mb *= 2) /* powers of two below an odd part */
        if (rows % mb == 0)
            size[n++] = mb;
    x->c.plugin.microbatches = 0;
    for (int i = 0, tried = 0; i < n; i++) {
        bool last_chance = size[i] == 1;
        if ((tried >= MAX_SIZES - 1 && !last_chance) || (pp > 1 && rows / size[i] < pp))
            continue;
        x->c.train.micro_batch_size = size[i];
        DT_TRY(splits(sp, x));
        tried++;
    }
    return DT_OK;
}

static dt_status schedules(const space *sp, dt_plan_cand *x, int dp) {
    static const char *kinds[] = {"1f1b", "gpipe", "zbh1", "interleaved"};
    dt_plugin_config *p = &x->c.plugin;
    if (p->pp_size == 1) {
        snprintf(p->pp_schedule, sizeof p->pp_schedule, "1f1b");
        p->pp_chunks = 1;
        return micro_batches(sp, x, dp);
    }
    for (int k = 0; k < 4; k++) {
        snprintf(p->pp_schedule, sizeof p->pp_schedule, "%s", kinds[k]);
        p->pp_chunks = k == 3 ? 2 : 1;
        DT_TRY(micro_batches(sp, x, dp));
    }
    return DT_OK;
}

/* The ring sizes the search tries: powers of two whose chunks cut seq_len (cp_split as
 * given) into at least RING_MIN_TOKENS a rank (below that a ring step's compute is too short
 * to hide its transfer, and the sequence fits without one), or only the pinned size; 0 ends
 * the loop. */
enum { RING_MIN_TOKENS = 2048 };
static int next_ring(const space *sp, int cp) {
    if (is_pinned(sp, "plugin.cp_size"))
        return cp < sp->base->plugin.cp_size ? sp->base->plugin.cp_size : 0;
    if (sp->base->model.arch == DT_ARCH_DIT)
        return 0;
    int per = sp->base->plugin.cp_split == DT_CP_ZIGZAG ? 2 : 1;
    int T = sp->base->train.seq_len;
    for (int next = 2 * cp; next <= 64 && T / next >= RING_MIN_TOKENS; next *= 2)
        if (T % (next * per) == 0)
            return next;
    return 0;
}

/* Every layout the search makes, and the configuration as given (with its pins: a key the
 * search does not vary, such as plugin.pp_layers, is then still planned). */
static dt_status enumerate(const space *sp) {
    dt_plan_cand x = {.c = *sp->base};
    x.c.plugin.pp_layers[0] = '\0';
    int W = sp->world;
    int node = sp->dev->node_size > 0 ? sp->dev->node_size : W;
    bool scatter_pinned = is_pinned(sp, "plugin.pp_scatter");
    for (int tp = 1; tp <= W; tp++)
        for (int s = 1; tp * s <= W; s++)
            for (int cp = 1; cp > 0 && tp * s * cp <= W; cp = next_ring(sp, cp))
                for (int pp = 1; tp * s * cp * pp <= W && pp <= x.c.model.n_layer; pp++) {
                    /* tensor and Ulysses collectives run on every block's path: the search
                     * keeps them inside a node (a pinned layout beyond it is still planned
                     * as given); the ring's neighbour messages may cross nodes */
                    int model = tp * s * cp * pp;
                    if (W % model || tp * s > node)
                        continue;
                    dt_plugin_config *p = &x.c.plugin;
                    p->tp_size = tp, p->sp_size = s, p->cp_size = cp, p->pp_size = pp;
                    for (int mode = 0; mode < 2; mode++) {
                        /* Megatron-SP splits rows over tp ranks: with tp > 1, no Ulysses */
                        if (mode == 1 && (tp == 1 || s > 1))
                            continue;
                        p->sp_mode = mode ? DT_SP_SPLIT_GATHER : DT_SP_ALL_TO_ALL;
                        /* boundaries in tp pieces where they are whole on every tp rank and
                         * a stage fills whole nodes, so that every message crosses machines */
                        if (!scatter_pinned)
                            p->pp_scatter = !mode && tp > 1 && pp > 1 && W / pp >= node;
                        DT_TRY(schedules(sp, &x, W / model));
                    }
                }
    if (sp->out->base_seen)
        return DT_OK;
    dt_plan_cand given = {.c = *sp->base};
    return consider(sp, &given);
}

dt_status dt_cli_plan_search(const dt_config *base, int world, const dt_plan_device *dev,
                             int64_t mem, const dt_plan_pins *pinned, dt_plan_cands *out) {
    sched_cache cache = {0};
    space sp = {.base = base,
                .world = world,
                .dev = dev,
                .mem = mem,
                .out = out,
                .pinned = pinned,
                .cache = &cache};
    dt_status st = enumerate(&sp);
    free_cache(&cache);
    return st;
}
