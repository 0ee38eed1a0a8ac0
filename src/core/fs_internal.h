/* What fs.c and fs_write.c share and nothing else needs. */
#ifndef ZS_CORE_FS_INTERNAL_H
#define ZS_CORE_FS_INTERNAL_H

#include <stddef.h>

/* Room for "dir_path/name" in a message; a longer one is cut, never overrun. */
#define ZS_FS_SHOWN_MAX 4096

/* 1 when name is one path component: openat with a '/' in the name would
 * walk elsewhere, and "." or ".." would name another directory. */
int zs__fs_is_component(const char *name);
/* "dir_path/name" into out, for messages; returns out. */
const char *zs__fs_shown(char *out, size_t cap, const char *dir_path, const char *name);

#endif
