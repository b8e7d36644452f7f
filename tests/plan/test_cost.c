/* plan/cost: the time model and the model FLOPs of a step against a step worked out by hand
 * (one GPT-2 layer, one Llama layer with grouped KV heads, FLOPs / rate),
 * the pipeline bubble of the replayed schedules against the closed forms, and the directions
 * its levers must move the step (overlap hides the gradient reduction, recomputation costs a
 * forward, tensor parallelism divides the matmuls); the gradient group's traffic the time
 * model asks for alone is the whole ledger's, for every rank of a matrix of layouts; what a
 * device's software hides (tensor-parallel collectives, data-parallel traffic), and tensor
 * parallelism's own memory passes, by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "harness.h"
#include "plan/comm.h"
#include "plan/cost.h"
#include "plan/memory.h"

static dt_config tiny(void) {
    dt_config c;
    dt_config_defaults(&c);
    c.model.arch = DT_ARCH_GPT2;
    c.model.n_layer = 1, c.model.n_head = 1, c.model.n_embd = 16;
    c.model.vocab_size = 16, c.model.max_seq_len = 16;
    c.train.batch_size = 1, c.train.micro_batch_size = 0, c.train.seq_len = 16;
    return c;
}

/* matmuls at 1 GFLOP/s, communication and memory passes free */
static const dt_plan_device FAST_NET = {.flops_fp32 = 1e9,
                                        .flops_16 = 1e9,
                                        .bandwidth = 1e30,
                                        .latency = 0,
                                        .mem_bandwidth = 1e30,
                                        .disk_write = 1e30,
                                        .disk_read = 1e30};

static double step(const dt_config *c, int world, const dt_plan_device *d, double *bubble) {
    dt_plan_time t;
    DT_CHECK_OK(dt_plan_step_time(c, world, d, NULL, &t));
    if (bubble)
        *bubble = t.bubble;
    return t.step_s;
}

static void test_by_hand(void) {
    dt_config c = tiny();
    /* 16 tokens: block matmuls 2 x 16 x (16 x 48 + 16 x 16 + 2 x 16 x 64) = 98304, causal
     * attention 2 x 16 x 16 x 16 = 8192, LM head 2 x 16 x 16 x 16 = 8192; backward twice */
    double want = 3.0 * (98304 + 8192 + 8192) / 1e9;
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), want, 1e-9);
    DT_CHECK_CLOSE(dt_plan_step_flops(&c), want * 1e9, 1e-6);
    dt_config l = c; /* Llama (SwiGLU 48 wide, 2 KV heads of 4): only matmuls cost here */
    l.model.arch = DT_ARCH_LLAMA, l.model.n_head = 4, l.model.n_kv_head = 2;
    l.model.ffn_hidden = 48;
    double kv = 2 * 16 * (16 + 2 * 8) + 2 * 16 * 16, mlp = 2 * 3 * 16 * 48; /* a token */
    double lwant = 3.0 * (16 * (kv + mlp) + 8192 + 8192);
    DT_CHECK_CLOSE(dt_plan_step_flops(&l), lwant, 1e-6);
    DT_CHECK_CLOSE(step(&l, 1, &FAST_NET, NULL), lwant / 1e9, 1e-9);
    c.train.batch_size = 4, c.train.micro_batch_size = 1;
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), 4 * want, 1e-9);
}

