/* Writes a real checkpoint through the runtime, for zs-ckpt to verify and
 * export (test_zs_ckpt's "real" case):
 *
 *   mpirun -np N make_real_ckpt <root> <dump.f32>
 *
 * A small fp32 model with odd sizes (so every rank's owned ranges start at
 * uneven offsets) in ZeRO stage 3 takes three AdamW steps with deterministic
 * gradients, then zs_save(root). Rank 0 then gathers every parameter
 * (zs_fetch) and writes its values, in registration order, as raw
 * little-endian float32 to <dump.f32>: in fp32 the parameters are their own
 * master copy, so this is exactly what an fp32 export must contain. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define R_CHECK(call)                                                                   \
    do {                                                                                \
        zs_status s_ = (call);                                                          \
        if (s_ != ZS_OK) {                                                              \
            fprintf(stderr, "make_real_ckpt: rank %d: %s failed: %s\n", rank, #call,    \
                    zs_last_error());                                                   \
            MPI_Abort(MPI_COMM_WORLD, 1);                                               \
        }                                                                               \
    } while (0)

#define UNITS 2
#define PARAMS 3
static const char *const unit_names[UNITS] = {"embed", "head"};
static const struct {
    const char *name;
    int unit, ndim;
    int64_t shape[2];
} params[PARAMS] = {
    {"embed.weight", 0, 2, {37, 11}},
    {"embed.bias", 0, 1, {53, 0}},
    {"head.weight", 1, 2, {3, 43}},
};
#define STEPS 3

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: make_real_ckpt <root> <dump.f32>\n");
        MPI_Finalize();
        return 2;
    }
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s.cfg", argv[2]);
    if (rank == 0) {
        FILE *f = fopen(cfg_path, "w");
        if (!f) MPI_Abort(MPI_COMM_WORLD, 1);
        fprintf(f, "seed = 7;\nzero: { stage = 3; align = 1; };\n"
                   "optimizer: { type = \"adamw\"; lr = 0.01; weight_decay = 0.1; };\n");
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zs_config *cfg = NULL;
    zs_ctx *zs = NULL;
    R_CHECK(zs_config_load(cfg_path, &cfg));
    R_CHECK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    zs_config_destroy(cfg);

    zs_unit *units[UNITS];
    zs_param *handles[PARAMS];
    for (int u = 0; u < UNITS; u++) {
        R_CHECK(zs_unit_begin(zs, unit_names[u], &units[u]));
        for (int p = 0; p < PARAMS; p++)
            if (params[p].unit == u)
                R_CHECK(zs_param_create(zs, params[p].name, params[p].ndim, params[p].shape,
                                        ZS_INIT_UNIFORM_RANGE(-0.5, 0.5), 0, &handles[p]));
        R_CHECK(zs_unit_end(zs));
    }
    R_CHECK(zs_build(zs));

    /* Steps with gradients that depend on the parameter and element only, so
     * every rank contributes the same and the values move away from init. */
    for (int step = 0; step < STEPS; step++) {
        for (int u = UNITS - 1; u >= 0; u--) {
            R_CHECK(zs_fetch(zs, units[u]));
            for (int p = 0; p < PARAMS; p++) {
                if (params[p].unit != u) continue;
                float *g = zs_param_grad(handles[p]);
                if (!g) R_CHECK(ZS_ERR_STATE);
                for (int64_t i = 0; i < zs_param_numel(handles[p]); i++)
                    g[i] += (float)((i * 7 + p * 3 + step) % 11) * 0.125f - 0.625f;
            }
            R_CHECK(zs_grads_ready(zs, units[u]));
            R_CHECK(zs_release(zs, units[u]));
        }
        R_CHECK(zs_step(zs, NULL));
    }
    R_CHECK(zs_save(zs, argv[1]));

    FILE *dump = NULL;
    if (rank == 0 && !(dump = fopen(argv[2], "wb"))) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int u = 0; u < UNITS; u++) {
        R_CHECK(zs_fetch(zs, units[u]));
        for (int p = 0; p < PARAMS && rank == 0; p++) {
            if (params[p].unit != u) continue;
            const float *v = zs_param_data(handles[p]);
            size_t n = (size_t)zs_param_numel(handles[p]);
            if (!v || fwrite(v, sizeof *v, n, dump) != n) MPI_Abort(MPI_COMM_WORLD, 1);
        }
        R_CHECK(zs_release(zs, units[u]));
    }
    if (dump && fclose(dump) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    zs_destroy(zs);
    MPI_Finalize();
    return 0;
}
