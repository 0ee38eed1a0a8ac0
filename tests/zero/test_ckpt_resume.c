/* Resume is bitwise (run under mpirun -np 2, driven by run_ckpt_resume.sh):
 *   full   <stage> <out>        20 steps straight; writes what the run ends with
 *   first  <stage> <ckpt>       10 steps, then zs_save (with the data position
 *                               as user state); the process exits
 *   second <stage> <ckpt> <out> a new process: zs_load, then steps 10..19;
 *                               writes the same things as `full`
 * The script compares the two outputs byte for byte: losses of steps 10-19
 * and loss scales (as bit patterns), the final state digest of each rank
 * (parameters, fp32 master weights, moments, step counters), the final loss
 * scale and a hash of the gathered parameters. fp16 with the default dynamic
 * scale, so the first steps overflow and the scaler's state must resume too. */
#define _DEFAULT_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 20
#define SAVE_AFTER 10

static void write_result(const char *out, const harness_result *r) {
    char path[512];
    snprintf(path, sizeof path, "%s.rank%d", out, zt_rank);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f != NULL);
    for (int s = SAVE_AFTER; s < STEPS; s++) {
        uint64_t loss, scale;
        memcpy(&loss, &r->loss[s], sizeof loss);
        memcpy(&scale, &r->loss_scale[s], sizeof scale);
        fprintf(f, "step %d loss %016llx scale %016llx skipped %d\n", s, (unsigned long long)loss,
                (unsigned long long)scale, r->skipped[s]);
    }
    fprintf(f, "digest %016llx\n", (unsigned long long)r->final_digest);
    fprintf(f, "final scale %.17g\n", r->final_loss_scale);
    fprintf(f, "params %016llx\n",
            (unsigned long long)XXH3_64bits(r->final, sizeof(float) * (size_t)r->numel));
    fclose(f);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc >= 4);
    const char *mode = argv[1];
    harness_options opt = {.stage = atoi(argv[2]), .optimizer = "adamw", .steps = STEPS,
                           .mode = TINY_GRAD_TRUE, .max_live_units = 2, .prefetch = 1,
                           .scheduler = "warmup_cosine", .dtype = "fp16"};
    harness_result r;
    if (strcmp(mode, "full") == 0) {
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        write_result(argv[3], &r);
    } else if (strcmp(mode, "first") == 0) {
        opt.stop_after = SAVE_AFTER;
        opt.save_dir = argv[3];
        opt.save_after = SAVE_AFTER;
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        int skipped = 0;
        for (int s = 0; s < SAVE_AFTER; s++) skipped += r.skipped[s];
        ZT_CHECK_MSG(skipped > 0, "no step overflowed before the save; the scaler state is not "
                     "being exercised");
    } else {
        ZT_REQUIRE(strcmp(mode, "second") == 0 && argc >= 5);
        opt.load_dir = argv[3];
        ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
        ZT_EQ_INT(r.first_step, SAVE_AFTER);
        write_result(argv[4], &r);
    }
    harness_result_free(&r);
    int rc = zt_finish("test_ckpt_resume");
    MPI_Finalize();
    return rc;
}
