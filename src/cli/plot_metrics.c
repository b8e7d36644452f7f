/* dtrain plot --metrics: the training curves of a metrics file (train.metrics, JSON lines) as
 * small multiples over one shared step axis: loss with val loss, learning rate, gradient
 * norm, tokens per second. See plot_impl.h. Single-threaded.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plot_impl.h"
#include "io/atomic.h"

enum { M_STEP, M_LOSS, M_VAL, M_LR, M_NORM, M_TPS, M_COUNT };
static const char *keys[M_COUNT] = {"step", "loss", "val_loss", "lr", "grad_norm",
                                    "tokens_per_s"};

typedef struct rows {
    double *v; /* [n][M_COUNT], NAN where a line lacks the key */
    int n;
    bool flow; /* the lines' loss_kind is flow_mse (a DiT's), not cross_entropy */
} rows;

static dt_status parse_line(const char *in, int line_no, const char *line, double *row,
                            bool *flow) {
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return dt_err_set(DT_ERR_FORMAT, "%s line %d is not a JSON object (a metrics file "
                          "written by train.metrics is one per line)", in, line_no);
    }
    for (int k = 0; k < M_COUNT; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
        row[k] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    }
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "loss_kind"));
    if (kind)
        *flow = strcmp(kind, "flow_mse") == 0;
    cJSON_Delete(o);
    if (isnan(row[M_STEP]))
        return dt_err_set(DT_ERR_FORMAT, "%s line %d has no \"step\"", in, line_no);
    return DT_OK;
}

static dt_status load(const char *in, rows *r) {
    char *text;
    DT_TRY(dt_read_text(in, "metrics file", (size_t)1 << 31, &text));
    int cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == '\n';
    r->v = malloc((size_t)cap * M_COUNT * sizeof *r->v);
    dt_status st = r->v ? DT_OK : dt_err_set(DT_ERR_OOM, "plot: out of memory");
    char *save = NULL;
    int line_no = 0;
    for (char *line = strtok_r(text, "\n", &save); st == DT_OK && line;
         line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        st = parse_line(in, line_no, line, r->v + (size_t)r->n * M_COUNT, &r->flow);
        r->n += st == DT_OK;
    }
    free(text);
    if (st == DT_OK && r->n == 0)
        st = dt_err_set(DT_ERR_FORMAT, "%s holds no metrics lines", in);
    bool any = false; /* lines with a step but nothing to plot draw empty panels */
    for (int i = 0; st == DT_OK && i < r->n && !any; i++)
        for (int k = M_LOSS; k < M_COUNT; k++)
            any |= isfinite(r->v[(size_t)i * M_COUNT + k]);
    if (st == DT_OK && !any)
        st = dt_err_set(DT_ERR_FORMAT,
                        "%s: no line has a field to plot (loss, val_loss, lr, "
                        "grad_norm or tokens_per_s)",
                        in);
    return st;
}

static double at(const rows *r, int i, int k) { return r->v[(size_t)i * M_COUNT + k]; }

/* A curve, broken where the key is missing; dots too when points are few. */
static void draw_curve(dt_svg *svg, const dt_plot_axes *a, const rows *r, int k,
                       const char *color, const char *dash) {
    double *xy = malloc((size_t)r->n * 2 * sizeof *xy);
    int p = 0, have = 0;
    if (!xy)
        return;
    for (int i = 0; i <= r->n; i++) {
        if (i < r->n && isfinite(at(r, i, k))) {
            xy[2 * p] = dt_plot_px(a, at(r, i, M_STEP));
            xy[2 * p + 1] = dt_plot_py(a, at(r, i, k));
            p++, have++;
            continue;
        }
        if (p > 1)
            dt_svg_polyline(svg, xy, p, color, 2, dash);
        for (int j = 0; j < p && (p == 1 || have <= 60); j++)
            dt_svg_circle(svg, xy[2 * j], xy[2 * j + 1], 2.5,
                          &(dt_svg_paint){.fill = color, .opacity = 1});
        p = 0;
    }
    free(xy);
}

static void range_of(const rows *r, const int *ks, int n_k, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < n_k; j++) {
            double v = at(r, i, ks[j]);
            if (isfinite(v)) {
                *lo = fmin(*lo, v);
                *hi = fmax(*hi, v);
            }
        }
}

