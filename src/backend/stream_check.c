/* The stream-order checker: vector clocks over host threads and sub-streams,
 * and a table of byte ranges with their last write and latest reads. The
 * model is described in stream_check.h. */
#include "backend/stream_check.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/text_append.h"

#define MAX_ACTORS ZS__STREAM_CHECK_MAX_ACTORS
/* Return addresses kept per access: enough to reach the program through a
 * backend's own layers. */
#define FRAMES 8
#define KEPT_REPORTS 1024
#define REPORT_CAPACITY 4096
/* Earlier accesses one declared range reports at most: one race is enough
 * to act on, and a long list would hide it. */
#define REPORTS_PER_RANGE 8

typedef struct vclock {
    uint64_t done[MAX_ACTORS];
    uint64_t enq[MAX_ACTORS];
} vclock;

typedef struct actor {
    int is_sub;   /* 0: a host thread; 1: a sub-stream */
    int thread;   /* sub-stream: the actor of its enqueuing thread */
    int stream;   /* sub-stream: its stream */
    uint64_t ops; /* sub-stream: ops enqueued so far */
    int number;   /* thread: 0, 1, ... in the order threads first called */
    char *name;   /* thread: set by thread_name, or NULL */
    vclock clock; /* thread: what it knows */
} actor;

/* The join of the completion clocks of every op enqueued on a stream so far:
 * what a wait for the whole queue gives. */
typedef struct stream_state {
    int id;
    vclock done;
} stream_state;

/* A fence's last record, or a sync object's released clocks. */
typedef struct keyed {
    const void *key;
    vclock clock;
} keyed;

/* One declared access (an op's, with all its ranges, or a host access),
 * shared by the segments that refer to it. */
typedef struct access_rec {
    int refs;
    int actor;      /* whose done component orders it */
    uint64_t stamp; /* that component at the access */
    int thread;     /* the thread that enqueued or performed it */
    int is_op;
    int stream;
    uint64_t op_number;
    char *what;
    char *site; /* or NULL */
    int nframes;
    void *frames[FRAMES];
    int nranges;
    zs__stream_check_range ranges[];
} access_rec;

typedef struct entry {
    access_rec *rec; /* NULL: none */
    int range;       /* which of rec's ranges */
} entry;

/* [lo, hi): its last write and the reads since, one per actor, sorted by
 * actor so that equal segments compare equal entry by entry. */
typedef struct segment {
    uintptr_t lo, hi;
    entry write;
    entry *reads;
    int nreads, capreads;
} segment;

struct zs__stream_check {
    zs__stream_check_options opt;
    pthread_key_t self; /* the calling thread's actor + 1 */
    pthread_mutex_t mu;
    actor actors[MAX_ACTORS];
    int nactors, nthreads;
    stream_state *streams;
    int nstreams;
    keyed *keys;
    int nkeys, capkeys;
    segment *segs; /* sorted, disjoint */
    size_t nsegs, capsegs;
    char **reports; /* KEPT_REPORTS slots */
    size_t nreports;
};

/* What one call found, reported after the lock is released. */
typedef struct call_ctx {
    int races;
    char first[REPORT_CAPACITY];
} call_ctx;

static const char lost_report[] = "(report text lost: out of memory)";

static void vc_join(vclock *dst, const vclock *src, int n) {
    for (int a = 0; a < n; a++) {
        if (src->done[a] > dst->done[a]) dst->done[a] = src->done[a];
        if (src->enq[a] > dst->enq[a]) dst->enq[a] = src->enq[a];
    }
}

/* ---- actors, streams, keys (called with the lock held) ---- */

static zs_status new_actor(zs__stream_check *chk, int *out) {
    if (chk->nactors == MAX_ACTORS)
        return zs__fail(ZS_ERR_UNSUPPORTED,
                        "stream-order check: more than %d actors (host threads and (stream, "
                        "enqueuing thread) pairs) in one checker; use fewer streams or threads",
                        MAX_ACTORS);
    *out = chk->nactors++;
    return ZS_OK;
}

static zs_status self_actor(zs__stream_check *chk, int *out) {
    intptr_t v = (intptr_t)pthread_getspecific(chk->self);
    if (v > 0) {
        *out = (int)v - 1;
        return ZS_OK;
    }
    int a = -1;
    ZS_CHECK(new_actor(chk, &a));
    if (pthread_setspecific(chk->self, (void *)(intptr_t)(a + 1)) != 0) {
        chk->nactors--;
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: cannot register a thread");
    }
    chk->actors[a].number = chk->nthreads++;
    *out = a;
    return ZS_OK;
}

