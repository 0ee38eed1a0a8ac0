/* Opening, inspecting and reading files relative to a directory descriptor
 * (see fs.h): openat with O_NOFOLLOW, then fstat on what was actually
 * opened, so the check and the use are of the same file. */
#define _GNU_SOURCE /* getrandom */
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fs_internal.h"

int zs__fs_is_component(const char *name) {
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

const char *zs__fs_shown(char *out, size_t cap, const char *dir_path, const char *name) {
    snprintf(out, cap, "%s/%s", dir_path, name);
    return out;
}

zs_status zs__fs_open_root(const char *path, int create, int *fd) {
    *fd = -1;
    if (create && mkdir(path, 0755) != 0 && errno != EEXIST)
        return zs__fail(ZS_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    int d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open as a directory: %s%s", path, strerror(errno),
                        errno == ENOTDIR ? " (a file that is not a directory has that name)" : "");
    *fd = d;
    return ZS_OK;
}

zs_status zs__fs_open_dir_at(int dirfd, const char *dir_path, const char *name, int *fd) {
    char path[ZS_FS_SHOWN_MAX];
    *fd = -1;
    zs__fs_shown(path, sizeof path, dir_path, name);
    if (!zs__fs_is_component(name))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a plain directory name", path);
    int d = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d >= 0) {
        *fd = d;
        return ZS_OK;
    }
    const int saved = errno;
    /* ELOOP is O_NOFOLLOW meeting a symlink: say so rather than "too many
     * levels of symbolic links", which reads like a broken file system. */
    zs__fs_kind kind = zs__fs_kind_at(dirfd, name);
    if (saved == ELOOP || kind == ZS_FS_KIND_SYMLINK || kind == ZS_FS_KIND_OTHER)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: is a symlink or special file, not a directory; links are never "
                        "followed here (replace it with the real directory)",
                        path);
    return zs__fail(ZS_ERR_IO, "%s: cannot open as a directory: %s", path, strerror(saved));
}

/* Opens dirfd/name (`path` in messages) for reading and checks that it is
 * a regular file; `follow`: a symlink at the name is followed. */
static zs_status open_regular(int dirfd, const char *name, const char *path, int follow, int *fd,
                              uint64_t *bytes) {
    *fd = -1;
    int f = openat(dirfd, name, O_RDONLY | (follow ? 0 : O_NOFOLLOW) | O_CLOEXEC | O_NONBLOCK);
    if (f < 0) {
        const int saved = errno;
        if (saved == ELOOP && !follow)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: is a symlink; only regular files inside the directory are read "
                            "(links are never followed)",
                            path);
        return zs__fail(ZS_ERR_IO, "%s: cannot open: %s", path, strerror(saved));
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        const int saved = errno;
        close(f);
        return zs__fail(ZS_ERR_IO, "%s: cannot stat: %s", path, strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a regular file (a %s); only regular "
                        "files are read here",
                        path, S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO"
                                                  : "device or socket");
    }
    /* Back to blocking reads: O_NONBLOCK was only for the open itself. */
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) (void)fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    if (bytes) *bytes = st.st_size < 0 ? 0 : (uint64_t)st.st_size;
    *fd = f;
    return ZS_OK;
}

zs_status zs__fs_open_file_at(int dirfd, const char *dir_path, const char *name, int *fd,
                              uint64_t *bytes) {
    char path[ZS_FS_SHOWN_MAX];
    *fd = -1;
    zs__fs_shown(path, sizeof path, dir_path, name);
    if (!zs__fs_is_component(name))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a plain file name", path);
    ZS_CHECK(open_regular(dirfd, name, path, 0, fd, bytes));
    return ZS_OK;
}

/* Reads the regular file dirfd/name (`path` in messages; `follow` as for
 * open_regular) of at most max_bytes into a new NUL-terminated buffer. */
