/* The commit order of a checkpoint root given by path, for tests that
 * inspect a root after saving into it (the library works on the root's
 * descriptor: zs__checkpoint_commit_order_at). */
#ifndef ZS_TEST_COMMIT_ORDER_PATH_H
#define ZS_TEST_COMMIT_ORDER_PATH_H

#include "checkpoint/commit_order.h"
#include "zeroshard.h"

/* zs__checkpoint_commit_order_at on `root`, opened (and closed) here. */
zs_status zt_checkpoint_commit_order(const char *root, zs__ckpt_commit **out, int *count);

#endif