static zs_status sub_stream(zs__stream_check *chk, int stream, int thread, int *out) {
    for (int a = 0; a < chk->nactors; a++) {
        const actor *x = &chk->actors[a];
        if (x->is_sub && x->stream == stream && x->thread == thread) {
            *out = a;
            return ZS_OK;
        }
    }
    ZS_CHECK(new_actor(chk, out));
    actor *x = &chk->actors[*out];
    x->is_sub = 1;
    x->stream = stream;
    x->thread = thread;
    return ZS_OK;
}

static stream_state *find_stream(zs__stream_check *chk, int id) {
    for (int i = 0; i < chk->nstreams; i++)
        if (chk->streams[i].id == id) return &chk->streams[i];
    return NULL;
}

static zs_status stream_for(zs__stream_check *chk, int id, stream_state **out) {
    *out = find_stream(chk, id);
    if (*out) return ZS_OK;
    stream_state *grown = zs__realloc(chk->streams, (size_t)(chk->nstreams + 1) * sizeof *grown);
    if (!grown) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for a stream");
    chk->streams = grown;
    *out = &grown[chk->nstreams++];
    memset(*out, 0, sizeof **out);
    (*out)->id = id;
    return ZS_OK;
}

static keyed *find_key(zs__stream_check *chk, const void *key) {
    for (int i = 0; i < chk->nkeys; i++)
        if (chk->keys[i].key == key) return &chk->keys[i];
    return NULL;
}

static zs_status key_for(zs__stream_check *chk, const void *key, keyed **out) {
    *out = find_key(chk, key);
    if (*out) return ZS_OK;
    if (chk->nkeys == chk->capkeys) {
        int cap = chk->capkeys ? 2 * chk->capkeys : 8;
        keyed *grown = zs__realloc(chk->keys, (size_t)cap * sizeof *grown);
        if (!grown)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                            "stream-order check: no memory for a sync object");
        chk->keys = grown;
        chk->capkeys = cap;
    }
    *out = &chk->keys[chk->nkeys++];
    memset(*out, 0, sizeof **out);
    (*out)->key = key;
    return ZS_OK;
}

/* The clock of an op the thread enqueues on `stream` now: its own clock,
 * and every op of the stream whose enqueue it knows of as completed. */
static void op_start(const zs__stream_check *chk, int thread, int stream, vclock *out) {
    *out = chk->actors[thread].clock;
    for (int a = 0; a < chk->nactors; a++) {
        const actor *x = &chk->actors[a];
        if (x->is_sub && x->stream == stream && out->enq[a] > out->done[a])
            out->done[a] = out->enq[a];
    }
}

/* ---- access records ---- */

static access_rec *rec_new(const char *what, const char *site,
                           const zs__stream_check_range *ranges, int nranges,
                           void *const *frames, int nframes) {
    access_rec *r = zs__calloc(1, sizeof *r + (size_t)nranges * sizeof r->ranges[0]);
    if (!r) return NULL;
    r->refs = 1;
    r->what = zs__strdup(what);
    r->site = site ? zs__strdup(site) : NULL;
    if (!r->what || (site && !r->site)) {
        free(r->what);
        free(r->site);
        free(r);
        return NULL;
    }
    if (nranges > 0) memcpy(r->ranges, ranges, (size_t)nranges * sizeof r->ranges[0]);
    r->nranges = nranges;
    memcpy(r->frames, frames, (size_t)nframes * sizeof frames[0]);
    r->nframes = nframes;
    return r;
}

static void rec_put(access_rec *r) {
    if (r && --r->refs == 0) {
        free(r->what);
        free(r->site);
        free(r);
    }
}

static entry entry_ref(entry e) {
    if (e.rec) e.rec->refs++;
    return e;
}

/* ---- reports ---- */

static void thread_label(const zs__stream_check *chk, int t, char *out, size_t cap) {
    if (chk->actors[t].name)
        snprintf(out, cap, "\"%s\"", chk->actors[t].name);
    else
        snprintf(out, cap, "%d", chk->actors[t].number);
}

