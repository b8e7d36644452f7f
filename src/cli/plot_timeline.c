/* dtrain plot --timeline: one step of a memory timeline (core/mem.h's JSON) as a stacked area
 * chart of the categories, activations split into the saved sets in use and the rest of their
 * arena, over the step's events; phases shaded along the top, the peak marked and explained.
 * See plot_impl.h. Single-threaded.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plot_impl.h"
#include "io/atomic.h"

enum { MAX_CATS = 16, MAX_SERIES = MAX_CATS + 1 };

typedef struct event {
    const char *kind, *name, *phase; /* borrowed from the parsed document */
    int step, mb, slot, block, cat;
    double t, bytes, live[MAX_CATS], in_use; /* in_use: of the activations category */
} event;

typedef struct timeline {
    cJSON *doc;
    const char *cats[MAX_CATS];
    int n_cats, acts; /* index of "activations", or -1 */
    event *ev;
    int n_ev, rank, first_dropped;
    double dropped;
} timeline;

/* One band of the stacked chart: a category, or the activations' two parts. */
typedef struct series {
    char label[48];
    const char *color;
    double value_at_peak;
} series;

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    return s ? s : "";
}

static dt_status parse_event(timeline *tl, const cJSON *o, event *e, int i, const char *in) {
    const cJSON *live = cJSON_GetObjectItemCaseSensitive(o, "live");
    if (!cJSON_IsObject(o) || !cJSON_IsObject(live))
        return dt_err_set(DT_ERR_FORMAT, "%s: event %d has no \"live\" bytes", in, i);
    *e = (event){.kind = str(o, "kind"), .name = str(o, "name"), .phase = str(o, "phase"),
                 .step = (int)num(o, "step", -1), .mb = (int)num(o, "mb", -1),
                 .slot = (int)num(o, "slot", -1), .block = (int)num(o, "block", -1),
                 .t = num(o, "t", 0), .bytes = num(o, "bytes", 0), .cat = -1};
    const char *cat = str(o, "cat");
    for (int c = 0; c < tl->n_cats; c++) {
        e->live[c] = num(live, tl->cats[c], 0);
        if (!strcmp(cat, tl->cats[c]))
            e->cat = c;
    }
    if (tl->acts >= 0)
        e->in_use = num(cJSON_GetObjectItemCaseSensitive(o, "in_use"), "activations", 0);
    return DT_OK;
}

static dt_status load(const char *in, timeline *tl) {
    char *text;
    DT_TRY(dt_read_text(in, "memory timeline", (size_t)1 << 32, &text));
    tl->doc = cJSON_Parse(text);
    free(text);
    if (!tl->doc)
        return dt_err_set(DT_ERR_FORMAT, "%s is not JSON (a memory timeline written by "
                          "train.mem_timeline is)", in);
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(tl->doc, "categories");
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(tl->doc, "events");
    if (strcmp(str(tl->doc, "format"), "dtrain-mem-timeline") || !cJSON_IsArray(cats) ||
        !cJSON_IsArray(evs))
        return dt_err_set(DT_ERR_FORMAT, "%s is not a dtrain memory timeline (no \"format\": "
                          "\"dtrain-mem-timeline\" with \"categories\" and \"events\")", in);
    tl->acts = -1;
    const cJSON *c;
    cJSON_ArrayForEach(c, cats) {
        if (!cJSON_IsString(c) || tl->n_cats == MAX_CATS)
            return dt_err_set(DT_ERR_FORMAT, "%s: bad \"categories\"", in);
        if (!strcmp(c->valuestring, "activations"))
            tl->acts = tl->n_cats;
        tl->cats[tl->n_cats++] = c->valuestring;
    }
    tl->rank = (int)num(tl->doc, "rank", 0);
    tl->dropped = num(tl->doc, "dropped", 0);
    tl->first_dropped = (int)num(tl->doc, "first_dropped_step", -1);
    int n = cJSON_GetArraySize(evs);
    tl->ev = calloc((size_t)n + 1, sizeof *tl->ev);
    if (!tl->ev)
        return dt_err_set(DT_ERR_OOM, "plot: out of memory for %d events", n);
    const cJSON *o;
    cJSON_ArrayForEach(o, evs) {
        DT_TRY(parse_event(tl, o, &tl->ev[tl->n_ev], tl->n_ev, in));
        tl->n_ev++;
    }
    if (tl->n_ev == 0)
        return dt_err_set(DT_ERR_FORMAT, "%s holds no events", in);
    return DT_OK;
}

