/* The reliability programs' small model (see blocks.h). */
#include "blocks.h"

#include <stdio.h>

zs_status blocks_describe(zs_ctx *zs, int count, int64_t first, int64_t step, zs_unit **units,
                          zs_param **params, int64_t *numel, const char **what) {
    for (int u = 0; u < count; u++) {
        char name[32];
        snprintf(name, sizeof name, "block.%d", u);
        zs_status st = zs_unit_begin(zs, name, &units[u]);
        *what = "zs_unit_begin";
        numel[u] = first + step * u;
        snprintf(name, sizeof name, "block.%d.weight", u);
        if (st == ZS_OK) {
            st = zs_param_create(zs, name, 1, &numel[u], ZS_INIT_NORMAL_STD(0.02), 0, &params[u]);
            *what = "zs_param_create";
        }
        if (st == ZS_OK) {
            st = zs_unit_end(zs);
            *what = "zs_unit_end";
        }
        if (st != ZS_OK) return st;
    }
    return ZS_OK;
}
