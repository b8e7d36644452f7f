/* The bouncing-shapes video source: its checks, determinism (a clip depends on the seed and its
 * index only), the physics of the tracks (inside the box, constant speed, moving every frame,
 * reflected at the walls), the rendering (pixels only where shapes are, the topmost shape's
 * colour at its centre, the shape kind visible in the pixels), the labels, and the captions
 * (read back against the pixels: the colour at the shape's centre, the way its pixels move
 * from the first frame to the second). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/bounce.h"

static void check_errors(void) {
    dt_bounce_config c = dt_bounce_defaults(8, 3, 16, 24);
    DT_CHECK_OK(dt_bounce_check(&c));
    struct {
        dt_bounce_config c;
        const char *msg;
    } bad[6];
    for (int i = 0; i < 6; i++)
        bad[i].c = c;
    bad[0].c.channels = 2, bad[0].msg = "channels = 2, want 1 or 3";
    bad[1].c.n_shapes = 17, bad[1].msg = "n_shapes = 17, want 1..16";
    bad[2].c.r_max = 8, bad[2].msg = "below half the shorter side 8";
    bad[3].c.speed_max = 100, bad[3].msg = "at most the free space";
    bad[4].c.height = 0, bad[4].msg = "is empty";
    bad[5].c.speed_min = 0, bad[5].msg = "must be positive";
    for (int i = 0; i < 6; i++) {
        dt_status st = dt_bounce_check(&bad[i].c);
        DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), bad[i].msg), "case %d: %s", i,
                 st ? dt_err_msg() : "accepted");
    }
}

static void check_determinism(void) {
    dt_bounce_config c = dt_bounce_defaults(6, 3, 12, 16);
    size_t clip = (size_t)6 * 3 * 12 * 16;
    float *a = malloc(sizeof(float) * clip * 8), *b = malloc(sizeof(float) * clip * 8);
    int32_t la[8], lb[8];
    dt_bounce_batch(&c, 42, 0, 8, a, la);
    dt_bounce_batch(&c, 42, 0, 8, b, lb);
    DT_CHECK(!memcmp(a, b, sizeof(float) * clip * 8) && !memcmp(la, lb, sizeof la),
             "same seed, different clips");
    dt_bounce_batch(&c, 42, 5, 1, b, lb); /* clip 5 alone equals clip 5 of the batch */
    DT_CHECK(!memcmp(a + 5 * clip, b, sizeof(float) * clip) && la[5] == lb[0],
             "clip 5 depends on its batch");
    dt_bounce_batch(&c, 43, 0, 1, b, lb);
    DT_CHECK(memcmp(a, b, sizeof(float) * clip) != 0, "another seed gives the same clip");
    bool in_range = true;
    for (size_t i = 0; i < clip * 8; i++)
        in_range &= a[i] >= -1 && a[i] <= 1;
    DT_CHECK(in_range, "pixel values outside [-1, 1]");
    free(a), free(b);
}

static void check_physics(void) {
    dt_bounce_config c = dt_bounce_defaults(40, 3, 16, 20);
    c.n_shapes = 3;
    int bounces = 0, n_tracks = 0;
    bool ok_box = true, ok_speed = true, ok_move = true, ok_reflect = true;
    for (int64_t idx = 0; idx < 100; idx++) {
        dt_bounce_shape prev[DT_BOUNCE_MAX_SHAPES], cur[DT_BOUNCE_MAX_SHAPES];
        dt_bounce_track(&c, 7, idx, 0, prev);
        for (int f = 1; f < c.frames; f++) {
            dt_bounce_track(&c, 7, idx, f, cur);
            for (int s = 0; s < c.n_shapes; s++) {
                const dt_bounce_shape *p = &prev[s], *q = &cur[s];
                float r = q->r;
                ok_box &= q->x >= r - 1e-4f && q->x <= c.width - r + 1e-4f &&
                          q->y >= r - 1e-4f && q->y <= c.height - r + 1e-4f;
                float sp = hypotf(q->vx, q->vy), sp0 = hypotf(p->vx, p->vy);
                ok_speed &= fabsf(sp - sp0) < 1e-5f && sp >= c.speed_min - 1e-5f &&
                            sp <= c.speed_max + 1e-5f;
                ok_move &= hypotf(q->x - p->x, q->y - p->y) > 1e-3f;
                /* a flipped velocity component: the shape met that wall this frame, and the
                 * reflected position is where the straight path, folded at the wall, lands */
                if (q->vx != p->vx) {
                    bounces++;
                    float wall = q->vx < 0 ? c.width - r : r;
                    float straight = p->x + p->vx;
                    ok_reflect &= q->vx == -p->vx && fabsf(q->x - (2 * wall - straight)) < 1e-4f;
                }
                if (q->vy != p->vy) {
                    bounces++;
                    float wall = q->vy < 0 ? c.height - r : r;
                    ok_reflect &= q->vy == -p->vy &&
                                  fabsf(q->y - (2 * wall - (p->y + p->vy))) < 1e-4f;
                }
                if (q->vx == p->vx)
                    ok_reflect &= fabsf(q->x - (p->x + p->vx)) < 1e-4f;
            }
            memcpy(prev, cur, sizeof cur);
        }
        n_tracks += c.n_shapes;
    }
    DT_CHECK(ok_box, "a shape left the box");
    DT_CHECK(ok_speed, "a shape changed speed or has one outside the range");
    DT_CHECK(ok_move, "a shape stood still for a frame");
    DT_CHECK(ok_reflect, "a bounce is not a reflection at the wall");
    DT_CHECK(bounces > n_tracks, "only %d bounces over %d tracks of 40 frames", bounces,
             n_tracks);
}

