/* File-system steps of the checkpoint commit protocol. Each step is one
 * checked system call (or a short loop of them), and every failure names the
 * path and the errno text, because a checkpoint that silently half-writes is
 * worse than none. */
#define _GNU_SOURCE /* getrlimit with RLIM_INFINITY for the file-size message */
#include "checkpoint/fs.h"
#include "checkpoint/fs_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

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

zs_status zs__fs_mkdir(const char *path) {
    if (mkdir(path, 0755) == 0) return ZS_OK;
    int saved = errno;
    if (saved == EEXIST && zs__fs_is_dir(path)) return ZS_OK;
    return zs__fail(ZS_ERR_IO, "%s: cannot create directory: %s", path,
                    saved == EEXIST ? "a file that is not a directory has that name"
                                    : strerror(saved));
}

zs_status zs__fs_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open directory to fsync it: %s", path,
                        strerror(errno));
    /* EINVAL means the file system cannot sync directories at all (some
     * network and FUSE file systems); there is nothing more to do there. */
    if (fsync(fd) != 0 && errno != EINVAL) {
        int saved = errno;
        close(fd);
        return zs__fail(ZS_ERR_IO, "%s: fsync of directory failed: %s", path, strerror(saved));
    }
    if (close(fd) != 0)
        return zs__fail(ZS_ERR_IO, "%s: close of directory failed: %s", path, strerror(errno));
    return ZS_OK;
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

zs_status zs__fs_write_atomic(const char *dir, const char *name, const void *data, size_t bytes) {
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: invalid file name \"%s\"", dir,
                        name ? name : "");
    if (!data && bytes > 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s/%s: no data for %zu bytes", dir, name, bytes);
    char final_path[PATH_MAX], temp_path[PATH_MAX];
    int n1 = snprintf(final_path, sizeof final_path, "%s/%s", dir, name);
    int n2 = snprintf(temp_path, sizeof temp_path, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof final_path || (size_t)n2 >= sizeof temp_path)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s/%s: path too long", dir, name);

    /* A temporary name in the same directory, so the rename is atomic. */
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot create: %s", temp_path, strerror(errno));
    zs_status status = zs__fs_write_all(fd, data, bytes, temp_path, 0);
    if (status == ZS_OK && fsync(fd) != 0)
        status = zs__fail(ZS_ERR_IO, "%s: fsync failed: %s", temp_path, strerror(errno));
    if (close(fd) != 0 && status == ZS_OK)
        status = zs__fail(ZS_ERR_IO, "%s: close failed: %s", temp_path, strerror(errno));
    if (status == ZS_OK && rename(temp_path, final_path) != 0)
        status = zs__fail(ZS_ERR_IO, "%s: cannot rename to %s: %s", temp_path, final_path,
                          strerror(errno));
    if (status != ZS_OK) {
        unlink(temp_path);
        return status;
    }
    ZS_CHECK(zs__fs_fsync_dir(dir));
    return ZS_OK;
}

zs_status zs__fs_rename(const char *from, const char *to) {
    if (rename(from, to) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot rename to %s: %s", from, to, strerror(errno));
    return ZS_OK;
}

zs_status zs__fs_read_file(const char *path, size_t max_bytes, char **data, size_t *bytes) {
    *data = NULL;
    *bytes = 0;
    /* The descriptor-relative reader does the work (regular files only,
     * never through a symlink, size cap): split the path into its directory
     * and the name in it. */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return zs__fail(ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    zs_status status =
        zs__fsr_read_file_at(fd, slash ? slash + 1 : path, path, max_bytes, data, bytes);
    close(fd);
    return status;
}

zs_status zs__fs_list(const char *dir, char ***names, int *count) {
    *names = NULL;
    *count = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return zs__fail(ZS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    zs_status status = zs__fsr_list_at(fd, dir, INT_MAX, names, count);
    close(fd);
    return status;
}

void zs__fs_list_free(char **names, int count) {
    if (!names) return;
    for (int k = 0; k < count; k++) free(names[k]);
    free(names);
}

zs_status zs__fs_remove_dir(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return zs__fail(ZS_ERR_IO, "%s: refusing to remove: not a directory (a symlink?)", path);
    char **names = NULL;
    int count = 0;
    ZS_CHECK(zs__fs_list(path, &names, &count));
    zs_status status = ZS_OK;
    char child[PATH_MAX];
    /* Everything is checked before anything is removed, so a refusal leaves
     * the directory as it was. lstat, so a symlink is never followed. */
    for (int pass = 0; pass < 2 && status == ZS_OK; pass++) {
        for (int k = 0; k < count; k++) {
            int n = snprintf(child, sizeof child, "%s/%s", path, names[k]);
            if (n < 0 || (size_t)n >= sizeof child) {
                status = zs__fail(ZS_ERR_IO, "%s/%s: path too long", path, names[k]);
                break;
            }
            if (pass == 0) {
                if (lstat(child, &st) != 0) {
                    status = zs__fail(ZS_ERR_IO, "%s: cannot stat: %s", child, strerror(errno));
                    break;
                }
                if (!S_ISREG(st.st_mode)) {
                    status = zs__fail(ZS_ERR_IO,
                                      "%s: refusing to remove %s: it holds %s, which is not a "
                                      "regular file (remove it by hand if it is yours)",
                                      path, path, child);
                    break;
                }
            } else if (unlink(child) != 0) {
                status = zs__fail(ZS_ERR_IO, "%s: cannot remove: %s", child, strerror(errno));
                break;
            }
        }
    }
    zs__fs_list_free(names, count);
    if (status != ZS_OK) return status;
    if (rmdir(path) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot remove directory: %s", path, strerror(errno));
    return ZS_OK;
}

int zs__fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int zs__fs_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
