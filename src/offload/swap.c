/* The NVMe tier's swap file (see swap.h): an O_TMPFILE file, or the named
 * way with its per-run directory where the file system has no O_TMPFILE; the
 * I/O thread pool, checksums and deadlines.
 *
 * Why a pool of pread/pwrite threads rather than io_uring: with O_DIRECT a
 * blocking pread/pwrite is already zero-copy, and two to four threads keep
 * as many requests in flight as the benchmark needed to reach the raw
 * device's bandwidth (bench/offload/bench_swap.c; numbers in
 * docs/ARCHITECTURE.md). io_uring would add a required dependency and is
 * refused by the default seccomp profile of Docker and by kernels with
 * io_uring_disabled set, exactly where training jobs run. */
#define _GNU_SOURCE /* O_DIRECT, fallocate */
#include "offload/swap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

#define SWAP_PREFIX "zeroshard-swap-"
/* One system call moves at most this much, so a slow but moving device
 * shows progress to the deadline well within timeout_s. */
#define SWAP_CHUNK_BYTES ((size_t)16 << 20)

enum { REQ_QUEUED, REQ_RUNNING, REQ_DONE };

struct zs__swap_req {
    zs__swap_req *next;              /* the queue */
    zs__swap_req *all_prev, *all_next; /* every request not yet freed */
    int is_write;
    int state;
    int abandoned; /* the waiter timed out: the I/O thread frees it */
    uint64_t offset;
    unsigned char *buf;
    size_t bytes;  /* whole blocks */
    uint64_t submit_ns;
    zs_status status;
    char label[320];
    char message[1536];
};

struct zs__swap {
    char parent[PATH_MAX]; /* the user's directory (offload.nvme_path) */
    char dir[PATH_MAX];    /* the per-run directory */
    char path[PATH_MAX];   /* the swap file (unlinked) */
    char run_name[128];    /* zeroshard-swap-<runid> */
    char owner_name[32];   /* owner-<rank> */
    int rank;
    int fd;
    int owner_fd; /* flock()ed while this rank lives */
    int direct;
    int tmpfile;  /* 1: opened with O_TMPFILE, no per-run directory */
    uint64_t capacity;
    size_t block_bytes;
    uint64_t block_count;
    uint64_t *sums;         /* XXH3-64 of each block as last written */
    unsigned char *written; /* 1 when sums[b] describes the block on the file */
    size_t meta_bytes;
    zs__mem *mem;
    zs__swap_config cfg;

    pthread_mutex_t lock;
    pthread_cond_t work; /* a request was queued, or stop */
    pthread_cond_t done; /* a request finished, or I/O made progress */
    zs__swap_req *head, *tail;
    zs__swap_req *all;
    int inflight; /* queued or running */
    int stop;
    uint64_t progress_ns; /* when an I/O system call last completed */
    pthread_t *threads;
    int thread_count;
};

