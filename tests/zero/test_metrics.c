/* log.metrics_file (run under mpirun -np 2): rank 0 writes one JSON line per
 * optimizer step; every line parses (json-c) and agrees with the step infos
 * the program got (step, lr, gradient norm, loss scale, skipped) and with
 * the scalar it logged (zs_log_scalar "loss"), to the bit, and the one it
 * logged after each step for that step (zs_log_scalar_previous
 * "after_step"); zs_log_scalar_previous before any step is refused; the time split
 * adds up to the step time; peak memory per tag and bytes per collective
 * are present and plausible. With fp16 and an injected overflow, the skipped
 * step has its line too. */
#include <json-c/json.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define STEPS 8

static double get_double(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) return NAN;
    return json_object_get_double(v);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    char path[256], extra[400];
    snprintf(path, sizeof path, "/tmp/zs_metrics_%d.jsonl", (int)getppid());
    if (zt_rank == 0) unlink(path);
    snprintf(extra, sizeof extra, "log: { metrics_file = \"%s\"; };", path);
    harness_options opt = {.optimizer = "adamw", .steps = STEPS, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "warmup_cosine", .stage = 3,
                           .dtype = "fp16", .clip = 1.0, .config_extra = extra,
                           .inject = 1, .inject_step = 4, .inject_count = 1, .inject_rank = 1,
                           .inject_unit = 1, .inject_value = INFINITY};
    /* Before any step there is no finished step to add to (rank 0 writes the
     * file; elsewhere the call is a no-op). */
    {
        zs_ctx *zs = NULL;
        zs_param *params[2 * TINY_MAX_LAYERS];
        ZT_OK(harness_build(MPI_COMM_WORLD, &opt, &zs, params));
        if (zs) {
            const zs_status st = zs_log_scalar_previous(zs, "early", 1.0);
            if (zt_rank == 0) ZT_FAILS_WITH(st, ZS_ERR_STATE, "no optimizer step has finished");
            else ZT_OK(st);
        }
        zs_destroy(zs);
        if (zt_rank == 0) unlink(path);
    }
    harness_result r;
    ZT_REQUIRE(harness_run(MPI_COMM_WORLD, &opt, &r) == 0);
    if (zt_rank == 0) {
        FILE *f = fopen(path, "r");
        ZT_REQUIRE(f != NULL);
        char line[8192];
        int n = 0;
        while (fgets(line, sizeof line, f) && n < STEPS) {
            json_object *o = json_tokener_parse(line);
            ZT_CHECK_MSG(o != NULL, "line %d does not parse: %s", n + 1, line);
            if (!o) break;
            json_object *v = NULL, *time = NULL, *mem = NULL, *comm = NULL, *scalars = NULL;
            ZT_CHECK(json_object_object_get_ex(o, "skipped", &v));
            const int skipped = json_object_get_boolean(v);
            ZT_EQ_INT(skipped, r.skipped[n]);
            ZT_CHECK_MSG(get_double(o, "lr") == r.lr[n], "step %d lr %.17g vs %.17g", n,
                         get_double(o, "lr"), r.lr[n]);
            if (!skipped)
                ZT_CHECK_MSG(get_double(o, "grad_norm") == r.grad_norm[n],
                             "step %d grad norm %.17g vs %.17g", n, get_double(o, "grad_norm"),
                             r.grad_norm[n]);
            ZT_CHECK_MSG(get_double(o, "loss_scale") == r.loss_scale[n],
                         "step %d loss scale %.17g vs %.17g", n, get_double(o, "loss_scale"),
                         r.loss_scale[n]);
            ZT_CHECK(json_object_object_get_ex(o, "scalars", &scalars));
            ZT_CHECK_MSG(get_double(scalars, "loss") == r.loss[n], "step %d loss %.17g vs %.17g", n,
                         get_double(scalars, "loss"), r.loss[n]);
            ZT_CHECK_MSG(get_double(scalars, "after_step") == (double)n,
                         "step %d: the value logged after it says %.17g", n,
                         get_double(scalars, "after_step"));
            ZT_CHECK(json_object_object_get_ex(o, "time_ms", &time));
            const double total = get_double(time, "step"),
                         parts = get_double(time, "compute") + get_double(time, "exposed_comm") +
                                 get_double(time, "optimizer") + get_double(time, "checkpoint");
            ZT_CHECK_MSG(total > 0 && fabs(total - parts) <= 1e-6 * total + 1e-6,
                         "step %d: time parts %.6f do not add up to %.6f ms", n, parts, total);
            ZT_CHECK(json_object_object_get_ex(o, "peak_bytes", &mem));
            ZT_CHECK_MSG(get_double(mem, "params") > 0 && get_double(mem, "optim") > 0,
                         "step %d: peak memory missing", n);
            ZT_CHECK(json_object_object_get_ex(o, "comm_bytes", &comm));
            ZT_CHECK_MSG(get_double(comm, "reduce_scatter") > 0 && get_double(comm, "all_gather") > 0,
                         "step %d: bytes per collective missing", n);
            json_object_put(o);
            n++;
        }
        fclose(f);
        unlink(path);
        ZT_EQ_INT(n, STEPS);
        int skipped_any = 0;
        for (int s = 0; s < STEPS; s++) skipped_any |= r.skipped[s];
        ZT_CHECK_MSG(skipped_any, "the injected overflow did not skip a step");
    }
    harness_result_free(&r);
    int rc = zt_finish("test_metrics");
    MPI_Finalize();
    return rc;
}
