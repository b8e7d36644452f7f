/* A standalone experiment, not a trainer: a small video DiT learns the bouncing-shapes source
 * with rectified flow and AdamW in one process, then samples clips (Euler, optional guidance)
 * into an animated GIF beside a GIF of training clips, and prints statistics that tell
 * learned video from noise: the share of background pixels per frame, the mean absolute
 * change between frames, and the mean pixel value, for data, samples and pure noise.
 *
 * Usage: dit_bounce [--steps N] [--batch B] [--lr LR] [--layers L] [--embd C] [--heads H]
 *                   [--frames F] [--size S] [--attn full|spatial_temporal] [--sample-steps N]
 *                   [--guidance G] [--seed S] [--out PREFIX]
 * Writes PREFIX.samples.gif and PREFIX.data.gif. Threads follow OMP_NUM_THREADS.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "core/mem.h"
#include "io/bounce.h"
#include "io/gif.h"
#include "models/flow.h"
#include "optim/adamw.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* background share (pixels within 0.25 of -1 in every channel), motion, mean over K clips */
static void stats(const char *what, const float *v, int K, const dt_bounce_config *c) {
    size_t plane = (size_t)c->height * c->width, frame = plane * c->channels;
    double bg = 0, motion = 0, mean = 0;
    for (int k = 0; k < K; k++)
        for (int f = 0; f < c->frames; f++) {
            const float *fr = v + ((size_t)k * c->frames + f) * frame;
            for (size_t p = 0; p < plane; p++) {
                bool b = true;
                for (int ch = 0; ch < c->channels; ch++)
                    b &= fr[ch * plane + p] < -0.75f;
                bg += b;
            }
            for (size_t i = 0; i < frame; i++) {
                mean += fr[i];
                if (f > 0)
                    motion += fabsf(fr[i] - fr[i - frame]);
            }
        }
    double n_frames = (double)K * c->frames;
    printf("%-8s background %.3f  motion %.4f  mean %.3f\n", what, bg / (n_frames * plane),
           motion / ((double)K * (c->frames - 1) * frame), mean / (n_frames * frame));
}

