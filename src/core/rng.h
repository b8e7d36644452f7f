/* Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * A value is a pure function of (seed, stream name, element index): there is no state to
 * advance, so any rank can generate any slice of a tensor (its shard) without the rest, and
 * every parallel layout starts from bit-identical weights. Thread-safe (no state).
 */
#ifndef DT_CORE_RNG_H
#define DT_CORE_RNG_H

#include <stdint.h>

/* 64-bit FNV-1a of a name: the key that separates streams ("h.3.attn.c_attn.weight"). */
uint64_t dt_rng_name_key(const char *name);

/* One Philox4x32-10 block: 4 random words for counter `ctr` under key (seed, stream). */
void dt_philox4x32(uint64_t seed, uint64_t stream, uint64_t ctr_hi, uint64_t ctr_lo,
                   uint32_t out[4]);

/* Elements [first, first + n) of the named tensor, N(mean, std^2) (Box-Muller). */
void dt_rng_fill_normal(uint64_t seed, const char *name, int64_t first, int64_t n, float mean,
                        float std, float *out);
/* Elements [first, first + n) uniform in [0, 1). */
void dt_rng_fill_uniform(uint64_t seed, const char *name, int64_t first, int64_t n, float *out);
/* One uniform 64-bit integer for (seed, name, index), e.g. a shuffled batch's start. */
uint64_t dt_rng_u64(uint64_t seed, const char *name, uint64_t index);

#endif
