/* The top floor of zero/: the context's lifetime. zs_create starts MPI,
 * agrees on the configuration and builds the rooms that live from creation
 * on, in order (topology, the job, the backend, the collectives, the comm
 * engine, the metrics); zs_destroy tears everything down in reverse,
 * including what zs_build created (residency, ZeRO++, the optimizer pass,
 * the model's state). It calls every room and is called by none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/frozen_store.h"
#include "zero/ground.h"
#include "zero/job.h"
#include "zero/kernels_agree.h"
#include "zero/metrics.h"
#include "zero/plan.h"
#include "zero/residency.h"
#include "zero/step.h"
#include "zero/unit_ops.h"
#include "zero/update.h"
#include "zero/zeropp.h"
#include "zeroshard_mpi.h"

/* Process-wide on purpose: MPI itself is process-wide. When zeroshard had to
 * initialize MPI, the last context destroyed finalizes it. */
static int g_contexts_owning_mpi;

/* This rank's index among the ranks on its host, and their number, learned by exchanging
 * host names through the runtime's communicator (whose waits have
 * deadlines) rather than with MPI_Comm_split_type, which would wait forever
 * for a rank that never arrives. */
static zs_status local_rank_of(zs_ctx *zs, int *local, int *on_host) {
    typedef struct { char name[MPI_MAX_PROCESSOR_NAME + 1]; } host_name;
    host_name mine;
    memset(&mine, 0, sizeof mine);
    int length = 0;
    if (MPI_Get_processor_name(mine.name, &length) != MPI_SUCCESS) mine.name[0] = '\0';
    host_name *all = NULL;
    ZS_CHECK(zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *all, "zs_create (host names)",
                               (void **)&all));
    zs_status st = zs__comm_all_gather_bytes(zs->comm, &mine, sizeof mine, all, "host names");
    *local = 0;
    *on_host = 0;
    for (int r = 0; st == ZS_OK && r < zs->world_size; r++)
        if (memcmp(all[r].name, mine.name, sizeof mine.name) == 0) {
            if (r < zs->rank) ++*local;
            ++*on_host;
        }
    free(all);
    return st;
}

/* Whether two ranks compute on one physical device: each rank's device
 * identity (the GPU's UUID) is exchanged and compared, so that the answer
 * holds whatever CUDA_VISIBLE_DEVICES each rank was given (counting ranks
 * and GPUs per host would take two ranks that each see "device 0" of
 * different GPUs for sharers). The same on every rank: *a < *b are the
 * first two ranks that share, or -1. */
typedef struct { char id[64]; } device_identity;

static zs_status first_sharing_ranks(zs_ctx *zs, int *a, int *b, char *id, size_t cap) {
    device_identity mine;
    memset(&mine, 0, sizeof mine);
    zs->backend->ops->device_identity(zs->backend, mine.id, sizeof mine.id);
    device_identity *all = NULL;
    ZS_CHECK(zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *all,
                               "zs_create (device identities)", (void **)&all));
    zs_status st =
        zs__comm_all_gather_bytes(zs->comm, &mine, sizeof mine, all, "device identities");
    *a = *b = -1;
    for (int i = 0; st == ZS_OK && *a < 0 && i < zs->world_size; i++)
        for (int j = i + 1; all[i].id[0] != '\0' && j < zs->world_size; j++)
            if (memcmp(all[i].id, all[j].id, sizeof all[i].id) == 0) {
                *a = i;
                *b = j;
                snprintf(id, cap, "%s", all[i].id);
                break;
            }
    free(all);
    return st;
}

/* comm.impl: which library carries the data collectives, the same choice
 * on every rank (the configuration is agreed, and so is whether two ranks
 * share a device). The CPU backend uses MPI on its own memory, or through
 * host staging (comm.host_staging, tests). A device without a collectives
 * library (the sim device) uses MPI through host staging. A GPU uses NCCL when
 * every rank has its own GPU, and otherwise MPI with its buffers staged
 * through pinned host memory (comm/staging.h), so that ranks can share a
 * GPU. zs->settings.comm.impl is the choice afterwards (the memory plan
 * reads it). */
