/* The video DiT through the model interface (models/model.h, models/dit_model.c) against the
 * one-process dt_dit calls whose forward and gradients test_dit.c checks against a double
 * reference and finite differences:
 *   - predict equals dt_dit_forward's output, bit for bit, for both attention kinds;
 *   - forward_units + loss_slot + backward_units give the MSE of the batch and the gradient
 *     dt_dit_backward gives for that MSE's gradient (bit for bit);
 *   - two slots in flight (forward A, forward B, backward B, backward A) accumulate the two
 *     micro-batches' gradients, and a model cut into two pipeline stages in one process
 *     (boundary tensors copied by hand, conditioning included) gives the whole model's;
 *   - activation checkpointing (full, selective) and the split backward (weight passes later)
 *     give the same gradient bits as neither;
 *   - bf16 matmuls, and int8 storage of the saved tensors, stay within their rounding of fp32;
 *   - sizes, config_from_sizes, save/load and config_from_file round-trip; the sampler over
 *     the interface gives dt_flow_sample's clips; bad splits, labels and batches are errors;
 *   - a model of several clip shapes (data.buckets) gives, in each shape and after another,
 *     the loss and gradient bits of a model of that shape alone, and holds the largest
 *     arenas of them;
 *   - the activation and transient arenas are the bytes the written-out formulas (what the
 *     planner predicts) give, over slots, held units, checkpointing, bf16, split backward,
 *     int8 storage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "harness.h"
#include "models/dit.h"
#include "models/flow.h"
#include "models/model.h"

enum { B = 3 };

static dt_model_config tiny(dt_dit_attn attn) {
    return (dt_model_config){.arch = DT_ARCH_DIT, .frames = 4, .channels = 2, .height = 6,
                             .width = 4, .patch_t = 2, .patch_h = 2, .patch_w = 1, .n_layer = 3,
                             .n_head = 2, .n_embd = 12, .n_classes = 3, .attn = attn,
                             .max_seq_len = 24};
}

/* A micro-batch of clips in the interface's layout, and the same as separate arrays. */
typedef struct batch {
    int64_t clip;
    float *x, *t, *rows, *v;
    int32_t *labels;
} batch;

static batch make_batch(const dt_dit_config *c, int n, uint64_t seed) {
    batch b = {.clip = dt_dit_clip_numel(c)};
    int64_t in = dt_dit_input_floats(c);
    b.x = malloc(sizeof(float) * n * b.clip);
    b.v = malloc(sizeof(float) * n * b.clip);
    b.t = malloc(sizeof(float) * n);
    b.rows = malloc(sizeof(float) * n * in);
    b.labels = malloc(sizeof(int32_t) * n);
    dt_test_fill(b.x, n * b.clip, seed, 1.0f);
    dt_test_fill(b.v, n * b.clip, seed + 1, 1.0f);
    for (int i = 0; i < n; i++) {
        b.t[i] = 0.1f + 0.3f * i;
        b.labels[i] = (int32_t)((seed + i) % (c->n_classes + 1)); /* the null class too */
        memcpy(b.rows + i * in, b.x + i * b.clip, sizeof(float) * b.clip);
        b.rows[i * in + b.clip] = b.t[i];
        b.rows[i * in + b.clip + 1] = (float)b.labels[i];
    }
    return b;
}

static void free_batch(batch *b) {
    free(b->x), free(b->t), free(b->rows), free(b->v), free(b->labels);
}

static dt_batch view(const batch *b, int first, int n, const dt_dit_config *c) {
    return (dt_batch){.input = b->rows + first * dt_dit_input_floats(c),
                      .target = b->v + first * b->clip, .B = n, .T = dt_dit_tokens(c)};
}

/* random weights everywhere (the zero initialisation hides most of the model) */
static void random_weights(float *w, int64_t n) { dt_test_fill(w, n, 99, 0.3f); }

static dt_model *create(const dt_model_config *mc, dt_model_opts o, dt_mem *mem) {
    dt_model *m = NULL;
    o.T = 24;
    DT_CHECK_OK(dt_model_create(mc, &o, mem, &m));
    return m;
}