static void test_pipeline(void) {
    dt_config c = tiny();
    c.model.n_layer = 8, c.model.n_embd = 64, c.model.n_head = 4, c.model.vocab_size = 4;
    c.train.batch_size = 8;
    c.plugin.pp_size = 2;
    c.plugin.microbatches = 8;
    double b_gpipe, b_1f1b, b_zb, b_int;
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "gpipe");
    step(&c, 2, &FAST_NET, &b_gpipe);
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "1f1b");
    step(&c, 2, &FAST_NET, &b_1f1b);
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "zbh1");
    step(&c, 2, &FAST_NET, &b_zb);
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "interleaved");
    c.plugin.pp_chunks = 2;
    step(&c, 2, &FAST_NET, &b_int);
    /* equal stages (a tiny head): (p - 1) / (m + p - 1) = 1/9 for GPipe and 1F1B */
    DT_CHECK(fabs(b_gpipe - 1.0 / 9) < 0.01, "gpipe bubble %.4f, theory %.4f", b_gpipe, 1.0 / 9);
    DT_CHECK(fabs(b_1f1b - b_gpipe) < 0.01, "1f1b bubble %.4f = gpipe's", b_1f1b);
    DT_CHECK(b_zb < b_1f1b, "zbh1 bubble %.4f < 1f1b %.4f", b_zb, b_1f1b);
    DT_CHECK(b_int < b_1f1b, "interleaved bubble %.4f < 1f1b %.4f", b_int, b_1f1b);
    /* each stage's part: busy and idle fill the schedule's span alike; the slowest stage's
     * parts are the step; the idle shares are the bubble; an uneven split moves work */
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "1f1b");
    c.plugin.pp_chunks = 1;
    snprintf(c.plugin.pp_layers, sizeof c.plugin.pp_layers, "6,2");
    dt_plan_device d = FAST_NET;
    d.mem_bandwidth = 1e8; /* an update that costs */
    dt_plan_time t;
    dt_plan_stage_time st[2];
    DT_CHECK_OK(dt_plan_step_time_stages(&c, 2, &d, NULL, &t, st));
    double span = st[0].compute_s + st[0].idle_s, idle = 0, worst = 0;
    for (int r = 0; r < 2; r++) {
        DT_CHECK_CLOSE(st[r].compute_s + st[r].idle_s, span, 1e-12);
        idle += st[r].idle_s;
        double s = span + st[r].comm_s + st[r].optimizer_s;
        worst = s > worst ? s : worst;
    }
    DT_CHECK_CLOSE(worst, t.step_s, 1e-12);
    DT_CHECK_CLOSE(idle / (2 * span), t.bubble, 1e-12);
    DT_CHECK(st[0].compute_s > 2 * st[1].compute_s && st[0].optimizer_s > st[1].optimizer_s,
             "6 layers against 2: compute %g vs %g s, update %g vs %g s", st[0].compute_s,
             st[1].compute_s, st[0].optimizer_s, st[1].optimizer_s);
}

/* plugin.pp_scatter: pp 2 x tp 2 with nothing costing but the messages between the stages'
 * machines (nodes of 2 ranks, the tp group inside one at no cost, the pipeline across at 1e7
 * bytes/s): each message is a tp piece, gathered for free, so the step, which is messages
 * alone, halves; with Megatron-SP the boundary is split already and nothing changes. */
static void test_scatter(void) {
    dt_config c = tiny();
    c.model.n_layer = 2, c.model.n_embd = 64, c.model.n_head = 4;
    c.train.batch_size = 4;
    c.plugin.pp_size = 2, c.plugin.tp_size = 2, c.plugin.microbatches = 4;
    dt_plan_device d = FAST_NET;
    d.flops_fp32 = d.flops_16 = 1e30;
    d.node_size = 2, d.inter_bandwidth = 1e7;
    double whole = step(&c, 4, &d, NULL);
    c.plugin.pp_scatter = true;
    double pieces = step(&c, 4, &d, NULL);
    DT_CHECK(whole > 1e-4, "the messages cost: %g s", whole);
    DT_CHECK_CLOSE(pieces, whole / 2, 1e-9);
    c.plugin.sp_mode = DT_SP_SPLIT_GATHER;
    double sg = step(&c, 4, &d, NULL);
    c.plugin.pp_scatter = false;
    DT_CHECK_CLOSE(sg, step(&c, 4, &d, NULL), 1e-12);
}

static void test_levers(void) {
    dt_config c = tiny();
    c.model.n_layer = 4, c.model.n_embd = 64, c.model.n_head = 4;
    c.train.batch_size = 4, c.train.micro_batch_size = 1;
    dt_plan_device slow = FAST_NET;
    slow.bandwidth = 1e7, slow.latency = 1e-5;
    c.plugin.overlap = true, c.plugin.bucket_mb = 1e-6f; /* a bucket a unit */
    double hidden = step(&c, 2, &slow, NULL);
    c.plugin.overlap = false;
    double exposed = step(&c, 2, &slow, NULL);
    DT_CHECK(hidden < exposed, "overlap hides the reduction: %g < %g", hidden, exposed);
    double none = step(&c, 1, &FAST_NET, NULL);
    c.plugin.ac = DT_AC_SELECTIVE;
    double sel = step(&c, 1, &FAST_NET, NULL);
    c.plugin.ac = DT_AC_FULL, c.plugin.ac_every = 1;
    double full = step(&c, 1, &FAST_NET, NULL);
    DT_CHECK(none < sel && sel < full, "recompute: none %g < selective %g < full %g", none, sel,
             full);
    c.plugin.ac = DT_AC_NONE;
    c.plugin.tp_size = 2;
    double tp2 = step(&c, 2, &FAST_NET, NULL);
    DT_CHECK(tp2 < 0.6 * none, "tp 2 halves the matmuls: %g vs %g", tp2, none);
}

/* Tensor parallelism's own passes, by hand: one Llama layer of 16 x 16 on 2 tp ranks with
 * only memory passes costing (1e9 bytes/s). Without split_gather each rank's block moves 32
 * bytes an element of [16, 16] forward (four copies) and 72 backward (four adds, six zeroed
 * sums), and its residual stream (two adds of 12 bytes each way) holds all 16 rows; with it,
 * nothing forward, 12 x 2 x (8 + 16) rows + 4 x (4 x 16 + 2 x 8) rows backward, 8 rows of
 * residual. The two steps differ by exactly that. */
