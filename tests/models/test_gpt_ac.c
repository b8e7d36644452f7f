/* Activation checkpointing and int8 activation storage, at the model's interface, against
 * the unmodified path (ac none, fp32 storage), for GPT-2 and Llama in fp32 and bf16:
 *   - two micro-batches in two slots, forwards first, then split backwards (B) and weight
 *     passes (W) interleaved, so every rerun and restore happens after another block or
 *     slot reused the shared buffers; a second run does the same with the full backward;
 *   - ac full, selective, and full every 2nd block give the same gradient bits as none,
 *     with a smaller activation arena;
 *   - int8 storage gives gradients close to (NMSE < 1e-4) but not equal to none's, with a
 *     smaller arena; its forward (the loss) is exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/mem.h"
#include "core/rng.h"
#include "harness.h"
#include "models/gpt.h"

enum { B = 2, T = 8, N_MB = 2 };

typedef struct result {
    float *grad;
    int64_t n;
    double loss;
    size_t acts; /* activation bytes live after init */
} result;

static dt_model_config tiny(dt_arch arch) {
    dt_config cfg;
    dt_config_defaults(&cfg);
    dt_model_config m = cfg.model;
    m.arch = arch;
    m.n_layer = 3;
    m.n_head = 4;
    m.n_kv_head = arch == DT_ARCH_LLAMA ? 2 : 0;
    m.n_embd = 32;
    m.vocab_size = 48;
    m.max_seq_len = 16;
    m.ffn_hidden = arch == DT_ARCH_LLAMA ? 48 : 0;
    return m;
}

static void batch(int32_t *tok, int32_t *tgt, int n, int V) {
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(dt_rng_u64(11, "tok", i) % V);
        tgt[i] = (int32_t)(dt_rng_u64(11, "tgt", i) % V);
    }
}

/* Both micro-batches' forwards, then B and W (split) or full backwards, newest first. */
static result run(dt_arch arch, dt_precision prec, dt_ac_mode ac, int every,
                  dt_act_compress q, bool split) {
    dt_model_config mc = tiny(arch);
    dt_mem *mem;
    dt_gpt *g;
    result r = {0};
    DT_CHECK_OK(dt_mem_init(&mem));
    dt_gpt_opts o = {.B = B, .T = T, .precision = prec, .training = true, .n_slots = N_MB,
                     .split_backward = split, .ac = ac, .ac_every = every, .act_compress = q};
    DT_CHECK_OK(dt_gpt_init(&mc, &o, mem, &g));
    r.acts = dt_mem_live(mem, DT_MEM_ACTS);
    dt_gpt_init_weights(g, 3);
    int32_t tok[N_MB * B * T], tgt[N_MB * B * T];
    batch(tok, tgt, N_MB * B * T, mc.vocab_size);
    int L2 = mc.n_layer + 2;
    dt_gpt_zero_grad(g);
    for (int s = 0; s < N_MB; s++) {
        double part;
        DT_CHECK_OK(dt_gpt_forward_units(g, s, 0, L2, tok + s * B * T, B, T));
        DT_CHECK_OK(dt_gpt_loss_slot(g, s, tgt + s * B * T, B, T, 1.0f / (N_MB * B * T), true,
                                     &part));
        r.loss += part;
    }
    for (int s = N_MB - 1; s >= 0; s--)
        DT_CHECK_OK(dt_gpt_backward_units(g, s, 0, 0, L2, tok + s * B * T, B, T, split));
    for (int s = 0; split && s < N_MB; s++)
        DT_CHECK_OK(dt_gpt_weight_units(g, s, 0, L2, B, T));
    r.n = dt_gpt_numel(g);
    r.grad = malloc(sizeof(float) * r.n);
    memcpy(r.grad, dt_gpt_grads(g), sizeof(float) * r.n);
    dt_gpt_free(g);
    dt_mem_free(mem);
    return r;
}

static void check(dt_arch arch, dt_precision prec, bool split) {
    char what[64];
    snprintf(what, sizeof what, "%s %s %s", arch == DT_ARCH_GPT2 ? "gpt2" : "llama",
             dt_precision_name(prec), split ? "B+W" : "backward");
    result ref = run(arch, prec, DT_AC_NONE, 1, DT_ACT_COMPRESS_NONE, split);
    double gsum = 0;
    for (int64_t i = 0; i < ref.n; i++)
        gsum += fabs(ref.grad[i]);
    DT_CHECK(gsum > 0 && isfinite(gsum), "%s: reference gradient is %g", what, gsum);
    struct {
        const char *name;
        dt_ac_mode ac;
        int every;
    } modes[] = {{"full", DT_AC_FULL, 1}, {"selective", DT_AC_SELECTIVE, 1},
                 {"full every 2", DT_AC_FULL, 2}, {"selective every 2", DT_AC_SELECTIVE, 2}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        result r = run(arch, prec, modes[m].ac, modes[m].every, DT_ACT_COMPRESS_NONE, split);
        DT_CHECK(memcmp(r.grad, ref.grad, sizeof(float) * ref.n) == 0 && r.loss == ref.loss,
                 "%s ac %s: gradients or loss differ from ac none", what, modes[m].name);
        DT_CHECK(r.acts < ref.acts, "%s ac %s: activations %zu, not below none's %zu", what,
                 modes[m].name, r.acts, ref.acts);
        free(r.grad);
    }
    for (int ac = DT_AC_NONE; ac <= DT_AC_SELECTIVE; ac++) {
        dt_ac_mode a = ac == 1 ? DT_AC_FULL : (dt_ac_mode)ac;
        int every = a == DT_AC_FULL ? 2 : 1; /* full on every block has nothing to compress */
        result r = run(arch, prec, a, every, DT_ACT_COMPRESS_INT8, split);
        double nmse = dt_test_nmse(r.grad, ref.grad, ref.n);
        DT_CHECK(r.loss == ref.loss, "%s int8 ac %s: the forward changed (loss %.9g vs %.9g)",
                 what, dt_ac_mode_name(a), r.loss, ref.loss);
        DT_CHECK(nmse > 0 && nmse < 1e-4, "%s int8 ac %s: gradient nmse %.3g vs fp32 storage",
                 what, dt_ac_mode_name(a), nmse);
        DT_CHECK(r.acts < ref.acts, "%s int8 ac %s: activations %zu, not below %zu", what,
                 dt_ac_mode_name(a), r.acts, ref.acts);
        if (dt_test.perf)
            printf("%s int8 ac %s: gradient nmse %.3g, activations %zu vs %zu\n", what,
                   dt_ac_mode_name(a), nmse, r.acts, ref.acts);
        free(r.grad);
    }
    free(ref.grad);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    for (int a = 0; a < DT_ARCH_COUNT; a++)
        for (int p = DT_PREC_FP32; p <= DT_PREC_BF16; p++)
            for (int split = 0; split < 2; split++)
                check((dt_arch)a, (dt_precision)p, split);
    return DT_TEST_END();
}