/* Where the access was made: the caller's site, then the captured frames
 * without their absolute addresses (which change with every run). */
static void append_where(char *out, size_t cap, size_t *used, const access_rec *r) {
    if (r->site) zs__text_append(out, cap, used, "%s", r->site);
    char **names = r->nframes > 0 ? backtrace_symbols(r->frames, r->nframes) : NULL;
    if (!names) {
        if (!r->site) zs__text_append(out, cap, used, "an unknown site");
        return;
    }
    zs__text_append(out, cap, used, "%s", r->site ? ", called from " : "");
    for (int i = 0; i < r->nframes; i++) {
        const char *name = names[i];
        const char *bracket = strrchr(name, '[');
        int len = bracket ? (int)(bracket - name) : (int)strlen(name);
        while (len > 0 && name[len - 1] == ' ') len--;
        zs__text_append(out, cap, used, "%s%.*s", i ? " <- " : "", len, name);
    }
    free(names);
}

static void append_access(const zs__stream_check *chk, char *out, size_t cap, size_t *used,
                          const access_rec *r, int range) {
    char who[80];
    thread_label(chk, r->thread, who, sizeof who);
    if (r->is_op)
        zs__text_append(out, cap, used, "\"%s\" (op #%llu of thread %s on stream %d, enqueued at ",
                        r->what, (unsigned long long)r->op_number, who, r->stream);
    else
        zs__text_append(out, cap, used, "\"%s\" (by the host thread %s, at ", r->what, who);
    append_where(out, cap, used, r);
    const zs__stream_check_range *g = &r->ranges[range];
    zs__text_append(out, cap, used, ") %s [0x%llx+%llu)", g->write ? "writes" : "reads",
                    (unsigned long long)g->addr, (unsigned long long)g->bytes);
}

/* What would order an earlier access e before a later one l. */
static void append_advice(const zs__stream_check *chk, char *out, size_t cap, size_t *used,
                          const access_rec *e, const access_rec *l) {
    char ew[80], lw[80];
    thread_label(chk, e->thread, ew, sizeof ew);
    thread_label(chk, l->thread, lw, sizeof lw);
    if (e->is_op && !l->is_op)
        zs__text_append(out, cap, used,
                        "the host thread %s must wait for \"%s\" (a fence recorded after it, or "
                        "synchronize of stream %d) before this access",
                        lw, e->what, e->stream);
    else if (!e->is_op && l->is_op)
        zs__text_append(out, cap, used,
                        "the enqueue of \"%s\" must be ordered after the host thread %s's access "
                        "(thread %s releases a sync object after it and thread %s acquires it "
                        "before enqueuing)",
                        l->what, ew, ew, lw);
    else if (e->is_op && e->stream == l->stream)
        zs__text_append(out, cap, used,
                        "the two enqueues onto stream %d race, so the queue's order between them "
                        "is not the program's: thread %s must release a sync object after "
                        "enqueuing \"%s\" and thread %s acquire it before enqueuing \"%s\", or "
                        "thread %s wait for a fence recorded after \"%s\"",
                        e->stream, ew, e->what, lw, l->what, lw, e->what);
    else if (e->is_op)
        zs__text_append(out, cap, used,
                        "ops on different streams are ordered only through the host: thread %s "
                        "must wait for \"%s\" (a fence recorded after it, or synchronize of "
                        "stream %d) before enqueuing \"%s\"",
                        lw, e->what, e->stream, l->what);
    else
        zs__text_append(out, cap, used,
                        "the host thread %s must release a sync object after its access and the "
                        "host thread %s acquire it before this one",
                        ew, lw);
}

/* Reports a later access conflicting with an earlier one in bytes [lo, hi). */
static void report(zs__stream_check *chk, entry earlier, const access_rec *later, int range,
                   uintptr_t lo, uintptr_t hi, call_ctx *cx) {
    char text[REPORT_CAPACITY];
    size_t used = 0;
    zs__text_append(text, sizeof text, &used, "stream-order check: ");
    append_access(chk, text, sizeof text, &used, earlier.rec, earlier.range);
    zs__text_append(text, sizeof text, &used, " and then ");
    append_access(chk, text, sizeof text, &used, later, range);
    const zs__stream_check_range *a = &earlier.rec->ranges[earlier.range];
    const zs__stream_check_range *b = &later->ranges[range];
    if ((lo != a->addr || hi - lo != a->bytes) && (lo != b->addr || hi - lo != b->bytes))
        zs__text_append(text, sizeof text, &used, " (conflicting in [0x%llx+%llu))",
                        (unsigned long long)lo, (unsigned long long)(hi - lo));
    zs__text_append(text, sizeof text, &used, ", with nothing ordering the two: ");
    append_advice(chk, text, sizeof text, &used, earlier.rec, later);
    if (chk->nreports < KEPT_REPORTS) {
        char *kept = zs__strdup(text);
        chk->reports[chk->nreports] = kept ? kept : (char *)lost_report;
    }
    chk->nreports++;
    if (cx->races++ == 0) memcpy(cx->first, text, sizeof text);
}