static void test_tp_passes(void) {
    dt_config c = tiny();
    c.model.arch = DT_ARCH_LLAMA, c.model.n_head = 4, c.model.n_kv_head = 2;
    c.model.ffn_hidden = 48;
    c.plugin.tp_size = 2;
    dt_plan_device d = FAST_NET;
    d.flops_fp32 = d.flops_16 = 1e30;
    d.norm = d.act = d.attn_fp32 = (dt_plan_rate2){1e30, 1e30};
    d.mem_bandwidth = 1e9;
    double reduce = step(&c, 2, &d, NULL);
    c.plugin.sp_mode = DT_SP_SPLIT_GATHER;
    double gather = step(&c, 2, &d, NULL);
    double el = 16 * 16, residual = 2 * 2 * 12 * (el - el / 2);
    double copies = 32 * el + 72 * el - (12 * 2 * (el / 2 + el) + 4 * (4 * el + 2 * el / 2));
    DT_CHECK_CLOSE(reduce - gather, (residual + copies) / 1e9, 1e-15);
    /* software that reduces in place (the GPU presets) makes neither mode's copies */
    d.tp_in_place = true;
    double gather_in_place = step(&c, 2, &d, NULL);
    c.plugin.sp_mode = DT_SP_ALL_TO_ALL;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL) - gather_in_place, residual / 1e9, 1e-15);
    DT_CHECK_CLOSE(reduce - step(&c, 2, &d, NULL), 104 * el / 1e9, 1e-15);
}

/* The memory features' time, by hand on the one-layer model of test_by_hand (block matmuls
 * 98304 FLOPs, attention 8192, head 8192, at 1 GFLOP/s), and on two such layers. */
static void test_features(void) {
    dt_config c = tiny();
    double mm = 98304 / 1e9, at = 8192 / 1e9, head = 8192 / 1e9, base = 3 * (mm + at + head);
    /* one process: the last checkpointed block's backward follows its forward, whose set is
     * still in the shared buffers, so it reruns nothing; the blocks before it rerun */
    c.plugin.ac = DT_AC_SELECTIVE, c.plugin.ac_every = 1;
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base, 1e-12);
    c.plugin.ac = DT_AC_FULL;
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base, 1e-12);
    c.model.n_layer = 2;
    double base2 = base + 3 * (mm + at);
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base2 + mm + at, 1e-12); /* block 0's forward */
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base2 + at, 1e-12); /* block 0's attention */
    c.plugin.ac = DT_AC_FULL, c.plugin.ac_every = 2; /* only block 0, the last checkpointed */
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base2, 1e-12);
    c.plugin.act_compress = DT_ACT_COMPRESS_INT8; /* restores are never skipped */
    DT_CHECK_CLOSE(step(&c, 1, &FAST_NET, NULL), base2 + mm + at, 1e-12);
    /* int8, compute free, memory at 1 GB/s: per block 5 bytes per element of qkv (16 x 48),
     * att (16 x 16), x2 (16 x 16), h (16 x 64) to quantise, 5 again to restore */
    c = tiny();
    dt_plan_device mem = FAST_NET;
    mem.flops_fp32 = mem.flops_16 = 1e30, mem.mem_bandwidth = 1e9;
    double opt_s = step(&c, 1, &mem, NULL); /* the optimizer's passes */
    c.plugin.act_compress = DT_ACT_COMPRESS_INT8;
    double q8 = 5.0 * 16 * (48 + 16 + 16 + 64) / 1e9;
    DT_CHECK_CLOSE(step(&c, 1, &mem, NULL) - opt_s, 2 * q8, 1e-12);
    /* selective: att is rerun, not stored */
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK_CLOSE(step(&c, 1, &mem, NULL) - opt_s, 2 * 5.0 * 16 * (48 + 16 + 64) / 1e9, 1e-12);
    /* offload, the disk at 1 GB/s: 16 bytes per optimizer float, the update beside it, plus
     * one chunk (half the floats, rounded up to 16) */
    c = tiny();
    dt_plan_device disk = FAST_NET;
    disk.disk_write = disk.disk_read = 1e9;
    double fast = step(&c, 1, &disk, NULL);
    c.plugin.offload = DT_OFFLOAD_DISK;
    double n = 16 * 16 + 16 * 16 + 4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 +
               16 + 2 * 16; /* the padded arena of tiny() */
    DT_CHECK_CLOSE(n, 3824, 0);
    DT_CHECK_CLOSE(step(&c, 1, &disk, NULL) - fast, 16 * (n + 1920) / 1e9, 1e-12);
    /* activations on disk, compute and memory free, written at 1 GB/s and read at 2 GB/s:
     * the block's record (its input x 16 x 16, four norm statistics of 16, qkv 16 x 48,
     * att 16 x 16, lse 16, x2 16 x 16, h 16 x 64, fp32, 64-byte pieces) written once in
     * the forward and read once before the backward, nothing there to hide either */
    c = tiny();
    disk.flops_fp32 = disk.flops_16 = 1e30;
    disk.disk_write = 1e9, disk.disk_read = 2e9;
    fast = step(&c, 1, &disk, NULL);
    c.plugin.act_offload = DT_OFFLOAD_DISK;
    double record = 4.0 * (256 + 4 * 16 + 768 + 256 + 16 + 256 + 1024);
    DT_CHECK_CLOSE(step(&c, 1, &disk, NULL) - fast, record / 1e9 + record / 2e9, 1e-12);
    dt_plan_time t;
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &disk, NULL, &t));
    DT_CHECK_CLOSE(t.act_disk_s, record / 1e9 + record / 2e9, 1e-12);
    /* a disk that keeps up is hidden behind the compute (matmuls at 1 GFLOP/s: a block's
     * forward takes 106 us, the record's write 10.6 us) */
    disk = FAST_NET;
    disk.disk_write = disk.disk_read = 1e9;
    fast = step(&c, 1, &disk, NULL);
    c.plugin.act_offload = DT_OFFLOAD_NONE;
    DT_CHECK_CLOSE(step(&c, 1, &disk, NULL), fast, 1e-12);
}

