/* The trace module (src/core/trace.c): spans from the main thread and a
 * second thread recorded at once, labels that need escaping, the file parsed
 * back with json-c, ring overflow (oldest dropped, counts reported), a NULL
 * trace as a no-op, bad paths, and the cost of one recorded span.
 *
 * TRACE_TEST_KEEP=dir keeps the files (trace-0.json, trace-1.json: two
 * "ranks" with realistic steps) in dir for scripts/plot_trace.py. */
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_pattern.h"
#include "core/trace.h"
#include "test_util.h"

static char g_dir[256];

/* json-c's object lookups, failing the test on a missing or mistyped key. */
static json_object *get(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v)) return NULL;
    return v;
}

static const char *get_str(json_object *o, const char *key) {
    json_object *v = get(o, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static json_object *parse_file(const char *path) {
    json_object *root = json_object_from_file(path);
    ZT_CHECK_MSG(root != NULL, "%s does not parse as JSON: %s", path, json_util_get_last_err());
    return root;
}

/* The events of a parsed trace with ph == "X", in file order. */
static size_t spans(json_object *root, json_object **out, size_t cap) {
    json_object *events = get(root, "traceEvents");
    size_t n = 0;
    if (!events || !json_object_is_type(events, json_type_array)) return 0;
    for (size_t i = 0; i < json_object_array_length(events); i++) {
        json_object *e = json_object_array_get_idx(events, i);
        const char *ph = get_str(e, "ph");
        if (ph && strcmp(ph, "X") == 0 && n < cap) out[n++] = e;
    }
    return n;
}

/* The "args" of the metadata event `name` for tid (or any tid when tid < 0). */
static json_object *metadata(json_object *root, const char *name, int tid) {
    json_object *events = get(root, "traceEvents");
    if (!events) return NULL;
    for (size_t i = 0; i < json_object_array_length(events); i++) {
        json_object *e = json_object_array_get_idx(events, i);
        const char *ph = get_str(e, "ph"), *n = get_str(e, "name");
        if (!ph || strcmp(ph, "M") != 0 || !n || strcmp(n, name) != 0) continue;
        if (tid >= 0 && json_object_get_int(get(e, "tid")) != tid) continue;
        return get(e, "args");
    }
    return NULL;
}

static const char *path_in_dir(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
    return buf;
}

/* ---- concurrent recording ---- */

#define THREAD_SPANS 20000

typedef struct comm_job {
    zs__trace *tr;
} comm_job;

static void *comm_thread(void *arg) {
    comm_job *job = arg;
    for (int i = 0; i < THREAD_SPANS; i++) {
        uint64_t t0 = zs__clock_ns();
        zs__trace_args a = {.unit = "layer\"7\"\\", .op = "reduce_scatter", .bytes = (uint64_t)i * 4,
                            .seq = i, .queue_wait_ns = 1500,
                            .has = ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_SEQ | ZS_TRACE_HAS_QUEUE_WAIT};
        zs__trace_span(job->tr, ZS_TRACE_COMM, "reduce_scatter", t0, t0 + 2000, &a);
    }
    return NULL;
}

static void test_concurrent(void) {
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/conc-%%r.json", g_dir);
    zs__trace *tr = NULL;
    /* Room for everything: half for the comm ring (THREAD_SPANS), an eighth
     * for the optimizer's (THREAD_SPANS / 3), the rest for the main one. */
    ZT_OK(zs__trace_create(pattern, 3, 3 * THREAD_SPANS + 64, &tr));
    ZT_REQUIRE(tr != NULL);
    path_in_dir(path, sizeof path, "conc-3.json");
    ZT_CHECK_MSG(strcmp(zs__trace_path(tr), path) == 0, "path %s, expected %s",
                 zs__trace_path(tr), path);

    /* The file exists and is valid from create on. */
    json_object *root = parse_file(path);
    json_object *none[1];
    ZT_EQ_INT(spans(root, none, 1), 0);
    json_object_put(root);

    comm_job job = {tr};
    pthread_t thread;
    ZT_REQUIRE(pthread_create(&thread, NULL, comm_thread, &job) == 0);
    /* Labels with every kind of character that needs care: quotes,
     * backslashes, control characters, UTF-8, a stray byte that is not
     * UTF-8, and one longer than the label buffer (cut inside a character). */
    static const char *const labels[] = {"plain", "q\"uote", "back\\slash", "tab\tnew\nline\x01",
                                          "h\xc3\xa9llo \xe2\x82\xac", "bad\xff\xfe",
                                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9z"};
    const int nlabels = (int)(sizeof labels / sizeof labels[0]);
    for (int i = 0; i < THREAD_SPANS; i++) {
        uint64_t t0 = zs__clock_ns();
        zs__trace_args a = {.unit = labels[i % nlabels]};
        zs__trace_span(tr, i % 3 == 2 ? ZS_TRACE_OPTIMIZER : ZS_TRACE_COMPUTE, "backward", t0,
                       t0 + 1000, &a);
    }
    /* The thread rule: the flush happens after join (a synchronization). */
    pthread_join(thread, NULL);
    ZT_OK(zs__trace_flush(tr));

    root = parse_file(path);
    ZT_REQUIRE(root != NULL);
    json_object *display = get(root, "displayTimeUnit");
    ZT_CHECK(display && strcmp(json_object_get_string(display), "ms") == 0);
    json_object **ev = calloc(3 * THREAD_SPANS, sizeof *ev);
    ZT_REQUIRE(ev != NULL);
    size_t n = spans(root, ev, 3 * THREAD_SPANS);
    ZT_EQ_INT(n, 2 * THREAD_SPANS);
    int comm = 0, compute = 0, optimizer = 0, seq_ok = 1, label_ok = 1;
    int64_t next_seq = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = ev[i], *args = get(e, "args");
        int tid = json_object_get_int(get(e, "tid"));
        ZT_EQ_INT(json_object_get_int(get(e, "pid")), 3);
        const char *cat = get_str(e, "cat");
        if (tid == ZS_TRACE_COMM) {
            comm++;
            ZT_CHECK(cat && strcmp(cat, "comm") == 0);
            /* One writer per ring: the comm events are in recording order. */
            if (json_object_get_int64(get(args, "seq")) != next_seq++) seq_ok = 0;
            const char *unit = get_str(args, "unit");
            if (!unit || strcmp(unit, "layer\"7\"\\") != 0) label_ok = 0;
            ZT_CHECK(json_object_get_double(get(e, "dur")) == 2.0);
            ZT_CHECK(json_object_get_double(get(args, "queue_wait_us")) == 1.5);
        } else {
            if (tid == ZS_TRACE_OPTIMIZER) optimizer++;
            else compute++;
            ZT_CHECK(json_object_get_double(get(e, "dur")) == 1.0);
            ZT_CHECK(get(args, "seq") == NULL && get(args, "bytes") == NULL);
        }
        ZT_CHECK(json_object_get_double(get(e, "ts")) >= 0.0);
    }
    ZT_EQ_INT(comm, THREAD_SPANS);
    ZT_EQ_INT(optimizer, THREAD_SPANS / 3);
    ZT_EQ_INT(compute, THREAD_SPANS - THREAD_SPANS / 3);
    ZT_CHECK_MSG(seq_ok, "comm spans out of order or with wrong seq");
    ZT_CHECK_MSG(label_ok, "the escaped comm unit label did not read back");

    /* Main-thread labels read back exactly, in order, after escaping. */
    static const char *const expected[] = {"plain", "q\"uote", "back\\slash", "tab\tnew\nline\x01",
                                           "h\xc3\xa9llo \xe2\x82\xac", "bad\xef\xbf\xbd\xef\xbf\xbd",
                                           /* 62 a's, then the 2-byte é would end at byte 64: dropped whole */
                                           "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    /* The compute spans are the main ring's, in recording order: the j-th
     * is span i = 3 (j / 2) + j % 2 of the loop (every third went to the
     * optimizer's ring). */
    int k = 0;
    for (size_t i = 0; i < n && k < 2 * nlabels; i++) {
        if (json_object_get_int(get(ev[i], "tid")) != ZS_TRACE_COMPUTE) continue;
        const char *unit = get_str(get(ev[i], "args"), "unit");
        const int want = (3 * (k / 2) + k % 2) % nlabels;
        ZT_CHECK_MSG(unit && strcmp(unit, expected[want]) == 0, "label %d: got '%s', want '%s'",
                     k, unit ? unit : "(none)", expected[want]);
        k++;
    }

    /* Metadata: the process is "rank 3", the tracks are named, nothing dropped. */
    json_object *pname = metadata(root, "process_name", -1);
    ZT_CHECK(pname && strcmp(get_str(pname, "name"), "rank 3") == 0);
    static const char *const tracks[] = {"compute", "comm", "optimizer", "checkpoint"};
    for (int t = 0; t < 4; t++) {
        json_object *tn = metadata(root, "thread_name", t);
        ZT_CHECK_MSG(tn && get_str(tn, "name") && strcmp(get_str(tn, "name"), tracks[t]) == 0,
                     "thread_name of tid %d", t);
    }
    json_object *info = metadata(root, "zeroshard_trace", -1);
    ZT_REQUIRE(info != NULL);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_events")), 0);
    ZT_EQ_INT(json_object_get_int64(get(info, "rank")), 3);
    ZT_CHECK(json_object_get_int64(get(info, "origin_unix_ns")) > 1600000000LL * 1000000000LL);
    free(ev);
    json_object_put(root);
    zs__trace_destroy(tr);
    /* Destroy flushed again: still valid, same spans. */
    root = parse_file(path);
    ZT_CHECK(root != NULL);
    json_object_put(root);
    /* No temporary file is left behind. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    ZT_CHECK_MSG(access(tmp, F_OK) != 0, "%s was left behind", tmp);
    unlink(path);
}

/* ---- overflow ---- */

static void test_overflow(void) {
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/over.json", g_dir);
    path_in_dir(path, sizeof path, "over.json");
    zs__trace *tr = NULL;
    /* 2048 events: 1024 for the comm ring, 256 for the optimizer's, 768
     * for the main thread's. */
    ZT_OK(zs__trace_create(pattern, 0, 2048, &tr));
    ZT_REQUIRE(tr != NULL);
    const int total = 1500, kept = 768, optimizer = 300, optimizer_kept = 256;
    const int dropped = total - kept;
    int dropped_checkpoint = 0;
    for (int i = 0; i < dropped; i++) dropped_checkpoint += i % 10 == 0;
    uint64_t base = zs__clock_ns();
    for (int i = 0; i < total; i++) {
        zs__trace_args a = {.seq = i, .has = ZS_TRACE_HAS_SEQ};
        /* Every tenth main-thread event is a checkpoint span, to check that
         * drops are counted by the track of the event overwritten. */
        zs__trace_span(tr, i % 10 == 0 ? ZS_TRACE_CHECKPOINT : ZS_TRACE_COMPUTE, "fwd",
                       base + (uint64_t)i * 1000, base + (uint64_t)i * 1000 + 500, &a);
    }
    for (int i = 0; i < 100; i++) zs__trace_span(tr, ZS_TRACE_COMM, "all_gather", base, base + 1, NULL);
    /* The optimizer's ring is its own: its drops touch no other track. */
    for (int i = 0; i < optimizer; i++)
        zs__trace_span(tr, ZS_TRACE_OPTIMIZER, "optimizer update", base, base + 1, NULL);
    /* The oldest 732 main-thread events were overwritten: 74 checkpoint ones
     * (i = 0, 10, ..., 730) and 658 compute ones. */
    ZT_EQ_INT(zs__trace_dropped(tr, ZS_TRACE_CHECKPOINT), dropped_checkpoint);
    ZT_EQ_INT(zs__trace_dropped(tr, ZS_TRACE_COMPUTE), dropped - dropped_checkpoint);
    ZT_EQ_INT(zs__trace_dropped(tr, ZS_TRACE_COMM), 0);
    ZT_EQ_INT(zs__trace_dropped(tr, ZS_TRACE_OPTIMIZER), optimizer - optimizer_kept);
    fprintf(stderr, "(a warning about overwritten events is expected next)\n");
    ZT_OK(zs__trace_flush(tr));
    json_object *root = parse_file(path);
    ZT_REQUIRE(root != NULL);
    json_object *ev[2048];
    size_t n = spans(root, ev, 2048);
    ZT_EQ_INT(n, kept + 100 + optimizer_kept);
    /* The main-thread ring comes first, oldest to newest. */
    int in_order = 1;
    for (int i = 0; i < kept; i++)
        if (json_object_get_int(get(get(ev[i], "args"), "seq")) != dropped + i) in_order = 0;
    ZT_CHECK_MSG(in_order, "the kept events are not the newest %d in order", kept);
    json_object *info = metadata(root, "zeroshard_trace", -1);
    ZT_REQUIRE(info != NULL);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_events")),
              dropped + optimizer - optimizer_kept);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_checkpoint")), dropped_checkpoint);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_compute")), dropped - dropped_checkpoint);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_comm")), 0);
    ZT_EQ_INT(json_object_get_int64(get(info, "dropped_optimizer")), optimizer - optimizer_kept);
    ZT_EQ_INT(json_object_get_int64(get(info, "capacity")), 2048);
    json_object_put(root);
    zs__trace_destroy(tr);
    unlink(path);
}

/* ---- the file name pattern shared with log.file ---- */

static void test_pattern(void) {
    char out[64], pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    size_t n = zs__file_pattern_expand("t-%r-%%-%x-%p.json%", 5, out, sizeof out);
    char want[128];
    snprintf(want, sizeof want, "t-5-%%-x-%s.json%%", pid);
    ZT_CHECK_MSG(strcmp(out, want) == 0, "got '%s', want '%s'", out, want);
    ZT_EQ_INT(n, strlen(want));
    /* Truncated like snprintf: the prefix that fits, and the full length. */
    char small[4];
    ZT_EQ_INT(zs__file_pattern_expand("ab-%r", 123, small, sizeof small), 6);
    ZT_CHECK(strcmp(small, "ab-") == 0);
    ZT_EQ_INT(zs__file_pattern_expand("%h", 0, NULL, 0) > 0, 1);
}

/* ---- off, and bad arguments ---- */

static void test_null_and_errors(void) {
    zs__trace *tr = (zs__trace *)&tr; /* create must overwrite it */
    ZT_OK(zs__trace_create(NULL, 0, 65536, &tr));
    ZT_CHECK(tr == NULL);
    tr = (zs__trace *)&tr;
    ZT_OK(zs__trace_create("", 0, 65536, &tr));
    ZT_CHECK(tr == NULL);
    /* Every function takes NULL and does nothing. */
    zs__trace_args a = ZS_TRACE_ARGS_INIT;
    zs__trace_span(NULL, ZS_TRACE_COMM, "x", 1, 2, &a);
    zs__trace_span(NULL, ZS_TRACE_COMPUTE, "x", 1, 2, NULL);
    ZT_EQ_INT(zs__trace_clock(NULL), 0);
    ZT_OK(zs__trace_flush(NULL));
    ZT_EQ_INT(zs__trace_dropped(NULL, ZS_TRACE_COMM), 0);
    ZT_EQ_INT(zs__trace_bytes(NULL), 0);
    ZT_CHECK(strcmp(zs__trace_path(NULL), "") == 0);
    zs__trace_destroy(NULL);

    ZT_FAILS_WITH(zs__trace_create("/nonexistent-dir/trace-%r.json", 2, 4096, &tr), ZS_ERR_IO,
                  "cannot write the trace file '/nonexistent-dir/trace-2.json' (trace.file) on rank 2");
    ZT_CHECK(tr == NULL);
    ZT_FAILS_WITH(zs__trace_create("t.json", 0, 1, &tr), ZS_ERR_INVALID_ARGUMENT,
                  "trace capacity 1 is too small");
    ZT_CHECK(tr == NULL);
}

/* ---- cost ---- */

static void test_cost(void) {
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/cost.json", g_dir);
    path_in_dir(path, sizeof path, "cost.json");
    zs__trace *tr = NULL;
    ZT_OK(zs__trace_create(pattern, 0, 65536, &tr));
    ZT_REQUIRE(tr != NULL);
    const int n = 1000000;
    zs__trace_args a = {.unit = "transformer.h.11", .op = "all_gather", .bytes = 1 << 20,
                        .has = ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_SEQ};
    uint64_t t0 = zs__clock_ns();
    for (int i = 0; i < n; i++) {
        a.seq = i;
        zs__trace_span(tr, ZS_TRACE_COMM, "all_gather", t0, t0 + (uint64_t)i, &a);
    }
    uint64_t t1 = zs__clock_ns();
    for (int i = 0; i < n; i++) zs__trace_span(tr, ZS_TRACE_COMPUTE, "forward", t0, t1, NULL);
    uint64_t t2 = zs__clock_ns();
    /* Read through a volatile each time, so the compiler cannot drop the
     * loop: what remains is the load and the NULL checks a caller pays. */
    zs__trace *volatile off_slot = NULL;
    for (int i = 0; i < n; i++) {
        zs__trace *off = off_slot;
        uint64_t b = zs__trace_clock(off);
        zs__trace_span(off, ZS_TRACE_COMPUTE, "forward", b, zs__trace_clock(off), &a);
    }
    uint64_t t3 = zs__clock_ns();
    uint64_t c0 = zs__clock_ns();
    for (int i = 0; i < n; i++) (void)zs__clock_ns();
    uint64_t c1 = zs__clock_ns();
    printf("test_trace: %.1f ns per span with args (unit label copied), %.1f ns without, "
           "%.2f ns off (NULL trace); zs__clock_ns %.1f ns\n",
           (double)(t1 - t0) / n, (double)(t2 - t1) / n, (double)(t3 - t2) / n,
           (double)(c1 - c0) / n);
    uint64_t f0 = zs__clock_ns();
    ZT_OK(zs__trace_flush(tr));
    uint64_t f1 = zs__clock_ns();
    printf("test_trace: flush of 65536 events: %.1f ms\n", (double)(f1 - f0) / 1e6);
    zs__trace_destroy(tr);
    unlink(path);
}

/* ---- sample traces for the plot script ---- */

/* Two steps of a stage-3 like schedule on two "ranks", written when
 * TRACE_TEST_KEEP names a directory. Timestamps are synthetic (the point is
 * the shapes), relative to a common origin. */
static void write_samples(const char *dir) {
    static const char *const units[] = {"embed", "h.0", "h.1", "h.2", "head"};
    for (int rank = 0; rank < 2; rank++) {
        char pattern[512];
        snprintf(pattern, sizeof pattern, "%s/trace-%%r.json", dir);
        zs__trace *tr = NULL;
        ZT_OK(zs__trace_create(pattern, rank, 4096, &tr));
        if (!tr) return;
        uint64_t t = zs__clock_ns() + 100000;
        int64_t seq = 0;
        for (int step = 0; step < 3; step++) {
            uint64_t comm_free = t;
            /* Forward: gather each unit, compute it once gathered. */
            for (int u = 0; u < 5; u++) {
                uint64_t enq = t, start = comm_free > enq ? comm_free : enq;
                uint64_t end = start + 300000 + 40000 * (uint64_t)rank;
                zs__trace_args g = {.unit = units[u], .op = "all_gather", .bytes = 4u << 20,
                                    .seq = seq++, .queue_wait_ns = start - enq,
                                    .has = ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_SEQ |
                                           ZS_TRACE_HAS_QUEUE_WAIT};
                zs__trace_span(tr, ZS_TRACE_COMM, "all_gather", start, end, &g);
                comm_free = end;
                zs__trace_args c = {.unit = units[u]};
                zs__trace_span(tr, ZS_TRACE_COMPUTE, "forward", end, end + 500000, &c);
                t = end + 500000;
            }
            /* Backward in reverse, each unit's reduce-scatter queued behind the previous. */
            for (int u = 4; u >= 0; u--) {
                zs__trace_args c = {.unit = units[u]};
                zs__trace_span(tr, ZS_TRACE_COMPUTE, "backward", t, t + 900000, &c);
                t += 900000;
                uint64_t start = comm_free > t ? comm_free : t;
                zs__trace_args r = {.unit = units[u], .op = "reduce_scatter", .bytes = 4u << 20,
                                    .seq = seq++, .queue_wait_ns = start - t,
                                    .has = ZS_TRACE_HAS_BYTES | ZS_TRACE_HAS_SEQ |
                                           ZS_TRACE_HAS_QUEUE_WAIT};
                comm_free = start + 1100000;
                zs__trace_span(tr, ZS_TRACE_COMM, "reduce_scatter", start, comm_free, &r);
            }
            t = comm_free;
            zs__trace_span(tr, ZS_TRACE_OPTIMIZER, "adamw", t, t + 700000, NULL);
            t += 700000;
            if (step == 1) {
                zs__trace_span(tr, ZS_TRACE_CHECKPOINT, "save", t, t + 2000000, NULL);
                t += 2000000;
            }
        }
        zs__trace_destroy(tr);
    }
    printf("test_trace: sample traces in %s/trace-0.json and trace-1.json\n", dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/zs_test_trace.XXXXXX");
    ZT_REQUIRE(mkdtemp(g_dir) != NULL);
    test_pattern();
    test_null_and_errors();
    test_concurrent();
    test_overflow();
    test_cost();
    const char *keep = getenv("TRACE_TEST_KEEP");
    if (keep && *keep) write_samples(keep);
    rmdir(g_dir);
    return zt_finish("test_trace");
}
