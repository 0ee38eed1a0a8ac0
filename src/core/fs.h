/* File-system steps, each checked: every call returns a status whose message
 * names the path and the errno text (never a file's contents).
 *
 * Everything below a directory the user named is resolved relative to an
 * open descriptor of it: the directory is opened once (zs__fs_open_root) and
 * every name below it is one path component looked up from that descriptor,
 * never followed through a symlink at the final name. Files and directories
 * are created new (O_EXCL, a mkdir that must create), so an entry planted at
 * a predictable name can neither redirect a write nor be reused; only regular
 * files (and, for directories, real directories) are opened for reading, so
 * a symlink planted in a directory cannot make a reader read a file outside
 * it, and a FIFO or a device cannot block or feed it. A path string resolved
 * again at every step could be swapped underneath (a directory renamed away
 * and a symlink put in its place); a descriptor cannot.
 *
 * `dir_path` is the path the descriptor was opened from, used only in
 * messages ("dir_path/name"). Checkpoints (src/checkpoint) and the NVMe
 * tier's swap files (src/offload) both use these, so they live in core. */
#ifndef ZS_CORE_FS_H
#define ZS_CORE_FS_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* What a directory entry is, looked at without following a symlink. */
typedef enum zs__fs_kind {
    ZS_FS_KIND_MISSING, /* nothing has the name, or the name is not one component */
    ZS_FS_KIND_FILE,    /* a regular file */
    ZS_FS_KIND_DIR,
    ZS_FS_KIND_SYMLINK,
    ZS_FS_KIND_OTHER    /* FIFO, socket, device, or an entry that cannot be examined */
} zs__fs_kind;

/* ---------------------------------------------------------------------------
 * Opening and reading (fs.c) */

/* Opens `path` as a directory (creating it, mode 0755, if `create` and it is
 * missing). The root is the one path the user chose, so a symlink there is
 * followed. The caller closes *fd. */
zs_status zs__fs_open_root(const char *path, int create, int *fd);
/* Opens dirfd/name as a directory without following a symlink there: a
 * symlink or a non-directory is refused. The caller closes *fd. */
zs_status zs__fs_open_dir_at(int dirfd, const char *dir_path, const char *name, int *fd);
/* Opens regular file dirfd/name for reading with O_NOFOLLOW and O_NONBLOCK
 * (a FIFO must not block the open), then checks what was opened (fstat,
 * S_ISREG), so the check and the use are of the same file. *bytes (may be
 * NULL) is its size. The caller closes *fd. */
zs_status zs__fs_open_file_at(int dirfd, const char *dir_path, const char *name, int *fd,
                              uint64_t *bytes);
/* Reads regular file dirfd/name (opened as above) of at most max_bytes into
 * a new NUL-terminated buffer the caller frees; a larger file is an error
 * that says so, before anything is allocated. */
zs_status zs__fs_read_file_at(int dirfd, const char *dir_path, const char *name,
                              size_t max_bytes, char **data, size_t *bytes);
/* The same for a file the user named by its path: a symlink there is
 * followed (a Hugging Face cache links every file of a snapshot to its
 * blob), what is opened must still be a regular file of at most max_bytes. */
zs_status zs__fs_read_file_path(const char *path, size_t max_bytes, char **data, size_t *bytes);
/* What dirfd/name is, without following a symlink. */
zs__fs_kind zs__fs_kind_at(int dirfd, const char *name);
/* Entries of an open directory (not "." or ".."), sorted by name; more than
 * max_entries is an error (a directory that cannot be what the caller
 * expects). The descriptor stays open. Free with zs__fs_list_free. */
zs_status zs__fs_list_at(int dirfd, const char *dir_path, int max_entries, char ***names,
                         int *count);
void zs__fs_list_free(char **names, int count);
/* 1 if `path` (symlinks followed: a path the user chose) is a directory. */
int zs__fs_is_dir(const char *path);
/* 64 unpredictable bits (getrandom; a time/pid/address mix where that fails),
 * for names that must not be guessable. */
uint64_t zs__fs_random(void);

/* ---------------------------------------------------------------------------
 * Creating and writing (fs_write.c) */

/* Creates dirfd/name (mode 0755); an existing entry of any kind is an error. */
zs_status zs__fs_mkdir_new_at(int dirfd, const char *dir_path, const char *name);
/* Creates dirfd/name for writing (mode 0644, O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC). */
zs_status zs__fs_create_at(int dirfd, const char *dir_path, const char *name, int *fd);
/* Writes all `bytes` (retrying short writes and EINTR); `at` is the file
 * offset of data and `path` the file's name, both for the message. */
zs_status zs__fs_write_all(int fd, const void *data, size_t bytes, const char *path, uint64_t at);
/* Writes dirfd/name atomically: a new file .name.tmp.<pid>.<random> created
 * with zs__fs_create_at, every write checked, fsync, renameat over name, fsync
 * of the directory. On failure the temporary file is removed; when only the
 * final fsync of the directory fails, name already holds the new data. */
zs_status zs__fs_write_atomic_at(int dirfd, const char *dir_path, const char *name,
                                 const void *data, size_t bytes);
/* renameat within one directory, or between two directory descriptors. */
zs_status zs__fs_rename_at(int from_dirfd, const char *from_dir_path, const char *from,
                           int to_dirfd, const char *to_dir_path, const char *to);
/* fsync of an open file or directory (EINVAL, "cannot sync this kind", is not an error). */
zs_status zs__fs_fsync_fd(int fd, const char *path);
/* Path-based conveniences for tools that write one file next to a path the
 * user chose (zs-ckpt export): rename(2), and fsync of a directory so the
 * rename is durable. */
zs_status zs__fs_rename(const char *from, const char *to);
zs_status zs__fs_fsync_dir(const char *path);

/* ---------------------------------------------------------------------------
 * Test hook (fs_fault.c): with ZS_FAULT_ERRNO=<point>:<errno name>:<n>, the
 * n-th call at `point` (write, fsync, rename, mkdir, create; and the NVMe
 * tier's tmpfile, odirect, pwrite, pread, fallocate in src/offload/swap.c)
 * counted since the variable last changed returns that errno (ENOSPC, EIO,
 * EFBIG, EDQUOT, EROFS, EACCES, EINVAL, EOPNOTSUPP); every other call returns
 * 0. The file-system steps call it just before the system call, so tests can
 * fail any step without filling a disk. */
int zs__fs_fault(const char *point);

#endif
