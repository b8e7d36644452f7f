/* The video DiT (model.arch = dit) trained by the unchanged engine and pipeline executor in
 * every layout the world size allows, against the single process: under mpirun (np 1, 2, 4)
 * each rank first trains the whole global batch alone (one rank, ZeRO 0, one micro-batch),
 * then its share of each layout; every step's global loss and the final weights must match
 * the single process within 1e-5 (fp32; AdamW eps 1e-6 so rounding noise stays noise), and
 * the final weights round-trip through the engine's scatter and gather of the full arena.
 *   np 1: ZeRO 0-3 with two micro-batches; the checkpointed single process (ac full and
 *         selective); bf16 and int8 activation storage (within their tolerance of fp32)
 *   np 2: dp 2 x ZeRO 0-3; sp 2 (Ulysses; both attention kinds); pp 2 (1F1B, ZeRO 0 and 3;
 *         interleaved with 2 chunks per rank, ZeRO 2; ZB-H1 with the split backward, ZeRO 1
 *         and 3 x ac selective); tp 2 (Megatron: heads and MLP columns),
 *         with and without Megatron-SP
 *   np 4: dp 4 x ZeRO 1; sp 4 (both kinds); dp 2 x sp 2 x ZeRO 2; pp 2 x sp 2; pp 2 x dp 2
 *         x ZeRO 3; sp 2 x ac full; tp 4; tp 2 x sp 2; tp 2 x dp 2 x ZeRO 3; tp 2 x pp 2;
 *         Megatron-SP with tp 4 x ac full, tp 2 x sp 2, tp 2 x pp 2; sp 2 x pp 2 ZB-H1;
 *         tp 2 x pp 2 ZB-H1 with Megatron-SP
 *   int8 activation storage under sp 2 and tp 2 x sp 2 x Megatron-SP: within int8 rounding
 * Every layout runs with full and spatial_temporal attention, and again with text (full
 * attention, the byte encoder: cross-attention in every block; clips with whole, partial and
 * no text; sp and the ring split rows mid-clip, tp the heads, pipelines carry the text).
 * Ranks are placed as the booster's mesh does (pp, dp, sp, tp; tp fastest); the engine's
 * gradient group is dp x sp (the ranks holding the same weights). A failure
 * names the layout, the step and the check. Named mpi_test_*.c so the tests/ glob does not
 * register it without mpirun (tests.cmake does).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "harness.h"
#include "models/dit.h"
#include "models/model.h"
#include "plan/schedule.h"
#include "plan/stages.h"
#include "train/engine.h"
#include "train/pipeline.h"

enum { G = 4, STEPS = 3 }; /* clips per global batch, optimizer steps */

typedef struct layout {
    const char *name;
    int pp, dp, sp, zero, n_mb;
    dt_precision precision;
    dt_ac_mode ac;
    int chunks; /* pipeline chunks per rank: > 1 interleaved 1F1B */
    int tp;
    int sequence_tp; /* Megatron-SP: the residual rows split over tp too */
    int zb;          /* pp: the zero-bubble ZB-H1 schedule (split backward, W actions) */
    int int8;        /* act_compress = int8 (compared within int8 rounding, not 1e-5) */
} layout;

typedef struct run_out {
    double loss[STEPS];
    float *w; /* full arena after the last step */
} run_out;

static dt_model_config model_config(dt_dit_attn attn, int text_len) {
    return (dt_model_config){.arch = DT_ARCH_DIT,
                             .frames = 8,
                             .channels = 2,
                             .height = 4,
                             .width = 4,
                             .patch_t = 2,
                             .patch_h = 2,
                             .patch_w = 2,
                             .n_layer = 4,
                             .n_head = 4,
                             .n_embd = 16,
                             .n_classes = 3,
                             .attn = attn,
                             .max_seq_len = 16,
                             .text_len = text_len};
}

/* The global batch of each step: G input rows (x_t, t, label) and G target clips. */
typedef struct data {
    int64_t in, clip;
    float *inputs, *targets; /* [STEPS][G][in], [STEPS][G][clip] */
} data;

