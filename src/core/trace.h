/* Per-rank timeline traces (trace.file, trace.capacity): spans recorded into
 * memory allocated at create, written as a Chrome / Perfetto "Trace Event
 * Format" JSON file that chrome://tracing, ui.perfetto.dev and
 * scripts/plot_trace.py open:
 *
 *   {"traceEvents": [
 *     {"name":"process_name","ph":"M","pid":R,"tid":0,"args":{"name":"rank R"}},
 *     {"name":"thread_name","ph":"M","pid":R,"tid":T,"args":{"name":"compute"}}, ...
 *     {"name":"backward","cat":"compute","ph":"X","ts":12.345,"dur":6.789,
 *      "pid":R,"tid":T,"args":{"unit":"h.3","op":"...","bytes":N,"seq":N,"queue_wait_us":1.5}},
 *     ...
 *     {"name":"zeroshard_trace","ph":"M","pid":R,"tid":0,"args":{"rank":R,
 *      "origin_unix_ns":N,"capacity":N,"dropped_events":N,"dropped_compute":N,...}}
 *   ], "displayTimeUnit": "ms"}
 *
 * pid is the rank, tid the track (zs__trace_track's value); ts and dur are in
 * microseconds with 3 decimals, ts relative to the moment of create, whose
 * wall-clock time is origin_unix_ns (CLOCK_REALTIME), so that a viewer can
 * line up the files of ranks created at slightly different moments (exactly
 * on one host, to the clocks' synchronization across hosts).
 *
 * Off costs nothing: an empty trace.file gives a NULL trace, and every
 * function accepts NULL and returns at once (the recording ones are inline
 * NULL checks in this header). On, recording a span copies about 128 bytes
 * into a slot allocated at create: no allocation, lock, system call or I/O.
 *
 * Threads. The track decides the ring an event goes to: ZS_TRACE_COMM into
 * the comm ring, ZS_TRACE_OPTIMIZER into the optimizer ring, the two others
 * into the main ring. Each ring has ONE recording thread at a time: in the
 * runtime, COMM events come only from the communication thread, OPTIMIZER
 * events only from the thread that runs the optimizer pass (the host
 * optimizer's worker with offload.overlap, else the main thread), and
 * COMPUTE and CHECKPOINT events only from the main thread, so the threads
 * record concurrently without locks. A
 * ring may change threads only across a synchronization (thread creation or
 * join, a mutex or queue hand-off); two threads recording into one ring at
 * the same moment is a bug, which the record path detects cheaply (a failed
 * compare-and-swap of the ring's count) and reports with ZS_ASSERT.
 *
 * Capacity. trace.capacity events per rank: half for the comm ring, an
 * eighth for the optimizer ring, the rest for the main ring. A full ring overwrites
 * its oldest events; flush counts the lost events per track, writes the counts
 * into the file's last metadata event and logs a warning that names
 * trace.capacity.
 *
 * Flushing. zs__trace_flush rewrites the whole file from what is in the rings
 * (the newest events; flushed events stay in memory), through a temporary file
 * renamed over the old one, so the file is valid JSON at every moment: after
 * create (no spans yet), after every flush (the runtime flushes at each
 * checkpoint) and after destroy. Flush reads the rings without locks, so it
 * must not run while any thread records: the caller flushes from the main
 * thread while the communication thread is idle, with a synchronization
 * between the comm thread's last record and the flush (the runtime's
 * wait-for-idle gives that). No fsync: a trace is a diagnostic, and the
 * rename alone already keeps a crashed process from leaving a torn file. */
#ifndef ZS_CORE_TRACE_H
#define ZS_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "zeroshard.h"

typedef struct zs__trace zs__trace;

/* Tracks are the rows of the timeline (the JSON's tid). */
typedef enum zs__trace_track {
    ZS_TRACE_COMPUTE = 0,    /* forward, backward, kernels: main thread */
    ZS_TRACE_COMM = 1,       /* collectives: the communication thread */
    ZS_TRACE_OPTIMIZER = 2,  /* the fused update, per unit: its own thread when offloaded */
    ZS_TRACE_CHECKPOINT = 3  /* save and load: main thread */
} zs__trace_track;

#define ZS_TRACE_TRACK_COUNT 4