static void check_render(void) {
    dt_bounce_config c = dt_bounce_defaults(10, 3, 20, 20);
    size_t plane = 20 * 20, clip = 10 * 3 * plane;
    float *v = malloc(sizeof(float) * clip);
    int kinds[DT_BOUNCE_KIND_COUNT] = {0};
    bool only_shapes = true, top_color = true, some = true;
    for (int64_t idx = 0; idx < 60; idx++) {
        int32_t label;
        dt_bounce_batch(&c, 3, idx, 1, v, &label);
        kinds[label]++;
        for (int f = 0; f < c.frames; f++) {
            dt_bounce_shape sh[DT_BOUNCE_MAX_SHAPES];
            dt_bounce_track(&c, 3, idx, f, sh);
            const float *fr = v + f * 3 * plane;
            int lit = 0;
            for (int y = 0; y < 20; y++)
                for (int x = 0; x < 20; x++) {
                    bool bg = fr[y * 20 + x] == -1 && fr[plane + y * 20 + x] == -1 &&
                              fr[2 * plane + y * 20 + x] == -1;
                    if (bg)
                        continue;
                    lit++;
                    bool near = false;
                    for (int s = 0; s < c.n_shapes; s++)
                        near |= fabsf(x + 0.5f - sh[s].x) <= sh[s].r &&
                                fabsf(y + 0.5f - sh[s].y) <= sh[s].r;
                    only_shapes &= near;
                }
            some &= lit > 0;
            const dt_bounce_shape *t = &sh[c.n_shapes - 1];
            int px = (int)t->x, py = (int)t->y;
            for (int ch = 0; ch < 3; ch++)
                top_color &= fr[ch * plane + py * 20 + px] == t->color[ch];
        }
    }
    DT_CHECK(only_shapes, "a lit pixel outside every shape's square");
    DT_CHECK(top_color, "the topmost shape's centre pixel is not its colour");
    DT_CHECK(some, "a frame with no shape");
    for (int k = 0; k < DT_BOUNCE_KIND_COUNT; k++)
        DT_CHECK(kinds[k] > 5, "label %d in only %d of 60 clips", k, kinds[k]);

    /* the kind shows in the pixels: along the diagonal a square reaches r, a disc r / sqrt 2
     * and a diamond r / 2; with r = 8, a pixel 7 diagonal steps from the centre is inside a
     * square only, one 5 steps inside a square and a disc (pixel centres are within 0.5) */
    dt_bounce_config one = c;
    one.n_shapes = 1;
    one.channels = 1;
    one.r_min = one.r_max = 8;
    DT_CHECK_OK(dt_bounce_check(&one));
    float *g = malloc(sizeof(float) * plane * 10);
    int seen[DT_BOUNCE_KIND_COUNT] = {0};
    bool kind_ok = true;
    for (int64_t idx = 0; idx < 30; idx++) {
        int32_t label;
        dt_bounce_batch(&one, 5, idx, 1, g, &label);
        dt_bounce_shape s;
        dt_bounce_track(&one, 5, idx, 0, &s);
        int cx = (int)floorf(s.x), cy = (int)floorf(s.y);
        bool far = g[(cy + 7) * 20 + cx + 7] != -1, mid = g[(cy + 5) * 20 + cx + 5] != -1;
        kind_ok &= far == (label == DT_BOUNCE_SQUARE) && mid == (label != DT_BOUNCE_DIAMOND);
        seen[label]++;
    }
    DT_CHECK(kind_ok, "the rendered shape does not match its label's kind");
    DT_CHECK(seen[0] && seen[1] && seen[2], "not every kind rendered");
    free(g), free(v);
}

