/* The GIF writer, read back with giflib's decoder (DGifSlurp): frame count, size, palette
 * colours of a few pixels (clips side by side, scaled, a black gap), the loop and delay
 * extensions; errors: a path that cannot be written leaves nothing, a bad shape is refused. */
#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "io/gif.h"

static GifColorType pixel(const GifFileType *g, int frame, int x, int y) {
    const SavedImage *im = &g->SavedImages[frame];
    int idx = im->RasterBits[y * im->ImageDesc.Width + x];
    return g->SColorMap->Colors[idx];
}

static bool rgb_is(GifColorType c, int r, int gr, int b) {
    return c.Red == r && c.Green == gr && c.Blue == b;
}

static void check_color(const char *dir) {
    enum { K = 2, F = 3, CH = 3, H = 5, W = 4, SC = 2 };
    static float v[K][F][CH][H][W];
    for (int k = 0; k < K; k++)
        for (int f = 0; f < F; f++)
            for (int ch = 0; ch < CH; ch++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++)
                        v[k][f][ch][y][x] = -1; /* black */
    /* clip 0 frame 1: pixel (1, 2) red; clip 1 frame 2: pixel (3, 4) white, (0, 0) = 0.2 grey-ish */
    v[0][1][0][2][1] = 1;
    for (int ch = 0; ch < 3; ch++)
        v[1][2][ch][4][3] = 1;
    v[1][2][0][0][0] = 0.2f, v[1][2][1][0][0] = -0.6f, v[1][2][2][0][0] = 5; /* clamped */
    char path[512];
    snprintf(path, sizeof path, "%s/clips.gif", dir);
    dt_gif_clips cl = {.data = &v[0][0][0][0][0], .K = K, .frames = F, .channels = CH,
                       .height = H, .width = W};
    DT_CHECK_OK(dt_gif_write(path, &cl, SC, 12));
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    DT_CHECK(g != NULL, "cannot open %s: %s", path, GifErrorString(err));
    if (!g)
        return;
    DT_CHECK(DGifSlurp(g) == GIF_OK, "DGifSlurp: %s", GifErrorString(g->Error));
    DT_CHECK(g->ImageCount == F, "%d frames, want %d", g->ImageCount, F);
    int want_w = K * (W * SC + 1) - 1, want_h = H * SC;
    DT_CHECK(g->SWidth == want_w && g->SHeight == want_h, "size %d x %d, want %d x %d",
             g->SWidth, g->SHeight, want_w, want_h);
    if (g->ImageCount == F && g->SWidth == want_w) {
        /* clip 0 frame 1 pixel (1, 2) -> screen (2..3, 4..5) red */
        for (int a = 0; a < SC; a++)
            DT_CHECK(rgb_is(pixel(g, 1, 2 + a, 4 + a), 255, 0, 0), "red pixel");
        DT_CHECK(rgb_is(pixel(g, 0, 2, 4), 0, 0, 0), "frame 0 black there");
        /* clip 1 starts at x = W*SC + 1 = 9; its pixel (3, 4) -> (15..16, 8..9) white */
        DT_CHECK(rgb_is(pixel(g, 2, 9 + 3 * SC, 4 * SC), 255, 255, 255), "white pixel");
        DT_CHECK(rgb_is(pixel(g, 2, 9 + 3 * SC + 1, 4 * SC + 1), 255, 255, 255), "white pixel");
        /* (0.2, -0.6, 5) -> levels round(0.6*5)=3, round(0.2*5)=1, 5 -> (153, 51, 255) */
        DT_CHECK(rgb_is(pixel(g, 2, 9, 0), 153, 51, 255), "quantised colour (%d %d %d)",
                 pixel(g, 2, 9, 0).Red, pixel(g, 2, 9, 0).Green, pixel(g, 2, 9, 0).Blue);
        DT_CHECK(rgb_is(pixel(g, 2, 8, 0), 0, 0, 0), "the gap column is black");
        GraphicsControlBlock gcb;
        DT_CHECK(DGifSavedExtensionToGCB(g, 1, &gcb) == GIF_OK && gcb.DelayTime == 12,
                 "frame delay");
        bool loop = false;
        const SavedImage *im = &g->SavedImages[0];
        for (int i = 0; i < im->ExtensionBlockCount; i++)
            loop |= im->ExtensionBlocks[i].Function == APPLICATION_EXT_FUNC_CODE &&
                    im->ExtensionBlocks[i].ByteCount == 11 &&
                    !memcmp(im->ExtensionBlocks[i].Bytes, "NETSCAPE2.0", 11);
        DT_CHECK(loop, "no NETSCAPE2.0 loop block");
    }
    DGifCloseFile(g, &err);
}

static void check_grey(const char *dir) {
    float v[2][3][3] = {{{-1, 0, 1}, {0.5f, -0.5f, 1}, {-1, -1, -1}},
                        {{1, 1, 1}, {-1, -1, -1}, {0, 0, 0}}}; /* 2 frames of 3 x 3 */
    char path[512];
    snprintf(path, sizeof path, "%s/grey.gif", dir);
    dt_gif_clips cl = {.data = &v[0][0][0], .K = 1, .frames = 2, .channels = 1, .height = 3,
                       .width = 3};
    DT_CHECK_OK(dt_gif_write(path, &cl, 1, 10));
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    if (!g || DGifSlurp(g) != GIF_OK) {
        DT_CHECK(false, "cannot read %s back", path);
        return;
    }
    DT_CHECK(g->ImageCount == 2 && g->SWidth == 3 && g->SHeight == 3, "grey: %d frames %dx%d",
             g->ImageCount, g->SWidth, g->SHeight);
    DT_CHECK(rgb_is(pixel(g, 0, 0, 0), 0, 0, 0) && rgb_is(pixel(g, 0, 2, 0), 255, 255, 255) &&
                 rgb_is(pixel(g, 0, 1, 0), 128, 128, 128) &&
                 rgb_is(pixel(g, 0, 0, 1), 191, 191, 191) &&
                 rgb_is(pixel(g, 1, 2, 0), 255, 255, 255),
             "grey levels");
    DGifCloseFile(g, &err);
}

static void check_errors(const char *dir) {
    float v[4] = {0};
    dt_gif_clips cl = {.data = v, .K = 1, .frames = 1, .channels = 1, .height = 2, .width = 2};
    dt_status st = dt_gif_write("/nonexistent-dir/x.gif", &cl, 1, 10);
    DT_CHECK(st == DT_ERR_IO && strstr(dt_err_msg(), "/nonexistent-dir/x.gif"), "bad path: %s",
             dt_err_msg());
    DT_CHECK(access("/nonexistent-dir/x.gif", F_OK) != 0, "a file appeared");
    cl.channels = 2;
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gif", dir);
    st = dt_gif_write(path, &cl, 1, 10);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), "channels = 2"), "channels: %s",
             dt_err_msg());
    DT_CHECK(access(path, F_OK) != 0, "a refused GIF was written");
    cl.channels = 1;
    DT_CHECK(dt_gif_write(path, &cl, 0, 10) == DT_ERR_ARG, "scale 0 accepted");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    char dir[] = "/tmp/dtrain-gif-XXXXXX";
    DT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    check_color(dir);
    check_grey(dir);
    check_errors(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    DT_CHECK(system(cmd) == 0, "cleanup");
    return DT_TEST_END();
}
