/* Instruction-set variants of the hand-vectorised kernels (attention, cross-entropy), picked at
 * run time, and the one-line description of what every hot kernel runs on this CPU.
 *
 * Every variant is compiled into every build (target attributes, not -march), so one binary
 * runs at its best on a baseline x86-64, an AVX2 and an AVX-512(-BF16) machine. A kernel uses
 * the widest variant that it has, that the CPU supports and that is not above the cap; the cap
 * (all variants by default) lets tests run each variant against its _ref twin.
 */
#ifndef DT_KERNELS_ISA_H
#define DT_KERNELS_ISA_H

#include <stdbool.h>
#include <stddef.h>

typedef enum dt_isa {
    DT_ISA_BASE,       /* x86-64 baseline (SSE2) */
    DT_ISA_AVX2,       /* AVX2 + FMA */
    DT_ISA_AVX512,     /* AVX-512 F/BW/DQ/VL, 16-wide vectors */
    DT_ISA_AVX512BF16, /* AVX-512 + AVX512_BF16 (vdpbf16ps): bf16 dot products */
    DT_ISA_COUNT
} dt_isa;

bool dt_isa_supported(dt_isa isa);
const char *dt_isa_name(dt_isa isa);
/* The variant a kernel whose widest variant is `widest` runs: the widest supported one that is
 * neither above `widest` nor above the cap. */
dt_isa dt_isa_pick(dt_isa widest);
/* Caps every later pick at `max` (tests; set it outside parallel regions). Returns the old cap. */
dt_isa dt_isa_set_cap(dt_isa max);

/* "attention avx512-bf16, xent avx512, ..." : the variant of each hot kernel, into buf (always
 * NUL-terminated, cut at n - 1 characters). */
void dt_kernels_describe(char *buf, size_t n);

#endif
