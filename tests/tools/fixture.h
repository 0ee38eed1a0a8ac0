/* The synthetic checkpoint of the zs-ckpt tests: 2 ranks, 2 units, 3
 * parameters of odd sizes split between the ranks at uneven offsets (one
 * parameter lives on rank 0 only), fp32 master and AdamW moments, and user
 * state. Values are deterministic functions of (parameter, element), so the
 * tests can recompute what every export must contain. make_fixture.c writes
 * it; test_zs_ckpt.c checks the tool against it. */
#ifndef ZS_TESTS_TOOLS_FIXTURE_H
#define ZS_TESTS_TOOLS_FIXTURE_H

#include <stdint.h>
#include <string.h>

#define FX_RANKS 2
#define FX_UNITS 2
#define FX_PARAMS 3
#define FX_STEP 10
#define FX_STEP_DIR "step_00000010"

typedef struct fx_param {
    const char *name;
    int unit;
    int ndim;
    int64_t shape[3];
    int64_t numel;
    int64_t split; /* rank 0 owns [0, split), rank 1 owns [split, numel) */
    unsigned flags;
} fx_param;

static const char *const fx_units[FX_UNITS] = {"embed", "block"};

/* Sizes are odd (and mostly prime) so no piece size of the export divides
 * them; splits are uneven, and embed.bias is all on rank 0. */
static const fx_param fx_params[FX_PARAMS] = {
    {"embed.weight", 0, 2, {37, 113, 0}, 37 * 113, 2999, 0},
    {"embed.bias", 0, 1, {97, 0, 0}, 97, 97, 0x1u /* ZS_PARAM_NO_DECAY */},
    {"block.weight", 1, 3, {3, 5, 67}, 3 * 5 * 67, 13, 0},
};

/* A 32-bit mix (the murmur3 finalizer): deterministic, well spread. */
static inline uint32_t fx_mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

/* Value of element i of parameter p in state s (0 master, 1 exp_avg,
 * 2 exp_avg_sq). Mostly full-mantissa values in [-4, 4), so bf16 and fp16
 * conversions round; a few elements are chosen to hit fp16's edges: a value
 * above its largest finite number (rounds to infinity), one below its
 * smallest normal (a subnormal result), a bf16/fp16 rounding tie, and -0. */
static inline float fx_value(int p, int64_t i, int s) {
    if (s == 0) {
        switch (i) {
        case 5: return 70000.0f;
        case 6: return 3.0e-6f;
        case 7: return 1.00390625f; /* 1 + 2^-8: a tie in bf16, exact in fp16 */
        case 8: return -0.0f;
        default: break;
        }
    }
    uint32_t h = fx_mix((uint32_t)(p * 1000003 + s * 7919) ^ (uint32_t)(i * 2654435761u));
    float unit = (float)(h >> 8) * (1.0f / 16777216.0f); /* [0, 1), 24 bits */
    if (s == 2) return unit * 0.01f;                     /* second moments are non-negative */
    return (unit - 0.5f) * 8.0f;
}

#endif