/* vsnprintf: messages are cut, never overrun, when a path is very long. */
static void format_into(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void format_into(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
}

static const char *fs_name(long type) {
    switch ((unsigned long)type) {
    case 0x01021994ul: return "tmpfs";
    case 0xEF53ul: return "ext4";
    case 0x58465342ul: return "xfs";
    case 0x9123683Eul: return "btrfs";
    case 0x6969ul: return "nfs";
    case 0x794c7630ul: return "overlayfs";
    case 0x65735546ul: return "fuse";
    case 0x2fc12fc1ul: return "zfs";
    default: return "an unrecognized file system";
    }
}

static void host_name(char *out, size_t cap) {
    if (gethostname(out, cap) != 0) snprintf(out, cap, "unknown");
    out[cap - 1] = '\0';
    for (char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-'))
            *c = '_';
}

void zs__swap_default_runid(char *out, size_t cap) {
    char host[128];
    host_name(host, sizeof host);
    snprintf(out, cap, "%.48s-%ld", host, (long)getpid()); /* within the 64-character limit */
}

static int valid_runid(const char *id) {
    size_t n = strlen(id);
    if (n == 0 || n > 64 || strcmp(id, ".") == 0 || strcmp(id, "..") == 0) return 0;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return 0;
    return 1;
}

/* What to do about an errno from the swap file, appended to messages. */
static const char *advice(const zs__swap *sw, int err, char *out, size_t cap) {
    if (err == ENOSPC || err == EDQUOT)
        format_into(out, cap,
                 " (the NVMe tier needs %llu bytes under offload.nvme_path = %s; free space or "
                 "point it elsewhere)",
                 (unsigned long long)sw->capacity, sw->parent);
    else if (err == EIO)
        snprintf(out, cap, " (the storage reported an I/O error; check the device and the "
                           "kernel log, or point offload.nvme_path at another disk)");
    else out[0] = '\0';
    return out;
}

/* ------------------------------------------------------------------------
 * Per-run directories of runs that are gone */

/* Removes parentfd/name if every owner in it is from this host and holds no
 * lock (its process is gone) and it holds nothing but owner files and swap
 * files. Anything it cannot judge is left alone. */
static void remove_if_stale(int parentfd, const char *parent, const char *name,
                            const char *host) {
    int rfd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0) return;
    int lfd = dup(rfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0) close(lfd);
        close(rfd);
        return;
    }
    char owners[256] = "";
    int stale = 1;
    /* Each owner file is locked as it is judged and its descriptor kept, so
     * no owner can come back to life between the judgement and the removal
     * (a new owner that raced us sees its file unlinked and retries). */
    int locked[64], nlocked = 0;
    struct dirent *e;
    while (stale && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (strncmp(e->d_name, "rank-", 5) == 0 && strstr(e->d_name, ".swap")) continue;
        if (strncmp(e->d_name, "owner-", 6) != 0 || nlocked == 64) {
            stale = 0; /* not ours: leave the directory alone */
            break;
        }
        int ofd = openat(rfd, e->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (ofd < 0) {
            stale = 0;
            break;
        }
        char text[256] = "";
        ssize_t n = pread(ofd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = '\0';
        char their_host[128] = "";
        long pid = 0;
        if (sscanf(text, "host=%127s pid=%ld", their_host, &pid) == 2 &&
            strcmp(their_host, host) != 0) {
            /* On a shared file system, a lock held on another host may not
             * be visible here: never judge another host's run. */
            close(ofd);
            stale = 0;
            break;
        }
        if (flock(ofd, LOCK_EX | LOCK_NB) != 0) {
            close(ofd); /* its owner is alive */
            stale = 0;
            break;
        }
        locked[nlocked++] = ofd;
        size_t used = strlen(owners);
        if (pid > 0 && used + 32 < sizeof owners)
            snprintf(owners + used, sizeof owners - used, "%spid %ld", used ? ", " : "", pid);
    }
    if (stale) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(rfd, e->d_name, 0);
        /* ENOTEMPTY: an owner arrived after the listing; it keeps the directory. */
        if (unlinkat(parentfd, name, AT_REMOVEDIR) == 0)
            ZS_INFO("removed %s/%s, the swap directory of a run that is gone (%s on %s)", parent,
                    name, owners[0] ? owners : "no owner recorded", host);
    }
    for (int k = 0; k < nlocked; k++) close(locked[k]);
    closedir(d);
    close(rfd);
}

static void remove_stale_runs(int parentfd, const char *parent, const char *ours,
                              const char *host) {
    int lfd = dup(parentfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0) close(lfd);
        return;
    }
    /* Names first, then removal: removing while reading a directory stream
     * may skip entries. */
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, SWAP_PREFIX, strlen(SWAP_PREFIX)) != 0 ||
            strcmp(e->d_name, ours) == 0)
            continue;
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            char **grown = zs__realloc(names, ncap * sizeof *names);
            if (!grown) break;
            names = grown;
            cap = ncap;
        }
        if (!(names[count] = zs__strdup(e->d_name))) break;
        count++;
    }
    closedir(d);
    for (size_t k = 0; k < count; k++) {
        remove_if_stale(parentfd, parent, names[k], host);
        free(names[k]);
    }
    free(names);
}

/* ------------------------------------------------------------------------
 * The I/O threads */

static void req_fail(zs__swap *sw, zs__swap_req *r, uint64_t at, int err, const char *what) {
    char more[PATH_MAX + 256];
    r->status = ZS_ERR_IO;
    format_into(r->message, sizeof r->message, "%s: %s of '%s' failed at byte %llu: %s%s", sw->path,
             what, r->label, (unsigned long long)at, strerror(err),
             advice(sw, err, more, sizeof more));
}

/* Only the time: a waiter whose deadline passes re-reads it and waits on,
 * so progress needs no wake-up (waking every waiter per system call cost
 * bandwidth on a fast disk). */
static void note_progress(zs__swap *sw) {
    pthread_mutex_lock(&sw->lock);
    sw->progress_ns = zs__clock_ns();
    pthread_mutex_unlock(&sw->lock);
}

