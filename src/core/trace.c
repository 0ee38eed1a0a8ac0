/* Per-rank timeline traces (see trace.h for the format, the thread rule and
 * the flush semantics). */
#include "core/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/file_pattern.h"
#include "core/log.h"
#include "core/memory.h"

/* One recorded span: 128 bytes, two to a typical 64-byte-line pair, so a
 * record touches at most two cache lines of the ring. */
typedef struct trace_event {
    uint64_t begin_ns;
    uint64_t end_ns;
    const char *name;       /* static lifetime (the caller's contract) */
    const char *op;         /* static lifetime or NULL */
    uint64_t bytes;
    int64_t seq;
    uint64_t queue_wait_ns;
    uint32_t has;           /* ZS_TRACE_HAS_* plus HAS_UNIT and the group (GROUP_SHIFT) */
    uint32_t track;
    char unit[ZS_TRACE_LABEL_BYTES];
} trace_event;

_Static_assert(sizeof(trace_event) == 128, "a trace event is two cache lines");

#define HAS_UNIT (1u << 8)

/* The communicator groups a span may name (zs__trace_args.group), kept as
 * an index in two bits of `has` so that an event stays 128 bytes: 0 none,
 * then these; a name not listed is written as "other". */
#define GROUP_SHIFT 9
static const char *const group_names[] = {NULL, "node", "cross", "other"};

static uint32_t group_index(const char *group) {
    if (!group) return 0;
    for (uint32_t i = 1; i < 3; i++)
        if (strcmp(group, group_names[i]) == 0) return i;
    return 3;
}

/* A single-writer ring. `next` and `dropped` belong to the writer; `count`
 * is release-stored by it after each event, so a flush that follows the
 * writer's last record (through any synchronization) sees whole events. */
typedef struct trace_ring {
    _Alignas(64) _Atomic uint64_t count; /* events ever recorded */
    trace_event *events;
    size_t capacity;
    size_t next;                          /* the slot the next event overwrites */
    uint64_t dropped[ZS_TRACE_TRACK_COUNT]; /* overwritten events, by their track */
} trace_ring;

enum { RING_MAIN = 0, RING_COMM = 1, RING_OPTIMIZER = 2, RING_COUNT = 3 };

struct zs__trace {
    trace_ring rings[RING_COUNT]; /* each on its own cache line: two writers never share one */
    trace_event *slots;           /* one allocation carved into the rings */
    size_t capacity;              /* trace.capacity as given */
    int rank;
    uint64_t origin_ns;           /* ts = 0 */
    uint64_t origin_unix_ns;      /* CLOCK_REALTIME at ts = 0: lines up the files of ranks */
    uint64_t dropped_reported;    /* drops already warned about */
    char path[4096];
};

static const char *const track_names[ZS_TRACE_TRACK_COUNT] = {"compute", "comm", "optimizer",
                                                              "checkpoint"};

/* How many bytes of s (at most max) to keep so that a multi-byte UTF-8
 * character is never cut in half: a cut label must still be valid text. */
static size_t utf8_prefix(const char *s, size_t max) {
    size_t n = strnlen(s, max);
    if (n < max || s[n] == '\0') return n;
    /* Cut inside the string: step back over continuation bytes to the start
     * of the character that would be split, and drop it. */
    size_t cut = n;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    return cut;
}

static _Noreturn void concurrent_writers(zs__trace_track track) {
    fprintf(stderr, "zeroshard: trace: two threads recorded into the %s ring at once; COMM spans "
                    "must come from one thread (the communication thread), OPTIMIZER spans "
                    "from one (the host optimizer's, or the main thread) and all other spans "
                    "from the main thread (src/core/trace.h)\n",
            track == ZS_TRACE_COMM ? "comm" : track == ZS_TRACE_OPTIMIZER ? "optimizer"
                                                                          : "main-thread");
    zs__assert_fail("one recording thread per trace ring", __FILE__, __LINE__);
}

