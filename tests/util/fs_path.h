/* Path-based file-system helpers for tests and test tools: the library
 * resolves everything from directory descriptors (src/core/fs.h), while a
 * test builds a fixture or inspects a result by path. Each returns a status
 * (zs_last_error names the path) like the library's steps, which they reuse. */
#ifndef ZS_TEST_FS_PATH_H
#define ZS_TEST_FS_PATH_H

#include <stddef.h>

#include "zeroshard.h"

/* mkdir -p for one level: creates `path` (mode 0755) unless it exists as a directory. */
zs_status zt_fs_mkdir(const char *path);
/* Writes dir/name atomically (zs__fs_write_atomic_at on the opened dir). */
zs_status zt_fs_write_atomic(const char *dir, const char *name, const void *data, size_t bytes);
/* Reads a whole regular file of at most max_bytes into a new NUL-terminated
 * buffer the caller frees (zs__fs_read_file_at on its directory: the file
 * itself must not be a symlink). */
zs_status zt_fs_read_file(const char *path, size_t max_bytes, char **data, size_t *bytes);
/* Removes a directory that holds only regular files; refuses anything else
 * (subdirectories, symlinks, `path` itself a symlink) and then removes nothing. */
zs_status zt_fs_remove_dir(const char *path);
/* Entries of a directory (not "." or ".."), sorted by name; free with
 * zs__fs_list_free. */
zs_status zt_fs_list(const char *dir, char ***names, int *count);
/* 1 if path exists and is a regular file (symlinks followed). */
int zt_fs_is_file(const char *path);

#endif
