/* Describing the model (units and parameters) and building it: the partition
 * plan, the model-state buffers of the stage, and initial values.
 *
 * Floor (src/floors.txt): Owns the model's description and, at zs_build,
 * creates the ground's state buffers and the rooms that live from the build
 * on (residency, ZeRO++, the optimizer pass), calling them below it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/init.h"
#include "zero/agree.h"
#include "zero/carves.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"
#include "zero/memory_plan.h"
#include "zero/model.h"
#include "zero/nvme_tier.h"
#include "zero/plan.h"
#include "zero/residency.h"
#include "zero/state_layout.h"
#include "zero/step.h"
#include "zero/unit_ops.h"
#include "zero/update.h"
#include "zero/zeropp.h"

static zs_status check_name(const char *what, const char *name) {
    if (!name || !*name)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s name must be a non-empty string", what);
    size_t n = strnlen(name, ZS_NAME_CAPACITY);
    if (n >= ZS_NAME_CAPACITY)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s name '%.40s...' is longer than %d bytes",
                        what, name, ZS_NAME_CAPACITY - 1);
    if (strchr(name, '/'))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s name '%s' contains '/'; use '.' to separate components", what, name);
    return ZS_OK;
}

static zs_status check_buildable(zs_ctx *zs, const char *call) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: context is NULL", call);
    if (zs->built)
        return zs__fail(ZS_ERR_STATE, "%s: the model is already built; describe every unit "
                                      "before zs_build", call);
    return ZS_OK;
}

static zs_status grow(void **array, int *capacity, int needed, size_t element) {
    if (needed <= *capacity) return ZS_OK;
    int cap = *capacity ? *capacity * 2 : 16;
    while (cap < needed) cap *= 2;
    void *p = zs__realloc(*array, (size_t)cap * element);
    if (!p) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "model description: out of host memory");
    *array = p;
    *capacity = cap;
    return ZS_OK;
}

zs_status zs_unit_begin(zs_ctx *zs, const char *name, zs_unit **out) {
    ZS_CHECK(check_buildable(zs, "zs_unit_begin"));
    if (zs->open_unit)
        return zs__fail(ZS_ERR_STATE, "zs_unit_begin('%s'): unit '%s' is still open; call "
                        "zs_unit_end first", name ? name : "", zs->open_unit->name);
    ZS_CHECK(check_name("unit", name));
    for (int i = 0; i < zs->unit_count; i++)
        if (strcmp(zs->units[i]->name, name) == 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "unit name '%s' is used twice", name);
    ZS_CHECK(grow((void **)&zs->units, &zs->unit_capacity, zs->unit_count + 1, sizeof(zs_unit *)));
    zs_unit *u = zs__calloc(1, sizeof *u);
    if (!u) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_unit_begin: out of host memory");
    u->ctx = zs;
    u->index = zs->unit_count;
    snprintf(u->name, sizeof u->name, "%s", name);
    u->first_param = zs->param_count;
    zs->units[zs->unit_count++] = u;
    zs->open_unit = u;
    if (out) *out = u;
    return ZS_OK;
}

zs_status zs_param_create(zs_ctx *zs, const char *name, int ndim, const int64_t *shape,
                          zs_init init, unsigned flags, zs_param **out) {
    ZS_CHECK(check_buildable(zs, "zs_param_create"));
    if (!zs->open_unit)
        return zs__fail(ZS_ERR_STATE, "zs_param_create('%s'): no unit is open; call "
                        "zs_unit_begin first", name ? name : "");
    ZS_CHECK(check_name("parameter", name));
    if (strlen(name) > ZS_PARAM_NAME_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter name '%.40s...' is longer than %d "
                        "bytes (checkpoint tensor names add a suffix and must fit in 255)",
                        name, ZS_PARAM_NAME_MAX);
    for (int i = 0; i < zs->param_count; i++)
        if (strcmp(zs->params[i]->name, name) == 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter name '%s' is used twice", name);
    if (ndim < 1 || ndim > ZS_MAX_DIMS || !shape)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': ndim = %d must be 1..%d with a "
                        "shape array", name, ndim, ZS_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': dimension %d is %lld; "
                            "extents must be positive", name, d, (long long)shape[d]);
        if (__builtin_mul_overflow(numel, shape[d], &numel))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': size overflows int64", name);
    }
    if (init.kind < ZS_INIT_ZEROS || init.kind > ZS_INIT_NORMAL)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': unknown init kind %d", name,
                        (int)init.kind);
    if (init.kind == ZS_INIT_UNIFORM && !(init.a < init.b))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': uniform init needs a < b "
                        "(got %g, %g)", name, init.a, init.b);
    if (init.kind == ZS_INIT_NORMAL && !(init.b >= 0))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': normal init needs std >= 0 "
                        "(got %g)", name, init.b);
    const unsigned known = ZS_PARAM_NO_DECAY | ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE;
    if (flags & ~known)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter '%s': unknown flags 0x%x", name,
                        flags & ~known);
    ZS_CHECK(grow((void **)&zs->params, &zs->param_capacity, zs->param_count + 1,
                  sizeof(zs_param *)));
    zs_param *p = zs__calloc(1, sizeof *p);
    if (!p) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_param_create: out of host memory");
    p->ctx = zs;
    p->unit = zs->open_unit;
    p->index = zs->param_count;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
    p->numel = numel;
    p->init = init;
    p->flags = flags;
    zs->params[zs->param_count++] = p;
    zs->open_unit->param_count++;
    if (out) *out = p;
    return ZS_OK;
}

zs_status zs_unit_end(zs_ctx *zs) {
    ZS_CHECK(check_buildable(zs, "zs_unit_end"));
    if (!zs->open_unit) return zs__fail(ZS_ERR_STATE, "zs_unit_end: no unit is open");
    if (zs->open_unit->param_count == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "unit '%s' has no parameters; every unit needs "
                        "at least one", zs->open_unit->name);
    zs->open_unit = NULL;
    return ZS_OK;
}

/* A digest of everything that must be identical on every rank: units, names,
 * shapes, flags and initializers, in order. */
