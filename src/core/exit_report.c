/* Exit reports (see exit_report.h). Everything on the write path is
 * async-signal-safe: text is assembled by the small appenders below (not
 * snprintf, which POSIX does not list as safe), the registration is read
 * through atomics and a sig_atomic_t flag, and the file is written with
 * plain system calls. */
#include "core/exit_report.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h> /* rename (a system call) on the write path; fprintf only outside it */
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/number.h"
#include "zeroshard.h"

static zs__exit_job g_job;
static volatile sig_atomic_t g_registered;
static atomic_int g_written; /* a report of this registration was written (lock-free: any
                                thread or handler sets it, the peer watch reads it) */
/* Written by the training thread, read by a signal handler or the comm
 * thread: lock-free atomics are what C11 lets a handler read. */
static atomic_llong g_step;
static atomic_llong g_committed = -1;
/* Makes temporary names unique when a handler writes while the program
 * was writing a report itself. */
static atomic_uint g_sequence;

const char *zs__exit_cause_name(zs__exit_cause cause) {
    switch (cause) {
    case ZS_EXIT_CAUSE_TIMEOUT: return "timeout";
    case ZS_EXIT_CAUSE_FAILED: return "failed";
    case ZS_EXIT_CAUSE_STOPPED: return "stopped";
    case ZS_EXIT_CAUSE_TERMINATED: return "terminated";
    case ZS_EXIT_CAUSE_CONFIG: return "config";
    }
    return "failed";
}

void zs__exit_report_register(const zs__exit_job *job) {
    g_registered = 0;
    atomic_store(&g_written, 0);
    g_job = *job;
    atomic_store(&g_step, 0);
    atomic_store(&g_committed, -1);
    g_registered = 1;
}

void zs__exit_report_unregister(void) {
    g_registered = 0;
    g_job.hosts = NULL;
}

void zs__exit_report_set_step(int64_t step) { atomic_store(&g_step, (long long)step); }
void zs__exit_report_set_committed(int64_t step) { atomic_store(&g_committed, (long long)step); }

/* ------------------------------------------------------------ appending */

/* A bounded text being built: `len` counts what was asked for, what fits
 * is stored, the text stays NUL-terminated. */
typedef struct text {
    char *out;
    size_t cap, len;
} text;

static void put_char(text *t, char c) {
    if (t->cap > 0 && t->len + 1 < t->cap) {
        t->out[t->len] = c;
        t->out[t->len + 1] = '\0';
    }
    t->len++;
}

static void put(text *t, const char *s) {
    while (*s) put_char(t, *s++);
}

static void put_i64(text *t, int64_t v) {
    char digits[24];
    int n = 0;
    /* Negative values are built from their negated digits one at a time,
     * so INT64_MIN needs no special case. */
    const int negative = v < 0;
    do {
        const int d = (int)(v % 10);
        digits[n++] = (char)('0' + (negative ? -d : d));
        v /= 10;
    } while (v != 0);
    if (negative) put_char(t, '-');
    while (n > 0) put_char(t, digits[--n]);
}

/* Unix seconds with microseconds: "1712345678.123456". */
static void put_time(text *t, double seconds) {
    if (!(seconds >= 0) || seconds > 1e15) seconds = 0;
    const int64_t whole = (int64_t)seconds;
    int64_t micro = (int64_t)((seconds - (double)whole) * 1e6 + 0.5);
    if (micro > 999999) micro = 999999;
    put_i64(t, whole);
    put_char(t, '.');
    for (int64_t scale = 100000; scale > 0; scale /= 10) put_char(t, (char)('0' + micro / scale % 10));
}

/* The length of the valid UTF-8 sequence at s (at most `left` bytes), or 0
 * when the bytes there are not one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
static size_t utf8_length(const unsigned char *s, size_t left) {
    const unsigned c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
    else return 0;
    if (n > left) return 0;
    unsigned code = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        code = (code << 6) | (s[i] & 0x3F);
    }
    if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
    return n;
}

/* A JSON string of at most `max` bytes of s: quotes, backslashes and
 * control characters escaped, valid UTF-8 kept, any other byte replaced by
 * U+FFFD (a path or an error text may hold anything; the report must still
 * parse). */
