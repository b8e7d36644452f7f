/* io/clips: pixel shards written and read back across several shards (values, layout,
 * captions), latent shards in F32, BF16 and F16 read into a DiT's layout, and one error per
 * lie a folder can tell. The expected values are computed here from the index of each
 * element, not by the reader's own code. Works in a mkdtemp directory it removes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "harness.h"
#include "io/clips.h"
#include "io/safetensors.h"

static char dir[] = "/tmp/dt_clips_XXXXXX";

enum { T = 3, H = 4, W = 5, N = 7 };

/* the byte of clip n, frame t, row y, column x, channel c */
static uint8_t pixel(int n, int t, int y, int x, int c) {
    return (uint8_t)(n * 37 + t * 11 + y * 7 + x * 3 + c * 101);
}

static void caption_of(int n, char *buf, size_t cap) {
    if (n == 2)
        buf[0] = 0; /* a clip without caption */
    else
        snprintf(buf, cap, "clip %d: a %s moving", n, n % 2 ? "red disc" : "blue square");
}

static void test_pixels(void) {
    char out[600];
    snprintf(out, sizeof out, "%s/px", dir);
    dt_clip_shape shape = {.frames = T, .channels = 3, .height = H, .width = W};
    dt_clips_writer *w = NULL;
    /* 3 clips a shard: shards of 3, 3 and 1 */
    DT_CHECK_OK(dt_clips_writer_open(out, shape, 7.5, 3 * T * H * W * 3, &w));
    uint8_t clip[T * H * W * 3];
    for (int n = 0; n < N; n++) {
        for (int t = 0; t < T; t++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int c = 0; c < 3; c++)
                        clip[((t * H + y) * W + x) * 3 + c] = pixel(n, t, y, x, c);
        char cap[64];
        caption_of(n, cap, sizeof cap);
        DT_CHECK_OK(dt_clips_writer_add(w, clip, cap, "dir/video.mp4", n * 400));
    }
    int64_t total = 0;
    DT_CHECK_OK(dt_clips_writer_finish(w, &total));
    dt_clips_writer_free(w);
    DT_CHECK(total == N, "%lld clips written", (long long)total);
    char p[700];
    snprintf(p, sizeof p, "%s/clips-00002.safetensors", out);
    DT_CHECK(access(p, F_OK) == 0, "the third shard %s is missing", p);

    dt_clips *c = NULL;
    DT_CHECK_OK(dt_clips_open(out, DT_CLIPS_PIXELS, &c));
    if (!c)
        return;
    dt_clip_shape got = dt_clips_shape(c);
    DT_CHECK(dt_clips_count(c) == N && got.frames == T && got.channels == 3 && got.height == H &&
                 got.width == W && dt_clips_fps(c) == 7.5,
             "folder: %lld clips of %dx%dx%dx%d at %g fps", (long long)dt_clips_count(c),
             got.frames, got.channels, got.height, got.width, dt_clips_fps(c));
    float x[T * 3 * H * W];
    int wrong = 0;
    for (int n = N - 1; n >= 0; n--) { /* backwards: shards in any order */
        DT_CHECK_OK(dt_clips_read(c, n, x));
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < 3; ch++)
                for (int y = 0; y < H; y++)
                    for (int xx = 0; xx < W; xx++)
                        wrong += x[((t * 3 + ch) * H + y) * W + xx] !=
                                 pixel(n, t, y, xx, ch) / 127.5f - 1.0f;
        char want[64], cap[64];
        caption_of(n, want, sizeof want);
        DT_CHECK_OK(dt_clips_caption(c, n, cap, sizeof cap));
        DT_CHECK(!strcmp(cap, want), "caption %d: \"%s\", want \"%s\"", n, cap, want);
    }
    DT_CHECK(wrong == 0, "%d pixel values differ", wrong);
    char small[6];
    DT_CHECK_OK(dt_clips_caption(c, 1, small, sizeof small));
    DT_CHECK(!strcmp(small, "clip "), "a caption cut to the buffer: \"%s\"", small);
    DT_CHECK(dt_clips_read(c, N, x) == DT_ERR_ARG, "clip past the end read");
    dt_clips_close(c);

    /* one shard of the folder alone */
    snprintf(p, sizeof p, "%s/clips-00001.safetensors", out);
    DT_CHECK_OK(dt_clips_open(p, DT_CLIPS_PIXELS, &c));
    DT_CHECK(c && dt_clips_count(c) == 3, "one shard holds 3 clips");
    if (c) {
        DT_CHECK_OK(dt_clips_read(c, 0, x));
        DT_CHECK(x[0] == pixel(3, 0, 0, 0, 0) / 127.5f - 1.0f, "the shard's first clip is 3");
    }
    dt_clips_close(c);
}