static void run_request(zs__swap *sw, zs__swap_req *r) {
    uint64_t first = r->offset / sw->block_bytes;
    uint64_t blocks = r->bytes / sw->block_bytes;
    /* The blocks are about to change: until the write succeeds they have no
     * valid checksum, so a failed write is never read back as good data
     * (blocks of earlier writes keep theirs). */
    if (r->is_write) memset(sw->written + first, 0, blocks);
    size_t done = 0;
    while (done < r->bytes) {
        size_t want = r->bytes - done;
        if (want > SWAP_CHUNK_BYTES) want = SWAP_CHUNK_BYTES;
        uint64_t at = r->offset + done;
        if (sw->cfg.test_before_io) sw->cfg.test_before_io(sw->cfg.test_arg);
        int injected = zs__fs_fault(r->is_write ? "pwrite" : "pread");
        ssize_t n = -1;
        if (!injected)
            n = r->is_write ? pwrite(sw->fd, r->buf + done, want, (off_t)at)
                            : pread(sw->fd, r->buf + done, want, (off_t)at);
        int err = injected ? injected : errno;
        if (n < 0) {
            if (err == EINTR) continue;
            req_fail(sw, r, at, err, r->is_write ? "write" : "read");
            return;
        }
        if ((size_t)n < want && !r->is_write) {
            /* A short read is the end of the file, or (rarely) a partial
             * transfer: the size tells which. */
            struct stat st;
            if (fstat(sw->fd, &st) == 0 && (uint64_t)st.st_size < r->offset + r->bytes &&
                (uint64_t)st.st_size <= at + (uint64_t)n) {
                r->status = ZS_ERR_IO;
                format_into(r->message, sizeof r->message,
                         "%s: short read of '%s' at byte %llu: the file ends at byte %llu, "
                         "%zu bytes early: the swap file was truncated (something changed it "
                         "behind zeroshard's back; the state in it is lost)",
                         sw->path, r->label, (unsigned long long)(at + (uint64_t)n),
                         (unsigned long long)st.st_size, r->bytes - done - (size_t)n);
                return;
            }
        }
        if (n == 0) {
            r->status = ZS_ERR_IO;
            format_into(r->message, sizeof r->message,
                     "%s: %s of '%s' made no progress at byte %llu", sw->path,
                     r->is_write ? "write" : "read", r->label, (unsigned long long)at);
            return;
        }
        size_t next = done + (size_t)n;
        /* O_DIRECT cannot continue at an unaligned offset: redo the partial
         * page (pread/pwrite are idempotent). */
        if (sw->direct) next -= next % ZS_SWAP_ALIGNMENT;
        if (next == done) {
            r->status = ZS_ERR_IO;
            format_into(r->message, sizeof r->message,
                     "%s: %s of '%s' moved less than one page at byte %llu", sw->path,
                     r->is_write ? "write" : "read", r->label, (unsigned long long)at);
            return;
        }
        done = next;
        if (done < r->bytes) note_progress(sw); /* the completion notes the last */
    }
    for (uint64_t b = 0; b < blocks; b++) {
        const unsigned char *p = r->buf + b * sw->block_bytes;
        uint64_t sum = XXH3_64bits(p, sw->block_bytes);
        uint64_t at = r->offset + b * sw->block_bytes;
        if (r->is_write) {
            sw->sums[first + b] = sum;
            sw->written[first + b] = 1;
        } else if (!sw->written[first + b]) {
            r->status = ZS_ERR_IO;
            format_into(r->message, sizeof r->message,
                     "%s: '%s' reads the block at byte %llu, which was never written or whose "
                     "write failed",
                     sw->path, r->label, (unsigned long long)at);
            return;
        } else if (sum != sw->sums[first + b]) {
            r->status = ZS_ERR_IO;
            format_into(r->message, sizeof r->message,
                     "%s: checksum mismatch in '%s' at byte %llu (block %llu of %zu bytes): the "
                     "swap file was changed or truncated behind zeroshard's back; the state in "
                     "it is lost",
                     sw->path, r->label, (unsigned long long)at,
                     (unsigned long long)(first + b), sw->block_bytes);
            return;
        }
    }
}

static void unlink_all(zs__swap *sw, zs__swap_req *r) {
    if (r->all_prev) r->all_prev->all_next = r->all_next;
    else sw->all = r->all_next;
    if (r->all_next) r->all_next->all_prev = r->all_prev;
}

static void *io_thread(void *arg) {
    zs__swap *sw = arg;
    pthread_mutex_lock(&sw->lock);
    for (;;) {
        while (!sw->head && !sw->stop) pthread_cond_wait(&sw->work, &sw->lock);
        zs__swap_req *r = sw->head;
        if (!r) break; /* stop, and nothing left to do */
        sw->head = r->next;
        if (!sw->head) sw->tail = NULL;
        r->state = REQ_RUNNING;
        pthread_mutex_unlock(&sw->lock);
        run_request(sw, r);
        pthread_mutex_lock(&sw->lock);
        r->state = REQ_DONE;
        sw->inflight--;
        sw->progress_ns = zs__clock_ns();
        if (r->abandoned) {
            unlink_all(sw, r);
            free(r);
        }
        pthread_cond_broadcast(&sw->done);
    }
    pthread_mutex_unlock(&sw->lock);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Create and destroy */

static zs_status open_parent(const char *dir, int *fd) {
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd >= 0) return ZS_OK;
    int err = errno;
    return zs__fail(ZS_ERR_IO,
                    "%s: cannot open the NVMe tier's directory (offload.nvme_path): %s%s", dir,
                    strerror(err),
                    err == ENOENT    ? "; create it, or point offload.nvme_path at an existing "
                                       "directory on the NVMe disk"
                    : err == ENOTDIR ? "; it is not a directory"
                                     : "");
}

