/* The optimizer state's NVMe tier (src/offload/nvme_state.c) on its own:
 * the chunk layout; get/put of ranges that straddle chunks, through the
 * write-back cache; chunks never written read as zeros; the sweep visits
 * every chunk once, in order, with each array's values, and writes back what
 * the visitor changed; a failing visitor loses the state (every later use
 * fails with the first reason) until a reset, as zs_load does; the bytes
 * per tag. And two threads at once (issue 26, item 7): while a sweep's
 * visitor is held on a chunk, a get of a chunk outside the sweep's window
 * completes, a get of a chunk inside it waits for the sweep and reads what
 * the sweep wrote, a put cached before the sweep reaches it, and a get
 * waiting for a failed sweep fails with the sweep's reason. Every wait has a
 * deadline, so a tier that serializes them fails the test instead of
 * hanging it. */
#define _GNU_SOURCE /* mkdtemp */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Polls until *flag is nonzero or `seconds` have passed; 1 when it was set. */
static int wait_flag(atomic_int *flag, double seconds) {
    const double until = now_s() + seconds;
    while (!atomic_load(flag)) {
        if (now_s() > until) return 0;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return 1;
}

static void sleep_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL); }

/* A visitor that adds one, but on the chunk starting at `hold_first` stops
 * until the test says go (1) or fail (2). */
typedef struct holder {
    int64_t hold_first;
    atomic_int held; /* the visitor reached that chunk */
    atomic_int go;
} holder;

static zs_status add_one_when_told(void *ctx, int64_t first, int64_t count, float *const *arrays) {
    holder *h = ctx;
    if (first == h->hold_first) {
        atomic_store(&h->held, 1);
        /* Bounded, so a broken tier fails the test rather than hang it. */
        if (!wait_flag(&h->go, 60.0))
            return zs__fail(ZS_ERR_TIMEOUT, "the test never let the visitor go on");
        if (atomic_load(&h->go) == 2)
            return zs__fail(ZS_ERR_NUMERIC, "visitor failed on purpose while a get waited");
    }
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < count; i++) arrays[a][i] += 1.0f;
    return ZS_OK;
}

/* A sweep or a get on a thread of its own; `done` once it returned. */
typedef struct call {
    zs__nvme_state *ns;
    int array;
    int64_t first, count; /* a sweep: [first, first + count) */
    float *dst;           /* a get's; NULL for a sweep */
    holder *h;
    zs_status st;
    char message[1024];
    atomic_int done;
} call;

static void *run_call(void *p) {
    call *c = p;
    c->st = c->dst ? zs__nvme_state_get(c->ns, c->array, c->first, c->count, c->dst)
                   : zs__nvme_state_sweep(c->ns, c->first, c->first + c->count, 1,
                                          add_one_when_told, c->h);
    snprintf(c->message, sizeof c->message, "%s", c->st == ZS_OK ? "" : zs_last_error());
    atomic_store(&c->done, 1);
    return NULL;
}

static void start_call(call *c, pthread_t *t) {
    atomic_store(&c->done, 0);
    ZT_REQUIRE(pthread_create(t, NULL, run_call, c) == 0);
}

/* Every element of every array set to value(a, i), on the disk. */
static void fill(zs__nvme_state *ns, float *buf) {
    for (int a = 0; a < 3; a++) {
        for (int64_t i = 0; i < NUMEL; i++) buf[i] = value(a, i);
        ZT_OK(zs__nvme_state_put(ns, a, 0, NUMEL, buf));
    }
    ZT_OK(zs__nvme_state_flush(ns));
}

/* Issue 26, item 7: the pipeline's worker sweeps unit u + 1 while the main
 * thread gathers unit u's parameters from the same tier. */
