/* Deterministic parameter initialization. The value of element i of a
 * parameter depends only on (seed, the parameter's name, i): a counter-based
 * generator, so any rank can produce any element without producing the ones
 * before it, and every world size and stage starts from identical weights. */
#ifndef ZS_KERNELS_INIT_H
#define ZS_KERNELS_INIT_H

#include <math.h>
#include <stdint.h>

#include "kernels/hostdevice.h"

/* SplitMix64's finalizer: a bijective 64-bit mixer with good avalanche. */
ZS_HD uint64_t zs_k_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* The key of a parameter: the seed mixed with a 64-bit FNV-1a hash of its name. */
static inline uint64_t zs_k_param_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        h ^= *c;
        h *= 0x100000001b3ULL;
    }
    return zs_k_mix64(seed ^ zs_k_mix64(h));
}

/* Two independent 64-bit draws for element i. */
ZS_HD uint64_t zs_k_draw(uint64_t key, uint64_t i, uint64_t lane) {
    return zs_k_mix64(key ^ zs_k_mix64(2 * i + lane + 0x9e3779b97f4a7c15ULL));
}

/* Uniform in [0, 1) with 53 random bits. */
ZS_HD double zs_k_unit_double(uint64_t bits) { return (double)(bits >> 11) * 0x1.0p-53; }

typedef enum zs_k_init_kind {
    ZS_K_INIT_ZEROS = 0,
    ZS_K_INIT_CONSTANT = 1,
    ZS_K_INIT_UNIFORM = 2,
    ZS_K_INIT_NORMAL = 3
} zs_k_init_kind;

/* Element i's initial value. Normal draws use Box-Muller in double precision,
 * so values are the same on every rank running the same binary. */
ZS_HD float zs_k_init_value(zs_k_init_kind kind, double a, double b, uint64_t key, uint64_t i) {
    switch (kind) {
    case ZS_K_INIT_ZEROS:
        return 0.0f;
    case ZS_K_INIT_CONSTANT:
        return (float)a;
    case ZS_K_INIT_UNIFORM:
        return (float)(a + (b - a) * zs_k_unit_double(zs_k_draw(key, i, 0)));
    case ZS_K_INIT_NORMAL: {
        /* u1 in (0, 1] so the logarithm is finite. */
        double u1 = 1.0 - zs_k_unit_double(zs_k_draw(key, i, 0));
        double u2 = zs_k_unit_double(zs_k_draw(key, i, 1));
        double r = sqrt(-2.0 * log(u1));
        return (float)(a + b * r * cos(6.283185307179586476925 * u2));
    }
    }
    return 0.0f;
}

#endif
