/* Text generation from a trained model: temperature sampling with Philox randomness, so a
 * sample is reproducible from its seed. No KV cache: each new token re-runs the cropped
 * context (fine for the small models sampled from the command line). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
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

dt_status dt_sample_run(const char *checkpoint, const char *prompt, int n_new,
                        float temperature, uint64_t seed) {
    char path[4096];
    struct stat sb;
    if (stat(checkpoint, &sb) != 0)
        return dt_err_set(DT_ERR_IO, "checkpoint %s does not exist", checkpoint);
    if (S_ISDIR(sb.st_mode))
        snprintf(path, sizeof path, "%s/model.safetensors", checkpoint);
    else
        snprintf(path, sizeof path, "%s", checkpoint);
    bool sharded = S_ISDIR(sb.st_mode) && dt_ckpt_is_sharded(checkpoint);
    dt_config cfg;
    dt_config_defaults(&cfg);
    DT_TRY(sharded ? dt_ckpt_model_config(checkpoint, &cfg.model)
                   : dt_model_config_from_file(path, &cfg.model));
    DT_TRY(dt_ckpt_check_shape(&cfg.model, sharded ? checkpoint : path));
    dt_mem *mem = NULL;
    dt_model *g = NULL;
    int32_t *tok = NULL, *out = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_mem_init(&mem));
    int T = cfg.model.max_seq_len;
    dt_model_opts opts = {.B = 1, .T = T, .precision = DT_PREC_FP32};
    DT_TRY_GOTO(dt_model_create(&cfg.model, &opts, mem, &g));
    if (sharded)
        DT_TRY_GOTO(dt_ckpt_load_weights(checkpoint, g, dt_model_weights(g)));
    else
        DT_TRY_GOTO(dt_model_load(g, dt_model_weights(g), path));
    int n_prompt = prompt && *prompt ? (int)strlen(prompt) : 1;
    tok = malloc((size_t)n_prompt * sizeof *tok);
    out = malloc((size_t)(n_new > 0 ? n_new : 1) * sizeof *out);
    if (!tok || !out) {
        st = dt_err_set(DT_ERR_OOM, "sample: out of memory");
        goto fail;
    }
    if (cfg.model.vocab_size != 256 && prompt && *prompt) {
        st = dt_err_set(DT_ERR_ARG, "--prompt needs a byte-level model (vocab 256); this one "
                        "has vocab_size %d", cfg.model.vocab_size);
        goto fail;
    }
    for (int i = 0; i < n_prompt; i++)
        tok[i] = prompt && *prompt ? (unsigned char)prompt[i] : '\n' % cfg.model.vocab_size;
    DT_TRY_GOTO(dt_sample_tokens(g, T, tok, n_prompt, n_new, temperature, seed, out));
    if (prompt && *prompt)
        fputs(prompt, stdout);
    dt_sample_print(out, n_new, cfg.model.vocab_size);
    st = DT_OK;
fail:
    free(tok);
    free(out);
    dt_model_free(g);
    dt_mem_free(mem);
    return st;
}
