/* Philox4x32-10 and the fill functions built on it. See rng.h. */
#include "core/rng.h"

#include <math.h>

uint64_t dt_rng_name_key(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void dt_philox4x32(uint64_t seed, uint64_t stream, uint64_t ctr_hi, uint64_t ctr_lo,
                   uint32_t out[4]) {
    /* The 64-bit Philox key holds the seed mixed with the stream; the 128-bit counter holds
     * the element index (and the stream's high bits, so distinct names never share blocks). */
    uint64_t k = seed ^ (stream * 0x9E3779B97F4A7C15ull);
    uint32_t k0 = (uint32_t)k, k1 = (uint32_t)(k >> 32);
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi ^ (uint32_t)(stream >> 32), c3 = (uint32_t)(ctr_hi >> 32) ^ (uint32_t)stream;
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* 24 random bits -> (0, 1]: never 0, so log() in Box-Muller is finite. */
static inline float unit_open(uint32_t x) { return ((x >> 8) + 1) * (1.0f / 16777216.0f); }

void dt_rng_fill_normal(uint64_t seed, const char *name, int64_t first, int64_t n, float mean,
                        float std, float *out) {
    uint64_t stream = dt_rng_name_key(name);
    /* Element i uses the block of counter i/2: words 0,1 for even i, 2,3 for odd i, so a
     * slice starting anywhere reproduces exactly the values of the whole tensor. */
    for (int64_t j = 0; j < n; j++) {
        uint64_t i = (uint64_t)(first + j);
        uint32_t r[4];
        dt_philox4x32(seed, stream, 0, i >> 1, r);
        const uint32_t *w = (i & 1) ? r + 2 : r;
        float u1 = unit_open(w[0]), u2 = unit_open(w[1]);
        float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
        out[j] = mean + std * z;
    }
}

void dt_rng_fill_uniform(uint64_t seed, const char *name, int64_t first, int64_t n, float *out) {
    uint64_t stream = dt_rng_name_key(name);
    for (int64_t j = 0; j < n; j++) {
        uint32_t r[4];
        dt_philox4x32(seed, stream, 1, (uint64_t)(first + j), r);
        out[j] = (r[0] >> 8) * (1.0f / 16777216.0f);
    }
}

uint64_t dt_rng_u64(uint64_t seed, const char *name, uint64_t index) {
    uint32_t r[4];
    dt_philox4x32(seed, dt_rng_name_key(name), 2, index, r);
    return ((uint64_t)r[0] << 32) | r[1];
}
