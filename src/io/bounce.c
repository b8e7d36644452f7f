/* The bouncing-shapes video source (see bounce.h). Motion is simulated in closed steps:
 * x += vx each frame, and a centre that passes a wall's limit (r from the edge) is reflected
 * about it with its velocity negated, so a shape never leaves the frame and keeps its speed. */
#include "io/bounce.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rng.h"

/* Saturated colours, RGB in [-1, 1]; a clip's shapes draw from them. */
static const float palette[][3] = {{1, -1, -1}, {-1, 1, -1}, {-0.2f, -0.2f, 1}, {1, 1, -1},
                                   {1, -1, 1},  {-1, 1, 1},  {1, 1, 1},         {1, 0, -1}};
enum { N_COLORS = sizeof palette / sizeof palette[0], DRAWS = 6 };

dt_bounce_config dt_bounce_defaults(int frames, int channels, int height, int width) {
    float side = (float)(height < width ? height : width);
    float smin = fmaxf(side / 16, 0.5f), smax = fmaxf(side / 8, smin);
    return (dt_bounce_config){.frames = frames, .channels = channels, .height = height,
                              .width = width, .n_shapes = 2, .r_min = side / 8,
                              .r_max = side / 5, .speed_min = smin, .speed_max = smax};
}

dt_status dt_bounce_check(const dt_bounce_config *c) {
    if (c->frames < 1 || c->height < 1 || c->width < 1)
        return dt_err_set(DT_ERR_ARG, "bounce: clip %d x %d x %d (frames x height x width) is empty",
                          c->frames, c->height, c->width);
    if (c->channels != 1 && c->channels != 3)
        return dt_err_set(DT_ERR_ARG, "bounce: channels = %d, want 1 or 3", c->channels);
    if (c->n_shapes < 1 || c->n_shapes > DT_BOUNCE_MAX_SHAPES)
        return dt_err_set(DT_ERR_ARG, "bounce: n_shapes = %d, want 1..%d", c->n_shapes,
                          DT_BOUNCE_MAX_SHAPES);
    float side = (float)(c->height < c->width ? c->height : c->width);
    if (!(c->r_min > 0) || !(c->r_max >= c->r_min) || !(2 * c->r_max < side))
        return dt_err_set(DT_ERR_ARG,
                          "bounce: shape half-sizes %g..%g must be positive, ordered and below "
                          "half the shorter side %g",
                          (double)c->r_min, (double)c->r_max, (double)side / 2);
    if (!(c->speed_min > 0) || !(c->speed_max >= c->speed_min) ||
        !(c->speed_max <= side - 2 * c->r_max))
        return dt_err_set(DT_ERR_ARG,
                          "bounce: speeds %g..%g pixels per frame must be positive, ordered and "
                          "at most the free space %g",
                          (double)c->speed_min, (double)c->speed_max,
                          (double)(side - 2 * c->r_max));
    return DT_OK;
}

int32_t dt_bounce_label(uint64_t seed, int64_t index) {
    return (int32_t)(dt_rng_u64(seed, "bounce.label", (uint64_t)index) % DT_BOUNCE_KIND_COUNT);
}

/* Reflect a coordinate moved past [lo, hi] back inside, negating its velocity. */
static void reflect(float *x, float *v, float lo, float hi) {
    if (*x > hi) {
        *x = 2 * hi - *x;
        *v = -*v;
    } else if (*x < lo) {
        *x = 2 * lo - *x;
        *v = -*v;
    }
}

void dt_bounce_track(const dt_bounce_config *c, uint64_t seed, int64_t index, int f,
                     dt_bounce_shape *out) {
    for (int s = 0; s < c->n_shapes; s++) {
        float u[DRAWS];
        dt_rng_fill_uniform(seed, "bounce.shape",
                            (index * DT_BOUNCE_MAX_SHAPES + s) * DRAWS, DRAWS, u);
        dt_bounce_shape *p = &out[s];
        p->r = c->r_min + u[0] * (c->r_max - c->r_min);
        p->x = p->r + u[1] * (c->width - 2 * p->r);
        p->y = p->r + u[2] * (c->height - 2 * p->r);
        float speed = c->speed_min + u[3] * (c->speed_max - c->speed_min);
        float angle = 6.2831853f * u[4];
        p->vx = speed * cosf(angle);
        p->vy = speed * sinf(angle);
        const float *col = palette[(int)(u[5] * N_COLORS) % N_COLORS];
        memcpy(p->color, col, sizeof p->color);
        for (int k = 0; k < f; k++) {
            p->x += p->vx;
            p->y += p->vy;
            reflect(&p->x, &p->vx, p->r, c->width - p->r);
            reflect(&p->y, &p->vy, p->r, c->height - p->r);
        }
    }
}