/* mkdir of the per-run directory (shared by the run's ranks), then this
 * rank's owner file, locked. Retries when a concurrent cleanup removed the
 * directory or the owner file in between. */
static zs_status join_run_dir(zs__swap *sw, int parentfd, const char *host, int *runfd) {
    *runfd = -1;
    for (int attempt = 0; attempt < 8; attempt++) {
        int injected = zs__fs_fault("mkdir");
        if (injected) errno = injected;
        if ((injected || mkdirat(parentfd, sw->run_name, 0700) != 0) && errno != EEXIST) {
            int err = errno;
            return zs__fail(ZS_ERR_IO,
                            "%s: cannot create the NVMe tier's swap directory: %s%s", sw->dir,
                            strerror(err),
                            err == EACCES || err == EROFS || err == EPERM
                                ? " (offload.nvme_path must be a writable directory; fix its "
                                  "permissions or point it elsewhere)"
                                : "");
        }
        int rfd = openat(parentfd, sw->run_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (rfd < 0) {
            if (errno == ENOENT) continue;
            return zs__fail(ZS_ERR_IO, "%s: cannot open the swap directory: %s%s", sw->dir,
                            strerror(errno),
                            errno == ELOOP || errno == ENOTDIR
                                ? " (something that is not a directory has its name; remove it)"
                                : "");
        }
        int ofd = openat(rfd, sw->owner_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (ofd < 0) {
            int err = errno;
            close(rfd);
            if (err == ENOENT) continue;
            return zs__fail(ZS_ERR_IO, "%s/%s: cannot create the owner file: %s", sw->dir,
                            sw->owner_name, strerror(err));
        }
        if (flock(ofd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            close(ofd);
            close(rfd);
            return zs__fail(ZS_ERR_IO,
                            "%s/%s: %s: another live process is rank %d of this run; give each "
                            "job its own runid",
                            sw->dir, sw->owner_name, strerror(err), sw->rank);
        }
        struct stat st;
        if (fstat(ofd, &st) != 0 || st.st_nlink == 0) {
            close(ofd); /* removed by a concurrent cleanup before we locked it */
            close(rfd);
            continue;
        }
        char text[200];
        int n = snprintf(text, sizeof text, "host=%s pid=%ld\n", host, (long)getpid());
        if (ftruncate(ofd, 0) != 0 || pwrite(ofd, text, (size_t)n, 0) != n) {
            int err = errno;
            unlinkat(rfd, sw->owner_name, 0);
            close(ofd);
            close(rfd);
            return zs__fail(ZS_ERR_IO, "%s/%s: cannot write the owner file: %s", sw->dir,
                            sw->owner_name, strerror(err));
        }
        sw->owner_fd = ofd;
        *runfd = rfd;
        return ZS_OK;
    }
    return zs__fail(ZS_ERR_IO, "%s: the swap directory kept disappearing while it was created; "
                               "is another job cleaning %s?",
                    sw->dir, sw->parent);
}

/* One line when O_DIRECT is refused (EINVAL): the tier still works, through
 * the page cache. dirfd is the directory the file is in. */
static void warn_buffered(const zs__swap *sw, int dirfd) {
    struct statfs sf;
    const char *fs = fstatfs(dirfd, &sf) == 0 ? fs_name(sf.f_type) : "its file system";
    ZS_WARN("%s: O_DIRECT is not supported on %s (%s); the NVMe tier uses buffered I/O "
            "there, through the page cache",
            sw->path, fs, strerror(EINVAL));
}

/* The file without a name: O_TMPFILE in the user's directory (O_EXCL: it can
 * never be linked in later), so there is nothing to clean up, ever. *opened
 * is 0 (and ZS_OK) where the kernel or the file system has no O_TMPFILE
 * (EISDIR from kernels before 3.11, EOPNOTSUPP from NFS and some FUSE file
 * systems): the caller then takes the named way. "tmpfile:EOPNOTSUPP:n" in
 * ZS_FAULT_ERRNO plays such a file system. */
static zs_status open_tmpfile(zs__swap *sw, int parentfd, int *opened) {
    *opened = 0;
    const int flags = O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC;
    int err = zs__fs_fault("tmpfile");
    int fd = -1;
    if (!err && sw->cfg.try_direct) {
        /* "odirect:EINVAL:n" plays a file system without O_DIRECT, as in
         * open_swap_file. */
        err = zs__fs_fault("odirect");
        fd = err ? -1 : openat(parentfd, ".", flags | O_DIRECT, 0600);
        if (fd >= 0) sw->direct = 1;
        else if (!err) err = errno;
        /* EINVAL: no O_DIRECT here (or, on some kernels, no O_TMPFILE):
         * without O_DIRECT tells the two apart. */
        if (fd < 0 && err == EINVAL) err = 0;
    }
    if (fd < 0 && !err) {
        fd = openat(parentfd, ".", flags, 0600);
        if (fd < 0) err = errno;
        else if (sw->cfg.try_direct) warn_buffered(sw, parentfd);
    }
    if (fd >= 0) {
        sw->fd = fd;
        sw->tmpfile = 1;
        *opened = 1;
        return ZS_OK;
    }
    if (err == EOPNOTSUPP || err == EISDIR || err == EINVAL) {
        ZS_INFO("%s: this file system cannot open a file without a name (O_TMPFILE: %s); the "
                "NVMe tier creates a named file in a per-run directory and unlinks it at once",
                sw->parent, strerror(err));
        return ZS_OK;
    }
    char more[PATH_MAX + 256];
    return zs__fail(ZS_ERR_IO, "%s: cannot create the swap file: %s%s%s", sw->path, strerror(err),
                    advice(sw, err, more, sizeof more),
                    err == EACCES || err == EROFS || err == EPERM
                        ? " (offload.nvme_path must be a writable directory; fix its "
                          "permissions or point it elsewhere)"
                        : "");
}

static zs_status open_swap_file(zs__swap *sw, int runfd) {
    char name[48];
    snprintf(name, sizeof name, "rank-%d.swap", sw->rank);
    /* A file of the same name can only be a leftover of this rank's crashed
     * predecessor with the same runid (we hold the rank's owner lock). */
    unlinkat(runfd, name, 0);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = -1;
    if (sw->cfg.try_direct) {
        /* "odirect:EINVAL:n" in ZS_FAULT_ERRNO plays a file system without
         * O_DIRECT (tmpfs before Linux 6.6, some FUSE and network ones). */
        int injected = zs__fs_fault("odirect");
        errno = injected;
        fd = injected ? -1 : openat(runfd, name, flags | O_DIRECT, 0600);
        if (fd >= 0) sw->direct = 1;
        else if (errno != EINVAL) goto fail;
        if (fd < 0) warn_buffered(sw, runfd);
    }
    if (fd < 0) fd = openat(runfd, name, flags, 0600);
    if (fd < 0) goto fail;
    /* Unlinked at once: the data lives as long as the descriptor, so nothing
     * is left on the disk whatever happens to the process. */
    if (unlinkat(runfd, name, 0) != 0) {
        int err = errno;
        close(fd);
        return zs__fail(ZS_ERR_IO, "%s: cannot unlink the swap file after opening it: %s",
                        sw->path, strerror(err));
    }
    sw->fd = fd;
    return ZS_OK;
fail:;
    int err = errno;
    char more[PATH_MAX + 256];
    return zs__fail(ZS_ERR_IO, "%s: cannot create the swap file: %s%s", sw->path, strerror(err),
                    advice(sw, err, more, sizeof more));
}

static zs_status reserve(zs__swap *sw) {
    if (sw->capacity == 0) return ZS_OK;
    int injected = zs__fs_fault("fallocate");
    int err = injected;
    if (!injected) err = fallocate(sw->fd, 0, 0, (off_t)sw->capacity) == 0 ? 0 : errno;
    if (err == EOPNOTSUPP || err == ENOSYS) err = posix_fallocate(sw->fd, 0, (off_t)sw->capacity);
    if (err == 0) return ZS_OK;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
        /* No preallocation here (glibc's posix_fallocate emulation writes a
         * byte per block, which O_DIRECT refuses): the file gets its size and
         * the space is claimed at write time. */
        if (ftruncate(sw->fd, (off_t)sw->capacity) != 0) {
            err = errno;
        } else {
            ZS_INFO("%s: this file system cannot preallocate (%s); the swap file's %llu bytes "
                    "are claimed as they are written, so a full disk shows as ENOSPC then",
                    sw->path, strerror(err), (unsigned long long)sw->capacity);
            return ZS_OK;
        }
    }
    char more[PATH_MAX + 256];
    struct statvfs vfs;
    char avail[64] = "";
    if (fstatvfs(sw->fd, &vfs) == 0)
        snprintf(avail, sizeof avail, "; %llu bytes are free there",
                 (unsigned long long)vfs.f_bavail * (unsigned long long)vfs.f_frsize);
    return zs__fail(ZS_ERR_IO, "%s: cannot reserve %llu bytes: %s%s%s", sw->path,
                    (unsigned long long)sw->capacity, strerror(err),
                    advice(sw, err, more, sizeof more), err == ENOSPC ? avail : "");
}

static void leave_run_dir(zs__swap *sw) {
    if (sw->tmpfile) return; /* no per-run directory was joined */
    int pfd = open(sw->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd >= 0) {
        if (sw->owner_fd >= 0) {
            int rfd = openat(pfd, sw->run_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (rfd >= 0) {
                unlinkat(rfd, sw->owner_name, 0);
                close(rfd);
            }
        }
        /* The last rank out removes the directory: rmdir succeeds only when
         * it is empty (every swap file is unlinked already), and ENOTEMPTY
         * means another rank is still in it. Also after a failed create, so
         * an empty directory is not left behind. */
        unlinkat(pfd, sw->run_name, AT_REMOVEDIR);
        close(pfd);
    }
    if (sw->owner_fd >= 0) close(sw->owner_fd); /* releases the lock */
    sw->owner_fd = -1;
}

zs_status zs__swap_create(const char *dir, int rank, uint64_t capacity, size_t block_bytes,
                          zs__mem *mem, zs__swap **out) {
    return zs__swap_create_with(dir, rank, capacity, block_bytes, NULL, mem, out);
}

zs_status zs__swap_create_with(const char *dir, int rank, uint64_t capacity, size_t block_bytes,
                               const zs__swap_config *cfg, zs__mem *mem, zs__swap **out) {
    *out = NULL;
    zs__swap_config defaults = ZS__SWAP_CONFIG_INIT;
    if (!cfg) cfg = &defaults;
    if (!dir || !*dir)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "swap: no directory given (offload.nvme_path)");
    if (block_bytes == 0 || block_bytes % ZS_SWAP_ALIGNMENT != 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "swap: block_bytes = %zu is not a positive multiple of %d", block_bytes,
                        ZS_SWAP_ALIGNMENT);
    if (rank < 0 || cfg->io_threads < 1 || cfg->io_threads > 64 || !(cfg->timeout_s > 0))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "swap: rank %d, io_threads %d (1..64), timeout_s %g (> 0)", rank,
                        cfg->io_threads, cfg->timeout_s);
    uint64_t blocks = capacity / block_bytes + (capacity % block_bytes != 0);
    if (blocks > SIZE_MAX / 16)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "swap: capacity %llu is too large",
                        (unsigned long long)capacity);

    char host[128], runid[96];
    host_name(host, sizeof host);
    if (cfg->runid && *cfg->runid) {
        if (!valid_runid(cfg->runid))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "swap: runid \"%s\" must be 1-64 characters of [A-Za-z0-9._-]",
                            cfg->runid);
        snprintf(runid, sizeof runid, "%s", cfg->runid);
    } else {
        zs__swap_default_runid(runid, sizeof runid);
    }

    zs__swap *sw = zs__calloc(1, sizeof *sw);
    if (!sw) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "swap: cannot allocate the swap object");
    sw->fd = sw->owner_fd = -1;
    sw->rank = rank;
    sw->mem = mem;
    sw->cfg = *cfg;
    sw->cfg.runid = NULL; /* not kept: the caller's string */
    sw->block_bytes = block_bytes;
    sw->block_count = blocks;
    sw->capacity = blocks * block_bytes;
    snprintf(sw->parent, sizeof sw->parent, "%s", dir);
    snprintf(sw->run_name, sizeof sw->run_name, SWAP_PREFIX "%s", runid);
    snprintf(sw->owner_name, sizeof sw->owner_name, "owner-%d", rank);
    int n1 = snprintf(sw->dir, sizeof sw->dir, "%s", dir);
    int n2 = snprintf(sw->path, sizeof sw->path, "%s/rank-%d.swap (unnamed: O_TMPFILE)", dir,
                      rank);
    zs_status status = ZS_OK;
    int parentfd = -1, runfd = -1, opened = 0;
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof sw->path) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", dir);
        goto fail;
    }
    ZS_CHECK_GOTO(open_parent(dir, &parentfd), status, fail);
    if (cfg->try_tmpfile) ZS_CHECK_GOTO(open_tmpfile(sw, parentfd, &opened), status, fail);
    if (!opened) {
        /* The named way: the per-run directory, the file, unlinked at once. */
        n1 = snprintf(sw->dir, sizeof sw->dir, "%s/%s", dir, sw->run_name);
        n2 = snprintf(sw->path, sizeof sw->path, "%s/rank-%d.swap", sw->dir, rank);
        if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof sw->path) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", dir);
            goto fail;
        }
        remove_stale_runs(parentfd, dir, sw->run_name, host);
        ZS_CHECK_GOTO(join_run_dir(sw, parentfd, host, &runfd), status, fail);
        ZS_CHECK_GOTO(open_swap_file(sw, runfd), status, fail);
    }
    ZS_CHECK_GOTO(reserve(sw), status, fail);

    sw->meta_bytes = (size_t)blocks * ZS_SWAP_META_BYTES_PER_BLOCK; /* a sum and a flag */
    if (!(sw->sums = zs__calloc(blocks ? blocks : 1, sizeof *sw->sums)) ||
        !(sw->written = zs__calloc(blocks ? blocks : 1, 1))) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the checksum table (%zu bytes)",
                          sw->path, sw->meta_bytes);
        goto fail;
    }
    /* The checksum table is host memory kept for the state it protects. */
    if (mem) zs__mem_charge(mem, ZS_MEM_HOST_STATE, sw->meta_bytes);

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&sw->lock, NULL);
    pthread_cond_init(&sw->work, &ca);
    pthread_cond_init(&sw->done, &ca);
    pthread_condattr_destroy(&ca);
    sw->progress_ns = zs__clock_ns();
    sw->threads = zs__calloc((size_t)cfg->io_threads, sizeof *sw->threads);
    if (!sw->threads) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the I/O threads", sw->path);
    } else {
        for (int t = 0; t < cfg->io_threads; t++) {
            int err = pthread_create(&sw->threads[t], NULL, io_thread, sw);
            if (err) {
                status = zs__fail(ZS_ERR_INTERNAL, "%s: cannot start I/O thread %d: %s", sw->path,
                                  t, strerror(err));
                break;
            }
            sw->thread_count++;
        }
    }
    if (status != ZS_OK) {
        zs__swap_destroy(sw); /* joins the threads that started */
        if (parentfd >= 0) close(parentfd);
        if (runfd >= 0) close(runfd);
        return status;
    }
    close(parentfd);
    if (runfd >= 0) close(runfd);
    ZS_INFO("NVMe tier: %s (%s), %llu bytes in blocks of %zu, %s, %d I/O threads", sw->path,
            sw->tmpfile ? "O_TMPFILE" : "unlinked", (unsigned long long)sw->capacity, block_bytes, sw->direct ? "O_DIRECT" : "buffered",
            cfg->io_threads);
    *out = sw;
    return ZS_OK;

