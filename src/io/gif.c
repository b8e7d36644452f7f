/* Animated GIF writer over giflib's encoder (see gif.h). giflib writes through a callback into
 * the atomic file, so a failure leaves no partial GIF behind. */
#include "io/gif.h"

#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic.h"

enum { CUBE = 6, CUBE_COLORS = CUBE * CUBE * CUBE };

/* [-1, 1] -> 0..levels-1, nearest level */
static int level(float v, int levels) {
    float u = (v + 1.0f) * 0.5f;
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    return (int)(u * (levels - 1) + 0.5f);
}

int dt_gif_color_index(const float *px, int channels, long stride) {
    if (channels == 1)
        return level(px[0], 256);
    return (level(px[0], CUBE) * CUBE + level(px[stride], CUBE)) * CUBE + level(px[2 * stride], CUBE);
}

static ColorMapObject *make_palette(int channels) {
    GifColorType c[256];
    for (int i = 0; i < 256; i++) {
        if (channels == 1 || i >= CUBE_COLORS) {
            int g = channels == 1 ? i : (i - CUBE_COLORS) * 255 / 39;
            c[i] = (GifColorType){(GifByteType)g, (GifByteType)g, (GifByteType)g};
        } else {
            c[i] = (GifColorType){(GifByteType)(i / 36 * 51), (GifByteType)(i / 6 % 6 * 51),
                                  (GifByteType)(i % 6 * 51)};
        }
    }
    return GifMakeMapObject(256, c);
}

static int write_cb(GifFileType *gif, const GifByteType *buf, int n) {
    dt_atomic_file *a = gif->UserData;
    return dt_atomic_write(a, buf, (size_t)n) == DT_OK ? n : 0;
}

static dt_status gif_fail(const char *path, const char *what, int err) {
    return dt_err_set(DT_ERR_IO, "gif: %s: %s (%s)", path, what, GifErrorString(err));
}

/* One frame of every clip, side by side, scaled, into the palette-index image. */
static void compose(const dt_gif_clips *cl, int f, int scale, int W, GifByteType *img) {
    long plane = (long)cl->height * cl->width;
    for (int k = 0; k < cl->K; k++) {
        const float *fr = cl->data + (((long)k * cl->frames + f) * cl->channels) * plane;
        int x0 = k * (cl->width * scale + 1);
        for (int y = 0; y < cl->height; y++)
            for (int x = 0; x < cl->width; x++) {
                GifByteType v = (GifByteType)dt_gif_color_index(fr + (long)y * cl->width + x,
                                                                cl->channels, plane);
                for (int a = 0; a < scale; a++)
                    memset(img + (long)(y * scale + a) * W + x0 + x * scale, v, (size_t)scale);
            }
    }
}

dt_status dt_gif_write(const char *path, const dt_gif_clips *cl, int scale, int delay_cs) {
    if (cl->channels != 1 && cl->channels != 3)
        return dt_err_set(DT_ERR_ARG, "gif: channels = %d, want 1 or 3", cl->channels);
    if (cl->K < 1 || cl->frames < 1 || cl->height < 1 || cl->width < 1 || scale < 1)
        return dt_err_set(DT_ERR_ARG, "gif: %d clips of %d x %d x %d at scale %d is empty",
                          cl->K, cl->frames, cl->height, cl->width, scale);
    long W = (long)cl->K * (cl->width * scale + 1) - 1, H = (long)cl->height * scale;
    if (W > 65535 || H > 65535)
        return dt_err_set(DT_ERR_ARG, "gif: image %ld x %ld is larger than 65535 a side", W, H);
    if (delay_cs < 0 || delay_cs > 65535)
        return dt_err_set(DT_ERR_ARG, "gif: delay %d cs is outside 0..65535", delay_cs);
    dt_status st = DT_OK;
    dt_atomic_file a;
    DT_TRY(dt_atomic_open(&a, path));
    int err = 0;
    GifFileType *gif = NULL;
    GifByteType *img = calloc((size_t)W * H, 1);
    ColorMapObject *map = make_palette(cl->channels);
    if (!img || !map) {
        st = dt_err_set(DT_ERR_OOM, "gif: out of memory for a %ld x %ld image", W, H);
        goto fail;
    }
    if (!(gif = EGifOpen(&a, write_cb, &err))) {
        st = gif_fail(path, "cannot start the file", err);
        goto fail;
    }
    EGifSetGifVersion(gif, true);
    if (EGifPutScreenDesc(gif, (int)W, (int)H, 8, 0, map) == GIF_ERROR)
        goto gif_error;
    /* NETSCAPE2.0 application block: loop forever */
    static const GifByteType loop[3] = {1, 0, 0};
    if (EGifPutExtensionLeader(gif, APPLICATION_EXT_FUNC_CODE) == GIF_ERROR ||
        EGifPutExtensionBlock(gif, 11, "NETSCAPE2.0") == GIF_ERROR ||
        EGifPutExtensionBlock(gif, 3, loop) == GIF_ERROR ||
        EGifPutExtensionTrailer(gif) == GIF_ERROR)
        goto gif_error;
    for (int f = 0; f < cl->frames; f++) {
        GraphicsControlBlock gcb = {.DisposalMode = DISPOSE_DO_NOT, .DelayTime = delay_cs,
                                    .TransparentColor = NO_TRANSPARENT_COLOR};
        GifByteType ext[4];
        size_t n = EGifGCBToExtension(&gcb, ext);
        compose(cl, f, scale, (int)W, img);
        if (EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, (int)n, ext) == GIF_ERROR ||
            EGifPutImageDesc(gif, 0, 0, (int)W, (int)H, false, NULL) == GIF_ERROR)
            goto gif_error;
        for (long y = 0; y < H; y++)
            if (EGifPutLine(gif, img + y * W, (int)W) == GIF_ERROR)
                goto gif_error;
    }
    if (EGifCloseFile(gif, &err) == GIF_ERROR) {
        gif = NULL;
        st = gif_fail(path, "cannot finish the file", err);
        goto fail;
    }
    gif = NULL;
    GifFreeMapObject(map);
    free(img);
    return dt_atomic_commit(&a);
gif_error:
    st = gif_fail(path, "cannot encode", gif->Error);
fail:
    if (gif)
        EGifCloseFile(gif, &err);
    GifFreeMapObject(map);
    free(img);
    dt_atomic_abort(&a);
    return st;
}