/* The interface against dt_dit on one batch: predict, loss and gradient. */
static void check_against_dit(dt_dit_attn attn) {
    dt_model_config mc = tiny(attn);
    dt_dit_config c = dt_dit_config_from_model(&mc);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = create(&mc, (dt_model_opts){.B = B, .training = true}, mem);
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = B, .training = true}, mem, &d));
    if (!m || !d)
        return;
    int64_t nw = dt_model_numel(m);
    DT_CHECK(nw == dt_dit_numel(d), "arena %lld vs %lld", (long long)nw,
             (long long)dt_dit_numel(d));
    random_weights(dt_model_weights(m), nw);
    memcpy(dt_dit_weights(d), dt_model_weights(m), sizeof(float) * nw);
    batch bt = make_batch(&c, B, 5);
    dt_batch b = view(&bt, 0, B, &c);
    float *pred = malloc(sizeof(float) * B * bt.clip), *dout = malloc(sizeof(float) * B * bt.clip);
    DT_CHECK_OK(dt_model_predict(m, &b, pred));
    DT_CHECK_OK(dt_dit_forward(d, bt.x, bt.t, bt.labels, NULL, B));
    DT_CHECK(!memcmp(pred, dt_dit_output(d), sizeof(float) * B * bt.clip),
             "attn %d: predict differs from dt_dit_forward", (int)attn);
    /* the loss: the batch's MSE; gradient of gs * loss_sum = 2 gs (pred - v) / P per value */
    float gs = 0.37f;
    int P = dt_dit_patch_dim(&c), S = dt_dit_tokens(&c);
    double loss_sum, mse = dt_flow_mse(pred, bt.v, B * bt.clip, 1.0f, NULL);
    for (int64_t i = 0; i < B * bt.clip; i++)
        dout[i] = (float)(2.0 * gs * ((double)pred[i] - bt.v[i]) / P);
    dt_model_zero_grad(m);
    DT_CHECK_OK(dt_model_forward(m, &b));
    DT_CHECK_OK(dt_model_loss(m, &b, gs, true, &loss_sum));
    DT_CHECK_OK(dt_model_backward(m, &b));
    DT_CHECK_CLOSE(loss_sum / (B * S), mse, 1e-12);
    dt_dit_zero_grad(d);
    DT_CHECK_OK(dt_dit_backward(d, dout, B));
    DT_CHECK(!memcmp(dt_model_grads(m), dt_dit_grads(d), sizeof(float) * nw),
             "attn %d: interface gradient differs from dt_dit_backward's", (int)attn);
    free(pred), free(dout);
    free_batch(&bt);
    dt_dit_free(d);
    dt_model_free(m);
    dt_mem_free(mem);
}

/* One step's gradient of the whole batch in two micro-batches (A = clips 0..1, B = clip 2)
 * through a model built with `o`, each micro-batch on its own slot; with o.split_backward
 * the backward is split and the weight passes come after both backwards, as a zero-bubble
 * schedule runs them. */
static void grads_two_slots(const dt_model_config *mc, dt_model_opts o, const float *w,
                            const batch *bt, float *grad, double *loss) {
    dt_dit_config c = dt_dit_config_from_model(mc);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    o.B = 2, o.n_slots = 2, o.training = true;
    dt_model *m = create(mc, o, mem);
    if (!m)
        return;
    int64_t nw = dt_model_numel(m);
    memcpy(dt_model_weights(m), w, sizeof(float) * nw);
    dt_model_sync_lp(m);
    dt_model_zero_grad(m);
    int U = dt_model_n_units(m);
    dt_batch a = view(bt, 0, 2, &c), b = view(bt, 2, 1, &c);
    double la, lb;
    DT_CHECK_OK(dt_model_forward_units(m, 0, 0, U, &a));
    DT_CHECK_OK(dt_model_loss_slot(m, 0, &a, 0.5f, true, &la));
    DT_CHECK_OK(dt_model_forward_units(m, 1, 0, U, &b));
    DT_CHECK_OK(dt_model_loss_slot(m, 1, &b, 0.5f, true, &lb));
    DT_CHECK_OK(dt_model_backward_units(m, 1, 0, 0, U, &b, o.split_backward));
    DT_CHECK_OK(dt_model_backward_units(m, 0, 0, 0, U, &a, o.split_backward));
    if (o.split_backward) {
        DT_CHECK_OK(dt_model_weight_units(m, 1, 0, U, &b));
        DT_CHECK_OK(dt_model_weight_units(m, 0, 0, U, &a));
    }
    memcpy(grad, dt_model_grads(m), sizeof(float) * nw);
    *loss = la + lb;
    dt_model_free(m);
    dt_mem_free(mem);
}

/* The same step on one slot, micro-batch after micro-batch (the plain order). */
static void grads_one_slot(const dt_model_config *mc, const float *w, const batch *bt,
                           float *grad, double *loss) {
    dt_dit_config c = dt_dit_config_from_model(mc);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = create(mc, (dt_model_opts){.B = 2, .training = true}, mem);
    if (!m)
        return;
    memcpy(dt_model_weights(m), w, sizeof(float) * dt_model_numel(m));
    dt_model_zero_grad(m);
    *loss = 0;
    for (int k = 0; k < 2; k++) {
        dt_batch b = k == 0 ? view(bt, 0, 2, &c) : view(bt, 2, 1, &c);
        double l;
        DT_CHECK_OK(dt_model_forward(m, &b));
        DT_CHECK_OK(dt_model_loss(m, &b, 0.5f, true, &l));
        DT_CHECK_OK(dt_model_backward(m, &b));
        *loss += l;
    }
    memcpy(grad, dt_model_grads(m), sizeof(float) * dt_model_numel(m));
    dt_model_free(m);
    dt_mem_free(mem);
}

/* Two stages in one process: units [0, cut) and [cut, L+2), the boundary (residual rows and
 * silu(c)) and its gradient copied between them as the pipeline executor sends them. */