/* The kernels that are not a matmul peak's, by hand on tiny() (16 tokens, C 16, F 64). */
/* a weight gradient's product (m: the layer's width) is slow, except at width 16 */
static double tokens_rate(void *ctx, int lp, dt_plan_gemm_op op, double m, double n, double k) {
    (void)ctx, (void)lp, (void)n, (void)k;
    return op == DT_PLAN_GEMM_DW && m != 16 ? 5e8 : 1e9;
}

static void test_kernel_rates(void) {
    dt_config c = tiny();
    /* attention at its own rates: 8192 FLOPs forward at 1e8, 2 x 8192 backward at 4e8 */
    dt_plan_device d = FAST_NET;
    double base = step(&c, 1, &d, NULL);
    d.attn_fp32 = (dt_plan_rate2){1e8, 4e8};
    DT_CHECK_CLOSE(step(&c, 1, &d, NULL) - base, 8192 / 1e8 + 2 * 8192 / 4e8 - 3 * 8192 / 1e9,
                   1e-12);
    /* bf16 runs use the 16-bit attention rates */
    c.plugin.precision = DT_PREC_BF16;
    DT_CHECK_CLOSE(step(&c, 1, &d, NULL), base, 1e-12);
    c.plugin.precision = DT_PREC_FP32;
    /* norms and GELU at 1e9 elements/s (matmuls and memory free): two norms of 16 x 16 and
     * GELU over 16 x 64 each way, and the final norm each way */
    d = FAST_NET;
    d.flops_fp32 = d.flops_16 = 1e30;
    d.norm = d.act = (dt_plan_rate2){1e9, 1e9};
    DT_CHECK_CLOSE(step(&c, 1, &d, NULL), (2 * (2 * 256 + 1024) + 2 * 256) / 1e9, 1e-15);
    /* matmul rates by shape: forward and input-gradient products at 1e9, the weight
     * gradients of qkv (48 wide, 2 x 16 x 48 x 16 FLOPs) and fc (64 wide, 2 x 16 x 64 x 16)
     * at 5e8, the 16-wide ones (projection, down, head) at 1e9; attention at the peak */
    d = FAST_NET;
    d.gemm_rate = tokens_rate;
    double slow = 2 * 16 * 48 * 16 + 2 * 16 * 64 * 16;
    double want = 3 * 98304 / 1e9 + slow / 5e8 - slow / 1e9 + 3 * 8192 / 1e9 + 3 * 8192 / 1e9;
    DT_CHECK_CLOSE(step(&c, 1, &d, NULL), want, 1e-12);
}

/* plugin.pp_layers = auto against every split tried by brute force: with a heavy LM head the
 * last stage takes fewer layers, and the step is the fastest of all splits. */
