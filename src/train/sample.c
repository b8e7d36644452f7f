/* dtrain sample: text from a model that makes token logits (temperature sampling with Philox
 * randomness, so a sample is reproducible from its seed; no KV cache: each new token re-runs
 * the cropped context, fine for the small models sampled from the command line), or clips
 * from a model that predicts a flow velocity (models/flow.h's Euler sampler) into an animated
 * GIF. One process; the model is built from the checkpoint's recorded shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/text.h"
#include "io/atomic.h"
#include "io/bpe.h"
#include "io/gif.h"
#include "io/safetensors.h"
#include "dtrain/booster.h"
#include "models/flow.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static int32_t draw(const float *logits, int V, float temperature, uint64_t seed, int i) {
    double max = logits[0];
    for (int v = 1; v < V; v++)
        max = logits[v] > max ? logits[v] : max;
    if (temperature <= 0) { /* greedy */
        for (int v = 0; v < V; v++)
            if (logits[v] == max)
                return v;
    }
    double total = 0;
    for (int v = 0; v < V; v++)
        total += exp((logits[v] - max) / temperature);
    float u;
    dt_rng_fill_uniform(seed, "sample", i, 1, &u);
    double target = u * total, acc = 0;
    for (int v = 0; v < V; v++) {
        acc += exp((logits[v] - max) / temperature);
        if (acc >= target)
            return v;
    }
    return V - 1;
}

