/* plan/memory: the memory model against sizes worked out by hand for a one-layer GPT-2, the
 * pipeline slot counts each schedule implies, and the directions every feature must move
 * memory in (ZeRO shards, ranks past the end of a shard, activation checkpointing, int8
 * activations, 16-bit copies, optimizer offload). The byte-exact comparison with measured
 * runs is tests/plan/mem_predict.sh. */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "harness.h"
#include "plan/memory.h"

static dt_config tiny(void) {
    dt_config c;
    dt_config_defaults(&c);
    c.model.arch = DT_ARCH_GPT2;
    c.model.n_layer = 1, c.model.n_head = 1, c.model.n_embd = 16;
    c.model.vocab_size = 16, c.model.max_seq_len = 16;
    c.train.batch_size = 1, c.train.micro_batch_size = 0, c.train.seq_len = 16;
    c.checkpoint.every = 0;
    c.train.export_path[0] = c.checkpoint.resume[0] = c.model.init[0] = '\0';
    return c;
}

static dt_plan_mem predict(const dt_config *c, int world, int rank) {
    dt_plan_mem m;
    DT_CHECK_OK(dt_plan_memory(c, world, rank, NULL, &m));
    return m;
}

/* C = 16, one head, F = 64, V = T = 16, one sequence of 16 tokens, fp32, one process. */
static void test_by_hand(void) {
    dt_config c = tiny();
    dt_plan_mem m = predict(&c, 1, 0);
    /* wte 256 + wpe 256 | ln 4 x 16, c_attn 768 + 48, proj 256 + 16, fc 1024 + 64, down 1024
     * + 16 | ln_f 2 x 16 */
    int64_t n = 512 + 3280 + 32;
    DT_CHECK(m.n_local == n, "local arena %lld floats, want %lld", (long long)m.n_local,
             (long long)n);
    DT_CHECK(m.cat[DT_MEM_PARAMS] == 4 * n && m.cat[DT_MEM_GRADS] == 4 * n, "params/grads");
    DT_CHECK(m.cat[DT_MEM_OPTIM] == 8 * n, "optim %lld", (long long)m.cat[DT_MEM_OPTIM]);
    /* residual 2 x 1024 | stats 4 x 64, qkv 3072, att 1024, lse 64, x2 1024, h 4096 | final
     * norm stats 2 x 64, output 1024, losses 64 | tokens 2 x 64 */
    int64_t acts = 2048 + 9536 + 1216;
    DT_CHECK(m.acts_arena == acts, "activation arena %lld, want %lld", (long long)m.acts_arena,
             (long long)acts);
    DT_CHECK(m.cat[DT_MEM_ACTS] == acts + 128, "activations %lld", (long long)m.cat[DT_MEM_ACTS]);
    DT_CHECK(m.cat[DT_MEM_COMM] == 0, "no comm buffers in one process");
    int64_t sum = 0;
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)
        sum += m.cat[k];
    DT_CHECK(m.total == sum, "total is the sum of the persistent peaks");
    /* bf16 adds no weights (its 16-bit ones are cast per unit) and the shared 16-bit copies of
     * matmul inputs: the norm
     * outputs' [16, 16], att's / the MLP activation's [16, 64], the final norm output's; it
     * keeps qkv [16, 48], att [16, 16] and h [16, 64] in bf16 (3072 + 1024 + 4096 -> 1536 +
     * 512 + 2048) */
    c.plugin.precision = DT_PREC_BF16;
    dt_plan_mem b = predict(&c, 1, 0);
    DT_CHECK(b.cat[DT_MEM_PARAMS] == 4 * n,
             "bf16 params %lld (the 16-bit weights are cast per "
             "unit into the transients)",
             (long long)b.cat[DT_MEM_PARAMS]);
    DT_CHECK(b.acts_arena == acts + 512 + 2048 + 512 - 4096, "bf16 arena %lld",
             (long long)b.acts_arena);
    /* fp16 keeps qkv, att (2048 more) and h (2048 more) in fp32; of the temporaries it keeps
     * the fp32 norm output [16, 16] (1024) that bf16's norm does without over one tp rank
     * (neither makes an fp32 q|k|v scratch: bf16's qkv matmul writes bf16 itself) */
    c.plugin.precision = DT_PREC_FP16;
    dt_plan_mem h = predict(&c, 1, 0);
    DT_CHECK(h.acts_arena == b.acts_arena + 4096 && h.temp_arena == b.temp_arena + 1024,
             "fp16 vs bf16: acts %lld / %lld, temp %lld / %lld", (long long)h.acts_arena,
             (long long)b.acts_arena, (long long)h.temp_arena, (long long)b.temp_arena);
    DT_CHECK(h.total == b.total + 4096 + 1024, "fp16 total %lld vs bf16 %lld", (long long)h.total,
             (long long)b.total);
    /* against fp32: the head's buffers (its logits chunk [16, 16], over which 16-bit modes
     * round the gradient, and its 16-bit matrix) share a region with a block's own, here the
     * larger: there the 16-bit backward scratch [16, 64] (2048) and the block's 16-bit weights
     * (3280 x 2 bytes, 6592 carved) come in and the fp32 MLP activation [16, 64] (4096) goes */
    DT_CHECK(h.temp_arena == m.temp_arena + 2048 + 6592 - 4096, "fp16 temp %lld, fp32 %lld",
             (long long)h.temp_arena, (long long)m.temp_arena);
}

