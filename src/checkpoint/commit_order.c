/* Commit records and the commit order of a checkpoint root (see
 * commit_order.h for the rules). The record is one short line of text,
 *   zeroshard-commit seq=<decimal> step=<decimal>\n
 * parsed strictly: anything else, or a step that differs from the directory's
 * name, makes the record count as missing (with a warning), which orders the
 * directory before every recorded commit; it can then only lose to them. */
#include "checkpoint/commit_order.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

#define RECORD_MAX 128

zs_status zs__checkpoint_commit_record_write(int dirfd, const char *dir_path, int64_t step,
                                             uint64_t seq) {
    char text[RECORD_MAX];
    int n = snprintf(text, sizeof text, "zeroshard-commit seq=%" PRIu64 " step=%" PRId64 "\n", seq,
                     step);
    return zs__fs_write_atomic_at(dirfd, dir_path, ZS_CKPT_COMMIT, text, (size_t)n);
}

/* The record's sequence number, or 0 when it is missing or not valid. */
static uint64_t read_seq(int rootfd, const char *root, const char *name, int64_t step) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", root, name, ZS_CKPT_COMMIT);
    int dir = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) return 0;
    /* O_NONBLOCK: a FIFO planted at the name must not block the open. */
    int fd = openat(dir, ZS_CKPT_COMMIT, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dir);
    if (fd < 0) {
        if (errno != ENOENT) ZS_WARN("%s: cannot open: %s; ordering %s as an old checkpoint", path,
                                     strerror(errno), name);
        return 0;
    }
    char text[RECORD_MAX + 1];
    struct stat st;
    ssize_t got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= RECORD_MAX)
        got = read(fd, text, RECORD_MAX);
    close(fd);
    unsigned long long seq = 0;
    long long recorded = -1;
    int used = 0;
    if (got > 0) {
        text[got] = '\0';
        if (sscanf(text, "zeroshard-commit seq=%llu step=%lld\n%n", &seq, &recorded, &used) != 2 ||
            (size_t)used != (size_t)got || text[got - 1] != '\n')
            seq = 0;
    }
    if (seq == 0 || recorded != step) {
        ZS_WARN("%s: not a valid commit record (expected \"zeroshard-commit seq=N step=%lld\"); "
                "ordering %s as an old checkpoint, before every recorded commit",
                path, (long long)step, name);
        return 0;
    }
    return (uint64_t)seq;
}

static int newest_first(const void *pa, const void *pb) {
    const zs__ckpt_commit *a = pa, *b = pb;
    if (a->seq != b->seq) return a->seq > b->seq ? -1 : 1;
    if (a->step != b->step) return a->step > b->step ? -1 : 1;
    return 0;
}

zs_status zs__checkpoint_commit_order_at(int rootfd, const char *root, zs__ckpt_commit **out,
                                         int *count) {
    *out = NULL;
    *count = 0;
    char **names = NULL;
    int n = 0;
    ZS_CHECK(zs__fs_list_at(rootfd, root, INT_MAX, &names, &n));
    zs__ckpt_commit *list = zs__calloc((size_t)(n > 0 ? n : 1), sizeof *list);
    if (!list) {
        zs__fs_list_free(names, n);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for the commit "
                        "records of %d entries", root, n);
    }
    int used = 0;
    for (int i = 0; i < n; i++) {
        if (!zs__checkpoint_is_step_name(names[i])) continue;
        if (zs__fs_kind_at(rootfd, names[i]) != ZS_FS_KIND_DIR) continue;
        zs__ckpt_commit *c = &list[used++];
        snprintf(c->name, sizeof c->name, "%s", names[i]);
        c->step = strtoll(names[i] + strlen(ZS_CKPT_STEP_PREFIX), NULL, 10);
        c->seq = read_seq(rootfd, root, names[i], c->step);
    }
    zs__fs_list_free(names, n);
    if (used > 1) qsort(list, (size_t)used, sizeof *list, newest_first);
    /* Walking from the newest commit back, a directory with a higher step
     * than some later commit was left behind when that later run resumed
     * from an earlier step. */
    int64_t lowest_later = INT64_MAX;
    for (int i = 0; i < used; i++) {
        list[i].abandoned = list[i].step > lowest_later;
        if (list[i].step < lowest_later) lowest_later = list[i].step;
    }
    if (used == 0) {
        free(list);
        list = NULL;
    }
    *out = list;
    *count = used;
    return ZS_OK;
}

uint64_t zs__checkpoint_next_seq(const zs__ckpt_commit *order, int count) {
    uint64_t highest = 0;
    for (int i = 0; i < count; i++)
        if (order[i].seq > highest) highest = order[i].seq;
    return highest + 1;
}
