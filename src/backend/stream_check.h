/* The stream-order checker (issue 39): decides, from what the backends tell
 * it and never from when things actually run, whether every two conflicting
 * memory accesses of host threads and stream ops are ordered. It finds the
 * bugs ThreadSanitizer cannot: a host write into a buffer that a queued copy
 * has not read yet, or two threads enqueuing dependent ops with nothing
 * ordering the enqueues (the queue's own lock gives TSan a happens-before
 * edge that hides both). PyTorch's CUDA Sanitizer (torch/cuda/_sanitizer.py)
 * tracks streams with vector clocks in the same spirit; this model also
 * tells apart the host threads that enqueue onto one stream.
 *
 * The model.
 *
 * Actors are host threads and sub-streams. A thread becomes an actor the
 * first time it calls the checker (reports number threads 0, 1, ... in the
 * order of their first calls, so name them with
 * zs__stream_check_thread_name for text that does not depend on which
 * thread came first). A sub-stream is a pair (stream,
 * enqueuing thread); a stream is an integer the caller chooses. At most
 * ZS__STREAM_CHECK_MAX_ACTORS actors exist in one checker.
 *
 * A clock holds two counters per actor: done[a] (for a thread, the latest of
 * its events known; for a sub-stream, how many of its ops are known to have
 * completed) and enq[a] (for a sub-stream, how many of its ops are known to
 * have been enqueued). Every thread has a clock; its own done component
 * grows by one at each of its enqueues and host accesses (program order).
 *
 * Enqueue: thread T enqueues op B on stream S. B is the next op of the
 * sub-stream (S, T), its op number (1, 2, ...) the count of T's ops on S.
 * B starts after every op of S whose enqueue T knows of: start = T's clock
 * with done[x] raised to enq[x] for each sub-stream x of S. That covers
 * T's own earlier ops on S (program order and FIFO), and another thread's
 * ops only when their enqueue happens-before B's: two threads that enqueue
 * onto one stream with nothing ordering the enqueues leave their ops
 * unordered, although the real queue runs them one after the other, because
 * the order of the enqueues was itself a race. B's completion clock is its
 * start with done and enq of (S, T) set to B's number. No op is kept: the
 * enq counters carry, along the same edges as the host's own, what the
 * enqueuing thread knew. Ops of different
 * streams are ordered only through the host (there is no stream-waits-for-
 * fence edge yet).
 *
 * Host waits: synchronize(S) joins into the waiting thread's clock the
 * completion of every op enqueued on S so far, whichever thread enqueued it:
 * the real queue position decides here, as stream synchronization and CUDA
 * events capture all prior work of a stream. fence_record(S, key) keeps that
 * join, and the recording thread's own clock (the fence completes after it
 * was recorded), in the key; fence_wait(key) joins it into the waiting
 * thread. A fence recorded again keeps only its last record; waiting on a
 * fence never recorded does nothing.
 *
 * Host-to-host edges are annotations only: release(key) joins the thread's
 * clock into the key's, acquire(key) joins the key's into the thread's. A key
 * is any pointer (a comm engine op between submit and wait, a lock, a
 * condition), used either as a fence or as a sync object, never both;
 * thread creation and join are edges only when annotated so (a new thread
 * knows nothing: release before pthread_create, acquire in the thread).
 * The checker's own mutex is not an edge of the model: that is the point.
 *
 * Accesses: an op declares at enqueue the byte ranges it reads and writes;
 * a host thread declares a host access. Two accesses conflict when their
 * ranges overlap and one of them writes. The later one (in the order the
 * checker sees them) must be ordered after the earlier: for an earlier access
 * by actor x with stamp s (a thread's event, or an op's number), the later
 * access's clock has done[x] >= s. Per byte range the checker keeps the last
 * write and the reads since it, the latest one per actor (a later access
 * ordered after an actor's later read is ordered after its earlier ones), in
 * sorted segments that split where accesses begin and end and merge again
 * when equal. forget(range) drops them: freed memory that comes back is new.
 *
 * Determinism: the verdicts depend only on the order of the calls into the
 * checker, never on when the device runs the ops. A program whose calls are
 * ordered by its own synchronization gets the same reports every run; op
 * numbers count per sub-stream, so two threads' racing enqueues do not
 * renumber each other's ops. Where calls race, the first race is found
 * whichever way they went, and its text may name the two accesses in either
 * order.
 *
 * Reports name both accesses: the op's name, read or write, the declared
 * byte range (and the span where they conflict, when it differs), the thread
 * (its name, else its number), and where: the site the caller gave and, when
 * backtraces are on, return addresses captured at the call and turned into
 * text only when a report is made. The text says what would order the pair.
 * One declared range reports at most 8 earlier accesses.
 *
 * Thread safety: every function may be called from many threads at once,
 * except create and destroy. Functions take one mutex and allocate, so
 * host_access from a fault handler is safe only when the faulting code is
 * neither inside the checker nor inside the allocator. */
#ifndef ZS_BACKEND_STREAM_CHECK_H
#define ZS_BACKEND_STREAM_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* Host threads and (stream, thread) pairs of one checker, together. */
#define ZS__STREAM_CHECK_MAX_ACTORS 64

typedef struct zs__stream_check zs__stream_check;

