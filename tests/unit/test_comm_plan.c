/* The bytes-per-step formula (src/zero/comm_plan.c) against values worked
 * out by hand (below, in each case's comment) for one unit of 50 elements,
 * zero.align = 16, on 4 ranks in 2 nodes of 2 (node_of = 0 0 1 1) unless
 * said otherwise. With 4 ranks a unit pads to 64 elements: S = 16 per rank.
 * The world ring sends everything to rank + 1, so ranks 1 and 3 cross
 * nodes and ranks 0 and 2 do not. tests/zero/test_quantized.c checks the
 * formula against the runtime's counters. */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "config_text.h"
#include "core/config.h"
#include "test_util.h"
#include "zero/comm_plan.h"

/* A configuration of zero keys `zero` and other groups or keys `rest`. */
static zs_config *config(const char *zero, const char *rest) {
    char all[1024];
    snprintf(all, sizeof all, "optimizer: { lr = 0.01; };\nzero: { align = 16; %s };\n%s\n",
             zero, rest);
    zs_config *cfg = zt_config_text(all);
    ZT_REQUIRE(cfg != NULL);
    return cfg;
}

static const int unit_params[1] = {1};
static const int64_t unit_numel[1] = {50};

typedef struct expect {
    zs_comm_op op;
    uint64_t intra, inter;
} expect;

static void check_rank(const char *what, const char *zero, const char *rest, int world,
                       const int *node_of, int shard, int replicas, int gathers, int rank,
                       const expect *want, int n) {
    zs_config *cfg = config(zero, rest);
    const zs__settings *s = zs__config_settings(cfg);
    zs__plan *plan = NULL;
    ZT_OK(zs__plan_create_replicated(shard, replicas, 16, 1, unit_params, unit_numel, &plan));
    const zs__comm_plan_input in = {s, plan, world, node_of, gathers};
    zs__step_bytes b;
    ZT_OK(zs__comm_plan_rank(&in, rank, &b));
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
        uint64_t intra = 0, inter = 0;
        for (int i = 0; i < n; i++)
            if ((int)want[i].op == op) intra = want[i].intra, inter = want[i].inter;
        ZT_CHECK_MSG(b.intra[op] == intra && b.inter[op] == inter,
                     "%s, rank %d, %s: %llu inside nodes and %llu across; worked out by hand: "
                     "%llu and %llu", what, rank, zs_comm_op_name((zs_comm_op)op),
                     (unsigned long long)b.intra[op], (unsigned long long)b.inter[op],
                     (unsigned long long)intra, (unsigned long long)inter);
    }
    zs__plan_destroy(plan);
    zs_config_destroy(cfg);
}

static const int two_nodes[4] = {0, 0, 1, 1};

