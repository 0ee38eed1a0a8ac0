/* Tied weights and the live byte budget (issue 10), at this world size:
 *
 * The model is GPT-2's shape in miniature: a big unit "embed" (a [V][D]
 * embedding E and a vector s) and four small blocks. E is used first (x =
 * E[token]) and last (logits = E h, tied), so in backward its gradient opens
 * at the head, stays open while every block runs, and is completed by the
 * embedding's contribution at the end:
 *     fetch embed, x = E[tok] * s, release
 *     per block: fetch, x = x + tanh(W x + b), release
 *     fetch embed, head forward + backward (dE, ds, dx), release (gradient open)
 *     per block, reversed: fetch, backward, grads_ready, release
 *     fetch embed, dE[tok] += ..., grads_ready, release
 *
 *   - stages 0-3 give bit-identical parameters and losses;
 *   - the world-size-1 run of the same program (on MPI_COMM_SELF) matches
 *     within 1e-5 relative;
 *   - stage 3 runs in zero.live_bytes = the minimum zs_build accepts (the
 *     embed unit's parameters plus its gradient) while max_live_units = 2
 *     slots of the largest unit would need twice that; the peak of carved
 *     bytes per tag equals what this file computes from the unit sizes;
 *   - one 256-byte block less fails zs_build, naming the unit and the bytes
 *     needed; a fetch that does not fit fails naming every holder;
 *   - zs_params_import writes exactly the values its source gives, in every
 *     stage (fp32, and rounded in bf16), asking each rank only for what it
 *     owns; a source failing on one rank fails every rank. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "zeroshard_mpi.h"

#define V 211   /* vocabulary: E is [V][D] */
#define D 20
#define BLOCKS 4
#define BATCH 6 /* global samples per step; divides by 1, 2 and 3 */
#define STEPS 5
#define ALIGN 16

typedef struct model {
    zs_unit *embed, *block[BLOCKS];
    zs_param *E, *s, *W[BLOCKS], *b[BLOCKS];
} model;

static char g_cfg[256];

static int token_of(int sample, int step) { return (7 * sample + 13 * step + 3) % V; }
static int target_of(int sample, int step) { return (5 * sample + 11 * step + 1) % V; }

/* Variants of the comm engine that must all give the same bits: the
 * default (its own thread) without gathering ahead, synchronous, and with
 * stage-3 prefetch. */
enum { ENGINE_THREAD = 0, ENGINE_SYNC = 1, ENGINE_PREFETCH = 2, ENGINE_BUCKETS = 3 };
static int g_engine = ENGINE_THREAD;

static zs_ctx *create(MPI_Comm comm, int stage, int64_t live_bytes, int max_live) {
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(g_cfg, &cfg));
    char a[64], b[64], c[64], d[64], e[64], f[64];
    snprintf(a, sizeof a, "zero.stage=%d", stage);
    snprintf(b, sizeof b, "zero.live_bytes=%lld", (long long)live_bytes);
    snprintf(c, sizeof c, "zero.max_live_units=%d", max_live);
    snprintf(d, sizeof d, "comm.overlap=%s", g_engine == ENGINE_SYNC ? "false" : "true");
    snprintf(e, sizeof e, "zero.prefetch_bytes=%d", g_engine == ENGINE_PREFETCH ? 1 << 26 : 0);
    /* Buckets of at least 4 KiB: the 1.7 KiB blocks go two by two. */
    snprintf(f, sizeof f, "comm.bucket_bytes=%d", g_engine == ENGINE_BUCKETS ? 4096 : 0);
    const char *list[] = {a, b, c, d, e, f};
    ZT_OK(zs_config_override_list(cfg, 6, list));
    zs_ctx *zs = NULL;
    ZT_OK(zs_create_with_comm(cfg, comm, &zs));
    zs_config_destroy(cfg);
    return zs;
}

