/* Tiny SVG writer. See svg.h. */
#include "io/svg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dt_svg {
    FILE *f;
    char path[4096];
};

/* XML character data and attribute values: the five specials escaped, control bytes dropped */
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t')
                fputc(*s, f);
        }
    }
}

dt_status dt_svg_open(const char *path, double width, double height, const char *title,
                      dt_svg **out) {
    *out = NULL;
    dt_svg *s = calloc(1, sizeof *s);
    if (!s)
        return dt_err_set(DT_ERR_OOM, "svg: out of memory");
    snprintf(s->path, sizeof s->path, "%s", path);
    s->f = fopen(path, "w");
    if (!s->f) {
        free(s);
        return dt_err_set(DT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    fprintf(s->f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n<title>",
            width, height, width, height);
    put_escaped(s->f, title);
    fputs("</title>\n", s->f);
    dt_svg_rect(s, 0, 0, width, height, &(dt_svg_paint){.fill = "white", .opacity = 1});
    *out = s;
    return DT_OK;
}

dt_status dt_svg_close(dt_svg *s) {
    fputs("</svg>\n", s->f);
    int bad = ferror(s->f);
    bad = fclose(s->f) != 0 || bad;
    dt_status st = bad ? dt_err_set(DT_ERR_IO, "short write to %s", s->path) : DT_OK;
    free(s);
    return st;
}

static void put_paint(FILE *f, const dt_svg_paint *p) {
    fputs(" fill=\"", f);
    put_escaped(f, p->fill ? p->fill : "none");
    fputc('"', f);
    if (p->opacity < 1)
        fprintf(f, " fill-opacity=\"%.3g\"", p->opacity);
    if (p->stroke && p->stroke_width > 0) {
        fputs(" stroke=\"", f);
        put_escaped(f, p->stroke);
        fprintf(f, "\" stroke-width=\"%.3g\"", p->stroke_width);
        if (p->dash && p->dash[0])
            fprintf(f, " stroke-dasharray=\"%s\"", p->dash);
    }
}

void dt_svg_rect(dt_svg *s, double x, double y, double w, double h, const dt_svg_paint *p) {
    fprintf(s->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", x, y, w > 0 ? w : 0,
            h > 0 ? h : 0);
    put_paint(s->f, p);
    fputs("/>\n", s->f);
}

void dt_svg_line(dt_svg *s, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash) {
    fprintf(s->f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2);
    put_paint(s->f,
              &(dt_svg_paint){.stroke = stroke, .stroke_width = width, .dash = dash, .opacity = 1});
    fputs("/>\n", s->f);
}

static void put_points(FILE *f, const double *xy, int n) {
    fputs(" points=\"", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%.2f,%.2f", i ? " " : "", xy[2 * i], xy[2 * i + 1]);
    fputc('"', f);
}

void dt_svg_polygon(dt_svg *s, const double *xy, int n, const dt_svg_paint *p) {
    fputs("<polygon", s->f);
    put_points(s->f, xy, n);
    put_paint(s->f, p);
    fputs("/>\n", s->f);
}

void dt_svg_polyline(dt_svg *s, const double *xy, int n, const char *stroke, double width,
                     const char *dash) {
    fputs("<polyline", s->f);
    put_points(s->f, xy, n);
    put_paint(s->f,
              &(dt_svg_paint){.stroke = stroke, .stroke_width = width, .dash = dash, .opacity = 1});
    fputs(" stroke-linejoin=\"round\"/>\n", s->f);
}

void dt_svg_circle(dt_svg *s, double cx, double cy, double r, const dt_svg_paint *p) {
    fprintf(s->f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\"", cx, cy, r);
    put_paint(s->f, p);
    fputs("/>\n", s->f);
}

void dt_svg_text(dt_svg *s, double x, double y, double size, dt_svg_anchor anchor,
                 const char *color, int weight, double rotate, const char *fmt, ...) {
    static const char *anchors[DT_SVG_ANCHOR_COUNT] = {"start", "middle", "end"};
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(s->f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.3g\" text-anchor=\"%s\" fill=\"", x, y,
            size, anchors[anchor]);
    put_escaped(s->f, color);
    fputc('"', s->f);
    if (weight > 400)
        fprintf(s->f, " font-weight=\"%d\"", weight);
    if (rotate != 0)
        fprintf(s->f, " transform=\"rotate(%.3g %.2f %.2f)\"", rotate, x, y);
    fputc('>', s->f);
    put_escaped(s->f, buf);
    fputs("</text>\n", s->f);
}