dt_status dt_sample_tokens(dt_model *g, int context, const int32_t *prompt, int n_prompt,
                           int n_new, float temperature, uint64_t seed, int32_t *out) {
    int V = dt_model_cfg(g)->vocab_size, total = n_prompt + n_new;
    int32_t *seq = malloc((size_t)total * sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    dt_status st = DT_OK;
    if (!seq || !logits) {
        st = dt_err_set(DT_ERR_OOM, "sample: out of memory");
        goto done;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    for (int i = n_prompt; i < total; i++) {
        int start = i > context ? i - context : 0;
        st = dt_model_logits_last(g, seq + start, i - start, logits);
        if (st != DT_OK)
            break;
        seq[i] = draw(logits, V, temperature, seed, i);
    }
    if (st == DT_OK)
        memcpy(out, seq + n_prompt, (size_t)n_new * sizeof *out);
done:
    free(seq);
    free(logits);
    return st;
}

void dt_sample_print(const int32_t *tok, int n, int vocab_size) {
    for (int i = 0; i < n; i++) {
        if (vocab_size <= 256)
            putchar(tok[i]);
        else
            printf("%s%d", i ? " " : "", tok[i]);
    }
    putchar('\n');
    fflush(stdout);
}

/* The model shape a checkpoint records (a step folder, sharded or whole, or a safetensors
 * file), and where its weights are: *path the file (a whole folder's model.safetensors). */
static dt_status read_shape(const char *checkpoint, dt_model_config *m, char *path, size_t n,
                            bool *sharded) {
    struct stat sb;
    if (stat(checkpoint, &sb) != 0)
        return dt_err_set(DT_ERR_IO, "checkpoint %s does not exist", checkpoint);
    if (S_ISDIR(sb.st_mode))
        snprintf(path, n, "%s/model.safetensors", checkpoint);
    else
        snprintf(path, n, "%s", checkpoint);
    *sharded = false;
    if (S_ISDIR(sb.st_mode))
        DT_TRY(dt_ckpt_folder_kind(checkpoint, sharded));
    dt_config cfg;
    dt_config_defaults(&cfg);
    *m = cfg.model;
    DT_TRY(*sharded ? dt_ckpt_model_config(checkpoint, m) : dt_model_config_from_file(path, m));
    return dt_ckpt_check_shape(m, *sharded ? checkpoint : path);
}

/* A one-process fp32 model of the checkpoint's shape with its weights, for B samples of T
 * positions (T 0: the recorded max_seq_len): the weights' average where the checkpoint holds
 * one (train.ema_decay: in a step folder, or exported beside the file as NAME.ema.EXT) unless
 * raw, else the weights. */
static dt_status load_model(const char *checkpoint, bool raw, int B, int T, dt_mem *mem,
                            dt_model **g) {
    char path[4096], ema[4200];
    bool sharded = false, averaged = false;
    dt_model_config m;
    DT_TRY(read_shape(checkpoint, &m, path, sizeof path, &sharded));
    dt_model_opts opts = {.B = B, .T = T > 0 ? T : m.max_seq_len, .precision = DT_PREC_FP32};
    DT_TRY(dt_model_create(&m, &opts, mem, g));
    if (sharded) {
        DT_TRY(dt_ckpt_load_weights(checkpoint, *g, !raw, dt_model_weights(*g), &averaged));
    } else {
        struct stat sb;
        dt_booster_ema_path(path, ema, sizeof ema);
        averaged = !raw && stat(ema, &sb) == 0;
        DT_TRY(dt_model_load(*g, dt_model_weights(*g), averaged ? ema : path));
    }
    if (averaged)
        dt_info("sampling from the weights' average (train.ema_decay) of %s; --raw: from the "
                "weights themselves",
                checkpoint);
    return DT_OK;
}

/* what a model that makes no token logits is for */
static dt_status not_text(const char *checkpoint, const dt_model *g, const char *prompt) {
    const char *arch = dt_arch_name(dt_model_cfg(g)->arch);
    if (!g->ops->predict)
        return dt_err_set(DT_ERR_UNSUPPORTED, "checkpoint %s holds a %s model, which makes "
                          "nothing dtrain sample can draw from", checkpoint, arch);
    if (prompt && *prompt)
        return dt_err_set(DT_ERR_ARG, "--prompt \"%s\": checkpoint %s holds a %s model, which "
                          "samples video clips and takes no text prompt; sample it with --out "
                          "FILE.gif", prompt, checkpoint, arch);
    return dt_err_set(DT_ERR_ARG, "checkpoint %s holds a %s model, which makes no text: sample "
                      "its clips with --out FILE.gif", checkpoint, arch);
}

/* The prompt's ids by the tokenizer (an empty prompt: its end-of-document token, as a
 * document starts after one). */
static dt_status bpe_prompt(dt_bpe *bpe, const char *prompt, int32_t **tok, int *n) {
    int64_t count = 0, cap = 0;
    dt_status st = prompt && *prompt ? dt_bpe_encode(bpe, prompt, strlen(prompt), tok, &count, &cap)
                                     : dt_bpe_append(tok, &count, &cap,
                                                     dt_bpe_eot(bpe) >= 0 ? dt_bpe_eot(bpe) : 0);
    *n = (int)count;
    return st;
}

void dt_sample_print_bpe(const dt_bpe *bpe, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        char *text;
        size_t len;
        if (dt_bpe_decode(bpe, ids + i, 1, &text, &len) == DT_OK) {
            fwrite(text, 1, len, stdout);
            free(text);
        } else {
            fputs("\xEF\xBF\xBD", stdout);
        }
    }
    fputc('\n', stdout);
}

static dt_status sample_bpe(dt_model *g, const char *tokenizer, const char *prompt, int n_new,
                            float temperature, uint64_t seed) {
    const dt_model_config *m = dt_model_cfg(g);
    dt_bpe *bpe = NULL;
    int32_t *tok = NULL, *out = malloc((size_t)(n_new > 0 ? n_new : 1) * sizeof *out);
    int n_prompt;
    dt_status st = out ? DT_OK : dt_err_set(DT_ERR_OOM, "sample: out of memory");
    if (st == DT_OK)
        st = dt_bpe_load(tokenizer, &bpe);
    if (st == DT_OK && dt_bpe_vocab_size(bpe) > m->vocab_size)
        st = dt_err_set(DT_ERR_ARG,
                        "--tokenizer %s has %lld ids, more than the model's "
                        "vocab_size %d",
                        tokenizer, (long long)dt_bpe_vocab_size(bpe), m->vocab_size);
    if (st == DT_OK)
        st = bpe_prompt(bpe, prompt, &tok, &n_prompt);
    if (st == DT_OK)
        st = dt_sample_tokens(g, m->max_seq_len, tok, n_prompt, n_new, temperature, seed, out);
    if (st == DT_OK) {
        if (prompt && *prompt)
            fputs(prompt, stdout);
        dt_sample_print_bpe(bpe, out, n_new);
    }
    free(tok);
    free(out);
    dt_bpe_free(bpe);
    return st;
}

dt_status dt_sample_run(const char *checkpoint, bool raw, const char *tokenizer, const char *prompt,
                        int n_new, float temperature, uint64_t seed) {
    dt_mem *mem = NULL;
    dt_model *g = NULL;
    int32_t *tok = NULL, *out = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_mem_init(&mem));
    DT_TRY_GOTO(load_model(checkpoint, raw, 1, 0, mem, &g));
    if (!g->ops->logits_last) {
        st = not_text(checkpoint, g, prompt);
        goto fail;
    }
    const dt_model_config *m = dt_model_cfg(g);
    if (tokenizer) {
        st = sample_bpe(g, tokenizer, prompt, n_new, temperature, seed);
        goto fail;
    }
    int n_prompt = prompt && *prompt ? (int)strlen(prompt) : 1;
    tok = malloc((size_t)n_prompt * sizeof *tok);
    out = malloc((size_t)(n_new > 0 ? n_new : 1) * sizeof *out);
    if (!tok || !out) {
        st = dt_err_set(DT_ERR_OOM, "sample: out of memory");
        goto fail;
    }
    if (m->vocab_size != 256 && prompt && *prompt) {
        st = dt_err_set(DT_ERR_ARG,
                        "--prompt needs a byte-level model (vocab 256) or the "
                        "model's --tokenizer FILE; this one has vocab_size %d",
                        m->vocab_size);
        goto fail;
    }
    for (int i = 0; i < n_prompt; i++)
        tok[i] = prompt && *prompt ? (unsigned char)prompt[i] : '\n' % m->vocab_size;
    DT_TRY_GOTO(dt_sample_tokens(g, m->max_seq_len, tok, n_prompt, n_new, temperature, seed,
                                 out));
    if (prompt && *prompt)
        fputs(prompt, stdout);
    dt_sample_print(out, n_new, m->vocab_size);
    st = DT_OK;
fail:
    free(tok);
    free(out);
    dt_model_free(g);
    dt_mem_free(mem);
    return st;
}

