/* ZS_FAULT_ERRNO: a test hook that makes the n-th file-system call of a kind
 * fail with an errno (see fs.h), so tests can prove that a save failing with
 * a full disk or an I/O error at any step cleans up after itself and leaves
 * the previous checkpoint intact, and that the NVMe tier reports a failing
 * device. It never runs unless the variable is set. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/env.h"
#include "core/fs.h"

static int errno_by_name(const char *name) {
    static const struct {
        const char *name;
        int value;
    } known[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EFBIG", EFBIG}, {"EDQUOT", EDQUOT},
                 {"EROFS", EROFS}, {"EACCES", EACCES}, {"EINVAL", EINVAL},
                 {"EOPNOTSUPP", EOPNOTSUPP}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].name, name) == 0) return known[i].value;
    return 0;
}

int zs__fs_fault(const char *point) {
    /* The count of calls must survive between calls, and the hook must not
     * need a context (the file-system steps have none), so it lives here: a test-only counter,
     * restarted whenever the variable's text changes. Checkpoint writes come
     * from one thread, but the NVMe tier's I/O threads (src/offload/swap.c)
     * call it concurrently, so the counter is under a lock; the variable
     * itself is only read (tests set it while no I/O is in flight). */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char armed[128];
    static long calls;
    const char *spec = zs__env_text(ZS_ENV_FAULT_ERRNO);
    pthread_mutex_lock(&lock);
    if (!spec || !*spec) {
        armed[0] = '\0';
        pthread_mutex_unlock(&lock);
        return 0;
    }
    if (strcmp(spec, armed) != 0) {
        snprintf(armed, sizeof armed, "%s", spec);
        calls = 0;
    }
    char name[32], err[32];
    long nth = 0;
    long call = 0;
    if (sscanf(spec, "%31[a-z]:%31[A-Z]:%ld", name, err, &nth) == 3 && strcmp(name, point) == 0)
        call = ++calls;
    pthread_mutex_unlock(&lock);
    if (call == 0 || call != nth) return 0;
    int value = errno_by_name(err);
    if (value)
        fprintf(stderr, "zeroshard: ZS_FAULT_ERRNO=%s: failing this '%s' call with %s\n", spec,
                point, err);
    return value;
}