/* ---- the range table (called with the lock held) ---- */

static zs_status table_full(void) {
    return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for the range table");
}

/* The index of the first segment that ends after x. */
static size_t seg_after(const zs__stream_check *chk, uintptr_t x) {
    size_t lo = 0, hi = chk->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (chk->segs[mid].hi <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static zs_status seg_insert(zs__stream_check *chk, size_t at, const segment *s) {
    if (chk->nsegs == chk->capsegs) {
        size_t cap = chk->capsegs ? 2 * chk->capsegs : 64;
        segment *grown = zs__realloc(chk->segs, cap * sizeof *grown);
        if (!grown)
            return table_full();
        chk->segs = grown;
        chk->capsegs = cap;
    }
    memmove(&chk->segs[at + 1], &chk->segs[at], (chk->nsegs - at) * sizeof *chk->segs);
    chk->segs[at] = *s;
    chk->nsegs++;
    return ZS_OK;
}

static void seg_clear(segment *s) {
    rec_put(s->write.rec);
    for (int i = 0; i < s->nreads; i++) rec_put(s->reads[i].rec);
    free(s->reads);
}

static void seg_remove(zs__stream_check *chk, size_t at, size_t count) {
    for (size_t i = at; i < at + count; i++) seg_clear(&chk->segs[i]);
    memmove(&chk->segs[at], &chk->segs[at + count],
            (chk->nsegs - at - count) * sizeof *chk->segs);
    chk->nsegs -= count;
}

/* Splits the segment holding x strictly inside it into two at x. */
static zs_status seg_split(zs__stream_check *chk, uintptr_t x) {
    size_t i = seg_after(chk, x);
    if (i == chk->nsegs || chk->segs[i].lo >= x) return ZS_OK;
    segment copy = chk->segs[i];
    copy.lo = x;
    copy.capreads = copy.nreads;
    copy.reads = NULL;
    if (copy.nreads > 0) {
        copy.reads = zs__malloc((size_t)copy.nreads * sizeof *copy.reads);
        if (!copy.reads)
            return table_full();
        memcpy(copy.reads, chk->segs[i].reads, (size_t)copy.nreads * sizeof *copy.reads);
    }
    zs_status st = seg_insert(chk, i + 1, &copy);
    if (st != ZS_OK) {
        free(copy.reads);
        return st;
    }
    chk->segs[i].hi = x;
    entry_ref(copy.write);
    for (int r = 0; r < copy.nreads; r++) entry_ref(copy.reads[r]);
    return ZS_OK;
}

/* Makes segments tile [lo, hi) exactly (splitting at both ends, filling gaps
 * with empty segments); they are segs[*first .. *end). */
static zs_status seg_cover(zs__stream_check *chk, uintptr_t lo, uintptr_t hi, size_t *first,
                           size_t *end) {
    ZS_CHECK(seg_split(chk, lo));
    ZS_CHECK(seg_split(chk, hi));
    size_t i = seg_after(chk, lo);
    *first = i;
    for (uintptr_t pos = lo; pos < hi;) {
        if (i < chk->nsegs && chk->segs[i].lo == pos) {
            pos = chk->segs[i++].hi;
            continue;
        }
        uintptr_t gap_end = i < chk->nsegs && chk->segs[i].lo < hi ? chk->segs[i].lo : hi;
        segment gap = {.lo = pos, .hi = gap_end};
        ZS_CHECK(seg_insert(chk, i++, &gap));
        pos = gap_end;
    }
    *end = i;
    return ZS_OK;
}

static int entry_eq(entry a, entry b) { return a.rec == b.rec && a.range == b.range; }

static int seg_same(const segment *a, const segment *b) {
    if (a->hi != b->lo || !entry_eq(a->write, b->write) || a->nreads != b->nreads) return 0;
    for (int i = 0; i < a->nreads; i++)
        if (!entry_eq(a->reads[i], b->reads[i])) return 0;
    return 1;
}

/* Merges equal neighbours among segs[first - 1 .. end], and drops empty
 * segments there, so that the table stays as small as the accesses allow. */
static void seg_merge(zs__stream_check *chk, size_t first, size_t end) {
    size_t i = first > 0 ? first - 1 : 0;
    size_t stop = end + 1; /* one past the last segment looked at */
    while (i < stop && i < chk->nsegs) {
        segment *s = &chk->segs[i];
        if (!s->write.rec && s->nreads == 0) {
            seg_remove(chk, i, 1);
            stop--;
        } else if (i + 1 < stop && i + 1 < chk->nsegs && seg_same(s, &chk->segs[i + 1])) {
            s->hi = chk->segs[i + 1].hi;
            seg_remove(chk, i + 1, 1);
            stop--;
        } else {
            i++;
        }
    }
}

static void seg_put_read(segment *s, entry e) {
    int at = 0;
    while (at < s->nreads && s->reads[at].rec->actor < e.rec->actor) at++;
    if (at < s->nreads && s->reads[at].rec->actor == e.rec->actor) {
        rec_put(s->reads[at].rec);
    } else {
        memmove(&s->reads[at + 1], &s->reads[at], (size_t)(s->nreads - at) * sizeof *s->reads);
        s->nreads++;
    }
    s->reads[at] = entry_ref(e);
}

static zs_status seg_reserve_read(segment *s) {
    if (s->nreads < s->capreads) return ZS_OK;
    int cap = s->capreads ? 2 * s->capreads : 2;
    entry *grown = zs__realloc(s->reads, (size_t)cap * sizeof *grown);
    if (!grown)
        return table_full();
    s->reads = grown;
    s->capreads = cap;
    return ZS_OK;
}

/* An earlier access that a later one conflicts with, unordered, and the
 * span of the bytes where they conflict. */
typedef struct conflict {
    entry earlier;
    uintptr_t lo, hi;
} conflict;

/* Notes `earlier` over segment s unless it is the same access or clock c is
 * ordered after it; up to REPORTS_PER_RANGE earlier accesses per range. */
static void note_conflict(entry earlier, const access_rec *later, const segment *s,
                          const vclock *c, conflict *found, int *nfound) {
    if (earlier.rec == later || c->done[earlier.rec->actor] >= earlier.rec->stamp) return;
    for (int i = 0; i < *nfound; i++)
        if (entry_eq(found[i].earlier, earlier)) {
            found[i].hi = s->hi;
            return;
        }
    if (*nfound < REPORTS_PER_RANGE) found[(*nfound)++] = (conflict){earlier, s->lo, s->hi};
}

/* Checks range `range` of rec, made with clock c, against the table, then
 * records it. */
static zs_status access_range(zs__stream_check *chk, access_rec *rec, int range, const vclock *c,
                              call_ctx *cx) {
    const zs__stream_check_range *g = &rec->ranges[range];
    if (g->bytes == 0) return ZS_OK;
    size_t first, end;
    ZS_CHECK(seg_cover(chk, g->addr, g->addr + g->bytes, &first, &end));
    if (!g->write)
        for (size_t i = first; i < end; i++) ZS_CHECK(seg_reserve_read(&chk->segs[i]));
    conflict found[REPORTS_PER_RANGE];
    int nfound = 0;
    for (size_t i = first; i < end; i++) {
        const segment *s = &chk->segs[i];
        if (s->write.rec) note_conflict(s->write, rec, s, c, found, &nfound);
        if (g->write)
            for (int r = 0; r < s->nreads; r++)
                note_conflict(s->reads[r], rec, s, c, found, &nfound);
    }
    for (int i = 0; i < nfound; i++)
        report(chk, found[i].earlier, rec, range, found[i].lo, found[i].hi, cx);
    entry self = {rec, range};
    for (size_t i = first; i < end; i++) {
        segment *s = &chk->segs[i];
        if (g->write) {
            for (int r = 0; r < s->nreads; r++) rec_put(s->reads[r].rec);
            s->nreads = 0;
            rec_put(s->write.rec);
            s->write = entry_ref(self);
        } else {
            seg_put_read(s, self);
        }
    }
    seg_merge(chk, first, end);
    return ZS_OK;
}

/* ---- the interface ---- */

/* The return addresses of the public function's caller and above. */
__attribute__((noinline)) static int capture(const zs__stream_check *chk, void **frames) {
    if (!chk->opt.backtraces) return 0;
    void *all[FRAMES + 2];
    int n = backtrace(all, FRAMES + 2);
    /* Frame 0 is this function and frame 1 the checker's entry point. */
    if (n <= 2) return 0;
    memcpy(frames, all + 2, (size_t)(n - 2) * sizeof *frames);
    return n - 2;
}

/* Ends a call that held the lock: a race becomes the call's status, after an
 * abort or the caller's callback in ABORT mode. */
static zs_status finish(const zs__stream_check *chk, zs_status status, const call_ctx *cx) {
    if (cx->races == 0) return status;
    if (chk->opt.mode == ZS__STREAM_CHECK_ABORT) {
        if (!chk->opt.on_race) {
            fprintf(stderr, "zeroshard: %s\n", cx->first);
            abort();
        }
        chk->opt.on_race(chk->opt.on_race_arg, cx->first);
    }
    return status != ZS_OK ? status : zs__fail(ZS_ERR_STATE, "%s", cx->first);
}

static zs_status check_range_arg(const char *fn, uintptr_t addr, size_t bytes) {
    if (bytes > UINTPTR_MAX - addr)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: range [0x%llx+%llu) wraps around the address space", fn,
                        (unsigned long long)addr, (unsigned long long)bytes);
    return ZS_OK;
}

zs_status zs__stream_check_create(const zs__stream_check_options *options,
                                  zs__stream_check **out) {
    if (!out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_create: out is NULL");
    *out = NULL;
    zs__stream_check *chk = zs__calloc(1, sizeof *chk);
    char **reports = zs__calloc(KEPT_REPORTS, sizeof *reports);
    if (!chk || !reports) {
        free(chk);
        free(reports);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for a checker");
    }
    if (pthread_key_create(&chk->self, NULL) != 0) {
        free(chk);
        free(reports);
        return zs__fail(ZS_ERR_INTERNAL, "stream-order check: no thread-specific key is left");
    }
    if (options) chk->opt = *options;
    chk->reports = reports;
    pthread_mutex_init(&chk->mu, NULL);
    /* backtrace() loads its unwinder on first use; do it here rather than
     * inside an enqueue or a fault handler. */
    if (chk->opt.backtraces) {
        void *warm[2];
        backtrace(warm, 2);
    }
    *out = chk;
    return ZS_OK;
}

void zs__stream_check_destroy(zs__stream_check *chk) {
    if (!chk) return;
    seg_remove(chk, 0, chk->nsegs);
    free(chk->segs);
    for (int a = 0; a < chk->nactors; a++) free(chk->actors[a].name);
    free(chk->streams);
    free(chk->keys);
    size_t kept = chk->nreports < KEPT_REPORTS ? chk->nreports : KEPT_REPORTS;
    for (size_t i = 0; i < kept; i++)
        if (chk->reports[i] != lost_report) free(chk->reports[i]);
    free(chk->reports);
    pthread_mutex_destroy(&chk->mu);
    pthread_key_delete(chk->self);
    free(chk);
}

zs_status zs__stream_check_thread_name(zs__stream_check *chk, const char *name) {
    if (!chk || !name)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_thread_name: NULL argument");
    char *copy = zs__strdup(name);
    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for a name");
    pthread_mutex_lock(&chk->mu);
    int t = -1;
    zs_status st = self_actor(chk, &t);
    if (st == ZS_OK) {
        free(chk->actors[t].name);
        chk->actors[t].name = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&chk->mu);
    free(copy);
    return st;
}

/* The part of an enqueue under the lock: the op's clocks, then its ranges. */
static zs_status record_op(zs__stream_check *chk, int stream, access_rec *rec, call_ctx *cx) {
    int t = -1, a = -1;
    stream_state *ss;
    ZS_CHECK(self_actor(chk, &t));
    ZS_CHECK(sub_stream(chk, stream, t, &a));
    ZS_CHECK(stream_for(chk, stream, &ss));
    actor *self = &chk->actors[t];
    self->clock.done[t]++;
    uint64_t number = ++chk->actors[a].ops;
    vclock start;
    op_start(chk, t, stream, &start);
    self->clock.enq[a] = number;
    rec->actor = a;
    rec->stamp = number;
    rec->thread = t;
    rec->is_op = 1;
    rec->stream = stream;
    rec->op_number = number;
    /* The stream's completion clock: this op's start, and the op itself. */
    vc_join(&ss->done, &start, chk->nactors);
    ss->done.done[a] = ss->done.enq[a] = number;
    for (int i = 0; i < rec->nranges; i++) ZS_CHECK(access_range(chk, rec, i, &start, cx));
    return ZS_OK;
}

zs_status zs__stream_check_enqueue(zs__stream_check *chk, int stream, const char *op,
                                   const char *site, const zs__stream_check_range *ranges,
                                   int nranges, uint64_t *op_number) {
    if (!chk || !op || nranges < 0 || (nranges > 0 && !ranges))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_enqueue: NULL checker, op "
                                                 "name or ranges, or nranges < 0");
    for (int i = 0; i < nranges; i++)
        ZS_CHECK(check_range_arg("zs__stream_check_enqueue", ranges[i].addr, ranges[i].bytes));
    void *frames[FRAMES];
    int nframes = capture(chk, frames);
    access_rec *rec = rec_new(op, site, ranges, nranges, frames, nframes);
    if (!rec)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for op \"%s\"", op);
    call_ctx cx;
    cx.races = 0;
    pthread_mutex_lock(&chk->mu);
    zs_status st = record_op(chk, stream, rec, &cx);
    if (op_number) *op_number = rec->op_number;
    rec_put(rec);
    pthread_mutex_unlock(&chk->mu);
    return finish(chk, st, &cx);
}

