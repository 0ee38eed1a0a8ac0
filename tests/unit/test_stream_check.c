/* The stream-order checker (src/backend/stream_check.c) on planted races:
 *   1. a host write into a buffer a queued copy reads (reported), with a fence
 *      wait or a synchronize between (not);
 *   2. a host read of a copy's destination before a wait (reported), after
 *      synchronize (not);
 *   3. two threads enqueuing dependent ops with nothing ordering the enqueues
 *      (reported), with release/acquire or a fence wait between (not);
 *   4. stream order within one thread (not reported), across streams (reported);
 *   5. a fence recorded by one thread and waited for by another orders every
 *      op before it in the queue, a third thread's included;
 *   6. partial overlaps, adjacent ranges, reads after reads, forget and reuse,
 *      and the range table merging back;
 *   7. the report's text, word for word, and the same text on a second run;
 * and the error paths, the abort mode (in a child process), and threads
 * calling at once (for ThreadSanitizer).
 *
 * Three real threads make the calls ("main", "comm engine", "optimizer"),
 * but one at a time: the test hands each call to its thread and waits for it
 * (a mutex and condition the checker does not know of, so they are no edge
 * of its model), which makes every verdict independent of timing. Addresses
 * are made up: the checker reads metadata only. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/stream_check.h"
#include "core/error.h"
#include "test_util.h"

enum { MAIN, COMM, OPT, NTHREADS };
static const char *const thread_names[NTHREADS] = {"main", "comm engine", "optimizer"};

enum { R = 0, W = 1 };
/* Made-up addresses: a page-locked host buffer, device memory, more of both. */
#define HOST 0x10000u
#define DEV 0x900000u
#define X 0x200000u
#define Y 0x300000u
#define Z 0x400000u
#define PAGE 4096u

typedef enum kind { ENQUEUE, HOST_ACCESS, SYNC, RECORD, WAIT, RELEASE, ACQUIRE, FORGET, NAME } kind;

/* One call into the checker, made on one of the test's threads. */
typedef struct step {
    kind kind;
    int stream;
    const char *what; /* op name, host access name or thread name */
    const char *site;
    const void *key;
    int nranges;
    zs__stream_check_range ranges[2];
} step;

static step op(int stream, const char *what, uintptr_t addr, size_t bytes, int write) {
    return (step){.kind = ENQUEUE, .stream = stream, .what = what, .nranges = 1,
                  .ranges = {{addr, bytes, write}}};
}
static step copy_op(int stream, uintptr_t dst, uintptr_t src, size_t bytes) {
    return (step){.kind = ENQUEUE, .stream = stream, .what = "copy", .nranges = 2,
                  .ranges = {{src, bytes, R}, {dst, bytes, W}}};
}
static step host(uintptr_t addr, size_t bytes, int write) {
    return (step){.kind = HOST_ACCESS, .ranges = {{addr, bytes, write}}};
}
static step sync_op(int stream) { return (step){.kind = SYNC, .stream = stream}; }
static step record(int stream, const void *key) {
    return (step){.kind = RECORD, .stream = stream, .key = key};
}
static step wait_on(const void *key) { return (step){.kind = WAIT, .key = key}; }
static step release(const void *key) { return (step){.kind = RELEASE, .key = key}; }
static step acquire(const void *key) { return (step){.kind = ACQUIRE, .key = key}; }
static step forget(uintptr_t addr, size_t bytes) {
    return (step){.kind = FORGET, .ranges = {{addr, bytes, 0}}};
}

static zs__stream_check *g_chk;

static zs_status run_step(const step *s) {
    const zs__stream_check_range *g = &s->ranges[0];
    switch (s->kind) {
    case ENQUEUE:
        return zs__stream_check_enqueue(g_chk, s->stream, s->what, s->site, s->ranges, s->nranges,
                                        NULL);
    case HOST_ACCESS:
        return zs__stream_check_host_access(g_chk, g->addr, g->bytes, g->write, s->what);
    case SYNC: return zs__stream_check_synchronize(g_chk, s->stream);
    case RECORD: return zs__stream_check_fence_record(g_chk, s->stream, s->key);
    case WAIT: return zs__stream_check_fence_wait(g_chk, s->key);
    case RELEASE: return zs__stream_check_release(g_chk, s->key);
    case ACQUIRE: return zs__stream_check_acquire(g_chk, s->key);
    case FORGET: return zs__stream_check_forget(g_chk, g->addr, g->bytes);
    case NAME: return zs__stream_check_thread_name(g_chk, s->what);
    }
    return ZS_ERR_INTERNAL;
}

