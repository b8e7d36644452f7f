/* plan/cost_dit: the video DiT's time model against counts made here, independently:
 *   - the model FLOPs of a step equal a count over the built model's own parameter table
 *     (every weight applied to the rows it sees: token rows for the patch embedding, q|k|v,
 *     proj, fc1, fc2 and the final linear, one row a clip for the timestep MLP and the adaLN
 *     modulations) plus non-causal attention written out per block (the clip, a frame, or a
 *     position across time), forward and backward 3x; and equal the model's MFU count;
 *   - on a device where only matmuls cost (1 GFLOP/s), the step is those FLOPs / rate less
 *     the input gradients nobody needs (the patch embedding's and the timestep MLP's first
 *     layer); full checkpointing adds each block's forward, selective its attention;
 *   - Ulysses sp 2 with spatial_temporal attention spends less time in all-to-alls than with
 *     full attention (half its blocks run spatial attention locally), and tp 2 divides the
 *     token matmuls but not the modulations.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/mem.h"
#include "harness.h"
#include "models/dit.h"
#include "plan/cost.h"

static dt_config config_of(const dt_dit_config *d, int batch) {
    dt_config c;
    dt_config_defaults(&c);
    dt_model_config *m = &c.model;
    m->arch = DT_ARCH_DIT;
    m->frames = d->frames, m->channels = d->channels, m->height = d->height, m->width = d->width;
    m->patch_t = d->pt, m->patch_h = d->ph, m->patch_w = d->pw;
    m->n_layer = d->n_layer, m->n_head = d->n_head, m->n_embd = d->n_embd;
    m->n_classes = d->n_classes, m->attn = d->attn;
    c.train.batch_size = batch, c.train.micro_batch_size = 0;
    c.train.seq_len = dt_dit_tokens(d);
    return c;
}

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

/* Forward FLOPs of one clip, from the model's tensor table and the attention written out. */
static double clip_forward_flops(const dt_dit *d, const dt_dit_config *dc) {
    double S = dt_dit_tokens(dc), C = dc->n_embd, flops = 0;
    for (int i = 0; i < dt_dit_n_full_params(d); i++) {
        const dt_param *p = dt_dit_full_param(d, i);
        if (!has(p->name, ".weight") || has(p->name, "embedding_table"))
            continue; /* biases add, the label table is a lookup */
        bool tokens = has(p->name, "x_embedder") || has(p->name, "attn.") ||
                      has(p->name, "mlp.fc") || has(p->name, "final_layer.linear");
        bool clip = has(p->name, "t_embedder") || has(p->name, "adaLN_modulation");
        DT_CHECK(tokens != clip, "%s: rows of what?", p->name);
        flops += 2.0 * (double)p->numel * (tokens ? S : 1);
    }
    int Tt = dc->frames / dc->pt, hw = (dc->height / dc->ph) * (dc->width / dc->pw);
    for (int l = 0; l < dc->n_layer; l++) {
        int T = dc->attn == DT_DIT_ATTN_FULL ? Tt * hw : l % 2 == 0 ? hw : Tt;
        flops += 2.0 * 2.0 * S * T * C; /* QK^T and PV, every query against T keys */
    }
    return flops;
}

/* matmuls and attention at 1 GFLOP/s; communication, memory passes and the norms free */
static const dt_plan_device FAST = {.flops_fp32 = 1e9,
                                    .flops_16 = 1e9,
                                    .bandwidth = 1e30,
                                    .latency = 0,
                                    .mem_bandwidth = 1e30,
                                    .disk_write = 1e30,
                                    .disk_read = 1e30,
                                    .norm = {1e30, 1e30},
                                    .act = {1e30, 1e30}};

static double step(const dt_config *c, int world, const dt_plan_device *dev) {
    dt_plan_time t;
    DT_CHECK_OK(dt_plan_step_time(c, world, dev, NULL, &t));
    return t.step_s;
}