/* The step asked for, or the last one recorded whole; [*i0, *i1) its events. */
static dt_status pick_step(const timeline *tl, const char *in, int *step, int *i0, int *i1) {
    int lo = tl->ev[0].step, hi = tl->ev[tl->n_ev - 1].step;
    if (*step < 0) {
        *step = hi;
        if (tl->dropped > 0 && tl->first_dropped > lo) /* that one lost events */
            *step = tl->first_dropped - 1;
    }
    *i0 = *i1 = -1;
    for (int i = 0; i < tl->n_ev; i++)
        if (tl->ev[i].step == *step) {
            *i0 = *i0 < 0 ? i : *i0;
            *i1 = i + 1;
        }
    if (*i0 < 0)
        return dt_err_set(DT_ERR_ARG, "--step %d is not in %s (it holds steps %d..%d; 0 is the "
                          "set-up)", *step, in, lo, hi);
    return DT_OK;
}

static bool after_step(const event *e) {
    return !strcmp(e->phase, "eval") || !strcmp(e->phase, "checkpoint") ||
           !strcmp(e->phase, "export");
}

/* A step's chart ends where its evaluation, checkpoint or export begins (their own events,
 * often many, would flatten the step); [*i1, *i_end) are those. The set-up keeps all. */
static void split_after(const timeline *tl, int step, int i0, int *i1, int *i_end) {
    *i_end = *i1;
    if (step == 0)
        return;
    for (int i = i0; i < *i_end; i++)
        if (after_step(&tl->ev[i])) {
            *i1 = i > i0 ? i : i0 + 1;
            return;
        }
}

/* ---- drawing ------------------------------------------------------------------------- */

/* the value of `key` in a table of {key, value} rows ending in {NULL, default} */
static const char *lookup(const char *const (*rows)[2], const char *key) {
    for (; rows[0][0]; rows++)
        if (!strcmp(key, rows[0][0]))
            return rows[0][1];
    return rows[0][1];
}

static const char *color_of(const char *cat, int i) {
    static const char *const named[][2] = {{"params", "#4e79a7"}, {"grads", "#f28e2b"},
                                           {"optim", "#59a14f"}, {"comm", "#b07aa1"},
                                           {"temp", "#9c755f"}, {NULL, NULL}};
    static const char *other[] = {"#76b7b2", "#edc948", "#bab0ac", "#ff9da7"};
    const char *c = lookup(named, cat);
    return c ? c : other[i % 4];
}

/* Band values of the state after event i: every category, the activations last, split in
 * the saved sets in use (red) and the rest of their arena and buffers (pale). */
static int bands(const timeline *tl, const event *e, double *v, series *s) {
    int n = 0;
    for (int c = 0; c < tl->n_cats; c++) {
        if (c == tl->acts)
            continue;
        if (s) {
            snprintf(s[n].label, sizeof s[n].label, "%s", tl->cats[c]);
            s[n].color = color_of(tl->cats[c], c);
        }
        v[n++] = e->live[c];
    }
    if (tl->acts < 0)
        return n;
    double used = e->in_use < e->live[tl->acts] ? e->in_use : e->live[tl->acts];
    if (s) {
        snprintf(s[n].label, sizeof s[n].label, "activations: saved sets in use");
        s[n].color = "#e15759";
        snprintf(s[n + 1].label, sizeof s[n + 1].label, "activations: rest of arena");
        s[n + 1].color = "#f6c8c9";
    }
    v[n++] = used;
    v[n++] = e->live[tl->acts] - used;
    return n;
}

/* Bytes in use after an event: everything allocated but the idle part of the activations. */
static double in_use_total(const timeline *tl, const event *e) {
    double t = 0;
    for (int c = 0; c < tl->n_cats; c++)
        t += e->live[c];
    return tl->acts < 0 ? t : t - e->live[tl->acts] + fmin(e->in_use, e->live[tl->acts]);
}

static double live_total(const timeline *tl, const event *e) {
    double t = 0;
    for (int c = 0; c < tl->n_cats; c++)
        t += e->live[c];
    return t;
}

/* x = 0: the state before the step (after the previous event); x = k: after its k-th event */
static const event *state_at(const timeline *tl, int i0, int k) {
    static const event none = {.step = 0};
    int i = i0 + k - 1;
    return i >= 0 ? &tl->ev[i] : &none;
}

