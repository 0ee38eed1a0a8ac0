/* Creating and writing files relative to a directory descriptor (see fs.h).
 * Each step is one checked system call (or a short loop of them), and every
 * failure names the path and the errno text, because a file that silently
 * half-writes is worse than none. Nothing follows a symlink at the final
 * name and nothing is created unless it is new. */
#define _GNU_SOURCE /* getrlimit with RLIM_INFINITY for the file-size message */
#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs_internal.h"

#define CHECK_NAME(dir_path, name)                                                         \
    do {                                                                                   \
        if (!zs__fs_is_component(name))                                                    \
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: invalid file name \"%s\"",       \
                            dir_path, (name) ? (name) : "");                               \
    } while (0)

/* What a failed write means for the user: EFBIG is a file-size limit, not a
 * full disk, and says which limit so the user knows what to raise. */
static zs_status write_failed(const char *path, uint64_t at, int err) {
    if (err == EFBIG) {
        struct rlimit limit;
        char text[64] = "unknown";
        if (getrlimit(RLIMIT_FSIZE, &limit) == 0) {
            if (limit.rlim_cur == RLIM_INFINITY) snprintf(text, sizeof text, "unlimited");
            else snprintf(text, sizeof text, "%llu bytes", (unsigned long long)limit.rlim_cur);
        }
        return zs__fail(ZS_ERR_IO,
                        "%s: write failed at byte %llu: %s: the file would exceed the process "
                        "file-size limit (RLIMIT_FSIZE, `ulimit -f`; now %s) or the largest file "
                        "this file system allows; raise the limit or save to another file system",
                        path, (unsigned long long)at, strerror(err), text);
    }
    if (err == ENOSPC || err == EDQUOT)
        return zs__fail(ZS_ERR_IO,
                        "%s: write failed at byte %llu: %s (the disk or quota is full: free space, "
                        "or keep fewer checkpoints with checkpoint.keep)",
                        path, (unsigned long long)at, strerror(err));
    return zs__fail(ZS_ERR_IO, "%s: write failed at byte %llu: %s", path,
                    (unsigned long long)at, strerror(err));
}

zs_status zs__fs_write_all(int fd, const void *data, size_t bytes, const char *path,
                           uint64_t at) {
    /* A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the
     * process; ignored, the write fails with EFBIG and the caller gets a
     * message instead. The previous disposition is restored afterwards (the
     * runtime writes from one thread; see zs_save). */
    struct sigaction ignore, previous;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    int restore = sigaction(SIGXFSZ, &ignore, &previous) == 0;
    const unsigned char *p = data;
    size_t done = 0;
    zs_status status = ZS_OK;
    while (done < bytes) {
        size_t want = bytes - done;
        if (want > (size_t)SSIZE_MAX) want = (size_t)SSIZE_MAX;
        int injected = zs__fs_fault("write");
        ssize_t n = injected ? -1 : write(fd, p + done, want);
        if (injected) errno = injected;
        if (n < 0) {
            if (errno == EINTR) continue;
            status = write_failed(path, at + done, errno);
            break;
        }
        if (n == 0) {
            status = zs__fail(ZS_ERR_IO, "%s: write made no progress at byte %llu", path,
                              (unsigned long long)(at + done));
            break;
        }
        done += (size_t)n;
    }
    if (restore) sigaction(SIGXFSZ, &previous, NULL);
    return status;
}

zs_status zs__fs_mkdir_new_at(int dirfd, const char *dir_path, const char *name) {
    char path[ZS_FS_SHOWN_MAX];
    CHECK_NAME(dir_path, name);
    int injected = zs__fs_fault("mkdir");
    if (injected) errno = injected;
    if (injected || mkdirat(dirfd, name, 0755) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot create directory: %s%s",
                        zs__fs_shown(path, sizeof path, dir_path, name), strerror(errno),
                        errno == EEXIST ? " (something already has this name; it is not reused)"
                                        : "");
    return ZS_OK;
}