const char *const DT_BOUNCE_COLOR_NAMES[] = {"red",     "green", "blue",  "yellow",
                                             "magenta", "cyan",  "white", "orange"};
const char *const DT_BOUNCE_KIND_NAMES[DT_BOUNCE_KIND_COUNT] = {"square", "disc", "diamond"};
const char *const DT_BOUNCE_WAY_NAMES[4] = {"left", "right", "up", "down"};
_Static_assert(sizeof DT_BOUNCE_COLOR_NAMES / sizeof *DT_BOUNCE_COLOR_NAMES == N_COLORS,
               "a name for every colour of the palette");
int dt_bounce_n_colors(void) { return N_COLORS; }

static int color_index(const float *col) {
    for (int i = 0; i < N_COLORS; i++)
        if (!memcmp(col, palette[i], sizeof palette[i]))
            return i;
    return 0;
}

int dt_bounce_caption(const dt_bounce_config *c, uint64_t seed, int64_t index, char *buf,
                      size_t cap) {
    dt_bounce_shape sh[DT_BOUNCE_MAX_SHAPES];
    dt_bounce_track(c, seed, index, 0, sh);
    const char *kind = DT_BOUNCE_KIND_NAMES[dt_bounce_label(seed, index)];
    size_t at = 0;
    buf[0] = 0;
    for (int s = 0; s < c->n_shapes && at + 1 < cap; s++) {
        float vx = sh[s].vx, vy = sh[s].vy;
        int way = fabsf(vx) >= fabsf(vy) ? (vx < 0 ? 0 : 1) : (vy < 0 ? 2 : 3);
        int w = snprintf(buf + at, cap - at, "%sa %s %s moving %s", s ? " and " : "",
                         DT_BOUNCE_COLOR_NAMES[color_index(sh[s].color)], kind,
                         DT_BOUNCE_WAY_NAMES[way]);
        at += w < 0 ? 0 : (size_t)w;
    }
    return (int)(at < cap ? at : cap - 1);
}

static int inside(dt_bounce_kind kind, float dx, float dy, float r) {
    switch (kind) {
    case DT_BOUNCE_SQUARE:
        return fabsf(dx) <= r && fabsf(dy) <= r;
    case DT_BOUNCE_DISC:
        return dx * dx + dy * dy <= r * r;
    default:
        return fabsf(dx) + fabsf(dy) <= r;
    }
}

static void render_clip(const dt_bounce_config *c, uint64_t seed, int64_t index, float *out) {
    int H = c->height, W = c->width, Ch = c->channels;
    dt_bounce_kind kind = (dt_bounce_kind)dt_bounce_label(seed, index);
    dt_bounce_shape sh[DT_BOUNCE_MAX_SHAPES];
    size_t plane = (size_t)H * W;
    for (int f = 0; f < c->frames; f++) {
        float *fr = out + (size_t)f * Ch * plane;
        for (size_t i = 0; i < (size_t)Ch * plane; i++)
            fr[i] = -1.0f;
        dt_bounce_track(c, seed, index, f, sh);
        for (int s = 0; s < c->n_shapes; s++) { /* later shapes drawn over earlier ones */
            const dt_bounce_shape *p = &sh[s];
            float grey = 0.299f * p->color[0] + 0.587f * p->color[1] + 0.114f * p->color[2];
            int y0 = (int)floorf(p->y - p->r), y1 = (int)ceilf(p->y + p->r);
            int x0 = (int)floorf(p->x - p->r), x1 = (int)ceilf(p->x + p->r);
            for (int y = y0 < 0 ? 0 : y0; y < (y1 > H ? H : y1); y++)
                for (int x = x0 < 0 ? 0 : x0; x < (x1 > W ? W : x1); x++) {
                    if (!inside(kind, x + 0.5f - p->x, y + 0.5f - p->y, p->r))
                        continue;
                    for (int ch = 0; ch < Ch; ch++)
                        fr[ch * plane + (size_t)y * W + x] = Ch == 1 ? grey : p->color[ch];
                }
        }
    }
}

void dt_bounce_batch(const dt_bounce_config *c, uint64_t seed, int64_t index0, int B,
                     float *out, int32_t *labels) {
    size_t clip = (size_t)c->frames * c->channels * c->height * c->width;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++)
        render_clip(c, seed, index0 + b, out + b * clip);
    if (labels)
        for (int b = 0; b < B; b++)
            labels[b] = dt_bounce_label(seed, index0 + b);
}
