#define _DEFAULT_SOURCE /* mkdtemp */
/* Quantized frozen storage (zero.frozen_storage = "nf4" and "int8"; issue
 * 43) at this world size, on a hostile shape: 7 frozen base units of two
 * weight matrices each (odd sizes, the largest about 12% of the model), a
 * frozen unit of norms kept in the compute dtype, and 7 trainable adapter
 * units whose gradients are computed from the dequantized base:
 *   - the base imported (zs_params_import_frozen) dequantizes, through
 *     zs_param_dequantize, to the reference quantization of the imported
 *     values in blocks of 64 counted from each parameter's first element
 *     (kernels/quantize.h's element rule, which test_quantize checks against
 *     its own reference), whatever the world size and stage;
 *   - stages 0-3 give bit-identical adapters, dequantized bases and stored
 *     records (zs_param_quantized's bytes), and training changes neither;
 *   - stage 3 gathers the base's records: the all-gather bytes of a step are
 *     (ranks - 1) x record per quantized unit and (ranks - 1) x shard x 4
 *     per other unit, exactly;
 *   - memory per tag equals zs_estimate_memory_flags on the same settings,
 *     and the frozen tag holds the records (every shard's below stage 3,
 *     this rank's in stage 3) plus the norms;
 *   - stage 3 with offload.params = "host" (and the optimizer): the records
 *     in host memory, the same bits and gathered bytes, memory = estimate;
 *   - a checkpoint saved in stage 1 after step 3 (the base as dequantized
 *     fp32 tensors) resumed in stage 3 gives the uninterrupted run's bits
 *     (quantizing dequantized values gives the same records back);
 *   - QLoRA's double quantization of the scales (NF4, blocks of 2 so that a
 *     shard holds several groups of 256 scales): the reference decodes
 *     each shard's scales group by group; stages bitwise, memory, bytes;
 *   - misuse fails naming the parameter or unit. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_text.h"
#include "kernels/quantize.h"
#include "test_util.h"
#include "zeroshard_mpi.h"

#define BASES 7
#define STEPS 6
#define NORM 29

static int g_rank, g_world;
/* The format under test double-quantizes its scales
 * (zero.frozen_double_quant): every run, reference and formula below. */
static int g_dq;
/* ... and its zero.frozen_block: 64 (QLoRA's), or 2 with double
 * quantization, so that a shard holds several groups of 256 scales. */
static int64_t g_block = 64;

static int64_t base_numel(int k, int which) {
    /* Odd sizes; base.6 the largest, about 12% of the model. */
    return which == 0 ? (int64_t)37 * (11 + 9 * k) : 61 + 13 * k;
}
static int64_t adapter_numel(int k) { return 23 + 5 * k; }

/* Imported values: a deterministic function of the name and index, with a
 * magnitude that changes every 50 elements (so blocks have different
 * scales) and a run of zeros (a block of zeros). */
