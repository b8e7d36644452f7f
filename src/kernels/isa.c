/* Run-time choice among the ISA variants of the hand-vectorised kernels, and the start-up
 * description of every hot kernel's variant. The target_clones'd kernels (casts, norms,
 * activations, AdamW) are resolved by the loader from the same CPU flags, so describing them
 * here reads those flags in the resolver's order.
 */
#include "kernels/isa.h"

#include <stdio.h>

#include "kernels/cast.h"
#include "kernels/quant.h"

static const char *const NAMES[DT_ISA_COUNT] = {"base", "avx2", "avx512", "avx512-bf16"};

static dt_isa cap = DT_ISA_COUNT - 1;

bool dt_isa_supported(dt_isa isa) {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    switch (isa) {
    case DT_ISA_BASE: return true;
    case DT_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DT_ISA_AVX512: return avx512;
    case DT_ISA_AVX512BF16: return avx512 && __builtin_cpu_supports("avx512bf16");
    default: return false;
    }
}

const char *dt_isa_name(dt_isa isa) {
    return isa >= 0 && isa < DT_ISA_COUNT ? NAMES[isa] : "?";
}

dt_isa dt_isa_pick(dt_isa widest) {
    int i = widest < cap ? widest : cap;
    while (i > DT_ISA_BASE && !dt_isa_supported((dt_isa)i))
        i--;
    return (dt_isa)i;
}

dt_isa dt_isa_set_cap(dt_isa max) {
    dt_isa old = cap;
    cap = max >= 0 && max < DT_ISA_COUNT ? max : DT_ISA_COUNT - 1;
    return old;
}

void dt_kernels_describe(char *buf, size_t n) {
    if (!n)
        return;
    /* the loader's pick for target_clones("avx512f", "avx2", "default") */
    const char *clone = __builtin_cpu_supports("avx512f") ? "avx512f"
                        : __builtin_cpu_supports("avx2") ? "avx2"
                                                          : "default";
    dt_quant_isa qi = DT_QUANT_ISA_PORTABLE;
    for (int i = DT_QUANT_ISA_COUNT - 1; i > 0; i--)
        if (dt_quant_isa_supported((dt_quant_isa)i)) {
            qi = (dt_quant_isa)i;
            break;
        }
    dt_cast_f16_variant f16[DT_CAST_F16_MAX_VARIANTS];
    dt_cast_f16_variants(f16);
    snprintf(buf, n,
             "attention %s, cross-entropy %s, bf16-storage activations %s, bf16 casts/norms/"
             "activations/AdamW %s, fp16 casts %s, int8 quant %s",
             dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)),
             dt_isa_name(dt_isa_pick(DT_ISA_AVX512)), dt_isa_name(dt_isa_pick(DT_ISA_AVX512BF16)),
             clone, f16[0].name, dt_quant_isa_name(qi));
}