static void put_json(text *t, const char *s, size_t max) {
    static const char hex[] = "0123456789abcdef";
    put_char(t, '"');
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t left = 0;
    while (left < max && p[left]) left++;
    while (left > 0) {
        const unsigned c = *p;
        if (c == '"' || c == '\\') {
            put_char(t, '\\');
            put_char(t, (char)c);
        } else if (c == '\n') {
            put(t, "\\n");
        } else if (c == '\r') {
            put(t, "\\r");
        } else if (c == '\t') {
            put(t, "\\t");
        } else if (c < 0x20 || c == 0x7F) {
            put(t, "\\u00");
            put_char(t, hex[c >> 4]);
            put_char(t, hex[c & 15]);
        } else if (c < 0x80) {
            put_char(t, (char)c);
        } else {
            const size_t n = utf8_length(p, left);
            if (n == 0) {
                put(t, "\\ufffd");
            } else {
                for (size_t i = 0; i < n; i++) put_char(t, (char)p[i]);
                p += n - 1;
                left -= n - 1;
            }
        }
        p++;
        left--;
    }
    put_char(t, '"');
}

static void put_addresses(text *t, const zs__host_addresses *h) {
    put_char(t, '[');
    const int count = h ? h->count : 0;
    for (int i = 0; i < count && i < ZS_HOST_ADDRESSES_MAX; i++) {
        if (i) put(t, ", ");
        put_json(t, h->address[i], ZS_HOST_ADDRESS_BYTES - 1);
    }
    put_char(t, ']');
}

size_t zs__exit_report_format(char *out, size_t cap, const zs__exit_job *job, int64_t step,
                              int64_t last_committed, long pid, double time,
                              const zs__exit_report *r) {
    text t = {out, cap, 0};
    if (cap > 0) out[0] = '\0';
    const zs__host_addresses *peer =
        job->hosts && r->peer >= 0 && r->peer < job->world_size ? &job->hosts[r->peer] : NULL;
    put(&t, "{\"version\": 1, \"cause\": ");
    put_json(&t, zs__exit_cause_name(r->cause), 16);
    put(&t, ", \"exit_code\": ");
    put_i64(&t, r->exit_code);
    put(&t, ", \"rank\": ");
    put_i64(&t, job->rank);
    put(&t, ", \"world_size\": ");
    put_i64(&t, job->world_size);
    put(&t, ", \"host\": ");
    put_json(&t, job->self.host, ZS_HOST_NAME_BYTES - 1);
    put(&t, ", \"addresses\": ");
    put_addresses(&t, &job->self);
    put(&t, ", \"pid\": ");
    put_i64(&t, pid);
    put(&t, ", \"generation\": ");
    put_i64(&t, job->generation);
    put(&t, ", \"step\": ");
    put_i64(&t, step);
    put(&t, ", \"last_committed_step\": ");
    put_i64(&t, last_committed);
    put(&t, ", \"checkpoint_dir\": ");
    put_json(&t, job->checkpoint_dir, ZS_EXIT_DIR_BYTES - 1);
    put(&t, ", \"peer\": ");
    put_i64(&t, r->peer >= 0 ? r->peer : -1);
    put(&t, ", \"peer_host\": ");
    put_json(&t, peer ? peer->host : "", ZS_HOST_NAME_BYTES - 1);
    put(&t, ", \"peer_addresses\": ");
    put_addresses(&t, peer);
    put(&t, ", \"op\": ");
    put_json(&t, r->op, 128);
    put(&t, ", \"message\": ");
    put_json(&t, r->message, ZS_EXIT_MESSAGE_MAX);
    put(&t, ", \"time\": ");
    put_time(&t, time);
    put(&t, "}\n");
    return t.len;
}