static void draw_area(dt_svg *svg, const dt_plot_axes *a, const timeline *tl, int i0, int n,
                      const series *s, int n_series) {
    int m = n + 1; /* states */
    double *lo = calloc((size_t)m, sizeof *lo), *xy = malloc((size_t)m * 8 * sizeof *xy);
    double v[MAX_SERIES + 1];
    if (!lo || !xy) {
        free(lo);
        free(xy);
        return;
    }
    for (int b = 0; b < n_series; b++) {
        int p = 0;
        for (int k = 0; k < m; k++) { /* upper edge, left to right, as steps */
            bands(tl, state_at(tl, i0, k), v, NULL);
            xy[2 * p] = dt_plot_px(a, k), xy[2 * p + 1] = dt_plot_py(a, lo[k] + v[b]), p++;
            xy[2 * p] = dt_plot_px(a, k + 1), xy[2 * p + 1] = xy[2 * p - 1], p++;
        }
        for (int k = m - 1; k >= 0; k--) { /* lower edge back */
            xy[2 * p] = dt_plot_px(a, k + 1), xy[2 * p + 1] = dt_plot_py(a, lo[k]), p++;
            xy[2 * p] = dt_plot_px(a, k), xy[2 * p + 1] = xy[2 * p - 1], p++;
        }
        dt_svg_polygon(svg, xy, p, &(dt_svg_paint){.fill = s[b].color, .opacity = 0.9});
        for (int k = 0; k < m; k++) {
            bands(tl, state_at(tl, i0, k), v, NULL);
            lo[k] += v[b];
        }
    }
    free(lo);
    free(xy);
}

static const char *phase_short(const char *phase) {
    static const char *const map[][2] = {{"forward", "F"}, {"head", "H"}, {"backward", "B"},
                                         {"weights", "W"}, {"optimizer", "optim"},
                                         {"checkpoint", "ckpt"}, {NULL, NULL}};
    const char *s = lookup(map, phase);
    return s ? s : phase;
}

static const char *phase_color(const char *phase) {
    static const char *const map[][2] = {
        {"forward", "#4e79a7"}, {"head", "#76b7b2"}, {"backward", "#e15759"},
        {"weights", "#f28e2b"}, {"collective", "#b07aa1"}, {"optimizer", "#59a14f"},
        {"eval", "#edc948"}, {"checkpoint", "#9c755f"}, {NULL, "#bab0ac"}};
    return lookup(map, phase);
}

/* Runs of events with one (phase, micro-batch): a tinted column and a labelled tab above. */
static void draw_phases(dt_svg *svg, const dt_plot_axes *a, const timeline *tl, int i0, int n) {
    for (int k = 1; k <= n;) {
        const event *e = &tl->ev[i0 + k - 1];
        int end = k;
        while (end < n && !strcmp(tl->ev[i0 + end].phase, e->phase) &&
               tl->ev[i0 + end].mb == e->mb)
            end++;
        double x0 = dt_plot_px(a, k), x1 = dt_plot_px(a, end + 1);
        const char *col = phase_color(e->phase);
        dt_svg_rect(svg, x0, a->top, x1 - x0, a->height, &(dt_svg_paint){.fill = col,
                                                                         .opacity = 0.07});
        dt_svg_rect(svg, x0, a->top - 20, x1 - x0, 16,
                    &(dt_svg_paint){.fill = col, .opacity = 0.8, .stroke = "white",
                                    .stroke_width = 1});
        char label[40];
        if (e->mb >= 0)
            snprintf(label, sizeof label, "%s%d", phase_short(e->phase), e->mb);
        else
            snprintf(label, sizeof label, "%s", e->phase);
        if (x1 - x0 >= 7.0 * strlen(label) + 4)
            dt_svg_text(svg, (x0 + x1) / 2, a->top - 8, 11, DT_SVG_MIDDLE, "white", 700, 0, "%s",
                        label);
        k = end + 1;
    }
}

/* What is live after event `upto`: the largest buffer and the saved sets in use, rebuilt by
 * replaying the log from its start. */
typedef struct peak_why {
    const event *largest_buf, *largest_set;
    int n_sets;
    double sets_bytes;
} peak_why;

