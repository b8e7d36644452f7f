/* libFuzzer target: a clip shard (io/clips.h) through dt_clips_open as pixel clips and as
 * latents, every clip read (the first 64), every caption. Must never crash, hang, read out of
 * bounds or allocate what the file cannot hold, whatever the bytes. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "io/clips.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/in.safetensors", fuzz_dir());
    fuzz_write(path, data, size);
    for (int kind = 0; kind < 2; kind++) {
        dt_clips *c = NULL;
        if (dt_clips_open(path, kind ? DT_CLIPS_LATENTS : DT_CLIPS_PIXELS, &c) != DT_OK)
            continue;
        dt_clip_shape s = dt_clips_shape(c);
        float *x = malloc((size_t)s.frames * s.channels * s.height * s.width * sizeof *x);
        char caption[64];
        for (int64_t i = 0; x && i < dt_clips_count(c) && i < 64; i++) {
            (void)dt_clips_read(c, i, x);
            (void)dt_clips_caption(c, i, caption, sizeof caption);
        }
        free(x);
        dt_clips_close(c);
    }
    return 0;
}
