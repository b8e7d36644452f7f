/* Video files to clips with libavformat (demuxing), libavcodec (decoding, one thread) and
 * libswscale (scaling to RGB). See video.h.
 *
 * Sampling walks the decoded frames in presentation order: each frame is on screen from its
 * time until the next frame's, so output frame k (at t0 + k / fps) is the frame that was on
 * screen then. A frame is converted only when it is sampled, and only the frame on screen is
 * kept. The decoder runs with AV_EF_EXPLODE, so damage it would otherwise paper over is an
 * error: a training set is better without a clip of smeared blocks.
 */
#include "io/video.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const char *path;
    const dt_video_spec *spec;
    dt_video_clip_fn fn;
    void *ctx;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVRational tb;      /* the stream's time base */
    double nominal_dur; /* seconds a frame lasts by the stream's rate (0: unknown) */
    AVFrame *shown;     /* the frame on screen (decoded, not converted) */
    double shown_t, t0; /* its time; the first frame's */
    int64_t decoded, k; /* frames decoded; the next output frame */
    struct SwsContext *sws;
    int sw, sh;      /* the scaled frame before the centre cut */
    uint8_t *scaled; /* [sh, sw, 3] */
    uint8_t *clip;   /* [frames, height, width, 3] */
    int filled, n_clips;
    bool full; /* max_clips reached */
} reader;

static dt_status av_fail(const reader *r, const char *what, int code) {
    char msg[AV_ERROR_MAX_STRING_SIZE] = "";
    av_strerror(code, msg, sizeof msg);
    return dt_err_set(DT_ERR_FORMAT, "%s: %s: %s", r->path, what, msg);
}

/* scaled so that the frame covers the clip's height x width, keeping its aspect */
static dt_status prepare_scaler(reader *r, const AVFrame *f) {
    const dt_video_spec *s = r->spec;
    double scale = fmax((double)s->width / f->width, (double)s->height / f->height);
    int sw = (int)lround(f->width * scale), sh = (int)lround(f->height * scale);
    sw = sw < s->width ? s->width : sw;
    sh = sh < s->height ? s->height : sh;
    int flags = scale < 1 ? SWS_AREA : SWS_BICUBIC;
    r->sws = sws_getCachedContext(r->sws, f->width, f->height, f->format, sw, sh, AV_PIX_FMT_RGB24,
                                  flags, NULL, NULL, NULL);
    if (!r->sws)
        return dt_err_set(DT_ERR_FORMAT, "%s: cannot convert its %dx%d %s frames to RGB", r->path,
                          f->width, f->height,
                          av_get_pix_fmt_name(f->format) ? av_get_pix_fmt_name(f->format) : "?");
    if (sw != r->sw || sh != r->sh) {
        uint8_t *p = realloc(r->scaled, (size_t)sw * sh * 3);
        if (!p)
            return dt_err_set(DT_ERR_OOM, "%s: out of memory for a %dx%d frame", r->path, sw, sh);
        r->scaled = p, r->sw = sw, r->sh = sh;
    }
    return DT_OK;
}

/* the frame on screen becomes the clip's next frame; a full clip goes to the caller */
static dt_status take_shown(reader *r) {
    const dt_video_spec *s = r->spec;
    const AVFrame *f = r->shown;
    DT_TRY(prepare_scaler(r, f));
    uint8_t *dst[4] = {r->scaled};
    int stride[4] = {3 * r->sw};
    sws_scale(r->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, stride);
    int x0 = (r->sw - s->width) / 2, y0 = (r->sh - s->height) / 2;
    size_t row = (size_t)s->width * 3;
    uint8_t *out = r->clip + (size_t)r->filled * s->height * row;
    for (int y = 0; y < s->height; y++)
        memcpy(out + y * row, r->scaled + ((size_t)(y0 + y) * r->sw + x0) * 3, row);
    if (++r->filled < s->frames)
        return DT_OK;
    r->filled = 0;
    int64_t start_ms = llround((double)(r->k + 1 - s->frames) * 1000.0 / s->fps);
    DT_TRY(r->fn(r->ctx, r->clip, start_ms));
    r->n_clips++;
    r->full = s->max_clips > 0 && r->n_clips >= s->max_clips;
    return DT_OK;
}