static void grads_two_stages(const dt_model_config *mc, int cut, const float *w_full,
                             const batch *bt, float *grad_full, double *loss) {
    dt_dit_config c = dt_dit_config_from_model(mc);
    int U = mc->n_layer + 2;
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    bool held[2][8];
    for (int u = 0; u < U; u++)
        held[0][u] = u < cut, held[1][u] = u >= cut;
    dt_model *s[2];
    for (int k = 0; k < 2; k++)
        s[k] = create(mc, (dt_model_opts){.B = 2, .training = true, .units = held[k]}, mem);
    if (!s[0] || !s[1])
        return;
    DT_CHECK(dt_model_n_units(s[0]) == cut && dt_model_n_units(s[1]) == U - cut,
             "stages hold %d and %d units", dt_model_n_units(s[0]), dt_model_n_units(s[1]));
    memset(grad_full, 0, sizeof(float) * dt_model_full_numel(s[0]));
    *loss = 0;
    float *full = malloc(sizeof(float) * dt_model_full_numel(s[0]));
    for (int k = 0; k < 2; k++) {
        dt_model_take_shard(s[k], w_full, dt_model_weights(s[k]));
        dt_model_zero_grad(s[k]);
    }
    for (int mb = 0; mb < 2; mb++) {
        dt_batch b = mb == 0 ? view(bt, 0, 2, &c) : view(bt, 2, 1, &c);
        int64_t n = dt_model_boundary_count(s[0], b.B, b.T);
        DT_CHECK(n == dt_model_boundary_count(s[1], b.B, b.T), "boundary sizes differ");
        double l;
        DT_CHECK_OK(dt_model_forward_units(s[0], 0, 0, cut, &b));
        memcpy(dt_model_boundary(s[1], 0, cut - 1, b.B, b.T),
               dt_model_boundary(s[0], 0, cut - 1, b.B, b.T), sizeof(float) * n);
        DT_CHECK_OK(dt_model_forward_units(s[1], 0, cut, U, &b));
        DT_CHECK_OK(dt_model_loss_slot(s[1], 0, &b, 0.5f, true, &l));
        DT_CHECK_OK(dt_model_backward_units(s[1], 0, 0, cut, U, &b, false));
        memcpy(dt_model_boundary_grad(s[0], 0, b.B, b.T),
               dt_model_boundary_grad(s[1], 0, b.B, b.T), sizeof(float) * n);
        DT_CHECK_OK(dt_model_backward_units(s[0], 0, 0, 0, cut, &b, false));
        *loss += l;
    }
    for (int k = 0; k < 2; k++) { /* the stages' tensors are disjoint: place and add */
        DT_CHECK_OK(dt_model_gather_full(s[k], dt_model_grads(s[k]), full));
        for (int64_t i = 0; i < dt_model_full_numel(s[k]); i++)
            grad_full[i] += full[i];
    }
    free(full);
    for (int k = 0; k < 2; k++)
        dt_model_free(s[k]);
    dt_mem_free(mem);
}

static void check_slots_stages_ac(dt_dit_attn attn) {
    dt_model_config mc = tiny(attn);
    dt_dit_config c = dt_dit_config_from_model(&mc);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = create(&mc, (dt_model_opts){.B = 2}, mem);
    if (!m)
        return;
    int64_t nw = dt_model_numel(m);
    DT_CHECK(nw == dt_model_full_numel(m), "one process: local and full arenas differ");
    float *w = malloc(sizeof(float) * nw), *g0 = malloc(sizeof(float) * nw);
    float *g1 = malloc(sizeof(float) * nw);
    random_weights(w, nw);
    batch bt = make_batch(&c, 3, 17);
    double l0 = 0, l1 = 0;
    grads_one_slot(&mc, w, &bt, g0, &l0);
    grads_two_slots(&mc, (dt_model_opts){0}, w, &bt, g1, &l1);
    DT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * nw),
             "attn %d: two slots in flight give another loss or gradient", (int)attn);
    for (int cut = 1; cut <= mc.n_layer + 1; cut += 2) {
        grads_two_stages(&mc, cut, w, &bt, g1, &l1);
        DT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * nw),
                 "attn %d: two stages cut at unit %d give another loss or gradient", (int)attn,
                 cut);
    }
    const dt_ac_mode modes[2] = {DT_AC_FULL, DT_AC_SELECTIVE};
    for (int k = 0; k < 2; k++)
        for (int every = 1; every <= 2; every++) {
            grads_two_slots(&mc, (dt_model_opts){.ac = modes[k], .ac_every = every}, w, &bt, g1,
                            &l1);
            DT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * nw),
                     "attn %d: ac %d every %d changes the loss or gradient bits", (int)attn,
                     (int)modes[k], every);
        }
    /* the split backward (zero-bubble schedules), alone and with checkpointing */
    for (int k = 0; k < 3; k++) {
        dt_ac_mode ac = k == 0 ? DT_AC_NONE : modes[k - 1];
        grads_two_slots(&mc, (dt_model_opts){.split_backward = true, .ac = ac}, w, &bt, g1,
                        &l1);
        DT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * nw),
                 "attn %d: split backward (ac %d) changes the loss or gradient bits", (int)attn,
                 (int)ac);
    }
    /* int8 storage of the saved tensors (alone, with selective checkpointing and the split
     * backward): within int8 rounding of fp32 storage, and not the same bits */
    for (int k = 0; k < 2; k++) {
        dt_model_opts o = {.act_compress = DT_ACT_COMPRESS_INT8};
        if (k)
            o.ac = DT_AC_SELECTIVE, o.split_backward = true;
        grads_two_slots(&mc, o, w, &bt, g1, &l1);
        double gm = 0;
        for (int64_t i = 0; i < nw; i++)
            gm = fmax(gm, fabs(g0[i]));
        double r = dt_test_max_rel(g1, g0, nw, 0.05 * gm);
        DT_CHECK(l0 == l1 && r < 0.05 && r > 0, "attn %d: int8 storage (%d): loss %g vs %g, "
                 "gradient off by %g (relative)", (int)attn, k, l1, l0, r);
    }
    /* bf16 matmuls: within bf16 rounding of fp32 */
    grads_two_slots(&mc, (dt_model_opts){.precision = DT_PREC_BF16}, w, &bt, g1, &l1);
    double gmax = 0;
    for (int64_t i = 0; i < nw; i++)
        gmax = fmax(gmax, fabs(g0[i]));
    double rel = dt_test_max_rel(g1, g0, nw, 0.05 * gmax);
    DT_CHECK(rel < 0.1 && rel > 0, "attn %d: bf16 gradient off by %g (relative)", (int)attn,
             rel);
    DT_CHECK_CLOSE(l1, l0, 2e-2);
    free_batch(&bt);
    free(w), free(g0), free(g1);
    dt_model_free(m);
    dt_mem_free(mem);
}