static float value_of(const char *name, int64_t i) {
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    uint32_t x = h ^ (uint32_t)(i * 2654435761u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    const float unit = (float)(x & 0xffffff) / 8388608.0f - 1.0f; /* [-1, 1) */
    if (i >= 128 && i < 192) return 0.0f;
    return unit * (0.01f + 0.1f * (float)((i / 50) % 7));
}

static int source(void *user, const zs_param *p, int64_t first, int64_t count, float *dst,
                  char *err, size_t cap) {
    (void)user;
    (void)err;
    (void)cap;
    for (int64_t i = 0; i < count; i++) dst[i] = value_of(zs_param_name(p), first + i);
    return 0;
}

typedef struct model {
    zs_ctx *zs;
    zs_unit *base[BASES], *norms, *adapter[BASES];
    zs_param *w[BASES][2], *norm[BASES], *a[BASES];
} model;

typedef struct run_opts {
    int stage;
    const char *storage; /* "nf4" or "int8" */
    unsigned base_flags; /* of the base weights */
    const char *save_dir; /* save after step 3 (then stop) */
    const char *load_dir; /* load before step 3 (then go on) */
    const char *offload;  /* an offload group's keys, or NULL */
} run_opts;

/* The run's configuration. */
static zs_config *config_of(const run_opts *o) {
    char text[768];
    snprintf(text, sizeof text,
             "zero = { stage = %d; frozen_storage = \"%s\"; max_live_units = 3; "
             "frozen_double_quant = %s; frozen_block = %lld; }; "
             "optimizer = { type = \"adamw\"; lr = 1e-2; }; offload = { %s };",
             o->stage, o->storage, g_dq ? "true" : "false", (long long)g_block,
             o->offload ? o->offload : "");
    return zt_config_text(text);
}

static zs_status describe(model *m, const run_opts *o) {
    zs_config *cfg = config_of(o);
    if (!cfg) return ZS_ERR_CONFIG;
    zs_status s = zs_create_with_comm(cfg, MPI_COMM_WORLD, &m->zs);
    zs_config_destroy(cfg);
    char name[64];
    for (int k = 0; s == ZS_OK && k < BASES; k++) {
        snprintf(name, sizeof name, "base.%d", k);
        s = zs_unit_begin(m->zs, name, &m->base[k]);
        for (int j = 0; s == ZS_OK && j < 2; j++) {
            const int64_t shape[2] = {j == 0 ? 37 : base_numel(k, 1), j == 0 ? 11 + 9 * k : 1};
            snprintf(name, sizeof name, "base.%d.%s", k, j == 0 ? "q" : "v");
            s = zs_param_create(m->zs, name, 2, shape, ZS_INIT_ZEROS_VALUE, o->base_flags,
                                &m->w[k][j]);
        }
        if (s == ZS_OK) s = zs_unit_end(m->zs);
    }
    if (s == ZS_OK) s = zs_unit_begin(m->zs, "norms", &m->norms);
    for (int k = 0; s == ZS_OK && k < BASES; k++) {
        const int64_t shape[1] = {NORM};
        snprintf(name, sizeof name, "norm.%d", k);
        s = zs_param_create(m->zs, name, 1, shape, ZS_INIT_ZEROS_VALUE, ZS_PARAM_FROZEN,
                            &m->norm[k]);
    }
    if (s == ZS_OK) s = zs_unit_end(m->zs);
    for (int k = 0; s == ZS_OK && k < BASES; k++) {
        const int64_t shape[1] = {adapter_numel(k)};
        snprintf(name, sizeof name, "adapter.%d", k);
        s = zs_unit_begin(m->zs, name, &m->adapter[k]);
        snprintf(name, sizeof name, "adapter.%d.a", k);
        if (s == ZS_OK)
            s = zs_param_create(m->zs, name, 1, shape, ZS_INIT_NORMAL_STD(0.02), 0, &m->a[k]);
        if (s == ZS_OK) s = zs_unit_end(m->zs);
    }
    if (s == ZS_OK) s = zs_build(m->zs);
    if (s == ZS_OK) s = zs_params_import_frozen(m->zs, source, NULL);
    return s;
}

/* Everything a run ends with, host copies. */
typedef struct outcome {
    float *deq[BASES][2];      /* dequantized base after training */
    float *deq0[BASES][2];     /* ... before */
    uint64_t records[BASES];   /* FNV of the unit's records after training */
    uint64_t records0[BASES];
    float *adapter[BASES];
    double checksum[STEPS];
    zs_memory_stats memory;
    zs_comm_stats step_bytes;  /* one step's, from the last one */
} outcome;

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* Dequantizes every base parameter and hashes the records (units fetched
 * here, one at a time). */
static void read_base(model *m, float *deq[BASES][2], uint64_t records[BASES]) {
    for (int k = 0; k < BASES; k++) {
        ZT_OK(zs_fetch(m->zs, m->base[k]));
        for (int j = 0; j < 2; j++) {
            deq[k][j] = malloc(sizeof(float) * (size_t)base_numel(k, j));
            ZT_OK(zs_param_dequantize(m->zs, m->w[k][j], deq[k][j]));
        }
        zs_quantized q;
        ZT_OK(zs_param_quantized(m->w[k][0], &q));
        records[k] = fnv(q.data, (size_t)q.records * (size_t)q.record_bytes);
        ZT_OK(zs_release(m->zs, m->base[k]));
    }
}

/* The adapter's gradient from the dequantized base, the norms, its own
 * values and the rank: every term a dequantized value, so a base that
 * differs anywhere moves the adapters. */
static double fill_grad(model *m, int k, const float *deq, int64_t n_deq, int step) {
    const float *norm = zs_param_data(m->norm[k]);
    const float *a = zs_param_data(m->a[k]);
    float *g = zs_param_grad(m->a[k]);
    ZT_REQUIRE(norm && a && g);
    double sum = 0.0;
    const int64_t n = adapter_numel(k);
    for (int64_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int64_t j = i; j < n_deq; j += n) acc += deq[j] * (float)((j % 5) + 1);
        g[i] += acc * (1.0f + norm[i % NORM]) + a[i] * 0.5f +
                0.001f * (float)(g_rank + 1) * (float)(step + 1);
        sum += (double)acc;
    }
    return sum;
}