/* output frames whose time falls before `until` show the frame on screen */
static dt_status sample_until(reader *r, double until) {
    while (!r->full && r->t0 + (double)r->k / r->spec->fps < until - 1e-6) {
        DT_TRY(take_shown(r));
        r->k++;
    }
    return DT_OK;
}

static double frame_time(reader *r, const AVFrame *f) {
    int64_t ts = f->best_effort_timestamp;
    if (ts != AV_NOPTS_VALUE)
        return (double)ts * av_q2d(r->tb);
    return r->decoded ? r->shown_t + (r->nominal_dur > 0 ? r->nominal_dur : 1.0 / 25) : 0;
}

static dt_status on_frame(reader *r, AVFrame *f) {
    double t = frame_time(r, f);
    if (r->decoded++ == 0)
        r->t0 = t;
    else if (t > r->shown_t) /* a frame at the same time replaces the one on screen */
        DT_TRY(sample_until(r, t));
    av_frame_unref(r->shown);
    av_frame_move_ref(r->shown, f);
    r->shown_t = t;
    return DT_OK;
}

/* every frame the decoder has ready */
static dt_status drain(reader *r, AVFrame *f) {
    for (;;) {
        int e = avcodec_receive_frame(r->dec, f);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF)
            return DT_OK;
        if (e < 0)
            return av_fail(r, "decoding failed", e);
        DT_TRY(on_frame(r, f));
        if (r->full)
            return DT_OK;
    }
}

