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
 * new NUL-terminated buffer the caller frees; the file itself must not be a
 * symlink (zs__fsr_read_file_at on its directory). */
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

/* ---------------------------------------------------------------------------
 * Steps relative to a directory file descriptor (fs_at.c), for everything the
 * save protocol does under a checkpoint root: the root is opened once and
 * every name below it is resolved from that descriptor, never followed
 * through a symlink at the final name, and every file or directory is created
 * new (O_EXCL / mkdir that must create), so an entry planted at a predictable
 * name can neither redirect a write nor be reused. `dir_path` is the path the
 * descriptor was opened from, used only in messages. Every function names the
 * path and the errno text on failure. */

typedef enum zs__fs_kind {
    ZS_FS_KIND_MISSING,
    ZS_FS_KIND_FILE,
    ZS_FS_KIND_DIR,
    ZS_FS_KIND_SYMLINK,
    ZS_FS_KIND_OTHER /* FIFO, socket, device, or an entry that cannot be examined */
} zs__fs_kind;

/* Opens `path` as a directory (creating it, mode 0755, if `create` and it is
 * missing). The root is the one path the user chose, so a symlink there is
 * followed. The caller closes *fd. */
zs_status zs__fs_open_root(const char *path, int create, int *fd);
/* Opens dirfd/name as a directory without following a symlink there. */
zs_status zs__fs_open_dir_at(int dirfd, const char *dir_path, const char *name, int *fd);
/* Creates dirfd/name (mode 0755); an existing entry of any kind is an error. */
zs_status zs__fs_mkdir_new_at(int dirfd, const char *dir_path, const char *name);
/* Creates dirfd/name for writing (mode 0644, O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC). */
zs_status zs__fs_create_at(int dirfd, const char *dir_path, const char *name, int *fd);
/* Writes dirfd/name atomically: a new file .name.tmp.<pid>.<random> created
 * with zs__fs_create_at, every write checked, fsync, renameat over name, fsync
 * of the directory. On failure the temporary file is removed. */
zs_status zs__fs_write_atomic_at(int dirfd, const char *dir_path, const char *name,
                                 const void *data, size_t bytes);
/* renameat within one directory, or between two directory descriptors. */
zs_status zs__fs_rename_at(int from_dirfd, const char *from_dir_path, const char *from,
                           int to_dirfd, const char *to_dir_path, const char *to);
/* fsync of an open file or directory (EINVAL, "cannot sync this kind", is not an error). */
zs_status zs__fs_fsync_fd(int fd, const char *path);
/* What dirfd/name is, without following a symlink. */
zs__fs_kind zs__fs_kind_at(int dirfd, const char *name);
/* Entries of an open directory, as zs__fs_list (the descriptor stays open). */
zs_status zs__fs_list_at(int dirfd, const char *dir_path, char ***names, int *count);
/* 64 unpredictable bits (getrandom; a time/pid/address mix where that fails),
 * for names that must not be guessable. */
uint64_t zs__fs_random(void);

/* Test hook (fault.c): with ZS_FAULT_ERRNO=<point>:<errno name>:<n>, the n-th
 * call at `point` (write, fsync, rename, mkdir, create; and the NVMe tier's
 * pwrite, pread, fallocate, odirect in src/offload/swap.c) counted since the
 * variable last changed returns that errno (ENOSPC, EIO, EFBIG, EDQUOT, EROFS,
 * EACCES, EINVAL); every
 * other call returns 0. The file-system steps call it just before the system
 * call, so tests can fail any step of a save without filling a disk. */
int zs__fs_fault(const char *point);

#endif
