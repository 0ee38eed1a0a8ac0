/* Bytes per optimizer step by link, every rank, from the runtime's own
 * counters (zs_comm_report), for the GPT-2 layout of a gpt2_train
 * configuration (issue 28, docs/BENCHMARKS.md "Across nodes").
 *
 *   mpirun -np 4 build/bench/nodes/bench_nodes_bytes configs/gpt2_demo.cfg \
 *       [--warmup 2] [--steps 3] [--netdev IF0,IF1] [--save DIR] [group.key=value ...]
 *
 * The model is configured and registered by gpt2_train's own code
 * (gpt2_family.c: app.model or app.n_layer, n_head, n_embd, vocab,
 * block_size of the configuration), and every micro-step makes
 * the trainer's calls in the trainer's order (gpt2_family.c): unit 0 fetched
 * for the embedding and again for the tied head, each block fetched in the
 * forward and again in the backward, gradients declared after each block's
 * backward and unit 0's last. No arithmetic is done: gradients stay zero,
 * which changes no byte a step sends (only sizes and the settings do).
 *
 * After --warmup steps, each rank reads its counters after every one of
 * --steps steps; rank 0 prints one JSON object: per rank, per step, per op
 * the bytes sent inside the node and across nodes. With --netdev, each rank
 * also reads the statistics of the first of the named interfaces that its
 * network namespace has (the veth of scripts/netns-hosts.sh) right before the
 * measured steps and right after them, so the bytes the link itself carried
 * can be set against the counters. --save DIR writes a checkpoint at the end
 * (zs-estimate --checkpoint reads the layout from it). Each step's wall time
 * on each rank is printed too ("us"): with nothing computed, it is what the
 * step's collectives took (under ZS_COMM_DELAY_*: the injected network). */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_model.h"
#include "zeroshard_mpi.h"

extern const ex_model_ops gpt2_model_ops; /* gpt2_family.c */

#define MAX_STEPS 64
#define NET_FIELDS 4 /* tx_bytes, tx_packets, rx_bytes, rx_packets */

