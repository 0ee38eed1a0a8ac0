/* Read-side file-system steps of checkpoint loading: everything is opened
 * relative to an already-open directory, never by following a symlink, and
 * only regular files (and, for step directories, real directories) are
 * accepted. A checkpoint directory is hostile input: a symlink planted in it
 * must not make a load (or zs-ckpt) read a file outside it, and a FIFO or a
 * device must not block or feed it. Every failure names the path shown to
 * the user (`display`) and the errno text; none echoes file contents. */
#ifndef ZS_CHECKPOINT_FS_READ_H
#define ZS_CHECKPOINT_FS_READ_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* What a directory entry is, looked at without following a symlink. */
typedef enum zs__fsr_kind {
    ZS_FSR_MISSING = 0,
    ZS_FSR_DIR = 1,
    ZS_FSR_FILE = 2,  /* a regular file */
    ZS_FSR_OTHER = 3  /* a symlink, FIFO, socket or device */
} zs__fsr_kind;

/* fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW). `name` is one path component. */
zs__fsr_kind zs__fsr_kind_at(int dir_fd, const char *name);

/* Opens a directory the user named (a path, symlinks in it followed: the
 * user chose it) with O_RDONLY | O_DIRECTORY | O_CLOEXEC. *fd is owned by
 * the caller. */
zs_status zs__fsr_open_root(const char *path, int *fd);

/* Opens directory `name` (one component, no '/') inside dir_fd with
 * O_DIRECTORY | O_NOFOLLOW: a symlink or a non-directory is refused. */
zs_status zs__fsr_open_dir_at(int dir_fd, const char *name, const char *display, int *fd);

/* Opens regular file `name` (one component, no '/') inside dir_fd with
 * O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK (a FIFO must not block the
 * open), then fstat and S_ISREG on what was opened, so a symlink, FIFO,
 * device or directory is refused. *bytes (may be NULL) is its size. */
zs_status zs__fsr_open_file_at(int dir_fd, const char *name, const char *display, int *fd,
                               uint64_t *bytes);

/* Reads regular file `name` inside dir_fd (opened as above) of at most
 * max_bytes into a new NUL-terminated buffer the caller frees; a larger
 * file is an error that says so, before anything is allocated. */
zs_status zs__fsr_read_file_at(int dir_fd, const char *name, const char *display,
                               size_t max_bytes, char **data, size_t *bytes);

/* Entries of the directory dir_fd (not "." or ".."), sorted by name; free
 * with zs__fs_list_free (fs.h). At most max_entries, else an error. */
zs_status zs__fsr_list_at(int dir_fd, const char *display, int max_entries, char ***names,
                          int *count);

#endif