void zs__trace_record_(zs__trace *tr, zs__trace_track track, const char *name, uint64_t begin_ns,
                       uint64_t end_ns, const zs__trace_args *args) {
    ZS_ASSERT((unsigned)track < ZS_TRACE_TRACK_COUNT);
    trace_ring *r = &tr->rings[track == ZS_TRACE_COMM        ? RING_COMM
                               : track == ZS_TRACE_OPTIMIZER ? RING_OPTIMIZER
                                                             : RING_MAIN];
    uint64_t count = atomic_load_explicit(&r->count, memory_order_relaxed);
    trace_event *e = &r->events[r->next];
    if (count >= r->capacity) r->dropped[e->track]++;
    e->begin_ns = begin_ns;
    e->end_ns = end_ns;
    e->name = name;
    e->track = (uint32_t)track;
    if (args) {
        e->op = args->op;
        e->bytes = args->bytes;
        e->seq = args->seq;
        e->queue_wait_ns = args->queue_wait_ns;
        e->has = args->has & (ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_SEQ | ZS_TRACE_HAS_QUEUE_WAIT);
        e->has |= group_index(args->group) << GROUP_SHIFT;
        if (args->unit) {
            size_t n = utf8_prefix(args->unit, ZS_TRACE_LABEL_BYTES - 1);
            memcpy(e->unit, args->unit, n);
            e->unit[n] = '\0';
            e->has |= HAS_UNIT;
        }
    } else {
        e->op = NULL;
        e->has = 0;
    }
    r->next = r->next + 1 == r->capacity ? 0 : r->next + 1;
    /* A compare-and-swap instead of a plain store: if another thread moved
     * the count meanwhile, two threads share this ring, which the thread
     * rule forbids; say so instead of writing torn events. */
    if (!atomic_compare_exchange_strong_explicit(&r->count, &count, count + 1,
                                                 memory_order_release, memory_order_relaxed))
        concurrent_writers(track);
}

/* ---- writing the file ---- */

/* Writes s as a JSON string: quotes, backslashes and control characters
 * escaped, and any byte that does not start a valid UTF-8 sequence replaced
 * by U+FFFD, so the file is valid JSON whatever bytes a label holds. */
static void put_string(FILE *f, const char *s) {
    putc('"', f);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        unsigned c = *p;
        if (c < 0x80) {
            switch (c) {
            case '"': fputs("\\\"", f); break;
            case '\\': fputs("\\\\", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default:
                if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
                else putc((int)c, f);
            }
            p++;
            continue;
        }
        /* The length of a well-formed UTF-8 sequence (RFC 3629): no overlong
         * forms, no surrogates, nothing above U+10FFFF. */
        size_t len = 0;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) len = 3;
        else if (c >= 0xF0 && c <= 0xF4) len = 4;
        int ok = len > 0;
        for (size_t i = 1; ok && i < len; i++) ok = (p[i] & 0xC0) == 0x80;
        if (ok && len == 3) {
            if (c == 0xE0 && p[1] < 0xA0) ok = 0;
            if (c == 0xED && p[1] > 0x9F) ok = 0;
        }
        if (ok && len == 4) {
            if (c == 0xF0 && p[1] < 0x90) ok = 0;
            if (c == 0xF4 && p[1] > 0x8F) ok = 0;
        }
        if (ok) {
            fwrite(p, 1, len, f);
            p += len;
        } else {
            fputs("\\ufffd", f);
            p++;
        }
    }
    putc('"', f);
}

/* Nanoseconds as microseconds with 3 decimals ("-1.250", "12.000"). */
static void put_us(FILE *f, int64_t ns) {
    uint64_t magnitude = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", magnitude / 1000, magnitude % 1000);
}

static void put_event(FILE *f, const zs__trace *tr, const trace_event *e) {
    fputs(",\n{\"name\":", f);
    put_string(f, e->name ? e->name : "?");
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", track_names[e->track]);
    put_us(f, (int64_t)(e->begin_ns - tr->origin_ns));
    fputs(",\"dur\":", f);
    put_us(f, e->end_ns > e->begin_ns ? (int64_t)(e->end_ns - e->begin_ns) : 0);
    fprintf(f, ",\"pid\":%d,\"tid\":%u,\"args\":{", tr->rank, e->track);
    const char *sep = "";
    if (e->has & HAS_UNIT) {
        fputs("\"unit\":", f);
        put_string(f, e->unit);
        sep = ",";
    }
    if (e->op) {
        fprintf(f, "%s\"op\":", sep);
        put_string(f, e->op);
        sep = ",";
    }
    const char *group = group_names[(e->has >> GROUP_SHIFT) & 3u];
    if (group) {
        fprintf(f, "%s\"group\":", sep);
        put_string(f, group);
        sep = ",";
    }
    if (e->has & ZS_TRACE_HAS_BYTES) {
        fprintf(f, "%s\"bytes\":%" PRIu64, sep, e->bytes);
        sep = ",";
    }
    if (e->has & ZS_TRACE_HAS_SEQ) {
        fprintf(f, "%s\"seq\":%" PRId64, sep, e->seq);
        sep = ",";
    }
    if (e->has & ZS_TRACE_HAS_QUEUE_WAIT) {
        fprintf(f, "%s\"queue_wait_us\":", sep);
        put_us(f, e->queue_wait_ns > INT64_MAX ? INT64_MAX : (int64_t)e->queue_wait_ns);
    }
    fputs("}}", f);
}

