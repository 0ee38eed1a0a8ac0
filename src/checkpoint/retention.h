/* Retention and clean-up of a checkpoint root (retention.c). Rank 0 only. */
#ifndef ZS_CHECKPOINT_RETENTION_H
#define ZS_CHECKPOINT_RETENTION_H

#include <stdint.h>

#include "zeroshard.h"

/* After `committed` (a step directory name) was committed into the open root
 * rootfd: removes leftovers of interrupted or failed saves (.tmp_step_*,
 * .old_step_*, .latest.tmp.*), then, when keep > 0, deletes step directories
 * beyond the `keep` most recently committed, abandoned ones first (see
 * commit_order.h); `committed` is always kept. Only what the runtime writes
 * is removed: a directory holding anything else keeps those entries (its own
 * files are removed), and such entries, symlinks and files with checkpoint
 * names are skipped with one warning while the set of them stays the same
 * (*warned holds a digest of the last set warned about; start it at 0).
 * Returns an error only when the root cannot be listed; everything else is a
 * warning, so one bad entry never stops pruning of the rest. */
zs_status zs__checkpoint_retain(int rootfd, const char *root, const char *committed, int64_t keep,
                                uint64_t *warned);

/* Removes from the open root the directory `name` that the runtime made (a
 * temporary, replaced or retired step directory): its files the runtime
 * writes, then the directory itself when nothing else is left. *foreign is
 * set to the number of entries left behind (0 if it was removed); the first
 * of them is named in `first_foreign` (capacity cap). */
zs_status zs__checkpoint_purge_dir(int rootfd, const char *root, const char *name, int *foreign,
                                   char *first_foreign, size_t cap);

/* 1 if `name` (inside a step or temporary directory) is a file the save
 * protocol writes: rankNNNNN.{master,optim,user}.safetensors[.partial],
 * manifest.json, manifest.json.xxh3, commit, or the temporary name of one of
 * them (.<name>.tmp.<...>). */
int zs__checkpoint_is_owned_file(const char *name);

#endif