static void test_stage_split(void) {
    dt_config c = tiny();
    c.model.n_layer = 8, c.model.n_embd = 64, c.model.n_head = 4, c.model.vocab_size = 4096;
    c.train.batch_size = 8, c.plugin.microbatches = 8, c.plugin.pp_size = 2;
    snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "1f1b");
    char layers[64];
    DT_CHECK_OK(dt_plan_stage_split(&c, 2, &FAST_NET, layers, sizeof layers));
    int first = 0, last = 0;
    DT_CHECK(sscanf(layers, "%d,%d", &first, &last) == 2 && first + last == 8 && last < first,
             "auto split '%s' (the head's stage lighter)", layers);
    double best = 0;
    for (int a = 1; a < 8; a++) {
        snprintf(c.plugin.pp_layers, sizeof c.plugin.pp_layers, "%d,%d", a, 8 - a);
        double t = step(&c, 2, &FAST_NET, NULL);
        best = a == 1 || t < best ? t : best;
    }
    snprintf(c.plugin.pp_layers, sizeof c.plugin.pp_layers, "%s", layers);
    double got = step(&c, 2, &FAST_NET, NULL);
    DT_CHECK(got <= best * (1 + 1e-9), "auto %s: %.6g s, the best split %.6g s", layers, got, best);
    c.plugin.pp_layers[0] = '\0';
    DT_CHECK(got < step(&c, 2, &FAST_NET, NULL), "auto faster than the even split");
    c.plugin.pp_size = 1;
    DT_CHECK(dt_plan_stage_split(&c, 1, &FAST_NET, layers, sizeof layers) == DT_ERR_ARG,
             "no pipeline: nothing to split");
}

/* data.doc_mask's attention share, worked by hand: T 128 with documents of 128 at offsets
 * 0, 8, ..., 120 (the second query tile starts its document at 64 only at offset 64: 0.5 of
 * a tile instead of 1.5) is 31 of 32 half-tiles; T 4096 with documents of 64: every query
 * tile but the first sees its diagonal and the tile before, except at offset 0 (the diagonal
 * alone), 1457 of 32768; unknown length: all of it. */
static void test_doc_share(void) {
    DT_CHECK(fabs(dt_plan_doc_attn_share(128, 128) - 31.0 / 32) < 1e-12, "T 128 docs 128: %.6f",
             dt_plan_doc_attn_share(128, 128));
    DT_CHECK(fabs(dt_plan_doc_attn_share(4096, 64) - 1457.0 / 32768) < 1e-12,
             "T 4096 docs 64: %.6f", dt_plan_doc_attn_share(4096, 64));
    DT_CHECK(dt_plan_doc_attn_share(1024, 0) == 1, "unknown document length: all the work");
}

/* What dtrain probe measures: a kind's own rate replaces the bandwidth for that kind (dp2
 * without overlap, compute free: halving the all-reduce's rate doubles the step, halving the
 * all-gather's leaves it), and the exposed share of a reduction that fits behind the backward
 * adds that share of it. */
static void test_probed_device(void) {
    dt_config c = tiny();
    c.train.batch_size = 2;
    c.plugin.type = DT_PLUGIN_DDP;
    c.plugin.overlap = false;
    dt_plan_device d = {.flops_fp32 = 1e30,
                        .flops_16 = 1e30,
                        .bandwidth = 1e6,
                        .mem_bandwidth = 1e30,
                        .disk_write = 1e30,
                        .disk_read = 1e30};
    double base = step(&c, 2, &d, NULL);
    d.n_coll = 1;
    d.coll[0][DT_PLAN_ALLGATHER] = 0.5e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), base, 1e-12);
    d.coll[0][DT_PLAN_ALLREDUCE] = 0.5e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), 2 * base, 1e-9);
    /* by message size: calls larger than every size measured move at the largest's rate,
     * smaller ones at the smallest's; between two sizes at the rate interpolated in log size
     * (the gradient's all-reduce here is one call of some size w: with the rate falling from
     * 1e6 at w / 4 to 0.25e6 at 4 w, w is at the logarithm's midpoint, 0.625e6) */
    d.n_coll = 2;
    d.coll_at[0] = 1, d.coll_at[1] = 2;
    d.coll[1][DT_PLAN_ALLREDUCE] = 0.5e6, d.coll[0][DT_PLAN_ALLREDUCE] = 1e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), 2 * base, 1e-9);
    d.coll_at[0] = 1e15, d.coll_at[1] = 2e15;
    d.coll[0][DT_PLAN_ALLREDUCE] = 0.5e6, d.coll[1][DT_PLAN_ALLREDUCE] = 1e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), 2 * base, 1e-9);
    double w = base * 1e6; /* all of base is that one call's bytes at 1e6 bytes/s */
    d.coll_at[0] = w / 4, d.coll_at[1] = 4 * w;
    d.coll[0][DT_PLAN_ALLREDUCE] = 1e6, d.coll[1][DT_PLAN_ALLREDUCE] = 0.25e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), base / 0.625, 1e-9);
    /* compute at 1 GFLOP/s hides a reduction at 1 GB/s whole; a share 0.3 of it shows */
    d = (dt_plan_device){.flops_fp32 = 1e9,
                         .flops_16 = 1e9,
                         .bandwidth = 1e9,
                         .mem_bandwidth = 1e30,
                         .disk_write = 1e30,
                         .disk_read = 1e30};
    c.plugin.bucket_mb = 1e-6f; /* a bucket a unit, the block's posted before the head's */
    double serial = step(&c, 2, &d, NULL);
    c.plugin.overlap = true;
    double hidden = step(&c, 2, &d, NULL);
    d.exposed_share = 0.3;
    DT_CHECK(hidden < serial, "overlap hides the reduction: %.9g < %.9g", hidden, serial);
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), hidden + 0.3 * (serial - hidden), 1e-9);
}