fail:
    if (sw->fd >= 0) close(sw->fd);
    free(sw->sums);
    free(sw->written);
    if (runfd >= 0) close(runfd);
    if (parentfd >= 0) close(parentfd);
    leave_run_dir(sw);
    free(sw);
    return status;
}

void zs__swap_destroy(zs__swap *sw) {
    if (!sw) return;
    if (sw->threads) {
        pthread_mutex_lock(&sw->lock);
        sw->stop = 1;
        pthread_cond_broadcast(&sw->work);
        uint64_t limit = (uint64_t)(sw->cfg.timeout_s * 1e9);
        int stuck = 0;
        while (sw->inflight > 0) {
            uint64_t now = zs__clock_ns();
            if (now - sw->progress_ns >= limit) {
                stuck = 1;
                break;
            }
            uint64_t until = sw->progress_ns + limit;
            struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
            pthread_cond_timedwait(&sw->done, &sw->lock, &ts);
        }
        pthread_mutex_unlock(&sw->lock);
        if (stuck) {
            /* Freeing now would pull memory from under a thread that the
             * kernel may still wake; leak it and say so. */
            ZS_LOG_ERROR_("%s: %d I/O requests made no progress for %g s; the swap file is "
                          "left open and its memory leaked (check the device)",
                          sw->path, sw->inflight, sw->cfg.timeout_s);
            return;
        }
        for (int t = 0; t < sw->thread_count; t++) pthread_join(sw->threads[t], NULL);
        free(sw->threads);
        while (sw->all) {
            zs__swap_req *r = sw->all;
            unlink_all(sw, r);
            free(r);
        }
        pthread_cond_destroy(&sw->work);
        pthread_cond_destroy(&sw->done);
        pthread_mutex_destroy(&sw->lock);
    }
    if (sw->fd >= 0) close(sw->fd);
    if (sw->sums && sw->mem) zs__mem_uncharge(sw->mem, ZS_MEM_HOST_STATE, sw->meta_bytes);
    free(sw->sums);
    free(sw->written);
    leave_run_dir(sw);
    free(sw);
}

