/* dtrain prepare --video: video files to pixel clip shards (io/clips.h) for a DiT.
 *
 *   dtrain prepare --video DIR --out DIR [--frames 8] [--height 32] [--width 32] [--fps 8]
 *                  [--clips-per-video N] [--val-fraction 0.1] [--shard-mb 256]
 *   dtrain prepare --video DIR --out DIR --buckets "FxHxW:B[:W], ..." [--fps 8] ...
 *
 * Every file under DIR (sub-folders included, in path order) that is not a caption is read
 * as a video (io/video.h); its caption is the text of the file beside it with the extension
 * .txt (FILE.mp4 -> FILE.txt), or none. The last --val-fraction of the files go to OUT/val,
 * the rest to OUT/train, so no video gives clips to both. A file FFmpeg cannot read, or
 * that breaks part way, gives no clip: it is counted, and the first reason is printed.
 * With --buckets (data.buckets' list; batches and weights are the trainer's), each file's
 * clips take the shape of its nearest bucket (the nearest aspect ratio; then one the file is
 * long enough to fill, the longest; then the nearest frame size) and go to
 * OUT/train/FxHxW (or OUT/val/FxHxW), where data.buckets reads them.
 */
#ifndef DT_CLI_PREPARE_VIDEO_H
#define DT_CLI_PREPARE_VIDEO_H

/* argv as dtrain's: argv[1] is "prepare"; an exit status */
int dt_cli_prepare_video(int argc, char **argv);

#endif