/* ZeRO 0's buckets against the backward they are posted in, by hand on test_by_hand's layer
 * (dp 2, a sequence a rank, network free but a latency of 300 us a call): the backward runs
 * the head (16384 FLOP), the block (212992) and the embedding (free) at 1 GFLOP/s. A bucket a
 * unit: the head's call starts at 16.384 us and hides behind the block's backward, 212.992
 * us; the block's and the embedding's start as the backward ends, and hide nothing. One
 * bucket of everything starts as the backward ends: nothing hides. Only the last
 * micro-batch's backward reduces, so two micro-batches hide no more. */
static void test_buckets(void) {
    dt_config c = tiny();
    c.train.batch_size = 2;
    c.plugin.type = DT_PLUGIN_DDP;
    dt_plan_device d = FAST_NET;
    d.latency = 300e-6;
    double block_b = 212992 / 1e9;
    for (int mb = 1; mb <= 2; mb++) {
        c.train.batch_size = 2 * mb, c.train.micro_batch_size = 1;
        c.plugin.overlap = false, c.plugin.bucket_mb = 1e-6f;
        double serial = step(&c, 2, &d, NULL);
        c.plugin.overlap = true;
        DT_CHECK_CLOSE(step(&c, 2, &d, NULL), serial - block_b, 1e-9);
        d.exposed_share = 0.25; /* a quarter of what hides still shows */
        DT_CHECK_CLOSE(step(&c, 2, &d, NULL), serial - 0.75 * block_b, 1e-9);
        d.exposed_share = 0;
        c.plugin.overlap = false, c.plugin.bucket_mb = 25;
        serial = step(&c, 2, &d, NULL);
        c.plugin.overlap = true;
        DT_CHECK_CLOSE(step(&c, 2, &d, NULL), serial, 1e-12);
    }
}

/* Megatron-SP's collectives each at its own kind's rate, by hand on one Llama layer of 16
 * rows x 16 on tp 2, everything but the collectives free: a whole [16, 16] fp32 tensor is
 * 1024 bytes, a call moves half of it. Reduce-scatters: the block's two leaving ops forward
 * and its two entering ops' adjoints, the embedding leaving, the head's entry's adjoint: 6
 * calls. All-gathers: the block's two entries forward, two rebuilt and the two leaving
 * adjoints backward, the embedding's adjoint, the head's entry: 8 calls, and the loss
 * statistics (3 floats a row from the other rank, 192 bytes). All-reduces: the row-split
 * parameters' gradients (6 x 16 floats a block, the final norm's 2 x 16: 512 bytes) and the
 * gradient norm's (8). The ledger's bytes are their sum. */
static void test_sp_kinds(void) {
    dt_config c = tiny();
    c.model.arch = DT_ARCH_LLAMA, c.model.n_head = 4, c.model.n_kv_head = 2;
    c.model.ffn_hidden = 48;
    c.plugin.tp_size = 2;
    c.plugin.sp_mode = DT_SP_SPLIT_GATHER;
    dt_plan_device d = {.flops_fp32 = 1e30,
                        .flops_16 = 1e30,
                        .bandwidth = 1e6,
                        .mem_bandwidth = 1e30,
                        .disk_write = 1e30,
                        .disk_read = 1e30,
                        .norm = {1e30, 1e30},
                        .act = {1e30, 1e30},
                        .attn_fp32 = {1e30, 1e30},
                        .n_coll = 1};
    for (int k = 0; k < DT_PLAN_COLL_COUNT; k++)
        d.coll[0][k] = 1e6;
    double base = step(&c, 2, &d, NULL);
    d.coll[0][DT_PLAN_REDUCE_SCATTER] = 0.5e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL) - base, 6 * 512 / 1e6, 1e-12);
    d.coll[0][DT_PLAN_REDUCE_SCATTER] = 1e6, d.coll[0][DT_PLAN_ALLGATHER] = 0.5e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL) - base, (8 * 512 + 192) / 1e6, 1e-12);
    d.coll[0][DT_PLAN_ALLGATHER] = 1e6, d.coll[0][DT_PLAN_ALLREDUCE] = 0.5e6;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL) - base, (512 + 8) / 1e6, 1e-12);
    dt_plan_comm led;
    DT_CHECK_OK(dt_plan_comm_bytes(&c, 2, 0, NULL, &led));
    DT_CHECK(led.tp == 14 * 512 + 192 + 512 + 8, "the ledger's tp bytes: %lld", (long long)led.tp);
}