/* The caption of one-shape clips against what their pixels show: "a COLOUR KIND moving WAY",
 * the colour's RGB at the shape's centre of mass in frame 0, the centre moving WAY (by its
 * larger component) to frame 1 where no wall was hit. */
static void check_captions(void) {
    static const struct {
        const char *name;
        float rgb[3];
    } colours[] = {{"red", {1, -1, -1}},   {"green", {-1, 1, -1}},  {"blue", {-0.2f, -0.2f, 1}},
                   {"yellow", {1, 1, -1}}, {"magenta", {1, -1, 1}}, {"cyan", {-1, 1, 1}},
                   {"white", {1, 1, 1}},   {"orange", {1, 0, -1}}};
    DT_CHECK(dt_bounce_n_colors() == 8, "%d colours", dt_bounce_n_colors());
    dt_bounce_config c = dt_bounce_defaults(2, 3, 32, 32);
    c.n_shapes = 1;
    int checked = 0;
    for (int64_t i = 0; i < 200; i++) {
        char cap[128], colour[16], kind[16], way[16];
        int n = dt_bounce_caption(&c, 9, i, cap, sizeof cap);
        DT_CHECK(n == (int)strlen(cap) &&
                     sscanf(cap, "a %15s %15s moving %15s", colour, kind, way) == 3,
                 "clip %lld: caption \"%s\"", (long long)i, cap);
        DT_CHECK(!strcmp(kind, DT_BOUNCE_KIND_NAMES[dt_bounce_label(9, i)]), "clip %lld: %s",
                 (long long)i, cap);
        float px[2 * 3 * 32 * 32];
        dt_bounce_batch(&c, 9, i, 1, px, NULL);
        double m[2][3] = {{0}}; /* per frame: pixels, sum of x, sum of y */
        int at = -1;
        for (int f = 0; f < 2; f++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) {
                    const float *p = px + (size_t)f * 3 * 1024 + (size_t)y * 32 + x;
                    if (p[0] == -1 && p[1024] == -1 && p[2048] == -1)
                        continue;
                    m[f][0]++, m[f][1] += x, m[f][2] += y;
                    if (f == 0 && at < 0)
                        at = y * 32 + x;
                }
        if (!m[0][0] || !m[1][0] || at < 0)
            continue;
        int k = 0;
        while (k < 8 && strcmp(colours[k].name, colour))
            k++;
        DT_CHECK(k < 8 && px[at] == colours[k].rgb[0] && px[1024 + at] == colours[k].rgb[1] &&
                     px[2048 + at] == colours[k].rgb[2],
                 "clip %lld: \"%s\" but the pixel is (%g, %g, %g)", (long long)i, cap,
                 (double)px[at], (double)px[1024 + at], (double)px[2048 + at]);
        dt_bounce_shape s0, s1;
        dt_bounce_track(&c, 9, i, 0, &s0);
        dt_bounce_track(&c, 9, i, 1, &s1);
        if (s0.vx != s1.vx || s0.vy != s1.vy)
            continue; /* it bounced off a wall between the frames */
        double dx = m[1][1] / m[1][0] - m[0][1] / m[0][0],
               dy = m[1][2] / m[1][0] - m[0][2] / m[0][0];
        const char *seen =
            fabs(dx) >= fabs(dy) ? (dx < 0 ? "left" : "right") : (dy < 0 ? "up" : "down");
        if (fabs(fabs(dx) - fabs(dy)) < 1.0)
            continue; /* too close to a diagonal for the pixels to say */
        DT_CHECK(!strcmp(way, seen), "clip %lld: \"%s\", the pixels move %s (%.2f, %.2f)",
                 (long long)i, cap, seen, dx, dy);
        checked++;
    }
    DT_CHECK(checked >= 100, "only %d clips' captions were checked", checked);
    c.n_shapes = 2;
    char two[128], cut[12];
    dt_bounce_caption(&c, 9, 3, two, sizeof two);
    DT_CHECK(strstr(two, " and a ") != NULL, "two shapes: \"%s\"", two);
    int n = dt_bounce_caption(&c, 9, 3, cut, sizeof cut);
    DT_CHECK(n == 11 && !strncmp(cut, two, 11), "cut to 11 bytes: \"%s\" (%d)", cut, n);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_errors();
    check_determinism();
    check_physics();
    check_render();
    check_captions();
    return DT_TEST_END();
}
