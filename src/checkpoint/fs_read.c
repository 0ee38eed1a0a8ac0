/* Read-side file-system steps of checkpoint loading (see fs_read.h): openat
 * relative to a directory's fd with O_NOFOLLOW, then fstat on what was
 * actually opened, so the check and the use are of the same file. */
#include "checkpoint/fs_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/fs.h"
#include "core/error.h"

/* One path component: openat with a '/' in the name would walk elsewhere. */
static int is_component(const char *name) {
    return name && name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

zs__fsr_kind zs__fsr_kind_at(int dir_fd, const char *name) {
    struct stat st;
    if (!is_component(name) || fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return ZS_FSR_MISSING;
    if (S_ISDIR(st.st_mode)) return ZS_FSR_DIR;
    if (S_ISREG(st.st_mode)) return ZS_FSR_FILE;
    return ZS_FSR_OTHER;
}

zs_status zs__fsr_open_root(const char *path, int *fd) {
    *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot open as a directory: %s", path, strerror(errno));
    return ZS_OK;
}

zs_status zs__fsr_open_dir_at(int dir_fd, const char *name, const char *display, int *fd) {
    *fd = -1;
    if (!is_component(name))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a plain directory name", display);
    *fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd >= 0) return ZS_OK;
    const int saved = errno;
    /* ELOOP is O_NOFOLLOW meeting a symlink: say so rather than "too many
     * levels of symbolic links", which reads like a broken file system. */
    if (saved == ELOOP || zs__fsr_kind_at(dir_fd, name) == ZS_FSR_OTHER)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: is a symlink or special file, not a directory; checkpoints never "
                        "follow links (replace it with the real directory)",
                        display);
    return zs__fail(ZS_ERR_IO, "%s: cannot open as a directory: %s", display, strerror(saved));
}

zs_status zs__fsr_open_file_at(int dir_fd, const char *name, const char *display, int *fd,
                               uint64_t *bytes) {
    *fd = -1;
    if (!is_component(name))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a plain file name", display);
    int f = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (f < 0) {
        const int saved = errno;
        if (saved == ELOOP)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: is a symlink; checkpoint files must be regular files inside the "
                            "step directory (links are never followed)",
                            display);
        return zs__fail(ZS_ERR_IO, "%s: cannot open: %s%s", display, strerror(saved),
                        saved == ENOENT ? " (the checkpoint is incomplete)" : "");
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        const int saved = errno;
        close(f);
        return zs__fail(ZS_ERR_IO, "%s: cannot stat: %s", display, strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: not a regular file (a %s); checkpoint files must be regular files",
                        display, S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO"
                                                     : "device or socket");
    }
    /* Back to blocking reads: O_NONBLOCK was only for the open itself. */
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) (void)fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    if (bytes) *bytes = st.st_size < 0 ? 0 : (uint64_t)st.st_size;
    *fd = f;
    return ZS_OK;
}

zs_status zs__fsr_read_file_at(int dir_fd, const char *name, const char *display,
                               size_t max_bytes, char **data, size_t *bytes) {
    *data = NULL;
    *bytes = 0;
    int fd = -1;
    uint64_t size = 0;
    ZS_CHECK(zs__fsr_open_file_at(dir_fd, name, display, &fd, &size));
    zs_status status = ZS_OK;
    char *buffer = NULL;
    if (size > (uint64_t)max_bytes || size >= (uint64_t)SIZE_MAX) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %llu bytes is larger than the limit of %zu",
                          display, (unsigned long long)size, max_bytes);
        goto done;
    }
    buffer = malloc((size_t)size + 1);
    if (!buffer) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes", display,
                          (unsigned long long)size + 1);
        goto done;
    }
    size_t done = 0;
    while (done < (size_t)size) {
        ssize_t n = read(fd, buffer + done, (size_t)size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            status = zs__fail(ZS_ERR_IO, "%s: read failed at byte %zu: %s", display, done,
                              strerror(errno));
            goto done;
        }
        if (n == 0) {
            status = zs__fail(ZS_ERR_IO, "%s: file shrank while being read (%zu of %llu bytes)",
                              display, done, (unsigned long long)size);
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

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

zs_status zs__fsr_list_at(int dir_fd, const char *display, int max_entries, char ***names,
                          int *count) {
    *names = NULL;
    *count = 0;
    /* fdopendir takes the fd over; a duplicate keeps the caller's open. */
    int copy = dup(dir_fd);
    if (copy < 0) return zs__fail(ZS_ERR_IO, "%s: cannot list: %s", display, strerror(errno));
    DIR *d = fdopendir(copy);
    if (!d) {
        const int saved = errno;
        close(copy);
        return zs__fail(ZS_ERR_IO, "%s: cannot list: %s", display, strerror(saved));
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
                status = zs__fail(ZS_ERR_IO, "%s: cannot read directory: %s", display,
                                  strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n >= max_entries) {
            status = zs__fail(ZS_ERR_IO, "%s: more than %d entries; is this a checkpoint "
                              "directory?", display, max_entries);
            break;
        }
        if (n == capacity) {
            int grown = capacity ? (capacity > max_entries / 2 ? max_entries : 2 * capacity) : 16;
            char **bigger = realloc(list, (size_t)grown * sizeof *bigger);
            if (!bigger) {
                status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot list", display);
                break;
            }
            list = bigger;
            capacity = grown;
        }
        list[n] = strdup(e->d_name);
        if (!list[n]) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot list", display);
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
