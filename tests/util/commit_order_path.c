/* The commit order of a checkpoint root given by path (see commit_order_path.h). */
#define _POSIX_C_SOURCE 200809L
#include "commit_order_path.h"

#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

zs_status zt_checkpoint_commit_order(const char *root, zs__ckpt_commit **out, int *count) {
    *out = NULL;
    *count = 0;
    int fd = -1;
    ZS_CHECK(zs__fs_open_root(root, 0, &fd));
    zs_status status = zs__checkpoint_commit_order_at(fd, root, out, count);
    close(fd);
    return status;
}