/* latents [n, C, T, H, W] of one dtype into a folder of its own */
enum { C = 4 };
static float latent(int n, int c, int t, int y, int x) {
    return (float)(n * 1000 + c * 100 + t * 10 + y) + x * 0.125f - 2000.0f;
}

static void write_latents(const char *folder, dt_st_dtype dtype, bool with_text) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, folder);
    DT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
    snprintf(p, sizeof p, "%s/%s/part-0.safetensors", dir, folder);
    static float f[N * C * T * H * W];
    static uint16_t h[N * C * T * H * W];
    int k = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++, k++) {
                        f[k] = latent(n, c, t, y, x);
                        h[k] = dtype == DT_ST_BF16 ? dt_bf16_from_f32(f[k]) : dt_f16_from_f32(f[k]);
                    }
    int64_t shape[5] = {N, C, T, H, W}, tshape[3] = {N, 2, 3}, lshape[1] = {N};
    float text[N * 2 * 3];
    int32_t len[N];
    for (int i = 0; i < N * 2 * 3; i++)
        text[i] = (float)i * 0.25f - 1.0f;
    for (int n = 0; n < N; n++)
        len[n] = n % 3; /* 0, 1 or both of the 2 tokens */
    dt_st_writer *w = NULL;
    DT_CHECK_OK(dt_st_writer_init(&w));
    DT_CHECK_OK(dt_st_writer_add(w, "latents", dtype, 5, shape,
                                 dtype == DT_ST_F32 ? (void *)f : (void *)h));
    if (with_text) {
        DT_CHECK_OK(dt_st_writer_add(w, "text", DT_ST_F32, 3, tshape, text));
        DT_CHECK_OK(dt_st_writer_add(w, "text_len", DT_ST_I32, 1, lshape, len));
    }
    DT_CHECK_OK(dt_st_writer_commit(w, p));
    dt_st_writer_free(w);
}

static void check_latents(const char *folder, dt_st_dtype dtype) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, folder);
    dt_clips *c = NULL;
    DT_CHECK_OK(dt_clips_open(p, DT_CLIPS_LATENTS, &c));
    if (!c)
        return;
    dt_clip_shape s = dt_clips_shape(c);
    DT_CHECK(dt_clips_count(c) == N && s.frames == T && s.channels == C && s.height == H &&
                 s.width == W,
             "%s: shape", folder);
    float x[T * C * H * W];
    int wrong = 0;
    for (int n = 0; n < N; n++) {
        DT_CHECK_OK(dt_clips_read(c, n, x));
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++)
                for (int y = 0; y < H; y++)
                    for (int xx = 0; xx < W; xx++) {
                        float v = latent(n, ch, t, y, xx);
                        v = dtype == DT_ST_F32    ? v
                            : dtype == DT_ST_BF16 ? dt_bf16_to_f32(dt_bf16_from_f32(v))
                                                  : dt_f16_to_f32(dt_f16_from_f32(v));
                        wrong += x[((t * C + ch) * H + y) * W + xx] != v;
                    }
    }
    DT_CHECK(wrong == 0, "%s: %d latent values differ", folder, wrong);
    char cap[8];
    DT_CHECK_OK(dt_clips_caption(c, 0, cap, sizeof cap));
    DT_CHECK(cap[0] == 0, "latents have no caption");
    dt_clip_text ts = dt_clips_text_shape(c);
    float text[2 * 3];
    int n_text = -1;
    if (dtype != DT_ST_F32) { /* written without text */
        DT_CHECK(ts.tokens == 0 && ts.dim == 0, "%s: text %d x %d", folder, ts.tokens, ts.dim);
        DT_CHECK(dt_clips_text(c, 0, text, &n_text) == DT_ERR_ARG, "%s: text read", folder);
    } else {
        DT_CHECK(ts.tokens == 2 && ts.dim == 3, "%s: text %d x %d", folder, ts.tokens, ts.dim);
        for (int n = 0; n < N; n++) {
            DT_CHECK_OK(dt_clips_text(c, n, text, &n_text));
            DT_CHECK(n_text == n % 3, "%s: clip %d has %d text tokens", folder, n, n_text);
            for (int i = 0; i < 6; i++)
                DT_CHECK(text[i] == (float)(n * 6 + i) * 0.25f - 1.0f, "%s: clip %d text %d",
                         folder, n, i);
        }
    }
    dt_clips_close(c);
}