static zs_status read_regular(int dirfd, const char *name, const char *path, int follow,
                              size_t max_bytes, char **data, size_t *bytes) {
    *data = NULL;
    *bytes = 0;
    int fd = -1;
    uint64_t size = 0;
    ZS_CHECK(open_regular(dirfd, name, path, follow, &fd, &size));
    zs_status status = ZS_OK;
    char *buffer = NULL;
    if (size > (uint64_t)max_bytes || size >= (uint64_t)SIZE_MAX) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %llu bytes is larger than the limit of %zu",
                          path, (unsigned long long)size, max_bytes);
        goto done;
    }
    buffer = zs__malloc((size_t)size + 1);
    if (!buffer) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes", path,
                          (unsigned long long)size + 1);
        goto done;
    }
    size_t done = 0;
    while (done < (size_t)size) {
        ssize_t n = read(fd, buffer + done, (size_t)size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            status = zs__fail(ZS_ERR_IO, "%s: read failed at byte %zu: %s", path, done,
                              strerror(errno));
            goto done;
        }
        if (n == 0) {
            status = zs__fail(ZS_ERR_IO, "%s: file shrank while being read (%zu of %llu bytes)",
                              path, done, (unsigned long long)size);
            goto done;
        }
        done += (size_t)n;
    }
    buffer[size] = '\0';
    *data = buffer;
    *bytes = (size_t)size;
    buffer = NULL;
done:
    free(buffer);
    close(fd);
    return status;
}

zs_status zs__fs_read_file_at(int dirfd, const char *dir_path, const char *name,
                              size_t max_bytes, char **data, size_t *bytes) {
    char path[ZS_FS_SHOWN_MAX];
    *data = NULL;
    *bytes = 0;
    zs__fs_shown(path, sizeof path, dir_path, name);
    if (!zs__fs_is_component(name))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a plain file name", path);
    ZS_CHECK(read_regular(dirfd, name, path, 0, max_bytes, data, bytes));
    return ZS_OK;
}

zs_status zs__fs_read_file_path(const char *path, size_t max_bytes, char **data, size_t *bytes) {
    ZS_CHECK(read_regular(AT_FDCWD, path, path, 1, max_bytes, data, bytes));
    return ZS_OK;
}

zs__fs_kind zs__fs_kind_at(int dirfd, const char *name) {
    struct stat st;
    if (!zs__fs_is_component(name)) return ZS_FS_KIND_MISSING;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? ZS_FS_KIND_MISSING : ZS_FS_KIND_OTHER;
    if (S_ISREG(st.st_mode)) return ZS_FS_KIND_FILE;
    if (S_ISDIR(st.st_mode)) return ZS_FS_KIND_DIR;
    if (S_ISLNK(st.st_mode)) return ZS_FS_KIND_SYMLINK;
    return ZS_FS_KIND_OTHER;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

zs_status zs__fs_list_at(int dirfd, const char *dir_path, int max_entries, char ***names,
                         int *count) {
    *names = NULL;
    *count = 0;
    /* fdopendir takes the fd over; a duplicate keeps the caller's open. */
    int copy = dup(dirfd);
    if (copy < 0) return zs__fail(ZS_ERR_IO, "%s: cannot list: %s", dir_path, strerror(errno));
    DIR *d = fdopendir(copy);
    if (!d) {
        const int saved = errno;
        close(copy);
        return zs__fail(ZS_ERR_IO, "%s: cannot list: %s", dir_path, strerror(saved));
    }
    rewinddir(d); /* the duplicate shares the offset of earlier listings */
    char **list = NULL;
    int n = 0, capacity = 0;
    zs_status status = ZS_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno != 0)
                status = zs__fail(ZS_ERR_IO, "%s: cannot read directory: %s", dir_path,
                                  strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n >= max_entries) {
            status = zs__fail(ZS_ERR_IO, "%s: more than %d entries; is this the right "
                              "directory?", dir_path, max_entries);
            break;
        }
        if (n == capacity) {
            int grown = capacity ? (capacity > max_entries / 2 ? max_entries : 2 * capacity) : 16;
            char **bigger = zs__realloc(list, (size_t)grown * sizeof *bigger);
            if (!bigger) {
                status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for the list of "
                                  "its %d entries", dir_path, grown);
                break;
            }
            list = bigger;
            capacity = grown;
        }
        list[n] = zs__strdup(e->d_name);
        if (!list[n]) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for the name of "
                              "entry %d while listing it", dir_path, n + 1);
            break;
        }
        n++;
    }
    closedir(d);
    if (status != ZS_OK) {
        zs__fs_list_free(list, n);
        return status;
    }
    if (n > 1) qsort(list, (size_t)n, sizeof *list, cmp_names);
    *names = list;
    *count = n;
    return ZS_OK;
}

void zs__fs_list_free(char **names, int count) {
    if (!names) return;
    for (int k = 0; k < count; k++) free(names[k]);
    free(names);
}

int zs__fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
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
