/* Statistics of video clips as a GIF shows them, for tests/train/dit_sample.sh: decodes an
 * animated GIF written by io/gif (K clips side by side, scaled) with giflib and prints, per
 * frame, the share of background pixels (every channel below -0.75, i.e. the darkest palette
 * level), the mean absolute change from the frame before, and the mean pixel value, each as
 * its mean, min and max over every frame of every clip:
 *   clip_stats gif FILE.gif CHANNELS HEIGHT WIDTH
 * The same statistics of references, drawn through the same GIF writer and decoder so that
 * both sides see the palette's rounding:
 *   clip_stats bounce K FRAMES CHANNELS HEIGHT WIDTH SHAPES SEED   training clips (io/bounce)
 *   clip_stats noise K FRAMES CHANNELS HEIGHT WIDTH SEED           standard normal noise
 * Output: one line "bg MEAN MIN MAX motion MEAN MIN MAX mean MEAN MIN MAX clips K frames F".
 */
#include <gif_lib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/bounce.h"
#include "io/gif.h"
#include "models/flow.h"

typedef struct stat3 {
    double sum, min, max;
} stat3;

static void add(stat3 *s, double v, int k) {
    s->sum += v;
    s->min = k == 0 || v < s->min ? v : s->min;
    s->max = k == 0 || v > s->max ? v : s->max;
}

/* pixel (x, y) of frame f of clip k as values in [-1, 1], channels of it */
static void pixel(GifFileType *g, int f, int k, int x, int y, int scale, int width,
                  int channels, float *out) {
    SavedImage *im = &g->SavedImages[f];
    ColorMapObject *map = im->ImageDesc.ColorMap ? im->ImageDesc.ColorMap : g->SColorMap;
    int W = g->SWidth, px = k * (width * scale + 1) + x * scale + scale / 2;
    int idx = im->RasterBits[(long)(y * scale + scale / 2) * W + px];
    GifColorType c = map->Colors[idx];
    int rgb[3] = {c.Red, c.Green, c.Blue};
    for (int ch = 0; ch < channels; ch++)
        out[ch] = rgb[ch] / 255.0f * 2 - 1;
}

static int stats_of_gif(const char *path, int channels, int height, int width) {
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    if (!g || DGifSlurp(g) == GIF_ERROR) {
        fprintf(stderr, "clip_stats: cannot decode %s: %s\n", path, GifErrorString(err));
        return 1;
    }
    int frames = g->ImageCount, scale = g->SHeight / height;
    int K = scale > 0 ? (g->SWidth + 1) / (width * scale + 1) : 0;
    if (frames < 2 || scale < 1 || K < 1 || (long)g->SHeight != (long)height * scale) {
        fprintf(stderr, "clip_stats: %s is %d x %d with %d frames, not clips of %d x %d\n", path,
                g->SWidth, g->SHeight, frames, height, width);
        return 1;
    }
    stat3 bg = {0}, motion = {0}, mean = {0};
    float a[3], b[3];
    int n = 0;
    double plane = (double)height * width;
    for (int k = 0; k < K; k++)
        for (int f = 0; f < frames; f++, n++) {
            double n_bg = 0, diff = 0, sum = 0;
            for (int y = 0; y < height; y++)
                for (int x = 0; x < width; x++) {
                    pixel(g, f, k, x, y, scale, width, channels, a);
                    bool dark = true;
                    for (int ch = 0; ch < channels; ch++) {
                        dark &= a[ch] < -0.75f;
                        sum += a[ch];
                    }
                    n_bg += dark;
                    if (f == 0)
                        continue;
                    pixel(g, f - 1, k, x, y, scale, width, channels, b);
                    for (int ch = 0; ch < channels; ch++)
                        diff += fabsf(a[ch] - b[ch]);
                }
            add(&bg, n_bg / plane, n);
            add(&mean, sum / (plane * channels), n);
            if (f > 0) /* the change from the frame before */
                add(&motion, diff / (plane * channels), n - k - 1);
        }
    int n_motion = K * (frames - 1);
    printf("bg %.4f %.4f %.4f motion %.4f %.4f %.4f mean %.4f %.4f %.4f clips %d frames %d\n",
           bg.sum / n, bg.min, bg.max, motion.sum / n_motion, motion.min, motion.max,
           mean.sum / n, mean.min, mean.max, K, frames);
    DGifCloseFile(g, &err);
    return 0;
}

/* reference clips written as the sampler writes them, then measured like a sample */
static int stats_of_reference(bool noise, int K, int frames, int channels, int height,
                              int width, int shapes, unsigned long long seed) {
    long n = (long)frames * channels * height * width;
    float *clips = malloc(sizeof(float) * n * K);
    if (!clips)
        return 1;
    if (noise) {
        for (int k = 0; k < K; k++)
            dt_flow_noise(seed, k, n, clips + k * n);
    } else {
        dt_bounce_config c = dt_bounce_defaults(frames, channels, height, width);
        c.n_shapes = shapes;
        if (dt_bounce_check(&c) != DT_OK) {
            fprintf(stderr, "clip_stats: %s\n", dt_err_msg());
            return 1;
        }
        dt_bounce_batch(&c, seed, 0, K, clips, NULL);
    }
    char path[64];
    snprintf(path, sizeof path, "clip_stats_%d.gif", (int)getpid());
    int side = height > width ? height : width, scale = 96 / side;
    dt_gif_clips g = {.data = clips, .K = K, .frames = frames, .channels = channels,
                      .height = height, .width = width};
    int rc = dt_gif_write(path, &g, scale > 1 ? scale : 1, 12) == DT_OK
                 ? stats_of_gif(path, channels, height, width)
                 : (fprintf(stderr, "clip_stats: %s\n", dt_err_msg()), 1);
    unlink(path);
    free(clips);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "gif"))
        return stats_of_gif(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (argc == 9 && !strcmp(argv[1], "bounce"))
        return stats_of_reference(false, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                                  atoi(argv[5]), atoi(argv[6]), atoi(argv[7]),
                                  strtoull(argv[8], NULL, 10));
    if (argc == 8 && !strcmp(argv[1], "noise"))
        return stats_of_reference(true, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                                  atoi(argv[5]), atoi(argv[6]), 0, strtoull(argv[7], NULL, 10));
    fprintf(stderr, "usage: clip_stats gif FILE CHANNELS HEIGHT WIDTH | bounce K FRAMES CHANNELS "
                    "HEIGHT WIDTH SHAPES SEED | noise K FRAMES CHANNELS HEIGHT WIDTH SEED\n");
    return 2;
}