static void two_threads(zs__nvme_state *ns) {
    float *buf = calloc(NUMEL, sizeof(float)), *far = calloc(100, sizeof(float)),
          *near = calloc(110, sizeof(float));
    ZT_REQUIRE(buf && far && near);
    fill(ns, buf);

    /* A put into chunk 1 stays in the cache; the sweep below takes chunk 1
     * (read ahead while chunk 0 is held), so it must write it back first. */
    const float put = 42.0f;
    ZT_OK(zs__nvme_state_put(ns, 0, 1100, 1, &put));
    /* The sweep of chunks 0-1 stops in chunk 0's visit: its window is chunk
     * 0 (visited) and chunk 1 (read ahead). */
    holder h = {.hold_first = 0};
    call sweep = {.ns = ns, .first = 0, .count = 2048, .h = &h};
    pthread_t sweeper, far_getter, near_getter;
    start_call(&sweep, &sweeper);
    ZT_REQUIRE(wait_flag(&h.held, 30.0));
    /* Chunk 4 is outside the window: the get completes while the visitor is
     * still held (the old tier's lock made it wait for the whole sweep). */
    call get_far = {.ns = ns, .array = 2, .first = 4100, .count = 100, .dst = far};
    start_call(&get_far, &far_getter);
    ZT_CHECK_MSG(wait_flag(&get_far.done, 10.0),
                 "a get of chunk 4 did not complete in 10 s while a sweep held chunks 0-1");
    ZT_CHECK_MSG(!atomic_load(&sweep.done), "the sweep ended before it was let go on");
    /* Chunks 0 and 1 are the sweep's: a get of them waits for it. */
    call get_near = {.ns = ns, .array = 0, .first = 1000, .count = 110, .dst = near};
    start_call(&get_near, &near_getter);
    sleep_ms(200);
    ZT_CHECK_MSG(!atomic_load(&get_near.done),
                 "a get of chunks 0-1 completed while the sweep held them (status %s: %s)",
                 zs_status_name(get_near.st), get_near.message);
    atomic_store(&h.go, 1);
    ZT_CHECK_MSG(wait_flag(&get_near.done, 30.0) && wait_flag(&sweep.done, 30.0),
                 "the get or the sweep did not end in 30 s after the visitor went on");
    pthread_join(sweeper, NULL);
    pthread_join(far_getter, NULL);
    pthread_join(near_getter, NULL);
    ZT_EQ_INT(sweep.st, ZS_OK);
    ZT_EQ_INT(get_far.st, ZS_OK);
    ZT_EQ_INT(get_near.st, ZS_OK);
    int bad = 0;
    for (int64_t i = 0; i < 100; i++) bad += far[i] != value(2, 4100 + i);
    ZT_EQ_INT(bad, 0);
    /* What the sweep wrote, the put included. */
    bad = 0;
    for (int64_t i = 0; i < 110; i++)
        bad += near[i] != (1000 + i == 1100 ? put : value(0, 1000 + i)) + 1.0f;
    ZT_EQ_INT(bad, 0);
    ZT_CHECK_MSG(near[0] == value(0, 1000) + 1.0f && near[100] == put + 1.0f,
                 "got %g and %g, want %g and %g", near[0], near[100], value(0, 1000) + 1.0f,
                 put + 1.0f);

    /* A chunk cached before a sweep that changes it reads back changed. */
    ZT_OK(zs__nvme_state_get(ns, 1, 3100, 1, buf));
    ZT_CHECK(buf[0] == value(1, 3100));
    visit_log log = {3072, 0, -1};
    ZT_OK(zs__nvme_state_sweep(ns, 3072, 4096, 1, add_one, &log));
    ZT_OK(zs__nvme_state_get(ns, 1, 3100, 1, buf));
    ZT_CHECK_MSG(buf[0] == value(1, 3100) + 1.0f, "chunk 3 read %g after the sweep, want %g",
                 buf[0], value(1, 3100) + 1.0f);

    /* A sweep that fails while a get waits for its chunk: the get fails
     * with the sweep's reason, never returns what a failed write left. */
    holder failing = {.hold_first = 1024};
    sweep = (call){.ns = ns, .first = 1024, .count = 2048, .h = &failing};
    start_call(&sweep, &sweeper);
    ZT_REQUIRE(wait_flag(&failing.held, 30.0));
    get_near = (call){.ns = ns, .array = 1, .first = 1500, .count = 10, .dst = near};
    start_call(&get_near, &near_getter);
    sleep_ms(100);
    ZT_CHECK_MSG(!atomic_load(&get_near.done), "a get of chunk 1 completed while the sweep held it");
    atomic_store(&failing.go, 2);
    ZT_CHECK_MSG(wait_flag(&get_near.done, 30.0) && wait_flag(&sweep.done, 30.0),
                 "the get or the sweep did not end in 30 s after the visitor failed");
    pthread_join(sweeper, NULL);
    pthread_join(near_getter, NULL);
    ZT_EQ_INT(sweep.st, ZS_ERR_NUMERIC);
    ZT_EQ_INT(get_near.st, ZS_ERR_NUMERIC);
    ZT_CHECK_MSG(strstr(get_near.message, "was lost by an earlier failure") &&
                     strstr(get_near.message, "on purpose"),
                 "the waiting get said: %s", get_near.message);
    ZT_OK(zs__nvme_state_reset(ns));
    free(buf);
    free(far);
    free(near);
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

    two_threads(ns);

    zs__nvme_state_destroy(ns);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) ZT_EQ_U64(mem.current[t], 0);
    ZT_EQ_INT(zt_dir_entries(dir), 0);
    rmdir(dir);
    free(got);
    free(want);
    return zt_finish("test_nvme_state");
}