static void die(const char *what, zs_status st) {
    fprintf(stderr, "bench_nodes_bytes: %s: %s: %s\n", what, zs_status_name(st), zs_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define B_CHECK(call)                          \
    do {                                       \
        zs_status b_st_ = (call);              \
        if (b_st_ != ZS_OK) die(#call, b_st_); \
    } while (0)

static void usage(void) {
    fprintf(stderr, "usage: bench_nodes_bytes CONFIG [--warmup N] [--steps K] [--netdev IF0,IF1] "
                    "[--save DIR] [group.key=value ...]\n");
    exit(2);
}

/* The first interface of the comma-separated list that exists here: its
 * index in the list (-1: none) and its statistics. */
static int read_netdev(const char *list, uint64_t out[NET_FIELDS]) {
    static const char *const fields[NET_FIELDS] = {"tx_bytes", "tx_packets", "rx_bytes",
                                                   "rx_packets"};
    char names[256];
    snprintf(names, sizeof names, "%s", list);
    int index = 0;
    for (char *save = NULL, *name = strtok_r(names, ",", &save); name;
         name = strtok_r(NULL, ",", &save), index++) {
        int ok = 1;
        for (int f = 0; f < NET_FIELDS && ok; f++) {
            char path[512];
            snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", name, fields[f]);
            FILE *file = fopen(path, "r");
            ok = file && fscanf(file, "%" SCNu64, &out[f]) == 1;
            if (file) fclose(file);
        }
        if (ok) return index;
    }
    memset(out, 0, NET_FIELDS * sizeof *out);
    return -1;
}

/* Unit 0: the embeddings (and the head, tied); unit 1 + l: block l. */
static void micro_step(zs_ctx *zs, int n_layer) {
    zs_unit *embed = zs_unit_at(zs, 0);
    B_CHECK(zs_fetch(zs, embed));
    B_CHECK(zs_release(zs, embed));
    for (int l = 0; l < n_layer; l++) {
        B_CHECK(zs_fetch(zs, zs_unit_at(zs, 1 + l)));
        B_CHECK(zs_release(zs, zs_unit_at(zs, 1 + l)));
    }
    /* The head: the tied embedding again, its gradient opened there. */
    B_CHECK(zs_fetch(zs, embed));
    B_CHECK(zs_grads_open(zs, embed));
    B_CHECK(zs_release(zs, embed));
    for (int l = n_layer - 1; l >= 0; l--) {
        zs_unit *unit = zs_unit_at(zs, 1 + l);
        B_CHECK(zs_fetch(zs, unit));
        B_CHECK(zs_grads_open(zs, unit));
        B_CHECK(zs_grads_ready(zs, unit));
        B_CHECK(zs_release(zs, unit));
    }
    B_CHECK(zs_grads_ready(zs, embed));
}

/* One optimizer step: every micro-step of the accumulation window. */
static void optimizer_step(zs_ctx *zs, int n_layer) {
    zs_step_info info;
    do {
        micro_step(zs, n_layer);
        B_CHECK(zs_step(zs, &info));
    } while (!info.boundary);
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *config = argv[1], *netdev = NULL, *save = NULL;
    int warmup = 2, steps = 3, n_over = 0;
    const char **over = calloc((size_t)argc, sizeof *over);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--netdev") == 0 && i + 1 < argc) netdev = argv[++i];
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) save = argv[++i];
        else if (strchr(argv[i], '=') && argv[i][0] != '-') over[n_over++] = argv[i];
        else usage();
    }
    if (warmup < 0 || steps < 1 || steps > MAX_STEPS) usage();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    zs_config *cfg = NULL;
    B_CHECK(zs_config_load(config, &cfg));
    if (n_over) B_CHECK(zs_config_override_list(cfg, n_over, over));
    /* The model as gpt2_train configures and registers it (its other app
     * keys are left unread: no zs_config_app_finish). */
    ex_model *model = NULL;
    ex_model_facts facts;
    memset(&facts, 0, sizeof facts);
    B_CHECK(gpt2_model_ops.configure(cfg, &model, &facts));
    zs_ctx *zs = NULL;
    B_CHECK(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs));
    B_CHECK(gpt2_model_ops.describe(model, zs, &facts));
    const int n_layer = facts.units - 1;
    B_CHECK(zs_build(zs));

    for (int s = 0; s < warmup; s++) optimizer_step(zs, n_layer);

    /* Per rank: [steps][2][ops] bytes (intra, inter) and the step's
     * microseconds, then the interface index and its statistics before and
     * after. */
    const int ops = ZS_COMM_OP_COUNT;
    const size_t per_step = 2 * (size_t)ops + 1;
    const size_t record = (size_t)steps * per_step + 1 + 2 * NET_FIELDS;
    uint64_t *mine = calloc(record, sizeof *mine);
    zs_comm_stats before, after;
    uint64_t net0[NET_FIELDS] = {0}, net1[NET_FIELDS] = {0};
    int which = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (netdev) which = read_netdev(netdev, net0);
    B_CHECK(zs_comm_report(zs, &before));
    for (int s = 0; s < steps; s++) {
        const double t0 = MPI_Wtime();
        optimizer_step(zs, n_layer);
        mine[s * per_step + 2 * ops] = (uint64_t)((MPI_Wtime() - t0) * 1e6);
        B_CHECK(zs_comm_report(zs, &after));
        for (int op = 0; op < ops; op++) {
            mine[s * per_step + op] = after.bytes_intra[op] - before.bytes_intra[op];
            mine[s * per_step + ops + op] = after.bytes_inter[op] - before.bytes_inter[op];
        }
        before = after;
    }
    if (netdev) read_netdev(netdev, net1);
    mine[steps * per_step] = (uint64_t)(int64_t)which;
    for (int f = 0; f < NET_FIELDS; f++) {
        mine[steps * per_step + 1 + f] = net0[f];
        mine[steps * per_step + 1 + NET_FIELDS + f] = net1[f];
    }
    uint64_t *all = rank == 0 ? calloc(record * (size_t)world, sizeof *all) : NULL;
    MPI_Gather(mine, (int)record, MPI_UINT64_T, all, (int)record, MPI_UINT64_T, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        printf("{\"world\": %d, \"warmup\": %d, \"steps\": %d, \"model\": {\"name\": \"%s\", "
               "\"description\": \"%s\", \"params\": %" PRId64 "}, \"ops\": [",
               world, warmup, steps, facts.name, facts.description, facts.params);
        for (int op = 0; op < ops; op++)
            printf("%s\"%s\"", op ? ", " : "", zs_comm_op_name((zs_comm_op)op));
        printf("], \"ranks\": [");
        for (int r = 0; r < world; r++) {
            const uint64_t *a = all + (size_t)r * record;
            printf("%s\n {\"rank\": %d, \"steps\": [", r ? "," : "", r);
            for (int s = 0; s < steps; s++) {
                printf("%s{\"intra\": [", s ? ", " : "");
                for (int op = 0; op < ops; op++)
                    printf("%s%" PRIu64, op ? ", " : "", a[s * per_step + op]);
                printf("], \"inter\": [");
                for (int op = 0; op < ops; op++)
                    printf("%s%" PRIu64, op ? ", " : "", a[s * per_step + ops + op]);
                printf("], \"us\": %" PRIu64 "}", a[s * per_step + 2 * ops]);
            }
            const uint64_t *n = a + steps * per_step;
            printf("], \"netdev\": {\"index\": %" PRId64 ", \"before\": [%" PRIu64 ", %" PRIu64
                   ", %" PRIu64 ", %" PRIu64 "], \"after\": [%" PRIu64 ", %" PRIu64 ", %" PRIu64
                   ", %" PRIu64 "]}}",
                   (int64_t)n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8]);
        }
        printf("\n]}\n");
        fflush(stdout);
    }
    free(all);
    free(mine);
    if (save) B_CHECK(zs_save(zs, save));
    zs_destroy(zs);
    gpt2_model_ops.destroy(model);
    zs_config_destroy(cfg);
    free(over);
    MPI_Finalize();
    return 0;
}
