/* A tiny SVG writer: one self-contained file (no scripts, no external fonts or links, text in
 * the generic sans-serif family), written as drawn. Coordinates are user units, y down.
 * A dt_svg owns its FILE; write errors are collected and reported once by dt_svg_close.
 * Not thread-safe.
 */
#ifndef DT_IO_SVG_H
#define DT_IO_SVG_H

#include "core/status.h"

typedef struct dt_svg dt_svg;

typedef enum dt_svg_anchor {
    DT_SVG_START,
    DT_SVG_MIDDLE,
    DT_SVG_END,
    DT_SVG_ANCHOR_COUNT
} dt_svg_anchor;

/* Paint: colours are CSS strings ("#4e79a7", "none"); opacity in [0, 1]; a stroke width of 0
 * draws no outline; dash "" is solid, else an SVG dash array ("4 3"). */
typedef struct dt_svg_paint {
    const char *fill, *stroke, *dash;
    double opacity, stroke_width;
} dt_svg_paint;

dt_status dt_svg_open(const char *path, double width, double height, const char *title,
                      dt_svg **out);
/* Ends the document and closes the file: DT_ERR_IO if any write failed. Always frees s. */
dt_status dt_svg_close(dt_svg *s);

void dt_svg_rect(dt_svg *s, double x, double y, double w, double h, const dt_svg_paint *p);
void dt_svg_line(dt_svg *s, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash);
/* xy: n points as x0, y0, x1, y1, ...; a polygon closes and fills, a polyline only strokes */
void dt_svg_polygon(dt_svg *s, const double *xy, int n, const dt_svg_paint *p);
void dt_svg_polyline(dt_svg *s, const double *xy, int n, const char *stroke, double width,
                     const char *dash);
void dt_svg_circle(dt_svg *s, double cx, double cy, double r, const dt_svg_paint *p);
/* Text (escaped), printf-style; rotate in degrees about (x, y); bold with weight > 400. */
void dt_svg_text(dt_svg *s, double x, double y, double size, dt_svg_anchor anchor,
                 const char *color, int weight, double rotate, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));

#endif
