/* Choosing the step directory of a checkpoint root (see select.h). */
#include "checkpoint/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/commit_order.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

#define LATEST_MAX 64 /* bytes of `latest`: a step name and a newline, with room */
#define MESSAGE_CAPACITY 1024

void zs__ckpt_candidates_free(zs__ckpt_candidates *c) {
    if (!c) return;
    free(c->names);
    c->names = NULL;
    c->count = 0;
}

/* The step directory `latest` names, or "" (with a warning saying why) when
 * it is missing, not a regular file, or does not hold exactly a step name.
 * Its content is never printed: it may be anything. */
static void read_latest(int root_fd, const char *root, char latest[ZS_CKPT_STEP_NAME_CAPACITY]) {
    latest[0] = '\0';
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, ZS_CKPT_LATEST);
    if (zs__fs_kind_at(root_fd, ZS_CKPT_LATEST) == ZS_FS_KIND_MISSING) {
        ZS_WARN("%s is missing; choosing the newest committed step that verifies", path);
        return;
    }
    char *text = NULL;
    size_t bytes = 0;
    if (zs__fs_read_file_at(root_fd, root, ZS_CKPT_LATEST, LATEST_MAX, &text, &bytes) != ZS_OK) {
        ZS_WARN("ignoring %s: %s; choosing the newest committed step that verifies", path,
                zs_last_error());
        zs__clear_error();
        return;
    }
    size_t n = bytes;
    if (n > 0 && text[n - 1] == '\n') n--;
    text[n] = '\0';
    if (memchr(text, '\0', n) || !zs__checkpoint_is_step_name(text))
        ZS_WARN("ignoring %s: it does not hold exactly a step directory name (step_ and 8 "
                "digits, one newline allowed); choosing the newest committed step that verifies",
                path);
    else
        snprintf(latest, ZS_CKPT_STEP_NAME_CAPACITY, "%s", text);
    free(text);
}

zs_status zs__ckpt_candidates_list(const char *dir, zs__ckpt_candidates *out) {
    memset(out, 0, sizeof *out);
    int root_fd = -1;
    ZS_CHECK(zs__fs_open_root(dir, 0, &root_fd));
    if (zs__fs_kind_at(root_fd, ZS_CKPT_MANIFEST) != ZS_FS_KIND_MISSING) {
        close(root_fd);
        out->explicit_dir = 1;
        return ZS_OK;
    }
    char **names = NULL;
    int count = 0, committed = 0;
    zs__ckpt_commit *order = NULL;
    zs_status status = zs__fs_list_at(root_fd, dir, ZS_CKPT_ROOT_ENTRIES_MAX, &names, &count);
    if (status != ZS_OK) goto done;
    /* Entries with a step's name that are not directories are not
     * checkpoints (commit_order leaves them out): say so once here. */
    for (int i = 0; i < count; i++)
        if (zs__checkpoint_is_step_name(names[i]) &&
            zs__fs_kind_at(root_fd, names[i]) != ZS_FS_KIND_DIR)
            ZS_WARN("%s/%s is not a directory (a regular file, symlink or special file); "
                    "skipping it (remove it if it is not yours)",
                    dir, names[i]);
    status = zs__checkpoint_commit_order_at(root_fd, dir, &order, &committed);
    if (status != ZS_OK || committed == 0) goto done; /* no checkpoint yet: nothing to say */
    out->names = zs__calloc((size_t)committed, sizeof *out->names);
    if (!out->names) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for the names of %d step directories", dir,
                          committed);
        goto done;
    }
    for (int i = 0; i < committed; i++) {
        if (order[i].abandoned) {
            ZS_WARN("%s/%s belongs to an abandoned timeline (a later commit has a lower step: "
                    "a run resumed from an earlier step and saved again); it is never chosen "
                    "automatically; load it by its path if you need it",
                    dir, order[i].name);
            continue;
        }
        snprintf(out->names[out->count++], ZS_CKPT_STEP_NAME_CAPACITY, "%s", order[i].name);
    }
    /* `latest` is written right after a commit, so it names the newest one
     * except after a crash between the two: the commit records decide. */
    char latest[ZS_CKPT_STEP_NAME_CAPACITY];
    read_latest(root_fd, dir, latest);
    if (latest[0] && out->count > 0 && strcmp(latest, out->names[0]) != 0)
        ZS_WARN("%s/%s names %s, but %s was committed after it (a save interrupted between its "
                "commit and the update of %s?); following the commit records",
                dir, ZS_CKPT_LATEST, latest, out->names[0], ZS_CKPT_LATEST);
done:
    free(order);
    zs__fs_list_free(names, count);
    close(root_fd);
    if (status != ZS_OK) zs__ckpt_candidates_free(out);
    return status;
}

zs_status zs__ckpt_select(const char *dir, const zs__ckpt_candidates *c, zs__ckpt_try_fn try_fn,
                          void *ctx, int *chosen) {
    *chosen = -1;
    if (c->explicit_dir) {
        ZS_CHECK(try_fn(ctx, dir, NULL));
        *chosen = 0;
        return ZS_OK;
    }
    char last_error[MESSAGE_CAPACITY] = "";
    for (int i = 0; i < c->count; i++) {
        const zs_status tried = try_fn(ctx, dir, c->names[i]);
        /* Running out of memory, or losing a peer, says nothing about the
         * checkpoint: an older step would fail the same way, so it stops
         * the choice instead of skipping a good step. */
        if (tried == ZS_ERR_OUT_OF_MEMORY || tried == ZS_ERR_TIMEOUT || tried == ZS_ERR_COMM)
            return tried;
        if (tried == ZS_OK) {
            if (i > 0) ZS_WARN("using %s/%s (the first %d candidate(s) did not verify)", dir,
                               c->names[i], i);
            *chosen = i;
            return ZS_OK;
        }
        snprintf(last_error, sizeof last_error, "%s", zs_last_error());
        ZS_WARN("skipping checkpoint %s/%s: %s", dir, c->names[i], last_error);
    }
    if (c->count == 0) return ZS_OK;
    return zs__fail(ZS_ERR_IO, "no checkpoint in '%s' verifies (%d tried); the last error was: %s",
                    dir, c->count, last_error);
}