static uint64_t layout_digest(const zs_ctx *zs) {
    XXH3_state_t *state = XXH3_createState();
    if (!state) return 0;
    XXH3_64bits_reset(state);
    for (int u = 0; u < zs->unit_count; u++) {
        const zs_unit *unit = zs->units[u];
        XXH3_64bits_update(state, unit->name, strlen(unit->name) + 1);
        XXH3_64bits_update(state, &unit->param_count, sizeof unit->param_count);
        for (int i = 0; i < unit->param_count; i++) {
            const zs_param *p = zs->params[unit->first_param + i];
            XXH3_64bits_update(state, p->name, strlen(p->name) + 1);
            XXH3_64bits_update(state, &p->ndim, sizeof p->ndim);
            XXH3_64bits_update(state, p->shape, sizeof(int64_t) * (size_t)p->ndim);
            XXH3_64bits_update(state, &p->flags, sizeof p->flags);
            int kind = (int)p->init.kind;
            XXH3_64bits_update(state, &kind, sizeof kind);
            XXH3_64bits_update(state, &p->init.a, sizeof p->init.a);
            XXH3_64bits_update(state, &p->init.b, sizeof p->init.b);
        }
    }
    uint64_t digest = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return digest;
}

/* Elements generated per round when initializing a non-fp32 tensor: values
 * are produced in fp32 (the reference values) into a bounded scratch buffer
 * and converted, so low-precision copies round the same fp32 numbers the
 * master weights hold. */
#define ZS_INIT_CHUNK 65536

/* Fills elements [first, first + count) of parameter p, stored contiguously at
 * dst in `dtype`, with be's kernels (dst is be's memory). Values depend only
 * on seed, name and element index. */
static zs_status init_range(zs_ctx *zs, zs__backend *be, const zs_param *p, void *dst,
                            zs_dtype dtype, int64_t first, int64_t count) {
    if (count <= 0) return ZS_OK;
    uint64_t key = zs_k_param_key(zs->settings.seed, p->name);
    zs_k_init_kind kind = (zs_k_init_kind)p->init.kind;
    if (dtype == ZS_DTYPE_FP32)
        return be->ops->init_fill(be, dst, ZS_DTYPE_FP32, first, count, kind, p->init.a,
                                  p->init.b, key);
    zs__buf scratch;
    int64_t chunk = count < ZS_INIT_CHUNK ? count : ZS_INIT_CHUNK;
    ZS_CHECK(zs__buf_alloc(be, &scratch, ZS_MEM_SCRATCH, ZS_DTYPE_FP32, chunk));
    zs_status st = ZS_OK;
    for (int64_t done = 0; done < count && st == ZS_OK; done += chunk) {
        int64_t n = count - done < chunk ? count - done : chunk;
        st = be->ops->init_fill(be, scratch.ptr, ZS_DTYPE_FP32, first + done, n, kind, p->init.a,
                                p->init.b, key);
        if (st == ZS_OK)
            st = be->ops->convert(be, (char *)dst + (size_t)done * zs_dtype_size(dtype), dtype,
                                  scratch.ptr, ZS_DTYPE_FP32, n);
    }
    zs__buf_free(&scratch);
    return st;
}

