/* A program written against the installed zeroshard only: the public headers
 * and the library found by find_package(zeroshard) or pkg-config (see
 * ../run_consumer.sh). It writes a configuration, registers one unit, runs
 * one micro-step with an optimizer step and prints this rank's memory.
 *
 *   mpirun -np 2 ./app WORKDIR
 *
 * Every rank prints "consumer: rank R of N ..." and exits 0 on success; on a
 * failure it prints the library's message and exits 1. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include <zeroshard_mpi.h> /* mpi.h too: MPI's flags must reach the program */

#define CHECK(call)                                                                        \
    do {                                                                                   \
        zs_status st_ = (call);                                                            \
        if (st_ != ZS_OK) {                                                                \
            fprintf(stderr, "consumer: %s failed: %s: %s\n", #call, zs_status_name(st_),  \
                    zs_last_error());                                                      \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static int write_config(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fputs("seed = 7;\n"
          "zero: { stage = 3; };\n"
          "optimizer: { type = \"adamw\"; lr = 1.0e-2; };\n",
          f);
    return fclose(f) != 0;
}

static int run(const char *workdir) {
    char path[4096];
    /* One file per process: a rank that truncated a shared file while
     * another read it made that one read half a configuration. */
    snprintf(path, sizeof path, "%s/consumer-%ld.cfg", workdir, (long)getpid());
    if (write_config(path) != 0)
        return 1;

    zs_config *cfg;
    CHECK(zs_config_load(path, &cfg));
    zs_ctx *zs;
    zs_status st = zs_create(cfg, &zs);
    zs_config_destroy(cfg);
    CHECK(st);

    zs_unit *unit;
    zs_param *w;
    CHECK(zs_unit_begin(zs, "layer0", &unit));
    CHECK(zs_param_create(zs, "layer0.weight", 2, (const int64_t[]){13, 7},
                          ZS_INIT_CONSTANT_VALUE(0.5), 0, &w));
    CHECK(zs_unit_end(zs));
    CHECK(zs_build(zs));

    CHECK(zs_fetch(zs, unit));
    float *grad = zs_param_grad(w);
    if (!grad || !zs_param_data(w)) {
        fprintf(stderr, "consumer: no parameter or gradient buffer: %s\n", zs_last_error());
        return 1;
    }
    for (int64_t i = 0; i < zs_param_numel(w); i++)
        grad[i] += 1.0f;
    CHECK(zs_release(zs, unit));
    CHECK(zs_grads_ready(zs, unit));
    zs_step_info info;
    CHECK(zs_step(zs, &info));

    zs_memory_stats mem;
    CHECK(zs_memory_report(zs, &mem));
    /* MPI directly, on the world the context runs on (zs_create initialized it). */
    unsigned long long peak = mem.total_peak, peak_sum = 0;
    if (MPI_Allreduce(&peak, &peak_sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
        fprintf(stderr, "consumer: MPI_Allreduce failed\n");
        return 1;
    }
    printf("consumer: rank %d of %d, stage %d, step %lld, params %llu B, total peak %llu B "
           "(all ranks %llu B)\n",
           zs_rank(zs), zs_world_size(zs), zs_stage(zs), (long long)info.step,
           (unsigned long long)mem.current[ZS_MEM_PARAMS], peak, peak_sum);
    fflush(stdout);
    int ok = info.step == 1 && !info.skipped;
    zs_destroy(zs);
    if (!ok) {
        fprintf(stderr, "consumer: expected one applied optimizer step\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s WORKDIR\n", argv[0]);
        return 2;
    }
    return run(argv[1]);
}