static void put_ring(FILE *f, const zs__trace *tr, const trace_ring *r) {
    uint64_t count = atomic_load_explicit(&r->count, memory_order_acquire);
    /* Oldest first: once the ring has wrapped, the oldest is the slot the
     * next event would overwrite. */
    size_t held = count < r->capacity ? (size_t)count : r->capacity;
    size_t first = count < r->capacity ? 0 : r->next;
    for (size_t i = 0; i < held; i++) {
        size_t k = first + i;
        if (k >= r->capacity) k -= r->capacity;
        put_event(f, tr, &r->events[k]);
    }
}

static void write_trace(FILE *f, const zs__trace *tr, const uint64_t dropped[ZS_TRACE_TRACK_COUNT],
                        uint64_t dropped_total) {
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"rank %d\"}}",
            tr->rank, tr->rank);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}}",
            tr->rank, tr->rank);
    for (int t = 0; t < ZS_TRACE_TRACK_COUNT; t++) {
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s\"}}",
                tr->rank, t, track_names[t]);
        fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"sort_index\":%d}}",
                tr->rank, t, t);
    }
    for (int i = 0; i < RING_COUNT; i++) put_ring(f, tr, &tr->rings[i]);
    fprintf(f, ",\n{\"name\":\"zeroshard_trace\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
               "\"rank\":%d,\"origin_unix_ns\":%" PRIu64 ",\"capacity\":%zu,"
               "\"dropped_events\":%" PRIu64,
            tr->rank, tr->rank, tr->origin_unix_ns, tr->capacity, dropped_total);
    for (int t = 0; t < ZS_TRACE_TRACK_COUNT; t++)
        fprintf(f, ",\"dropped_%s\":%" PRIu64, track_names[t], dropped[t]);
    fputs("}}\n],\"displayTimeUnit\":\"ms\"}\n", f);
}

zs_status zs__trace_flush(zs__trace *tr) {
    if (!tr) return ZS_OK;
    uint64_t dropped[ZS_TRACE_TRACK_COUNT] = {0};
    uint64_t dropped_total = 0;
    for (int i = 0; i < RING_COUNT; i++)
        for (int t = 0; t < ZS_TRACE_TRACK_COUNT; t++) dropped[t] += tr->rings[i].dropped[t];
    for (int t = 0; t < ZS_TRACE_TRACK_COUNT; t++) dropped_total += dropped[t];

    /* The temporary name carries the pid, so ranks that (against advice)
     * share one file name never write into each other's temporary file. */
    char tmp[sizeof tr->path + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", tr->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return zs__fail(ZS_ERR_IO, "cannot write the trace file '%s' (trace.file) on rank %d: "
                                   "creating '%s' failed: %s; check that its directory exists "
                                   "and is writable",
                        tr->path, tr->rank, tmp, strerror(errno));
    write_trace(f, tr, dropped, dropped_total);
    int write_error = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && !write_error) write_error = errno;
    if (write_error) {
        unlink(tmp);
        return zs__fail(ZS_ERR_IO, "writing the trace file '%s' (trace.file), rank %d, failed: %s",
                        tmp, tr->rank, strerror(write_error ? write_error : EIO));
    }
    if (rename(tmp, tr->path) != 0) {
        int e = errno;
        unlink(tmp);
        return zs__fail(ZS_ERR_IO, "cannot rename '%s' to the trace file '%s' (trace.file), "
                                   "rank %d: %s",
                        tmp, tr->path, tr->rank, strerror(e));
    }
    if (dropped_total > tr->dropped_reported) {
        ZS_WARN("trace: %" PRIu64 " events were overwritten (compute %" PRIu64 ", comm %" PRIu64
                ", optimizer %" PRIu64 ", checkpoint %" PRIu64 "): trace.capacity = %zu keeps "
                "%zu comm, %zu optimizer and %zu other events; '%s' holds the newest ones; "
                "raise trace.capacity to keep more",
                dropped_total, dropped[0], dropped[1], dropped[2], dropped[3], tr->capacity,
                tr->rings[RING_COMM].capacity, tr->rings[RING_OPTIMIZER].capacity,
                tr->rings[RING_MAIN].capacity, tr->path);
        tr->dropped_reported = dropped_total;
    }
    return ZS_OK;
}

