/* Commit order of the step directories in a checkpoint root (commit_order.c).
 *
 * Step numbers do not order commits: a run resumed from step 40 while
 * step_00000060 exists commits step 50 after 60. Each commit therefore writes
 * a commit record, the file `commit` in the step directory, holding a
 * sequence number one above every record in the root, before the directory
 * is renamed into place; the rename commits both at once. `latest` names the
 * same step (it is written right after), except after a crash between the
 * rename and latest's update, when the record is the one to trust.
 *
 * Abandoned timeline: a step directory is abandoned when a step directory
 * committed after it has a lower step number (the later run resumed from an
 * earlier step, so the higher-numbered directory belongs to the timeline it
 * left). The newest commit is never abandoned. resume = "auto" never chooses
 * an abandoned directory; retention deletes abandoned directories before any
 * other (see retention.c). */
#ifndef ZS_CHECKPOINT_COMMIT_ORDER_H
#define ZS_CHECKPOINT_COMMIT_ORDER_H

#include <stdint.h>

#include "zeroshard.h"

#define ZS_CKPT_COMMIT "commit" /* the commit record inside a step directory */

typedef struct zs__ckpt_commit {
    char name[16];  /* step_NNNNNNNN */
    int64_t step;
    uint64_t seq;   /* commit sequence; 0: no valid record (written by a runtime before commit
                       records, or damaged), ordered before every recorded commit, by step */
    int abandoned;  /* 1: a later commit has a lower step (see above) */
} zs__ckpt_commit;

/* The step directories of the open root directory rootfd (real directories
 * named step_NNNNNNNN; symlinks and files with such names are not
 * checkpoints and are left out), newest commit first: by seq, highest first,
 * then the unrecorded ones by step, highest first. *out is malloc'd (NULL
 * when *count is 0) and the caller frees it. Reads only: safe on any rank,
 * but meant for rank 0. `root` is for messages.
 *
 * For select.c (resume = "auto" or zs_load on a root): try the entries in
 * this order, skip those with abandoned = 1 (warn naming them), and load the
 * first that verifies. */
zs_status zs__checkpoint_commit_order_at(int rootfd, const char *root, zs__ckpt_commit **out,
                                         int *count);

/* The sequence number the next commit into the root takes: one above the
 * highest in `order` (1 for the first). */
uint64_t zs__checkpoint_next_seq(const zs__ckpt_commit *order, int count);

/* Writes the commit record of `step` with `seq` into the open (temporary)
 * step directory dirfd atomically and durably; dir_path is for messages. */
zs_status zs__checkpoint_commit_record_write(int dirfd, const char *dir_path, int64_t step,
                                             uint64_t seq);

#endif
