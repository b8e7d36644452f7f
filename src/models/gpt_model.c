/* GPT-2 and Llama behind the model interface (models/model.h): each operation is the dt_gpt
 * call of the same name, the batch's input and target are int32 token ids, and GPT-2's
 * embedding/LM-head sharing under a pipeline is reported as a tie. Owns the dt_gpt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt.h"

static const dt_model_config *config(const void *s) { return dt_gpt_config_of(s); }
static void bind_unit(void *s, int u, float *w, float *grad, dt_bf16 *w_lp) {
    dt_gpt_bind_unit(s, u, w, grad, w_lp);
}
static void set_hooks(void *s, const dt_model_hooks *h) { dt_gpt_set_hooks(s, h); }
static dt_param_tables tables(const void *s) { return dt_gpt_tables(s); }
static dt_model_arenas arenas(void *s) {
    return (dt_model_arenas){
        .w = dt_gpt_weights(s), .g = dt_gpt_grads(s), .lp = dt_gpt_weights_lp(s)};
}
static dt_comm *tp(const void *s) { return dt_gpt_par(s)->tp; }

/* GPT-2's wte is unit 0's first tensor and also the LM head: a pipeline stage holding the
 * final unit without unit 0 holds a copy of it (dt_gpt_tied_copy). The two end stages then
 * each tie one tensor: the original on the first, the copy on the last. */
static int ties(const void *s, dt_model_tie out[DT_MODEL_MAX_TIES]) {
    const dt_model_config *c = dt_gpt_config_of(s);
    bool first = dt_gpt_unit_local(s, 0) >= 0, last = dt_gpt_unit_local(s, c->n_layer + 1) >= 0;
    if (c->arch != DT_ARCH_GPT2 || first == last)
        return 0;
    int copy = dt_gpt_tied_copy(s);
    out[0] = copy >= 0 ? (dt_model_tie){.param = copy, .copy = true}
                       : (dt_model_tie){.param = 0, .copy = false};
    return 1;
}

static void sync_lp(void *s) { dt_gpt_sync_lp(s); }
static void fresh_grads(void *s, int unit) { dt_gpt_fresh_grads(s, unit); }
static bool act_disk_stats(const void *s, dt_model_disk_stats *out) {
    return dt_gpt_act_disk_stats(s, out);
}

static dt_status forward_units(void *s, int slot, int u0, int u1, const dt_batch *b) {
    return dt_gpt_forward_units(s, slot, u0, u1, b->input, b->B, b->T);
}
static dt_status loss_slot(void *s, int slot, const dt_batch *b, float grad_scale, bool backward,
                           double *loss_sum) {
    return dt_gpt_loss_slot(s, slot, b->target, b->B, b->T, grad_scale, backward, loss_sum);
}
static dt_status backward_units(void *s, int slot, int grad, int u0, int u1, const dt_batch *b,
                                bool split) {
    return dt_gpt_backward_units(s, slot, grad, u0, u1, b->input, b->B, b->T, split);
}
static dt_status weight_units(void *s, int slot, int u0, int u1, const dt_batch *b) {
    return dt_gpt_weight_units(s, slot, u0, u1, b->B, b->T);
}
static int64_t boundary_count(const void *s, int B, int T) {
    return dt_gpt_boundary_count(s, B, T);
}
static float *boundary(void *s, int slot, int position, int B, int T) {
    return dt_gpt_boundary(s, slot, position, B, T);
}
static float *boundary_grad(void *s, int grad, int B, int T) {
    return dt_gpt_boundary_grad(s, grad, B, T);
}
static void evaluating(void *s, bool on) {
    if (on)
        dt_gpt_begin_eval(s);
    else
        dt_gpt_drop_saved(s);
}
static dt_status gather_full(void *s, const float *local, float *full) {
    return dt_gpt_gather_full(s, local, full);
}
static double flops_per_sample(const void *s, int T) { return dt_gpt_flops_per_sample(s, T); }
static dt_status save(const void *s, const float *w, const char *path) {
    return dt_gpt_save(s, w, path);
}
static dt_status load(const void *s, float *w, const char *path) { return dt_gpt_load(s, w, path); }

