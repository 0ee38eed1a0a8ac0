/* The simulated device catches what it is for (issue 39, item 4): each case
 * runs in a child process on a sim backend of its own and must end as the
 * case says, whatever the timing (ThreadSanitizer plays no part):
 *   - a host write into page-locked memory that a queued copy still reads:
 *     the stream-order check ends the process (SIGABRT) with a report that
 *     names the copy and the host write; the same write after a fence wait
 *     or a synchronize is fine;
 *   - a host read of a copy's destination before a wait: reported; after
 *     the wait: fine;
 *   - two threads enqueue dependent ops (a copy writes device memory, the
 *     other thread's copy reads it) with nothing ordering the enqueues:
 *     reported, naming both threads; with the runtime's order annotations
 *     (release, acquire) between them: fine;
 *   - the same races declared through the backend's host_access (how the
 *     runtime declares MPI's and the host optimizer's accesses): reported;
 *   - host code dereferencing a device address: SIGSEGV, with a message
 *     that names the sim device;
 *   - the checked wrapper (ZS_STREAM_CHECK=1 on CUDA: metadata only),
 *     here around the CPU backend: two threads enqueue dependent ops with
 *     nothing between them: reported; with release/acquire: not;
 *   - a copy across the chunk boundaries of a page-locked allocation of
 *     several chunks (ZS_CUDA_PIN_CHUNK_BYTES = 4096 here) is cut by the
 *     rule shared with the CUDA backend (backend/pinned_chunks.h): the
 *     bytes arrive intact (a piece across two registrations would fail, as
 *     cudaMemcpyAsync does; sim_backend.c checks every piece). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/stream_check.h"
#include "core/config.h"
#include "core/memory.h"
#include "test_util.h"

#define BYTES 8192

typedef struct env {
    zs__mem mem;
    zs__backend *be;
    unsigned char *pinned; /* host_alloc, BYTES */
    unsigned char *device; /* alloc, BYTES */
} env;

static void setup(env *e) {
    memset(e, 0, sizeof *e);
    zs__settings s;
    memset(&s, 0, sizeof s);
    s.backend = ZS_BACKEND_SIM;
    if (zs__sim_backend_create(&s, &e->mem, &e->be) != ZS_OK ||
        e->be->ops->host_alloc(e->be, ZS_MEM_COMM, BYTES, (void **)&e->pinned) != ZS_OK ||
        e->be->ops->alloc(e->be, ZS_MEM_PARAMS, BYTES, (void **)&e->device) != ZS_OK) {
        fprintf(stderr, "setup: %s\n", zs_last_error());
        _exit(3);
    }
}

/* ---------------------------------------------------------------- the cases */

/* Host write into a buffer a queued copy reads. `order`: 0 none, 1 fence
 * wait, 2 synchronize. */
static void write_after_copy(int order) {
    env e;
    setup(&e);
    void *fence = NULL;
    zs__fence_create(e.be, &fence);
    e.be->ops->copy(e.be, e.device, e.pinned, BYTES); /* reads pinned */
    zs__fence_record(e.be, fence);
    if (order == 1) zs__fence_wait(e.be, fence);
    if (order == 2) e.be->ops->synchronize(e.be);
    e.pinned[100] = 7; /* the host write */
    e.be->ops->synchronize(e.be);
    zs__fence_destroy(e.be, fence);
    _exit(0);
}

/* Host read of a copy's destination before / after the wait. */
static void read_before_wait(int wait) {
    env e;
    setup(&e);
    e.be->ops->copy(e.be, e.pinned, e.device, BYTES); /* writes pinned */
    if (wait) e.be->ops->synchronize(e.be);
    volatile unsigned char v = e.pinned[4000];
    (void)v;
    _exit(0);
}

/* The same race declared through host_access, as the runtime declares MPI's
 * use of its staging. */
static void declared_race(void) {
    env e;
    setup(&e);
    e.be->ops->copy(e.be, e.pinned, e.device, BYTES);
    zs__backend_host_access(e.be, e.pinned, 64, 0, "MPI (host staging)");
    _exit(0);
}

typedef struct two {
    env *e;
    int annotate;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int first_done;
} two;