/* Elements [first, first + count) of a quantized frozen parameter: their
 * initial values generated in fp32 host memory a round at a time, written
 * to the frozen store (which quantizes them with their unit). */
static zs_status init_quantized(zs_ctx *zs, int param, int64_t first, int64_t count) {
    const zs_param *p = zs->params[param];
    zs__backend *be = zs->backend;
    const int64_t chunk = count < ZS_INIT_CHUNK ? count : ZS_INIT_CHUNK;
    float *values = NULL;
    zs__buf generated = {0};
    ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, (size_t)chunk * sizeof(float),
                                (void **)&values));
    zs_status st = zs__buf_alloc(be, &generated, ZS_MEM_SCRATCH, ZS_DTYPE_FP32, chunk);
    for (int64_t done = 0; done < count && st == ZS_OK; done += chunk) {
        const int64_t n = count - done < chunk ? count - done : chunk;
        st = init_range(zs, be, p, generated.ptr, ZS_DTYPE_FP32, first + done, n);
        if (st == ZS_OK) st = be->ops->download(be, values, generated.ptr, (size_t)n * sizeof(float));
        if (st == ZS_OK) st = zs__frozen_store_write(zs, param, first + done, n, values);
    }
    zs__buf_free(&generated);
    zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, values, (size_t)chunk * sizeof(float));
    return st;
}

/* A parameter's master weights wherever the store keeps them: generated in
 * place in a memory tier, or in host memory a round at a time and written
 * to the nvme tier (its cache gathers them into chunks). */
typedef struct init_master_ctx {
    zs_ctx *zs;
    const zs_param *p;
    int64_t element_of_first; /* the parameter's element at the chunk range's state index 0 */
} init_master_ctx;

static zs_status init_master_chunk(void *ctx, const zs__state_chunk *c) {
    init_master_ctx *m = ctx;
    return init_range(m->zs, c->runner, m->p, c->array[ZS_STATE_MASTER], ZS_DTYPE_FP32,
                      m->element_of_first + c->first, c->count);
}

static zs_status init_master(zs_ctx *zs, int param, int64_t first, int64_t count) {
    if (count <= 0) return ZS_OK;
    const int64_t at = zs__state_index(zs, param, first);
    if (zs->store.tier != ZS_TIER_NVME) {
        init_master_ctx m = {zs, zs->params[param], first - at};
        /* Memory tiers visit one chunk, in place (no write-back needed). */
        return zs__store_each(&zs->store, at, at + count, 0, init_master_chunk, &m);
    }
    const int64_t round = count < ZS_INIT_CHUNK ? count : ZS_INIT_CHUNK;
    void *host = NULL;
    ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, (size_t)round * sizeof(float), &host));
    zs_status st = ZS_OK;
    for (int64_t done = 0; done < count && st == ZS_OK; done += round) {
        const int64_t n = count - done < round ? count - done : round;
        st = init_range(zs, zs->host_backend, zs->params[param], host, ZS_DTYPE_FP32, first + done, n);
        if (st == ZS_OK) st = zs__store_write(&zs->store, ZS_STATE_MASTER, at + done, n, host);
    }
    zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, host, (size_t)round * sizeof(float));
    return st;
}