/* ---- clips ------------------------------------------------------------------------------ */

/* The GIF can be written: not a folder, and a temporary beside it can be created (what the
 * atomic write will do), checked before any sampling. */
static dt_status check_out(const char *out) {
    struct stat sb;
    if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return dt_err_set(DT_ERR_ARG, "--out %s is a folder; give a .gif or .safetensors file name",
                          out);
    dt_atomic_file a;
    dt_status st = dt_atomic_open(&a, out);
    if (st != DT_OK)
        return dt_err_wrap(st, "--out %s: cannot be written: ", out);
    dt_atomic_abort(&a);
    return DT_OK;
}

/* --prompt as the text rows of count clips (models/dit.h): its first text_len bytes, for a
 * model whose byte encoder reads captions. *text NULL without a prompt. */
static dt_status prompt_rows(const dt_sample_clip_opts *o, const dt_model_config *m, float **text) {
    *text = NULL;
    if (!o->prompt || !*o->prompt)
        return DT_OK;
    if (m->text_len == 0)
        return dt_err_set(DT_ERR_ARG,
                          "--prompt \"%s\": the model in %s has no text "
                          "(model.text_len = 0); leave --prompt out",
                          o->prompt, o->checkpoint);
    if (m->text_dim > 0)
        return dt_err_set(DT_ERR_ARG,
                          "--prompt \"%s\": the model in %s reads precomputed text "
                          "embeddings (model.text_dim = %d), which the text encoder that made "
                          "them must make; dtrain encodes the bytes of a prompt only for a "
                          "model with text_dim = 0",
                          o->prompt, o->checkpoint, m->text_dim);
    size_t len = strlen(o->prompt), tf = 1 + (size_t)m->text_len;
    int n = len < (size_t)m->text_len ? (int)len : m->text_len;
    if (len > (size_t)m->text_len)
        dt_info("sample: --prompt is %zu bytes; the model reads its first %d (model.text_len)", len,
                m->text_len);
    if (!(*text = calloc((size_t)o->count * tf, sizeof **text)))
        return dt_err_set(DT_ERR_OOM, "sample: out of memory for %d prompts", o->count);
    for (int k = 0; k < o->count; k++) {
        float *r = *text + k * tf;
        r[0] = (float)n;
        for (int i = 0; i < n; i++)
            r[1 + i] = (float)(uint8_t)o->prompt[i];
    }
    return DT_OK;
}