static int sizes(const void *s, dt_model_size *out) {
    const dt_model_config *c = dt_gpt_config_of(s);
    dt_model_size v[] = {{"n_layer", c->n_layer},           {"n_head", c->n_head},
                         {"n_kv_head", dt_gpt_kv_heads(c)}, {"n_embd", c->n_embd},
                         {"vocab_size", c->vocab_size},     {"ffn_hidden", dt_gpt_ffn_hidden(c)}};
    int n = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < n; i++)
        out[i] = v[i];
    return n;
}

dt_status dt_gpt_config_from_sizes(const dt_model_size *sz, int n, dt_model_config *c) {
    static const char *const keys[] = {"n_layer", "n_head",     "n_kv_head",
                                       "n_embd",  "vocab_size", "ffn_hidden"};
    int v[6];
    for (int k = 0; k < 6; k++) {
        int i = 0;
        while (i < n && strcmp(sz[i].key, keys[k]) != 0)
            i++;
        if (i == n || sz[i].value < 1 || sz[i].value > (1 << 24))
            return dt_err_set(DT_ERR_FORMAT, "model %s: size %s is missing or not in [1, 2^24]",
                              dt_arch_name(c->arch), keys[k]);
        v[k] = (int)sz[i].value;
    }
    bool llama = c->arch == DT_ARCH_LLAMA; /* GPT-2 derives both (0 = derived) */
    c->n_layer = v[0];
    c->n_head = v[1];
    c->n_kv_head = llama ? v[2] : 0;
    c->n_embd = v[3];
    c->vocab_size = v[4];
    c->ffn_hidden = llama ? v[5] : 0;
    return DT_OK;
}

static void describe(const void *s, char *out, size_t n) {
    const dt_model_config *c = dt_gpt_config_of(s);
    snprintf(out, n, "%d layers, %d heads (%d kv), n_embd %d, vocab %d", c->n_layer, c->n_head,
             dt_gpt_kv_heads(c), c->n_embd, c->vocab_size);
}

static dt_status logits_last(void *s, const int32_t *tokens, int T, float *logits) {
    return dt_gpt_logits_last(s, tokens, T, logits);
}

static void free_gpt(void *s) { dt_gpt_free(s); }

static const dt_model_ops gpt_ops = {
    .free = free_gpt,
    .config = config,
    .bind_unit = bind_unit,
    .set_hooks = set_hooks,
    .tables = tables,
    .arenas = arenas,
    .tp = tp,
    .ties = ties,
    .sync_lp = sync_lp,
    .fresh_grads = fresh_grads,
    .act_disk_stats = act_disk_stats,
    .evaluating = evaluating,
    .forward_units = forward_units,
    .loss_slot = loss_slot,
    .backward_units = backward_units,
    .weight_units = weight_units,
    .boundary_count = boundary_count,
    .boundary = boundary,
    .boundary_grad = boundary_grad,
    .gather_full = gather_full,
    .flops_per_sample = flops_per_sample,
    .save = save,
    .load = load,
    .sizes = sizes,
    .describe = describe,
    .logits_last = logits_last,
};

dt_status dt_gpt_model_create(const dt_model_config *cfg, const dt_gpt_opts *opts, dt_mem *mem,
                              dt_model **out) {
    *out = NULL;
    dt_model *m = calloc(1, sizeof *m);
    if (!m)
        return dt_err_set(DT_ERR_OOM, "model: out of memory");
    dt_gpt *g = NULL;
    dt_status st = dt_gpt_init(cfg, opts, mem, &g);
    if (st != DT_OK) {
        free(m);
        return st;
    }
    *m = (dt_model){.ops = &gpt_ops, .self = g};
    *out = m;
    return DT_OK;
}
