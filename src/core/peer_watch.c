/* The peer watch (see peer_watch.h). */
#define _DEFAULT_SOURCE /* DT_ and d_type */
#include "core/peer_watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/exit_report.h"
#include "core/job_signals.h"
#include "core/log.h"

/* Between two checks of the node's ranks when nothing happened: how long a
 * neighbour's death may go unseen without any signal (ranks under a remote
 * daemon of mpirun get none for a second or more). Reading /proc/<pid>/stat
 * of a few neighbours takes microseconds. */
#define IDLE_POLL_S 0.05
/* After SIGCONT or SIGTERM: how long the watch looks closely (checks every
 * CLOSE_POLL_NS, the report directory every REPORTS_POLL_NS). A
 * neighbour's proof reaches the report directory within IDLE_POLL_S plus a
 * write; a signal without a death costs this long of light polling. Then,
 * until REPORTS_AFTER_S after the signal, the report directory is read at
 * every idle check still: on a loaded machine the neighbour's own check
 * may come later than the close look (seen in the test suite: a rank
 * that missed the report by milliseconds waited for mpirun's SIGKILL). */
#define WINDOW_S 0.5
#define CLOSE_POLL_NS 2000000L
#define REPORTS_POLL_NS 10000000L
#define REPORTS_AFTER_S 10.0

/* A report file present when the watch started (an earlier run's). */
typedef struct seen_file {
    char name[32];
    struct timespec mtime;
} seen_file;

struct zs__peer_watch {
    int rank, size;
    zs__process_identity *peers; /* [size] */
    char report_dir[ZS_EXIT_DIR_BYTES];
    seen_file *seen;
    int seen_count;
    pthread_t thread;
    atomic_int stop;
};

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* "rank-NNNNN.json" -> NNNNN, or -1. */
static int report_rank(const char *name) {
    int r = -1, used = 0;
    if (sscanf(name, "rank-%d.json%n", &r, &used) != 1 || name[used] != '\0' || r < 0) return -1;
    return r;
}

static int was_seen(const zs__peer_watch *w, const char *name, const struct timespec *mtime) {
    for (int i = 0; i < w->seen_count; i++)
        if (strcmp(w->seen[i].name, name) == 0 && w->seen[i].mtime.tv_sec == mtime->tv_sec &&
            w->seen[i].mtime.tv_nsec == mtime->tv_nsec)
            return 1;
    return 0;
}

/* The report files present now, so that only later ones count. */
static void remember_reports(zs__peer_watch *w) {
    DIR *d = w->report_dir[0] ? opendir(w->report_dir) : NULL;
    if (!d) return;
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d)) != NULL) {
        if (report_rank(e->d_name) < 0 || strlen(e->d_name) >= sizeof w->seen[0].name) continue;
        char path[ZS_EXIT_DIR_BYTES + 256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", w->report_dir, e->d_name);
        if (stat(path, &st) != 0) continue;
        if (w->seen_count == cap) {
            const int grown = cap ? 2 * cap : 16;
            seen_file *more = zs__realloc(w->seen, sizeof *more * (size_t)grown);
            if (!more) break;
            w->seen = more;
            cap = grown;
        }
        snprintf(w->seen[w->seen_count].name, sizeof w->seen[0].name, "%s", e->d_name);
        w->seen[w->seen_count++].mtime = st.st_mtim;
    }
    closedir(d);
}

/* An integer field of a report as the writer formats it ("peer": 3). */
static int report_int(const char *text, const char *key, long long *out) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *p = strstr(text, pattern);
    return p && sscanf(p + strlen(pattern), "%lld", out) == 1;
}

/* Does not return: the report, the log line, the end by SIGTERM. */
static void end_now(const zs__peer_watch *w, int gone, const char *how) {
    char message[1024]; /* `how` is at most 255 bytes */
    const int alarm = zs__signals_alarm_signal();
    snprintf(message, sizeof message,
             "rank %d is dead: %s%s%s; rank %d ends now (exit report, then SIGTERM) instead of "
             "waiting for the launcher's SIGTERM and SIGKILL. Look for rank %d's cause in its "
             "exit report or the launcher's output",
             gone, how, alarm ? ", and the launcher began to end the job with " : "",
             alarm ? zs__signals_name(alarm) : "", w->rank, gone);
    ZS_LOG_ERROR_("%s", message);
    const zs__exit_report report = {ZS_EXIT_CAUSE_TERMINATED, ZS_TERMINATED_EXIT_CODE, gone, "",
                                    message};
    zs__exit_report_emit(&report);
    fflush(NULL);
    zs__signals_terminate();
    /* Not reached unless raising SIGTERM failed; the waits' grace remains. */
}

/* A neighbour whose process is gone: its rank, else -1. */
static int neighbour_gone(const zs__peer_watch *w) {
    for (int r = 0; r < w->size; r++)
        if (r != w->rank &&
            zs__process_state_of(&w->peers[w->rank], &w->peers[r]) == ZS_PROCESS_GONE)
            return r;
    return -1;
}

/* Rank r's report, if it wrote one since the watch started with a cause
 * that means the job is ending abnormally (anything but an agreed stop):
 * the dead rank it names (r itself when it names none), its description in
 * `how`; else -1. */