static zs_status allocate_and_initialize(zs_ctx *zs, const char *runid) {
    const zs__plan *plan = zs->plan;
    const int stage = zs->settings.zero.stage;
    const zs_dtype dt = zs->compute_dtype;
    zs__backend *be = zs->backend;
    const uint64_t t0 = zs__clock_ns();

    /* Every size comes from the memory plan, which zs_estimate_memory
     * reports without building (memory_plan.h). */
    const char **names = zs__malloc(sizeof *names * (size_t)(zs->unit_count ? zs->unit_count : 1));
    if (!names) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    for (int u = 0; u < zs->unit_count; u++) names[u] = zs->units[u]->name;
    zs__memory_plan mp;
    zs_status planned = zs__zeropp_require(zs); /* equal nodes where ZeRO++ needs them */
    if (planned == ZS_OK)
        planned = zs__memory_plan_make(&zs->settings, plan, zs->topology->node_size, names, &mp);
    free(names);
    ZS_CHECK(planned);
    zs->grad_shard_dtype = mp.grad_shard_dtype;
    zs->reduce_dtype = mp.reduce_dtype;
    const int offloaded = zs->settings.offload.optimizer != ZS_OFFLOAD_NONE ||
                          zs->settings.offload.params != ZS_OFFLOAD_NONE;

    /* Stage 0 gathers the full optimizer state through the device
     * communicator after a load, which NCCL cannot do from host memory. */
    if (stage == 0 && offloaded && !be->ops->host_accessible)
        return zs__fail(ZS_ERR_UNSUPPORTED, "offload.optimizer with zero.stage = 0 runs on the cpu "
                        "backend only (stage 0 keeps the whole optimizer state on every rank, "
                        "which a load all-gathers on the device); use zero.stage >= 1");
    /* A model that cannot fit the (simulated) device fails here, with what
     * it needs per tag, before anything is allocated. */
    const uint64_t cap = (uint64_t)zs->settings.device_memory_bytes;
    if (cap > 0 && mp.device_bytes > cap) {
        char tags[768];
        size_t used = 0;
        tags[0] = '\0';
        for (int t = 0; t < ZS_MEM_TAG_COUNT && used < sizeof tags; t++)
            if (zs__mem_tag_on_device((zs_mem_tag)t) && mp.bytes[t] > 0) {
                int n = snprintf(tags + used, sizeof tags - used, "%s%s %llu", used ? ", " : "",
                                 zs_mem_tag_name((zs_mem_tag)t), (unsigned long long)mp.bytes[t]);
                if (n > 0) used += (size_t)n;
            }
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "this model needs %llu bytes of device memory per rank at stage %d (%s), "
                        "more than device_memory_bytes = %llu; offload the optimizer "
                        "(offload.optimizer = \"host\": master weights, moments and the "
                        "gradient shard go to host memory), offload the stage-3 parameters "
                        "(offload.params = \"host\"), raise zero.stage, or use more ranks",
                        (unsigned long long)mp.device_bytes, stage, tags,
                        (unsigned long long)cap);
    }
    /* Offloaded, the host tiers are another backend's memory, even on the
     * CPU (where the copies between them are then plain memcpys). */
    zs->host_backend = be;
    if (offloaded) ZS_CHECK(zs__cpu_backend_create_guarded(&zs->mem, be, &zs->host_backend));

    /* Stage 3 with offload.params = "nvme" keeps no parameter shard: a
     * gather reads the master (the unit's collectives' staging, below). */
    /* One buffer of parameters; the frozen units' part is charged to the
     * frozen tag (memory_plan.c decides which). */
    const uint64_t params_peak = zs->mem.peak[mp.params_tag];
    if (stage < 3) ZS_CHECK(zs__plan_buf(zs, &zs->params_full, mp.params_tag, dt, mp.params_numel));
    else if (!mp.params_on_nvme)
        ZS_CHECK(zs__plan_buf(zs, &zs->params_shard, mp.params_tag, dt, mp.params_numel));
    if (mp.frozen_tag != mp.params_tag && !mp.params_on_nvme) {
        zs->frozen_bytes = (size_t)mp.frozen_numel * zs_dtype_size(dt);
        zs->frozen_tag = mp.frozen_tag;
        zs->params_tag = mp.params_tag;
        zs__mem_move(&zs->mem, mp.params_tag, mp.frozen_tag, zs->frozen_bytes, params_peak);
    }
    zs->params_on_nvme = mp.params_on_nvme;
    ZS_CHECK(zs__frozen_store_create(zs, mp.frozen_tag));
    ZS_CHECK(zs__unit_ops_create(zs, &mp));
    if (stage < 2) ZS_CHECK(zs__plan_buf(zs, &zs->grads_full, mp.grads_tag, dt, mp.grads_numel));
    else ZS_CHECK(zs__plan_buf(zs, &zs->grads_shard, mp.grads_tag, zs->grad_shard_dtype, mp.grads_numel));
    ZS_CHECK(zs__plan_buf(zs, &zs->grads_host, ZS_MEM_HOST_STATE, dt, mp.grads_host_numel));
    ZS_CHECK(zs__plan_buf(zs, &zs->grads_landing, ZS_MEM_OFFLOAD_STAGING, mp.landing_dtype,
                      mp.grads_landing_numel));
    ZS_CHECK(zs__plan_buf(zs, &zs->params_host, ZS_MEM_OFFLOAD_STAGING, dt, mp.params_host_numel));
    const zs__store_spec spec = {
        .tier = mp.nvme ? ZS_TIER_NVME
                : zs->settings.offload.optimizer == ZS_OFFLOAD_HOST ? ZS_TIER_HOST
                                                                    : ZS_TIER_DEVICE,
        .numel = mp.state_numel,
        .moments = mp.moments,
        .has_master = mp.has_master,
        .device = be,
        .host = zs->host_backend,
        .pin = zs->settings.offload.pin_memory && !be->ops->host_accessible,
        .nvme_layout = &mp.nvme_layout,
        .nvme_dir = zs->settings.offload.nvme_path,
        .nvme_runid = runid,
        .rank = zs->rank,
        .mem = &zs->mem,
    };
    ZS_CHECK(zs__store_create(&zs->store, &spec));
    if (mp.nvme) zs__nvme_tier_named(zs);
    ZS_CHECK(zs__residency_create(zs, be, mp.live_budget, mp.live_blocks,
                                  mp.bucket_staging_numel));
    ZS_CHECK(zs__zeropp_create(zs, &mp));
    const double allocated = 1e-9 * (double)(zs__clock_ns() - t0);

    /* Initial values: full buffers are filled whole on every rank (values
     * depend only on seed, name and index, so no communication is needed);
     * shards fill only the owned slice. Gaps and padding stay zero. A
     * separate fp32 master (mixed precision, or offloaded while the device
     * keeps the parameters) gets the same fp32 values the copies round. */
    for (int i = 0; i < zs->param_count; i++) {
        const zs_param *p = zs->params[i];
        const zs__plan_param *pp = &plan->params[i];
        const zs__plan_unit *pu = &plan->units[pp->unit];
        int64_t full_index = pu->full_offset + pp->offset;
        int64_t b, e;
        int owned = zs__plan_owned_range(plan, i, zs->shard_rank, &b, &e);
        int64_t shard_index =
            pu->shard_offset + pp->offset + b - (int64_t)zs->shard_rank * pu->shard_numel;
        if (pu->quantized) { /* quantized where it lands, as an import's values are */
            if (stage == 0) ZS_CHECK(init_quantized(zs, i, 0, p->numel));
            else if (owned) ZS_CHECK(init_quantized(zs, i, b, e - b));
            continue;
        }
        if (stage < 3)
            ZS_CHECK(init_range(zs, zs->params_full.be, p, zs__buf_at(&zs->params_full, full_index),
                                dt, 0, p->numel));
        else if (owned && !zs->params_on_nvme) /* on NVMe: the master is the parameter */
            ZS_CHECK(init_range(zs, zs->params_shard.be, p,
                                zs__buf_at(&zs->params_shard, shard_index), dt, b, e - b));
        if (pu->frozen) continue; /* no master */
        if (mp.has_master && stage == 0) ZS_CHECK(init_master(zs, i, 0, p->numel));
        else if (mp.has_master && owned) ZS_CHECK(init_master(zs, i, b, e - b));
    }
    /* The last chunk of master weights leaves the tier's cache for the disk;
     * the last quantized unit is quantized, and stages 1-2 gather every
     * rank's records. */
    ZS_CHECK(zs__store_flush(&zs->store));
    ZS_CHECK(zs__frozen_store_gather_full(zs));
    ZS_CHECK(zs__update_create(zs));
    ZS_INFO("zs_build: buffers allocated in %.2f s, initialized in %.2f s (%s tier%s)", allocated,
            1e-9 * (double)(zs__clock_ns() - t0) - allocated, zs__tier_name(zs->store.tier),
            spec.pin && spec.tier == ZS_TIER_HOST ? ", page-locked" : "");
    return ZS_OK;
}