/* ------------------------------------------------------------------------
 * Buffers and requests */

zs_status zs__swap_buffer_alloc(zs__swap *sw, size_t bytes, zs_mem_tag tag, void **out) {
    *out = NULL;
    if (bytes == 0) return ZS_OK;
    size_t rounded;
    if (!zs__add_size(bytes, ZS_SWAP_ALIGNMENT - 1, &rounded))
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "swap buffer of %zu bytes overflows", bytes);
    rounded -= rounded % ZS_SWAP_ALIGNMENT;
    void *p = zs__aligned_alloc(ZS_SWAP_ALIGNMENT, rounded);
    if (!p)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY,
                        "cannot allocate a %zu-byte swap buffer for '%s' (%s)", bytes,
                        zs_mem_tag_name(tag), sw->path);
    memset(p, 0, rounded);
    if (sw->mem) zs__mem_charge(sw->mem, tag, bytes);
    *out = p;
    return ZS_OK;
}

void zs__swap_buffer_free(zs__swap *sw, void *p, size_t bytes, zs_mem_tag tag) {
    if (!p) return;
    if (sw->mem) zs__mem_uncharge(sw->mem, tag, bytes);
    free(p);
}

static zs_status submit(zs__swap *sw, int is_write, uint64_t offset, void *buf, size_t bytes,
                        const char *label, zs__swap_req **req) {
    *req = NULL;
    const char *what = is_write ? "write" : "read";
    if (!label) label = "(unlabelled)";
    if (!buf || bytes == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s of '%s': no buffer or zero bytes",
                        sw->path, what, label);
    size_t whole = bytes + (sw->block_bytes - bytes % sw->block_bytes) % sw->block_bytes;
    if (offset % sw->block_bytes != 0 || whole < bytes || offset > sw->capacity ||
        whole > sw->capacity - offset)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s of '%s' at byte %llu, %zu bytes: the offset must be a multiple "
                        "of the block size %zu and the blocks must end within the capacity %llu",
                        sw->path, what, label, (unsigned long long)offset, bytes, sw->block_bytes,
                        (unsigned long long)sw->capacity);
    if (sw->direct && (uintptr_t)buf % ZS_SWAP_ALIGNMENT != 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s of '%s': the buffer is not aligned to %d bytes, which O_DIRECT "
                        "needs; allocate it with zs__swap_buffer_alloc",
                        sw->path, what, label, ZS_SWAP_ALIGNMENT);
    zs__swap_req *r = zs__calloc(1, sizeof *r);
    if (!r) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a request", sw->path);
    r->is_write = is_write;
    r->offset = offset;
    r->buf = buf;
    r->bytes = whole;
    r->state = REQ_QUEUED;
    r->status = ZS_OK;
    snprintf(r->label, sizeof r->label, "%s", label);
    pthread_mutex_lock(&sw->lock);
    r->submit_ns = zs__clock_ns();
    if (sw->tail) sw->tail->next = r;
    else sw->head = r;
    sw->tail = r;
    r->all_next = sw->all;
    if (sw->all) sw->all->all_prev = r;
    sw->all = r;
    sw->inflight++;
    pthread_cond_signal(&sw->work);
    pthread_mutex_unlock(&sw->lock);
    *req = r;
    return ZS_OK;
}