static int run(const run_opts *o, outcome *out) {
    memset(out, 0, sizeof *out);
    model m;
    memset(&m, 0, sizeof m);
    zs_status s = describe(&m, o);
    ZT_OK(s);
    if (s != ZS_OK) {
        zs_destroy(m.zs);
        return -1;
    }
    read_base(&m, out->deq0, out->records0);
    int first = 0, last = STEPS;
    if (o->load_dir) {
        ZT_OK(zs_load(m.zs, o->load_dir));
        first = 3;
    }
    if (o->save_dir) last = 3;
    float *deq = malloc(sizeof(float) * (size_t)base_numel(BASES - 1, 0));
    for (int step = first; step < last; step++) {
        zs_comm_stats before, after;
        ZT_OK(zs_comm_report(m.zs, &before));
        ZT_OK(zs_fetch(m.zs, m.norms));
        for (int k = 0; k < BASES; k++) {
            ZT_OK(zs_fetch(m.zs, m.base[k]));
            ZT_OK(zs_fetch(m.zs, m.adapter[k]));
            /* One weight matrix in full precision at a time. */
            ZT_OK(zs_param_dequantize(m.zs, m.w[k][0], deq));
            out->checksum[step] += fill_grad(&m, k, deq, base_numel(k, 0), step);
            ZT_OK(zs_param_dequantize(m.zs, m.w[k][1], deq));
            out->checksum[step] += fill_grad(&m, k, deq, base_numel(k, 1), step);
            ZT_OK(zs_grads_ready(m.zs, m.adapter[k]));
            ZT_OK(zs_release(m.zs, m.adapter[k]));
            ZT_OK(zs_release(m.zs, m.base[k]));
        }
        ZT_OK(zs_release(m.zs, m.norms));
        zs_step_info info;
        ZT_OK(zs_step(m.zs, &info));
        ZT_OK(zs_comm_report(m.zs, &after));
        for (int op = 0; op < ZS_COMM_OP_COUNT; op++)
            out->step_bytes.bytes[op] = after.bytes[op] - before.bytes[op];
    }
    free(deq);
    if (o->save_dir) ZT_OK(zs_save(m.zs, o->save_dir));
    read_base(&m, out->deq, out->records);
    for (int k = 0; k < BASES; k++) {
        ZT_OK(zs_fetch(m.zs, m.adapter[k]));
        out->adapter[k] = malloc(sizeof(float) * (size_t)adapter_numel(k));
        memcpy(out->adapter[k], zs_param_data(m.a[k]), sizeof(float) * (size_t)adapter_numel(k));
        ZT_OK(zs_release(m.zs, m.adapter[k]));
    }
    ZT_OK(zs_memory_report(m.zs, &out->memory));
    zs_destroy(m.zs);
    return 0;
}

static void outcome_free(outcome *o) {
    for (int k = 0; k < BASES; k++) {
        for (int j = 0; j < 2; j++) {
            free(o->deq[k][j]);
            free(o->deq0[k][j]);
        }
        free(o->adapter[k]);
    }
}