static zs_status choose_collectives(zs_ctx *zs, MPI_Comm comm) {
    zs__settings *s = &zs->settings;
    zs__backend *be = zs->backend;
    if (be->ops->host_accessible) {
        if (s->comm.impl == ZS_COMM_LIBRARY_NCCL)
            return zs__fail(ZS_ERR_CONFIG, "comm.impl = \"nccl\" needs backend = \"cuda\"; the "
                            "%s backend's collectives run over MPI (comm.impl = \"mpi\" or "
                            "\"auto\")", be->ops->name);
        s->comm.impl = ZS_COMM_LIBRARY_MPI;
        if (s->comm.host_staging)
            return zs__agree_status(
                zs, zs__comm_stage_through(zs->comm, be, (size_t)s->comm.staging_bytes),
                "host staging buffers");
        zs__comm_use_backend(zs->comm, be);
        return ZS_OK;
    }
    if (!be->ops->device_collectives) {
        /* No collectives library runs on this device's memory (the sim
         * device: ranks share it as ranks share a GPU): MPI, staged. */
        if (s->comm.impl == ZS_COMM_LIBRARY_NCCL)
            return zs__fail(ZS_ERR_CONFIG, "comm.impl = \"nccl\" needs backend = \"cuda\": the "
                            "%s device has no NCCL, and its ranks share one device as ranks "
                            "share a GPU, so collectives go through MPI with host staging "
                            "(comm.impl = \"mpi\" or \"auto\")", be->ops->name);
        s->comm.impl = ZS_COMM_LIBRARY_MPI;
        return zs__agree_status(
            zs, zs__comm_stage_through(zs->comm, be, (size_t)s->comm.staging_bytes),
            "host staging buffers");
    }
    int a = -1, b = -1;
    char id[64] = "";
    ZS_CHECK(first_sharing_ranks(zs, &a, &b, id, sizeof id));
    const int shared = a >= 0;
    if (s->comm.impl == ZS_COMM_LIBRARY_NCCL && shared)
        return zs__fail(ZS_ERR_CONFIG,
                        "comm.impl = \"nccl\" needs one GPU per rank, but ranks %d and %d both "
                        "compute on %s (NCCL refuses two ranks on one GPU); use comm.impl = "
                        "\"auto\" or \"mpi\" (ranks share a GPU through host staging), or launch "
                        "at most one rank per GPU",
                        a, b, id);
    if (s->comm.impl == ZS_COMM_LIBRARY_AUTO) {
        s->comm.impl = shared ? ZS_COMM_LIBRARY_MPI : ZS_COMM_LIBRARY_NCCL;
        if (shared)
            ZS_INFO("comm.impl = \"auto\": ranks %d and %d both compute on %s, so the ranks "
                    "share GPUs and collectives go through MPI with host staging (comm.impl = "
                    "\"mpi\"); one rank per GPU uses NCCL",
                    a, b, id);
    }
    /* Pinned staging buffers can run out on one rank only: every rank
     * learns it (still over MPI) rather than meeting a peer that left. */
    if (s->comm.impl == ZS_COMM_LIBRARY_MPI)
        return zs__agree_status(
            zs, zs__comm_stage_through(zs->comm, be, (size_t)s->comm.staging_bytes),
            "host staging buffers");
    /* NCCL on device memory. The MPI communicator was only needed to agree
     * on the configuration and the choice. */
    zs__comm *device_comm = NULL;
    ZS_CHECK(zs__comm_create_nccl(comm, s, &zs->mem, be, &device_comm));
    zs__comm_destroy(zs->comm);
    zs->comm = device_comm;
    return ZS_OK;
}

/* The comm engine runs collectives on its own thread when comm.overlap is on,
 * the ranks are more than one, MPI allows calls from several threads (the
 * program's own MPI calls go on meanwhile), and the backend is the host. On
 * CUDA the engine runs ops inline, whichever library carries them: NCCL
 * calls only enqueue on the communication stream, so the device overlaps
 * without a host thread; the host-staged MPI path (ranks sharing a GPU)
 * synchronizes the compute stream for each collective, which a second host
 * thread would only contend for, so it does not overlap. */