/* Sizes, files and the sampler. */
static void check_files_and_sampler(void) {
    dt_model_config mc = tiny(DT_DIT_ATTN_FULL);
    mc.timestep_shift = 2.5f; /* travels with the file; both samplers step by it */
    dt_dit_config c = dt_dit_config_from_model(&mc);
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = create(&mc, (dt_model_opts){.B = 2}, mem);
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_dit_init(&c, &(dt_dit_opts){.B = 2}, mem, &d));
    if (!m || !d)
        return;
    int64_t nw = dt_model_numel(m);
    random_weights(dt_model_weights(m), nw);
    memcpy(dt_dit_weights(d), dt_model_weights(m), sizeof(float) * nw);
    /* named sizes, in the contract's order, and back */
    dt_model_size sz[DT_MODEL_MAX_SIZES];
    int n = dt_model_sizes(m, sz);
    const char *keys[] = {"n_layer",   "n_head", "n_embd",   "frames",  "channels",
                          "height",    "width",  "patch_t",  "patch_h", "patch_w",
                          "n_classes", "attn",   "text_len", "text_dim"};
    DT_CHECK(n == 14, "%d sizes", n);
    for (int i = 0; i < n && i < 14; i++)
        DT_CHECK(!strcmp(sz[i].key, keys[i]), "size %d is %s, want %s", i, sz[i].key, keys[i]);
    dt_model_config back = {.arch = DT_ARCH_DIT};
    DT_CHECK_OK(dt_model_config_from_sizes(sz, n, &back));
    DT_CHECK(back.frames == 4 && back.patch_w == 1 && back.n_classes == 3 &&
                 back.attn == DT_DIT_ATTN_FULL && back.n_embd == 12 && back.n_layer == 3,
             "config_from_sizes lost a size");
    back = (dt_model_config){.arch = DT_ARCH_DIT};
    DT_CHECK(dt_model_config_from_sizes(sz, n - 3, &back) == DT_ERR_FORMAT &&
                 strstr(dt_err_msg(), "attn"),
             "a missing size: %s", dt_err_msg());
    /* files written before a DiT had text name no text sizes: none */
    back = (dt_model_config){.arch = DT_ARCH_DIT, .text_len = 5, .text_dim = 7};
    DT_CHECK_OK(dt_model_config_from_sizes(sz, n - 2, &back));
    DT_CHECK(back.text_len == 0 && back.text_dim == 0, "text %d x %d from no text sizes",
             back.text_len, back.text_dim);
    char desc[256];
    dt_model_describe(m, desc, sizeof desc);
    DT_CHECK(strstr(desc, "24 tokens") != NULL, "description: %s", desc);
    /* save, load, and the shape from the file */
    char path[96];
    snprintf(path, sizeof path, "/tmp/dtrain-dit-%d.safetensors", (int)getpid());
    float *w2 = calloc((size_t)nw, sizeof *w2);
    DT_CHECK_OK(dt_model_save(m, dt_model_weights(m), path));
    DT_CHECK_OK(dt_model_load(m, w2, path));
    for (int i = 0; i < dt_model_n_params(m); i++) {
        const dt_param *p = dt_model_param(m, i);
        DT_CHECK(!memcmp(w2 + p->offset, dt_model_weights(m) + p->offset,
                         sizeof(float) * p->numel), "load: other values of %s", p->name);
    }
    /* a pipeline stage loads the whole file into a full arena (the callers scatter it) */
    bool held[5] = {false, false, true, true, true};
    dt_model *st = create(&mc, (dt_model_opts){.B = 1, .units = held}, mem);
    if (st) {
        DT_CHECK(dt_model_full_numel(st) == nw && dt_model_numel(st) < nw, "stage arenas");
        memset(w2, 0, sizeof(float) * nw);
        DT_CHECK_OK(dt_model_load(st, w2, path));
        const dt_param *p = dt_model_full_param(st, 0);
        DT_CHECK(!memcmp(w2 + p->offset, dt_model_weights(m) + p->offset,
                         sizeof(float) * p->numel), "a stage's load: other values of %s",
                 p->name);
    }
    dt_model_free(st);
    dt_model_config fc = {.arch = DT_ARCH_GPT2, .n_layer = 9};
    DT_CHECK_OK(dt_model_config_from_file(path, &fc));
    DT_CHECK(fc.arch == DT_ARCH_DIT && fc.n_layer == 3 && fc.height == 6 && fc.patch_h == 2 &&
                 fc.n_classes == 3 && fc.timestep_shift == 2.5f,
             "config_from_file: arch %d, n_layer %d, shift %g", (int)fc.arch, fc.n_layer,
             (double)fc.timestep_shift);
    dt_model_config other = mc;
    other.n_embd = 18;
    dt_model *m2 = create(&other, (dt_model_opts){.B = 1}, mem);
    if (m2) {
        float *w3 = calloc((size_t)dt_model_numel(m2), sizeof *w3);
        DT_CHECK(dt_model_load(m2, w3, path) == DT_ERR_ARG && strstr(dt_err_msg(), "n_embd"),
                 "loading another shape: %s", dt_err_msg());
        free(w3);
    }
    dt_model_free(m2);
    remove(path);
    /* the sampler over the interface: dt_flow_sample's clips, with and without guidance */
    dt_flow *f = NULL;
    DT_CHECK_OK(dt_flow_init(d, &(dt_flow_opts){0}, mem, &f));
    int64_t clip = dt_dit_clip_numel(&c);
    float *o1 = malloc(sizeof(float) * 2 * clip), *o2 = malloc(sizeof(float) * 2 * clip);
    int32_t labels[2] = {1, 3};
    for (int g = 0; g < 2 && f; g++) {
        DT_CHECK_OK(dt_flow_sample(f, 2, 3, 8, g ? labels : NULL, 2.0f * g, o1));
        DT_CHECK_OK(dt_flow_sample_model(m, mem, 2, 3, 8, g ? labels : NULL, NULL, 2.0f * g, o2));
        DT_CHECK(!memcmp(o1, o2, sizeof(float) * 2 * clip), "guidance %d: the sampler over "
                 "the interface differs from dt_flow_sample", g);
    }
    labels[0] = 4;
    DT_CHECK(dt_flow_sample_model(m, mem, 2, 3, 8, labels, NULL, 1.0f, o2) == DT_ERR_ARG,
             "a label past the null class");
    dt_flow_free(f);
    free(o1), free(o2), free(w2);
    dt_dit_free(d);
    dt_model_free(m);
    dt_mem_free(mem);
}