static dt_status open_decoder(reader *r, int *stream) {
    int e = avformat_open_input(&r->fmt, r->path, NULL, NULL);
    if (e < 0)
        return av_fail(r, "not a video FFmpeg reads", e);
    if ((e = avformat_find_stream_info(r->fmt, NULL)) < 0)
        return av_fail(r, "no stream information", e);
    const AVCodec *codec = NULL;
    *stream = av_find_best_stream(r->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (*stream < 0)
        return av_fail(r,
                       *stream == AVERROR_DECODER_NOT_FOUND ? "no decoder for its video"
                                                            : "no video stream",
                       *stream);
    AVStream *st = r->fmt->streams[*stream];
    if (!(r->dec = avcodec_alloc_context3(codec)))
        return dt_err_set(DT_ERR_OOM, "%s: out of memory for a decoder", r->path);
    if ((e = avcodec_parameters_to_context(r->dec, st->codecpar)) < 0)
        return av_fail(r, "bad codec parameters", e);
    r->dec->thread_count = 1;
    r->dec->err_recognition |= AV_EF_EXPLODE;
    if ((e = avcodec_open2(r->dec, codec, NULL)) < 0)
        return av_fail(r, "cannot open its decoder", e);
    r->tb = st->time_base;
    AVRational rate = st->avg_frame_rate.num ? st->avg_frame_rate : st->r_frame_rate;
    r->nominal_dur = rate.num > 0 && rate.den > 0 ? av_q2d(av_inv_q(rate)) : 0;
    return DT_OK;
}

/* the last frame stays on screen for its own duration (or the stream's frame interval) */
static dt_status finish(reader *r) {
    if (r->decoded == 0 || r->full)
        return DT_OK;
    double dur = r->shown->pkt_duration > 0 ? (double)r->shown->pkt_duration * av_q2d(r->tb)
                                            : r->nominal_dur;
    return sample_until(r, r->shown_t + dur);
}

static dt_status decode_all(reader *r) {
    int stream = -1;
    DT_TRY(open_decoder(r, &stream));
    AVPacket *pkt = av_packet_alloc();
    AVFrame *f = av_frame_alloc();
    r->shown = av_frame_alloc();
    const dt_video_spec *s = r->spec;
    r->clip = malloc((size_t)s->frames * s->height * s->width * 3);
    dt_status st = DT_OK;
    if (!pkt || !f || !r->shown || !r->clip) {
        st = dt_err_set(DT_ERR_OOM, "%s: out of memory for decoding", r->path);
        goto fail;
    }
    int e = 0;
    while (!r->full && (e = av_read_frame(r->fmt, pkt)) >= 0) {
        if (pkt->stream_index == stream) {
            e = avcodec_send_packet(r->dec, pkt);
            if (e < 0 && e != AVERROR(EAGAIN)) {
                av_packet_unref(pkt);
                st = av_fail(r, "decoding failed", e);
                goto fail;
            }
            st = drain(r, f);
        }
        av_packet_unref(pkt);
        DT_TRY_GOTO(st);
    }
    if (!r->full && e != AVERROR_EOF) {
        st = av_fail(r, "reading failed", e);
        goto fail;
    }
    if (!r->full) {
        avcodec_send_packet(r->dec, NULL);
        DT_TRY_GOTO(drain(r, f));
    }
    st = finish(r);
fail:
    av_frame_free(&f);
    av_packet_free(&pkt);
    return st;
}

dt_status dt_video_probe(const char *path, dt_video_info *out) {
    *out = (dt_video_info){0};
    av_log_set_level(AV_LOG_QUIET);
    reader r = {.path = path};
    AVFormatContext *fmt = NULL;
    int e = avformat_open_input(&fmt, path, NULL, NULL);
    dt_status st = e < 0 ? av_fail(&r, "not a video FFmpeg reads", e) : DT_OK;
    if (st == DT_OK && (e = avformat_find_stream_info(fmt, NULL)) < 0)
        st = av_fail(&r, "no stream information", e);
    int k = st == DT_OK ? av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0) : -1;
    if (st == DT_OK && k < 0)
        st = av_fail(&r, "no video stream", k);
    if (st == DT_OK) {
        const AVStream *v = fmt->streams[k];
        AVRational sar = v->codecpar->sample_aspect_ratio;
        double w = v->codecpar->width * (sar.num > 0 && sar.den > 0 ? av_q2d(sar) : 1.0);
        out->width = (int)lround(w);
        out->height = v->codecpar->height;
        if (v->duration > 0 && v->duration != AV_NOPTS_VALUE)
            out->seconds = (double)v->duration * av_q2d(v->time_base);
        else if (fmt->duration > 0 && fmt->duration != AV_NOPTS_VALUE)
            out->seconds = (double)fmt->duration / AV_TIME_BASE;
        if (out->width < 1 || out->height < 1)
            st = dt_err_set(DT_ERR_FORMAT, "%s: its video has no frame size", path);
    }
    avformat_close_input(&fmt);
    return st;
}

dt_status dt_video_clips(const char *path, const dt_video_spec *spec, dt_video_clip_fn fn,
                         void *ctx, dt_video_counts *counts) {
    *counts = (dt_video_counts){0};
    if (spec->frames < 1 || spec->height < 1 || spec->width < 1 || !(spec->fps > 0) ||
        spec->max_clips < 0)
        return dt_err_set(DT_ERR_ARG,
                          "video clips of %d frames of %dx%d at %g fps: every "
                          "size must be >= 1",
                          spec->frames, spec->height, spec->width, spec->fps);
    av_log_set_level(AV_LOG_QUIET); /* its faults reach the caller as statuses */
    reader r = {.path = path, .spec = spec, .fn = fn, .ctx = ctx};
    dt_status st = decode_all(&r);
    *counts = (dt_video_counts){.clips = r.n_clips, .decoded = r.decoded};
    av_frame_free(&r.shown);
    avcodec_free_context(&r.dec);
    avformat_close_input(&r.fmt);
    sws_freeContext(r.sws);
    free(r.scaled);
    free(r.clip);
    return st;
}
