/* zs-ckpt: opening the step directory the user means. The rule for a root
 * and every check of a step directory are the runtime's own (select.c,
 * verify.c), so zs-ckpt and zs_load give the same answer. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/select.h"
#include "checkpoint/verify.h"
#include "ckpt_tool.h"
#include "core/error.h"
#include "core/fs.h"

zs_status zs__tool_join(char *out, size_t capacity, const char *dir, const char *name) {
    int n = snprintf(out, capacity, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= capacity)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "path %s/%s is longer than %zu bytes", dir,
                        name, capacity - 1);
    return ZS_OK;
}

/* A candidate of a root passes when everything verifies; the step stays
 * open in *ctx for the command. */
static zs_status try_step(void *ctx, const char *dir, const char *name) {
    zs__ckpt_step *step = ctx;
    zs__ckpt_step_close(step);
    int root_fd = -1;
    ZS_CHECK(zs__fs_open_root(dir, 0, &root_fd));
    zs_status s = zs__ckpt_step_open(root_fd, dir, name, step);
    close(root_fd);
    if (s == ZS_OK) s = zs__ckpt_verify_files(step, 0, 1, 0, NULL);
    if (s != ZS_OK) zs__ckpt_step_close(step);
    return s;
}

zs_status zs__tool_open(const char *arg, zs__ckpt_step *out, int *from_root) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    zs__ckpt_candidates c;
    ZS_CHECK(zs__ckpt_candidates_list(arg, &c));
    if (from_root) *from_root = !c.explicit_dir;
    if (c.explicit_dir) {
        zs__ckpt_candidates_free(&c);
        return zs__ckpt_step_open(-1, arg, NULL, out);
    }
    int chosen = -1;
    zs_status s = zs__ckpt_select(arg, &c, try_step, out, &chosen);
    zs__ckpt_candidates_free(&c);
    if (s == ZS_OK && chosen < 0)
        s = zs__fail(ZS_ERR_IO,
                     "%s: neither a step directory (no manifest.json) nor a checkpoint root (no "
                     "step_NNNNNNNN directory)",
                     arg);
    if (s != ZS_OK) zs__ckpt_step_close(out);
    return s;
}

void zs__tool_verify_progress(void *user, uint64_t bytes_read) {
    zs__progress_update(user, bytes_read);
}