/* What a race does. RETURN: the report is kept and the call that found it
 * returns ZS_ERR_STATE with the report as its message (the state is updated
 * all the same, so checking goes on; the unit test collects reports so).
 * ABORT: the report is kept and handed to on_race; without one, it is
 * written to stderr and the process ends with abort() at the first race
 * (the sim backend in tests). When on_race returns, the call returns
 * ZS_ERR_STATE. */
typedef enum zs__stream_check_mode {
    ZS__STREAM_CHECK_RETURN = 0,
    ZS__STREAM_CHECK_ABORT = 1
} zs__stream_check_mode;

/* Called without the checker's lock held, with the first report of the
 * call (its text valid during the call). */
typedef void (*zs__stream_check_race_fn)(void *arg, const char *report);

typedef struct zs__stream_check_options zs__stream_check_options;
struct zs__stream_check_options {
    zs__stream_check_mode mode;
    zs__stream_check_race_fn on_race; /* ABORT only; NULL: abort() */
    void *on_race_arg;
    /* 1: capture return addresses at every enqueue and host access (a few
     * microseconds each) for the reports; 0: the site strings alone. */
    int backtraces;
};

/* One byte range an op reads or writes: [addr, addr + bytes), device or host
 * memory alike. An empty range is ignored; one that wraps around the address
 * space is refused. An op that reads and writes the same bytes declares a
 * write (or both). */
typedef struct zs__stream_check_range {
    uintptr_t addr;
    size_t bytes;
    int write; /* 0: read, 1: write */
} zs__stream_check_range;

/* Creates a checker. options may be NULL (RETURN, no backtraces).
 * ZS_ERR_OUT_OF_MEMORY, or ZS_ERR_INTERNAL when no thread-specific key is
 * left. */
zs_status zs__stream_check_create(const zs__stream_check_options *options,
                                  zs__stream_check **out);

/* Frees the checker and its reports. No other thread may be inside or call
 * it again. NULL is a no-op. */
void zs__stream_check_destroy(zs__stream_check *chk);

/* Names the calling thread in reports ("comm engine"; copied). Registers
 * the thread when it is new. */
zs_status zs__stream_check_thread_name(zs__stream_check *chk, const char *name);

/* The calling thread enqueues op `op` (a short name: "copy", "quantize") on
 * `stream`; `site` (may be NULL) says where, for reports, and is copied.
 * ranges[0..nranges) are the bytes the op reads and writes (nranges >= 0;
 * ranges may be NULL when 0). *op_number (may be NULL) is the op's number
 * among the calling thread's ops on this stream, as reports count it.
 * Call it when the backend enqueues the op, in the queue's order. */
zs_status zs__stream_check_enqueue(zs__stream_check *chk, int stream, const char *op,
                                   const char *site, const zs__stream_check_range *ranges,
                                   int nranges, uint64_t *op_number);

/* The calling thread has waited for every op enqueued on `stream` so far
 * (call it after the wait returned). A stream with no op is a no-op. */
zs_status zs__stream_check_synchronize(zs__stream_check *chk, int stream);

/* The calling thread recorded the fence `key` on `stream` (marking every op
 * enqueued so far), replacing its previous record. */
zs_status zs__stream_check_fence_record(zs__stream_check *chk, int stream, const void *key);

/* The calling thread waited for the fence `key` (after the wait returned). */
zs_status zs__stream_check_fence_wait(zs__stream_check *chk, const void *key);

/* Host-to-host edges: release before the event that lets another thread go
 * on (a submit, an unlock, a signal), acquire after the matching wait. */
zs_status zs__stream_check_release(zs__stream_check *chk, const void *key);
zs_status zs__stream_check_acquire(zs__stream_check *chk, const void *key);

/* Drops what a fence or sync object key holds; call it when the object is
 * destroyed, since a later object at the same address is a new one. */
zs_status zs__stream_check_forget_key(zs__stream_check *chk, const void *key);

/* The calling thread reads (write = 0) or writes (write = 1) host memory
 * [addr, addr + bytes). what (may be NULL: "host read" / "host write")
 * names the access in reports. */
zs_status zs__stream_check_host_access(zs__stream_check *chk, uintptr_t addr, size_t bytes,
                                       int write, const char *what);

/* 1 when a host access (a write with write = 1, else a read) by the calling
 * thread to any byte of [addr, addr + bytes) would be ordered after every
 * access recorded there; 0 when some would race. Records and reports
 * nothing: the simulated device asks it before it lifts the protection of a
 * whole page for a host access to one byte of it. */
int zs__stream_check_host_ordered(zs__stream_check *chk, uintptr_t addr, size_t bytes,
                                  int write);

/* [addr, addr + bytes) was freed: its accesses are forgotten. Call it after
 * the last op on the memory completed, before the memory is reused. */
zs_status zs__stream_check_forget(zs__stream_check *chk, uintptr_t addr, size_t bytes);

/* Races found so far (every one counts; the first 1024 keep their text).
 * chk is not NULL, here and in the next two. */
size_t zs__stream_check_report_count(zs__stream_check *chk);

/* The text of report i (i < the count; NULL beyond the kept ones), valid
 * until the checker is destroyed. */
const char *zs__stream_check_report(zs__stream_check *chk, size_t i);

/* Segments of the range table (tests and debugging: merging keeps it small). */
size_t zs__stream_check_segment_count(zs__stream_check *chk);

#endif