static void test_zero(void) {
    dt_config c = tiny();
    c.train.batch_size = 4;
    c.plugin.type = DT_PLUGIN_HYBRID;
    int64_t prev_params = -1, prev_optim = -1;
    for (int z = 0; z <= 3; z++) {
        c.plugin.zero_stage = z;
        dt_plan_mem m = predict(&c, 4, 0);
        if (z == 1)
            DT_CHECK(m.cat[DT_MEM_OPTIM] < prev_optim, "ZeRO-1 shards the optimizer");
        if (z == 2)
            DT_CHECK(m.cat[DT_MEM_GRADS] < 4 * m.n_local, "ZeRO-2 shards the gradients");
        if (z == 3)
            DT_CHECK(m.cat[DT_MEM_PARAMS] < prev_params && m.cat[DT_MEM_COMM] > 0,
                     "ZeRO-3 params %lld < ZeRO-0's %lld, with gather buffers",
                     (long long)m.cat[DT_MEM_PARAMS], (long long)prev_params);
        if (z == 0)
            prev_params = m.cat[DT_MEM_PARAMS], prev_optim = m.cat[DT_MEM_OPTIM];
    }
    /* 3824 floats over 3 ranks: shards of 1280, the last rank owns 1264 */
    c.plugin.zero_stage = 1;
    c.train.batch_size = 3;
    dt_plan_mem first = predict(&c, 3, 0), last = predict(&c, 3, 2);
    DT_CHECK(first.cat[DT_MEM_OPTIM] == 8 * 1280 && last.cat[DT_MEM_OPTIM] == 8 * 1264,
             "optim shards %lld, %lld", (long long)first.cat[DT_MEM_OPTIM],
             (long long)last.cat[DT_MEM_OPTIM]);
}

static void test_pipeline_slots(void) {
    for (int pp = 2; pp <= 4; pp += 2)
        for (int m = pp; m <= 2 * pp; m += pp)
            for (int r = 0; r < pp; r++) {
                dt_schedule *g = NULL, *f = NULL, *z = NULL;
                DT_CHECK_OK(dt_sched_gpipe(pp, m, &g));
                DT_CHECK_OK(dt_sched_1f1b(pp, m, &f));
                DT_CHECK_OK(dt_sched_zbh1(pp, m, &z));
                if (!g || !f || !z)
                    return;
                int want_1f1b = pp - r < m ? pp - r : m;
                DT_CHECK(dt_sched_slots(g, r) == m, "gpipe pp %d m %d rank %d: %d", pp, m, r,
                         dt_sched_slots(g, r));
                DT_CHECK(dt_sched_slots(f, r) == want_1f1b, "1f1b pp %d m %d rank %d: %d", pp, m, r,
                         dt_sched_slots(f, r));
                /* ZB-H1 keeps a micro-batch until its W: more than 1F1B on late ranks */
                DT_CHECK(dt_sched_slots(z, r) >= want_1f1b, "zbh1 pp %d m %d rank %d", pp, m, r);
                DT_CHECK(dt_sched_inbox(g, 0) == 0, "the first stage receives nothing");
                dt_sched_free(g);
                dt_sched_free(f);
                dt_sched_free(z);
            }
}