/* The plan's numbers, recomputed: parameters aligned to the larger of
 * zero.align (16) and zero.frozen_block, units padded to world x that. */
static int64_t align_of(void) { return g_block > 16 ? g_block : 16; }
static int64_t padded(int64_t used) {
    const int64_t g = align_of() * (int64_t)g_world;
    return (used + g - 1) / g * g;
}
static int64_t aligned(int64_t n) { return (n + align_of() - 1) / align_of() * align_of(); }
static int64_t base_padded(int k) { return padded(aligned(base_numel(k, 0)) + base_numel(k, 1)); }

/* The reference: blocks of 64 from each parameter's first element (the
 * unit's elements: base.k.q at 0, base.k.v at round64 of q's size, zeros
 * between and after). With double quantization each shard's scales are
 * int8-quantized in groups of 256 counted from the shard's first block,
 * and a value dequantizes with its block's scale as decoded. */
static void check_reference(const char *what, int bits, const outcome *o) {
    const float qmax = (float)zs_k_quant_qmax(bits);
    const int64_t B = g_block;
    for (int k = 0; k < BASES; k++) {
        const int64_t n = base_padded(k), S = n / g_world, at_v = aligned(base_numel(k, 0));
        char names[2][64];
        for (int j = 0; j < 2; j++)
            snprintf(names[j], sizeof names[j], "base.%d.%s", k, j == 0 ? "q" : "v");
        float *x = calloc((size_t)n, sizeof *x), *scale = calloc((size_t)(n / B), sizeof *scale);
        ZT_REQUIRE(x && scale);
        for (int j = 0; j < 2; j++)
            for (int64_t i = 0; i < base_numel(k, j); i++)
                x[(j ? at_v : 0) + i] = value_of(names[j], i);
        for (int64_t b = 0; b < n / B; b++) {
            uint32_t amax = 0;
            for (int64_t i = B * b; i < B * b + B; i++) {
                const uint32_t mag = zs_k_quant_magnitude(x[i]);
                amax = mag > amax ? mag : amax;
            }
            scale[b] = zs_k_quant_scale(amax, bits);
        }
        float *decoded = malloc(sizeof(float) * (size_t)(n / B));
        ZT_REQUIRE(decoded);
        memcpy(decoded, scale, sizeof(float) * (size_t)(n / B));
        for (int64_t r0 = 0; g_dq && r0 < n / B; r0 += S / B)
            for (int64_t g0 = r0; g0 < r0 + S / B; g0 += 256) {
                const int64_t g1 = g0 + 256 < r0 + S / B ? g0 + 256 : r0 + S / B;
                uint32_t amax = 0;
                for (int64_t b = g0; b < g1; b++) {
                    const uint32_t mag = zs_k_quant_magnitude(scale[b]);
                    amax = mag > amax ? mag : amax;
                }
                const float s2 = zs_k_quant_scale(amax, 8);
                for (int64_t b = g0; b < g1; b++)
                    decoded[b] = zs_k_dequant_value(zs_k_quant_value(scale[b], s2, 127.0f), s2);
            }
        for (int j = 0, bad = 0; j < 2 && !bad; j++)
            for (int64_t i = 0; i < base_numel(k, j) && !bad; i++) {
                const int64_t e = (j ? at_v : 0) + i;
                const int32_t q = zs_k_quant_code(x[e], scale[e / B], qmax, bits);
                const float want = zs_k_dequant_code(q, decoded[e / B], bits);
                if (memcmp(&want, &o->deq[k][j][i], sizeof want) != 0) {
                    ZT_CHECK_MSG(0, "%s: %s[%lld] dequantizes to %.9g, the reference %.9g", what,
                                 names[j], (long long)i, o->deq[k][j][i], want);
                    bad = 1;
                }
            }
        free(x);
        free(scale);
        free(decoded);
    }
}

