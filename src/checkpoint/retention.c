/* Retention: which step directories stay after a commit, and the removal of
 * what interrupted saves left behind. Decided by commit order, never by step
 * number (commit_order.h), and limited to what the runtime wrote: a directory
 * holding a user's file, a symlink with a checkpoint's name or a file named
 * like a step is left alone with a warning, and the rest is still pruned. */
#include "checkpoint/retention.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/commit_order.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

#define SKIPPED_TEXT 2048

static int has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* rankNNNNN.<kind>.safetensors with at least 5 digits. */
static int is_shard_name(const char *name) {
    if (!has_prefix(name, "rank")) return 0;
    const char *p = name + 4;
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (digits < 5) return 0;
    return strcmp(p, ".master.safetensors") == 0 || strcmp(p, ".optim.safetensors") == 0 ||
           strcmp(p, ".user.safetensors") == 0;
}

static int is_final_name(const char *name) {
    return is_shard_name(name) || strcmp(name, ZS_CKPT_MANIFEST) == 0 ||
           strcmp(name, ZS_CKPT_MANIFEST_HASH) == 0 || strcmp(name, ZS_CKPT_COMMIT) == 0;
}

int zs__checkpoint_is_owned_file(const char *name) {
    if (is_final_name(name)) return 1;
    /* name.partial: a shard being written. */
    size_t len = strlen(name);
    const char *partial = ".partial";
    if (len > strlen(partial) && strcmp(name + len - strlen(partial), partial) == 0) {
        char base[256];
        if (len - strlen(partial) >= sizeof base) return 0;
        memcpy(base, name, len - strlen(partial));
        base[len - strlen(partial)] = '\0';
        return is_shard_name(base);
    }
    /* .<final>.tmp.<anything>: zs__fs_write_atomic_at's temporary name. */
    if (name[0] == '.') {
        const char *tmp = strstr(name, ".tmp.");
        if (!tmp || tmp == name) return 0;
        char base[256];
        size_t n = (size_t)(tmp - name - 1);
        if (n >= sizeof base) return 0;
        memcpy(base, name + 1, n);
        base[n] = '\0';
        return is_final_name(base);
    }
    return 0;
}

zs_status zs__checkpoint_purge_dir(int rootfd, const char *root, const char *name, int *foreign,
                                   char *first_foreign, size_t cap) {
    *foreign = 0;
    if (cap) first_foreign[0] = '\0';
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, name);
    int dir = -1;
    ZS_CHECK(zs__fs_open_dir_at(rootfd, root, name, &dir));
    char **names = NULL;
    int count = 0;
    zs_status st = zs__fs_list_at(dir, path, INT_MAX, &names, &count);
    /* The manifest's hash first: a directory caught half removed by a crash
     * then fails verification at once instead of deep inside a shard. */
    if (st == ZS_OK && unlinkat(dir, ZS_CKPT_MANIFEST_HASH, 0) != 0 && errno != ENOENT)
        st = zs__fail(ZS_ERR_IO, "%s/%s: cannot remove: %s", path, ZS_CKPT_MANIFEST_HASH,
                      strerror(errno));
    for (int i = 0; st == ZS_OK && i < count; i++) {
        if (strcmp(names[i], ZS_CKPT_MANIFEST_HASH) == 0) continue;
        if (zs__checkpoint_is_owned_file(names[i]) &&
            zs__fs_kind_at(dir, names[i]) == ZS_FS_KIND_FILE) {
            if (unlinkat(dir, names[i], 0) != 0 && errno != ENOENT)
                st = zs__fail(ZS_ERR_IO, "%s/%s: cannot remove: %s", path, names[i],
                              strerror(errno));
            continue;
        }
        if ((*foreign)++ == 0 && cap) snprintf(first_foreign, cap, "%s", names[i]);
    }
    zs__fs_list_free(names, count);
    close(dir);
    if (st != ZS_OK || *foreign > 0) return st;
    if (unlinkat(rootfd, name, AT_REMOVEDIR) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot remove directory: %s", path, strerror(errno));
    return ZS_OK;
}

/* What retention could not remove, gathered for one warning. */
typedef struct skipped {
    char text[SKIPPED_TEXT];
    size_t used;
    int count;
} skipped;

static void skip(skipped *s, const char *name, const char *why) {
    s->count++;
    if (s->used >= sizeof s->text) return;
    int n = snprintf(s->text + s->used, sizeof s->text - s->used, "%s  %s (%s)",
                     s->count > 1 ? "\n" : "", name, why);
    if (n > 0) s->used += (size_t)n;
}

/* Removes a directory the runtime made, noting what stays. */
static void purge(int rootfd, const char *root, const char *name, skipped *s) {
    int foreign = 0;
    char first[256], why[640];
    if (zs__checkpoint_purge_dir(rootfd, root, name, &foreign, first, sizeof first) != ZS_OK) {
        snprintf(why, sizeof why, "%s", zs_last_error());
        skip(s, name, why);
    } else if (foreign > 0) {
        snprintf(why, sizeof why,
                 "its checkpoint files are removed, but it holds %d entr%s zeroshard did not "
                 "write, such as '%s'; move them out and it is removed at the next save",
                 foreign, foreign == 1 ? "y" : "ies", first);
        skip(s, name, why);
    }
}