int main(void) {
    /* Every case ends each micro-step with the step's agreement (4 doubles:
     * counted 2 x 3 x 32 / 4 = 48 bytes) and the step with the optimizer
     * step's (1 double: 12 bytes), split as Bruck's exchange sends: round 1
     * 32 bytes to rank - 1, round 2 64 bytes to rank - 2. Rank 0: both to
     * node 1, all 60 across. Rank 1: 32 to rank 0 (inside), 64 to rank 3
     * (across): 48 x 64/96 = 32 and 12 x 64/96 = 8 across, the rest
     * inside. */
    const expect agree0 = {ZS_COMM_ALL_REDUCE, 0, 60}, agree1 = {ZS_COMM_ALL_REDUCE, 20, 40};
    /* The split rule itself (comm.h), which the counters use too: exact
     * when the count is what was sent, all or nothing on one link, else
     * the proportion rounded down. */
    ZT_EQ_U64(zs__comm_inter_share(96, 32, 64), 64);
    ZT_EQ_U64(zs__comm_inter_share(48, 0, 96), 48);
    ZT_EQ_U64(zs__comm_inter_share(48, 96, 0), 0);
    ZT_EQ_U64(zs__comm_inter_share(12, 32, 64), 8);
    ZT_EQ_U64(zs__comm_inter_share(10, 2, 1), 3);
    ZT_EQ_U64(zs__comm_inter_share(0, 2, 1), 0);

    /* Stage 3, fp32: a reduce-scatter of 3 x 16 x 4 = 192 bytes and two
     * gathers of 192 each, all to rank + 1. */
    {
        const expect r0[] = {{ZS_COMM_REDUCE_SCATTER, 192, 0}, {ZS_COMM_ALL_GATHER, 384, 0}, agree0};
        const expect r1[] = {{ZS_COMM_REDUCE_SCATTER, 0, 192}, {ZS_COMM_ALL_GATHER, 0, 384}, agree1};
        check_rank("stage 3", "stage = 3;", "", 4, two_nodes, 4, 1, 2, 0, r0, 3);
        check_rank("stage 3", "stage = 3;", "", 4, two_nodes, 4, 1, 2, 1, r1, 3);
    }
    /* Stage 0: the all-reduce of the gradient, 2 x 3 x 16 x 4 = 384. */
    {
        const expect r1[] = {{ZS_COMM_ALL_REDUCE, 20, 384 + 40}};
        check_rank("stage 0", "stage = 0;", "", 4, two_nodes, 4, 1, 2, 1, r1, 1);
    }
    /* qgZ int4, blocks of 8, stage 2: a record of 16 values is 8 bytes of
     * nibbles and 2 scales, 16 bytes. Hop 1 sends the 2 nodes' records to
     * the other rank of the node (32 inside), hop 2 one record to the other
     * node (16 across); the updated parameters' gather, 192 to rank + 1.
     * With 2 micro-steps the hops and the step's agreement run twice. */
    {
        const char *rest = "comm: { quantize_grads = \"int4\"; quant_block = 8; };";
        const expect r0[] = {{ZS_COMM_ALL_TO_ALL, 32, 16}, {ZS_COMM_ALL_GATHER, 192, 0}, agree0};
        check_rank("qgZ int4", "stage = 2;", rest, 4, two_nodes, 4, 1, 2, 0, r0, 3);
        char accumulate[256];
        snprintf(accumulate, sizeof accumulate, "%s gradient_accumulation_steps = 2;", rest);
        const expect a1[] = {{ZS_COMM_ALL_TO_ALL, 64, 32},
                             {ZS_COMM_ALL_GATHER, 0, 192},
                             {ZS_COMM_ALL_REDUCE, 16 + 16 + 4, 32 + 32 + 8}};
        check_rank("qgZ int4, 2 micro-steps", "stage = 2;", accumulate, 4, two_nodes, 4, 1, 2, 1,
                   a1, 3);
    }
    /* qwZ + hpZ, blocks of 8, stage 3: an int8 record of 16 values is 16
     * bytes and 2 scales, 24; the forward's gather sends 3 records to rank
     * + 1 (72), the backward's goes round the node with the node slices of
     * 64 / 2 = 32 elements, (2 - 1) x 32 x 4 = 128 inside. */
    {
        const char *rest = "comm: { quantize_weights = \"int8\"; quant_block = 8; };";
        const expect r0[] = {{ZS_COMM_REDUCE_SCATTER, 192, 0}, {ZS_COMM_ALL_GATHER, 200, 0}, agree0};
        const expect r1[] = {{ZS_COMM_REDUCE_SCATTER, 0, 192}, {ZS_COMM_ALL_GATHER, 128, 72}, agree1};
        check_rank("qwZ + hpZ", "stage = 3; secondary_partition = \"node\";", rest, 4, two_nodes,
                   4, 1, 2, 0, r0, 3);
        check_rank("qwZ + hpZ", "stage = 3; secondary_partition = \"node\";", rest, 4, two_nodes,
                   4, 1, 2, 1, r1, 3);
    }
    /* Hybrid stage 3: sharded over 2 ranks, the unit pads to 2 x 2 x 16 =
     * 64, S = 32: the node's reduce-scatter (1 x 32 x 4 = 128) and two
     * gathers (256) inside; the replicas' all-reduce of the slice in chunks
     * of 16 over 2 nodes, 2 x 1 x 16 x 4 = 128 across. */
    {
        const expect r1[] = {{ZS_COMM_REDUCE_SCATTER, 128, 0},
                             {ZS_COMM_ALL_GATHER, 256, 0},
                             {ZS_COMM_ALL_REDUCE, 20, 128 + 40}};
        check_rank("hybrid", "stage = 3; shard_group = \"node\";", "", 4, two_nodes, 2, 2, 2, 1,
                   r1, 3);
    }
    /* One node of 4 (node_of all 0): qgZ int8, blocks of 8, stage 1: a
     * record is 16 + 2 x 4 = 24 bytes; hop 1 sends one to each of 3 peers
     * (72), hop 2 crosses to nobody; everything stays inside. */
    {
        const int one_node[4] = {0, 0, 0, 0};
        const char *rest = "comm: { quantize_grads = \"int8\"; quant_block = 8; };";
        const expect r2[] = {{ZS_COMM_ALL_TO_ALL, 72, 0},
                             {ZS_COMM_ALL_GATHER, 192, 0},
                             {ZS_COMM_ALL_REDUCE, 60, 0}};
        check_rank("one node, qgZ int8", "stage = 1;", rest, 4, one_node, 4, 1, 2, 2, r2, 3);
    }
    /* Nodes of 3 and 1: qgZ needs equal nodes. */
    {
        const int unequal[4] = {0, 0, 0, 1};
        zs_config *cfg = config("stage = 2;", "comm: { quantize_grads = \"int8\"; };");
        zs__plan *plan = NULL;
        ZT_OK(zs__plan_create(4, 16, 1, unit_params, unit_numel, &plan));
        const zs__comm_plan_input in = {zs__config_settings(cfg), plan, 4, unequal, 2};
        zs__step_bytes b;
        ZT_FAILS_WITH(zs__comm_plan_rank(&in, 0, &b), ZS_ERR_CONFIG, "equal size");
        zs__plan_destroy(plan);
        zs_config_destroy(cfg);
    }
    /* zs-estimate's sums: stage 3 above, every rank: ranks 1 and 3 send
     * 192 + 384 + 40 across each, ranks 0 and 2 60; the busiest is rank 1. */
    {
        zs_config *cfg = config("stage = 3;", "comm: { ranks_per_node = 2; };");
        zs__step_bytes job, busiest;
        ZT_OK(zs__comm_plan_estimate(zs__config_settings(cfg), 4, 1, unit_params, unit_numel,
                                     NULL, 2, &job, &busiest));
        ZT_EQ_U64(zs__step_bytes_inter(&job), 2 * (192 + 384 + 40) + 2 * 60);
        ZT_EQ_U64(zs__step_bytes_intra(&job), 2 * (192 + 384) + 2 * 20);
        ZT_EQ_U64(zs__step_bytes_inter(&busiest), 192 + 384 + 40);
        zs_config_destroy(cfg);
    }
    return zt_finish("test_comm_plan");
}