static void check_same(const char *what, const outcome *a, const outcome *b) {
    for (int k = 0; k < BASES; k++) {
        for (int j = 0; j < 2; j++)
            ZT_CHECK_MSG(memcmp(a->deq[k][j], b->deq[k][j],
                                sizeof(float) * (size_t)base_numel(k, j)) == 0,
                         "%s: base.%d's dequantized values differ", what, k);
        ZT_CHECK_MSG(a->records[k] == b->records[k], "%s: base.%d's records differ", what, k);
        ZT_CHECK_MSG(memcmp(a->adapter[k], b->adapter[k],
                            sizeof(float) * (size_t)adapter_numel(k)) == 0,
                     "%s: adapter.%d differs", what, k);
    }
}

/* Training leaves the base as it was. */
static void check_kept(const char *what, const outcome *o) {
    for (int k = 0; k < BASES; k++) {
        for (int j = 0; j < 2; j++)
            ZT_CHECK_MSG(memcmp(o->deq0[k][j], o->deq[k][j],
                                sizeof(float) * (size_t)base_numel(k, j)) == 0,
                         "%s: base.%d changed in training", what, k);
        ZT_CHECK_MSG(o->records0[k] == o->records[k], "%s: base.%d's records changed", what, k);
    }
}

static int64_t record_bytes(int k, int bits) {
    const int64_t S = base_padded(k) / g_world, blocks = (S + g_block - 1) / g_block;
    const int64_t values = bits == 8 ? S : (S + 1) / 2;
    if (g_dq) return (values + 3) / 4 * 4 + (blocks + 3) / 4 * 4 + 4 * ((blocks + 255) / 256);
    return (values + 3) / 4 * 4 + 4 * blocks;
}

static void check_bytes(const char *what, int bits, const outcome *o) {
    if (g_world == 1) return;
    uint64_t want = 0;
    for (int k = 0; k < BASES; k++) {
        want += (uint64_t)(g_world - 1) * (uint64_t)record_bytes(k, bits);
        want += (uint64_t)(g_world - 1) * (uint64_t)(padded(adapter_numel(k)) / g_world) * 4;
    }
    want += (uint64_t)(g_world - 1) * (uint64_t)(padded(aligned(NORM) * (BASES - 1) + NORM) /
                                                 g_world) * 4;
    ZT_CHECK_MSG(o->step_bytes.bytes[ZS_COMM_ALL_GATHER] == want,
                 "%s: %llu bytes all-gathered in a step, the formula says %llu", what,
                 (unsigned long long)o->step_bytes.bytes[ZS_COMM_ALL_GATHER],
                 (unsigned long long)want);
}

static void check_memory(const char *what, const run_opts *ro, int bits, const outcome *o) {
    zs_config *cfg = config_of(ro);
    ZT_REQUIRE(cfg != NULL);
    const int units = 2 * BASES + 1;
    int per_unit[2 * BASES + 1];
    int64_t numel[4 * BASES];
    unsigned flags[4 * BASES];
    int p = 0, u = 0;
    for (int k = 0; k < BASES; k++, u++) {
        per_unit[u] = 2;
        for (int j = 0; j < 2; j++, p++) {
            numel[p] = base_numel(k, j);
            flags[p] = ro->base_flags;
        }
    }
    per_unit[u++] = BASES;
    for (int k = 0; k < BASES; k++, p++) {
        numel[p] = NORM;
        flags[p] = ZS_PARAM_FROZEN;
    }
    for (int k = 0; k < BASES; k++, u++, p++) {
        per_unit[u] = 1;
        numel[p] = adapter_numel(k);
        flags[p] = 0;
    }
    zs_memory_stats est;
    ZT_OK(zs_estimate_memory_flags(cfg, g_world, units, per_unit, numel, flags, &est));
    zs_config_destroy(cfg);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        ZT_CHECK_MSG(o->memory.current[t] == est.current[t],
                     "%s: tag %s: measured %llu bytes, estimated %llu", what,
                     zs_mem_tag_name((zs_mem_tag)t), (unsigned long long)o->memory.current[t],
                     (unsigned long long)est.current[t]);
    uint64_t records = 0;
    for (int k = 0; k < BASES; k++) records += (uint64_t)record_bytes(k, bits);
    const int64_t norms = padded(aligned(NORM) * (BASES - 1) + NORM);
    /* Double quantization: one record's decoded scales (the largest's blocks
     * and a group more, fp32) beside the records, and on the device too
     * when the records are in host memory. */
    const uint64_t decoded =
        g_dq ? 4u * (uint64_t)(base_padded(BASES - 1) / g_world / g_block + 256) : 0u;
    const uint64_t want = decoded + (ro->stage < 3
                                         ? (uint64_t)g_world * records + (uint64_t)norms * 4
                                         : records + (uint64_t)(norms / g_world) * 4);
    /* offload.params = "host": the records and the norms' shard live in
     * host memory, with the trainable parameters. */
    const zs_mem_tag tag = ro->offload ? ZS_MEM_HOST_PARAMS : ZS_MEM_FROZEN;
    ZT_CHECK_MSG(o->memory.current[tag] >= want && (ro->offload || o->memory.current[tag] == want),
                 "%s: tag %s %llu bytes, want %llu (the records and the norms)", what,
                 zs_mem_tag_name(tag), (unsigned long long)o->memory.current[tag],
                 (unsigned long long)want);
}