static zs_status create_engine(zs_ctx *zs) {
    int threaded = zs->settings.comm.overlap && zs->world_size > 1 &&
                   zs->backend->ops->host_accessible;
    if (threaded) {
        int level = MPI_THREAD_SINGLE;
        MPI_Query_thread(&level);
        if (level < MPI_THREAD_MULTIPLE) {
            ZS_WARN("comm.overlap = true needs MPI_THREAD_MULTIPLE, but MPI was initialized with "
                    "%s; collectives run synchronously (initialize MPI with MPI_Init_thread("
                    "MPI_THREAD_MULTIPLE), or let zs_create initialize it)",
                    level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
                    : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                                                     : "MPI_THREAD_SERIALIZED");
            threaded = 0;
        }
    }
    ZS_CHECK(zs__trace_create(zs->settings.trace.file, zs->rank,
                              (size_t)zs->settings.trace.capacity, &zs->trace));
    /* The backend's blocking waits show on the compute track. */
    zs->backend->trace = zs->trace;
    ZS_CHECK(zs__engine_create(threaded, zs->trace, &zs->engine));
    if (zs__injected_network_from_env(&zs->network)) {
        /* Per link kind, the world's counters (its groups' included) tell
         * which link an op's bytes took. */
        zs__injected_network_watch(&zs->network, zs->comm);
        zs__engine_set_hooks(zs->engine, zs__injected_network_before_op,
                             zs__injected_network_after_op, &zs->network);
    }
    return ZS_OK;
}

/* The node and cross-node communicators (comm.h), over the topology agreed
 * earlier: every rank makes both, even of one rank (a node of one rank, a
 * job on one node), so that every rank makes the same calls. Making them is
 * local on MPI and agreed like any allocation; on NCCL the world's
 * communicator is then split (collective, bounded), and that is agreed
 * too. */
static zs_status create_groups(zs_ctx *zs) {
    zs__comm_set_topology(zs->comm, zs->topology); /* the world may be NCCL's by now */
    zs_status st = zs__comm_create_group(zs->comm, ZS_COMM_KIND_NODE, &zs->node_comm);
    if (st == ZS_OK) st = zs__comm_create_group(zs->comm, ZS_COMM_KIND_CROSS, &zs->cross_comm);
    ZS_CHECK(zs__agree_status(zs, st, "zs_create (node and cross-node communicators)"));
    if (zs->settings.comm.impl == ZS_COMM_LIBRARY_NCCL)
        ZS_CHECK(zs__agree_status(zs, zs__comm_connect_groups(zs->comm),
                                  "zs_create (NCCL node and cross-node communicators)"));
    return ZS_OK;
}

