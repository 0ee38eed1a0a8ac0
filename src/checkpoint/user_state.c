/* User state: bytes the training loop keeps with a checkpoint (data position,
 * RNG state, ...). Set before zs_save; read back after zs_load. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/verify.h"
#include "core/alloc.h"
#include "core/error.h"

static zs__user_entry *find(zs_ctx *zs, const char *name) {
    for (int i = 0; i < zs->user_count; i++)
        if (strcmp(zs->user[i].name, name) == 0) return &zs->user[i];
    return NULL;
}

zs_status zs_user_state_set(zs_ctx *zs, const char *name, const void *data, size_t bytes,
                            int per_rank) {
    if (!zs || !name || (!data && bytes))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_user_state_set: zs, name and data are required");
    size_t n = strnlen(name, ZS_NAME_CAPACITY);
    if (n == 0 || n > ZS_PARAM_NAME_MAX || strchr(name, '/') || strstr(name, ".."))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_user_state_set: name '%.40s' must be 1..%d bytes without '/' or '..'",
                        name, ZS_PARAM_NAME_MAX);
    void *copy = zs__malloc(bytes ? bytes : 1);
    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_user_state_set('%s'): out of memory", name);
    if (bytes) memcpy(copy, data, bytes);
    zs__user_entry *e = find(zs, name);
    if (!e) {
        /* The loader accepts at most this many entries per shard (a bound
         * on hostile manifests), so a save must never write more. */
        if (zs->user_count >= ZS_CKPT_USER_MAX) {
            free(copy);
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "zs_user_state_set('%s'): already %d entries, the most a checkpoint "
                            "holds; keep related values in one entry",
                            name, ZS_CKPT_USER_MAX);
        }
        if (zs->user_count == zs->user_capacity) {
            int cap = zs->user_capacity ? 2 * zs->user_capacity : 8;
            zs__user_entry *grown = zs__realloc(zs->user, sizeof *grown * (size_t)cap);
            if (!grown) {
                free(copy);
                return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_user_state_set('%s'): out of memory", name);
            }
            zs->user = grown;
            zs->user_capacity = cap;
        }
        e = &zs->user[zs->user_count++];
        memset(e, 0, sizeof *e);
        memcpy(e->name, name, n + 1);
    }
    free(e->data);
    e->data = copy;
    e->bytes = bytes;
    e->per_rank = per_rank ? 1 : 0;
    return ZS_OK;
}

zs_status zs_user_state_get(zs_ctx *zs, const char *name, void *out, size_t capacity,
                            size_t *bytes) {
    if (!zs || !name || (!out && capacity))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_user_state_get: zs, name and out are required");
    zs__user_entry *e = find(zs, name);
    if (!e)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_user_state_get('%s'): no such user state on rank %d (set it with "
                        "zs_user_state_set before zs_save; per-rank state is restored only at the "
                        "same world size)",
                        name, zs->rank);
    if (bytes) *bytes = e->bytes;
    memcpy(out, e->data, e->bytes < capacity ? e->bytes : capacity);
    return ZS_OK;
}