static void test_features(void) {
    dt_config c = tiny();
    c.model.n_layer = 4;
    c.train.batch_size = 2;
    dt_plan_mem base = predict(&c, 1, 0);
    c.plugin.ac = DT_AC_FULL;
    c.plugin.ac_every = 1;
    dt_plan_mem full = predict(&c, 1, 0);
    c.plugin.ac_every = 2;
    dt_plan_mem half = predict(&c, 1, 0);
    DT_CHECK(full.acts_arena < half.acts_arena && half.acts_arena < base.acts_arena,
             "full AC %lld < every 2nd %lld < none %lld", (long long)full.acts_arena,
             (long long)half.acts_arena, (long long)base.acts_arena);
    c.plugin.ac = DT_AC_SELECTIVE;
    dt_plan_mem sel = predict(&c, 1, 0);
    DT_CHECK(sel.acts_arena < base.acts_arena && sel.acts_arena > full.acts_arena,
             "selective between none and full");
    c.plugin.ac = DT_AC_NONE;
    c.plugin.act_compress = DT_ACT_COMPRESS_INT8;
    dt_plan_mem q = predict(&c, 1, 0);
    DT_CHECK(q.acts_arena < base.acts_arena, "int8 activations are smaller");
    c.plugin.act_compress = DT_ACT_COMPRESS_NONE;
    c.plugin.offload = DT_OFFLOAD_DISK;
    dt_plan_mem off = predict(&c, 1, 0);
    DT_CHECK(off.cat[DT_MEM_OPTIM] ==
                 16 * dt_plan_offload_chunk(base.n_local, c.plugin.offload_window_mb),
             "offload window");
    /* sharded checkpoints add only the 8 MiB buffer, offloaded moments or not (they stream
     * through it) */
    c.checkpoint.every = 1;
    dt_plan_mem ck_off = predict(&c, 1, 0);
    c.plugin.offload = DT_OFFLOAD_NONE;
    dt_plan_mem ck = predict(&c, 1, 0);
    DT_CHECK(ck.cat[DT_MEM_TEMP] - base.cat[DT_MEM_TEMP] == 8 << 20, "checkpoint temporaries");
    DT_CHECK(ck_off.cat[DT_MEM_TEMP] - base.cat[DT_MEM_TEMP] == 8 << 20,
             "offloaded checkpoint temporaries");
}

/* The activation features by hand on the one-layer model (N = 16 tokens, W = 48, A = 16,
 * F = 64, one head): the block's saved fields are ln stats 4 x 64, qkv 3072, att 1024, lse
 * 64, x2 1024, h 4096 (9536 bytes); bf16 keeps no copy per block, only buffers shared by
 * every block: the norm outputs' [16, 16] 512, att's / the MLP activation's [16, 64] 2048,
 * and the final norm output's 512. */
static void test_features_by_hand(void) {
    dt_config c = tiny();
    int64_t none = predict(&c, 1, 0).acts_arena;
    /* full: the slot keeps nothing; the shared set holds every field and the output [16, 16] */
    c.plugin.ac = DT_AC_FULL, c.plugin.ac_every = 1;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none + 1024, "ac=full");
    /* selective on the only block: slot 8448 (no att, lse), shared att + lse 1088 */
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none, "ac=selective, one block");
    /* int8: the slot keeps ln stats and lse (320) in fp32 and payload + row scales of qkv
     * [16, 48] 768 + 64, att [16, 16] 256 + 64, x2 256 + 64, h [16, 64] 1024 + 64 (2560); the
     * shared set restores qkv, att, x2, h (9216) */
    c.plugin.ac = DT_AC_NONE;
    c.plugin.act_compress = DT_ACT_COMPRESS_INT8;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none - 9536 + 320 + 2560 + 9216, "int8");
    /* int8 in bf16: the same payloads, the shared h restored in bf16 (2048 less), plus the
     * shared 16-bit copies */
    c.plugin.precision = DT_PREC_BF16;
    DT_CHECK(predict(&c, 1, 0).acts_arena ==
                 none - 9536 + 320 + 2560 + 9216 - 2048 + 512 + 2048 + 512, "int8 bf16");
    c.plugin.precision = DT_PREC_FP32;
    /* int8 + selective: slot ln 256 + payloads of qkv, x2, h 2240; shared att, lse, qkv, x2,
     * h 9280 */
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none - 9536 + 256 + 2240 + 9280,
             "int8 + selective");
    /* three blocks, selective every 2nd (0 and 2): each drops att + lse (1088), shared once */
    c = tiny();
    c.model.n_layer = 3;
    int64_t none3 = predict(&c, 1, 0).acts_arena;
    c.plugin.ac = DT_AC_SELECTIVE, c.plugin.ac_every = 2;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none3 - 1088, "selective every 2nd");
    c.plugin.precision = DT_PREC_BF16;
    c.plugin.ac = DT_AC_NONE;
    /* bf16: the shared copies, and qkv, att and h in bf16 (4096 less per block) */
    int64_t none3_bf16 = predict(&c, 1, 0).acts_arena;
    DT_CHECK(none3_bf16 == none3 + 512 + 2048 + 512 - 6 * 2048,
             "bf16: shared copies, bf16 qkv, att, h");
    /* selective: blocks 0 and 2 drop att (bf16, 512) + lse (64), the shared set holds them once */
    c.plugin.ac = DT_AC_SELECTIVE;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none3_bf16 - 576, "selective bf16");
    c.plugin.precision = DT_PREC_FP16; /* qkv, att and h in fp32 */
    DT_CHECK(predict(&c, 1, 0).acts_arena == none3_bf16 + 6 * 2048 - 1088, "selective fp16");
    /* int8 + full every 2nd of two blocks: block 0 keeps nothing, block 1 stores int8 (2880);
     * the shared set is every field (9536) + the output (1024) */
    c = tiny();
    c.model.n_layer = 2;
    int64_t none2 = predict(&c, 1, 0).acts_arena;
    c.plugin.ac = DT_AC_FULL, c.plugin.ac_every = 2;
    c.plugin.act_compress = DT_ACT_COMPRESS_INT8;
    DT_CHECK(predict(&c, 1, 0).acts_arena == none2 - 2 * 9536 + 2880 + 9536 + 1024,
             "int8 + full every 2nd");
}

