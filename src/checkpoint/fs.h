/* File-system steps of the commit protocol, each checked: every call returns a
 * status whose message names the path and the errno text. */
#ifndef ZS_CHECKPOINT_FS_H
#define ZS_CHECKPOINT_FS_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* mkdir -p for one level: creates `path` (mode 0755) unless it exists as a directory. */
zs_status zs__fs_mkdir(const char *path);
/* fsync of a directory, so renames and creations inside it are durable. */
zs_status zs__fs_fsync_dir(const char *path);
/* Writes `data` to dir/name atomically: dir/.name.tmp.<pid>, every write
 * checked, fsync, rename over dir/name, fsync dir. */
zs_status zs__fs_write_atomic(const char *dir, const char *name, const void *data, size_t bytes);
/* Writes all `bytes` (retrying short writes and EINTR); `at` is the file
 * offset of data, for the message. */
zs_status zs__fs_write_all(int fd, const void *data, size_t bytes, const char *path, uint64_t at);
/* rename(2), checked. */
zs_status zs__fs_rename(const char *from, const char *to);
/* Reads a whole regular file of at most max_bytes (error if larger) into a
 * new NUL-terminated buffer the caller frees. */
zs_status zs__fs_read_file(const char *path, size_t max_bytes, char **data, size_t *bytes);
/* Removes a directory that holds only regular files (a step or temporary
 * directory); refuses anything else (subdirectories, symlinks) with an error. */
zs_status zs__fs_remove_dir(const char *path);
/* Entries of a directory (not "." or ".."), sorted by name; the caller frees
 * each name and the array. */
zs_status zs__fs_list(const char *dir, char ***names, int *count);
void zs__fs_list_free(char **names, int count);
/* 1 if path exists and is a directory / regular file. */
int zs__fs_is_dir(const char *path);
int zs__fs_is_file(const char *path);

#endif