static data make_data(const dt_dit_config *c) {
    data d = {.in = dt_dit_input_floats(c), .clip = dt_dit_clip_numel(c)};
    d.inputs = malloc(sizeof(float) * STEPS * G * d.in);
    d.targets = malloc(sizeof(float) * STEPS * G * d.clip);
    dt_test_fill(d.inputs, STEPS * G * d.in, 31, 1.0f);
    dt_test_fill(d.targets, STEPS * G * d.clip, 32, 1.0f);
    for (int k = 0; k < STEPS * G; k++) {
        d.inputs[k * d.in + d.clip] = (float)((k * 7) % 10) / 10.0f;  /* t */
        d.inputs[k * d.in + d.clip + 1] = (float)(k % (c->n_classes + 1)); /* label or null */
        if (!c->text_len)
            continue;
        float *text = d.inputs + k * d.in + d.clip + 2;
        text[0] = (float)(k % (c->text_len + 2) - 1); /* -1 (no text) .. text_len tokens */
        for (int i = 0; i < c->text_len; i++)
            text[1 + i] = (float)((k * 31 + i * 7) % 256);
    }
    return d;
}

/* One layout's run on this rank (which is in it: world size = pp dp sp). */
static void run(dt_comm *world, const dt_model_config *mc, const layout *L, const data *dd,
                run_out *out) {
    int S = dt_dit_tokens(&(dt_dit_config){.frames = mc->frames, .height = mc->height,
                                           .width = mc->width, .pt = mc->patch_t,
                                           .ph = mc->patch_h, .pw = mc->patch_w});
    int r = world->rank, t = r % L->tp, s = r / L->tp % L->sp;
    int d = r / (L->tp * L->sp) % L->dp, p = r / (L->tp * L->sp * L->dp);
    dt_comm *tp = NULL, *sp = NULL, *pp = NULL, *grp = NULL;
    DT_CHECK_OK(dt_dist_split(world, (p * L->dp + d) * L->sp + s, t, "tp", &tp));
    DT_CHECK_OK(dt_dist_split(world, (p * L->dp + d) * L->tp + t, s, "sp", &sp));
    DT_CHECK_OK(dt_dist_split(world, (d * L->sp + s) * L->tp + t, p, "pp", &pp));
    DT_CHECK_OK(dt_dist_split(world, p * L->tp + t, d * L->sp + s, "dp", &grp));
    int clips = G / L->dp, mb = clips / L->n_mb;
    dt_optim_config oc = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-6f,
                          .weight_decay = 0.01f};
    dt_stage_plan plan;
    dt_schedule *sched = NULL;
    bool held[16];
    int n_slots = 1, n_grads = 1;
    if (L->pp > 1) {
        int v = L->chunks > 1 ? L->chunks : 1;
        DT_CHECK_OK(dt_stage_plan_make(mc->n_layer, L->pp, v, NULL, &plan));
        DT_CHECK_OK(L->zb     ? dt_sched_zbh1(L->pp, L->n_mb, &sched)
                    : v > 1 ? dt_sched_interleaved(L->pp, L->n_mb, v, &sched)
                            : dt_sched_1f1b(L->pp, L->n_mb, &sched));
        dt_stage_plan_held(&plan, p, held);
        n_slots = sched ? dt_sched_slots(sched, p) : 1;
        n_grads = sched ? dt_sched_grads(sched, p) : 1;
    }
    dt_engine_opts eo = {.zero_stage = L->zero,
                         .bucket_mb = 0.001f,
                         .overlap = true,
                         .precision = L->precision,
                         .B = mb,
                         .T = S,
                         .tp = tp,
                         .sp = sp,
                         .sequence_tp = L->sequence_tp,
                         .split_backward = sched && dt_sched_split(sched),
                         .act_compress = L->int8 ? DT_ACT_COMPRESS_INT8 : DT_ACT_COMPRESS_NONE,
                         .units = L->pp > 1 ? held : NULL,
                         .n_slots = n_slots,
                         .n_grads = n_grads,
                         .pp = L->pp > 1 ? pp : NULL,
                         .ac = L->ac};
    dt_mem *mem = NULL;
    dt_engine *e = NULL;
    dt_pipeline *pipe = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_engine_init(mc, &oc, &eo, grp, mem, &e));
    if (e && L->pp > 1)
        DT_CHECK_OK(dt_pipeline_init(sched, &plan, pp, NULL, dt_engine_model(e), n_slots, n_grads,
                                     dt_model_boundary_count(dt_engine_model(e), mb, S), mem,
                                     &pipe));
    if (!e || (L->pp > 1 && !pipe))
        goto done;
    DT_CHECK_OK(dt_engine_init_weights(e, 5));
    float gs = 1.0f / (float)(G * S);
    for (int step = 0; step < STEPS; step++) {
        const float *in = dd->inputs + ((size_t)step * G + (size_t)d * clips) * dd->in;
        const float *tg = dd->targets + ((size_t)step * G + (size_t)d * clips) * dd->clip;
        double loss = 0, part;
        DT_CHECK_OK(dt_engine_begin_step(e));
        if (L->pp > 1) {
            dt_pipeline_batch pb = {.inputs = in, .targets = tg,
                                    .input_bytes = (size_t)mb * dd->in * sizeof(float),
                                    .target_bytes = (size_t)mb * dd->clip * sizeof(float),
                                    .B = mb, .T = S, .grad_scale = gs};
            DT_CHECK_OK(dt_pipeline_run(pipe, &pb, NULL, step, &loss));
        } else {
            for (int k = 0; k < L->n_mb; k++) {
                dt_batch b = {.input = in + (size_t)k * mb * dd->in,
                              .target = tg + (size_t)k * mb * dd->clip, .B = mb, .T = S};
                DT_CHECK_OK(dt_engine_micro_batch(e, &b, gs, k == L->n_mb - 1, &part));
                loss += part;
            }
        }
        DT_CHECK_OK(dt_engine_finish(e));
        DT_CHECK_OK(dt_engine_apply(e, oc.lr, 1.0f));
        if (t > 0) /* tp ranks compute the same losses */
            loss = 0;
        DT_CHECK_OK(dt_comm_allreduce_f64(world, &loss, 1)); /* every row's loss once */
        out->loss[step] = loss / (G * S);
    }
    int64_t n = dt_model_full_numel(dt_engine_model(e));
    out->w = malloc(sizeof(float) * n);
    float *back = calloc((size_t)n, sizeof *back);
    DT_CHECK_OK(dt_engine_gather_state(e, out->w, NULL, NULL));
    /* the full arena back into this layout's shards (a checkpoint's load) and out again */
    DT_CHECK_OK(dt_engine_scatter_state(e, out->w, NULL, NULL));
    DT_CHECK_OK(dt_engine_gather_state(e, back, NULL, NULL));
    DT_CHECK(!memcmp(back, out->w, sizeof(float) * n), "%s: the weights do not round-trip "
             "through scatter_state and gather_state", L->name);
    free(back);
