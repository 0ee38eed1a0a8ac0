/* The simulated device's guard (sim_check.h). */
#define _GNU_SOURCE /* REG_ERR, REG_EFL */
#include "backend/sim/sim_check.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

#define PAGE ((uintptr_t)4096)

/* A page's protection: what host code may still do while queued ops own it. */
enum { OPEN = 0, READ_ONLY = 1, CLOSED = 2 };

typedef struct guarded {
    uintptr_t lo, hi; /* pages, [lo, hi) */
    int level;        /* READ_ONLY or CLOSED */
} guarded;

struct zs__sim_check {
    zs__sim_arena *device, *pinned;
    zs__stream_check *check; /* NULL: the check is off */
    pthread_mutex_t lock;    /* the protected list */
    guarded *list;           /* sorted, disjoint */
    size_t count, cap;
};

/* The one guarded device of the process, read by the handlers. */
static zs__sim_check *volatile g_guard;
static struct sigaction g_old_segv, g_old_trap;

static uintptr_t page_down(uintptr_t a) { return a & ~(PAGE - 1); }
static uintptr_t page_up(uintptr_t a) { return (a + PAGE - 1) & ~(PAGE - 1); }

static int prot_of(int level) {
    return level == OPEN ? PROT_READ | PROT_WRITE : level == READ_ONLY ? PROT_READ : PROT_NONE;
}

/* ------------------------------------------------------ the protected list */

static int reserve(zs__sim_check *ck, size_t more) {
    if (ck->count + more <= ck->cap) return 0;
    size_t cap = ck->cap ? 2 * ck->cap : 64;
    while (cap < ck->count + more) cap *= 2;
    guarded *grown = zs__realloc(ck->list, cap * sizeof *grown);
    if (!grown) return -1;
    ck->list = grown;
    ck->cap = cap;
    return 0;
}

