/* A Hugging Face checkpoint through the Llama family's model table, as the
 * trainer drives it (run under mpirun by run_llama_import.sh):
 *
 *   test_llama_import HF_DIR GOLDEN_DIR STAGE CKPT_DIR
 *
 * imports HF_DIR (app.init_from: config.json and model.safetensors or an
 * index, each rank reading only its owned byte ranges) at zero.stage =
 * STAGE, then for each sequence of the golden fixture's tokens and each
 * prefix length t computes the logits of position t - 1 (an evaluation pass
 * each, stage 3 gathering every unit) and compares them with the logits
 * Hugging Face's own LlamaForCausalLM computed (GOLDEN_DIR/logits.bin):
 * max |ours - theirs| / max |theirs| <= 1e-5 over every logit. Then it saves
 * a checkpoint into CKPT_DIR/before, whose export (zs-ckpt export --hf) the
 * script compares with HF_DIR bit for bit, runs one micro-step on the
 * fixture's batch (the trainer's call, dloss = 1 / (B T): the gradient of
 * the mean loss) and one SGD step of learning rate 8 without momentum,
 * decay or clipping, and saves CKPT_DIR/after: (before - after) / 8 is
 * every parameter's gradient through the family's glue (which unit's
 * gradient each contribution lands in, the tied embedding's two, the views'
 * commits), which check_grads.py compares with LlamaForCausalLM's. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ex_model.h"
#include "test_util.h"
#include "zeroshard.h"

extern const ex_model_ops llama_model_ops;

/* The fixture's batch (index.json: "B": 2, "T": 9). */
#define GOLDEN_B 2
#define GOLDEN_T 9

static void *read_all(const char *dir, const char *name, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(f != NULL);
    void *p = malloc(bytes);
    ZT_REQUIRE(p != NULL);
    ZT_REQUIRE(fread(p, 1, bytes, f) == bytes);
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0});
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc == 5);
    const char *hf = argv[1], *golden = argv[2], *ckpt = argv[4];
    const int stage = atoi(argv[3]);

    /* The run's configuration: fp32 (the exact mode), the stage asked for. */
    char path[4096];
    snprintf(path, sizeof path, "%s/import_s%d.cfg", ckpt, stage);
    if (zt_rank == 0) {
        FILE *f = fopen(path, "w");
        ZT_REQUIRE(f != NULL);
        fprintf(f, "zero: { stage = %d; align = 16; };\nprecision: { dtype = \"fp32\"; };\n"
                   "optimizer: { type = \"sgd\"; lr = 8.0; momentum = 0.0; "
                   "weight_decay = 0.0; };\nlog: { level = \"warn\"; };\n"
                   "app: { init_from = \"%s\"; };\n", stage, hf);
        ZT_REQUIRE(fclose(f) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(path, &cfg));
    const ex_model_ops *ops = &llama_model_ops;
    ex_model *m = NULL;
    ex_model_facts facts;
    memset(&facts, 0, sizeof facts);
    ZT_OK(ops->configure(cfg, &m, &facts));
    zs_ctx *zs = NULL;
    ZT_OK(zs_create(cfg, &zs));
    ZT_OK(ops->describe(m, zs, &facts));
    ZT_OK(zs_build(zs));
    char err[8192];
    ZT_CHECK_MSG(ops->start(m, zs, GOLDEN_B, GOLDEN_T, &facts, err, sizeof err) == 0, "start: %s",
                 err);
    ZT_OK(ops->import(m, zs));
    ZT_OK(ops->save_state(m, zs));

    const int V = facts.vocab;
    int32_t *tokens = read_all(golden, "tokens.bin", sizeof(int32_t) * GOLDEN_B * GOLDEN_T);
    float *want = read_all(golden, "logits.bin", sizeof(float) * GOLDEN_B * GOLDEN_T * (size_t)V);
    nn_device *dev = ops->device(m);
    int *dtokens = NULL, *dtargets = NULL;
    float *dlosses = NULL;
    const size_t BT = (size_t)GOLDEN_B * GOLDEN_T;
    ZT_REQUIRE(dev->ops->alloc(dev, sizeof(int) * BT, (void **)&dtokens) == 0);
    ZT_REQUIRE(dev->ops->alloc(dev, sizeof(int) * BT, (void **)&dtargets) == 0);
    ZT_REQUIRE(dev->ops->alloc(dev, sizeof(float) * BT, (void **)&dlosses) == 0);
    float *got = calloc((size_t)V, sizeof(float));
    ZT_REQUIRE(got != NULL);
    double diff = 0.0, scale = 0.0;
    for (int b = 0; b < GOLDEN_B; b++)
        for (int t = 1; t <= GOLDEN_T; t++) {
            ZT_REQUIRE(dev->ops->upload(dev, dtokens, tokens + b * GOLDEN_T, sizeof(int) * (size_t)t) == 0);
            ZT_OK(zs_eval_begin(zs));
            ZT_OK(ops->last_logits(m, zs, dtokens, t, got));
            ZT_OK(zs_eval_end(zs));
            const float *ref = want + ((size_t)b * GOLDEN_T + (size_t)(t - 1)) * (size_t)V;
            for (int v = 0; v < V; v++) {
                diff = fmax(diff, fabs((double)got[v] - (double)ref[v]));
                scale = fmax(scale, fabs((double)ref[v]));
            }
        }
    ZT_CHECK_MSG(diff <= 1e-5 * scale, "stage %d: logits differ from LlamaForCausalLM's by %.3g "
                 "of their scale %.3g (limit 1e-5)", stage, diff / scale, scale);
    if (zt_rank == 0)
        printf("stage %d: logits within %.2g of LlamaForCausalLM's (relative to %.3g)\n", stage,
               diff / scale, scale);

    char dir[4096];
    snprintf(dir, sizeof dir, "%s/before", ckpt);
    ZT_OK(zs_save(zs, dir));

    /* One micro-step on the fixture's batch, as the trainer runs it. */
    int32_t *targets = read_all(golden, "targets.bin", sizeof(int32_t) * BT);
    ZT_REQUIRE(dev->ops->upload(dev, dtokens, tokens, sizeof(int) * BT) == 0);
    ZT_REQUIRE(dev->ops->upload(dev, dtargets, targets, sizeof(int) * BT) == 0);
    ZT_OK(ops->train_micro_step(m, zs, dtokens, dtargets, GOLDEN_B, GOLDEN_T, 1.0f / (float)BT,
                                dlosses));
    zs_step_info info;
    ZT_OK(zs_step(zs, &info));
    ZT_CHECK(!info.skipped);
    snprintf(dir, sizeof dir, "%s/after", ckpt);
    ZT_OK(zs_save(zs, dir));
    free(targets);
    dev->ops->free(dev, dtargets);
    dev->ops->free(dev, dlosses);
    dev->ops->free(dev, dtokens);
    ops->destroy(m);
    zs_destroy(zs);
    zs_config_destroy(cfg);
    free(tokens);
    free(want);
    free(got);
    MPI_Barrier(MPI_COMM_WORLD);
    const int status = zt_finish("test_llama_import");
    MPI_Finalize();
    return status;
}
