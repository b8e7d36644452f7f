/* Video clips on disk, for a video DiT: the pixel clips `dtrain prepare --video` writes and
 * the latent clips a VAE wrote (Open-Sora-style preprocessing), both as folders of
 * safetensors shards that any safetensors reader opens (numpy, HuggingFace's library).
 *
 * A pixel shard holds N clips of one shape and frame rate:
 *   pixels       U8  [N, frames, height, width, 3]  RGB, 0..255
 *   caption      U8  [bytes]   captions one after another (UTF-8, no terminator)
 *   caption_end  I64 [N]       where caption i ends in `caption` (it starts where i - 1 ends)
 *   source       U8  [bytes]   the file each clip was cut from, the same way
 *   source_end   I64 [N]
 *   start_ms     I64 [N]       where in that file the clip starts
 *   __metadata__ {"format": "dtrain-clips", "fps": "<frames a second>"}
 * A latent shard holds
 *   latents      F32|BF16|F16 [N, channels, frames, height, width]
 *   text         F32|BF16|F16 [N, L, D]   (optional) text embeddings, with
 *   text_len     I32|I64      [N]         how many of each clip's L rows are text
 *
 * A folder's shards are its *.safetensors files in name order (a path that is a file is a
 * folder of one); every shard of a folder has the same clip shape. Readers keep only the
 * headers: a clip is read from disk when it is asked for, so a folder may be far larger than
 * memory. Every lie a shard can tell (shapes that disagree, ends that run backwards or past
 * the bytes, a wrong dtype) is DT_ERR_FORMAT naming the file and the tensor.
 * Not thread-safe per object.
 */
#ifndef DT_IO_CLIPS_H
#define DT_IO_CLIPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* what a clip holds: channels x frames x height x width values */
typedef struct dt_clip_shape {
    int frames, channels, height, width;
} dt_clip_shape;

/* ---- pixel clips ------------------------------------------------------------------------- */

typedef struct dt_clips_writer dt_clips_writer;

/* Shards of clips of `shape` (channels 3) at `fps` into the folder dir (made if missing),
 * named clips-00000.safetensors, ...; a shard is written once it holds shard_bytes of
 * pixels. */
dt_status dt_clips_writer_open(const char *dir, dt_clip_shape shape, double fps,
                               int64_t shard_bytes, dt_clips_writer **out);
/* One clip: pixels [frames, height, width, 3] (copied). */
dt_status dt_clips_writer_add(dt_clips_writer *w, const uint8_t *pixels, const char *caption,
                              const char *source, int64_t start_ms);
/* Writes the last shard; *n_clips (may be NULL) = clips written in all. */
dt_status dt_clips_writer_finish(dt_clips_writer *w, int64_t *n_clips);
void dt_clips_writer_free(dt_clips_writer *w); /* NULL: no-op */

typedef struct dt_clips dt_clips;

typedef enum dt_clips_kind { DT_CLIPS_PIXELS, DT_CLIPS_LATENTS } dt_clips_kind;

/* A folder (or one shard) of pixel or latent clips. DT_ERR_IO for a missing path or a folder
 * with no shard, DT_ERR_FORMAT for a shard that is not one of `kind` or disagrees with the
 * first. */
dt_status dt_clips_open(const char *path, dt_clips_kind kind, dt_clips **out);
void dt_clips_close(dt_clips *c); /* NULL: no-op */
int64_t dt_clips_count(const dt_clips *c);
dt_clip_shape dt_clips_shape(const dt_clips *c);
/* The pixel shards' frames a second (0 for latents). */
double dt_clips_fps(const dt_clips *c);
/* Clip i (0 .. count - 1) as floats [frames, channels, height, width], the layout of a DiT's
 * clip: pixels mapped to [-1, 1] (v / 127.5 - 1), latents as stored. */
dt_status dt_clips_read(const dt_clips *c, int64_t i, float *out);
/* Clip i's caption (pixel clips; "" for latents) into buf, cut to cap - 1 bytes. */
dt_status dt_clips_caption(const dt_clips *c, int64_t i, char *buf, size_t cap);

/* Latents with text: the text embeddings of every clip, tokens x dim ({0}: no text). */
typedef struct dt_clip_text {
    int tokens, dim;
} dt_clip_text;
dt_clip_text dt_clips_text_shape(const dt_clips *c);
/* Clip i's text rows as floats into out [tokens, dim], *n = how many are text (text_len).
 * DT_ERR_ARG for a folder without text. */
dt_status dt_clips_text(const dt_clips *c, int64_t i, float *out, int *n);

#endif
