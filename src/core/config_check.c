/* Cross-field validation of a dt_config (see config.h): every problem found is reported at
 * once, in one message that names each offending key. */
#include "core/config.h"
#include "core/buckets.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

int dt_config_zero_stage(const dt_config *c) {
    switch (c->plugin.type) {
    case DT_PLUGIN_ZERO1:
        return 1;
    case DT_PLUGIN_ZERO2:
        return 2;
    case DT_PLUGIN_ZERO3:
        return 3;
    default:
        return c->plugin.zero_stage;
    }
}

typedef struct problems {
    char text[1024];
    size_t len;
    int n_arg, n_unsupported;
} problems;

static void problem(problems *p, bool unsupported, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(problems *p, bool unsupported, const char *fmt, ...) {
    if (unsupported)
        p->n_unsupported++;
    else
        p->n_arg++;
    if (p->len + 3 >= sizeof p->text)
        return; /* full: the count still says how many there were */
    if (p->len)
        p->len += (size_t)snprintf(p->text + p->len, sizeof p->text - p->len, "; ");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
    va_end(ap);
    p->len += n > 0 ? (size_t)n : 0;
    if (p->len >= sizeof p->text)
        p->len = sizeof p->text - 1;
}

#define POSITIVE(p, sec, k)                                                                        \
    do {                                                                                           \
        if (c->sec.k <= 0)                                                                         \
            problem(p, false, #sec "." #k "=%d must be > 0", c->sec.k);                            \
    } while (0)
#define NONNEG(p, sec, k)                                                                          \
    do {                                                                                           \
        if (c->sec.k < 0)                                                                          \
            problem(p, false, #sec "." #k "=%g must be >= 0", (double)c->sec.k);                   \
    } while (0)

/* A DiT's tokens per clip, or 0 when its clip and patch sizes do not make a whole number. */
static int dit_tokens(const dt_model_config *m) {
    int dims[3] = {m->frames, m->height, m->width}, patch[3] = {m->patch_t, m->patch_h, m->patch_w};
    int64_t n = 1;
    for (int i = 0; i < 3; i++) {
        if (dims[i] <= 0 || patch[i] <= 0 || dims[i] % patch[i])
            return 0;
        n *= dims[i] / patch[i];
    }
    return n > (1 << 24) ? 0 : (int)n;
}

void dt_config_derive(dt_config *c) {
    if (c->model.arch != DT_ARCH_DIT || !dit_tokens(&c->model))
        return;
    c->train.seq_len = c->model.max_seq_len = dit_tokens(&c->model);
}

static void check_dit(const dt_config *c, problems *p) {
    const dt_model_config *m = &c->model;
    POSITIVE(p, model, frames);
    POSITIVE(p, model, channels);
    POSITIVE(p, model, height);
    POSITIVE(p, model, width);
    POSITIVE(p, model, patch_t);
    POSITIVE(p, model, patch_h);
    POSITIVE(p, model, patch_w);
    const struct {
        const char *dim, *patch;
        int n, k;
    } div[] = {{"frames", "patch_t", m->frames, m->patch_t},
               {"height", "patch_h", m->height, m->patch_h},
               {"width", "patch_w", m->width, m->patch_w}};
    for (int i = 0; i < 3; i++)
        if (div[i].n > 0 && div[i].k > 0 && div[i].n % div[i].k)
            problem(p, false,
                    "model.%s=%d is not a multiple of model.%s=%d (a clip is cut "
                    "into whole patches)",
                    div[i].dim, div[i].n, div[i].patch, div[i].k);
    if (m->n_classes < 0)
        problem(p, false, "model.n_classes=%d must be >= 0 (0 = unconditional)", m->n_classes);
    if ((int)m->attn < 0 || m->attn >= DT_DIT_ATTN_COUNT)
        problem(p, false, "model.attn=%d is not full or spatial_temporal", (int)m->attn);
    if (m->text_len < 0 || m->text_len > DT_DIT_MAX_TEXT)
        problem(p, false, "model.text_len=%d must be in 0..%d (0 = no text)", m->text_len,
                DT_DIT_MAX_TEXT);
    if (m->text_dim < 0 || m->text_dim > DT_DIT_MAX_TEXT_DIM)
        problem(p, false, "model.text_dim=%d must be in 0..%d (0 = the caption's bytes)",
                m->text_dim, DT_DIT_MAX_TEXT_DIM);
    if (!(m->timestep_shift >= 0 && m->timestep_shift <= DT_DIT_MAX_SHIFT))
        problem(p, false, "model.timestep_shift=%g must be in 0..%g (0 or 1 = no shift)",
                (double)m->timestep_shift, (double)DT_DIT_MAX_SHIFT);
    if (m->n_embd > 0 && m->n_embd < 6)
        problem(p, false, "model.n_embd=%d is too small for the DiT's 3-D position code (>= 6)",
                m->n_embd);
    int tokens = dit_tokens(m);
    if (tokens && c->train.seq_len != tokens)
        problem(p, false,
                "train.seq_len=%d: a DiT's sequence is its clip's %d patch tokens "
                "(dt_config_derive sets it)",
                c->train.seq_len, tokens);
}

static void check_model(const dt_config *c, problems *p) {
    const dt_model_config *m = &c->model;
    if (m->arch == DT_ARCH_DIT)
        check_dit(c, p);
    else if (m->text_len || m->text_dim)
        problem(p, false,
                "model.text_len=%d, text_dim=%d: text conditioning is a DiT's "
                "(model.arch=dit)",
                m->text_len, m->text_dim);
    else if (m->timestep_shift != 1.0f && m->timestep_shift != 0.0f)
        problem(p, false,
                "model.timestep_shift=%g: the flow's timestep shift is a DiT's "
                "(model.arch=dit)",
                (double)m->timestep_shift);
    POSITIVE(p, model, n_layer);
    POSITIVE(p, model, n_head);
    POSITIVE(p, model, n_embd);
    POSITIVE(p, model, vocab_size);
    POSITIVE(p, model, max_seq_len);
    if (m->max_seq_len > (1 << 24))
        problem(p, false, "model.max_seq_len=%d is over dtrain's limit of 16777216 tokens",
                m->max_seq_len);
    NONNEG(p, model, ffn_hidden);
    if ((int)m->arch < 0 || m->arch >= DT_ARCH_COUNT)
        problem(p, false, "model.arch=%d is not a known architecture", (int)m->arch);
    if (!(m->norm_eps > 0))
        problem(p, false, "model.norm_eps=%g must be > 0", (double)m->norm_eps);
    if (m->n_head > 0 && m->n_embd > 0 && m->n_embd % m->n_head)
        problem(p, false, "model.n_embd=%d is not divisible by model.n_head=%d", m->n_embd,
                m->n_head);
    if (m->arch == DT_ARCH_LLAMA) {
        if (m->n_head > 0 && m->n_embd > 0 && m->n_embd % m->n_head == 0 &&
            (m->n_embd / m->n_head) % 2)
            problem(p, false,
                    "model.n_embd/model.n_head=%d/%d=%d: llama's head size must be even (RoPE "
                    "rotates pairs)",
                    m->n_embd, m->n_head, m->n_embd / m->n_head);
        if (m->n_kv_head < 0)
            problem(p, false, "model.n_kv_head=%d must be >= 0 (0 = n_head)", m->n_kv_head);
        else if (m->n_kv_head > 0 && m->n_head > 0 && m->n_head % m->n_kv_head)
            problem(p, false, "model.n_kv_head=%d does not divide model.n_head=%d", m->n_kv_head,
                    m->n_head);
        if (!(m->rope_theta > 0))
            problem(p, false, "model.rope_theta=%g must be > 0", (double)m->rope_theta);
    } else if (m->n_kv_head != 0 && m->n_kv_head != m->n_head) {
        problem(p, false,
                "model.n_kv_head=%d: gpt2 has no grouped-query attention; use 0 or "
                "model.n_head=%d",
                m->n_kv_head, m->n_head);
    }
}

static void check_train(const dt_config *c, problems *p) {
    const dt_train_config *t = &c->train;
    POSITIVE(p, train, batch_size);
    POSITIVE(p, train, seq_len);
    NONNEG(p, train, steps);
    NONNEG(p, train, micro_batch_size);
    NONNEG(p, train, eval_every);
    NONNEG(p, train, sample_tokens);
    NONNEG(p, train, comm_timeout);
    if (!(c->train.ema_decay >= 0 && c->train.ema_decay < 1))
        problem(p, false,
                "train.ema_decay=%g must be in [0, 1) (0: no weight average; Open-Sora "
                "uses 0.9999)",
                (double)c->train.ema_decay);
    NONNEG(p, train, rebalance_every);
    if (!(t->rebalance_margin >= 0 && t->rebalance_margin <= 10))
        problem(p, false,
                "train.rebalance_margin=%g must be in [0, 10] (the share by which "
                "the slowest pipeline chunk may exceed their mean before boundaries move)",
                (double)t->rebalance_margin);
    if (t->rebalance_every > 0 && c->plugin.pp_size <= 1)
        problem(p, false,
                "train.rebalance_every=%d moves pipeline stage boundaries, but "
                "plugin.pp_size=%d runs no pipeline (set pp_size > 1, or rebalance_every = 0)",
                t->rebalance_every, c->plugin.pp_size);
    if (t->log_every < 1)
        problem(p, false, "train.log_every=%d must be >= 1", t->log_every);
    if (t->eval_batches < 1)
        problem(p, false, "train.eval_batches=%d must be >= 1", t->eval_batches);
    if (t->seq_len > c->model.max_seq_len && c->model.max_seq_len > 0)
        problem(p, false, "train.seq_len=%d is longer than model.max_seq_len=%d", t->seq_len,
                c->model.max_seq_len);
    if (t->micro_batch_size > 0 && t->batch_size > 0 && t->batch_size % t->micro_batch_size)
        problem(p, false,
                "train.micro_batch_size=%d does not divide train.batch_size=%d (0 = no "
                "accumulation)",
                t->micro_batch_size, t->batch_size);
}

static void check_optim(const dt_config *c, problems *p) {
    const dt_optim_config *o = &c->optim;
    NONNEG(p, optim, lr);
    NONNEG(p, optim, min_lr);
    NONNEG(p, optim, warmup_steps);
    NONNEG(p, optim, weight_decay);
    if (o->min_lr > o->lr)
        problem(p, false, "optim.min_lr=%g is greater than optim.lr=%g", (double)o->min_lr,
                (double)o->lr);
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        problem(p, false, "optim.beta1=%g must be in [0, 1)", (double)o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        problem(p, false, "optim.beta2=%g must be in [0, 1)", (double)o->beta2);
    if (!(o->eps > 0))
        problem(p, false, "optim.eps=%g must be > 0", (double)o->eps);
    if ((int)o->schedule < 0 || o->schedule >= DT_SCHED_COUNT)
        problem(p, false, "optim.schedule=%d is not a known schedule", (int)o->schedule);
}

static void check_plugin(const dt_config *c, problems *p) {
    const dt_plugin_config *g = &c->plugin;
    static const struct {
        const char *key, *what;
        size_t off;
    } degrees[] = {
        {"tp_size", "tensor", offsetof(dt_plugin_config, tp_size)},
        {"sp_size", "sequence", offsetof(dt_plugin_config, sp_size)},
        {"pp_size", "pipeline", offsetof(dt_plugin_config, pp_size)},
        {"cp_size", "context", offsetof(dt_plugin_config, cp_size)},
    };
    for (int i = 0; i < 4; i++) {
        int d;
        memcpy(&d, (const char *)g + degrees[i].off, sizeof d);
        if (d < 1)
            problem(p, false, "plugin.%s=%d must be >= 1", degrees[i].key, d);
    }
    NONNEG(p, plugin, microbatches);
    if (g->pp_chunks < 1)
        problem(p, false, "plugin.pp_chunks=%d must be >= 1", g->pp_chunks);
    static const char *const schedules[] = {"gpipe", "1f1b", "interleaved", "zbh1"};
    bool known = strncmp(g->pp_schedule, "file:", 5) == 0 && g->pp_schedule[5];
    for (int i = 0; i < 4; i++)
        known |= strcmp(g->pp_schedule, schedules[i]) == 0;
    if (!known)
        problem(p, false,
                "plugin.pp_schedule=\"%s\" is not gpipe, 1f1b, interleaved, zbh1 or "
                "file:PATH",
                g->pp_schedule);
    else if (strcmp(g->pp_schedule, "interleaved") == 0 && g->pp_chunks < 2)
        problem(p, false,
                "plugin.pp_schedule=interleaved needs plugin.pp_chunks >= 2 (model "
                "chunks per rank); got %d",
                g->pp_chunks);
    else if (g->pp_chunks > 1 && strcmp(g->pp_schedule, "interleaved") != 0 &&
             strncmp(g->pp_schedule, "file:", 5) != 0)
        problem(p, false, "plugin.pp_chunks=%d needs plugin.pp_schedule=interleaved (or a file)",
                g->pp_chunks);
    if ((int)g->sp_mode < 0 || g->sp_mode >= DT_SP_MODE_COUNT)
        problem(p, false, "plugin.sp_mode=%d is not a known mode", (int)g->sp_mode);
    else if (g->sp_mode == DT_SP_SPLIT_GATHER && g->sp_size > 1)
        problem(p, false,
                "plugin.sp_mode=split_gather splits the sequence over the tp_size "
                "ranks and takes no ranks of its own: set sp_size=1 (got %d), or use "
                "sp_mode=all_to_all",
                g->sp_size);
    if ((int)g->cp_split < 0 || g->cp_split >= DT_CP_SPLIT_COUNT)
        problem(p, false, "plugin.cp_split=%d is not a known split", (int)g->cp_split);
    NONNEG(p, plugin, grad_clip);
    if (g->ac_every < 1)
        problem(p, false, "plugin.ac_every=%d must be >= 1", g->ac_every);
    if (g->loss_scale_window < 1)
        problem(p, false, "plugin.loss_scale_window=%d must be >= 1", g->loss_scale_window);
    if (g->offload == DT_OFFLOAD_DISK && !g->offload_dir[0])
        problem(p, false, "plugin.offload=disk needs plugin.offload_dir");

    if (!(g->initial_scale >= 1.0f && g->initial_scale <= 4294967296.0f))
        problem(p, false, "plugin.initial_scale=%g must be between 1 and 2^32 (4294967296)",
                (double)g->initial_scale);

    if ((int)g->offload < 0 || g->offload >= DT_OFFLOAD_COUNT)
        problem(p, false, "plugin.offload=%d is not a known mode", (int)g->offload);
    if ((int)g->act_offload < 0 || g->act_offload >= DT_OFFLOAD_COUNT)
        problem(p, false, "plugin.act_offload=%d is not a known mode", (int)g->act_offload);
    if (g->act_offload == DT_OFFLOAD_DISK && !g->act_offload_dir[0])
        problem(p, false, "plugin.act_offload=disk needs plugin.act_offload_dir");
    if (g->act_offload == DT_OFFLOAD_DISK && c->model.arch == DT_ARCH_DIT)
        problem(p, false,
                "plugin.act_offload=disk is built for GPT-2 and Llama; the DiT keeps "
                "its activations in memory (ac = full or act_compress = int8 shrink them)");
    if (!(g->offload_window_mb > 0))
        problem(p, false, "plugin.offload_window_mb=%g must be > 0", (double)g->offload_window_mb);

    if (!(g->bucket_mb > 0))
        problem(p, false, "plugin.bucket_mb=%g must be > 0", (double)g->bucket_mb);
    if ((int)g->type < 0 || g->type >= DT_PLUGIN_COUNT)
        problem(p, false, "plugin.type=%d is not a known plugin", (int)g->type);
    if ((int)g->precision < 0 || g->precision >= DT_PREC_COUNT)
        problem(p, false, "plugin.precision=%d is not a known precision", (int)g->precision);
    if (g->zero_stage < 0 || g->zero_stage > 3) {
        problem(p, false, "plugin.zero_stage=%d must be 0, 1, 2 or 3", g->zero_stage);
    } else if (g->zero_stage != 0 && g->zero_stage != dt_config_zero_stage(c)) {
        problem(p, false,
                "plugin.zero_stage=%d contradicts plugin.type=%s (which means stage %d); drop "
                "zero_stage or make them agree",
                g->zero_stage, dt_plugin_type_name(g->type), dt_config_zero_stage(c));
    } else if (g->zero_stage != 0 && (g->type == DT_PLUGIN_NONE || g->type == DT_PLUGIN_DDP)) {
        problem(p, false,
                "plugin.zero_stage=%d needs plugin.type=zero%d or hybrid (type %s does not "
                "shard)",
                g->zero_stage, g->zero_stage, dt_plugin_type_name(g->type));
    }
}

/* int8 storage compresses what the blocks keep for backward: under ac=full with every block
 * checkpointed they keep nothing but their inputs, which stay fp32 */
static void check_act_memory(const dt_config *c, problems *p) {
    const dt_plugin_config *g = &c->plugin;
    if (g->act_compress == DT_ACT_COMPRESS_INT8 && g->ac == DT_AC_FULL &&
        (g->ac_every == 1 || c->model.n_layer == 1))
        problem(p, false,
                "plugin.act_compress=int8 has nothing to compress under plugin.ac=full "
                "with plugin.ac_every=%d and model.n_layer=%d (every block keeps only its "
                "fp32 input); use ac_every >= 2, ac=selective, or act_compress=none",
                g->ac_every, c->model.n_layer);
}

static void check_checkpoint(const dt_config *c, problems *p) {
    const dt_checkpoint_config *k = &c->checkpoint;
    NONNEG(p, checkpoint, every);
    NONNEG(p, checkpoint, keep);
    if (!k->dir[0] && k->every > 0)
        problem(p, false, "checkpoint.every=%d needs checkpoint.dir (or set every = 0)", k->every);
    if (!k->dir[0] && k->resume[0])
        problem(p, false, "checkpoint.resume=\"%s\" needs checkpoint.dir", k->resume);
}

static void check_data(const dt_config *c, problems *p) {
    const dt_data_config *d = &c->data;
    bool video = c->model.arch == DT_ARCH_DIT;
    if ((int)d->source < 0 || d->source >= DT_SOURCE_COUNT)
        problem(p, false, "data.source=%d is not a known source", (int)d->source);
    else if (video == (d->source == DT_SOURCE_TOKENS))
        problem(p, false,
                "data.source=%s does not feed model.arch=%s (a DiT trains on clips: "
                "data.source=bounce, clips or latents; a language model on token shards: "
                "data.source=tokens)",
                dt_data_source_name(d->source), dt_arch_name(c->model.arch));
    bool from_disk = d->source == DT_SOURCE_CLIPS || d->source == DT_SOURCE_LATENTS;
    if (from_disk && !d->train[0])
        problem(p, false, "data.source=%s needs data.train: a folder of clip shards (%s)",
                dt_data_source_name(d->source),
                d->source == DT_SOURCE_CLIPS ? "dtrain prepare --video DIR --out OUT writes "
                                               "OUT/train and OUT/val"
                                             : "safetensors files with \"latents\" [clips, "
                                               "channels, frames, height, width]");
    if (from_disk && video && c->model.n_classes != 0)
        problem(p, false,
                "model.n_classes=%d: data.source=%s clips carry no class label; "
                "set model.n_classes=0 (unconditional)",
                c->model.n_classes, dt_data_source_name(d->source));
    bool bytes_only = d->source == DT_SOURCE_BOUNCE || d->source == DT_SOURCE_CLIPS;
    if (video && bytes_only && c->model.text_len > 0 && c->model.text_dim != 0)
        problem(p, false,
                "model.text_dim=%d: data.source=%s clips carry captions as text, which the "
                "model's byte encoder reads; set model.text_dim=0 (precomputed embeddings "
                "come with data.source=latents)",
                c->model.text_dim, dt_data_source_name(d->source));
    if (d->source == DT_SOURCE_BOUNCE && d->shapes < 1)
        problem(p, false, "data.shapes=%d must be >= 1 (shapes per clip)", d->shapes);
    if (!(d->label_dropout >= 0 && d->label_dropout <= 1))
        problem(p, false,
                "data.label_dropout=%g must be in [0, 1] (the chance a clip trains "
                "with the null label and text)",
                (double)d->label_dropout);
    if (d->source == DT_SOURCE_TOKENS && !c->data.train[0])
        problem(p, false,
                "data.train is empty: give a token shard (dtrain prepare --input "
                "TEXT --out DIR writes DIR/train.bin and DIR/val.bin)");
    if (d->doc_mask && video)
        problem(p, false,
                "data.doc_mask keeps documents of packed token sequences apart; a "
                "DiT's clips have none (set data.doc_mask=false)");
    if (d->doc_len < 0)
        problem(p, false,
                "data.doc_len=%d must be >= 0 (the mean document length in tokens "
                "dtrain plan assumes; 0: unknown)",
                d->doc_len);
    if (d->eot_token < -1 || d->eot_token >= c->model.vocab_size)
        problem(p, false,
                "data.eot_token=%d must be a token id below model.vocab_size=%d (or "
                "-1: the tokenizer's)",
                d->eot_token, c->model.vocab_size);
}

/* Each bucket a clip the model cuts into whole patches (the layout's checks of its batch
 * and tokens are per bucket, where the layout is made). */
static void check_buckets(const dt_config *c, problems *p) {
    if (!c->data.buckets[0])
        return;
    if (c->model.arch != DT_ARCH_DIT) {
        problem(p, false,
                "data.buckets=\"%s\": buckets of clip shape are a DiT's "
                "(model.arch=dit)",
                c->data.buckets);
        return;
    }
    dt_buckets bk;
    if (dt_config_buckets(c, &bk) != DT_OK) {
        problem(p, false, "%s", dt_err_msg());
        return;
    }
    const dt_model_config *m = &c->model;
    for (int k = 0; k < bk.n; k++) {
        const dt_bucket *b = &bk.b[k];
        int dims[3] = {b->frames, b->height, b->width},
            patch[3] = {m->patch_t, m->patch_h, m->patch_w};
        static const char *const names[3] = {"frames", "height", "width"};
        static const char *const pnames[3] = {"patch_t", "patch_h", "patch_w"};
        for (int i = 0; i < 3; i++)
            if (patch[i] > 0 && dims[i] % patch[i])
                problem(p, false,
                        "data.buckets: bucket %d (%dx%dx%d): its %s %d is not a "
                        "multiple of model.%s=%d (a clip is cut into whole patches)",
                        k, b->frames, b->height, b->width, names[i], dims[i], pnames[i], patch[i]);
    }
}

dt_status dt_config_validate(const dt_config *c) {
    if (!c)
        return dt_err_set(DT_ERR_ARG, "%s: NULL config", __func__);
    problems p = {.len = 0};
    check_model(c, &p);
    check_train(c, &p);
    check_optim(c, &p);
    check_plugin(c, &p);
    check_act_memory(c, &p);
    check_checkpoint(c, &p);
    check_data(c, &p);
    check_buckets(c, &p);
    if (!p.n_arg && !p.n_unsupported)
        return DT_OK;
    return dt_err_set(p.n_arg ? DT_ERR_ARG : DT_ERR_UNSUPPORTED, "%s", p.text);
}

dt_status dt_config_validate_model(const dt_model_config *m, const char *origin) {
    dt_config c = {.model = *m};
    dt_config_derive(&c); /* a shape alone (a DiT's sequence is its clip's patch tokens) */
    problems p = {.len = 0};
    check_model(&c, &p);
    if (!p.n_arg && !p.n_unsupported)
        return DT_OK;
    return dt_err_set(DT_ERR_ARG, "%s: %s", origin, p.text);
}