done:
    dt_pipeline_free(pipe);
    dt_engine_free(e);
    dt_mem_free(mem);
    dt_sched_free(sched);
    dt_comm_free(grp);
    dt_comm_free(pp);
    dt_comm_free(sp);
    dt_comm_free(tp);
}

/* the tensor of the full table holding element i */
static const char *tensor_at(const dt_model *m, int64_t i) {
    for (int k = dt_model_n_full_params(m) - 1; k >= 0; k--)
        if (dt_model_full_param(m, k)->offset <= i)
            return dt_model_full_param(m, k)->name;
    return "?";
}

static void compare(const char *name, dt_dit_attn attn, const run_out *ref, const run_out *got,
                    const dt_model *m, double tol) {
    int64_t n = dt_model_full_numel(m);
    for (int s = 0; s < STEPS; s++)
        DT_CHECK(fabs(got->loss[s] - ref->loss[s]) <= tol * fabs(ref->loss[s]),
                 "%s (attn %d), step %d: loss %.9g, single process %.9g", name, (int)attn, s,
                 got->loss[s], ref->loss[s]);
    if (!got->w || !ref->w)
        return;
    double worst = 0, wmax = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got->w[i] - ref->w[i]);
        wmax = fmax(wmax, fabs(ref->w[i]));
        if (e > worst)
            worst = e, at = i;
    }
    DT_CHECK(worst <= tol * wmax, "%s (attn %d): weight %lld (%s) off by %g (largest weight %g)",
             name, (int)attn, (long long)at, tensor_at(m, at), worst, wmax);
}

