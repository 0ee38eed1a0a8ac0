/* The optimizer state's NVMe tier (src/offload/nvme_state.c) on its own:
 * the chunk layout; get/put of ranges that straddle chunks, through the
 * write-back cache; chunks never written read as zeros; the sweep visits
 * every chunk once, in order, with each array's values, and writes back what
 * the visitor changed; a failing visitor loses the state (every later use
 * fails with the first reason) until a reset, as zs_load does; the bytes
 * per tag. */
#define _GNU_SOURCE /* mkdtemp */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/memory.h"
#include "offload/nvme_state.h"
#include "offload/swap.h"
#include "test_util.h"

#define NUMEL 5000 /* five chunks of 1024, the last one partial */

static float value(int array, int64_t i) { return (float)(array * 100000 + i) * 0.5f; }

typedef struct visit_log {
    int64_t next;      /* the first element the next visit must start at */
    int visits, fail_at;
} visit_log;

static zs_status add_one(void *ctx, int64_t first, int64_t count, float *const *arrays) {
    visit_log *log = ctx;
    ZT_EQ_INT(first, log->next);
    ZT_CHECK(count > 0 && count <= 1024);
    ZT_CHECK(arrays[0] && arrays[1] && arrays[2]);
    if (log->visits == log->fail_at) return zs__fail(ZS_ERR_NUMERIC, "visitor failed on purpose");
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < count; i++) arrays[a][i] += 1.0f;
    log->next = first + count;
    log->visits++;
    return ZS_OK;
}

static zs_status add_minus_one(void *ctx, int64_t first, int64_t count, float *const *arrays) {
    (void)ctx;
    (void)first;
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < count; i++) arrays[a][i] -= 1.0f;
    return ZS_OK;
}

