/* The partition plan on its own: for many model shapes and world sizes 1..64,
 * every element of every parameter is owned by exactly one rank, slices are
 * equal, aligned and contiguous, and bad descriptions are rejected. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zero/plan.h"

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Checks one plan against an independent recomputation of the layout rules
 * and an element-by-element ownership count. */
static void check_plan(int world, int64_t align, int units, const int *per_unit, const int64_t *numel) {
    zs__plan *plan = NULL;
    ZT_OK(zs__plan_create(world, align, units, per_unit, numel, &plan));
    if (!plan) return;

    int p = 0;
    int64_t total = 0, padded_total = 0, shard_total = 0;
    for (int u = 0; u < units; u++) {
        const zs__plan_unit *pu = &plan->units[u];
        int64_t cursor = 0;
        for (int i = 0; i < per_unit[u]; i++, p++) {
            int64_t expected_offset = round_up(cursor, align);
            ZT_EQ_INT(plan->params[p].offset, expected_offset);
            ZT_EQ_INT(plan->params[p].unit, u);
            cursor = expected_offset + numel[p];
            total += numel[p];
        }
        ZT_EQ_INT(pu->used_numel, cursor);
        ZT_EQ_INT(pu->padded_numel, round_up(cursor, (int64_t)world * align));
        ZT_EQ_INT(pu->shard_numel * world, pu->padded_numel);
        ZT_EQ_INT(pu->shard_numel % align, 0);
        ZT_EQ_INT(pu->full_offset, padded_total);
        ZT_EQ_INT(pu->shard_offset, shard_total);
        padded_total += pu->padded_numel;
        shard_total += pu->shard_numel;

        /* Count owners of every element of every parameter of this unit. */
        for (int q = pu->first_param; q < pu->first_param + pu->param_count; q++) {
            int64_t n = plan->params[q].numel;
            unsigned char *owners = calloc((size_t)n, 1);
            for (int r = 0; r < world; r++) {
                int64_t b, e;
                int has = zs__plan_owned_range(plan, q, r, &b, &e);
                ZT_CHECK(has == (b < e));
                ZT_CHECK(b >= 0 && e <= n);
                /* The owned range is exactly the intersection with the rank's slice. */
                int64_t lo = (int64_t)r * pu->shard_numel, hi = lo + pu->shard_numel;
                int64_t ib = plan->params[q].offset > lo ? plan->params[q].offset : lo;
                int64_t ie = plan->params[q].offset + n < hi ? plan->params[q].offset + n : hi;
                ZT_EQ_INT(e - b, ie > ib ? ie - ib : 0);
                for (int64_t k = b; k < e; k++) owners[k]++;
            }
            int64_t wrong = 0;
            for (int64_t k = 0; k < n; k++) wrong += owners[k] != 1;
            ZT_CHECK_MSG(wrong == 0, "world %d unit %d param %d: %lld elements not owned exactly once",
                         world, u, q, (long long)wrong);
            free(owners);
        }
    }
    ZT_EQ_INT(plan->numel, total);
    ZT_EQ_INT(plan->padded_numel, padded_total);
    ZT_EQ_INT(plan->shard_numel, shard_total);
    zs__plan_destroy(plan);
}

int main(void) {
    /* Prime sizes, sizes that divide nothing, one-element parameters, and a
     * unit much smaller than world * align (mostly padding). */
    const int per_unit[] = {3, 1, 2, 4};
    const int64_t numel[] = {7919, 1, 13, 104729, 17, 31, 1, 2, 3, 5};
    const int64_t aligns[] = {1, 4, 16, 64};
    for (int world = 1; world <= 64; world++)
        for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
            check_plan(world, aligns[a], 4, per_unit, numel);

    /* A single unit with a single prime-sized parameter. */
    const int one[] = {1};
    const int64_t prime[] = {1000003};
    for (int world = 1; world <= 64; world *= 2) check_plan(world, 16, 1, one, prime);
    check_plan(3, 16, 1, one, prime);

    /* Rejections, each with a message naming what is wrong. */
    zs__plan *plan = NULL;
    const int with_empty[] = {1, 0, 1};
    const int64_t two[] = {5, 6};
    ZT_FAILS_WITH(zs__plan_create(2, 16, 3, with_empty, two, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "unit 1 has no parameters");
    const int64_t zero_size[] = {0};
    ZT_FAILS_WITH(zs__plan_create(2, 16, 1, one, zero_size, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "sizes must be positive");
    ZT_FAILS_WITH(zs__plan_create(0, 16, 1, one, prime, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "world size 0");
    ZT_FAILS_WITH(zs__plan_create(2, 12, 1, one, prime, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "power of two");
    ZT_FAILS_WITH(zs__plan_create(2, 16, 0, one, prime, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "no units");
    const int64_t huge[] = {INT64_MAX - 3, 100};
    const int two_params[] = {2};
    ZT_FAILS_WITH(zs__plan_create(2, 16, 1, two_params, huge, &plan), ZS_ERR_INVALID_ARGUMENT,
                  "overflow");
    ZT_CHECK(plan == NULL);
    return zt_finish("test_plan");
}