/* The options a clip model takes, against its classes and text. labels[count] or *use NULL. */
static dt_status clip_labels(const dt_sample_clip_opts *o, const dt_model_config *m,
                             int32_t *labels, bool *use) {
    if (o->has_label && m->n_classes == 0)
        return dt_err_set(DT_ERR_ARG, "--label %d: the model in %s is unconditional "
                          "(n_classes = 0); leave --label out", o->label, o->checkpoint);
    if (o->has_label && (o->label < 0 || o->label >= m->n_classes))
        return dt_err_set(DT_ERR_ARG, "--label %d is outside the model's classes 0..%d",
                          o->label, m->n_classes - 1);
    bool prompt = o->prompt && *o->prompt;
    if (o->guidance > 0 && m->n_classes == 0 && !prompt)
        return dt_err_set(DT_ERR_ARG,
                          "--guidance %g: the model in %s %s, there is nothing to "
                          "guide towards",
                          (double)o->guidance, o->checkpoint,
                          m->text_len ? "has no classes and no --prompt was given"
                                      : "is unconditional (n_classes = 0)");
    *use = m->n_classes > 0;
    for (int k = 0; *use && k < o->count; k++)
        labels[k] = o->has_label ? o->label : k % m->n_classes;
    return DT_OK;
}

/* K clips [K, frames, channels, height, width] side by side in an animated GIF */
static dt_status write_gif(const char *out, const dt_model_config *m, const float *clips, int K) {
    /* pixels drawn as squares so that a small clip is a visible picture (~96 pixels a side) */
    int side = m->height > m->width ? m->height : m->width, scale = 96 / side;
    dt_gif_clips gc = {.data = clips,
                       .K = K,
                       .frames = m->frames,
                       .channels = m->channels,
                       .height = m->height,
                       .width = m->width};
    return dt_gif_write(out, &gc, scale > 1 ? scale : 1, 12);
}

/* K clips as a latent shard (io/clips.h's "latents" [K, channels, frames, height, width]),
 * for the VAE that made the training latents to decode */
static dt_status write_latents(const char *out, const dt_model_config *m, const float *clips,
                               int K) {
    int64_t hw = (int64_t)m->height * m->width, clip = hw * m->channels * m->frames;
    float *x = malloc((size_t)(clip * K) * sizeof *x);
    if (!x)
        return dt_err_set(DT_ERR_OOM, "sample: out of memory for %d clips", K);
    for (int k = 0; k < K; k++)
        for (int t = 0; t < m->frames; t++)
            for (int c = 0; c < m->channels; c++)
                memcpy(x + k * clip + ((int64_t)c * m->frames + t) * hw,
                       clips + k * clip + ((int64_t)t * m->channels + c) * hw,
                       (size_t)hw * sizeof *x);
    int64_t shape[5] = {K, m->channels, m->frames, m->height, m->width};
    dt_st_writer *w = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_st_writer_init(&w));
    DT_TRY_GOTO(dt_st_writer_add(w, "latents", DT_ST_F32, 5, shape, x));
    st = dt_st_writer_commit(w, out);
