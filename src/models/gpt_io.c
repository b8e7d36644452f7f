/* GPT-2 / Llama weights to and from HuggingFace safetensors.
 *
 * Names are transformers' own; GPT-2's Conv1D matrices are stored [in, out] in the file and
 * [out, in] here, so they are transposed on the way in and out. A GPT-2 file may carry the
 * "transformer." prefix (GPT2LMHeadModel) or not (GPT2Model); tensors dtrain has no use for
 * (HF's attention-mask buffers, a tied lm_head copy) are ignored; a missing one, one the model
 * lacks, dtrain metadata naming another shape, or a non-finite value is an error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "models/gpt.h"
#include "core/text.h"

static void transpose(float *dst, const float *src, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * cols + c];
}

static void file_shape(const dt_param *p, int64_t shape[2]) {
    shape[0] = p->conv1d ? p->shape[1] : p->shape[0];
    shape[1] = p->conv1d ? p->shape[0] : p->shape[1];
}

static dt_status put_metadata(dt_st_writer *w, const dt_model_config *c) {
    char v[64];
#define META(key, fmt, val) \
    (snprintf(v, sizeof v, fmt, val), dt_st_writer_set_metadata(w, key, v))
    DT_TRY(dt_st_writer_set_metadata(w, "format", "pt"));
    DT_TRY(dt_st_writer_set_metadata(w, "arch", dt_arch_name(c->arch)));
    DT_TRY(META("n_layer", "%d", c->n_layer));
    DT_TRY(META("n_head", "%d", c->n_head));
    DT_TRY(META("n_kv_head", "%d", dt_gpt_kv_heads(c)));
    DT_TRY(META("n_embd", "%d", c->n_embd));
    DT_TRY(META("vocab_size", "%d", c->vocab_size));
    DT_TRY(META("max_seq_len", "%d", c->max_seq_len));
    DT_TRY(META("ffn_hidden", "%d", dt_gpt_ffn_hidden(c)));
    DT_TRY(META("rope_theta", "%.9g", c->rope_theta));
    DT_TRY(META("norm_eps", "%.9g", c->norm_eps));
#undef META
    return DT_OK;
}

dt_status dt_gpt_save(const dt_gpt *g, const float *weights, const char *path) {
    dt_status st;
    dt_st_writer *w = NULL;
    int n = dt_gpt_n_full_params(g);
    float **tmp = calloc((size_t)n, sizeof *tmp); /* transposed copies live until commit */
    if (!tmp)
        return dt_err_set(DT_ERR_OOM, "saving %s: out of memory", path);
    DT_TRY_GOTO(dt_st_writer_init(&w));
    DT_TRY_GOTO(put_metadata(w, dt_gpt_config_of(g)));
    for (int i = 0; i < n; i++) {
        const dt_param *p = dt_gpt_full_param(g, i);
        const float *data = weights + p->offset;
        int64_t shape[2];
        file_shape(p, shape);
        if (p->conv1d) {
            tmp[i] = malloc((size_t)p->numel * sizeof(float));
            if (!tmp[i]) {
                st = dt_err_set(DT_ERR_OOM, "saving %s: out of memory", path);
                goto fail;
            }
            transpose(tmp[i], data, p->shape[0], p->shape[1]);
            data = tmp[i];
        }
        DT_TRY_GOTO(dt_st_writer_add(w, p->name, DT_ST_F32, p->ndim, shape, data));
    }
    DT_TRY_GOTO(dt_st_writer_commit(w, path));
    st = DT_OK;
fail:
    dt_st_writer_free(w);
    for (int i = 0; i < n; i++)
        free(tmp[i]);
    free(tmp);
    return st;
}

static const dt_st_tensor *find_tensor(const dt_st_file *f, const char *name) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t) {
        char prefixed[128];
        snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
        t = dt_st_find(f, prefixed);
    }
    return t;
}

/* The file is for this model: the shape in its metadata (when it has dtrain's) is the run's,
 * and it holds no tensor the model lacks (a deeper model's layer, another architecture's),
 * HF's buffers and GPT-2's tied lm_head copy aside. */
static dt_status check_file_model(const dt_gpt *g, const dt_st_file *f, const char *path) {
    const dt_model_config *c = dt_gpt_config_of(g);
    const char *arch = dt_st_metadata(f, "arch");
    if (arch && strcmp(arch, dt_arch_name(c->arch)) != 0)
        return dt_err_set(DT_ERR_ARG, "%s: the file's model.arch is %s, the run's %s", path,
                          arch, dt_arch_name(c->arch));
    /* metadata that contradict the file's own token table name the key that differs, not
     * one derived from it (gpt2's ffn_hidden is 4 n_embd) */
    const dt_st_tensor *wte = find_tensor(f, "wte.weight");
    if (!wte)
        wte = find_tensor(f, "model.embed_tokens.weight");
    const char *embd = dt_st_metadata(f, "n_embd");
    if (wte && wte->ndim == 2 && embd && strtoll(embd, NULL, 10) != wte->shape[1])
        return dt_err_set(DT_ERR_ARG,
                          "%s: its metadata say model.n_embd is %.32s, but its "
                          "token table %s is %lld wide (metadata edited or damaged)",
                          path, embd, wte->name, (long long)wte->shape[1]);
    const char *keys[] = {"n_layer", "n_head", "n_kv_head", "n_embd", "vocab_size", "ffn_hidden"};
    int mine[] = {c->n_layer, c->n_head, dt_gpt_kv_heads(c), c->n_embd, c->vocab_size,
                  dt_gpt_ffn_hidden(c)};
    for (int i = 0; i < 6; i++) {
        const char *v = dt_st_metadata(f, keys[i]);
        char *end;
        long x = v ? strtol(v, &end, 10) : 0;
        if (v && (*end || end == v || x != mine[i]))
            return dt_err_set(DT_ERR_ARG, "%s: the file's model.%s is %.32s, the run's %d", path,
                              keys[i], v, mine[i]);
    }
    for (int k = 0; k < dt_st_count(f); k++) {
        const char *name = dt_st_get(f, k)->name, *bare = name;
        if (strncmp(name, "transformer.", 12) == 0)
            bare = name + 12;
        bool known = dt_ends_with(name, ".attn.bias") || dt_ends_with(name, ".attn.masked_bias") ||
                     dt_ends_with(name, "rotary_emb.inv_freq") ||
                     (c->arch == DT_ARCH_GPT2 && strcmp(name, "lm_head.weight") == 0);
        for (int i = 0; !known && i < dt_gpt_n_full_params(g); i++)
            known = strcmp(dt_gpt_full_param(g, i)->name, bare) == 0;
        if (!known)
            return dt_err_set(DT_ERR_ARG, "%s: tensor %s is not part of the run's model (%s, "
                              "n_layer %d, n_head %d, n_embd %d): the file is for another model",
                              path, name, dt_arch_name(c->arch), c->n_layer, c->n_head,
                              c->n_embd);
    }
    return DT_OK;
}