zs_status zs__stream_check_synchronize(zs__stream_check *chk, int stream) {
    if (!chk)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_synchronize: NULL checker");
    pthread_mutex_lock(&chk->mu);
    int t = -1;
    zs_status st = self_actor(chk, &t);
    const stream_state *ss = find_stream(chk, stream);
    if (st == ZS_OK && ss) vc_join(&chk->actors[t].clock, &ss->done, chk->nactors);
    pthread_mutex_unlock(&chk->mu);
    return st;
}

/* What a fence or sync object call moves between the calling thread's clock
 * and the key's. */
typedef enum key_op { KEY_RECORD, KEY_RELEASE, KEY_TAKE } key_op;

static zs_status on_key(zs__stream_check *chk, const void *key, key_op op, int stream,
                        const char *fn) {
    if (!chk || !key) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    pthread_mutex_lock(&chk->mu);
    int t = -1;
    keyed *k = NULL;
    zs_status st = self_actor(chk, &t);
    if (st == ZS_OK) {
        if (op == KEY_TAKE)
            k = find_key(chk, key); /* a fence never recorded gives nothing */
        else
            st = key_for(chk, key, &k);
    }
    if (st == ZS_OK && k) {
        vclock *mine = &chk->actors[t].clock;
        const stream_state *ss = find_stream(chk, stream);
        if (op == KEY_TAKE) {
            vc_join(mine, &k->clock, chk->nactors);
        } else if (op == KEY_RELEASE) {
            vc_join(&k->clock, mine, chk->nactors);
        } else {
            /* The record completes after every op before it and after the
             * recording thread's own past, as an op it enqueued would. */
            op_start(chk, t, stream, &k->clock);
            if (ss) vc_join(&k->clock, &ss->done, chk->nactors);
        }
    }
    pthread_mutex_unlock(&chk->mu);
    return st;
}