typedef struct panel {
    const char *title, *unit;
    int keys[2], n_keys;
    bool zero_based;
} panel;

static void draw_panel(dt_svg *svg, dt_plot_axes a, const rows *r, const panel *p,
                       bool bottom) {
    static const char *colors[2] = {"#4e79a7", "#f28e2b"};
    range_of(r, p->keys, p->n_keys, &a.y_lo, &a.y_hi);
    if (!isfinite(a.y_lo)) { /* no value in the file */
        a.y_lo = 0, a.y_hi = 1;
    }
    if (p->zero_based && a.y_lo > 0)
        a.y_lo = 0;
    dt_plot_nice_range(&a.y_lo, &a.y_hi);
    dt_plot_draw_axes(svg, &a, DT_PLOT_NUMBER, bottom ? "step" : NULL, p->unit);
    dt_svg_text(svg, a.left + 4, a.top - 6, 13, DT_SVG_START, "#111111", 700, 0, "%s",
                p->title);
    for (int j = 0; j < p->n_keys; j++) {
        draw_curve(svg, &a, r, p->keys[j], colors[j], j ? "5 3" : "");
        double lx = a.left + a.width - 150 + 80 * j;
        if (p->n_keys > 1) { /* legend */
            dt_svg_line(svg, lx, a.top - 10, lx + 18, a.top - 10, colors[j], 2, j ? "5 3" : "");
            dt_svg_text(svg, lx + 22, a.top - 6, 11, DT_SVG_START, "#222222", 400, 0, "%s",
                        keys[p->keys[j]]);
        }
        double last = NAN;
        for (int i = 0; i < r->n; i++)
            last = isfinite(at(r, i, p->keys[j])) ? at(r, i, p->keys[j]) : last;
        char label[32];
        dt_plot_number(last, label, sizeof label);
        if (isfinite(last))
            dt_svg_text(svg, a.left + a.width + 6, dt_plot_py(&a, last) + 4, 11, DT_SVG_START,
                        colors[j], 700, 0, "%s", label);
    }
}

dt_status dt_plot_metrics(const char *in, const char *out) {
    rows r = {0};
    dt_status st = load(in, &r);
    if (st != DT_OK) {
        free(r.v);
        return st;
    }
    panel panels[] = {{"loss", "cross-entropy", {M_LOSS, M_VAL}, 2, false},
                      {"learning rate", "lr", {M_LR}, 1, true},
                      {"gradient norm (before clipping)", "norm", {M_NORM}, 1, true},
                      {"throughput", "tokens / s", {M_TPS}, 1, true}};
    if (r.flow) /* a DiT's loss: the mean squared error of the predicted velocity */
        panels[0] = (panel){"loss (rectified flow)", "velocity MSE", {M_LOSS, M_VAL}, 2, false};
    enum { N_PANELS = sizeof panels / sizeof *panels, W = 1000, PH = 150, GAP = 44, TOP = 74 };
    double x_lo, x_hi;
    range_of(&r, (int[]){M_STEP}, 1, &x_lo, &x_hi);
    if (x_hi <= x_lo)
        x_hi = x_lo + 1;
    dt_svg *svg;
    st = dt_svg_open(out, W, TOP + N_PANELS * (PH + GAP) + 20, "dtrain training curves", &svg);
    if (st != DT_OK) {
        free(r.v);
        return st;
    }
    dt_svg_text(svg, 90, 30, 18, DT_SVG_START, "#111111", 700, 0, "Training curves");
    dt_svg_text(svg, 90, 48, 11, DT_SVG_START, "#555555", 400, 0, "%s: %d steps logged (%g..%g)",
                in, r.n, x_lo, x_hi);
    for (int i = 0; i < N_PANELS; i++) {
        dt_plot_axes a = {.left = 90, .top = TOP + i * (PH + GAP), .width = W - 190,
                          .height = PH, .x_lo = x_lo, .x_hi = x_hi, .x_whole = true};
        draw_panel(svg, a, &r, &panels[i], i == N_PANELS - 1);
    }
    free(r.v);
    return dt_svg_close(svg);
}
