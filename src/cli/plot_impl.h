/* Module-private to cli/: the chart pieces dtrain plot's two pictures share (plot_axes.c),
 * and the two pictures (plot_timeline.c, plot_metrics.c). Single-threaded. */
#ifndef DT_CLI_PLOT_IMPL_H
#define DT_CLI_PLOT_IMPL_H

#include <stdbool.h>

#include "core/status.h"
#include "io/svg.h"

/* A plot area on the page and the data range it shows. */
typedef struct dt_plot_axes {
    double left, top, width, height; /* page units */
    double x_lo, x_hi, y_lo, y_hi;    /* data units */
    bool x_whole;                     /* x ticks at whole numbers only (steps, events) */
} dt_plot_axes;

typedef enum dt_plot_units {
    DT_PLOT_NUMBER, /* 1.5, 2e-4, 12k */
    DT_PLOT_BYTES,  /* KiB, MiB or GiB, picked from the range */
    DT_PLOT_UNITS_COUNT
} dt_plot_units;

double dt_plot_px(const dt_plot_axes *a, double x);
double dt_plot_py(const dt_plot_axes *a, double y);
/* Round tick values covering [lo, hi], about n of them: 1, 2 or 5 times a power of ten.
 * Returns how many were written to ticks (at most 32). */
int dt_plot_ticks(double lo, double hi, int n, double *ticks);
/* A value as a short label ("0.00018", "22370", "1.5e-07"). */
void dt_plot_number(double v, char *out, int n);
/* Widens [lo, hi] to ticks and pads a flat range, so a line never sits on the frame. */
void dt_plot_nice_range(double *lo, double *hi);
/* "1.50 MiB", "12.3 KiB", "2.00 GiB" */
void dt_plot_bytes(double bytes, char *out, int n);
/* Frame, grid, tick labels; x labels only with x_title (shared axes label the lowest). */
void dt_plot_draw_axes(dt_svg *s, const dt_plot_axes *a, dt_plot_units y_units,
                       const char *x_title, const char *y_title);

/* The pictures: read `in`, write the SVG `out`. DT_ERR_ARG/_FORMAT/_IO name what is wrong. */
dt_status dt_plot_timeline(const char *in, int step, const char *out); /* step < 0: last */
dt_status dt_plot_metrics(const char *in, const char *out);

#endif