/* A thread that runs the steps handed to it, one at a time. */
typedef struct worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, quit;
    step step;
    zs_status status;
    char message[1024];
} worker;

static worker g_workers[NTHREADS]; /* [MAIN] is the test's own thread */

static void *worker_main(void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending) break;
        w->status = run_step(&w->step);
        snprintf(w->message, sizeof w->message, "%s", zs_last_error());
        w->pending = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Runs s on thread `who` and returns its status, with the message carried
 * over to this thread. */
static zs_status on(int who, step s) {
    if (who == MAIN) return run_step(&s);
    worker *w = &g_workers[who];
    pthread_mutex_lock(&w->mu);
    w->step = s;
    w->pending = 1;
    pthread_cond_broadcast(&w->cv);
    while (w->pending) pthread_cond_wait(&w->cv, &w->mu);
    zs_status st = w->status;
    if (st != ZS_OK) zs__fail(st, "%s", w->message);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static void start_workers(void) {
    for (int i = COMM; i < NTHREADS; i++) {
        worker *w = &g_workers[i];
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        ZT_REQUIRE(pthread_create(&w->thread, NULL, worker_main, w) == 0);
    }
}

static void stop_workers(void) {
    for (int i = COMM; i < NTHREADS; i++) {
        worker *w = &g_workers[i];
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
}

/* A new checker (collecting reports), the threads named in order. */
static void fresh_with(int backtraces) {
    zs__stream_check_destroy(g_chk);
    g_chk = NULL;
    zs__stream_check_options opt = {.mode = ZS__STREAM_CHECK_RETURN, .backtraces = backtraces};
    ZT_OK(zs__stream_check_create(&opt, &g_chk));
    ZT_REQUIRE(g_chk != NULL);
    for (int t = 0; t < NTHREADS; t++)
        ZT_OK(on(t, (step){.kind = NAME, .what = thread_names[t]}));
}

static void fresh(void) { fresh_with(0); }

/* The step must find exactly n races (status ZS_ERR_STATE), or none (ZS_OK). */
#define RACES(n, who, s) expect_races(__LINE__, (n), (who), (s))
#define CLEAN(who, s) expect_races(__LINE__, 0, (who), (s))

static void expect_races(int line, size_t n, int who, step s) {
    size_t before = zs__stream_check_report_count(g_chk);
    zs_status st = on(who, s);
    size_t found = zs__stream_check_report_count(g_chk) - before;
    zt_checks++;
    if (found != n || st != (n ? ZS_ERR_STATE : ZS_OK)) {
        zt_fail_header(__FILE__, line);
        fprintf(stderr, "  expected %zu race(s), found %zu (status %s: %s)\n", n, found,
                zs_status_name(st), st == ZS_OK ? "" : zs_last_error());
    }
}

static const char *last_report(void) {
    size_t n = zs__stream_check_report_count(g_chk);
    const char *text = n ? zs__stream_check_report(g_chk, n - 1) : NULL;
    return text ? text : "";
}

#define REPORT_HAS(text) \
    ZT_CHECK_MSG(strstr(last_report(), (text)) != NULL, "no \"%s\" in: %s", (text), last_report())

/* 1. The host writes the staging buffer again while the upload may not have
 * read it. */
static void test_host_write_after_copy(void) {
    int fence;
    fresh();
    CLEAN(MAIN, host(HOST, PAGE, W)); /* fill the staging buffer */
    CLEAN(MAIN, copy_op(0, DEV, HOST, PAGE));
    RACES(1, MAIN, host(HOST, PAGE, W));
    REPORT_HAS("must wait for \"copy\"");

    fresh();
    CLEAN(MAIN, copy_op(0, DEV, HOST, PAGE));
    CLEAN(MAIN, record(0, &fence));
    CLEAN(MAIN, wait_on(&fence));
    CLEAN(MAIN, host(HOST, PAGE, W));

    fresh();
    CLEAN(MAIN, copy_op(0, DEV, HOST, PAGE));
    CLEAN(MAIN, sync_op(0));
    CLEAN(MAIN, host(HOST, PAGE, W));

    /* A fence recorded before the copy does not cover it. */
    fresh();
    CLEAN(MAIN, record(0, &fence));
    CLEAN(MAIN, copy_op(0, DEV, HOST, PAGE));
    CLEAN(MAIN, wait_on(&fence));
    RACES(1, MAIN, host(HOST, PAGE, W));

    /* Another thread's wait orders that thread only. */
    fresh();
    CLEAN(MAIN, copy_op(0, DEV, HOST, PAGE));
    CLEAN(MAIN, record(0, &fence));
    CLEAN(COMM, wait_on(&fence));
    RACES(1, MAIN, host(HOST, PAGE, W));
}

/* 2. The host reads a download's destination before waiting for it. */
static void test_host_read_before_wait(void) {
    fresh();
    CLEAN(MAIN, copy_op(0, HOST, DEV, PAGE));
    RACES(1, MAIN, host(HOST, PAGE, R));
    REPORT_HAS("\"host read\" (by the host thread \"main\"");

    fresh();
    CLEAN(MAIN, copy_op(0, HOST, DEV, PAGE));
    CLEAN(MAIN, sync_op(0));
    CLEAN(MAIN, host(HOST, PAGE, R));
    CLEAN(MAIN, host(HOST, PAGE, W));
}

/* 3. Two threads enqueue onto one stream: the FIFO runs their ops in the
 * order the enqueues happened to come, which only an edge between the
 * enqueues makes the program's order. */
static void test_two_enqueuers(void) {
    int engine_op, fence;
    fresh();
    CLEAN(COMM, op(0, "reduce", X, PAGE, W));
    RACES(1, OPT, op(0, "update", X, PAGE, R));
    REPORT_HAS("\"reduce\" (op #1 of thread \"comm engine\" on stream 0");
    REPORT_HAS("writes [0x200000+4096)");
    REPORT_HAS("\"update\" (op #1 of thread \"optimizer\" on stream 0");
    REPORT_HAS("reads [0x200000+4096)");
    REPORT_HAS("the two enqueues onto stream 0 race");

    fresh();
    CLEAN(COMM, op(0, "reduce", X, PAGE, W));
    CLEAN(COMM, release(&engine_op));
    CLEAN(OPT, acquire(&engine_op));
    CLEAN(OPT, op(0, "update", X, PAGE, R));

    fresh();
    CLEAN(COMM, op(0, "reduce", X, PAGE, W));
    CLEAN(COMM, record(0, &fence));
    CLEAN(OPT, wait_on(&fence));
    CLEAN(OPT, op(0, "update", X, PAGE, R));

    /* A release made before the enqueue does not order it. */
    fresh();
    CLEAN(COMM, release(&engine_op));
    CLEAN(COMM, op(0, "reduce", X, PAGE, W));
    CLEAN(OPT, acquire(&engine_op));
    RACES(1, OPT, op(0, "update", X, PAGE, R));

    /* A host write on one thread, an upload of it enqueued by another. */
    fresh();
    CLEAN(MAIN, host(HOST, PAGE, W));
    RACES(1, COMM, copy_op(0, DEV, HOST, PAGE));
    REPORT_HAS("the enqueue of \"copy\" must be ordered after the host thread \"main\"'s access");
    fresh();
    CLEAN(MAIN, host(HOST, PAGE, W));
    CLEAN(MAIN, release(&engine_op));
    CLEAN(COMM, acquire(&engine_op));
    CLEAN(COMM, copy_op(0, DEV, HOST, PAGE));

    /* A forgotten sync object orders nothing. */
    fresh();
    CLEAN(COMM, op(0, "reduce", X, PAGE, W));
    CLEAN(COMM, release(&engine_op));
    ZT_OK(zs__stream_check_forget_key(g_chk, &engine_op));
    CLEAN(OPT, acquire(&engine_op));
    RACES(1, OPT, op(0, "update", X, PAGE, R));
}

/* 4. One thread's ops on one stream are ordered by the stream; across
 * streams only through the host. */
static void test_stream_order(void) {
    uint64_t number = 0;
    fresh();
    CLEAN(MAIN, op(0, "produce", X, PAGE, W));
    CLEAN(MAIN, op(0, "consume", X, PAGE, R));
    CLEAN(MAIN, op(0, "overwrite", X, PAGE, W));
    CLEAN(MAIN, copy_op(0, Y, X, PAGE));
    RACES(1, MAIN, op(1, "other stream", X, PAGE, R));
    REPORT_HAS("ops on different streams are ordered only through the host");
    ZT_OK(zs__stream_check_enqueue(g_chk, 0, "count", NULL, NULL, 0, &number));
    ZT_EQ_U64(number, 5);
    ZT_OK(on(COMM, op(0, "first of comm", Z, PAGE, W)));
    ZT_OK(zs__stream_check_enqueue(g_chk, 1, "count", NULL, NULL, 0, &number));
    ZT_EQ_U64(number, 2);

    fresh();
    CLEAN(MAIN, op(0, "produce", X, PAGE, W));
    CLEAN(MAIN, sync_op(0));
    CLEAN(MAIN, op(1, "other stream", X, PAGE, R));
}

/* 5. A fence recorded by the comm engine and waited for by the optimizer
 * thread covers the main thread's earlier op too, and the engine's own host
 * write before the record, but not an op enqueued after the record. */
static void test_fence_orders_every_earlier_op(void) {
    int fence;
    fresh();
    CLEAN(MAIN, op(0, "produce X", X, PAGE, W));
    CLEAN(COMM, op(0, "produce Y", Y, PAGE, W));
    CLEAN(COMM, host(Z, PAGE, W));
    CLEAN(COMM, record(0, &fence));
    CLEAN(MAIN, op(0, "produce later", DEV, PAGE, W));
    CLEAN(OPT, wait_on(&fence));
    CLEAN(OPT, host(X, PAGE, R));
    CLEAN(OPT, host(Y, PAGE, R));
    CLEAN(OPT, host(Z, PAGE, R));
    CLEAN(OPT, op(0, "read X", X, PAGE, R));
    RACES(1, OPT, host(DEV, PAGE, R));
    REPORT_HAS("\"produce later\" (op #2 of thread \"main\"");
}

/* 6. Ranges: what overlaps conflicts, what touches does not. */
static void test_ranges(void) {
    fresh();
    CLEAN(MAIN, op(0, "fill", 0x1000, 100, W));
    RACES(1, MAIN, host(0x1000 + 50, 100, R));
    REPORT_HAS("writes [0x1000+100)");
    REPORT_HAS("reads [0x1032+100) (conflicting in [0x1032+50))");

    CLEAN(MAIN, op(0, "fill", 0x2000, 100, W));
    CLEAN(MAIN, host(0x2000 + 100, 100, R));
    CLEAN(MAIN, host(0x2000 - 16, 16, W));

    /* Reads after reads, by three actors; then a write races with all. */
    CLEAN(MAIN, op(0, "read", 0x3000, 64, R));
    CLEAN(COMM, host(0x3000, 64, R));
    CLEAN(OPT, op(0, "read", 0x3000, 64, R));
    CLEAN(OPT, host(0x3000, 64, R)); /* its own op only reads */
    RACES(4, MAIN, host(0x3000, 64, W)); /* two ops' and two host threads' reads */

    /* Freed and reused memory is new memory, in whole or in part. */
    CLEAN(MAIN, op(0, "fill", 0x4000, PAGE, W));
    CLEAN(MAIN, forget(0x4000, PAGE));
    CLEAN(MAIN, host(0x4000, PAGE, W));
    CLEAN(MAIN, op(0, "fill", 0x8000, PAGE, W));
    CLEAN(MAIN, forget(0x8000, PAGE / 2));
    RACES(1, MAIN, host(0x8000, PAGE, W));
    REPORT_HAS("(conflicting in [0x8800+2048))");

    /* An access over many pieces leaves one segment; a read in the middle
     * splits it in three, and a write over all merges them back. */
    fresh();
    for (uintptr_t a = 0x6000; a < 0x6000 + PAGE; a += 64) CLEAN(MAIN, host(a, 64, W));
    ZT_EQ_U64(zs__stream_check_segment_count(g_chk), PAGE / 64);
    CLEAN(MAIN, host(0x6000, PAGE, W));
    ZT_EQ_U64(zs__stream_check_segment_count(g_chk), 1);
    CLEAN(MAIN, host(0x6100, 64, R));
    ZT_EQ_U64(zs__stream_check_segment_count(g_chk), 3);
    CLEAN(MAIN, host(0x6000, PAGE, W));
    ZT_EQ_U64(zs__stream_check_segment_count(g_chk), 1);
    CLEAN(MAIN, forget(0x6000, PAGE));
    ZT_EQ_U64(zs__stream_check_segment_count(g_chk), 0);
}

/* 7. The whole text of one report, and the same reports on a second run
 * with backtraces. */
static void staged_race(void) {
    step upload = copy_op(0, DEV, HOST, PAGE);
    upload.site = "staging.c: copy out";
    step refill = host(HOST, PAGE, W);
    refill.what = "pread into staging";
    CLEAN(COMM, upload);
    RACES(1, MAIN, refill);
}

/* One run with backtraces; its first report goes into `first` on run 0 and
 * is compared with it after. Called from one place (the return addresses
 * are part of the text), in a loop the compiler cannot unroll. */
__attribute__((noinline)) static void run_with_backtraces(int run, char *first, size_t cap) {
    fresh_with(1);
    staged_race();
    if (run == 0) snprintf(first, cap, "%s", last_report());
}

static void test_report_text(void) {
    fresh();
    staged_race();
    ZT_CHECK_MSG(
        strcmp(last_report(),
               "stream-order check: \"copy\" (op #1 of thread \"comm engine\" on stream 0, "
               "enqueued at staging.c: copy out) reads [0x10000+4096) and then \"pread into "
               "staging\" (by the host thread \"main\", at an unknown site) writes "
               "[0x10000+4096), with nothing ordering the two: the host thread \"main\" must "
               "wait for \"copy\" (a fence recorded after it, or synchronize of stream 0) "
               "before this access") == 0,
        "got: %s", last_report());

    char first[4096];
    volatile int runs = 2;
    for (int run = 0; run < runs; run++) run_with_backtraces(run, first, sizeof first);
    REPORT_HAS("staging.c: copy out, called from ");
    REPORT_HAS("test_stream_check(");
    ZT_CHECK_MSG(strcmp(first, last_report()) == 0, "first run: %s\nsecond run: %s", first,
                 last_report());

    /* Unnamed threads are numbered in the order they first called (their
     * sub-streams take no number). */
    zs__stream_check_destroy(g_chk);
    ZT_OK(zs__stream_check_create(NULL, &g_chk));
    CLEAN(OPT, op(0, "fill", X, PAGE, W));
    RACES(1, COMM, host(X, PAGE, R));
    REPORT_HAS("\"fill\" (op #1 of thread 0 on stream 0, enqueued at an unknown site) writes");
    REPORT_HAS("\"host read\" (by the host thread 1, at an unknown site) reads");
    CLEAN(OPT, host(Y, PAGE, W));
    RACES(1, MAIN, host(Y, PAGE, R));
    REPORT_HAS("the host thread 0 must release a sync object after its access and the host "
               "thread 2 acquire it");
}

static void test_errors(void) {
    fresh();
    zs__stream_check_range wraps = {UINTPTR_MAX - 10, 100, W};
    ZT_FAILS_WITH(zs__stream_check_enqueue(g_chk, 0, "op", NULL, &wraps, 1, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "wraps around");
    ZT_FAILS_WITH(zs__stream_check_enqueue(g_chk, 0, "op", NULL, NULL, 1, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "NULL");
    /* Three threads, then one sub-stream per stream up to the limit. */
    int stream = 0;
    while (3 + stream < ZS__STREAM_CHECK_MAX_ACTORS)
        ZT_OK(zs__stream_check_enqueue(g_chk, stream++, "op", NULL, NULL, 0, NULL));
    ZT_FAILS_WITH(zs__stream_check_enqueue(g_chk, stream, "op", NULL, NULL, 0, NULL),
                  ZS_ERR_UNSUPPORTED, "more than 64 actors");
}

/* ABORT mode: the callback gets the report, and the call still fails. */
static int g_aborts;
static char g_abort_text[4096];

static void on_race(void *arg, const char *report) {
    (void)arg;
    g_aborts++;
    snprintf(g_abort_text, sizeof g_abort_text, "%s", report);
}

static void test_abort_callback(void) {
    zs__stream_check *chk = NULL;
    zs__stream_check_options opt = {.mode = ZS__STREAM_CHECK_ABORT, .on_race = on_race};
    ZT_OK(zs__stream_check_create(&opt, &chk));
    zs__stream_check_range w = {X, PAGE, W};
    ZT_OK(zs__stream_check_enqueue(chk, 0, "fill", NULL, &w, 1, NULL));
    ZT_FAILS_WITH(zs__stream_check_host_access(chk, X, PAGE, 0, NULL), ZS_ERR_STATE, "\"fill\"");
    ZT_EQ_INT(g_aborts, 1);
    ZT_CHECK_MSG(strstr(g_abort_text, "stream-order check: \"fill\"") == g_abort_text, "got: %s",
                 g_abort_text);
    zs__stream_check_destroy(chk);
}

/* ABORT mode without a callback ends the process with the report on
 * stderr. Run in a child, before the test starts any thread. */
static void test_abort_kills(void) {
    int fds[2];
    ZT_REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    ZT_REQUIRE(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fds[1], STDERR_FILENO);
        zs__stream_check *chk = NULL;
        zs__stream_check_options opt = {.mode = ZS__STREAM_CHECK_ABORT};
        if (zs__stream_check_create(&opt, &chk) != ZS_OK) _exit(2);
        zs__stream_check_range w = {X, PAGE, W};
        zs__stream_check_enqueue(chk, 0, "fill", NULL, &w, 1, NULL);
        zs__stream_check_host_access(chk, X, PAGE, 0, NULL);
        _exit(3); /* not reached when the race aborts */
    }
    close(fds[1]);
    char text[4096];
    size_t used = 0;
    for (ssize_t n; used + 1 < sizeof text; used += (size_t)n)
        if ((n = read(fds[0], text + used, sizeof text - 1 - used)) <= 0) break;
    text[used] = '\0';
    close(fds[0]);
    int status = 0;
    ZT_CHECK(waitpid(pid, &status, 0) == pid);
    ZT_CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "child status %#x", status);
    ZT_CHECK_MSG(strstr(text, "zeroshard: stream-order check: \"fill\"") != NULL, "stderr: %s",
                 text);
}

/* Two threads calling at once, each on its own stream and memory, each
 * waiting for its own ops: nothing to report, whatever the interleaving
 * (the run ThreadSanitizer watches). The runners count their failed calls
 * (the ZT_ counters belong to the main thread). */
typedef struct free_runner {
    int stream;
    uintptr_t base;
    int failed;
} free_runner;

static void *run_free(void *arg) {
    free_runner *f = arg;
    char name[32];
    snprintf(name, sizeof name, "runner %d", f->stream);
    f->failed += zs__stream_check_thread_name(g_chk, name) != ZS_OK;
    for (int i = 0; i < 300; i++) {
        uintptr_t buf = f->base + (uintptr_t)(i % 8) * PAGE, dev = buf + 64 * PAGE;
        zs__stream_check_range r[2] = {{buf, PAGE, R}, {dev, PAGE, W}};
        f->failed += zs__stream_check_host_access(g_chk, buf, PAGE, W, NULL) != ZS_OK;
        f->failed += zs__stream_check_enqueue(g_chk, f->stream, "copy", NULL, r, 2, NULL) != ZS_OK;
        if (i % 3 == 0) {
            f->failed += zs__stream_check_synchronize(g_chk, f->stream) != ZS_OK;
        } else {
            f->failed += zs__stream_check_fence_record(g_chk, f->stream, f) != ZS_OK;
            f->failed += zs__stream_check_fence_wait(g_chk, f) != ZS_OK;
        }
    }
    return NULL;
}

static void test_concurrent_callers(void) {
    fresh_with(1);
    free_runner runners[2] = {{10, 0x10000000u, 0}, {11, 0x20000000u, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        ZT_REQUIRE(pthread_create(&threads[i], NULL, run_free, &runners[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    ZT_EQ_INT(runners[0].failed + runners[1].failed, 0);
    ZT_EQ_U64(zs__stream_check_report_count(g_chk), 0);
}

int main(void) {
    test_abort_kills();
    start_workers();
    test_host_write_after_copy();
    test_host_read_before_wait();
    test_two_enqueuers();
    test_stream_order();
    test_fence_orders_every_earlier_op();
    test_ranges();
    test_report_text();
    test_errors();
    test_abort_callback();
    test_concurrent_callers();
    stop_workers();
    zs__stream_check_destroy(g_chk);
    return zt_finish("test_stream_check");
}
