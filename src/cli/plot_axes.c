/* Axes, ticks and unit labels shared by dtrain plot's pictures. See plot_impl.h. */
#include <math.h>
#include <stdio.h>

#include "cli/plot_impl.h"

double dt_plot_px(const dt_plot_axes *a, double x) {
    double span = a->x_hi > a->x_lo ? a->x_hi - a->x_lo : 1;
    return a->left + (x - a->x_lo) / span * a->width;
}

double dt_plot_py(const dt_plot_axes *a, double y) {
    double span = a->y_hi > a->y_lo ? a->y_hi - a->y_lo : 1;
    return a->top + a->height - (y - a->y_lo) / span * a->height;
}

static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / (n > 1 ? n : 1), mag = pow(10, floor(log10(raw)));
    double r = raw / mag;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

static int ticks_from(double lo, double hi, double step, double *ticks) {
    int k = 0;
    for (double t = ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9 && k < 32; t += step)
        ticks[k++] = fabs(t) < step * 1e-9 ? 0 : t;
    return k;
}

int dt_plot_ticks(double lo, double hi, int n, double *ticks) {
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi))
        return 0;
    return ticks_from(lo, hi, tick_step(lo, hi, n), ticks);
}

void dt_plot_number(double v, char *out, int n) {
    double a = fabs(v);
    if (a >= 1000 && a < 1e9)
        snprintf(out, (size_t)n, "%.0f", v);
    else
        snprintf(out, (size_t)n, "%.4g", v);
}

void dt_plot_nice_range(double *lo, double *hi) {
    if (!isfinite(*lo) || !isfinite(*hi)) {
        *lo = 0;
        *hi = 1;
        return;
    }
    if (!(*hi > *lo)) {
        double pad = *lo != 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= pad;
        *hi += pad;
    }
    double step = tick_step(*lo, *hi, 5);
    *lo = floor(*lo / step + 1e-9) * step;
    *hi = ceil(*hi / step - 1e-9) * step;
}

static double byte_unit(double max, const char **name) {
    if (max >= 1024.0 * 1024 * 1024) {
        *name = "GiB";
        return 1024.0 * 1024 * 1024;
    }
    if (max >= 1024.0 * 1024) {
        *name = "MiB";
        return 1024.0 * 1024;
    }
    *name = "KiB";
    return 1024.0;
}

void dt_plot_bytes(double bytes, char *out, int n) {
    const char *name;
    double u = byte_unit(fabs(bytes), &name);
    snprintf(out, (size_t)n, "%.*f %s", bytes / u >= 100 ? 0 : bytes / u >= 10 ? 1 : 2,
             bytes / u, name);
}

static void number_label(double v, double step, char *out, int n) {
    double a = fabs(v);
    if (a == 0)
        snprintf(out, (size_t)n, "0");
    else if (a >= 1e4 && a < 1e6)
        snprintf(out, (size_t)n, "%gk", v / 1e3);
    else if (a >= 1e6 || a < 1e-3)
        snprintf(out, (size_t)n, "%.1e", v);
    else
        snprintf(out, (size_t)n, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

void dt_plot_draw_axes(dt_svg *s, const dt_plot_axes *a, dt_plot_units y_units,
                       const char *x_title, const char *y_title) {
    double t[32], bottom = a->top + a->height;
    const char *unit = "";
    double scale = y_units == DT_PLOT_BYTES ? byte_unit(fmax(fabs(a->y_hi), fabs(a->y_lo)), &unit)
                                            : 1;
    int n = dt_plot_ticks(a->y_lo / scale, a->y_hi / scale, 5, t);
    for (int i = 0; i < n; i++) {
        double y = dt_plot_py(a, t[i] * scale);
        char label[32];
        number_label(t[i], n > 1 ? t[1] - t[0] : 1, label, sizeof label);
        dt_svg_line(s, a->left, y, a->left + a->width, y, "#dddddd", 1, "");
        dt_svg_text(s, a->left - 6, y + 4, 11, DT_SVG_END, "#444444", 400, 0, "%s", label);
    }
    double xs = tick_step(a->x_lo, a->x_hi, 8);
    n = a->x_hi > a->x_lo ? ticks_from(a->x_lo, a->x_hi, a->x_whole && xs < 1 ? 1 : xs, t) : 0;
    for (int i = 0; i < n; i++) {
        double x = dt_plot_px(a, t[i]);
        dt_svg_line(s, x, a->top, x, bottom, "#eeeeee", 1, "");
        if (x_title) {
            char label[32];
            number_label(t[i], n > 1 ? t[1] - t[0] : 1, label, sizeof label);
            dt_svg_line(s, x, bottom, x, bottom + 4, "#444444", 1, "");
            dt_svg_text(s, x, bottom + 16, 11, DT_SVG_MIDDLE, "#444444", 400, 0, "%s", label);
        }
    }
    dt_svg_rect(s, a->left, a->top, a->width, a->height,
                &(dt_svg_paint){.stroke = "#888888", .stroke_width = 1, .opacity = 1});
    if (x_title)
        dt_svg_text(s, a->left + a->width / 2, bottom + 34, 12, DT_SVG_MIDDLE, "#222222", 400, 0,
                    "%s", x_title);
    if (y_title)
        dt_svg_text(s, a->left - 52, a->top + a->height / 2, 12, DT_SVG_MIDDLE, "#222222", 400,
                    -90, "%s%s%s%s", y_title, unit[0] ? " (" : "", unit, unit[0] ? ")" : "");
}