static zs_status create_on(const zs_config *cfg, MPI_Comm comm, int owns_mpi, zs_ctx **out) {
    zs_status st = ZS_OK;
    const uint64_t created = zs__clock_ns();
    zs_ctx *zs = zs__calloc(1, sizeof *zs);
    /* Before the runtime's communicator exists, a rank whose context could
     * not be allocated still tells the others (on the program's
     * communicator, with the deadline), so none waits for it. */
    st = zs__comm_agree_startup(
        comm, zs__config_settings(cfg),
        zs ? ZS_OK
           : zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: cannot allocate the context (%zu bytes "
                      "of host memory)", sizeof *zs),
        "agreeing that every rank allocated its context in zs_create");
    if (st != ZS_OK) {
        free(zs);
        return st;
    }
    zs->created_ns = created;
    zs->settings = *zs__config_settings(cfg);
    zs->config_hash = zs_config_hash(cfg);
    zs->compute_dtype = zs->settings.precision.dtype;
    zs->mem.device_cap = (uint64_t)zs->settings.device_memory_bytes;
    zs__loss_scaler_init(&zs->scaler, &zs->settings);
    zs->owns_mpi = owns_mpi;
    if (owns_mpi) g_contexts_owning_mpi++;

    ZS_CHECK_GOTO(zs__comm_create_mpi(comm, &zs->settings, &zs->mem, &zs->comm), st, fail);
    zs->rank = zs__comm_rank(zs->comm);
    zs->world_size = zs__comm_size(zs->comm);
    zs__log_configure(zs->rank, zs->settings.log.level, zs->settings.log.file);

    /* Agree before anything else: a rank that loaded another file would
     * otherwise train a different model or hang in a collective later. */
    char advice[700];
    snprintf(advice, sizeof advice,
             "every rank must load the same configuration (this rank loaded '%s'); "
             "check the paths and overrides given to each rank",
             zs_config_path(cfg));
    ZS_CHECK_GOTO(zs__agree_u64(zs, zs->config_hash, "configuration hash", advice), st, fail);
    /* Which ranks share a node, first thing after the configuration (which
     * holds comm.ranks_per_node): from here on every byte is counted by the
     * link it takes. */
    ZS_CHECK_GOTO(zs__agree_status(zs, zs__topology_create(zs->world_size, zs->rank,
                                                           zs->settings.comm.ranks_per_node,
                                                           &zs->topology),
                                   "zs_create (topology)"),
                  st, fail);
    ZS_CHECK_GOTO(zs__topology_agree(zs->topology, zs->comm), st, fail);
    zs__comm_set_topology(zs->comm, zs->topology);
    /* Signals, exit reports and every rank's host (zero/job.h), before the
     * long steps below: a preemption warning or a dead launcher from here on
     * is handled. */
    ZS_CHECK_GOTO(zs__job_create(zs), st, fail);
    /* The device of a GPU rank is picked by its rank among the ranks of its node. */
    int local_rank = 0;
    ZS_CHECK_GOTO(local_rank_of(zs, &local_rank, &zs->ranks_on_host), st, fail);
    /* Local steps (memory above all) are agreed before the next collective. */
    ZS_CHECK_GOTO(zs__agree_status(zs, zs__backend_create(&zs->settings, &zs->mem, local_rank,
                                                          &zs->backend),
                                   "zs_create (backend)"),
                  st, fail);
    ZS_CHECK_GOTO(choose_collectives(zs, comm), st, fail);
    ZS_CHECK_GOTO(create_groups(zs), st, fail);
    /* Ranks may die from here on (the long steps of zs_build follow). */
    ZS_CHECK_GOTO(zs__job_watch(zs), st, fail);
    /* The runtime's CPU kernels give the same bits at every SIMD level, so
     * a difference between hosts costs only speed: said at INFO. */
    char groups[1536];
    int differ = 0;
    ZS_CHECK_GOTO(zs__kernels_compare(zs, "runtime CPU kernel levels", zs_cpu_kernels(), groups,
                                      sizeof groups, &differ), st, fail);
    if (differ)
        ZS_INFO("the runtime's CPU kernels run at different SIMD levels (%s); every level gives "
                "the same bits, the lower levels are slower", groups);

    st = create_engine(zs);
    if (st == ZS_OK) st = zs__metrics_open(zs);
    ZS_CHECK_GOTO(zs__agree_status(zs, st, "zs_create"), st, fail);
    ZS_INFO("created on %d rank%s: stage %d, backend %s, max_live_units %d, %s %s collectives",
            zs->world_size, zs->world_size == 1 ? "" : "s", zs->settings.zero.stage,
            zs->backend->ops->name, zs->settings.zero.max_live_units,
            zs__engine_threaded(zs->engine) ? "overlapped" : "synchronous",
            zs->settings.comm.impl == ZS_COMM_LIBRARY_NCCL ? "NCCL"
            : zs->settings.comm.host_staging || !zs->backend->ops->host_accessible
                ? "MPI (host-staged)"
                : "MPI");
    *out = zs;
    return ZS_OK;
fail:
    zs_destroy(zs);
    return st;
}

zs_status zs_create_with_comm(const zs_config *cfg, MPI_Comm comm, zs_ctx **out) {
    if (!cfg || !out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_create: cfg and out are required");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return zs__fail(ZS_ERR_STATE, "zs_create_with_comm: MPI is not initialized; call "
                                      "MPI_Init_thread first, or use zs_create");
    return create_on(cfg, comm, 0, out);
}

zs_status zs_create(const zs_config *cfg, zs_ctx **out) {
    if (!cfg || !out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_create: cfg and out are required");
    int initialized = 0, owns = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        /* MULTIPLE: the comm engine's thread runs collectives while the
         * program calls MPI itself (create_engine checks what was granted). */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return zs__fail(ZS_ERR_COMM, "zs_create: MPI_Init_thread failed; launch the "
                                         "program with mpirun");
        owns = 1;
    }
    return create_on(cfg, MPI_COMM_WORLD, owns, out);
}