zs_status zs__fs_create_at(int dirfd, const char *dir_path, const char *name, int *fd) {
    char path[ZS_FS_SHOWN_MAX];
    *fd = -1;
    CHECK_NAME(dir_path, name);
    int injected = zs__fs_fault("create");
    if (injected) errno = injected;
    int f = injected ? -1
                     : openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                              0644);
    if (f < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot create: %s%s",
                        zs__fs_shown(path, sizeof path, dir_path, name), strerror(errno),
                        errno == EEXIST ? " (something already has this name; it is not reused "
                                          "or followed)"
                                        : "");
    *fd = f;
    return ZS_OK;
}

zs_status zs__fs_fsync_fd(int fd, const char *path) {
    int injected = zs__fs_fault("fsync");
    if (injected) errno = injected;
    /* EINVAL means the file system cannot sync this kind of file (directories
     * on some network and FUSE file systems); there is nothing more to do. */
    if ((injected || fsync(fd) != 0) && errno != EINVAL)
        return zs__fail(ZS_ERR_IO, "%s: fsync failed: %s%s", path, strerror(errno),
                        errno == EIO ? " (the storage reported an I/O error; check the device "
                                       "and the kernel log)"
                                     : "");
    return ZS_OK;
}

zs_status zs__fs_rename_at(int from_dirfd, const char *from_dir_path, const char *from,
                           int to_dirfd, const char *to_dir_path, const char *to) {
    char a[ZS_FS_SHOWN_MAX], b[ZS_FS_SHOWN_MAX];
    CHECK_NAME(from_dir_path, from);
    CHECK_NAME(to_dir_path, to);
    int injected = zs__fs_fault("rename");
    if (injected) errno = injected;
    if (injected || renameat(from_dirfd, from, to_dirfd, to) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot rename to %s: %s",
                        zs__fs_shown(a, sizeof a, from_dir_path, from),
                        zs__fs_shown(b, sizeof b, to_dir_path, to), strerror(errno));
    return ZS_OK;
}

zs_status zs__fs_write_atomic_at(int dirfd, const char *dir_path, const char *name,
                                 const void *data, size_t bytes) {
    CHECK_NAME(dir_path, name);
    if (!data && bytes > 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s/%s: no data for %zu bytes", dir_path, name,
                        bytes);
    /* The temporary name is unpredictable and created new, so a symlink or
     * file planted at any name cannot receive the data. */
    char temp[300], path[ZS_FS_SHOWN_MAX];
    int n = snprintf(temp, sizeof temp, ".%s.tmp.%ld.%016llx", name, (long)getpid(),
                     (unsigned long long)zs__fs_random());
    if (n < 0 || (size_t)n >= sizeof temp)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s/%s: file name too long", dir_path, name);
    zs__fs_shown(path, sizeof path, dir_path, temp);
    int fd = -1;
    ZS_CHECK(zs__fs_create_at(dirfd, dir_path, temp, &fd));
    zs_status status = zs__fs_write_all(fd, data, bytes, path, 0);
    if (status == ZS_OK) status = zs__fs_fsync_fd(fd, path);
    if (close(fd) != 0 && status == ZS_OK)
        status = zs__fail(ZS_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (status == ZS_OK) status = zs__fs_rename_at(dirfd, dir_path, temp, dirfd, dir_path, name);
    if (status != ZS_OK) {
        unlinkat(dirfd, temp, 0);
        return status;
    }
    return zs__fs_fsync_fd(dirfd, dir_path);
}

zs_status zs__fs_rename(const char *from, const char *to) {
    if (rename(from, to) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot rename to %s: %s", from, to, strerror(errno));
    return ZS_OK;
}

zs_status zs__fs_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open directory to fsync it: %s", path,
                        strerror(errno));
    zs_status status = zs__fs_fsync_fd(fd, path);
    if (close(fd) != 0 && status == ZS_OK)
        status = zs__fail(ZS_ERR_IO, "%s: close of directory failed: %s", path, strerror(errno));
    return status;
}