static dt_status explain(const timeline *tl, int upto, peak_why *w) {
    const event **bufs = malloc((size_t)(upto + 1) * sizeof *bufs);
    const event **sets = malloc((size_t)(upto + 1) * sizeof *sets);
    int nb = 0, ns = 0;
    if (!bufs || !sets) {
        free(bufs);
        free(sets);
        return dt_err_set(DT_ERR_OOM, "plot: out of memory");
    }
    for (int i = 0; i <= upto; i++) {
        const event *e = &tl->ev[i];
        bool on = !strcmp(e->kind, "alloc") || !strcmp(e->kind, "use");
        bool set = !strcmp(e->kind, "use") || !strcmp(e->kind, "unuse");
        const event **list = set ? sets : bufs;
        int *n = set ? &ns : &nb;
        if (on) {
            list[(*n)++] = e;
            continue;
        }
        for (int j = *n - 1; j >= 0; j--) /* the most recent match leaves */
            if (list[j]->cat == e->cat && list[j]->bytes == e->bytes &&
                !strcmp(list[j]->name, e->name) && list[j]->slot == e->slot) {
                list[j] = list[--*n];
                break;
            }
    }
    *w = (peak_why){0};
    for (int j = 0; j < nb; j++)
        if (!w->largest_buf || bufs[j]->bytes > w->largest_buf->bytes)
            w->largest_buf = bufs[j];
    for (int j = 0; j < ns; j++) {
        w->sets_bytes += sets[j]->bytes;
        if (!w->largest_set || sets[j]->bytes > w->largest_set->bytes)
            w->largest_set = sets[j];
    }
    w->n_sets = ns;
    free(bufs);
    free(sets);
    return DT_OK;
}

static void draw_peak(dt_svg *svg, const dt_plot_axes *a, const timeline *tl, int i0, int k,
                      const peak_why *w) {
    const event *e = &tl->ev[i0 + k - 1];
    double total = in_use_total(tl, e), x = dt_plot_px(a, k + 0.5), y = dt_plot_py(a, total);
    char tb[32], bb[32], sb[32];
    dt_plot_bytes(total, tb, sizeof tb);
    dt_svg_line(svg, x, a->top, x, a->top + a->height, "#222222", 1, "3 3");
    dt_svg_circle(svg, x, y, 5, &(dt_svg_paint){.fill = "#222222", .opacity = 1,
                                                .stroke = "white", .stroke_width = 2});
    bool right = x < a->left + a->width * 0.6;
    double tx = right ? x + 10 : x - 10;
    dt_svg_anchor an = right ? DT_SVG_START : DT_SVG_END;
    char where[48] = "";
    if (e->mb >= 0)
        snprintf(where, sizeof where, ", micro-batch %d", e->mb);
    double bw = 380; /* behind the three lines, so the chart's edges do not cross them */
    dt_svg_rect(svg, right ? tx - 4 : tx - bw + 4, y - 46, bw, 52,
                &(dt_svg_paint){.fill = "white", .opacity = 0.85, .stroke = "#bbbbbb",
                                .stroke_width = 0.5});
    dt_svg_text(svg, tx, y - 30, 13, an, "#111111", 700, 0, "peak in use %s: %s%s", tb,
                e->phase, where);
    if (w->largest_buf) {
        dt_plot_bytes(w->largest_buf->bytes, bb, sizeof bb);
        dt_svg_text(svg, tx, y - 15, 11, an, "#333333", 400, 0,
                    "largest buffer \"%s\" (%s, %s)", w->largest_buf->name, tl->cats[w->largest_buf->cat], bb);
    }
    if (w->largest_set) {
        dt_plot_bytes(w->sets_bytes, sb, sizeof sb);
        dt_plot_bytes(w->largest_set->bytes, bb, sizeof bb);
        dt_svg_text(svg, tx, y - 1, 11, an, "#333333", 400, 0,
                    "%d saved set%s live (%s), largest %s slot %d (%s)", w->n_sets,
                    w->n_sets == 1 ? "" : "s", sb, w->largest_set->name, w->largest_set->slot,
                    bb);
    }
}

static void draw_legend(dt_svg *svg, double x, double y, const series *s, int n,
                        double peak_total, double alloc_max) {
    char b[32];
    dt_svg_text(svg, x, y, 12, DT_SVG_START, "#222222", 700, 0, "at the peak");
    y += 20;
    for (int i = n - 1; i >= 0; i--, y += 20) { /* top band first, as stacked */
        dt_svg_rect(svg, x, y - 11, 14, 14, &(dt_svg_paint){.fill = s[i].color, .opacity = 0.9});
        dt_plot_bytes(s[i].value_at_peak, b, sizeof b);
        dt_svg_text(svg, x + 20, y, 11, DT_SVG_START, "#222222", 400, 0, "%s", s[i].label);
        dt_svg_text(svg, x + 20, y + 12, 10, DT_SVG_START, "#666666", 400, 0, "%s", b);
        y += 8;
    }
    dt_plot_bytes(peak_total, b, sizeof b);
    dt_svg_text(svg, x, y + 6, 12, DT_SVG_START, "#111111", 700, 0, "in use: %s", b);
    dt_plot_bytes(alloc_max, b, sizeof b);
    dt_svg_line(svg, x, y + 22, x + 14, y + 22, "#222222", 1.5, "5 3");
    dt_svg_text(svg, x + 20, y + 26, 11, DT_SVG_START, "#222222", 400, 0, "allocated: %s", b);
}