static void describe(zs_ctx *zs, model *m) {
    int64_t e_shape[2] = {V, D}, s_shape[1] = {D}, w_shape[2] = {D, D}, b_shape[1] = {D};
    ZT_OK(zs_unit_begin(zs, "embed", &m->embed));
    ZT_OK(zs_param_create(zs, "embed.E", 2, e_shape, ZS_INIT_NORMAL_STD(0.5), 0, &m->E));
    ZT_OK(zs_param_create(zs, "embed.s", 1, s_shape, ZS_INIT_UNIFORM_RANGE(0.5, 1.5), 0, &m->s));
    ZT_OK(zs_unit_end(zs));
    for (int k = 0; k < BLOCKS; k++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", k);
        ZT_OK(zs_unit_begin(zs, name, &m->block[k]));
        snprintf(name, sizeof name, "block%d.W", k);
        ZT_OK(zs_param_create(zs, name, 2, w_shape, ZS_INIT_NORMAL_STD(0.3), 0, &m->W[k]));
        snprintf(name, sizeof name, "block%d.b", k);
        ZT_OK(zs_param_create(zs, name, 1, b_shape, ZS_INIT_NORMAL_STD(0.1), 0, &m->b[k]));
        ZT_OK(zs_unit_end(zs));
    }
}

/* Elements of a unit laid out as zeroshard does: parameters at multiples of
 * ALIGN, padded to world * ALIGN. */
