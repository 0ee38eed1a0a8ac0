/* zs_agree_kernels and zs_cpu_kernels: do the ranks compute with the same
 * kernels? Bitwise reproducibility across hosts needs it (DESIGN §10:
 * numerics that travel), and a host whose BLAS picked another core type is
 * otherwise found only as results that differ in the last bit.
 *
 * Floor (src/floors.txt): Owns nothing; calls only the agreement helpers
 * (agree.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_isa.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/ground.h"
#include "zero/kernels_agree.h"

/* Bytes of a kernel's name compared across ranks (with the NUL). */
#define ZS_KERNEL_NAME 64

const char *zs_cpu_kernels(void) { return zs__cpu_isa_name(zs__cpu_kernels_get()->isa); }

/* "ranks 0-1, 3" (or "rank 2") for the ranks whose name equals names[first]. */
static void ranks_of(const char (*names)[ZS_KERNEL_NAME], int world, int first, char *out,
                     size_t cap) {
    char list[480];
    size_t used = 0;
    int count = 0;
    list[0] = '\0';
    for (int r = first; r < world && used < sizeof list; r++) {
        if (strcmp(names[r], names[first]) != 0) continue;
        int last = r;
        while (last + 1 < world && strcmp(names[last + 1], names[first]) == 0) last++;
        int n = last > r ? snprintf(list + used, sizeof list - used, "%s%d-%d", count ? ", " : "",
                                    r, last)
                         : snprintf(list + used, sizeof list - used, "%s%d", count ? ", " : "", r);
        if (n > 0) used += (size_t)n;
        count += last - r + 1;
        r = last;
    }
    snprintf(out, cap, "%s %.480s", count == 1 ? "rank" : "ranks", list);
}

zs_status zs__kernels_compare(zs_ctx *zs, const char *what, const char *kernel, char *groups,
                               size_t cap, int *differ) {
    char mine[ZS_KERNEL_NAME];
    memset(mine, 0, sizeof mine);
    snprintf(mine, sizeof mine, "%s", kernel);
    *differ = 0;
    groups[0] = '\0';
    char (*names)[ZS_KERNEL_NAME] = NULL;
    ZS_CHECK(zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *names, what, (void **)&names));
    zs_status st = zs__comm_all_gather_bytes(zs->comm, mine, sizeof mine, names, what);
    if (st != ZS_OK) {
        free(names);
        return st;
    }
    for (int r = 0; r < zs->world_size; r++) {
        names[r][ZS_KERNEL_NAME - 1] = '\0';
        if (strcmp(names[r], names[0]) != 0) *differ = 1;
    }
    /* Every distinct name with its ranks, in rank order of first use. */
    size_t used = 0;
    for (int r = 0; *differ && r < zs->world_size && used < cap; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = strcmp(names[q], names[r]) == 0;
        if (seen) continue;
        char ranks[496];
        ranks_of((const char (*)[ZS_KERNEL_NAME])names, zs->world_size, r, ranks, sizeof ranks);
        int n = snprintf(groups + used, cap - used, "%s%s: '%s'", used ? "; " : "", ranks,
                         names[r]);
        if (n > 0) used += (size_t)n;
    }
    free(names);
    return ZS_OK;
}

zs_status zs_agree_kernels(zs_ctx *zs, const char *what, const char *kernel, int require,
                           const char *advice) {
    if (!zs || !what || !kernel)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_agree_kernels: zs, what and kernel are required");
    /* A direct collective: the engine's queue must be empty first. */
    if (zs->engine) ZS_CHECK(zs__engine_drain(zs->engine));
    char groups[1536];
    int differ = 0;
    ZS_CHECK(zs__kernels_compare(zs, what, kernel, groups, sizeof groups, &differ));
    if (!differ) return ZS_OK;
    char message[2048];
    snprintf(message, sizeof message,
             "ranks compute with different %s (%s), so their results differ in the last bits "
             "and a run is not bitwise reproducible across them%s%s",
             what, groups, advice ? "; " : "", advice ? advice : "");
    if (require) return zs__fail(ZS_ERR_MISMATCH, "%s", message);
    if (zs->rank == 0) ZS_WARN("%s", message);
    return ZS_OK;
}