static dt_status draw(const timeline *tl, const char *in, int step, int i0, int i1,
                      int i_end, const char *out) {
    enum { W = 1200, H = 640 };
    int n = i1 - i0, peak = 1;
    double alloc_max = 0, v[MAX_SERIES + 1];
    for (int k = 0; k <= n; k++) {
        const event *e = state_at(tl, i0, k);
        alloc_max = fmax(alloc_max, live_total(tl, e));
        if (k > 0 && in_use_total(tl, e) > in_use_total(tl, state_at(tl, i0, peak)))
            peak = k;
    }
    series s[MAX_SERIES + 1];
    int n_series = bands(tl, state_at(tl, i0, peak), v, s);
    for (int b = 0; b < n_series; b++)
        s[b].value_at_peak = v[b];
    peak_why why = {0};
    DT_TRY(explain(tl, i0 + peak - 1, &why));
    double lo = 0, hi = alloc_max * 1.08;
    dt_plot_nice_range(&lo, &hi);
    dt_plot_axes a = {.left = 90, .top = 98, .width = 850, .height = 460, .x_lo = 0,
                      .x_hi = n + 1, .y_lo = 0, .y_hi = hi};
    dt_svg *svg;
    char title[160];
    snprintf(title, sizeof title, "dtrain memory timeline, rank %d, step %d", tl->rank, step);
    DT_TRY(dt_svg_open(out, W, H, title, &svg));
    char when[32] = "set-up (step 0)";
    if (step)
        snprintf(when, sizeof when, "step %d", step);
    dt_svg_text(svg, a.left, 30, 18, DT_SVG_START, "#111111", 700, 0, "Memory of rank %d, %s",
                tl->rank, when);
    dt_svg_text(svg, a.left, 50, 11, DT_SVG_START, "#555555", 400, 0,
                "%s: %d events in this step, over %.1f ms%s", in, n,
                1e3 * (tl->ev[i1 - 1].t - tl->ev[i0].t),
                tl->dropped > 0 ? " (the log was full: later events were dropped)" : "");
    if (i_end > i1) {
        double after = 0;
        for (int i = i1; i < i_end; i++)
            after = fmax(after, in_use_total(tl, &tl->ev[i]));
        char b[32];
        dt_plot_bytes(after, b, sizeof b);
        dt_svg_text(svg, a.left, 64, 11, DT_SVG_START, "#555555", 400, 0,
                    "not drawn: %d events of %s after the step (peak in use %s)", i_end - i1,
                    tl->ev[i1].phase, b);
    }
    a.x_whole = true;
    dt_plot_draw_axes(svg, &a, DT_PLOT_BYTES, "events of the step, in order (x = 0: before "
                      "it; F/B/W n: forward, backward, weight pass of micro-batch n)", "bytes");
    draw_phases(svg, &a, tl, i0, n);
    draw_area(svg, &a, tl, i0, n, s, n_series);
    double ya = dt_plot_py(&a, alloc_max);
    dt_svg_line(svg, a.left, ya, a.left + a.width, ya, "#222222", 1.5, "5 3");
    draw_peak(svg, &a, tl, i0, peak, &why);
    draw_legend(svg, a.left + a.width + 24, a.top, s, n_series,
                in_use_total(tl, state_at(tl, i0, peak)), alloc_max);
    return dt_svg_close(svg);
}

dt_status dt_plot_timeline(const char *in, int step, const char *out) {
    timeline tl = {0};
    int i0, i1, i_end;
    dt_status st = load(in, &tl);
    if (st == DT_OK)
        st = pick_step(&tl, in, &step, &i0, &i1);
    if (st == DT_OK) {
        split_after(&tl, step, i0, &i1, &i_end);
        st = draw(&tl, in, step, i0, i1, i_end, out);
    }
    free(tl.ev);
    cJSON_Delete(tl.doc);
    return st;
}
