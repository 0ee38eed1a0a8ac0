/* The job generation fence: an old job can never commit into a new one's
 * checkpoint root.
 *
 * A launcher (tools/zs-run) numbers its launches and, before starting
 * generation N, writes N (ASCII decimal and a newline) into
 * <checkpoint.dir>/generation; each launch runs with job.generation = N
 * (ZS_JOB_GENERATION). Ranks of an earlier launch still running on a host
 * that was cut off carry a lower number: rank 0 reads the file immediately
 * before a save's commit renames and at zs_build, and a file naming a
 * higher generation than this job's refuses, agreed on every rank like any
 * save failure, with nothing committed. A job of generation 0 is unfenced
 * and never reads the file; a missing file fences nothing. Loading,
 * verification and retention ignore the file (and the exit reports'
 * reports/ directory): they are not step directories. */
#ifndef ZS_CHECKPOINT_FENCE_H
#define ZS_CHECKPOINT_FENCE_H

#include <stdint.h>

#include "zeroshard.h"

typedef struct zs_ctx zs_ctx;

#define ZS_CKPT_GENERATION "generation" /* in the checkpoint root */

/* Local (rank 0): ZS_OK when the root open at rootfd (`root` for messages)
 * does not fence out `generation`; ZS_ERR_STATE when its generation file
 * names a higher one, ZS_ERR_IO when that file cannot be read or does not
 * hold exactly a decimal number. `what` ends the message ("nothing
 * committed"). */
zs_status zs__checkpoint_fence_at(int rootfd, const char *root, int64_t generation,
                                  const char *what);

/* Collective: the check above on checkpoint.dir (a root that does not
 * exist yet fences nothing), made by rank 0 and agreed on every rank. A
 * no-op for generation 0 or an empty checkpoint.dir. */
zs_status zs__checkpoint_fence(zs_ctx *zs, const char *what);

#endif