/* The level of the page at `a` (the lock held). */
static int level_at(const zs__sim_check *ck, uintptr_t a) {
    size_t lo = 0, hi = ck->count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (ck->list[mid].hi <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo < ck->count && ck->list[lo].lo <= a ? ck->list[lo].level : OPEN;
}

/* Sets pages [lo, hi) to `level` where raise is 0, or to the larger of
 * their level and `level` where raise is 1, and applies the protection
 * (the lock held). Rebuilds the part of the list it touches: the list is
 * short (the pages queued ops own). */
static int set_levels(zs__sim_check *ck, uintptr_t lo, uintptr_t hi, int level, int raise) {
    if (lo >= hi) return 0;
    /* The pieces of [lo, hi) as they are, then as they become. */
    if (reserve(ck, 2 * (ck->count + 2)) != 0) return -1;
    guarded *out = ck->list + ck->count; /* scratch after the list */
    size_t n = 0;
    uintptr_t at = lo;
    for (size_t i = 0; i < ck->count && at < hi; i++) {
        const guarded *g = &ck->list[i];
        if (g->hi <= at) continue;
        if (g->lo >= hi) break;
        if (g->lo > at) out[n++] = (guarded){at, g->lo, level};
        const uintptr_t a = g->lo > at ? g->lo : at, b = g->hi < hi ? g->hi : hi;
        out[n++] = (guarded){a, b, raise && g->level > level ? g->level : level};
        at = b;
    }
    if (at < hi) out[n++] = (guarded){at, hi, level};
    for (size_t k = 0; k < n; k++) mprotect((void *)out[k].lo, out[k].hi - out[k].lo, prot_of(out[k].level));
    /* The new list: what lies outside [lo, hi), then the guarded pieces. */
    guarded *merged = zs__malloc((ck->count * 2 + n + 2) * sizeof *merged);
    if (!merged) return -1;
    size_t m = 0;
    size_t i = 0;
    for (; i < ck->count && ck->list[i].lo < lo; i++) {
        merged[m] = ck->list[i];
        if (merged[m].hi > lo) merged[m].hi = lo;
        m++;
    }
    for (size_t k = 0; k < n; k++)
        if (out[k].level != OPEN) merged[m++] = out[k];
    for (i = 0; i < ck->count; i++) {
        if (ck->list[i].hi <= hi) continue;
        merged[m] = ck->list[i];
        if (merged[m].lo < hi) merged[m].lo = hi;
        m++;
    }
    /* Neighbours of one level are one piece. */
    size_t w = 0;
    for (size_t k = 0; k < m; k++) {
        if (w > 0 && merged[w - 1].hi == merged[k].lo && merged[w - 1].level == merged[k].level)
            merged[w - 1].hi = merged[k].hi;
        else
            merged[w++] = merged[k];
    }
    if (w > ck->cap && reserve(ck, w - ck->count) != 0) {
        free(merged);
        return -1;
    }
    memcpy(ck->list, merged, w * sizeof *merged);
    ck->count = w;
    free(merged);
    return 0;
}

/* ------------------------------------------------------------- the handlers */

/* write(2) of a C string, in a handler. */
static void say(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        const ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void hex(uintptr_t v, char *out) {
    static const char digits[] = "0123456789abcdef";
    char tmp[2 + 16 + 1];
    int n = 0;
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v && n < 16);
    out[0] = '0';
    out[1] = 'x';
    for (int i = 0; i < n; i++) out[2 + i] = tmp[n - 1 - i];
    out[2 + n] = '\0';
}

/* Hands a fault that is not ours to whoever had the signal before. */
static void pass_on(int sig, siginfo_t *si, void *uc, const struct sigaction *old) {
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* The default action: the instruction faults again and ends the process. */
    signal(sig, SIG_DFL);
}

/* Per thread: the page to protect again after the instruction that a
 * fault let through (single-stepped). */
static __thread uintptr_t t_reprotect;
static __thread int t_reprotect_level;

#if defined(__x86_64__)
#define FAULT_WAS_WRITE(uc) ((((ucontext_t *)(uc))->uc_mcontext.gregs[REG_ERR] & 2) != 0)
#define SINGLE_STEP(uc, on)                                                      \
    do {                                                                         \
        greg_t *efl = &((ucontext_t *)(uc))->uc_mcontext.gregs[REG_EFL];         \
        *efl = (on) ? (*efl | 0x100) : (*efl & ~(greg_t)0x100);                  \
    } while (0)
#define CAN_STEP 1
#else
#define FAULT_WAS_WRITE(uc) 1
#define SINGLE_STEP(uc, on) ((void)(uc), (void)(on))
#define CAN_STEP 0
#endif

/* The handler allocates (the check keeps a record of each access) and takes
 * locks, which is not async-signal-safe in general. It is here because the
 * signal is synchronous: only an instruction of the program's own thread that
 * touches a guarded pinned page raises it, and those pages come from the sim
 * arena, never from malloc's heap, the checker's tables or the loader; so the
 * interrupted code never holds the allocator's lock, the checker's or the
 * guard's. `make test-tsan` runs with report_signal_unsafe=0 for this reason. */
static void on_segv(int sig, siginfo_t *si, void *uc) {
    zs__sim_check *ck = g_guard;
    const uintptr_t a = (uintptr_t)si->si_addr;
    if (ck && zs__sim_arena_owns(ck->device, (const void *)a, 1)) {
        char at[24];
        hex(a, at);
        say("zeroshard: sim device: host code ");
        say(FAULT_WAS_WRITE(uc) ? "wrote" : "read");
        say(" device memory at ");
        say(at);
        say(": the sim device's memory, like a GPU's, is not the host's; only kernels "
            "(zeroshard_sim.h: zs_sim_launch) and copies (zs_sim_memcpy) touch it\n");
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    if (!ck || !ck->check || !zs__sim_arena_owns(ck->pinned, (const void *)a, 1)) {
        pass_on(sig, si, uc, &g_old_segv);
        return;
    }
    pthread_mutex_lock(&ck->lock);
    const int level = level_at(ck, page_down(a));
    pthread_mutex_unlock(&ck->lock);
    if (level == OPEN) { /* opened by another thread meanwhile: try again */
        return;
    }
    const int write = FAULT_WAS_WRITE(uc);
    /* A race ends the process here, with the check's report. */
    (void)zs__stream_check_host_access(ck->check, a, 1, write,
                                       write ? "host write (a fault)" : "host read (a fault)");
    const uintptr_t page = page_down(a);
    pthread_mutex_lock(&ck->lock);
    if (!CAN_STEP || zs__stream_check_host_ordered(ck->check, page, PAGE, 1)) {
        set_levels(ck, page, page + PAGE, OPEN, 0);
    } else {
        /* Only these bytes are this thread's to touch: one instruction,
         * then the page is guarded again (on_trap). */
        mprotect((void *)page, PAGE, PROT_READ | PROT_WRITE);
        t_reprotect = page;
        t_reprotect_level = level;
        SINGLE_STEP(uc, 1);
    }
    pthread_mutex_unlock(&ck->lock);
}

static void on_trap(int sig, siginfo_t *si, void *uc) {
    if (!t_reprotect) {
        pass_on(sig, si, uc, &g_old_trap);
        return;
    }
    zs__sim_check *ck = g_guard;
    if (ck) {
        pthread_mutex_lock(&ck->lock);
        /* Unless a later enqueue or use changed it meanwhile. */
        const int level = level_at(ck, t_reprotect);
        mprotect((void *)t_reprotect, PAGE, prot_of(level != OPEN ? level : t_reprotect_level));
        pthread_mutex_unlock(&ck->lock);
    }
    t_reprotect = 0;
    SINGLE_STEP(uc, 0);
}

/* ---------------------------------------------------------------- the rest */

zs_status zs__sim_check_create(zs__sim_arena *device, zs__sim_arena *pinned, int checking,
                               zs__sim_check **out) {
    *out = NULL;
    zs__sim_check *ck = zs__calloc(1, sizeof *ck);
    if (!ck) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory for its guard");
    ck->device = device;
    ck->pinned = pinned;
    pthread_mutex_init(&ck->lock, NULL);
    if (checking) {
        const zs__stream_check_options opt = {ZS__STREAM_CHECK_ABORT, NULL, NULL, 1};
        zs_status st = zs__stream_check_create(&opt, &ck->check);
        if (st != ZS_OK) {
            pthread_mutex_destroy(&ck->lock);
            free(ck);
            return st;
        }
    }
    if (g_guard) {
        ZS_DEBUG("sim device: another sim device of this process is guarded; this one is not");
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        sa.sa_sigaction = on_trap;
        sigaction(SIGTRAP, &sa, &g_old_trap);
        g_guard = ck;
    }
    *out = ck;
    return ZS_OK;
}

void zs__sim_check_destroy(zs__sim_check *ck) {
    if (!ck) return;
    if (g_guard == ck) {
        g_guard = NULL;
        sigaction(SIGSEGV, &g_old_segv, NULL);
        sigaction(SIGTRAP, &g_old_trap, NULL);
    }
    pthread_mutex_lock(&ck->lock);
    for (size_t i = 0; i < ck->count; i++)
        mprotect((void *)ck->list[i].lo, ck->list[i].hi - ck->list[i].lo, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&ck->lock);
    zs__stream_check_destroy(ck->check);
    pthread_mutex_destroy(&ck->lock);
    free(ck->list);
    free(ck);
}

int zs__sim_check_on(const zs__sim_check *ck) { return ck && ck->check; }

zs_status zs__sim_check_enqueue(zs__sim_check *ck, const char *op,
                                const zs__stream_check_range *ranges, int nranges) {
    if (!ck || !ck->check) return ZS_OK;
    ZS_CHECK(zs__stream_check_enqueue(ck->check, 0, op, NULL, ranges, nranges, NULL));
    pthread_mutex_lock(&ck->lock);
    int rc = 0;
    for (int i = 0; i < nranges && rc == 0; i++) {
        const zs__stream_check_range *r = &ranges[i];
        if (!r->bytes || !zs__sim_arena_owns(ck->pinned, (const void *)r->addr, r->bytes)) continue;
        rc = set_levels(ck, page_down(r->addr), page_up(r->addr + r->bytes),
                        r->write ? CLOSED : READ_ONLY, 1);
    }
    pthread_mutex_unlock(&ck->lock);
    return rc == 0 ? ZS_OK : zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory "
                                      "guarding page-locked memory");
}

void zs__sim_check_synchronize(zs__sim_check *ck) {
    if (ck && ck->check) (void)zs__stream_check_synchronize(ck->check, 0);
}

void zs__sim_check_fence_record(zs__sim_check *ck, const void *fence) {
    if (ck && ck->check) (void)zs__stream_check_fence_record(ck->check, 0, fence);
}

void zs__sim_check_fence_wait(zs__sim_check *ck, const void *fence) {
    if (ck && ck->check) (void)zs__stream_check_fence_wait(ck->check, fence);
}

void zs__sim_check_fence_forget(zs__sim_check *ck, const void *fence) {
    if (ck && ck->check) (void)zs__stream_check_forget_key(ck->check, fence);
}

void zs__sim_check_release(zs__sim_check *ck, const void *key) {
    if (ck && ck->check) (void)zs__stream_check_release(ck->check, key);
}

void zs__sim_check_acquire(zs__sim_check *ck, const void *key) {
    if (ck && ck->check) (void)zs__stream_check_acquire(ck->check, key);
}

void zs__sim_check_forget(zs__sim_check *ck, const void *addr, size_t bytes) {
    if (!ck || !ck->check || !addr || !bytes) return;
    (void)zs__stream_check_forget(ck->check, (uintptr_t)addr, bytes);
    if (!zs__sim_arena_owns(ck->pinned, addr, bytes)) return;
    pthread_mutex_lock(&ck->lock);
    set_levels(ck, page_down((uintptr_t)addr), page_up((uintptr_t)addr + bytes), OPEN, 0);
    pthread_mutex_unlock(&ck->lock);
}

zs_status zs__sim_check_host_use(zs__sim_check *ck, const void *addr, size_t bytes, int write,
                                 const char *what) {
    if (!ck || !ck->check || !bytes || !zs__sim_arena_owns(ck->pinned, addr, bytes)) return ZS_OK;
    ZS_CHECK(zs__stream_check_host_access(ck->check, (uintptr_t)addr, bytes, write, what));
    /* The whole pages open, the ends too: OpenMP's worker threads and the
     * kernel (pread, MPI) must get through, and they are not the thread
     * whose clock the check knows. Bytes of another buffer on an end page
     * (a staging half) are then unguarded until the next enqueue touches
     * them: their own host accesses are declared here as well. */
    pthread_mutex_lock(&ck->lock);
    const int rc = set_levels(ck, page_down((uintptr_t)addr), page_up((uintptr_t)addr + bytes),
                              OPEN, 0);
    pthread_mutex_unlock(&ck->lock);
    return rc == 0 ? ZS_OK : zs__fail(ZS_ERR_OUT_OF_MEMORY, "sim device: out of host memory "
                                      "guarding page-locked memory");
}
