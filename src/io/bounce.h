/* A synthetic video source: clips of coloured shapes (squares, discs, diamonds) moving in
 * straight lines and bouncing off the walls of the frame, the embedded default data of the
 * video DiT (nothing to download).
 *
 * A clip is a pure function of (config, seed, clip index): every rank can make any clip of a
 * global batch without the others, and a resumed run sees the same clips. All shapes of a
 * clip are of one kind, which is the clip's class label. Pixels are in [-1, 1]: background
 * -1, shapes their colour (grey level with one channel). Stateless and thread-safe.
 *
 * It sits in io/ beside the token-shard reader: it is a data source on core alone (the RNG),
 * which models/ and train/ may read, and it knows nothing of models.
 */
#ifndef DT_IO_BOUNCE_H
#define DT_IO_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dt_bounce_kind {
    DT_BOUNCE_SQUARE,  /* |dx| <= r and |dy| <= r */
    DT_BOUNCE_DISC,    /* dx^2 + dy^2 <= r^2 */
    DT_BOUNCE_DIAMOND, /* |dx| + |dy| <= r */
    DT_BOUNCE_KIND_COUNT
} dt_bounce_kind;

enum { DT_BOUNCE_MAX_SHAPES = 16 };

typedef struct dt_bounce_config {
    int frames, channels, height, width; /* channels: 1 or 3 */
    int n_shapes;                        /* 1 .. DT_BOUNCE_MAX_SHAPES */
    float r_min, r_max;                  /* shape half-size in pixels */
    float speed_min, speed_max;          /* pixels per frame, > 0 */
} dt_bounce_config;

/* A config with the defaults for a clip shape: 2 shapes, half-sizes 1/8..1/5 of the shorter
 * side, speeds 1/16..1/8 of it per frame (at least 0.5 pixel). */
dt_bounce_config dt_bounce_defaults(int frames, int channels, int height, int width);
/* DT_OK, or DT_ERR_ARG naming the bad field and its value (a shape too large for the frame, a
 * speed that could cross the free space in one frame, ...). */
dt_status dt_bounce_check(const dt_bounce_config *c);

/* One shape at one frame: centre (x, y) in pixels (pixel i covers [i, i + 1)), velocity,
 * half-size, colour in [-1, 1]. */
typedef struct dt_bounce_shape {
    float x, y, vx, vy, r;
    float color[3];
} dt_bounce_shape;

/* The clip's class label: the kind of its shapes, 0 .. DT_BOUNCE_KIND_COUNT - 1. */
int32_t dt_bounce_label(uint64_t seed, int64_t index);
/* The shapes of clip `index` at frame f (0 .. frames - 1): out[n_shapes]. */
void dt_bounce_track(const dt_bounce_config *c, uint64_t seed, int64_t index, int f,
                     dt_bounce_shape *out);
/* Clip `index`'s caption, what its first frame shows, into buf (cut to cap - 1 bytes): each
 * shape's colour, kind and the way it moves at first, e.g. "a red disc moving left and a
 * blue disc moving up" (the larger of its velocity's two components names the way; y grows
 * downwards). Returns the caption's length. */
int dt_bounce_caption(const dt_bounce_config *c, uint64_t seed, int64_t index, char *buf,
                      size_t cap);
/* The words it uses: colour names by palette entry, kinds, ways (for tests and demos). */
extern const char *const DT_BOUNCE_COLOR_NAMES[];
extern const char *const DT_BOUNCE_KIND_NAMES[DT_BOUNCE_KIND_COUNT];
extern const char *const DT_BOUNCE_WAY_NAMES[4]; /* left, right, up, down */
int dt_bounce_n_colors(void);

/* B clips index0 .. index0 + B - 1: out [B, frames, channels, height, width], labels [B] (or
 * NULL). The config must pass dt_bounce_check. */
void dt_bounce_batch(const dt_bounce_config *c, uint64_t seed, int64_t index0, int B,
                     float *out, int32_t *labels);

#endif