/* tp x sp (Megatron-SP rows when seq_tp), no ring, at seq_len */
static dt_model_split split(int tp, int sp, bool seq_tp, int seq_len) {
    return (dt_model_split){.tp = tp, .sp = sp, .cp = 1, .cp_chunks = 1, .sequence_tp = seq_tp,
                            .seq_len = seq_len};
}

static dt_status check_split(const dt_model_config *mc, int tp, int sp, bool seq_tp, int len) {
    dt_model_split s = split(tp, sp, seq_tp, len);
    return dt_model_check_split(mc, &s);
}

static void expect_split_error(dt_model_config mc, int tp, int sp, const char *needle) {
    dt_status st = check_split(&mc, tp, sp, false, 24);
    DT_CHECK(st == DT_ERR_ARG && strstr(dt_err_msg(), needle), "tp %d sp %d: want '%s', got %s",
             tp, sp, needle, st ? dt_err_msg() : "OK");
}

static void check_errors(void) {
    dt_model_config mc = tiny(DT_DIT_ATTN_SPATIAL_TEMPORAL);
    DT_CHECK_OK(check_split(&mc, 1, 2, false, 24));
    DT_CHECK_OK(check_split(&mc, 2, 1, false, 24));
    DT_CHECK_OK(check_split(&mc, 2, 1, true, 24));
    dt_model_config odd = mc; /* 1 x 3 x 3 = 9 tokens */
    odd.frames = 2, odd.width = 3, odd.attn = DT_DIT_ATTN_FULL;
    DT_CHECK(check_split(&odd, 2, 1, true, 9) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "the 9 tokens of each sp rank"), "Megatron-SP: %s",
             dt_err_msg());
    expect_split_error(mc, 4, 1, "model.n_head=2 is not divisible by plugin.tp_size=4");
    mc.n_head = 4;
    expect_split_error(mc, 1, 4, "time tokens (model.frames=4 / patch_t=2) are not divisible "
                                 "by plugin.sp_size=4");
    mc.n_head = 3;
    expect_split_error(mc, 1, 2, "the 3 heads of each tp rank (model.n_head=3 / tp_size=1) are "
                                 "not divisible by plugin.sp_size=2");
    /* a ring: each rank's chunks must be whole frames under spatial_temporal (2 time tokens:
     * a contiguous ring of 2 cuts them, a zigzag one needs 4) */
    mc.n_head = 2;
    dt_model_split ring = split(1, 1, false, 24);
    ring.cp = 2;
    DT_CHECK_OK(dt_model_check_split(&mc, &ring));
    ring.cp_chunks = 2;
    DT_CHECK(dt_model_check_split(&mc, &ring) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "do not cut into the 4 chunks of plugin.cp_size=2"),
             "zigzag ring over 2 time tokens: %s", dt_err_msg());
    mc = tiny(DT_DIT_ATTN_FULL);
    DT_CHECK_OK(dt_model_check_split(&mc, &ring)); /* full attention: 24 tokens, 4 chunks */
    DT_CHECK_OK(check_split(&mc, 1, 2, false, 24));
    expect_split_error(mc, 1, 5, "24 tokens per clip are not divisible by plugin.sp_size=5");
    DT_CHECK(check_split(&mc, 1, 1, false, 23) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "train.seq_len=23"), "seq_len: %s", dt_err_msg());
    dt_mem *mem;
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = NULL;
    m = create(&mc, (dt_model_opts){.B = 1, .training = true}, mem);
    dt_dit_config c = dt_dit_config_from_model(&mc);
    batch bt = make_batch(&c, 2, 3);
    dt_batch b = view(&bt, 0, 1, &c);
    bt.rows[c.frames * c.channels * c.height * c.width + 1] = 1.5f;
    DT_CHECK(m && dt_model_forward(m, &b) == DT_ERR_ARG && strstr(dt_err_msg(), "label 1.5"),
             "a fractional label: %s", dt_err_msg());
    b.B = 2;
    DT_CHECK(m && dt_model_forward(m, &b) == DT_ERR_ARG && strstr(dt_err_msg(), "2 clips"),
             "too many clips: %s", dt_err_msg());
    b = view(&bt, 1, 1, &c); /* a valid label */
    DT_CHECK(m && dt_model_forward(m, &b) == DT_OK &&
                 dt_model_weight_units(m, 0, 0, 5, &b) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "split backward"),
             "a weight pass without split backward: %s", dt_err_msg());
    free_batch(&bt);
    dt_model_free(m);
    /* an arch without predict */
    dt_model_config g = {.arch = DT_ARCH_GPT2, .n_layer = 1, .n_head = 2, .n_embd = 16,
                         .vocab_size = 32, .max_seq_len = 8, .norm_eps = 1e-5f};
    m = NULL;
    DT_CHECK_OK(dt_model_create(&g, &(dt_model_opts){.B = 1, .T = 8}, mem, &m));
    float out[1];
    DT_CHECK(m && dt_model_predict(m, &(dt_batch){.B = 1, .T = 8}, out) == DT_ERR_UNSUPPORTED &&
                 strstr(dt_err_msg(), "gpt2"), "predict on gpt2: %s", dt_err_msg());
    dt_model_free(m);
    dt_mem_free(mem);
}