/* dt_plan_comm_grad_bytes against the gradient fields of dt_plan_comm_bytes */
static void test_grad_ledger(void) {
    static const struct {
        dt_arch arch;
        int zero, pp, tp, mb;
        const char *schedule;
    } cases[] = {{DT_ARCH_GPT2, 0, 1, 1, 0, "1f1b"},       {DT_ARCH_GPT2, 1, 2, 1, 1, "1f1b"},
                 {DT_ARCH_LLAMA, 2, 2, 1, 1, "zbh1"},      {DT_ARCH_LLAMA, 2, 1, 2, 1, "1f1b"},
                 {DT_ARCH_GPT2, 3, 1, 1, 2, "1f1b"},       {DT_ARCH_LLAMA, 3, 2, 1, 1, "gpipe"},
                 {DT_ARCH_GPT2, 2, 2, 2, 2, "interleaved"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_config c = tiny();
        c.model.arch = cases[i].arch;
        c.model.n_layer = 4, c.model.n_head = 4, c.model.n_embd = 64, c.model.vocab_size = 64;
        c.train.batch_size = 8, c.train.micro_batch_size = cases[i].mb;
        c.plugin.type = DT_PLUGIN_HYBRID, c.plugin.zero_stage = cases[i].zero;
        c.plugin.pp_size = cases[i].pp, c.plugin.tp_size = cases[i].tp;
        c.plugin.pp_chunks = strcmp(cases[i].schedule, "interleaved") ? 1 : 2;
        snprintf(c.plugin.pp_schedule, sizeof c.plugin.pp_schedule, "%s", cases[i].schedule);
        int world = 2 * cases[i].pp * cases[i].tp;
        for (int r = 0; r < world; r++) {
            dt_plan_comm all, grad;
            DT_CHECK_OK(dt_plan_comm_bytes(&c, world, r, NULL, &all));
            DT_CHECK_OK(dt_plan_comm_grad_bytes(&c, world, r, NULL, &grad));
            DT_CHECK(grad.grad_known == all.grad_known && grad.grad == all.grad &&
                         grad.grad_gather == all.grad_gather && grad.calls_grad == all.calls_grad &&
                         grad.calls_grad_gather == all.calls_grad_gather,
                     "case %zu rank %d: gradient group %lld bytes %lld calls alone, %lld / %lld "
                     "in the whole ledger",
                     i, r, (long long)grad.grad, (long long)grad.calls_grad, (long long)all.grad,
                     (long long)all.calls_grad);
        }
    }
}

/* dt_plan_device.hides, by hand on test_by_hand's layer (two heads, so tp 2 splits it). TP:
 * with collectives far slower than the products, hiding takes each block pass's products
 * off its collectives: the block's matmuls, forward and backward (98304 FLOPs over tp 2,
 * three times, at 1 GFLOP/s); with a fast network one piece of two stays exposed, so the
 * step lies between no collectives and all of them; all-reduce regions (no sequence
 * parallelism) are not hidden. DP: ZeRO-1's gather of the update runs behind the next step's
 * first forward (one micro-batch's: 114688 FLOPs); under a pipeline the reduction hides
 * behind the last micro-batch's backward, which dtrain's runtime does not. */
static void test_hides(void) {
    dt_config c = tiny();
    c.model.n_head = 2;
    c.plugin.tp_size = 2, c.plugin.sp_mode = DT_SP_SPLIT_GATHER;
    dt_plan_device slow = FAST_NET, hidden;
    slow.bandwidth = 1e3;
    hidden = slow, hidden.hides = DT_PLAN_HIDE_TP;
    DT_CHECK_CLOSE(step(&c, 2, &slow, NULL) - step(&c, 2, &hidden, NULL), 3 * 49152 / 1e9, 1e-9);
    dt_plan_device fast = FAST_NET, fast_hidden;
    fast.bandwidth = 1e12;
    fast_hidden = fast, fast_hidden.hides = DT_PLAN_HIDE_TP;
    double none = step(&c, 2, &FAST_NET, NULL), all = step(&c, 2, &fast, NULL);
    double piece = step(&c, 2, &fast_hidden, NULL);
    DT_CHECK(none < piece && piece < all, "tp hidden: %g in (%g, %g)", piece, none, all);
    c.plugin.sp_mode = DT_SP_ALL_TO_ALL;
    DT_CHECK_CLOSE(step(&c, 2, &slow, NULL), step(&c, 2, &hidden, NULL), 1e-12);

    dt_config z = tiny();
    z.train.batch_size = 4, z.train.micro_batch_size = 1;
    z.plugin.type = DT_PLUGIN_HYBRID, z.plugin.zero_stage = 1, z.plugin.overlap = true;
    hidden = slow, hidden.hides = DT_PLAN_HIDE_DP;
    DT_CHECK_CLOSE(step(&z, 2, &slow, NULL) - step(&z, 2, &hidden, NULL), 114688 / 1e9, 1e-9);
    z.model.n_layer = 2, z.plugin.pp_size = 2, z.plugin.zero_stage = 0;
    double after = step(&z, 4, &slow, NULL), behind = step(&z, 4, &hidden, NULL);
    DT_CHECK(behind < after, "under pp the reduction hides behind the last backward: %g < %g",
             behind, after);
    z.plugin.overlap = false;
    DT_CHECK_CLOSE(step(&z, 4, &slow, NULL), step(&z, 4, &hidden, NULL), 1e-12);
}

/* Ranks sharing cores: two ranks of test_by_hand's work each (dp 2, the network and memory
 * free) on one core take twice one rank's step; on two cores, or two threads a rank on four,
 * what a device a rank takes; two threads a rank on two cores, twice. */
static void test_shared_cores(void) {
    dt_config c = tiny();
    c.train.batch_size = 2;
    dt_plan_device d = FAST_NET;
    double alone = step(&c, 2, &d, NULL);
    d.cores = 1, d.threads = 1;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), 2 * alone, 1e-9);
    d.cores = 2;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), alone, 1e-12);
    d.cores = 4, d.threads = 2;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), alone, 1e-12);
    d.cores = 2;
    DT_CHECK_CLOSE(step(&c, 2, &d, NULL), 2 * alone, 1e-9);
}