static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
static int64_t unit_padded(int64_t a, int64_t b, int world) {
    return round_up(round_up(a, ALIGN) + b, (int64_t)world * ALIGN);
}
static uint64_t span(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

typedef struct run_result {
    float params[V * D + D + BLOCKS * (D * D + D)];
    double loss[STEPS];
    zs_memory_stats memory;
} run_result;

/* Activations of one sample. */
typedef struct sample_acts {
    float x[BLOCKS + 1][D]; /* x[0] = E[tok] * s; x[k + 1] = block k's output */
    float t[BLOCKS][D];     /* tanh(W x + b) of block k */
} sample_acts;

#define REQUIRE_PTR(p)                                                                 \
    do {                                                                               \
        if (!(p)) {                                                                    \
            fprintf(stderr, "%s:%d: %s is NULL: %s\n", __FILE__, __LINE__, #p,         \
                    zs_last_error());                                                  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
        }                                                                              \
    } while (0)

static void train(zs_ctx *zs, const model *m, MPI_Comm comm, run_result *out) {
    int rank = 0, world = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    const int local = BATCH / world;
    sample_acts acts[BATCH];
    float dx[BATCH][D];
    for (int step = 0; step < STEPS; step++) {
        const int first = rank * local;
        /* Forward: the embedding. */
        ZT_OK(zs_fetch(zs, m->embed));
        const float *E = zs_param_data(m->E), *s = zs_param_data(m->s);
        REQUIRE_PTR(E);
        REQUIRE_PTR(s);
        for (int i = 0; i < local; i++)
            for (int j = 0; j < D; j++)
                acts[i].x[0][j] = E[token_of(first + i, step) * D + j] * s[j];
        ZT_OK(zs_release(zs, m->embed));
        /* Blocks. */
        for (int k = 0; k < BLOCKS; k++) {
            ZT_OK(zs_fetch(zs, m->block[k]));
            const float *W = zs_param_data(m->W[k]), *b = zs_param_data(m->b[k]);
            REQUIRE_PTR(W);
            REQUIRE_PTR(b);
            for (int i = 0; i < local; i++)
                for (int r = 0; r < D; r++) {
                    float z = b[r];
                    for (int c = 0; c < D; c++) z += W[r * D + c] * acts[i].x[k][c];
                    acts[i].t[k][r] = tanhf(z);
                    acts[i].x[k + 1][r] = acts[i].x[k][r] + acts[i].t[k][r];
                }
            ZT_OK(zs_release(zs, m->block[k]));
        }
        /* Head: logits = E h (tied), softmax cross-entropy, and its backward
         * at once; the gradient of E stays open after the release. */
        ZT_OK(zs_fetch(zs, m->embed));
        E = zs_param_data(m->E);
        float *dE = zs_param_grad(m->E);
        REQUIRE_PTR(E);
        REQUIRE_PTR(dE);
        double loss = 0.0;
        for (int i = 0; i < local; i++) {
            const float *h = acts[i].x[BLOCKS];
            float logits[V], mx = -INFINITY, sum = 0.0f;
            for (int v = 0; v < V; v++) {
                float z = 0.0f;
                for (int j = 0; j < D; j++) z += E[v * D + j] * h[j];
                logits[v] = z;
                if (z > mx) mx = z;
            }
            for (int v = 0; v < V; v++) sum += expf(logits[v] - mx);
            const int y = target_of(first + i, step);
            loss += (double)(logf(sum) + mx - logits[y]);
            memset(dx[i], 0, sizeof dx[i]);
            for (int v = 0; v < V; v++) {
                /* d(mean loss)/dlogit, the mean over this rank's samples
                 * (zeroshard averages over ranks). */
                float g = (expf(logits[v] - mx) / sum - (v == y ? 1.0f : 0.0f)) / (float)local;
                for (int j = 0; j < D; j++) {
                    dE[v * D + j] += g * h[j];
                    dx[i][j] += g * E[v * D + j];
                }
            }
        }
        ZT_OK(zs_release(zs, m->embed));
        double global = 0.0;
        MPI_Allreduce(&loss, &global, 1, MPI_DOUBLE, MPI_SUM, comm);
        out->loss[step] = global / BATCH;
        /* Blocks, reversed. */
        for (int k = BLOCKS - 1; k >= 0; k--) {
            ZT_OK(zs_fetch(zs, m->block[k]));
            const float *W = zs_param_data(m->W[k]);
            float *dW = zs_param_grad(m->W[k]), *db = zs_param_grad(m->b[k]);
            REQUIRE_PTR(W);
            REQUIRE_PTR(dW);
            REQUIRE_PTR(db);
            for (int i = 0; i < local; i++) {
                float dz[D], din[D];
                for (int r = 0; r < D; r++) dz[r] = dx[i][r] * (1.0f - acts[i].t[k][r] * acts[i].t[k][r]);
                for (int c = 0; c < D; c++) {
                    float acc = dx[i][c]; /* the residual path */
                    for (int r = 0; r < D; r++) acc += W[r * D + c] * dz[r];
                    din[c] = acc;
                }
                for (int r = 0; r < D; r++) {
                    db[r] += dz[r];
                    for (int c = 0; c < D; c++) dW[r * D + c] += dz[r] * acts[i].x[k][c];
                }
                memcpy(dx[i], din, sizeof din);
            }
            ZT_OK(zs_grads_ready(zs, m->block[k]));
            ZT_OK(zs_release(zs, m->block[k]));
        }
        /* The embedding's own contribution completes E's gradient, reduced once. */
        ZT_OK(zs_fetch(zs, m->embed));
        E = zs_param_data(m->E);
        s = zs_param_data(m->s);
        dE = zs_param_grad(m->E);
        float *ds = zs_param_grad(m->s);
        REQUIRE_PTR(E);
        REQUIRE_PTR(s);
        REQUIRE_PTR(dE);
        REQUIRE_PTR(ds);
        for (int i = 0; i < local; i++) {
            const int tok = token_of(first + i, step);
            for (int j = 0; j < D; j++) {
                dE[tok * D + j] += dx[i][j] * s[j];
                ds[j] += dx[i][j] * E[tok * D + j];
            }
        }
        ZT_OK(zs_grads_ready(zs, m->embed));
        ZT_OK(zs_release(zs, m->embed));
        zs_step_info info;
        ZT_OK(zs_step(zs, &info));
        ZT_CHECK_MSG(!info.skipped, "step %d skipped", step);
    }
    ZT_OK(zs_memory_report(zs, &out->memory));
    /* The final parameters, full, through fetch (a collective in stage 3). */
    size_t at = 0;
    for (int u = 0; u < 1 + BLOCKS; u++) {
        zs_unit *unit = u == 0 ? m->embed : m->block[u - 1];
        zs_param *ps[2] = {u == 0 ? m->E : m->W[u - 1], u == 0 ? m->s : m->b[u - 1]};
        ZT_OK(zs_fetch(zs, unit));
        for (int k = 0; k < 2; k++) {
            const float *data = zs_param_data(ps[k]);
            REQUIRE_PTR(data);
            memcpy(out->params + at, data, sizeof(float) * (size_t)zs_param_numel(ps[k]));
            at += (size_t)zs_param_numel(ps[k]);
        }
        ZT_OK(zs_release(zs, unit));
    }
}

/* A stage-3 context whose budget is one 256-byte block short, and the
 * refusals of the minimal budget. */
static void test_refusals(int world, uint64_t minimum) {
    model m;
    zs_ctx *zs = create(MPI_COMM_WORLD, 3, (int64_t)(minimum - 256), 2);
    describe(zs, &m);
    char want[160];
    snprintf(want, sizeof want, "set zero.live_bytes to at least %llu", (unsigned long long)minimum);
    ZT_FAILS_WITH(zs_build(zs), ZS_ERR_CONFIG, want);
    ZT_CHECK_MSG(strstr(zs_last_error(), "the largest unit, 'embed'") != NULL, "message: %s",
                 zs_last_error());
    zs_destroy(zs);

    zs = create(MPI_COMM_WORLD, 3, (int64_t)minimum, 2);
    describe(zs, &m);
    ZT_OK(zs_build(zs));
    /* The embed gradient open, a block fetched with its gradient: the embed
     * parameters no longer fit, and the message names every holder. */
    ZT_OK(zs_fetch(zs, m.embed));
    ZT_CHECK(zs_param_grad(m.E) != NULL);
    ZT_OK(zs_release(zs, m.embed));
    ZT_OK(zs_fetch(zs, m.block[2]));
    ZT_CHECK(zs_param_grad(m.W[2]) != NULL);
    const uint64_t e_bytes = (uint64_t)unit_padded(V * D, D, world) * 4;
    const uint64_t b_bytes = (uint64_t)unit_padded(D * D, D, world) * 4;
    ZT_FAILS_WITH(zs_fetch(zs, m.embed), ZS_ERR_OUT_OF_MEMORY,
                  "zs_fetch('embed'): 'embed' parameters needs");
    char holder[3][96];
    snprintf(holder[0], sizeof holder[0], "'embed' gradient (%llu bytes)", (unsigned long long)e_bytes);
    snprintf(holder[1], sizeof holder[1], "'block2' parameters (%llu bytes)", (unsigned long long)b_bytes);
    snprintf(holder[2], sizeof holder[2], "'block2' gradient (%llu bytes)", (unsigned long long)b_bytes);
    for (int i = 0; i < 3; i++)
        ZT_CHECK_MSG(strstr(zs_last_error(), holder[i]) != NULL, "no \"%s\" in: %s", holder[i],
                     zs_last_error());
    ZT_CHECK_MSG(strstr(zs_last_error(), "; release a unit or call zs_grads_ready first, or raise "
                                         "zero.live_bytes") != NULL,
                 "message: %s", zs_last_error());
    ZT_OK(zs_grads_ready(zs, m.block[2]));
    ZT_OK(zs_release(zs, m.block[2]));
    ZT_OK(zs_fetch(zs, m.embed));   /* fits again */
    ZT_OK(zs_release(zs, m.embed));
    zs_destroy(zs);
}

/* The import source: value of element i of parameter p is a function of
 * (name, i); it records how many elements this rank was asked for, and can
 * fail for one parameter on one rank. */
typedef struct import_source {
    int64_t asked;
    int fail_rank;
    const char *fail_param;
} import_source;

static float import_value(const char *name, int64_t i) {
    unsigned h = 0;
    for (const char *c = name; *c; c++) h = h * 31u + (unsigned char)*c;
    return (float)((int64_t)((h % 97u) + 7 * i) % 1001 - 500) / 256.0f;
}

static int import_fill(void *user, const zs_param *p, int64_t first, int64_t count, float *dst,
                       char *err, size_t err_cap) {
    import_source *src = user;
    if (src->fail_param && zt_rank == src->fail_rank && strcmp(zs_param_name(p), src->fail_param) == 0) {
        snprintf(err, err_cap, "short read at offset 1234 of weights.bin");
        return -1;
    }
    for (int64_t j = 0; j < count; j++) dst[j] = import_value(zs_param_name(p), first + j);
    src->asked += count;
    return 0;
}

static void test_import(int world) {
    const char *dtypes[] = {"fp32", "bf16"};
    for (int d = 0; d < 2; d++)
        for (int stage = 0; stage < 4; stage++) {
            model m;
            zs_config *cfg = NULL;
            ZT_OK(zs_config_load(g_cfg, &cfg));
            char a[64], b[64];
            snprintf(a, sizeof a, "zero.stage=%d", stage);
            snprintf(b, sizeof b, "precision.dtype=\"%s\"", dtypes[d]);
            const char *list[] = {a, b};
            ZT_OK(zs_config_override_list(cfg, 2, list));
            zs_ctx *zs = NULL;
            ZT_OK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
            zs_config_destroy(cfg);
            describe(zs, &m);
            ZT_OK(zs_build(zs));
            import_source src = {0, -1, NULL};
            ZT_OK(zs_params_import(zs, import_fill, &src));
            /* Stage 0 asks for everything; sharded stages for the owned slices,
             * which add up to the model over the ranks. */
            const int64_t total = V * D + D + BLOCKS * (D * D + D);
            int64_t asked_all = 0;
            MPI_Allreduce(&src.asked, &asked_all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            ZT_EQ_INT(asked_all, stage == 0 ? total * world : total);
            int bad = 0;
            for (int u = 0; u < 1 + BLOCKS; u++) {
                zs_unit *unit = u == 0 ? m.embed : m.block[u - 1];
                zs_param *ps[2] = {u == 0 ? m.E : m.W[u - 1], u == 0 ? m.s : m.b[u - 1]};
                ZT_OK(zs_fetch(zs, unit));
                for (int k = 0; k < 2; k++) {
                    const void *data = zs_param_data(ps[k]);
                    REQUIRE_PTR(data);
                    for (int64_t i = 0; i < zs_param_numel(ps[k]); i++) {
                        float want = import_value(zs_param_name(ps[k]), i), got;
                        float rounded = want;
                        if (d == 1) {
                            uint16_t h;
                            ZT_OK(zs_convert(&h, ZS_DTYPE_BF16, &want, ZS_DTYPE_FP32, 1));
                            ZT_OK(zs_convert(&rounded, ZS_DTYPE_FP32, &h, ZS_DTYPE_BF16, 1));
                            ZT_OK(zs_convert(&got, ZS_DTYPE_FP32, (const uint16_t *)data + i,
                                             ZS_DTYPE_BF16, 1));
                        } else {
                            got = ((const float *)data)[i];
                        }
                        if (memcmp(&got, &rounded, sizeof got) != 0 && bad++ < 3)
                            fprintf(stderr, "rank %d stage %d %s: %s[%lld] = %g, imported %g\n",
                                    zt_rank, stage, dtypes[d], zs_param_name(ps[k]), (long long)i,
                                    got, rounded);
                    }
                }
                ZT_OK(zs_release(zs, unit));
            }
            ZT_CHECK_MSG(bad == 0, "stage %d %s: %d imported values differ", stage, dtypes[d], bad);
            /* A source that fails for one parameter on the last rank fails every rank. */
            import_source failing = {0, world - 1, "block2.W"};
            if (zt_rank == world - 1)
                ZT_FAILS_WITH(zs_params_import(zs, import_fill, &failing), ZS_ERR_IO,
                              "parameter 'block2.W', elements [");
            else
                ZT_FAILS_WITH(zs_params_import(zs, import_fill, &failing), ZS_ERR_IO,
                              "1 rank(s) could not import their parameters");
            if (zt_rank == world - 1)
                ZT_CHECK_MSG(strstr(zs_last_error(), "short read at offset 1234") != NULL,
                             "message: %s", zs_last_error());
            zs_destroy(zs);
        }
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    snprintf(g_cfg, sizeof g_cfg, "/tmp/zs_tied_%d_%d.cfg", (int)getppid(), zt_rank);
    FILE *f = fopen(g_cfg, "w");
    if (!f) return 1;
    fprintf(f, "zero: { align = %d; };\noptimizer: { type = \"adamw\"; lr = 0.01; "
               "weight_decay = 0.1; };\nlog: { level = \"warn\"; };\n", ALIGN);
    fclose(f);

    /* The minimum zs_build accepts in stage 3: the embed unit's parameters
     * plus its gradient; the slots of max_live_units = 2 would hold twice that. */
    const uint64_t e_bytes = (uint64_t)unit_padded(V * D, D, world) * 4;
    const uint64_t b_bytes = (uint64_t)unit_padded(D * D, D, world) * 4;
    const uint64_t minimum = 2 * span(e_bytes);

    static run_result runs[4], reference;
    for (int stage = 0; stage < 4; stage++) {
        model m;
        zs_ctx *zs = create(MPI_COMM_WORLD, stage, stage == 3 ? (int64_t)minimum : 0, 2);
        describe(zs, &m);
        ZT_OK(zs_build(zs));
        train(zs, &m, MPI_COMM_WORLD, &runs[stage]);
        zs_destroy(zs);
    }
    {
        model m;
        zs_ctx *zs = create(MPI_COMM_SELF, 0, 0, 2);
        describe(zs, &m);
        ZT_OK(zs_build(zs));
        train(zs, &m, MPI_COMM_SELF, &reference);
        zs_destroy(zs);
    }
    /* The same with collectives on the calling thread, and with prefetch:
     * identical bits. */
    for (int variant = ENGINE_SYNC; variant <= ENGINE_BUCKETS; variant++) {
        g_engine = variant;
        for (int stage = 0; stage < 4; stage++) {
            static run_result other;
            model m;
            zs_ctx *zs = create(MPI_COMM_WORLD, stage, stage == 3 ? (int64_t)(2 * minimum) : 0, 2);
            describe(zs, &m);
            ZT_OK(zs_build(zs));
            train(zs, &m, MPI_COMM_WORLD, &other);
            zs_destroy(zs);
            ZT_CHECK_MSG(memcmp(runs[stage].params, other.params, sizeof other.params) == 0 &&
                             memcmp(runs[stage].loss, other.loss, sizeof other.loss) == 0,
                         "np %d stage %d: the %s run differs from the default one", world, stage,
                         variant == ENGINE_SYNC       ? "synchronous"
                         : variant == ENGINE_PREFETCH ? "prefetching"
                                                      : "bucketed");
        }
    }
    g_engine = ENGINE_THREAD;
    for (int stage = 1; stage < 4; stage++) {
        ZT_CHECK_MSG(memcmp(runs[0].params, runs[stage].params, sizeof runs[0].params) == 0,
                     "np %d: stage %d parameters are not bit-identical to stage 0", world, stage);
        ZT_CHECK_MSG(memcmp(runs[0].loss, runs[stage].loss, sizeof runs[0].loss) == 0,
                     "np %d: stage %d losses are not bit-identical to stage 0", world, stage);
    }
    double worst = 0.0, scale = 0.0;
    const size_t n = sizeof reference.params / sizeof(float);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)runs[0].params[i] - (double)reference.params[i]);
        if (d > worst) worst = d;
        if (fabs((double)reference.params[i]) > scale) scale = fabs((double)reference.params[i]);
    }
    ZT_CHECK_MSG(worst <= 1e-5 * scale, "np %d vs one rank: max difference %.3g (scale %.3g)",
                 world, worst, scale);
    ZT_CHECK_MSG(runs[0].loss[STEPS - 1] < runs[0].loss[0], "loss did not fall: %g -> %g",
                 runs[0].loss[0], runs[0].loss[STEPS - 1]);

    /* Stage 3 memory, from the unit sizes: the head holds embed's parameters
     * and gradient (2E); the reversed blocks hold embed's open gradient and
     * a block's parameters and gradient (E + 2B). */
    const zs_memory_stats *m3 = &runs[3].memory;
    ZT_EQ_U64(m3->live_bytes_budget, minimum);
    ZT_EQ_U64(m3->peak[ZS_MEM_LIVE_PARAMS], e_bytes);
    ZT_EQ_U64(m3->peak[ZS_MEM_LIVE_GRADS], e_bytes + b_bytes);
    ZT_EQ_U64(m3->live_bytes_peak, 2 * e_bytes > e_bytes + 2 * b_bytes ? 2 * e_bytes
                                                                        : e_bytes + 2 * b_bytes);
    ZT_EQ_U64(m3->current[ZS_MEM_LIVE_FREE], minimum);
    /* Stage 2 (automatic budget: 2 gradients of the largest unit). */
    const zs_memory_stats *m2 = &runs[2].memory;
    ZT_EQ_U64(m2->live_bytes_budget, 2 * span(e_bytes));
    ZT_EQ_U64(m2->peak[ZS_MEM_LIVE_GRADS], e_bytes + b_bytes);
    ZT_EQ_U64(m2->peak[ZS_MEM_LIVE_PARAMS], 0);

    test_refusals(world, minimum);
    test_import(world);
    unlink(g_cfg);
    int rc = zt_finish("test_tied_budget");
    MPI_Finalize();
    return rc;
}
