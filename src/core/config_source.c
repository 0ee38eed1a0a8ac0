/* Checked reading of configuration files (see config_source.h). */
#include "core/config_source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

/* What a file that is not regular is, for the message. */
static const char *kind_of(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

zs_status zs__config_read_source(const char *path, size_t limit, char **text, size_t *length,
                                 zs__file_id *id) {
    *text = NULL;
    *length = 0;
    /* O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer,
     * forever if none comes. It changes nothing for regular files. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return zs__fail(ZS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    zs_status status = ZS_OK;
    char *buffer = NULL;
    struct stat info;
    if (fstat(fd, &info) != 0) {
        status = zs__fail(ZS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(info.st_mode)) {
        status = zs__fail(ZS_ERR_IO, "cannot open '%s': %s (a configuration is a file)", path,
                          strerror(EISDIR));
        goto done;
    }
    if (!S_ISREG(info.st_mode)) {
        status = zs__fail(ZS_ERR_CONFIG,
                          "'%s' is %s; a configuration must be a regular file (write the "
                          "configuration to a file and give its path)",
                          path, kind_of(info.st_mode));
        goto done;
    }
    if (info.st_size < 0 || (uint64_t)info.st_size > (uint64_t)limit) {
        status = zs__fail(ZS_ERR_CONFIG,
                          "'%s' is %lld bytes, more than the limit of %zu bytes for a "
                          "configuration file; keep large data out of the configuration (name "
                          "a data file in it instead)",
                          path, (long long)info.st_size, limit);
        goto done;
    }
    /* st_size is only a hint (a file may grow, and some files report 0), so
     * read until the end but never more than limit + 1 bytes. */
    size_t capacity = (size_t)info.st_size + 1, used = 0;
    if (capacity < 4096) capacity = 4096;
    if (capacity > limit + 2) capacity = limit + 2;
    buffer = zs__malloc(capacity);
    if (!buffer) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
        goto done;
    }
    for (;;) {
        if (used + 1 == capacity) {
            if (used > limit) break;
            size_t bigger_capacity = capacity * 2 > limit + 2 ? limit + 2 : capacity * 2;
            char *bigger = zs__realloc(buffer, bigger_capacity);
            if (!bigger) {
                status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
                goto done;
            }
            buffer = bigger;
            capacity = bigger_capacity;
        }
        ssize_t n = read(fd, buffer + used, capacity - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            status = zs__fail(ZS_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            goto done;
        }
        if (n == 0) break;
        used += (size_t)n;
    }
    if (used > limit) {
        status = zs__fail(ZS_ERR_CONFIG,
                          "'%s' grew past the limit of %zu bytes for a configuration file while "
                          "it was read; keep large data out of the configuration",
                          path, limit);
        goto done;
    }
    buffer[used] = '\0';
    *text = buffer;
    *length = used;
    buffer = NULL;
    id->device = (uint64_t)info.st_dev;
    id->inode = (uint64_t)info.st_ino;
done:
    free(buffer);
    close(fd);
    return status;
}