static dt_status finite_tensor(const char *path, const char *name, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s holds a non-finite value (%g at "
                              "element %lld): saved from a diverged run or damaged", path, name,
                              (double)x[i], (long long)i);
    return DT_OK;
}

dt_status dt_gpt_load(const dt_gpt *g, float *weights, const char *path) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = check_file_model(g, f, path);
    float *tmp = NULL;
    for (int i = 0; st == DT_OK && i < dt_gpt_n_full_params(g); i++) {
        const dt_param *p = dt_gpt_full_param(g, i);
        const dt_st_tensor *t = find_tensor(f, p->name);
        if (!t) {
            st = dt_err_set(DT_ERR_FORMAT, "%s: tensor %s is missing (model %s, n_layer %d)", path,
                            p->name, dt_arch_name(dt_gpt_config_of(g)->arch),
                            dt_gpt_config_of(g)->n_layer);
            break;
        }
        int64_t shape[2];
        file_shape(p, shape);
        float *dst = weights + p->offset;
        if (p->conv1d) {
            free(tmp);
            tmp = malloc((size_t)p->numel * sizeof *tmp);
            if (!tmp) {
                st = dt_err_set(DT_ERR_OOM, "loading %s: out of memory", path);
                break;
            }
            dst = tmp;
        }
        st = dt_st_read_f32(f, t->name, p->ndim, shape, dst);
        if (st == DT_OK)
            st = finite_tensor(path, t->name, dst, p->numel);
        if (st != DT_OK)
            break;
        if (p->conv1d)
            transpose(weights + p->offset, tmp, shape[0], shape[1]);
    }
    free(tmp);
    dt_st_close(f);
    return st;
}

static dt_status meta_int(const dt_st_file *f, const char *path, const char *key, int *out) {
    const char *v = dt_st_metadata(f, key);
    if (!v)
        return DT_OK;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || end == v || x < 0 || x > 1 << 30)
        return dt_err_set(DT_ERR_FORMAT, "%s: metadata %s='%s' is not a valid integer", path,
                          key, v);
    *out = (int)x;
    return DT_OK;
}

static dt_status meta_float(const dt_st_file *f, const char *path, const char *key, float *out) {
    const char *v = dt_st_metadata(f, key);
    if (!v)
        return DT_OK;
    char *end;
    float x = strtof(v, &end);
    if (*end || end == v)
        return dt_err_set(DT_ERR_FORMAT, "%s: metadata %s='%s' is not a number", path, key, v);
    *out = x;
    return DT_OK;
}

dt_status dt_gpt_config_from_file(const char *path, dt_model_config *cfg) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = DT_OK;
    const char *arch = dt_st_metadata(f, "arch");
    if (arch && strcmp(arch, "gpt2") == 0)
        cfg->arch = DT_ARCH_GPT2;
    else if (arch && strcmp(arch, "llama") == 0)
        cfg->arch = DT_ARCH_LLAMA;
    else if (arch)
        st = dt_err_set(DT_ERR_FORMAT, "%s: metadata arch='%s' (want gpt2 or llama)", path, arch);
    else if (dt_st_find(f, "model.embed_tokens.weight"))
        cfg->arch = DT_ARCH_LLAMA;
    if (st == DT_OK)
        st = meta_int(f, path, "n_layer", &cfg->n_layer);
    if (st == DT_OK)
        st = meta_int(f, path, "n_head", &cfg->n_head);
    if (st == DT_OK)
        st = meta_int(f, path, "n_kv_head", &cfg->n_kv_head);
    if (st == DT_OK)
        st = meta_int(f, path, "n_embd", &cfg->n_embd);
    if (st == DT_OK)
        st = meta_int(f, path, "vocab_size", &cfg->vocab_size);
    if (st == DT_OK)
        st = meta_int(f, path, "max_seq_len", &cfg->max_seq_len);
    if (st == DT_OK)
        st = meta_int(f, path, "ffn_hidden", &cfg->ffn_hidden);
    if (st == DT_OK)
        st = meta_float(f, path, "rope_theta", &cfg->rope_theta);
    if (st == DT_OK)
        st = meta_float(f, path, "norm_eps", &cfg->norm_eps);
    if (cfg->arch == DT_ARCH_GPT2)
        cfg->ffn_hidden = 0;
    dt_st_close(f);
    return st;
}