int main(int argc, char **argv) {
    int steps = 300, B = 8, L = 4, C = 64, NH = 4, frames = 8, size = 16, sample_steps = 30;
    float lr = 1e-3f, guidance = 0;
    uint64_t seed = 1;
    const char *out = "dit_bounce", *attn = "spatial_temporal";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--batch")) B = atoi(v);
        else if (!strcmp(k, "--lr")) lr = (float)atof(v);
        else if (!strcmp(k, "--layers")) L = atoi(v);
        else if (!strcmp(k, "--embd")) C = atoi(v);
        else if (!strcmp(k, "--heads")) NH = atoi(v);
        else if (!strcmp(k, "--frames")) frames = atoi(v);
        else if (!strcmp(k, "--size")) size = atoi(v);
        else if (!strcmp(k, "--attn")) attn = v;
        else if (!strcmp(k, "--sample-steps")) sample_steps = atoi(v);
        else if (!strcmp(k, "--guidance")) guidance = (float)atof(v);
        else if (!strcmp(k, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--out")) out = v;
        else {
            fprintf(stderr, "dit_bounce: unknown option %s\n", k);
            return 2;
        }
    }
    dt_dit_config c = {.frames = frames, .channels = 3, .height = size, .width = size, .pt = 1,
                       .ph = 2, .pw = 2, .n_layer = L, .n_head = NH, .n_embd = C,
                       .n_classes = DT_BOUNCE_KIND_COUNT,
                       .attn = strcmp(attn, "full") ? DT_DIT_ATTN_SPATIAL_TEMPORAL
                                                    : DT_DIT_ATTN_FULL};
    dt_bounce_config bc = dt_bounce_defaults(frames, 3, size, size);
    dt_mem *mem = NULL;
    dt_dit *d = NULL;
    dt_flow *f = NULL;
    dt_adamw *opt = NULL;
    dt_status st;
    if ((st = dt_bounce_check(&bc)) || (st = dt_mem_init(&mem)) ||
        (st = dt_dit_init(&c, &(dt_dit_opts){.B = B, .training = true}, mem, &d)) ||
        (st = dt_flow_init(d, &(dt_flow_opts){.p_uncond = 0.1f}, mem, &f))) {
        fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
        return 1;
    }
    dt_dit_init_weights(d, seed);
    dt_optim_config oc = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                          .weight_decay = 0.0f};
    if ((st = dt_adamw_init(&oc, dt_dit_param(d, 0), dt_dit_n_params(d), 0, dt_dit_numel(d),
                            mem, &opt))) {
        fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
        return 1;
    }
    int64_t clip = dt_dit_clip_numel(&c);
    float *x0 = malloc(sizeof(float) * clip * B);
    int32_t *lab = malloc(sizeof(int32_t) * B);
    printf("dit: %d layers, n_embd %d, %d heads, %s, %d tokens per clip, %lld parameters, "
           "%.2f GFLOP per clip\n",
           L, C, NH, attn, dt_dit_tokens(&c), (long long)dt_dit_numel(d),
           dt_dit_flops_per_sample(d) / 1e9);
    double t0 = now(), avg = 0;
    for (int s = 0; s < steps; s++) {
        dt_bounce_batch(&bc, seed, (int64_t)s * B, B, x0, lab);
        double loss;
        float lr_s = lr * fminf(1.0f, (s + 1) / 20.0f); /* 20 steps of linear warmup */
        dt_dit_zero_grad(d);
        if ((st = dt_flow_train(f, x0, lab, B, seed, (int64_t)s * B, 1.0f, &loss)) ||
            (st = dt_adamw_step(opt, dt_dit_weights(d), dt_dit_grads(d), NULL, lr_s, 1.0f))) {
            fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
            return 1;
        }
        avg += loss;
        if ((s + 1) % 25 == 0) {
            printf("step %5d  loss %.4f  (%.1f s)\n", s + 1, avg / 25, now() - t0);
            fflush(stdout);
            avg = 0;
        }
    }
    /* samples: K clips, labels 0, 1, 2, 0, 1, 2, ... */
    int K = B < 6 ? B : 6;
    float *smp = malloc(sizeof(float) * clip * K);
    for (int k = 0; k < K; k++)
        lab[k] = k % DT_BOUNCE_KIND_COUNT;
    if ((st = dt_flow_sample(f, K, sample_steps, seed + 1000, lab, guidance, smp))) {
        fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
        return 1;
    }
    dt_bounce_batch(&bc, seed + 7, 0, K, x0, NULL);
    float *noise = malloc(sizeof(float) * clip * K);
    for (int k = 0; k < K; k++)
        dt_flow_noise(seed + 5, k, clip, noise + k * clip);
    stats("data", x0, K, &bc);
    stats("samples", smp, K, &bc);
    stats("noise", noise, K, &bc);
    char path[1024];
    dt_gif_clips g = {.data = smp, .K = K, .frames = frames, .channels = 3, .height = size,
                      .width = size};
    snprintf(path, sizeof path, "%s.samples.gif", out);
    if ((st = dt_gif_write(path, &g, 4, 25)))
        fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
    g.data = x0;
    snprintf(path, sizeof path, "%s.data.gif", out);
    if (!st && (st = dt_gif_write(path, &g, 4, 25)))
        fprintf(stderr, "dit_bounce: %s\n", dt_err_msg());
    printf("wrote %s.samples.gif and %s.data.gif (%.1f s)\n", out, out, now() - t0);
    free(noise), free(smp), free(lab), free(x0);
    dt_adamw_free(opt);
    dt_flow_free(f);
    dt_dit_free(d);
    dt_mem_free(mem);
    return st ? 1 : 0;
}
