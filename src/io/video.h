/* Clips cut from a video file, decoded with Debian's FFmpeg libraries (any container and
 * codec they read: mp4/H.264, webm/VP9, mkv, animated gif, ...).
 *
 * The file's first video stream is sampled at `fps` frames a second (frame k of the output
 * is the frame on screen at k / fps seconds after the first), each sampled frame is scaled
 * so that it covers height x width and cut to that size about its centre, and every
 * `frames` sampled frames make one clip, back to back, [frames, height, width, 3] RGB bytes.
 * What is left over at the end (fewer than `frames`) is dropped.
 */
#ifndef DT_IO_VIDEO_H
#define DT_IO_VIDEO_H

#include <stdint.h>

#include "core/status.h"

typedef struct dt_video_spec {
    int frames, height, width;
    double fps;
    int max_clips; /* at most this many clips from the file (0: all) */
} dt_video_spec;

/* Called with each clip and where in the file it starts. */
typedef dt_status (*dt_video_clip_fn)(void *ctx, const uint8_t *pixels, int64_t start_ms);

typedef struct dt_video_counts {
    int clips;       /* handed over */
    int64_t decoded; /* frames decoded */
} dt_video_counts;

/* Decodes `path` and hands its clips to fn. Any fault of the file (not a video, no video
 * stream, a codec FFmpeg lacks, a packet it cannot decode, a truncated file) is DT_ERR_FORMAT
 * naming the file and FFmpeg's reason; clips already handed over stay handed over, so a
 * caller that wants all or nothing collects them first. */
dt_status dt_video_clips(const char *path, const dt_video_spec *spec, dt_video_clip_fn fn,
                         void *ctx, dt_video_counts *counts);

/* What a file holds, from its header: the first video stream's frame size (pixels; the sample
 * aspect ratio applied to the width) and its length in seconds (0: not recorded). DT_ERR_FORMAT
 * as dt_video_clips for a file FFmpeg does not read or without a video stream. */
typedef struct dt_video_info {
    int width, height;
    double seconds;
} dt_video_info;
dt_status dt_video_probe(const char *path, dt_video_info *out);

#endif
