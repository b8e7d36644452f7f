/* Animated GIF output of video clips (giflib), for sampled and training clips alike.
 *
 * K clips [frames, channels, height, width] with values in [-1, 1] (clamped) become one GIF of
 * `frames` images that loops forever, the clips side by side with a 1-pixel black gap, every
 * pixel drawn as a scale x scale square. Palette: 256 greys for one channel; for three, a
 * 6 x 6 x 6 colour cube (levels 0, 51, ..., 255, nearest level per channel) and 40 greys.
 * The file is written atomically (io/atomic.h): the old file or the whole new one. Stateless.
 */
#ifndef DT_IO_GIF_H
#define DT_IO_GIF_H

#include "core/status.h"

typedef struct dt_gif_clips {
    const float *data; /* [K, frames, channels, height, width] */
    int K, frames, channels, height, width;
} dt_gif_clips;

/* DT_ERR_ARG for a shape out of range (channels not 1 or 3, an image over 65535 pixels a
 * side, scale < 1), DT_ERR_IO naming the path when it cannot be written. delay_cs: time per
 * frame in hundredths of a second. */
dt_status dt_gif_write(const char *path, const dt_gif_clips *clips, int scale, int delay_cs);

/* The palette index dt_gif_write gives a pixel (channels values of one pixel, stride apart). */
int dt_gif_color_index(const float *px, int channels, long stride);

#endif