/* Bytes kept of a unit label, its NUL included; longer labels are cut. */
#define ZS_TRACE_LABEL_BYTES 64

/* Which optional numbers of zs__trace_args are set (unit and op are set when
 * not NULL). */
enum {
    ZS_TRACE_HAS_BYTES = 1u << 0,
    ZS_TRACE_HAS_SEQ = 1u << 1,
    ZS_TRACE_HAS_QUEUE_WAIT = 1u << 2
};

/* Optional arguments of a span, shown under "args" in the file. Zero-filled
 * (ZS_TRACE_ARGS_INIT, or a designated initializer) means none. */
typedef struct zs__trace_args {
    const char *unit;       /* unit label; COPIED (first ZS_TRACE_LABEL_BYTES - 1 bytes); NULL = none */
    const char *op;         /* collective or operation name; must live until the trace is destroyed
                               (a string literal); NULL = none */
    uint64_t bytes;         /* bytes moved or touched (ZS_TRACE_HAS_BYTES) */
    int64_t seq;            /* the collective's sequence number (ZS_TRACE_HAS_SEQ) */
    uint64_t queue_wait_ns; /* ns between enqueue and start, for queued collectives
                               (ZS_TRACE_HAS_QUEUE_WAIT) */
    unsigned has;           /* ZS_TRACE_HAS_* bits */
    const char *group;      /* the collective's communicator group: "node" or "cross"
                               (comm.h's groups; another name is written as "other");
                               NULL = none (the world) */
} zs__trace_args;

#define ZS_TRACE_ARGS_INIT {NULL, NULL, 0, 0, 0, 0, NULL}

/* Creates the trace of `rank`, keeping capacity_events events in memory
 * (trace.capacity; at least 2). pattern is the file name pattern (trace.file:
 * %r rank, %p pid, %h host; see core/file_pattern.h); NULL or "" turns tracing
 * off: *out = NULL and ZS_OK. Otherwise the file is written at once with no
 * spans, so a path that cannot be written fails here (ZS_ERR_IO, naming the
 * file) rather than at the first checkpoint. The clock origin (ts = 0) is this
 * call. ZS_ERR_OUT_OF_MEMORY names the bytes. Synchronous; the caller owns
 * *out and destroys it. */
zs_status zs__trace_create(const char *pattern, int rank, size_t capacity_events,
                           zs__trace **out);

/* Flushes (a failure is logged as a warning, naming the file) and frees.
 * NULL is a no-op. Same rule as flush: no thread may be recording. */
void zs__trace_destroy(zs__trace *tr);

/* Rewrites the trace file with every event still in memory (see the top of
 * this header for the atomic rewrite and the threading rule). ZS_OK for NULL.
 * ZS_ERR_IO names the file and the system's reason; the previous file is then
 * left as it was. */
zs_status zs__trace_flush(zs__trace *tr);

/* zs__clock_ns() when tracing is on, 0 when tr is NULL: lets a caller take
 * its timestamps at no cost when tracing is off. */
static inline uint64_t zs__trace_clock(const zs__trace *tr) { return tr ? zs__clock_ns() : 0; }

/* The recording itself; call zs__trace_span. */
void zs__trace_record_(zs__trace *tr, zs__trace_track track, const char *name, uint64_t begin_ns,
                       uint64_t end_ns, const zs__trace_args *args);

/* Records a complete span [begin_ns, end_ns] (zs__clock_ns's clock) on
 * `track`. name must live until the trace is destroyed (a string literal): it
 * is kept by pointer. args may be NULL. Thread rule: see the top of this
 * header. Never fails; a full ring overwrites its oldest event. */
static inline void zs__trace_span(zs__trace *tr, zs__trace_track track, const char *name,
                                  uint64_t begin_ns, uint64_t end_ns, const zs__trace_args *args) {
    if (!tr) return;
    zs__trace_record_(tr, track, name, begin_ns, end_ns, args);
}

/* Events lost to overwriting so far on `track` (0 for NULL). */
uint64_t zs__trace_dropped(const zs__trace *tr, zs__trace_track track);

/* The file this trace writes ("" for NULL); lives as long as tr. */
const char *zs__trace_path(const zs__trace *tr);

/* Host bytes the trace holds (its event slots), for memory reports. */
size_t zs__trace_bytes(const zs__trace *tr);

#endif