static void check_misuse(void) {
    model m;
    run_opts o = {.stage = 3, .storage = "nf4", .base_flags = ZS_PARAM_QUANTIZE};
    memset(&m, 0, sizeof m);
    ZT_FAILS_WITH(describe(&m, &o), ZS_ERR_INVALID_ARGUMENT,
                  "parameter 'base.0.q' is ZS_PARAM_QUANTIZE but not ZS_PARAM_FROZEN");
    zs_destroy(m.zs);
    memset(&m, 0, sizeof m);
    o.base_flags = ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE;
    ZT_OK(describe(&m, &o));
    if (!m.zs) return;
    ZT_FAILS_WITH(zs_param_dequantize(m.zs, m.w[0][0], NULL), ZS_ERR_INVALID_ARGUMENT,
                  "destination");
    float scratch[64];
    ZT_FAILS_WITH(zs_param_dequantize(m.zs, m.w[0][0], scratch), ZS_ERR_STATE,
                  "zs_param_dequantize('base.0.q'): unit 'base.0' is not fetched");
    ZT_OK(zs_fetch(m.zs, m.base[0]));
    ZT_CHECK(zs_param_data(m.w[0][0]) == NULL);
    ZT_CHECK_MSG(strstr(zs_last_error(), "zs_param_data('base.0.q'): the parameter is stored "
                        "quantized") != NULL,
                 "zs_param_data of a quantized parameter: \"%s\"", zs_last_error());
    ZT_CHECK(zs_param_is_quantized(m.w[0][0]) && !zs_param_is_quantized(m.norm[0]));
    zs_quantized q;
    ZT_OK(zs_param_quantized(m.w[0][1], &q));
    ZT_CHECK(q.bits == ZS_K_QUANT_NF4 && q.block == 64 && q.records == g_world &&
             q.offset == aligned(base_numel(0, 0)) && q.numel == base_numel(0, 1) &&
             q.shard_numel % 64 == 0 && q.record_bytes % 4 == 0);
    ZT_OK(zs_release(m.zs, m.base[0]));
    ZT_OK(zs_fetch(m.zs, m.norms));
    ZT_FAILS_WITH(zs_param_quantized(m.norm[0], &q), ZS_ERR_INVALID_ARGUMENT,
                  "zs_param_quantized('norm.0'): the parameter is not stored quantized");
    ZT_OK(zs_release(m.zs, m.norms));
    zs_destroy(m.zs);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    const struct {
        const char *storage;
        int bits, dq;
    } formats[3] = {{"nf4", ZS_K_QUANT_NF4, 0}, {"int8", 8, 0}, {"nf4", ZS_K_QUANT_NF4, 1}};
    const unsigned q = ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE;
    for (int f = 0; f < 3; f++) {
        g_dq = formats[f].dq;
        g_block = g_dq ? 2 : 64;
        outcome by_stage[4];
        for (int stage = 0; stage < 4; stage++) {
            char what[64];
            snprintf(what, sizeof what, "np %d, %s%s, stage %d", g_world, formats[f].storage,
                     g_dq ? " double-quantized" : "", stage);
            const run_opts o = {.stage = stage, .storage = formats[f].storage, .base_flags = q};
            ZT_REQUIRE(run(&o, &by_stage[stage]) == 0);
            check_reference(what, formats[f].bits, &by_stage[stage]);
            check_kept(what, &by_stage[stage]);
            check_memory(what, &o, formats[f].bits, &by_stage[stage]);
            if (stage == 3) check_bytes(what, formats[f].bits, &by_stage[stage]);
            if (stage > 0) check_same(what, &by_stage[0], &by_stage[stage]);
            ZT_CHECK_MSG(memcmp(by_stage[0].checksum, by_stage[stage].checksum,
                                sizeof by_stage[0].checksum) == 0,
                         "%s: the dequantized base's sums differ from stage 0's", what);
        }
        /* Stage 3 with the base (and the optimizer) in host memory: the
         * records copied up per unit, the same bits. */
        {
            char what[64];
            snprintf(what, sizeof what, "np %d, %s%s, stage 3 offloaded", g_world,
                     formats[f].storage, g_dq ? " double-quantized" : "");
            const run_opts o = {.stage = 3, .storage = formats[f].storage, .base_flags = q,
                                .offload = "params = \"host\"; optimizer = \"host\";"};
            outcome off;
            ZT_REQUIRE(run(&o, &off) == 0);
            check_reference(what, formats[f].bits, &off);
            check_memory(what, &o, formats[f].bits, &off);
            check_bytes(what, formats[f].bits, &off);
            check_same(what, &by_stage[3], &off);
            const uint64_t decoded =
                g_dq ? 4u * (uint64_t)(base_padded(BASES - 1) / g_world / g_block + 256) : 0u;
            ZT_CHECK_MSG(off.memory.current[ZS_MEM_FROZEN] == decoded,
                         "%s: %llu bytes of the frozen tag on the device, want %llu (decoded "
                         "scales)", what, (unsigned long long)off.memory.current[ZS_MEM_FROZEN],
                         (unsigned long long)decoded);
            outcome_free(&off);
        }
        /* Saved in stage 1 after step 3, resumed in stage 3. With double
         * quantization the copied base is its dequantization, which a load
         * quantizes into other scale codes (zs_save warns): a base recorded
         * with zs_set_frozen_base is what resumes bitwise there
         * (llama_qlora). */
        char dir[256] = "";
        if (g_rank == 0) {
            snprintf(dir, sizeof dir, "/tmp/zs_qlora_store_XXXXXX");
            ZT_REQUIRE(mkdtemp(dir) != NULL);
        }
        MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
        char ckpt[300];
        snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
        outcome saved, resumed;
        const run_opts save = {.stage = 1, .storage = formats[f].storage, .base_flags = q,
                               .save_dir = ckpt};
        const run_opts load = {.stage = 3, .storage = formats[f].storage, .base_flags = q,
                               .load_dir = ckpt};
        if (!g_dq) {
            ZT_REQUIRE(run(&save, &saved) == 0);
            MPI_Barrier(MPI_COMM_WORLD);
            ZT_REQUIRE(run(&load, &resumed) == 0);
            char what[64];
            snprintf(what, sizeof what, "np %d, %s, resumed in stage 3", g_world,
                     formats[f].storage);
            check_same(what, &by_stage[3], &resumed);
            outcome_free(&saved);
            outcome_free(&resumed);
        }
        for (int stage = 0; stage < 4; stage++) outcome_free(&by_stage[stage]);
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            char cmd[400];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            ZT_CHECK(system(cmd) == 0);
        }
    }
    g_dq = 0;
    g_block = 64;
    check_misuse();
    const int rc = zt_finish("test_qlora_store");
    MPI_Finalize();
    return rc;
}