zs_status zs__stream_check_fence_record(zs__stream_check *chk, int stream, const void *key) {
    return on_key(chk, key, KEY_RECORD, stream, "zs__stream_check_fence_record");
}

zs_status zs__stream_check_fence_wait(zs__stream_check *chk, const void *key) {
    return on_key(chk, key, KEY_TAKE, 0, "zs__stream_check_fence_wait");
}

zs_status zs__stream_check_release(zs__stream_check *chk, const void *key) {
    return on_key(chk, key, KEY_RELEASE, 0, "zs__stream_check_release");
}

zs_status zs__stream_check_acquire(zs__stream_check *chk, const void *key) {
    return on_key(chk, key, KEY_TAKE, 0, "zs__stream_check_acquire");
}

zs_status zs__stream_check_forget_key(zs__stream_check *chk, const void *key) {
    if (!chk) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_forget_key: NULL checker");
    pthread_mutex_lock(&chk->mu);
    keyed *k = find_key(chk, key);
    if (k) *k = chk->keys[--chk->nkeys];
    pthread_mutex_unlock(&chk->mu);
    return ZS_OK;
}

zs_status zs__stream_check_host_access(zs__stream_check *chk, uintptr_t addr, size_t bytes,
                                       int write, const char *what) {
    if (!chk)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_host_access: NULL checker");
    ZS_CHECK(check_range_arg("zs__stream_check_host_access", addr, bytes));
    zs__stream_check_range range = {addr, bytes, write ? 1 : 0};
    if (!what) what = write ? "host write" : "host read";
    void *frames[FRAMES];
    int nframes = capture(chk, frames);
    access_rec *rec = rec_new(what, NULL, &range, 1, frames, nframes);
    if (!rec)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "stream-order check: no memory for \"%s\"", what);
    call_ctx cx;
    cx.races = 0;
    pthread_mutex_lock(&chk->mu);
    int t = -1;
    zs_status st = self_actor(chk, &t);
    if (st == ZS_OK) {
        vclock *clock = &chk->actors[t].clock;
        rec->actor = t;
        rec->stamp = ++clock->done[t];
        rec->thread = t;
        st = access_range(chk, rec, 0, clock, &cx);
    }
    rec_put(rec);
    pthread_mutex_unlock(&chk->mu);
    return finish(chk, st, &cx);
}