/* ---- the memory formulas (what the planner predicts), against the accountant ---------- */

static size_t a64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

typedef struct mem_case {
    int B, n_slots, first, last; /* global units [first, last] held */
    dt_ac_mode ac;
    int ac_every;
    dt_precision precision;
    bool split, int8;
} mem_case;

/* A block's saved fields, in dt_dit_acts order: bytes of each for N rows of one process. */
enum { MOD, AFF, MEAN1, RSTD1, M1, QKV, Y, LSE, A, X2, MEAN2, RSTD2, M2, H, FF, N_FIELDS };
#define BIT(f) (1u << (f))
static const unsigned ALL = (1u << N_FIELDS) - 1, ATTN_OUT = BIT(Y) | BIT(LSE);
static const unsigned INT8 = BIT(M1) | BIT(QKV) | BIT(Y) | BIT(A) | BIT(X2) | BIT(M2) | BIT(H) |
                             BIT(FF);

static void field_sizes(size_t B, size_t N, size_t C, size_t NH, size_t *elems) {
    size_t e[N_FIELDS] = {6 * B * C, 4 * B * C, N, N, N * C, 3 * N * C, N * C, N * NH,
                          N * C, N * C, N, N, N * C, 4 * N * C, N * C};
    memcpy(elems, e, sizeof e);
}

/* fp32 fields of `mask`, plus (q8) the int8 payloads and row scales of `q8mask` */
static size_t fields_bytes(const size_t *elems, unsigned mask, unsigned q8mask, size_t N) {
    size_t b = 0;
    for (int f = 0; f < N_FIELDS; f++) {
        if (mask & BIT(f))
            b += a64(elems[f] * 4);
        if (q8mask & BIT(f))
            b += a64(elems[f]) + a64(N * 4);
    }
    return b;
}