/* The rows' reading (data_rate) and the update's rate (opt_bandwidth) by hand: a rank's rows
 * over the rate before its micro-batches, under a pipeline before every stage's first action,
 * so the whole schedule moves by it; AdamW's 7 passes and the norm's one over the local
 * floats at opt_bandwidth, which the step ratio no longer scales (it does memory's rate). */
static void test_data_and_update(void) {
    dt_config c = tiny();
    c.train.batch_size = 4, c.train.micro_batch_size = 1;
    dt_plan_device d = FAST_NET;
    dt_plan_time a, b;
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &d, NULL, &a));
    d.data_rate = 1000; /* rows a second: 4 rows, 4 ms */
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &d, NULL, &b));
    DT_CHECK_CLOSE(b.data_s, 4e-3, 1e-12);
    DT_CHECK_CLOSE(b.step_s - a.step_s, 4e-3, 1e-12);
    DT_CHECK_CLOSE(b.compute_s - a.compute_s, 4e-3, 1e-12);

    dt_config p = tiny();
    p.model.n_layer = 8, p.model.n_embd = 64, p.model.n_head = 4, p.model.vocab_size = 4;
    p.train.batch_size = 8, p.plugin.pp_size = 2, p.plugin.microbatches = 8;
    d = FAST_NET;
    DT_CHECK_OK(dt_plan_step_time(&p, 2, &d, NULL, &a));
    d.data_rate = 1000; /* each stage reads all 8 rows: the schedule starts 8 ms later */
    DT_CHECK_OK(dt_plan_step_time(&p, 2, &d, NULL, &b));
    DT_CHECK_CLOSE(b.step_s - a.step_s, 8e-3, 1e-12);
    DT_CHECK_CLOSE(b.data_s, 8e-3, 1e-12);

    d = FAST_NET;
    d.opt_bandwidth = 1e6;
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &d, NULL, &a));
    dt_plan_mem m;
    DT_CHECK_OK(dt_plan_memory(&c, 1, 0, &(dt_plan_mem_opts){0}, &m));
    DT_CHECK_CLOSE(a.optimizer_s, (double)m.n_local * 4 * 8 / 1e6, 1e-9);
    d.step_ratio = 2;
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &d, NULL, &b));
    DT_CHECK_CLOSE(b.optimizer_s, a.optimizer_s, 1e-12);
    d.opt_bandwidth = 0, d.mem_bandwidth = 1e6; /* memory's rate, scaled by the ratio */
    DT_CHECK_OK(dt_plan_step_time(&c, 1, &d, NULL, &b));
    DT_CHECK_CLOSE(b.optimizer_s, 2 * a.optimizer_s, 1e-9);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    test_grad_ledger();
    test_doc_share();
    test_probed_device();
    test_buckets();
    test_sp_kinds();
    test_by_hand();
    test_pipeline();
    test_scatter();
    test_levers();
    test_features();
    test_tp_passes();
    test_kernel_rates();
    test_stage_split();
    test_hides();
    test_shared_cores();
    test_data_and_update();
    return DT_TEST_END();
}