/* Takes a step directory out of the step namespace first (one atomic
 * rename), so no reader ever sees it half deleted, then purges it. */
static void delete_step(int rootfd, const char *root, const char *name, int64_t step,
                        skipped *s) {
    char retired[96];
    snprintf(retired, sizeof retired, ZS_CKPT_OLD_PREFIX "%08" PRId64 "_%016llx", step,
             (unsigned long long)zs__fs_random());
    if (zs__fs_rename_at(rootfd, root, name, rootfd, root, retired) != ZS_OK) {
        skip(s, name, zs_last_error());
        return;
    }
    purge(rootfd, root, retired, s);
}

zs_status zs__checkpoint_retain(int rootfd, const char *root, const char *committed, int64_t keep,
                                uint64_t *warned) {
    skipped s;
    memset(&s, 0, sizeof s);
    char **names = NULL;
    int count = 0;
    ZS_CHECK(zs__fs_list_at(rootfd, root, INT_MAX, &names, &count));
    /* Leftovers of saves that failed or were killed (this save's own
     * temporary directory is already renamed into place). */
    for (int i = 0; i < count; i++) {
        const char *name = names[i];
        zs__fs_kind kind = zs__fs_kind_at(rootfd, name);
        if (has_prefix(name, ZS_CKPT_TMP_PREFIX) || has_prefix(name, ZS_CKPT_OLD_PREFIX)) {
            if (kind == ZS_FS_KIND_DIR) purge(rootfd, root, name, &s);
            else skip(&s, name, "not a directory zeroshard made");
        } else if (has_prefix(name, "." ZS_CKPT_LATEST ".tmp.")) {
            if (kind != ZS_FS_KIND_FILE) skip(&s, name, "not a file zeroshard wrote");
            else if (unlinkat(rootfd, name, 0) != 0 && errno != ENOENT)
                skip(&s, name, strerror(errno));
        } else if (zs__checkpoint_is_step_name(name) && kind != ZS_FS_KIND_DIR) {
            skip(&s, name, "named like a checkpoint but not a directory; never loaded or removed");
        }
    }
    zs__fs_list_free(names, count);

    zs__ckpt_commit *order = NULL;
    int steps = 0;
    zs_status st = zs__checkpoint_commit_order_at(rootfd, root, &order, &steps);
    int forked = steps > 1 && order[0].step < order[1].step;
    char *kept = st == ZS_OK && steps > 0 ? zs__calloc((size_t)steps, 1) : NULL;
    if (st == ZS_OK && steps > 0 && !kept)
        st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for retention", root);
    if (st == ZS_OK && keep > 0) {
        /* Slots go to the current timeline in commit order, then to
         * abandoned directories in commit order; the directory just
         * committed always stays (it is the newest commit). */
        int64_t slots = keep;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < steps; i++) {
                if (order[i].abandoned != pass) continue;
                if (strcmp(order[i].name, committed) != 0 && slots <= 0) continue;
                slots--;
                kept[i] = 1;
                if (order[i].abandoned && forked)
                    ZS_WARN("%s/%s belongs to an abandoned timeline (%s, committed after it, has "
                            "a lower step): kept while checkpoint.keep = %lld allows, but resume "
                            "= \"auto\" never chooses it",
                            root, order[i].name, committed, (long long)keep);
            }
        for (int i = 0; i < steps; i++) {
            if (kept[i]) continue;
            if (order[i].abandoned)
                ZS_WARN("deleting %s/%s: it belongs to an abandoned timeline (a later commit has "
                        "a lower step; the newest commit is %s)",
                        root, order[i].name, committed);
            delete_step(rootfd, root, order[i].name, order[i].step, &s);
        }
    } else if (st == ZS_OK && forked) {
        for (int i = 0; i < steps; i++)
            if (order[i].abandoned)
                ZS_WARN("%s/%s belongs to an abandoned timeline (%s, committed after it, has a "
                        "lower step): kept (checkpoint.keep = 0), but resume = \"auto\" never "
                        "chooses it; load it by its path if you need it",
                        root, order[i].name, committed);
    }
    free(order);
    free(kept);
    if (st != ZS_OK) {
        skip(&s, "(commit order)", zs_last_error());
        zs__clear_error();
    }
    if (zs__fs_fsync_fd(rootfd, root) != ZS_OK) skip(&s, ".", zs_last_error());

    /* One warning per distinct set of entries left alone, so a user's file
     * in the root is mentioned once, not at every save. */
    uint64_t digest = s.count ? XXH3_64bits(s.text, s.used) : 0;
    if (digest != *warned && s.count)
        ZS_WARN("checkpoint retention in %s left %d entr%s alone:\n%s", root, s.count,
                s.count == 1 ? "y" : "ies", s.text);
    *warned = digest;
    return ZS_OK;
}