/* opening `path` as `kind` fails with `want`, the message holding `what` */
static void expect_fail(int line, const char *path, dt_clips_kind kind, dt_status want,
                        const char *what) {
    dt_clips *c = (dt_clips *)&c;
    dt_status st = dt_clips_open(path, kind, &c);
    dt_test_check(st == want && c == NULL && strstr(dt_err_msg(), what), __FILE__, line,
                  "%s: %s (%s), want %s and \"%s\"", path, dt_status_str(st), dt_err_msg(),
                  dt_status_str(want), what);
    if (st == DT_OK)
        dt_clips_close(c);
}

static void test_errors(void) {
    char p[700], q[700];
    snprintf(p, sizeof p, "%s/absent", dir);
    expect_fail(__LINE__, p, DT_CLIPS_PIXELS, DT_ERR_IO, "absent");
    snprintf(p, sizeof p, "%s/empty", dir);
    DT_CHECK(mkdir(p, 0755) == 0, "mkdir");
    expect_fail(__LINE__, p, DT_CLIPS_PIXELS, DT_ERR_IO, "no *.safetensors");
    /* latents read as pixels, pixels as latents */
    snprintf(p, sizeof p, "%s/f32", dir);
    expect_fail(__LINE__, p, DT_CLIPS_PIXELS, DT_ERR_FORMAT, "not a pixel clip shard");
    snprintf(p, sizeof p, "%s/px", dir);
    expect_fail(__LINE__, p, DT_CLIPS_LATENTS, DT_ERR_FORMAT, "no \"latents\"");
    /* a folder whose shards disagree: a pixel shard of another size beside the others */
    snprintf(q, sizeof q, "%s/px/other", dir);
    dt_clips_writer *w = NULL;
    dt_clip_shape other = {.frames = T, .channels = 3, .height = H + 1, .width = W};
    DT_CHECK_OK(dt_clips_writer_open(q, other, 7.5, 1 << 20, &w));
    static uint8_t clip[T * (H + 1) * W * 3];
    DT_CHECK_OK(dt_clips_writer_add(w, clip, "", "x", 0));
    DT_CHECK_OK(dt_clips_writer_finish(w, NULL));
    dt_clips_writer_free(w);
    snprintf(q, sizeof q,
             "mv %s/px/other/clips-00000.safetensors %s/px/clips-00009.safetensors "
             "&& rmdir %s/px/other",
             dir, dir, dir);
    DT_CHECK(system(q) == 0, "%s", q);
    expect_fail(__LINE__, p, DT_CLIPS_PIXELS, DT_ERR_FORMAT, "one shape");
    snprintf(q, sizeof q, "%s/px/clips-00009.safetensors", dir);
    unlink(q);
    /* a truncated shard is caught from its header */
    snprintf(q, sizeof q, "%s/px/clips-00002.safetensors", dir);
    DT_CHECK(truncate(q, 300) == 0, "truncate");
    expect_fail(__LINE__, p, DT_CLIPS_PIXELS, DT_ERR_FORMAT, "clips-00002");
    /* caption ends that run backwards */
    snprintf(q, sizeof q, "%s/backwards.safetensors", dir);
    int64_t px[5] = {2, 1, 1, 1, 3}, two[1] = {2}, bytes[1] = {4}, ends[2] = {3, 1};
    uint8_t pix[6] = {0}, text[4] = "abcd";
    dt_st_writer *sw = NULL;
    DT_CHECK_OK(dt_st_writer_init(&sw));
    DT_CHECK_OK(dt_st_writer_add(sw, "pixels", DT_ST_U8, 5, px, pix));
    DT_CHECK_OK(dt_st_writer_add(sw, "caption", DT_ST_U8, 1, bytes, text));
    DT_CHECK_OK(dt_st_writer_add(sw, "caption_end", DT_ST_I64, 1, two, ends));
    DT_CHECK_OK(dt_st_writer_add(sw, "source", DT_ST_U8, 1, bytes, text));
    DT_CHECK_OK(dt_st_writer_add(sw, "source_end", DT_ST_I64, 1, two, ends));
    DT_CHECK_OK(dt_st_writer_add(sw, "start_ms", DT_ST_I64, 1, two, ends));
    DT_CHECK_OK(dt_st_writer_set_metadata(sw, "format", "dtrain-clips"));
    DT_CHECK_OK(dt_st_writer_set_metadata(sw, "fps", "8"));
    DT_CHECK_OK(dt_st_writer_commit(sw, q));
    dt_st_writer_free(sw);
    expect_fail(__LINE__, q, DT_CLIPS_PIXELS, DT_ERR_FORMAT, "runs backwards");
    unlink(q);
    /* text lengths without the text */
    snprintf(q, sizeof q, "%s/nolen.safetensors", dir);
    int64_t lat[5] = {2, 1, 1, 1, 1};
    float v[2] = {0};
    int32_t len[2] = {1, 1};
    DT_CHECK_OK(dt_st_writer_init(&sw));
    DT_CHECK_OK(dt_st_writer_add(sw, "latents", DT_ST_F32, 5, lat, v));
    DT_CHECK_OK(dt_st_writer_add(sw, "text_len", DT_ST_I32, 1, two, len));
    DT_CHECK_OK(dt_st_writer_commit(sw, q));
    dt_st_writer_free(sw);
    expect_fail(__LINE__, q, DT_CLIPS_LATENTS, DT_ERR_FORMAT, "\"text_len\"");
    unlink(q);
    /* a text length past the text's tokens */
    snprintf(q, sizeof q, "%s/longlen.safetensors", dir);
    int64_t tsh[3] = {2, 1, 1};
    int32_t over[2] = {1, 2};
    DT_CHECK_OK(dt_st_writer_init(&sw));
    DT_CHECK_OK(dt_st_writer_add(sw, "latents", DT_ST_F32, 5, lat, v));
    DT_CHECK_OK(dt_st_writer_add(sw, "text", DT_ST_F32, 3, tsh, v));
    DT_CHECK_OK(dt_st_writer_add(sw, "text_len", DT_ST_I32, 1, two, over));
    DT_CHECK_OK(dt_st_writer_commit(sw, q));
    dt_st_writer_free(sw);
    expect_fail(__LINE__, q, DT_CLIPS_LATENTS, DT_ERR_FORMAT, "entry 1 (2) is not in 0..1");
    unlink(q);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    DT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    test_pixels();
    write_latents("f32", DT_ST_F32, true);
    write_latents("bf16", DT_ST_BF16, false);
    write_latents("f16", DT_ST_F16, false);
    check_latents("f32", DT_ST_F32);
    check_latents("bf16", DT_ST_BF16);
    check_latents("f16", DT_ST_F16);
    test_errors();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    DT_CHECK(system(cmd) == 0, "%s", cmd);
    return DT_TEST_END();
}