/* comm.all_gather = "auto": the all-gather algorithm per size is measured
 * on this model's own message sizes (each unit's chunk per rank; up to four
 * of them, smallest to largest), in memory that is allocated and idle now:
 * the live budget of stages 2-3 (it holds the largest unit), or the full
 * gradient of stages 0-1, zeroed again afterwards.
 *
 * Only where the model's gathers run on the world communicator: with hybrid
 * sharding they run on the node's, which always takes the ring (comm.h), so
 * there is nothing to choose; and a chunk of a node-sharded unit gathered
 * over the world would fill nodes x the unit, more than the buffer holds
 * (it overflowed the live budget and the full gradient before this rule). */
static zs_status measure_all_gather(zs_ctx *zs) {
    if (zs->world_size < 2 || zs->unit_count == 0 || zs->shard_comm != zs->comm ||
        zs->settings.comm.all_gather != ZS_COMM_IMPL_AUTO ||
        zs->settings.comm.all_gather_mpi_from_bytes > 0)
        return ZS_OK;
    const size_t elem = zs_dtype_size(zs->compute_dtype);
    size_t *sizes = zs__malloc(sizeof *sizes * (size_t)zs->unit_count);
    if (!sizes) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    int n = 0;
    for (int u = 0; u < zs->unit_count; u++) {
        /* Below stage 3 only trainable units are ever gathered (frozen ones
         * never change), and the buffer holds those alone. */
        if (zs->plan->units[u].frozen && zs->settings.zero.stage < 3) continue;
        /* Each rank's piece as gathered: a quantized unit's record. */
        const size_t chunk = (size_t)zs__plan_unit_bytes(zs->plan, u, elem) /
                             (size_t)zs->plan->world_size;
        int seen = 0;
        for (int k = 0; k < n && !seen; k++) seen = sizes[k] == chunk;
        if (!seen && chunk > 0) sizes[n++] = chunk;
    }
    for (int i = 1; i < n; i++) /* ascending; few distinct sizes */
        for (int k = i; k > 0 && sizes[k - 1] > sizes[k]; k--) {
            const size_t t = sizes[k];
            sizes[k] = sizes[k - 1];
            sizes[k - 1] = t;
        }
    size_t picked[4];
    int m = 0;
    for (int q = 0; q < 4 && n > 0; q++) {
        const size_t chunk = sizes[(size_t)q * (size_t)(n - 1) / 3];
        if (m == 0 || picked[m - 1] != chunk) picked[m++] = chunk;
    }
    free(sizes);
    void *live = NULL;
    size_t live_bytes = 0;
    zs__carves_scratch(zs, &live, &live_bytes);
    void *buf = zs->settings.zero.stage >= 2 ? live : zs->grads_full.ptr;
    /* The largest gather must fit the buffer it is measured in. */
    const size_t room = zs->settings.zero.stage >= 2
                            ? live_bytes
                            : (size_t)zs->grads_full.count * zs_dtype_size(zs->grads_full.dtype);
    ZS_ASSERT(m == 0 || picked[m - 1] <= room / (size_t)zs->world_size);
    ZS_CHECK(zs__comm_all_gather_measure(zs->comm, buf, picked, m));
    if (zs->settings.zero.stage < 2)
        ZS_CHECK(zs->backend->ops->zero(zs->backend, zs->grads_full.ptr,
                                        (size_t)zs->grads_full.count *
                                            zs_dtype_size(zs->grads_full.dtype)));
    return ZS_OK;
}

