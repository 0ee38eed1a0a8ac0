/* Which step directory of a checkpoint root to load: the one rule shared by
 * zs_load / checkpoint.resume and zs-ckpt (info, verify, export of a root).
 *
 * Candidates are the root's step directories in commit order, newest commit
 * first (commit_order.h: each commit writes a record with a sequence number,
 * and the rename that publishes the step is the commit). Step directories of
 * an abandoned timeline (a later commit has a lower step: a run resumed from
 * an earlier step and saved again) are named in a warning and never chosen
 * automatically. `latest` is a cross-check: it names the newest commit except
 * after a crash between a commit and its update, when the records win (with
 * a warning). Entries named step_NNNNNNNN that are not directories (a
 * regular file, a symlink, a FIFO) are skipped with a warning, never
 * followed. The first candidate that passes the caller's check (verify.h,
 * plus for zs_load the model's layout) is the one loaded. */
#ifndef ZS_CHECKPOINT_SELECT_H
#define ZS_CHECKPOINT_SELECT_H

#include "zeroshard.h"

#define ZS_CKPT_STEP_NAME_CAPACITY 16 /* "step_" + 8 digits + NUL, with room */
#define ZS_CKPT_ROOT_ENTRIES_MAX (1 << 20) /* entries of a root we list */

typedef struct zs__ckpt_candidates {
    int explicit_dir;  /* 1: the directory is itself a step directory (it holds
                          manifest.json, or it is not a root); it is the only
                          candidate and names is empty */
    int count;         /* step directories, best first */
    char (*names)[ZS_CKPT_STEP_NAME_CAPACITY];
} zs__ckpt_candidates;

/* Lists the candidates of `dir` (a root or a step directory). Reads only
 * names, kinds and `latest`; verifies nothing. Warnings go to the log.
 * Free with zs__ckpt_candidates_free. */
zs_status zs__ckpt_candidates_list(const char *dir, zs__ckpt_candidates *out);
void zs__ckpt_candidates_free(zs__ckpt_candidates *c);

/* The caller's check of one candidate: name is NULL for an explicit step
 * directory, else a step directory inside root `dir`. ZS_OK accepts it. */
typedef zs_status (*zs__ckpt_try_fn)(void *ctx, const char *dir, const char *name);

/* Tries the candidates in order and stops at the first accepted
 * (*chosen = its index, or 0 for an explicit directory). An explicit
 * directory's failure is returned as it is. A root with no candidate gives
 * ZS_OK and *chosen = -1 (the caller decides whether that is an error); a
 * root whose candidates all fail gives ZS_ERR_IO naming how many were tried
 * and the last error, each failure also logged as a warning. Collective
 * callers pass the same candidates on every rank and a try_fn that returns
 * the same status on every rank, so all ranks take the same path. */
zs_status zs__ckpt_select(const char *dir, const zs__ckpt_candidates *c, zs__ckpt_try_fn try_fn,
                          void *ctx, int *chosen);

#endif