int zs__stream_check_host_ordered(zs__stream_check *chk, uintptr_t addr, size_t bytes,
                                  int write) {
    if (!chk || bytes == 0 || addr + bytes < addr) return 1;
    pthread_mutex_lock(&chk->mu);
    int t = -1, ordered = 1;
    if (self_actor(chk, &t) == ZS_OK) {
        const vclock *c = &chk->actors[t].clock;
        const uintptr_t hi = addr + bytes;
        for (size_t i = seg_after(chk, addr); ordered && i < chk->nsegs && chk->segs[i].lo < hi;
             i++) {
            const segment *s = &chk->segs[i];
            if (s->hi <= addr) continue;
            if (s->write.rec && c->done[s->write.rec->actor] < s->write.rec->stamp) ordered = 0;
            for (int r = 0; write && ordered && r < s->nreads; r++)
                if (c->done[s->reads[r].rec->actor] < s->reads[r].rec->stamp) ordered = 0;
        }
    } else {
        ordered = 0;
    }
    pthread_mutex_unlock(&chk->mu);
    return ordered;
}

zs_status zs__stream_check_forget(zs__stream_check *chk, uintptr_t addr, size_t bytes) {
    if (!chk) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__stream_check_forget: NULL checker");
    ZS_CHECK(check_range_arg("zs__stream_check_forget", addr, bytes));
    if (bytes == 0) return ZS_OK;
    pthread_mutex_lock(&chk->mu);
    zs_status st = seg_split(chk, addr);
    if (st == ZS_OK) st = seg_split(chk, addr + bytes);
    if (st == ZS_OK) {
        size_t first = seg_after(chk, addr), end = seg_after(chk, addr + bytes);
        seg_remove(chk, first, end - first);
    }
    pthread_mutex_unlock(&chk->mu);
    return st;
}

/* One counter, read under the lock since other threads' calls change it. */
static size_t read_locked(zs__stream_check *chk, const size_t *counter) {
    pthread_mutex_lock(&chk->mu);
    size_t n = *counter;
    pthread_mutex_unlock(&chk->mu);
    return n;
}

size_t zs__stream_check_report_count(zs__stream_check *chk) {
    return read_locked(chk, &chk->nreports);
}

const char *zs__stream_check_report(zs__stream_check *chk, size_t i) {
    pthread_mutex_lock(&chk->mu);
    const char *text = i < chk->nreports && i < KEPT_REPORTS ? chk->reports[i] : NULL;
    pthread_mutex_unlock(&chk->mu);
    return text;
}

size_t zs__stream_check_segment_count(zs__stream_check *chk) {
    return read_locked(chk, &chk->nsegs);
}