fail:
    dt_st_writer_free(w);
    free(x);
    return st;
}

/* The loaded DiT as a model of another clip shape (a DiT's weights serve any clip cut into
 * its patches: positions are fixed, not learned); *g is replaced. */
static dt_status reshape(const dt_sample_clip_opts *o, dt_mem *mem, dt_model **g) {
    dt_model_config m = *dt_model_cfg(*g);
    if (o->frames <= 0 || (o->frames == m.frames && o->height == m.height && o->width == m.width))
        return DT_OK;
    m.frames = o->frames, m.height = o->height, m.width = o->width;
    DT_TRY(dt_config_validate_model(&m, "--clip"));
    dt_config c = {.model = m};
    dt_config_derive(&c);
    dt_model *r = NULL;
    dt_model_opts opts = {.B = o->count, .T = c.train.seq_len, .precision = DT_PREC_FP32};
    DT_TRY(dt_model_create(&c.model, &opts, mem, &r));
    memcpy(dt_model_weights(r), dt_model_weights(*g), (size_t)dt_model_numel(r) * sizeof(float));
    dt_model_free(*g);
    *g = r;
    return DT_OK;
}

dt_status dt_sample_clips_run(const dt_sample_clip_opts *o) {
    if (o->steps < 1 || o->count < 1 || o->count > DT_SAMPLE_MAX_CLIPS)
        return dt_err_set(DT_ERR_ARG, "sample: --steps %d must be >= 1 and --count %d in 1..%d",
                          o->steps, o->count, DT_SAMPLE_MAX_CLIPS);
    DT_TRY(check_out(o->out));
    dt_mem *mem = NULL;
    dt_model *g = NULL;
    float *clips = NULL, *text = NULL;
    int32_t labels[DT_SAMPLE_MAX_CLIPS];
    bool use_labels = false;
    dt_status st;
    DT_TRY_GOTO(dt_mem_init(&mem));
    DT_TRY_GOTO(load_model(o->checkpoint, o->raw, o->count, 0, mem, &g));
    if (g->ops->predict)
        DT_TRY_GOTO(reshape(o, mem, &g));
    const dt_model_config *m = dt_model_cfg(g);
    if (!g->ops->predict) {
        st = dt_err_set(DT_ERR_ARG, "--out %s: checkpoint %s holds a %s model, which makes "
                        "text; --out samples clips from a dit (use --prompt and --tokens)",
                        o->out, o->checkpoint, dt_arch_name(m->arch));
        goto fail;
    }
    DT_TRY_GOTO(clip_labels(o, m, labels, &use_labels));
    DT_TRY_GOTO(prompt_rows(o, m, &text));
    if (!dt_ends_with(o->out, ".safetensors") && m->channels != 1 && m->channels != 3) {
        st = dt_err_set(DT_ERR_ARG,
                        "--out %s: the model in %s makes clips of %d channels "
                        "(latents), which a GIF cannot show; give --out FILE.safetensors for "
                        "the VAE that made them to decode",
                        o->out, o->checkpoint, m->channels);
        goto fail;
    }
    int64_t numel = (int64_t)m->frames * m->channels * m->height * m->width;
    if (!(clips = malloc((size_t)(numel * o->count) * sizeof *clips))) {
        st = dt_err_set(DT_ERR_OOM, "sample: out of memory for %d clips", o->count);
        goto fail;
    }
    DT_TRY_GOTO(dt_flow_sample_model(g, mem, o->count, o->steps, o->seed,
                                     use_labels ? labels : NULL, text, o->guidance, clips));
    st = dt_ends_with(o->out, ".safetensors") ? write_latents(o->out, m, clips, o->count)
                                              : write_gif(o->out, m, clips, o->count);
fail:
    free(text);
    free(clips);
    dt_model_free(g);
    dt_mem_free(mem);
    return st;
}
