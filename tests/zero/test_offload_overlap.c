/* The offloaded optimizer's pipeline (offload.overlap), at np 2, stage 2,
 * bf16, AdamW with the optimizer in host memory, 4 units, 4 steps, read from
 * the trace files (trace.file):
 *   - overlap on: the host update of a step runs while the program computes
 *     the next step's forward: some "optimizer update" span (optimizer
 *     track, the host optimizer's thread) overlaps in time some "compute"
 *     span (the program between runtime calls) that begins after the step
 *     that started the update;
 *   - overlap off: the update runs inside zs_step, and no optimizer span
 *     overlaps any compute span;
 *   - both give the same parameters, bit for bit, as the device tier (no
 *     offload).
 * The program's forward of each unit is a 20 ms sleep (it leaves the cores
 * to the host optimizer, as a GPU's forward does), so that a pipelined
 * update has something to overlap with. */
#define _GNU_SOURCE /* mkdtemp */
#include <json-c/json.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"

#define UNITS 4
#define NUMEL (1 << 22) /* per unit: a host update of several ms */
#define STEPS 4

static void sleep_ms(int ms) {
    struct timespec t = {0, (long)ms * 1000000L};
    nanosleep(&t, NULL);
}

typedef struct run_result {
    float *params; /* [UNITS * NUMEL] fp32 after the last step */
    int overlapping;  /* optimizer spans overlapping a later compute span */
    int optimizer_spans;
} run_result;

/* Spans of one track from a trace file: [n][2] begin, end in microseconds. */
static int track_spans(json_object *root, const char *cat, const char *name, double (*out)[2],
                       int cap) {
    json_object *events = NULL;
    if (!json_object_object_get_ex(root, "traceEvents", &events)) return 0;
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(events) && n < cap; i++) {
        json_object *e = json_object_array_get_idx(events, i), *v = NULL;
        if (!json_object_object_get_ex(e, "ph", &v) || strcmp(json_object_get_string(v), "X") != 0)
            continue;
        if (!json_object_object_get_ex(e, "cat", &v) || strcmp(json_object_get_string(v), cat) != 0)
            continue;
        if (name && (!json_object_object_get_ex(e, "name", &v) ||
                     strcmp(json_object_get_string(v), name) != 0))
            continue;
        json_object *ts = NULL, *dur = NULL;
        json_object_object_get_ex(e, "ts", &ts);
        json_object_object_get_ex(e, "dur", &dur);
        out[n][0] = json_object_get_double(ts);
        out[n][1] = out[n][0] + json_object_get_double(dur);
        n++;
    }
    return n;
}