static void check_shape(const dt_dit_config *dc) {
    dt_mem *mem = NULL;
    dt_dit *d = NULL;
    DT_CHECK_OK(dt_mem_init(&mem));
    DT_CHECK_OK(dt_dit_init(dc, &(dt_dit_opts){.B = 1, .training = true}, mem, &d));
    if (!d) {
        dt_mem_free(mem);
        return;
    }
    const int batch = 4;
    dt_config c = config_of(dc, batch);
    double fwd = clip_forward_flops(d, dc);
    double planned = dt_plan_step_flops(&c);
    DT_CHECK_CLOSE(planned, 3 * batch * fwd, 1e-12 * planned);
    DT_CHECK_CLOSE(planned, batch * dt_dit_flops_per_sample(d), 1e-12 * planned);

    /* the step on FAST: every FLOP at 1e9/s, less the two unused input gradients */
    double S = dt_dit_tokens(dc), C = dc->n_embd, P = dt_dit_patch_dim(dc);
    double no_dx = 2.0 * batch * (S * P * C + DT_DIT_FREQ_DIM * C);
    double want = (planned - no_dx) / 1e9;
    DT_CHECK_CLOSE(step(&c, 1, &FAST), want, 1e-9 * want);
    c.train.micro_batch_size = 1; /* the same work in four passes */
    DT_CHECK_CLOSE(step(&c, 1, &FAST), want, 1e-9 * want);

    /* checkpointing: full reruns each block's forward, selective its attention forward */
    int Tt = dc->frames / dc->pt, hw = (dc->height / dc->ph) * (dc->width / dc->pw);
    double attn = 0, block = 0;
    for (int l = 0; l < dc->n_layer; l++) {
        int T = dc->attn == DT_DIT_ATTN_FULL ? Tt * hw : l % 2 == 0 ? hw : Tt;
        attn += 4.0 * batch * S * T * C;
        block += 2.0 * batch * (C * 6 * C + S * (3 * C * C + C * C + 8 * C * C));
    }
    /* the attention kernel at half the rate over layer 1's sequence (spatial_temporal: a
     * position's frames; full: the clip), its rate elsewhere and in 16-bit modes: those
     * layers' attention, forward and backward, takes twice as long */
    int T1 = dc->attn == DT_DIT_ATTN_FULL ? Tt * hw : Tt;
    double slow = 0;
    for (int l = 0; l < dc->n_layer; l++)
        slow += (dc->attn == DT_DIT_ATTN_FULL || l % 2 == 1) ? 3 * 4.0 * batch * S * T1 * C : 0;
    dt_plan_device half = FAST;
    half.n_attn_seq = 2;
    half.attn_seq[0] = (dt_plan_attn_seq){0, T1, {0.5e9, 0.5e9}};
    half.attn_seq[1] = (dt_plan_attn_seq){1, hw, {0.1e9, 0.1e9}};
    DT_CHECK_CLOSE(step(&c, 1, &half), want + slow / 1e9, 1e-9 * want);
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK_CLOSE(step(&c, 1, &FAST), want + attn / 1e9, 1e-9 * want);
    c.plugin.ac = DT_AC_FULL;
    DT_CHECK_CLOSE(step(&c, 1, &FAST), want + (attn + block) / 1e9, 1e-9 * want);
    dt_dit_free(d);
    dt_mem_free(mem);
}

/* configs/dit-bounce.ini's shape */
static const dt_dit_config BOUNCE = {.frames = 8,
                                     .channels = 3,
                                     .height = 16,
                                     .width = 16,
                                     .pt = 1,
                                     .ph = 4,
                                     .pw = 4,
                                     .n_layer = 4,
                                     .n_head = 4,
                                     .n_embd = 128,
                                     .n_classes = 3,
                                     .attn = DT_DIT_ATTN_SPATIAL_TEMPORAL};

/* Ulysses: the all-to-alls of full attention cost more than of spatial_temporal's; tp 2
 * halves the token matmuls and attention but not the per-clip modulations. */
static void test_layouts(void) {
    dt_dit_config dc = BOUNCE;
    dt_config c = config_of(&dc, 8);
    c.plugin.sp_size = 2;
    c.plugin.overlap = false;  /* the gradient all-reduce is exposed alike in both */
    dt_plan_device net = FAST; /* free compute: what is left is the all-to-alls */
    net.flops_fp32 = net.flops_16 = 1e30, net.bandwidth = 1e9, net.latency = 1e-5;
    double st = step(&c, 2, &net);
    c.model.attn = DT_DIT_ATTN_FULL;
    double full = step(&c, 2, &net);
    /* per block with all-to-alls: forward q|k|v and the output, backward the output twice
     * and q|k|v: 5 calls, each (N/2) rows x width/2 floats to the peer; spatial_temporal has
     * 2 such blocks of 4, full all 4 (the gradient all-reduce over sp is the same in both) */
    double N = 8.0 * 128, C = 128, lat = 1e-5;
    double q = (N / 2) * (3 * C / 2) * 4 / 1e9, o = (N / 2) * (C / 2) * 4 / 1e9;
    double two_blocks = 2 * (2 * q + 3 * o + 5 * lat);
    DT_CHECK(st > two_blocks, "sp2 spatial_temporal %g s > its all-to-alls %g s", st, two_blocks);
    DT_CHECK_CLOSE(full - st, two_blocks, 1e-6 * two_blocks);

    /* tp 2: the blocks' token matmuls and attention halve; the per-clip modulations, the
     * embedders and the final layer stay whole */
    c = config_of(&dc, 8);
    double one = step(&c, 1, &FAST);
    c.plugin.tp_size = 2;
    double two = step(&c, 2, &FAST);
    double split = 0;
    for (int l = 0; l < dc.n_layer; l++)
        split += 3 * (2 * N * 12 * C * C + 4 * N * C * (l % 2 == 0 ? 16 : 8));
    DT_CHECK_CLOSE(two, one - split / 2 / 1e9, 1e-9 * one);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    const dt_dit_config shapes[] = {
        {.frames = 6,
         .channels = 3,
         .height = 4,
         .width = 10,
         .pt = 2,
         .ph = 2,
         .pw = 2,
         .n_layer = 3,
         .n_head = 4,
         .n_embd = 40,
         .n_classes = 5,
         .attn = DT_DIT_ATTN_SPATIAL_TEMPORAL},
        {.frames = 5,
         .channels = 1,
         .height = 6,
         .width = 6,
         .pt = 1,
         .ph = 3,
         .pw = 2,
         .n_layer = 2,
         .n_head = 3,
         .n_embd = 42,
         .n_classes = 0,
         .attn = DT_DIT_ATTN_FULL},
        BOUNCE,
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(&shapes[i]);
    test_layouts();
    return DT_TEST_END();
}