/* Bytes of "dit.activations" and "dit.transients" of a one-rank (sp = tp = 1) model, training. */
static void predict_bytes(const dt_model_config *mc, const mem_case *k, size_t *acts,
                          size_t *temp) {
    size_t B = k->B, C = mc->n_embd, F = 4 * C, NH = mc->n_head, L = mc->n_layer;
    size_t S = (size_t)(mc->frames / mc->patch_t) * (mc->height / mc->patch_h) *
               (mc->width / mc->patch_w);
    size_t P = (size_t)mc->channels * mc->patch_t * mc->patch_h * mc->patch_w;
    size_t clip = (size_t)mc->frames * mc->channels * mc->height * mc->width;
    size_t N = B * S, f4 = 4, every = k->ac_every > 0 ? k->ac_every : 1;
    bool unit0 = k->first == 0, fin = k->last == (int)L + 1, lp = k->precision != DT_PREC_FP32;
    size_t elems[N_FIELDS];
    field_sizes(B, N, C, NH, elems);
    /* positions: each held block's input and output, unit 0's output, the final input */
    size_t n_pos = 0;
    for (size_t p = 0; p <= L; p++) {
        bool in_of_block = p < L && (int)p + 1 >= k->first && (int)p + 1 <= k->last;
        bool out_of_block = p >= 1 && (int)p >= k->first && (int)p <= k->last;
        n_pos += in_of_block || out_of_block || (p == 0 && unit0) || (p == L && fin);
    }
    size_t stride = ((N + B) * C + 15) / 16 * 16;
    size_t wg = k->split ? a64(24 * B * C) + a64(3 * N * C * f4) + 2 * a64(N * C * f4) +
                               a64(N * F * f4)
                         : 0;
    unsigned shared = 0;
    *acts = 0;
    for (int s = 0; s < k->n_slots; s++) {
        *acts += a64(n_pos * stride * f4) + a64(B * C * f4);
        if (unit0)
            *acts += a64(N * P * f4) + a64(B * 256 * f4) + 3 * a64(B * C * f4) + a64(B * 4);
        if (fin)
            *acts += 2 * a64(8 * B * C) + 2 * a64(N * f4) + a64(N * C * f4);
        for (size_t l = 0; l < L; l++) {
            if ((int)l + 1 < k->first || (int)l + 1 > k->last)
                continue;
            bool ck = k->ac != DT_AC_NONE && l % every == 0;
            unsigned kept = !ck ? ALL : k->ac == DT_AC_FULL ? 0 : ALL & ~ATTN_OUT;
            shared |= kept == 0 ? ALL : kept != ALL ? ATTN_OUT : 0;
            shared |= k->int8 && kept ? INT8 : 0;
            *acts += fields_bytes(elems, k->int8 ? kept & ~INT8 : kept,
                                  k->int8 ? kept & INT8 : 0, N) +
                     wg;
        }
    }
    *acts += fields_bytes(elems, shared, 0, N) + (shared == ALL ? a64(N * C * f4) : 0);
    *acts += a64(S * C * f4) + (fin ? a64(B * clip * f4) : 0);
    size_t in = C > F ? C : F, out = 6 * C > F ? 6 * C : F;
    in = in > P ? in : P;
    in = in > 256 ? in : 256;
    out = out > P ? out : P;
    *temp = a64(3 * N * C * f4) + 2 * a64(N * C * f4) + a64(N * F * f4) +
            (fin ? 2 * a64(N * P * f4) : 0) + (lp ? a64(N * in * 2) + a64(N * out * 2) : 0) +
            k->n_slots * (a64(stride * f4) + (fin ? a64(N * P * f4) : 0)) +
            2 * a64(N * C * f4) + 2 * a64(N * F * f4) + 2 * a64(3 * N * C * f4) +
            a64(N * C * f4) + a64(24 * B * C) + 3 * a64(B * C * f4);
}