static void run(const char *offload, const char *trace_dir, run_result *out) {
    char text[1024], cfg_path[64];
    snprintf(cfg_path, sizeof cfg_path, "%s/c.cfg", trace_dir);
    snprintf(text, sizeof text,
             "backend = \"cpu\"; zero: { stage = 2; }; precision: { dtype = \"bf16\"; };\n"
             "optimizer: { type = \"adamw\"; lr = 1e-3; };\n"
             "offload: { %s };\n"
             "trace: { file = \"%s/trace-%%r.json\"; };\n"
             "log: { level = \"warn\"; };\n",
             offload, trace_dir);
    if (zt_rank == 0) {
        FILE *f = fopen(cfg_path, "w");
        ZT_REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(cfg_path, &cfg));
    zs_ctx *zs = NULL;
    ZT_OK(zs_create(cfg, &zs));
    zs_unit *units[UNITS];
    zs_param *params[UNITS];
    for (int u = 0; u < UNITS; u++) {
        char name[16];
        snprintf(name, sizeof name, "u%d", u);
        ZT_OK(zs_unit_begin(zs, name, &units[u]));
        const int64_t shape[1] = {NUMEL};
        ZT_OK(zs_param_create(zs, name, 1, shape, ZS_INIT_NORMAL_STD(0.02), 0, &params[u]));
        ZT_OK(zs_unit_end(zs));
    }
    ZT_OK(zs_build(zs));
    uint16_t *grad = malloc(sizeof(uint16_t) * NUMEL);
    float *g32 = malloc(sizeof(float) * NUMEL);
    ZT_REQUIRE(grad && g32);
    for (int step = 0; step < STEPS; step++) {
        for (int u = 0; u < UNITS; u++) {
            ZT_OK(zs_fetch(zs, units[u]));
            sleep_ms(20); /* the forward */
            ZT_OK(zs_release(zs, units[u]));
        }
        for (int u = UNITS - 1; u >= 0; u--) {
            ZT_OK(zs_fetch(zs, units[u]));
            uint16_t *g = zs_param_grad(params[u]);
            ZT_REQUIRE(g != NULL);
            for (int i = 0; i < NUMEL; i++)
                g32[i] = (float)((i * 7 + u * 13 + step * 3 + zt_rank) % 101 - 50) * 1e-3f;
            ZT_OK(zs_convert(grad, ZS_DTYPE_BF16, g32, ZS_DTYPE_FP32, NUMEL));
            memcpy(g, grad, sizeof(uint16_t) * NUMEL);
            ZT_OK(zs_grads_ready(zs, units[u]));
            ZT_OK(zs_release(zs, units[u]));
        }
        ZT_OK(zs_step(zs, NULL));
    }
    out->params = malloc(sizeof(float) * UNITS * NUMEL);
    ZT_REQUIRE(out->params != NULL);
    for (int u = 0; u < UNITS; u++) {
        ZT_OK(zs_fetch(zs, units[u]));
        ZT_OK(zs_convert(out->params + (size_t)u * NUMEL, ZS_DTYPE_FP32, zs_param_data(params[u]),
                         ZS_DTYPE_BF16, NUMEL));
        ZT_OK(zs_release(zs, units[u]));
    }
    zs_destroy(zs);
    zs_config_destroy(cfg);
    free(grad);
    free(g32);

    char path[128];
    snprintf(path, sizeof path, "%s/trace-%d.json", trace_dir, zt_rank);
    json_object *root = json_object_from_file(path);
    ZT_REQUIRE(root != NULL);
    static double opt[4096][2], compute[4096][2];
    out->optimizer_spans = track_spans(root, "optimizer", "optimizer update", opt, 4096);
    const int nc = track_spans(root, "compute", "compute", compute, 4096);
    out->overlapping = 0;
    for (int i = 0; i < out->optimizer_spans; i++)
        for (int k = 0; k < nc; k++)
            if (opt[i][0] < compute[k][1] && compute[k][0] < opt[i][1]) {
                out->overlapping++;
                break;
            }
    json_object_put(root);
    unlink(path);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0});
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    char dir[64] = "";
    harness_shared_tmpdir(dir, sizeof dir, "/tmp/zs_overlap_XXXXXX");
    ZT_REQUIRE(dir[0] != '\0');
    run_result on, off, none;
    run("optimizer = \"host\"; overlap = true;", dir, &on);
    run("optimizer = \"host\"; overlap = false;", dir, &off);
    run("optimizer = \"none\";", dir, &none);
    printf("rank %d: overlap on: %d of %d optimizer spans overlap the program's compute; off: %d "
           "of %d\n",
           zt_rank, on.overlapping, on.optimizer_spans, off.overlapping, off.optimizer_spans);
    ZT_EQ_INT(on.optimizer_spans, STEPS * UNITS);
    ZT_EQ_INT(off.optimizer_spans, STEPS * UNITS);
    ZT_CHECK_MSG(on.overlapping > 0, "with offload.overlap the host update never ran while the "
                 "program computed");
    ZT_EQ_INT(off.overlapping, 0);
    const size_t bytes = sizeof(float) * UNITS * NUMEL;
    ZT_CHECK_MSG(memcmp(on.params, off.params, bytes) == 0, "overlap on and off differ");
    ZT_CHECK_MSG(memcmp(on.params, none.params, bytes) == 0, "offloaded and not differ");
    free(on.params);
    free(off.params);
    free(none.params);
    MPI_Barrier(MPI_COMM_WORLD);
    harness_remove_tree(dir);
    const int rc = zt_finish("test_offload_overlap");
    MPI_Finalize();
    return rc;
}