void zs_destroy(zs_ctx *zs) {
    if (!zs) return;
    /* Order matters on a device backend: wait for enqueued work through the
     * backend's health-checked wait (a collective stuck on a dead peer turns
     * into an abort there, not a hang in cudaFree), then destroy the
     * communicator (its stream is ordered against the backend's, which must
     * still exist), then free the buffers and the backend. */
    if (zs->engine && zs__engine_drain(zs->engine) != ZS_OK)
        ZS_WARN("zs_destroy: a collective in flight failed: %s", zs_last_error());
    zs__engine_destroy(zs->engine);
    zs->engine = NULL;
    /* The host update's thread ends (after a pass it is running) before the
     * trace it records into is written. */
    zs__update_destroy(zs);
    zs__metrics_close(zs);
    if (zs->backend) zs->backend->trace = NULL; /* its last waits go unrecorded */
    zs__trace_destroy(zs->trace); /* writes the file */
    zs->trace = NULL;
    if (zs->backend) (void)zs->backend->ops->synchronize(zs->backend);
    /* The peer watch ends before ranks may leave (below): a neighbour that
     * finished its own zs_destroy is not a death. */
    zs__job_unwatch(zs);
    /* Destroy is collective: every rank agrees that every rank is leaving.
     * A rank that leaves the training loop early (or destroys its context in
     * the middle of a step) then waits here, with the deadline, while the
     * others wait in the collective it skipped; all of them time out
     * together and the reports name the rank that is somewhere else, instead
     * of the early rank finishing MPI while the others hang. */
    if (zs->comm && zs->world_size > 1 && zs__comm_failed(zs->comm) == ZS_OK &&
        zs__comm_barrier(zs->comm, "zs_destroy") != ZS_OK)
        ZS_WARN("zs_destroy: the ranks did not leave together: %s", zs_last_error());
    const int comm_failed = zs->comm && zs__comm_failed(zs->comm) != ZS_OK;
    zs__comm_destroy(zs->comm); /* and its node and cross-node communicators */
    zs->comm = zs->node_comm = zs->cross_comm = NULL;
    zs__topology_destroy(zs->topology);
    zs->topology = NULL;
    /* The buffer frees what it was charged: the frozen part goes back to
     * its tag first. */
    if (zs->frozen_bytes > 0)
        zs__mem_move(&zs->mem, zs->frozen_tag, zs->params_tag, zs->frozen_bytes,
                     zs->mem.peak[zs->frozen_tag]);
    zs->frozen_bytes = 0;
    zs__buf *bufs[] = {&zs->params_full, &zs->params_shard, &zs->grads_full,
                       &zs->grads_shard, &zs->grads_host, &zs->grads_landing,
                       &zs->params_host};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        zs__buf_free(bufs[i]);
    zs__unit_ops_destroy(zs);
    zs__frozen_store_destroy(zs);
    zs__store_destroy(&zs->store);
    zs__zeropp_destroy(zs);
    for (int i = 0; i < zs->param_count; i++) free(zs->params[i]);
    for (int i = 0; i < zs->unit_count; i++) free(zs->units[i]);
    free(zs->params);
    free(zs->units);
    zs__step_destroy(zs);
    zs__residency_destroy(zs);
    for (int i = 0; i < zs->user_count; i++) free(zs->user[i].data);
    free(zs->user);
    free(zs->base.path);
    free(zs->base.name_prefix);
    for (int i = 0; i < zs->base.ignore_count; i++) free(zs->base.ignore[i]);
    free(zs->base.ignore);
    zs__plan_destroy(zs->plan);
    if (zs->host_backend != zs->backend) zs__backend_destroy(zs->host_backend);
    zs__backend_destroy(zs->backend);
    if (zs->owns_mpi && --g_contexts_owning_mpi == 0) {
        /* MPI_Finalize waits for every rank: after a collective timed out
         * (comm.on_timeout = "return") the rank it waited for may never come,
         * so the process ends without it and mpirun reports the job failed. */
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && !comm_failed) MPI_Finalize();
    }
    zs__job_destroy(zs);
    free(zs);
}

