/* Path-based file-system helpers for tests (see fs_path.h). */
#define _POSIX_C_SOURCE 200809L
#include "fs_path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

zs_status zt_fs_mkdir(const char *path) {
    if (mkdir(path, 0755) == 0) return ZS_OK;
    int saved = errno;
    if (saved == EEXIST && zs__fs_is_dir(path)) return ZS_OK;
    return zs__fail(ZS_ERR_IO, "%s: cannot create directory: %s", path,
                    saved == EEXIST ? "a file that is not a directory has that name"
                                    : strerror(saved));
}

zs_status zt_fs_write_atomic(const char *dir, const char *name, const void *data, size_t bytes) {
    int fd = -1;
    ZS_CHECK(zs__fs_open_root(dir, 0, &fd));
    zs_status status = zs__fs_write_atomic_at(fd, dir, name, data, bytes);
    close(fd);
    return status;
}

zs_status zt_fs_read_file(const char *path, size_t max_bytes, char **data, size_t *bytes) {
    *data = NULL;
    *bytes = 0;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", path);
    int fd = -1;
    ZS_CHECK(zs__fs_open_root(dir, 0, &fd));
    zs_status status =
        zs__fs_read_file_at(fd, dir, slash ? slash + 1 : path, max_bytes, data, bytes);
    close(fd);
    return status;
}

zs_status zt_fs_list(const char *dir, char ***names, int *count) {
    *names = NULL;
    *count = 0;
    int fd = -1;
    ZS_CHECK(zs__fs_open_root(dir, 0, &fd));
    zs_status status = zs__fs_list_at(fd, dir, INT_MAX, names, count);
    close(fd);
    return status;
}

zs_status zt_fs_remove_dir(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return zs__fail(ZS_ERR_IO, "%s: refusing to remove: not a directory (a symlink?)", path);
    char **names = NULL;
    int count = 0;
    ZS_CHECK(zt_fs_list(path, &names, &count));
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

int zt_fs_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