static void run_all(dt_comm *world, dt_dit_attn attn, int text_len) {
    dt_model_config mc = model_config(attn, text_len);
    dt_dit_config c = dt_dit_config_from_model(&mc);
    data dd = make_data(&c);
    int W = world->size;
    const layout L[] = {
        {"zero 0, 2 micro-batches", 1, 1, 1, 0, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"zero 3, 2 micro-batches", 1, 1, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"ac full", 1, 1, 1, 0, 1, DT_PREC_FP32, DT_AC_FULL, 1, 1, 0, 0, 0},
        {"ac selective", 1, 1, 1, 2, 2, DT_PREC_FP32, DT_AC_SELECTIVE, 1, 1, 0, 0, 0},
        {"dp 2, zero 0", 1, 2, 1, 0, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"dp 2, zero 1", 1, 2, 1, 1, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"dp 2, zero 2", 1, 2, 1, 2, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"dp 2, zero 3", 1, 2, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"sp 2", 1, 1, 2, 0, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"sp 2, zero 3, 2 micro-batches", 1, 1, 2, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"pp 2, 1f1b, zero 0", 2, 1, 1, 0, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"pp 2, 1f1b, zero 3", 2, 1, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"pp 2, interleaved x 2, zero 2", 2, 1, 1, 2, 2, DT_PREC_FP32, DT_AC_NONE, 2, 1, 0, 0, 0},
        {"pp 2, zbh1, zero 1", 2, 1, 1, 1, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 1, 0},
        {"pp 2, zbh1, zero 3, ac selective", 2, 1, 1, 3, 2, DT_PREC_FP32, DT_AC_SELECTIVE, 1, 1,
         0, 1, 0},
        {"dp 4, zero 1", 1, 4, 1, 1, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"sp 4", 1, 1, 4, 0, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"dp 2 x sp 2, zero 2", 1, 2, 2, 2, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"pp 2 x sp 2, zero 1", 2, 1, 2, 1, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"pp 2 x dp 2, zero 3", 2, 2, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0},
        {"sp 2 x dp 2, ac full, zero 3", 1, 2, 2, 3, 1, DT_PREC_FP32, DT_AC_FULL, 1, 1, 0, 0, 0},
        {"tp 2, 2 micro-batches", 1, 1, 1, 0, 2, DT_PREC_FP32, DT_AC_NONE, 1, 2, 0, 0, 0},
        {"tp 4, zero 2", 1, 1, 1, 2, 1, DT_PREC_FP32, DT_AC_NONE, 1, 4, 0, 0, 0},
        {"tp 2 x sp 2, zero 1", 1, 1, 2, 1, 1, DT_PREC_FP32, DT_AC_NONE, 1, 2, 0, 0, 0},
        {"tp 2 x dp 2, zero 3", 1, 2, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 2, 0, 0, 0},
        {"tp 2, Megatron-SP", 1, 1, 1, 0, 2, DT_PREC_FP32, DT_AC_NONE, 1, 2, 1, 0, 0},
        {"tp 4, Megatron-SP, ac full", 1, 1, 1, 1, 1, DT_PREC_FP32, DT_AC_FULL, 1, 4, 1, 0, 0},
        {"tp 2 x sp 2, Megatron-SP, zero 2", 1, 1, 2, 2, 1, DT_PREC_FP32, DT_AC_NONE, 1, 2, 1, 0, 0},
        {"tp 2 x pp 2, Megatron-SP, zero 3", 2, 1, 1, 3, 2, DT_PREC_FP32, DT_AC_NONE, 1, 2, 1, 0, 0},
        {"sp 2 x pp 2, zbh1, zero 2", 2, 1, 2, 2, 2, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 1, 0},
        {"tp 2 x pp 2, Megatron-SP, zbh1", 2, 1, 1, 1, 2, DT_PREC_FP32, DT_AC_NONE, 1, 2, 1, 1, 0},
        {"tp 2 x pp 2, zero 2, ac selective", 2, 1, 1, 2, 2, DT_PREC_FP32, DT_AC_SELECTIVE, 1,
         2, 0, 0, 0},
        {"int8 storage, ac selective", 1, 1, 1, 0, 2, DT_PREC_FP32, DT_AC_SELECTIVE, 1, 1, 0, 0,
         1},
        {"sp 2, int8 storage, zero 3", 1, 1, 2, 3, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 1},
        {"tp 2 x sp 2, Megatron-SP, int8 storage", 1, 1, 2, 0, 1, DT_PREC_FP32, DT_AC_NONE, 1,
         2, 1, 0, 1},
    };
    dt_comm *self = NULL;
    DT_CHECK_OK(dt_dist_split(world, world->rank, 0, "self", &self));
    run_out ref = {0};
    const layout one = {"single process", 1, 1, 1, 0, 1, DT_PREC_FP32, DT_AC_NONE, 1, 1, 0, 0, 0};
    run(self, &mc, &one, &dd, &ref);
    dt_mem *mem = NULL;
    dt_model *m = NULL; /* the full table, to name tensors */
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_model_create(&mc, &(dt_model_opts){.B = 1, .T = 16}, mem, &m));
    for (size_t i = 0; m && i < sizeof L / sizeof L[0]; i++) {
        if (L[i].pp * L[i].dp * L[i].sp * L[i].tp != W)
            continue;
        run_out got = {0};
        run(world, &mc, &L[i], &dd, &got);
        if (L[i].int8) /* int8 storage: within its rounding of fp32 */
            for (int s = 0; s < STEPS; s++)
                DT_CHECK(fabs(got.loss[s] - ref.loss[s]) <= 1e-2 * ref.loss[s],
                         "%s (attn %d), step %d: loss %.6g, fp32 %.6g", L[i].name, (int)attn,
                         s, got.loss[s], ref.loss[s]);
        else
            compare(L[i].name, attn, &ref, &got, m, 1e-5);
        free(got.w);
    }
    dt_model_free(m);
    dt_mem_free(mem);
    if (W == 1) { /* bf16 matmuls: within bf16 rounding of the fp32 run's loss */
        const layout bf = {"bf16", 1, 1, 1, 0, 1, DT_PREC_BF16, DT_AC_NONE, 1, 1, 0, 0, 0};
        run_out got = {0};
        run(world, &mc, &bf, &dd, &got);
        for (int s = 0; s < STEPS; s++)
            DT_CHECK(fabs(got.loss[s] - ref.loss[s]) <= 2e-2 * ref.loss[s],
                     "bf16, step %d: loss %.6g, fp32 %.6g", s, got.loss[s], ref.loss[s]);
        free(got.w);
    }
    free(ref.w);
    dt_comm_free(self);
    free(dd.inputs);
    free(dd.targets);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_comm *w = NULL;
    if (dt_dist_init(&argc, &argv, &w) != DT_OK) {
        fprintf(stderr, "dt_dist_init: %s\n", dt_err_msg());
        return 1;
    }
    run_all(w, DT_DIT_ATTN_FULL, 0);
    run_all(w, DT_DIT_ATTN_SPATIAL_TEMPORAL, 0);
    run_all(w, DT_DIT_ATTN_FULL, 5);
    int rc = dt_test_end_collective(w);
    dt_dist_finalize(w);
    return rc;
}
