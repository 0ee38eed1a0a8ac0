/* Bytes per optimizer step, inside nodes and across nodes (docs/NODES.md,
 * "Bytes across nodes"): pure arithmetic from the partition plan, the
 * settings and the topology, counted the way the communicators count
 * (comm.h, zs_comm_stats): what each rank sends under the ring model, split
 * by the link each piece really takes. A ring over the world sends
 * everything to the next rank, so a rank's ring bytes cross nodes exactly
 * when rank + 1 (mod world) is on another node; the node communicator's
 * rings never cross, the cross-node communicator's always do; an
 * all-to-all sends one block to each peer, by that peer's link.
 *
 * The step counted is a steady one, between the end of one zs_step at an
 * accumulation boundary and the end of the next: gradient_accumulation_steps
 * micro-steps, each ending in zs_step's agreement (an all-reduce of four
 * doubles over the world), the last with the optimizer step's agreement on
 * its outcome (one more double); stage 3 gathers each unit `gathers_per_micro`
 * times per micro-step (2 for a forward and a backward that each fetch it
 * once); with hpZ the first of them after the optimizer step goes over
 * every rank and the rest inside the node; stages 2-3 reduce every
 * micro-step, stages 0-1 once at the boundary; stages 1-2 gather the
 * updated parameters once. No overflow (a skipped step adds one small
 * all-reduce to locate it), no evaluation, no checkpoint.
 *
 * tests/zero/test_quantized.c checks it against the counters, op by op and
 * link by link, for every setting; tests/unit/test_comm_plan.c against
 * values worked out by hand. */
#ifndef ZS_ZERO_COMM_PLAN_H
#define ZS_ZERO_COMM_PLAN_H

#include <stdint.h>

#include "core/config.h"
#include "zero/plan.h"
#include "zeroshard.h"

typedef struct zs__step_bytes {
    uint64_t intra[ZS_COMM_OP_COUNT]; /* sent to ranks on the sender's node */
    uint64_t inter[ZS_COMM_OP_COUNT]; /* sent to ranks on other nodes */
} zs__step_bytes;

typedef struct zs__comm_plan_input {
    const zs__settings *settings;
    const zs__plan *plan;     /* as zs_build lays it out (the shard group's ranks, replicas) */
    int world;                /* ranks of the job */
    const int *node_of;       /* [world] the node of each rank (topology.h) */
    int gathers_per_micro;    /* stage 3: gathers of each unit per micro-step */
} zs__comm_plan_input;

/* What rank `rank` sends in one step. Fails (ZS_ERR_CONFIG) where a setting
 * needs nodes of equal size (hybrid sharding, hpZ, qgZ) and they are not,
 * or where the plan's shard group does not match the nodes. */
zs_status zs__comm_plan_rank(const zs__comm_plan_input *in, int rank, zs__step_bytes *out);

/* The sum of both links over every op. */
uint64_t zs__step_bytes_intra(const zs__step_bytes *b);
uint64_t zs__step_bytes_inter(const zs__step_bytes *b);

/* For zs-estimate: the layout of `unit_count` units (as zs_estimate_memory
 * takes it, with the parameters' ZS_PARAM_* flags or NULL) on `world`
 * ranks in nodes of comm.ranks_per_node consecutive ranks (one node when
 * 0), laid out as zs_build would (hybrid sharding, frozen and quantized
 * units included): *job the bytes of every rank summed, *busiest the rank
 * that sends the most across nodes (ties: the lowest rank). */
zs_status zs__comm_plan_estimate(const zs__settings *s, int world, int unit_count,
                                 const int *params_per_unit, const int64_t *param_numel,
                                 const unsigned *param_flags, int gathers_per_micro,
                                 zs__step_bytes *job, zs__step_bytes *busiest);

#endif
