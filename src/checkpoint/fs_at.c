/* File-system steps relative to a directory descriptor (see fs.h). The save
 * protocol opens the checkpoint root once and resolves every name below it
 * from that descriptor: a path string resolved again at every step could be
 * swapped underneath (a directory renamed away and a symlink put in its
 * place), and a file opened with O_CREAT alone follows a symlink planted at
 * its name. Here nothing follows a symlink at the final name and nothing is
 * created unless it is new. */
#define _GNU_SOURCE /* getrandom */
#include "checkpoint/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <limits.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/fs_read.h"
#include "core/error.h"

/* A name for messages: "dir/name". Truncation only shortens a message. */
static const char *shown(char *out, size_t cap, const char *dir_path, const char *name) {
    snprintf(out, cap, "%s/%s", dir_path, name);
    return out;
}

static int valid_name(const char *name) {
    return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

#define CHECK_NAME(dir_path, name)                                                         \
    do {                                                                                   \
        if (!valid_name(name))                                                             \
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: invalid file name \"%s\"",       \
                            dir_path, (name) ? (name) : "");                               \
    } while (0)

zs_status zs__fs_open_root(const char *path, int create, int *fd) {
    *fd = -1;
    if (create && mkdir(path, 0755) != 0 && errno != EEXIST)
        return zs__fail(ZS_ERR_IO, "%s: cannot create the checkpoint directory: %s", path,
                        strerror(errno));
    int d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open the checkpoint directory: %s%s", path,
                        strerror(errno),
                        errno == ENOTDIR ? " (a file that is not a directory has that name)" : "");
    *fd = d;
    return ZS_OK;
}

zs_status zs__fs_open_dir_at(int dirfd, const char *dir_path, const char *name, int *fd) {
    char path[4096];
    *fd = -1;
    CHECK_NAME(dir_path, name);
    int d = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open directory: %s%s",
                        shown(path, sizeof path, dir_path, name), strerror(errno),
                        errno == ELOOP || errno == ENOTDIR ? " (it is a symlink or not a directory)"
                                                           : "");
    *fd = d;
    return ZS_OK;
}

zs_status zs__fs_mkdir_new_at(int dirfd, const char *dir_path, const char *name) {
    char path[4096];
    CHECK_NAME(dir_path, name);
    int injected = zs__fs_fault("mkdir");
    if (injected) errno = injected;
    if (injected || mkdirat(dirfd, name, 0755) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot create directory: %s%s",
                        shown(path, sizeof path, dir_path, name), strerror(errno),
                        errno == EEXIST ? " (something already has this name; it is not reused)"
                                        : "");
    return ZS_OK;
}

zs_status zs__fs_create_at(int dirfd, const char *dir_path, const char *name, int *fd) {
    char path[4096];
    *fd = -1;
    CHECK_NAME(dir_path, name);
    int injected = zs__fs_fault("create");
    if (injected) errno = injected;
    int f = injected ? -1
                     : openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                              0644);
    if (f < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot create: %s%s",
                        shown(path, sizeof path, dir_path, name), strerror(errno),
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
    char a[4096], b[4096];
    CHECK_NAME(from_dir_path, from);
    CHECK_NAME(to_dir_path, to);
    int injected = zs__fs_fault("rename");
    if (injected) errno = injected;
    if (injected || renameat(from_dirfd, from, to_dirfd, to) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot rename to %s: %s",
                        shown(a, sizeof a, from_dir_path, from),
                        shown(b, sizeof b, to_dir_path, to), strerror(errno));
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
    char temp[300], path[4096];
    int n = snprintf(temp, sizeof temp, ".%s.tmp.%ld.%016llx", name, (long)getpid(),
                     (unsigned long long)zs__fs_random());
    if (n < 0 || (size_t)n >= sizeof temp)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s/%s: file name too long", dir_path, name);
    shown(path, sizeof path, dir_path, temp);
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

zs__fs_kind zs__fs_kind_at(int dirfd, const char *name) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? ZS_FS_KIND_MISSING : ZS_FS_KIND_OTHER;
    if (S_ISREG(st.st_mode)) return ZS_FS_KIND_FILE;
    if (S_ISDIR(st.st_mode)) return ZS_FS_KIND_DIR;
    if (S_ISLNK(st.st_mode)) return ZS_FS_KIND_SYMLINK;
    return ZS_FS_KIND_OTHER;
}

zs_status zs__fs_list_at(int dirfd, const char *dir_path, char ***names, int *count) {
    return zs__fsr_list_at(dirfd, dir_path, INT_MAX, names, count);
}

uint64_t zs__fs_random(void) {
    uint64_t value = 0;
    if (getrandom(&value, sizeof value, GRND_NONBLOCK) == (ssize_t)sizeof value) return value;
    /* No entropy source (very old kernel, or not yet seeded): a mix of the
     * clock, the process and a stack address is still not guessable from the
     * outside in advance, which is what the names need. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t mix[4] = {(uint64_t)now.tv_sec, (uint64_t)now.tv_nsec, (uint64_t)getpid(),
                       (uint64_t)(uintptr_t)&value};
    return XXH3_64bits(mix, sizeof mix);
}
