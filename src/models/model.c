/* Which implementation of the model interface (models/model.h) serves each model.arch: one
 * row per architecture. A new model adds its row here and nothing under src/train/.
 */
#include "models/model.h"

#include <stdlib.h>
#include <string.h>

#include "core/buckets.h"
#include "io/safetensors.h"
#include "models/dit.h"
#include "models/gpt.h"

typedef struct model_kind {
    dt_model_create_fn create;
    dt_status (*check_split)(const dt_model_config *c, const dt_model_split *s);
    dt_status (*config_from_file)(const char *path, dt_model_config *cfg);
    dt_status (*config_from_sizes)(const dt_model_size *sizes, int n, dt_model_config *cfg);
} model_kind;

static const model_kind kinds[DT_ARCH_COUNT] = {
    [DT_ARCH_GPT2] = {dt_gpt_model_create, dt_gpt_model_check_split, dt_gpt_config_from_file,
                      dt_gpt_config_from_sizes},
    [DT_ARCH_LLAMA] = {dt_gpt_model_create, dt_gpt_model_check_split, dt_gpt_config_from_file,
                       dt_gpt_config_from_sizes},
    [DT_ARCH_DIT] = {dt_dit_model_create, dt_dit_model_check_split, dt_dit_config_from_file,
                     dt_dit_config_from_sizes},
};

static dt_status kind_of(dt_arch arch, const model_kind **out) {
    if ((int)arch < 0 || arch >= DT_ARCH_COUNT || !kinds[arch].create)
        return dt_err_set(DT_ERR_UNSUPPORTED, "model.arch=%s has no implementation",
                          dt_arch_name(arch));
    *out = &kinds[arch];
    return DT_OK;
}

dt_status dt_model_create(const dt_model_config *cfg, const dt_model_opts *opts, dt_mem *mem,
                          dt_model **out) {
    *out = NULL;
    const model_kind *k = NULL;
    DT_TRY(kind_of(cfg->arch, &k));
    return k->create(cfg, opts, mem, out);
}

void dt_model_free(dt_model *m) {
    if (!m)
        return;
    m->ops->free(m->self);
    free(m);
}

dt_model_split dt_model_split_of(const dt_plugin_config *p, int seq_len) {
    return (dt_model_split){.tp = p->tp_size,
                            .sp = p->sp_size,
                            .cp = p->cp_size,
                            .cp_chunks = p->cp_size > 1 && p->cp_split == DT_CP_ZIGZAG ? 2 : 1,
                            .sequence_tp = p->sp_mode == DT_SP_SPLIT_GATHER,
                            .seq_len = seq_len};
}

dt_status dt_model_check_split(const dt_model_config *cfg, const dt_model_split *s) {
    const model_kind *k = NULL;
    DT_TRY(kind_of(cfg->arch, &k));
    return k->check_split(cfg, s);
}

dt_status dt_model_check_buckets(const dt_config *c) {
    dt_buckets bk;
    DT_TRY(dt_config_buckets(c, &bk));
    dt_bucket_errors bad = {.n = 0};
    for (int k = 0; k < bk.n; k++) {
        dt_config ck = dt_config_of_bucket(c, &bk.b[k]);
        dt_model_split ms = dt_model_split_of(&c->plugin, ck.train.seq_len);
        dt_bucket_errors_add(&bad, dt_model_check_split(&ck.model, &ms), &bk, k);
    }
    return dt_bucket_errors_status(&bad);
}

/* The file's "arch" metadata picks the reader; a file without one (or with one dtrain does
 * not know) goes to GPT's, which recognises HuggingFace's GPT-2 and Llama files and names
 * an unknown arch in its error. */
/* A DiT's sequence is its clip's patch tokens, whatever max_seq_len a file recorded. */
static void derive_sequence(dt_model_config *m) {
    dt_config c = {.model = *m};
    dt_config_derive(&c);
    *m = c.model;
}

dt_status dt_model_config_from_file(const char *path, dt_model_config *cfg) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    const char *arch = dt_st_metadata(f, "arch");
    dt_arch a = DT_ARCH_GPT2;
    for (int i = 0; arch && i < DT_ARCH_COUNT; i++)
        if (strcmp(arch, dt_arch_name((dt_arch)i)) == 0 && kinds[i].config_from_file)
            a = (dt_arch)i;
    dt_st_close(f);
    DT_TRY(kinds[a].config_from_file(path, cfg));
    derive_sequence(cfg);
    return DT_OK;
}

dt_status dt_model_config_from_sizes(const dt_model_size *sizes, int n, dt_model_config *cfg) {
    const model_kind *k = NULL;
    DT_TRY(kind_of(cfg->arch, &k));
    return k->config_from_sizes(sizes, n, cfg);
}