/* ------------------------------------------------------------- writing */

/* mkdir -p of dir (a copy is cut at each '/'): what exists already is fine. */
static int make_dirs(char *dir) {
    for (char *p = dir + 1;; p++) {
        const char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        const int rc = mkdir(dir, 0755);
        const int err = errno;
        *p = c;
        if (rc != 0 && err != EEXIST) return -err;
        if (c == '\0') return 0;
    }
}

static int write_all(int fd, const char *data, size_t bytes) {
    while (bytes > 0) {
        const ssize_t n = write(fd, data, bytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        data += n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* The write itself, for the registered job (with its progress) or for one
 * read from the environment (step 0, nothing committed). */
static int write_report(const zs__exit_job *job, int64_t step, int64_t committed,
                        const zs__exit_report *report, char *path_out, size_t path_cap) {
    if (job->report_dir[0] == '\0') return 1;
    const int saved_errno = errno; /* a handler must leave errno as it found it */
    char dir[ZS_EXIT_DIR_BYTES];
    text d = {dir, sizeof dir, 0};
    put(&d, job->report_dir);
    while (d.len > 1 && d.len < sizeof dir && dir[d.len - 1] == '/') dir[--d.len] = '\0';
    char final_path[ZS_EXIT_DIR_BYTES + 64], temp_path[ZS_EXIT_DIR_BYTES + 96];
    text f = {final_path, sizeof final_path, 0};
    put(&f, dir);
    put(&f, "/rank-");
    /* At least 5 digits: a launcher lists them in rank order by name. */
    for (int64_t scale = 10000; scale > 1 && job->rank < scale; scale /= 10) put_char(&f, '0');
    put_i64(&f, job->rank);
    put(&f, ".json");
    text p = {temp_path, sizeof temp_path, 0};
    put(&p, dir);
    put(&p, "/.rank-");
    put_i64(&p, job->rank);
    put(&p, ".json.tmp.");
    put_i64(&p, (int64_t)getpid());
    put_char(&p, '.');
    put_i64(&p, (int64_t)atomic_fetch_add(&g_sequence, 1u));
    if (d.len >= sizeof dir || f.len >= sizeof final_path || p.len >= sizeof temp_path) {
        errno = saved_errno;
        return -ENAMETOOLONG;
    }

    char json[ZS_EXIT_REPORT_BYTES];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const size_t bytes =
        zs__exit_report_format(json, sizeof json, job, step, committed, (long)getpid(),
                               (double)now.tv_sec + 1e-9 * (double)now.tv_nsec, report);
    int rc = bytes < sizeof json ? make_dirs(dir) : -EOVERFLOW;
    int fd = -1;
    if (rc == 0) {
        fd = open(temp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) rc = -errno;
    }
    if (rc == 0) rc = write_all(fd, json, bytes);
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    if (fd >= 0 && close(fd) != 0 && rc == 0) rc = -errno;
    /* The rename publishes the whole file at once: a reader never sees a
     * half-written report, only the old one or the new one. */
    if (rc == 0 && rename(temp_path, final_path) != 0) rc = -errno;
    if (rc != 0 && fd >= 0) unlink(temp_path);
    if (rc == 0) {
        const int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd >= 0) {
            (void)fsync(dirfd); /* the rename's durability; the report is already whole */
            close(dirfd);
        }
        if (path_out && path_cap > 0) {
            text out = {path_out, path_cap, 0};
            put(&out, final_path);
        }
    }
    errno = saved_errno;
    return rc;
}

int zs__exit_report_write(const zs__exit_report *report, char *path_out, size_t path_cap) {
    if (!g_registered) return 1;
    const int rc = write_report(&g_job, (int64_t)atomic_load(&g_step),
                                (int64_t)atomic_load(&g_committed), report, path_out, path_cap);
    if (rc == 0) atomic_store(&g_written, 1);
    return rc;
}

int zs__exit_report_written(void) { return atomic_load(&g_written) != 0; }

int zs__exit_report_write_for(const zs__exit_job *job, const zs__exit_report *report,
                              char *path_out, size_t path_cap) {
    return write_report(job, 0, -1, report, path_out, path_cap);
}

void zs__exit_report_emit(const zs__exit_report *report) {
    char path[ZS_EXIT_DIR_BYTES + 64];
    const int rc = zs__exit_report_write(report, path, sizeof path);
    if (rc == 0)
        ZS_INFO("exit report (cause \"%s\", exit code %d) written to %s",
                zs__exit_cause_name(report->cause), report->exit_code, path);
    else if (rc < 0)
        ZS_WARN("could not write the exit report (cause \"%s\") into %s: %s; a launcher then "
                "goes by the exit code and the log",
                zs__exit_cause_name(report->cause), g_job.report_dir, strerror(-rc));
}

/* ------------------------------------------------- before zs_create */

/* The first of the variables that holds an integer in [0, INT32_MAX], or
 * `otherwise`: the launchers name the rank and size each their own way. */
static int launcher_number(const zs__env_var *vars, int count, int otherwise) {
    for (int i = 0; i < count; i++) {
        const char *text = zs__env_text(vars[i]);
        int64_t value = 0;
        if (text && zs__number_integer(text, strlen(text), 0, INT32_MAX, &value) == ZS__NUMBER_OK)
            return (int)value;
    }
    return otherwise;
}

void zs__exit_job_from_environment(zs__exit_job *job) {
    static const zs__env_var rank_vars[] = {ZS_ENV_OMPI_COMM_WORLD_RANK, ZS_ENV_PMIX_RANK,
                                            ZS_ENV_SLURM_PROCID};
    static const zs__env_var size_vars[] = {ZS_ENV_OMPI_COMM_WORLD_SIZE, ZS_ENV_SLURM_NTASKS};
    memset(job, 0, sizeof *job);
    job->rank = launcher_number(rank_vars, 3, 0);
    job->world_size = launcher_number(size_vars, 2, 0);
    const char *generation = zs__env_text(ZS_ENV_JOB_GENERATION);
    int64_t value = 0;
    if (generation && zs__number_integer(generation, strlen(generation), 0, INT64_MAX, &value) ==
                          ZS__NUMBER_OK)
        job->generation = value;
    const char *dir = zs__env_text(ZS_ENV_REPORT_DIR);
    /* A directory too long for the report's buffer is left out rather than
     * cut: a cut path would put the report somewhere nobody looks. */
    if (dir && strlen(dir) < sizeof job->report_dir) memcpy(job->report_dir, dir, strlen(dir) + 1);
    zs__host_addresses_get(&job->self);
}

int zs_report_config_error(const char *program, const char *message) {
    const char *who = program && program[0] ? program : "zeroshard";
    const char *what = message ? message : "";
    fprintf(stderr, "%s: %s\n", who, what);
    fflush(stderr);
    char text[ZS_EXIT_MESSAGE_MAX];
    snprintf(text, sizeof text, "%s: %s", who, what);
    const zs__exit_report report = {ZS_EXIT_CAUSE_CONFIG, ZS_CONFIG_EXIT_CODE, -1, "", text};
    if (g_registered) {
        /* After zs_create: the registered job knows the world and the hosts. */
        zs__exit_report_emit(&report);
        return ZS_CONFIG_EXIT_CODE;
    }
    zs__exit_job job;
    zs__exit_job_from_environment(&job);
    const int rc = zs__exit_report_write_for(&job, &report, NULL, 0);
    if (rc < 0)
        fprintf(stderr, "%s: could not write the exit report into %s (ZS_REPORT_DIR): %s; a "
                        "launcher then goes by the exit code %d\n",
                who, job.report_dir, strerror(-rc), ZS_CONFIG_EXIT_CODE);
    return ZS_CONFIG_EXIT_CODE;
}