/* Thread A: a copy that writes device[0..BYTES/2) (from page-locked memory). */
static void *thread_a(void *p) {
    two *t = p;
    t->e->be->ops->copy(t->e->be, t->e->device, t->e->pinned, BYTES / 2);
    if (t->annotate) zs__backend_order_release(t->e->be, t);
    pthread_mutex_lock(&t->lock);
    t->first_done = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Two threads enqueue dependent ops; our own condition variable orders the
 * real calls (so the verdict is the same every run), and is not an edge
 * the check may count: only the annotation is. */
static void two_threads(int annotate) {
    env e;
    setup(&e);
    two t = {&e, annotate, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t a;
    pthread_create(&a, NULL, thread_a, &t);
    pthread_mutex_lock(&t.lock);
    while (!t.first_done) pthread_cond_wait(&t.cond, &t.lock);
    pthread_mutex_unlock(&t.lock);
    if (annotate) zs__backend_order_acquire(e.be, &t);
    /* Thread B (this one): a copy that reads what thread A's copy writes. */
    e.be->ops->copy(e.be, e.device + BYTES, e.device, BYTES / 2);
    pthread_join(a, NULL);
    e.be->ops->synchronize(e.be);
    _exit(0);
}

static void dereference(void) {
    env e;
    setup(&e);
    volatile unsigned char v = e.device[10];
    (void)v;
    _exit(0);
}

/* Copies across chunk boundaries, there and back: the bytes arrive. */
static void crossing(void) {
    env e;
    setup(&e);
    unsigned char *big = NULL, *back = NULL;
    /* Three chunks of 4096 bytes each (ZS_CUDA_PIN_CHUNK_BYTES in the parent). */
    if (e.be->ops->host_alloc(e.be, ZS_MEM_COMM, 3 * 4096, (void **)&big) != ZS_OK ||
        e.be->ops->host_alloc(e.be, ZS_MEM_COMM, 3 * 4096, (void **)&back) != ZS_OK)
        _exit(3);
    for (int i = 0; i < 3 * 4096; i++) big[i] = (unsigned char)(i * 7 + 1);
    if (e.be->ops->copy(e.be, e.device, big + 2048, 6000) != ZS_OK ||
        e.be->ops->copy(e.be, back + 1000, e.device, 6000) != ZS_OK ||
        e.be->ops->synchronize(e.be) != ZS_OK) {
        fprintf(stderr, "copy across chunks failed: %s\n", zs_last_error());
        _exit(4);
    }
    if (memcmp(back + 1000, big + 2048, 6000) != 0) {
        fprintf(stderr, "copy across chunks: the bytes differ\n");
        _exit(5);
    }
    _exit(0);
}

typedef struct wrapped {
    zs__backend *be;
    float *x, *y;
    int annotate;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int first_done;
    zs_status second;
} wrapped;

static void *wrapped_a(void *p) {
    wrapped *w = p;
    (void)w->be->ops->copy(w->be, w->x, w->y + 64, 64 * sizeof(float)); /* writes x */
    if (w->annotate) zs__backend_order_release(w->be, w);
    pthread_mutex_lock(&w->lock);
    w->first_done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* The checked wrapper in RETURN mode: the second thread's dependent copy
 * fails with the report, or succeeds when annotated. */
static void checked_wrapper(int annotate, zs_status *second, char *report, size_t cap) {
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *cpu = NULL, *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem, &cpu));
    const zs__stream_check_options opt = {ZS__STREAM_CHECK_RETURN, NULL, NULL, 0};
    ZT_OK(zs__backend_checked_create(cpu, &opt, &be));
    float *x = NULL, *y = NULL;
    ZT_OK(be->ops->alloc(be, ZS_MEM_SCRATCH, 128 * sizeof(float), (void **)&x));
    ZT_OK(be->ops->alloc(be, ZS_MEM_SCRATCH, 128 * sizeof(float), (void **)&y));
    wrapped w = {be, x, y, annotate, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, ZS_OK};
    pthread_t a;
    pthread_create(&a, NULL, wrapped_a, &w);
    pthread_mutex_lock(&w.lock);
    while (!w.first_done) pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    if (annotate) zs__backend_order_acquire(be, &w);
    *second = be->ops->copy(be, y, x, 64 * sizeof(float)); /* reads x */
    snprintf(report, cap, "%s", *second == ZS_OK ? "" : zs_last_error());
    pthread_join(a, NULL);
    be->ops->free(be, ZS_MEM_SCRATCH, x, 128 * sizeof(float));
    be->ops->free(be, ZS_MEM_SCRATCH, y, 128 * sizeof(float));
    zs__backend_destroy(be);
}

/* ------------------------------------------------------------- the harness */

/* Runs case fn(arg) in a child with stderr in a pipe; the exit status and
 * the text it printed. */
static int run_case(void (*fn)(int), int arg, char *text, size_t cap) {
    int pipefd[2];
    ZT_REQUIRE(pipe(pipefd) == 0);
    fflush(NULL);
    const pid_t pid = fork();
    ZT_REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn(arg);
        _exit(0);
    }
    close(pipefd[1]);
    size_t used = 0;
    ssize_t n;
    while ((n = read(pipefd[0], text + used, cap - 1 - used)) > 0) used += (size_t)n;
    text[used] = '\0';
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void w0(int a) { write_after_copy(a); }
static void r0(int a) { read_before_wait(a); }
static void d0(int a) {
    (void)a;
    declared_race();
}
static void t0(int a) { two_threads(a); }
static void x0(int a) {
    (void)a;
    dereference();
}
static void c0(int a) {
    (void)a;
    crossing();
}

static int aborted(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; }
static int clean(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int main(void) {
    static char text[65536];
    int st;

    st = run_case(w0, 0, text, sizeof text);
    ZT_CHECK_MSG(aborted(st) && strstr(text, "stream-order check") && strstr(text, "\"copy\"") &&
                     strstr(text, "host write") && strstr(text, "reads"),
                 "a host write into a buffer a queued copy reads: status %#x, said: %s", st, text);
    st = run_case(w0, 1, text, sizeof text);
    ZT_CHECK_MSG(clean(st), "the same write after a fence wait: status %#x, said: %s", st, text);
    st = run_case(w0, 2, text, sizeof text);
    ZT_CHECK_MSG(clean(st), "the same write after synchronize: status %#x, said: %s", st, text);

    st = run_case(r0, 0, text, sizeof text);
    ZT_CHECK_MSG(aborted(st) && strstr(text, "host read") && strstr(text, "writes"),
                 "a host read of a copy's destination before a wait: status %#x, said: %s", st,
                 text);
    st = run_case(r0, 1, text, sizeof text);
    ZT_CHECK_MSG(clean(st), "the same read after synchronize: status %#x, said: %s", st, text);

    st = run_case(d0, 0, text, sizeof text);
    ZT_CHECK_MSG(aborted(st) && strstr(text, "MPI (host staging)"),
                 "a declared host access before the wait: status %#x, said: %s", st, text);

    st = run_case(t0, 0, text, sizeof text);
    ZT_CHECK_MSG(aborted(st) && strstr(text, "thread 0") && strstr(text, "thread 1") &&
                     strstr(text, "enqueue"),
                 "two threads enqueue dependent ops with nothing between: status %#x, said: %s",
                 st, text);
    st = run_case(t0, 1, text, sizeof text);
    ZT_CHECK_MSG(clean(st), "the same with release/acquire between: status %#x, said: %s", st,
                 text);

    st = run_case(x0, 0, text, sizeof text);
    ZT_CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV && strstr(text, "sim device") &&
                     strstr(text, "device memory"),
                 "a host dereference of a device address: status %#x, said: %s", st, text);

    zs_status second = ZS_OK;
    checked_wrapper(0, &second, text, sizeof text);
    ZT_CHECK_MSG(second == ZS_ERR_STATE && strstr(text, "stream-order check"),
                 "the checked wrapper, two threads with nothing between: %s, said: %s",
                 zs_status_name(second), text);
    checked_wrapper(1, &second, text, sizeof text);
    ZT_CHECK_MSG(second == ZS_OK, "the checked wrapper, with release/acquire: %s, said: %s",
                 zs_status_name(second), text);

    setenv("ZS_CUDA_PIN_CHUNK_BYTES", "4096", 1);
    st = run_case(c0, 0, text, sizeof text);
    ZT_CHECK_MSG(clean(st), "a copy cut at chunk boundaries: status %#x, said: %s", st, text);
    return zt_finish("test_sim_guard");
}