static void check_memory(void) {
    dt_model_config mc = tiny(DT_DIT_ATTN_SPATIAL_TEMPORAL);
    const mem_case cases[] = {
        {3, 1, 0, 4, DT_AC_NONE, 0, DT_PREC_FP32, false, false},
        {2, 3, 0, 4, DT_AC_FULL, 2, DT_PREC_FP32, false, false},
        {2, 2, 0, 2, DT_AC_SELECTIVE, 1, DT_PREC_BF16, true, false},
        {1, 2, 2, 4, DT_AC_NONE, 0, DT_PREC_BF16, false, false},
        {4, 1, 1, 3, DT_AC_FULL, 1, DT_PREC_FP32, true, false},
        {2, 2, 0, 4, DT_AC_NONE, 0, DT_PREC_FP32, false, true},
        {2, 1, 0, 4, DT_AC_SELECTIVE, 2, DT_PREC_BF16, true, true},
        {1, 2, 1, 4, DT_AC_FULL, 2, DT_PREC_FP32, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mem_case *k = &cases[i];
        bool held[5];
        for (int u = 0; u < 5; u++)
            held[u] = u >= k->first && u <= k->last;
        dt_mem *mem;
        DT_CHECK_OK(dt_mem_init(&mem));
        DT_CHECK_OK(dt_mem_timeline_start(mem, 64));
        dt_model *m = create(&mc, (dt_model_opts){.B = k->B, .n_slots = k->n_slots,
                                                  .training = true, .units = held,
                                                  .ac = k->ac, .ac_every = k->ac_every,
                                                  .precision = k->precision,
                                                  .split_backward = k->split,
                                                  .act_compress = k->int8},
                             mem);
        size_t acts = 0, temp = 0, want_acts, want_temp;
        for (int e = 0; m && e < dt_mem_n_events(mem); e++) {
            const dt_mem_event *ev = dt_mem_event_at(mem, e);
            if (ev->kind == DT_MEM_EV_ALLOC && !strcmp(ev->name, "dit.activations"))
                acts = ev->bytes;
            if (ev->kind == DT_MEM_EV_ALLOC && !strcmp(ev->name, "dit.transients"))
                temp = ev->bytes;
        }
        predict_bytes(&mc, k, &want_acts, &want_temp);
        DT_CHECK(acts == want_acts && temp == want_temp, "memory case %zu: activations %zu "
                 "(formula %zu), transients %zu (formula %zu)", i, acts, want_acts, temp,
                 want_temp);
        dt_model_free(m);
        dt_mem_free(mem);
    }
}

/* Loss and gradient of one micro-batch of shape `shape` on a model of several shapes, and on a
 * model of that shape alone with the same weights: the same bits, whatever shape ran before. */
static void check_shapes(dt_dit_attn attn) {
    const dt_model_shape shapes[] = {{4, 6, 4, 3}, {2, 4, 6, 2}, {6, 2, 2, 3}};
    enum { N = sizeof shapes / sizeof shapes[0] };
    const int order[] = {1, 0, 2, 2, 1};
    dt_model_config mc = tiny(attn);
    dt_mem *mem, *one_mem[N];
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_model *m = NULL, *one[N] = {0};
    dt_model_opts o = {.B = 3, .T = 24, .training = true, .shapes = shapes, .n_shapes = N};
    DT_CHECK_OK(dt_model_create(&mc, &o, mem, &m));
    size_t most_acts = 0, most_temp = 0;
    for (int k = 0; k < N; k++) {
        dt_model_config ck = mc;
        ck.frames = shapes[k].frames, ck.height = shapes[k].height, ck.width = shapes[k].width;
        DT_CHECK_OK(dt_mem_init(&one_mem[k]));
        dt_dit_config ok = dt_dit_config_from_model(&ck);
        dt_model_opts oo = {.B = shapes[k].B, .T = dt_dit_tokens(&ok), .training = true};
        DT_CHECK_OK(dt_model_create(&ck, &oo, one_mem[k], &one[k]));
        size_t a = dt_mem_in_use(one_mem[k], DT_MEM_ACTS),
               t = dt_mem_in_use(one_mem[k], DT_MEM_TEMP);
        most_acts = a > most_acts ? a : most_acts;
        most_temp = t > most_temp ? t : most_temp;
    }
    for (int k = 0; k < N; k++)
        if (!one[k])
            return;
    if (!m)
        return;
    DT_CHECK(dt_mem_in_use(mem, DT_MEM_ACTS) == most_acts &&
                 dt_mem_in_use(mem, DT_MEM_TEMP) == most_temp,
             "arenas %zu + %zu bytes, the largest shape's %zu + %zu",
             dt_mem_in_use(mem, DT_MEM_ACTS), dt_mem_in_use(mem, DT_MEM_TEMP), most_acts,
             most_temp);
    int64_t nw = dt_model_numel(m);
    random_weights(dt_model_weights(m), nw);
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int k = order[i];
        dt_model_config ck = mc;
        ck.frames = shapes[k].frames, ck.height = shapes[k].height, ck.width = shapes[k].width;
        dt_dit_config c = dt_dit_config_from_model(&ck);
        batch bt = make_batch(&c, shapes[k].B, 11 + i);
        dt_batch b = view(&bt, 0, shapes[k].B, &c);
        double loss[2];
        dt_model *pair[2] = {m, one[k]};
        DT_CHECK_OK(dt_model_use_shape(m, k));
        memcpy(dt_model_weights(one[k]), dt_model_weights(m), sizeof(float) * nw);
        for (int j = 0; j < 2; j++) {
            dt_model_zero_grad(pair[j]);
            DT_CHECK_OK(dt_model_forward(pair[j], &b));
            DT_CHECK_OK(dt_model_loss(pair[j], &b, 0.5f, true, &loss[j]));
            DT_CHECK_OK(dt_model_backward(pair[j], &b));
        }
        DT_CHECK(loss[0] == loss[1] &&
                     !memcmp(dt_model_grads(m), dt_model_grads(one[k]), sizeof(float) * nw),
                 "attn %d, shape %d after shape %d: loss %.9g vs %.9g alone, or the gradient "
                 "differs",
                 (int)attn, k, i ? order[i - 1] : -1, loss[0], loss[1]);
        free_batch(&bt);
    }
    DT_CHECK(dt_model_use_shape(m, N) == DT_ERR_ARG, "shape %d of %d accepted", N, N);
    for (int k = 0; k < N; k++) {
        dt_model_free(one[k]);
        dt_mem_free(one_mem[k]);
    }
    dt_model_free(m);
    dt_mem_free(mem);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    check_against_dit(DT_DIT_ATTN_FULL);
    check_against_dit(DT_DIT_ATTN_SPATIAL_TEMPORAL);
    check_slots_stages_ac(DT_DIT_ATTN_FULL);
    check_slots_stages_ac(DT_DIT_ATTN_SPATIAL_TEMPORAL);
    check_files_and_sampler();
    check_errors();
    check_memory();
    check_shapes(DT_DIT_ATTN_FULL);
    check_shapes(DT_DIT_ATTN_SPATIAL_TEMPORAL);
    return DT_TEST_END();
}