/* zero.shard_group: the world, or this rank's node with the model
 * replicated across the nodes (ground.h). Every rank holds the same topology,
 * so every rank decides alike (and fails alike on unequal nodes). */
static zs_status shard_group_choose(zs_ctx *zs) {
    zs->shard_comm = zs->comm;
    zs->replica_comm = NULL;
    zs->shard_rank = zs->rank;
    zs->shard_size = zs->world_size;
    zs->replica = 0;
    zs->replicas = 1;
    if (zs->settings.zero.shard_group != ZS_SHARD_GROUP_NODE) return ZS_OK;
    const zs__topology *t = zs->topology;
    ZS_CHECK(zs__topology_require_equal(t, "zero.shard_group = \"node\""));
    zs->shard_comm = zs->node_comm;
    zs->shard_rank = t->local_rank;
    zs->shard_size = t->node_size;
    zs->replica = t->node;
    zs->replicas = t->node_count;
    if (t->node_count > 1) zs->replica_comm = zs->cross_comm;
    ZS_INFO("zero.shard_group = \"node\": the model is sharded over the %d ranks of each node "
            "and replicated on %d node(s)", t->node_size, t->node_count);
    return ZS_OK;
}

zs_status zs__build_model(zs_ctx *zs) {
    ZS_CHECK(check_buildable(zs, "zs_build"));
    if (zs->open_unit)
        return zs__fail(ZS_ERR_STATE, "zs_build: unit '%s' is still open; call zs_unit_end",
                        zs->open_unit->name);
    /* Agree on the layout first, so that a rank with another model fails
     * every rank here instead of hanging one of them in a collective. */
    ZS_CHECK(zs__agree_u64(zs, layout_digest(zs), "model layout",
                           "every rank must register the same units and parameters (names, "
                           "shapes, flags, initializers) in the same order"));

    const size_t units = (size_t)(zs->unit_count ? zs->unit_count : 1);
    const size_t params = (size_t)(zs->param_count ? zs->param_count : 1);
    int *per_unit = zs__malloc(sizeof(int) * units);
    int64_t *numels = zs__malloc(sizeof(int64_t) * params);
    unsigned *flags = zs__malloc(sizeof(unsigned) * params);
    const char **unit_names = zs__malloc(sizeof(char *) * units);
    const char **param_names = zs__malloc(sizeof(char *) * params);
    zs_status st = ZS_OK;
    if (!per_unit || !numels || !flags || !unit_names || !param_names) {
        st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_build: out of host memory");
    } else {
        for (int u = 0; u < zs->unit_count; u++) {
            per_unit[u] = zs->units[u]->param_count;
            unit_names[u] = zs->units[u]->name;
        }
        for (int i = 0; i < zs->param_count; i++) {
            numels[i] = zs->params[i]->numel;
            flags[i] = zs->params[i]->flags;
            param_names[i] = zs->params[i]->name;
        }
        st = shard_group_choose(zs);
        if (st == ZS_OK)
            st = zs__plan_of_settings(&zs->settings, zs->shard_size, zs->replicas,
                                      zs->unit_count, per_unit, numels, flags, unit_names,
                                      param_names, &zs->plan);
    }
    free(per_unit);
    free(numels);
    free(flags);
    free(unit_names);
    free(param_names);
    if (st != ZS_OK) return zs__fail_context(st, "zs_build");

    /* Local: a failure is agreed below with the build's. */
    const zs_status norms = zs__step_create(zs);
    /* The NVMe tier's per-run directory is named once for the job, before
     * anything can fail on one rank only. */
    char runid[64] = "";
    if (zs->settings.offload.optimizer == ZS_OFFLOAD_NVME)
        ZS_CHECK(zs__nvme_runid(zs, runid, sizeof runid));
    st = norms == ZS_OK ? allocate_and_initialize(zs, runid) : norms;
    if (st != ZS_OK) st = zs__fail_context(st, "zs_build on rank %d", zs->rank);
    /* A disk, a directory or memory that fails on some ranks fails all of
     * them here, with the first failing rank's reason. */
    ZS_CHECK(zs__agree_status(zs, st, "zs_build"));
    ZS_CHECK(measure_all_gather(zs));
    zs->built = 1;
    ZS_INFO("built %d units, %d parameters, %lld elements (%lld padded; %lld per rank)",
            zs->unit_count, zs->param_count, (long long)zs->plan->numel,
            (long long)zs->plan->padded_numel, (long long)zs->plan->shard_numel);
    return ZS_OK;
}

int zs_unit_count(const zs_ctx *zs) { return zs->unit_count; }
zs_unit *zs_unit_at(zs_ctx *zs, int index) {
    return index >= 0 && index < zs->unit_count ? zs->units[index] : NULL;
}
const char *zs_unit_name(const zs_unit *unit) { return unit->name; }
const char *zs_param_name(const zs_param *p) { return p->name; }
int64_t zs_param_numel(const zs_param *p) { return p->numel; }
zs_dtype zs_param_dtype(const zs_param *p) { return p->ctx->compute_dtype; }
int zs_param_frozen(const zs_param *p) { return p != NULL && (p->flags & ZS_PARAM_FROZEN) != 0; }
int zs_unit_frozen(const zs_unit *unit) {
    if (!unit || unit->param_count == 0) return 0;
    const zs_ctx *zs = unit->ctx;
    for (int i = unit->first_param; i < unit->first_param + unit->param_count; i++)
        if (!(zs->params[i]->flags & ZS_PARAM_FROZEN)) return 0;
    return 1;
}