zs_status zs__trace_create(const char *pattern, int rank, size_t capacity_events,
                           zs__trace **out) {
    *out = NULL;
    if (!pattern || !*pattern) return ZS_OK;
    if (capacity_events < 3)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "trace capacity %zu is too small: it needs at least 3 events (one per "
                        "ring); trace.capacity is at least 1024",
                        capacity_events);
    size_t bytes;
    if (!zs__mul_size(capacity_events, sizeof(trace_event), &bytes))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "trace.capacity = %zu events overflows a size",
                        capacity_events);
    zs__trace *tr = zs__aligned_alloc(64, sizeof *tr);
    if (!tr)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "cannot allocate the trace of rank %d (%zu bytes)",
                        rank, sizeof *tr);
    memset(tr, 0, sizeof *tr);
    tr->capacity = capacity_events;
    tr->rank = rank;
    size_t needed = zs__file_pattern_expand(pattern, rank, tr->path, sizeof tr->path);
    if (needed >= sizeof tr->path) {
        free(tr);
        return zs__fail(ZS_ERR_CONFIG,
                        "trace.file = \"%s\" expands to %zu bytes on rank %d; a path may have at "
                        "most %zu; use a shorter pattern",
                        pattern, needed, rank, sizeof tr->path - 1);
    }
    /* Allocated and touched here, so that recording never page-faults. */
    tr->slots = zs__aligned_alloc(64, bytes);
    if (!tr->slots) {
        free(tr);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "cannot allocate %zu bytes for trace.capacity = %zu events on rank %d; "
                        "lower trace.capacity",
                        bytes, capacity_events, rank);
    }
    memset(tr->slots, 0, bytes);
    /* Half for the comm track, an eighth (at least one) for the optimizer's
     * (a span per unit and step), the rest for the main thread's tracks. */
    const size_t comm = capacity_events / 2;
    const size_t optimizer = capacity_events / 8 > 0 ? capacity_events / 8 : 1;
    const size_t main_events = capacity_events - comm - optimizer;
    tr->rings[RING_MAIN].events = tr->slots;
    tr->rings[RING_MAIN].capacity = main_events;
    tr->rings[RING_COMM].events = tr->slots + main_events;
    tr->rings[RING_COMM].capacity = comm;
    tr->rings[RING_OPTIMIZER].events = tr->slots + main_events + comm;
    tr->rings[RING_OPTIMIZER].capacity = optimizer;
    for (int i = 0; i < RING_COUNT; i++) atomic_init(&tr->rings[i].count, 0);
    struct timespec unix_now;
    clock_gettime(CLOCK_REALTIME, &unix_now);
    tr->origin_ns = zs__clock_ns();
    tr->origin_unix_ns = (uint64_t)unix_now.tv_sec * 1000000000u + (uint64_t)unix_now.tv_nsec;
    zs_status st = zs__trace_flush(tr);
    if (st != ZS_OK) {
        free(tr->slots);
        free(tr);
        return st;
    }
    *out = tr;
    return ZS_OK;
}

void zs__trace_destroy(zs__trace *tr) {
    if (!tr) return;
    if (zs__trace_flush(tr) != ZS_OK)
        ZS_WARN("trace: the last flush failed, the trace file keeps the previous flush: %s",
                zs_last_error());
    free(tr->slots);
    free(tr);
}

uint64_t zs__trace_dropped(const zs__trace *tr, zs__trace_track track) {
    if (!tr || (unsigned)track >= ZS_TRACE_TRACK_COUNT) return 0;
    uint64_t dropped = 0;
    for (int i = 0; i < RING_COUNT; i++) dropped += tr->rings[i].dropped[track];
    return dropped;
}

const char *zs__trace_path(const zs__trace *tr) { return tr ? tr->path : ""; }

size_t zs__trace_bytes(const zs__trace *tr) {
    return tr ? tr->capacity * sizeof(trace_event) + sizeof *tr : 0;
}