static int report_of(const zs__peer_watch *w, int r, char *how, size_t cap) {
    char name[32], path[ZS_EXIT_DIR_BYTES + 64];
    struct stat st;
    snprintf(name, sizeof name, "rank-%05d.json", r);
    snprintf(path, sizeof path, "%s/%s", w->report_dir, name);
    if (!w->report_dir[0] || stat(path, &st) != 0 || was_seen(w, name, &st.st_mtim)) return -1;
    char text[ZS_EXIT_REPORT_BYTES];
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return -1;
    text[n] = '\0';
    long long rank = -1, peer = -1;
    const char *cause = strstr(text, "\"cause\": \"");
    if (!report_int(text, "rank", &rank) || rank != r || !cause) return -1;
    cause += strlen("\"cause\": \"");
    if (strncmp(cause, "stopped\"", 8) == 0) return -1; /* an agreed stop ends nothing */
    (void)report_int(text, "peer", &peer);
    const int gone = peer >= 0 && peer < w->size && peer != w->rank ? (int)peer : r;
    char word[24];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(cause, "\""), cause);
    snprintf(how, cap, "rank %d's exit report (%s in the report directory) says \"%s\"%s", r,
             name, word, gone != r ? " and names it" : "");
    return gone;
}

/* Any other rank's report of a death (report_of), or -1. */
static int report_of_death(const zs__peer_watch *w, char *how, size_t cap) {
    DIR *d = w->report_dir[0] ? opendir(w->report_dir) : NULL;
    if (!d) return -1;
    int gone = -1;
    struct dirent *e;
    while (gone < 0 && (e = readdir(d)) != NULL) {
        const int r = report_rank(e->d_name);
        if (r >= 0 && r != w->rank && r < w->size) gone = report_of(w, r, how, cap);
    }
    closedir(d);
    return gone;
}

static void *watch(void *arg) {
    zs__peer_watch *w = arg;
    double reports_until = 0.0; /* read the report directory until then */
    while (!atomic_load(&w->stop)) {
        const int woken = zs__signals_alarm_wait(IDLE_POLL_S);
        if (atomic_load(&w->stop)) break;
        if (woken < 0) nap(100000000L); /* no handlers: nothing will post */
        const double until = woken == 1 ? zs__clock_s() + WINDOW_S : 0.0;
        if (woken == 1) reports_until = zs__clock_s() + REPORTS_AFTER_S;
        double next_reports = 0.0;
        do {
            /* A rank that already reported (a collective's deadline, whose
             * exchange named the silent rank; a failed step) has said more
             * than this would, and its own path ends it. */
            if (zs__exit_report_written()) break;
            char how[256];
            int gone = neighbour_gone(w);
            if (gone >= 0) {
                /* A neighbour that ended because it learned of a death
                 * reported which rank died first: name that one. */
                const int first = report_of(w, gone, how, sizeof how);
                if (first >= 0 && first != gone) {
                    gone = first;
                } else {
                    snprintf(how, sizeof how,
                             "its process (pid %" PRId64 ", on this node) is gone",
                             w->peers[gone].pid);
                }
                end_now(w, gone, how);
            }
            if (zs__clock_s() < reports_until && zs__clock_s() >= next_reports) {
                next_reports = zs__clock_s() + 1e-9 * (double)REPORTS_POLL_NS;
                gone = report_of_death(w, how, sizeof how);
                if (gone >= 0) end_now(w, gone, how);
            }
            if (until > 0.0) nap(CLOSE_POLL_NS);
        } while (zs__clock_s() < until && !atomic_load(&w->stop));
    }
    return NULL;
}

zs_status zs__peer_watch_start(int rank, int world_size, const zs__process_identity *peers,
                               const char *report_dir, zs__peer_watch **out) {
    *out = NULL;
    if (world_size < 2) return ZS_OK;
    zs__peer_watch *w = zs__calloc(1, sizeof *w);
    zs__process_identity *copy = zs__calloc((size_t)world_size, sizeof *copy);
    if (!w || !copy) {
        free(w);
        free(copy);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: out of host memory for the peer watch");
    }
    memcpy(copy, peers, sizeof *copy * (size_t)world_size);
    w->rank = rank;
    w->size = world_size;
    w->peers = copy;
    snprintf(w->report_dir, sizeof w->report_dir, "%s", report_dir ? report_dir : "");
    remember_reports(w);
    atomic_store(&w->stop, 0);
    const int rc = pthread_create(&w->thread, NULL, watch, w);
    if (rc != 0) {
        free(w->seen);
        free(copy);
        free(w);
        return zs__fail(ZS_ERR_INTERNAL, "zs_create: cannot start the peer watch's thread (%s)",
                        strerror(rc));
    }
    *out = w;
    return ZS_OK;
}

void zs__peer_watch_stop(zs__peer_watch *w) {
    if (!w) return;
    atomic_store(&w->stop, 1);
    zs__signals_alarm_wake();
    pthread_join(w->thread, NULL);
    free(w->seen);
    free(w->peers);
    free(w);
}