/* offload = disk: the window of 16 bytes per chunk float; the chunk from the window's MiB as
 * a float (0.01f MiB = 10485.76 bytes: 40 x 256, 640 floats) or half the count rounded up
 * to 16; a checkpoint save under ZeRO 1-3 adds the shard read back from the file. */
static void test_offload(void) {
    DT_CHECK(dt_plan_offload_chunk(3824, 64.0f) == 1920, "half of 3824, to 16");
    DT_CHECK(dt_plan_offload_chunk(100000, 0.01f) == 640, "0.01 MiB");
    DT_CHECK(dt_plan_offload_chunk(100000, 0.1f) == 6544, "0.1f MiB: 409 x 16");
    DT_CHECK(dt_plan_offload_chunk(10, 64.0f) == 16 && dt_plan_offload_chunk(1000, 1e-4f) == 16,
             "at least 16");
    dt_config c = tiny();
    c.plugin.offload = DT_OFFLOAD_DISK;
    c.plugin.offload_window_mb = 0.01f;
    DT_CHECK(predict(&c, 1, 0).cat[DT_MEM_OPTIM] == 16 * 640, "ZeRO 0 window");
    c.train.batch_size = 2;
    c.plugin.type = DT_PLUGIN_HYBRID, c.plugin.zero_stage = 2;
    dt_plan_mem z2 = predict(&c, 2, 1); /* 3824 floats: shards of 1920, rank 1 owns 1904 */
    DT_CHECK(z2.own_count == 1904 && z2.cat[DT_MEM_OPTIM] == 16 * 640, "ZeRO 2 window");
    c.plugin.offload_window_mb = 64.0f;
    DT_CHECK(predict(&c, 2, 1).cat[DT_MEM_OPTIM] == 16 * 960, "ZeRO 2: half of 1904, to 16");
    c.checkpoint.every = 1;
    int64_t ck_off = predict(&c, 2, 1).cat[DT_MEM_TEMP];
    c.plugin.offload = DT_OFFLOAD_NONE;
    int64_t ck = predict(&c, 2, 1).cat[DT_MEM_TEMP];
    /* a sharded save streams the offloaded moments through ckpt.io: no copy of their size */
    DT_CHECK(ck_off == ck, "offloaded moments add nothing to a save, %lld",
             (long long)(ck_off - ck));
    c.plugin.type = DT_PLUGIN_NONE, c.plugin.zero_stage = 0;
    dt_plan_mem z0 = predict(&c, 2, 1);
    c.plugin.offload = DT_OFFLOAD_DISK;
    DT_CHECK(predict(&c, 2, 1).cat[DT_MEM_TEMP] == z0.cat[DT_MEM_TEMP], "ZeRO 0 alike");
    /* async: the staging copy of the rank's partition (weights, m, v) beside its ckpt.io */
    c.checkpoint.async = true;
    DT_CHECK(predict(&c, 2, 1).cat[DT_MEM_TEMP] - z0.cat[DT_MEM_TEMP] == 12 * z0.own_count,
             "async staging: 12 bytes per owned float");
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    test_by_hand();
    test_zero();
    test_pipeline_slots();
    test_features();
    test_features_by_hand();
    test_offload();
    return DT_TEST_END();
}