int main(void) {
    zs__nvme_layout l;
    zs__nvme_layout_make(3, NUMEL, 4096, &l); /* less than a page per array: one page */
    ZT_EQ_INT(l.chunk_numel, 1024);
    ZT_EQ_INT(l.chunks, 5);
    ZT_EQ_U64(l.block_bytes, 3 * 4096);
    zs__nvme_layout big;
    zs__nvme_layout_make(3, (int64_t)1 << 30, 16 << 20, &big);
    ZT_EQ_INT(big.chunk_numel, 1365 * 1024); /* whole pages of each array within 16 MiB */
    ZT_CHECK(big.block_bytes <= (16u << 20) && big.block_bytes % ZS_SWAP_ALIGNMENT == 0);
    zs__nvme_layout small;
    zs__nvme_layout_make(2, 10, 1 << 20, &small); /* never more than the state needs */
    ZT_EQ_INT(small.chunk_numel, 1024);
    ZT_EQ_INT(small.chunks, 1);

    char dir[] = "/tmp/zs_nvme_state_XXXXXX";
    ZT_REQUIRE(mkdtemp(dir) != NULL);
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__nvme_state *ns = NULL;
    ZT_OK(zs__nvme_state_create(dir, 0, "unit-test", &l, &mem, &ns));
    ZT_EQ_U64(mem.current[ZS_MEM_NVME_STATE], 5 * 3 * 4096);
    ZT_EQ_U64(mem.current[ZS_MEM_OFFLOAD_STAGING], zs__nvme_buffer_bytes(&l));
    ZT_EQ_U64(mem.current[ZS_MEM_HOST_STATE], zs__nvme_table_bytes(&l));
    ZT_EQ_U64(mem.total_current, zs__nvme_buffer_bytes(&l) + zs__nvme_table_bytes(&l));

    /* Never written: zeros. */
    float *got = calloc(NUMEL, sizeof(float)), *want = calloc(NUMEL, sizeof(float));
    ZT_REQUIRE(got && want);
    for (int i = 0; i < NUMEL; i++) got[i] = 7.0f;
    ZT_OK(zs__nvme_state_get(ns, 2, 0, NUMEL, got));
    ZT_CHECK(memcmp(got, want, sizeof(float) * NUMEL) == 0);

    /* Puts in pieces that straddle chunks, array by array, then read back
     * whole and in other pieces. */
    const int64_t cuts[] = {0, 1, 1023, 1025, 2048, 3000, 4999, NUMEL};
    for (int a = 0; a < 3; a++)
        for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
            const int64_t lo = cuts[c], n = cuts[c + 1] - cuts[c];
            for (int64_t i = 0; i < n; i++) want[i] = value(a, lo + i);
            ZT_OK(zs__nvme_state_put(ns, a, lo, n, want));
        }
    ZT_OK(zs__nvme_state_flush(ns));
    for (int a = 0; a < 3; a++) {
        ZT_OK(zs__nvme_state_get(ns, a, 0, NUMEL, got));
        int bad = 0;
        for (int64_t i = 0; i < NUMEL; i++) bad += got[i] != value(a, i);
        ZT_EQ_INT(bad, 0);
        ZT_OK(zs__nvme_state_get(ns, a, 1000, 50, got));
        ZT_CHECK(got[0] == value(a, 1000) && got[49] == value(a, 1049));
    }

    /* The sweep: every chunk once, in order; its changes reach the disk. */
    visit_log log = {0, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 0, NUMEL, 1, add_one, &log));
    ZT_EQ_INT(log.visits, 5);
    ZT_EQ_INT(log.next, NUMEL);
    for (int a = 0; a < 3; a++) {
        ZT_OK(zs__nvme_state_get(ns, a, 0, NUMEL, got));
        int bad = 0;
        for (int64_t i = 0; i < NUMEL; i++) bad += got[i] != value(a, i) + 1.0f;
        ZT_EQ_INT(bad, 0);
    }
    /* A range: the chunks that overlap it only (1000..3100 is chunks 0-3),
     * and without write-back nothing it changed reaches the disk. */
    log = (visit_log){0, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 1000, 3100, 0, add_one, &log));
    ZT_EQ_INT(log.visits, 4);
    ZT_EQ_INT(log.next, 4096);
    ZT_OK(zs__nvme_state_get(ns, 0, 0, NUMEL, got));
    ZT_CHECK(got[1500] == value(0, 1500) + 1.0f);
    /* Two ranges that share chunk 2 (as neighbouring units do): the second
     * sees what the first wrote back. */
    log = (visit_log){2048, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 2100, 2500, 1, add_one, &log));
    ZT_EQ_INT(log.visits, 1);
    log = (visit_log){2048, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 2500, 3072, 1, add_one, &log));
    ZT_OK(zs__nvme_state_get(ns, 2, 2200, 1, got));
    ZT_CHECK(got[0] == value(2, 2200) + 3.0f);
    /* An empty range visits nothing. */
    log = (visit_log){0, 0, 0};
    ZT_OK(zs__nvme_state_sweep(ns, 700, 700, 1, add_one, &log));
    ZT_OK(zs__nvme_state_get(ns, 2, 2200, 1, got));
    ZT_CHECK(got[0] == value(2, 2200) + 3.0f);
    /* Undo the +2 of chunk 2 for the checks below. */
    for (int k = 0; k < 2; k++) {
        log = (visit_log){2048, 0, -1};
        ZT_OK(zs__nvme_state_sweep(ns, 2048, 3072, 1, add_minus_one, &log));
    }

    /* A second sweep right after a put: the cache is flushed first. */
    float one = -3.0f;
    ZT_OK(zs__nvme_state_put(ns, 1, 4321, 1, &one));
    log = (visit_log){0, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 0, NUMEL, 1, add_one, &log));
    ZT_OK(zs__nvme_state_get(ns, 1, 4321, 1, got));
    ZT_CHECK(got[0] == -2.0f);

    /* A visitor failing at chunk 2: the state is lost, and says so. */
    log = (visit_log){0, 0, 2};
    ZT_FAILS_WITH(zs__nvme_state_sweep(ns, 0, NUMEL, 1, add_one, &log), ZS_ERR_NUMERIC, "on purpose");
    ZT_FAILS_WITH(zs__nvme_state_get(ns, 0, 0, 1, got), ZS_ERR_NUMERIC, "was lost by an earlier failure");
    ZT_FAILS_WITH(zs__nvme_state_sweep(ns, 0, NUMEL, 1, add_one, &log), ZS_ERR_NUMERIC, "load the last checkpoint");

    /* Reset (what zs_load does): usable again, every element zero until
     * written, even the chunks the failed sweep had written. */
    ZT_OK(zs__nvme_state_reset(ns));
    ZT_OK(zs__nvme_state_get(ns, 1, 0, NUMEL, got));
    memset(want, 0, sizeof(float) * NUMEL);
    ZT_CHECK(memcmp(got, want, sizeof(float) * NUMEL) == 0);
    ZT_OK(zs__nvme_state_put(ns, 2, 1500, 1, &one));
    log = (visit_log){0, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 0, NUMEL, 1, add_one, &log));
    ZT_OK(zs__nvme_state_get(ns, 2, 1500, 1, got));
    ZT_CHECK(got[0] == -2.0f);

    zs__nvme_state_destroy(ns);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) ZT_EQ_U64(mem.current[t], 0);
    ZT_EQ_INT(zt_dir_entries(dir), 0);
    rmdir(dir);
    free(got);
    free(want);
    return zt_finish("test_nvme_state");
}