zs_status zs__swap_write(zs__swap *sw, uint64_t offset, const void *buf, size_t bytes,
                         const char *label, zs__swap_req **req) {
    /* The buffer is only read; the request type holds it without const. */
    return submit(sw, 1, offset, (void *)(uintptr_t)buf, bytes, label, req);
}

zs_status zs__swap_read(zs__swap *sw, uint64_t offset, void *buf, size_t bytes,
                        const char *label, zs__swap_req **req) {
    return submit(sw, 0, offset, buf, bytes, label, req);
}

zs_status zs__swap_wait(zs__swap *sw, zs__swap_req *r) {
    if (!r) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: wait on no request", sw->path);
    uint64_t limit = (uint64_t)(sw->cfg.timeout_s * 1e9);
    pthread_mutex_lock(&sw->lock);
    while (r->state != REQ_DONE) {
        /* The deadline counts time without progress on this file: a long
         * queue behind a moving device never times out. */
        uint64_t last = sw->progress_ns > r->submit_ns ? sw->progress_ns : r->submit_ns;
        uint64_t now = zs__clock_ns();
        if (now - last >= limit) {
            /* The message is formatted under the lock: once it is released
             * the I/O thread may finish the abandoned request and free it. */
            r->abandoned = 1;
            int queued = r->state == REQ_QUEUED;
            zs_status st = zs__fail(ZS_ERR_TIMEOUT,
                                    "%s: %s of '%s' at byte %llu (%zu bytes) made no progress for "
                                    "%g s (%s); the device looks stuck: check it and the kernel log",
                                    sw->path, r->is_write ? "write" : "read", r->label,
                                    (unsigned long long)r->offset, r->bytes, sw->cfg.timeout_s,
                                    queued ? "still queued behind other requests" : "in the kernel");
            pthread_mutex_unlock(&sw->lock);
            return st;
        }
        uint64_t until = last + limit;
        struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
        pthread_cond_timedwait(&sw->done, &sw->lock, &ts);
    }
    unlink_all(sw, r);
    pthread_mutex_unlock(&sw->lock);
    zs_status status = r->status;
    if (status != ZS_OK) zs__fail(status, "%s", r->message);
    free(r);
    return status;
}

const char *zs__swap_path(const zs__swap *sw) { return sw->path; }
const char *zs__swap_dir(const zs__swap *sw) { return sw->dir; }
int zs__swap_is_tmpfile(const zs__swap *sw) { return sw->tmpfile; }
int zs__swap_is_direct(const zs__swap *sw) { return sw->direct; }
int zs__swap_fd_for_test(const zs__swap *sw) { return sw->fd; }

int zs__swap_written(const zs__swap *sw, uint64_t offset) {
    const uint64_t block = offset / sw->block_bytes;
    return block < sw->block_count && sw->written[block];
}

void zs__swap_forget(zs__swap *sw) {
    pthread_mutex_lock(&sw->lock);
    memset(sw->written, 0, sw->block_count);
    pthread_mutex_unlock(&sw->lock);
}
