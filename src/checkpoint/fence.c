/* The job generation fence (see fence.h). */
#include "checkpoint/fence.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "zero/agree.h"
#include "zero/ground.h"
#include "zero/job.h"

/* A generation file holds a decimal number and a newline: a few bytes. */
#define GENERATION_FILE_MAX 64

zs_status zs__checkpoint_fence_at(int rootfd, const char *root, int64_t generation,
                                  const char *what) {
    if (generation <= 0) return ZS_OK;
    if (zs__fs_kind_at(rootfd, ZS_CKPT_GENERATION) == ZS_FS_KIND_MISSING) return ZS_OK;
    char *text = NULL;
    size_t bytes = 0;
    ZS_CHECK(zs__fs_read_file_at(rootfd, root, ZS_CKPT_GENERATION, GENERATION_FILE_MAX, &text,
                                 &bytes));
    size_t n = bytes;
    if (n > 0 && text[n - 1] == '\n') n--;
    /* Digits only: the launcher writes nothing else, and anything else may
     * be a file caught half written or not the launcher's at all. */
    int64_t named = 0;
    int valid = n > 0 && n <= 18;
    for (size_t i = 0; valid && i < n; i++) {
        if (text[i] < '0' || text[i] > '9') valid = 0;
        else named = named * 10 + (text[i] - '0');
    }
    free(text);
    if (!valid)
        return zs__fail(ZS_ERR_IO, "%s/%s does not hold a job generation (decimal digits and a "
                        "newline, as zs-run writes it); this job is generation %lld and cannot "
                        "tell whether it is fenced out; %s",
                        root, ZS_CKPT_GENERATION, (long long)generation, what);
    if (named > generation)
        return zs__fail(ZS_ERR_STATE, "checkpoint root %s belongs to job generation %lld; this "
                        "job is generation %lld (an old job fenced out by zs-run); %s",
                        root, (long long)named, (long long)generation, what);
    return ZS_OK;
}

zs_status zs__checkpoint_fence(zs_ctx *zs, const char *what) {
    const char *root = zs->settings.checkpoint.dir;
    if (zs__job_generation(zs) <= 0 || root[0] == '\0') return ZS_OK;
    zs_status local = ZS_OK;
    if (zs->rank == 0 && zs__fs_is_dir(root)) {
        int rootfd = -1;
        local = zs__fs_open_root(root, 0, &rootfd);
        if (local == ZS_OK) local = zs__checkpoint_fence_at(rootfd, root, zs__job_generation(zs), what);
        if (rootfd >= 0) close(rootfd);
    }
    return zs__share_outcome(zs, local, 0, "job generation fence");
}
