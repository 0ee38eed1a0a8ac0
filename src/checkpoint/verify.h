/* The one verification of a checkpoint step directory, shared by zs_load
 * (src/checkpoint/load.c) and zs-ckpt (tools/), so that both give the same
 * answer for the same directory. A step directory passes when:
 *   - it is a real directory (never a symlink when found inside a root), and
 *     when its name is step_NNNNNNNN, NNNNNNNN is the manifest's step;
 *   - manifest.json.xxh3 and manifest.json are regular files within their
 *     size limits, the hash matches, and the manifest parses and validates
 *     (zs__manifest_from_json);
 *   - the manifest is what a save writes (zs__ckpt_check_manifest): exactly
 *     one file per (rank, kind) of its world size, named as save names them;
 *     every parameter has every optimizer state of the manifest's optimizer
 *     (SGD: momentum for all parameters or none); each (file, parameter,
 *     state) at most once and never empty; user state only in user files,
 *     global entries only in rank 0's, at most ZS_CKPT_USER_MAX per file;
 *   - each file (zs__ckpt_open_shard) is a regular file inside the directory
 *     (openat, O_NOFOLLOW, fstat); its header is no longer, and lists no
 *     more tensors, than those the manifest assigns to it can take (checked
 *     before the header is allocated or parsed); its size is the manifest's, its metadata
 *     names format, version, step, rank, world size and kind as the
 *     manifest does; its whole-file XXH3 is the manifest's; its header holds
 *     exactly the tensors the manifest assigns to it (no extras, none
 *     missing) with the dtype of their state, the manifest's element count,
 *     the manifest's offset where its metadata records one, and the
 *     manifest's per-tensor XXH3.
 * Messages name the file, the entry and what was expected; none echoes the
 * bytes of a file. */
#ifndef ZS_CHECKPOINT_VERIFY_H
#define ZS_CHECKPOINT_VERIFY_H

#include <stdint.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "zeroshard.h"

#define ZS_CKPT_PATH_MAX 4096
/* User-state entries per file: zs_user_state_set refuses more, so a save
 * never writes more and a reader can bound what it accepts. */
#define ZS_CKPT_USER_MAX 4096

/* An open step directory and its verified manifest. */
typedef struct zs__ckpt_step {
    int fd;                         /* the step directory; -1 when closed */
    char path[ZS_CKPT_PATH_MAX];    /* as shown in messages */
    zs__manifest *m;
    /* Per manifest file: the tensors the manifest lists in it, and the most
     * header bytes such a shard can take. zs__ckpt_open_shard refuses a
     * header beyond them before allocating it, so a shard whose header
     * claims a million tensors is refused in time and memory proportional
     * to what the manifest lists, not to what the file claims. */
    int *listed;
    uint64_t *header_bound;
} zs__ckpt_step;

/* Opens a step directory: `name` inside the open root root_fd (with
 * O_DIRECTORY | O_NOFOLLOW; root_path is for messages), or, when name is
 * NULL, the directory root_path itself (root_fd unused). Then reads and
 * checks the manifest as described above (no shard is read). On failure
 * *out is closed. Close with zs__ckpt_step_close (a closed step is a no-op). */
zs_status zs__ckpt_step_open(int root_fd, const char *root_path, const char *name,
                             zs__ckpt_step *out);
void zs__ckpt_step_close(zs__ckpt_step *s);

/* Opens shard file `file` of the manifest and checks its kind, size and
 * metadata (not its hashes), its header bounded by the manifest (header
 * bytes and tensor count, see zs__ckpt_step). The caller closes it with
 * zs__st_close. */
zs_status zs__ckpt_open_shard(const zs__ckpt_step *s, int file, zs__st_file **out);

typedef struct zs__ckpt_verify_totals {
    int files;
    int64_t tensors;
    uint64_t bytes;
} zs__ckpt_verify_totals;

/* Verifies every file whose index f satisfies f % parts == part (all files:
 * part 0 of 1; a collective load spreads the files over its ranks, and the
 * union of the parts is the same check), skipping the optimizer-state files
 * when without_optim (zs-ckpt export: the model and the user state it may
 * carry into its output, so that a checkpoint whose master or user files
 * verify rejects, export rejects with the same message; its optimizer state
 * is not needed, and may even have been deleted). Stops at the first
 * failure. totals may be NULL. Synchronous; reads each selected file twice
 * (whole-file hash, then per tensor) through bounded buffers. */
zs_status zs__ckpt_verify_files(const zs__ckpt_step *s, int part, int parts, int without_optim,
                                zs__ckpt_verify_totals *totals);

/* zs__ckpt_verify_files that also reports how far it got, for zs-ckpt's
 * progress line: `progress` (may be NULL) is called with `user` and the
 * bytes read so far after each file's whole-file hash and after each
 * tensor's hash. Each selected file is read twice, so the count ends at
 * twice the sum of their sizes (zs__ckpt_verify_read_bytes). */
typedef void (*zs__ckpt_verify_progress_fn)(void *user, uint64_t bytes_read);
zs_status zs__ckpt_verify_files_progress(const zs__ckpt_step *s, int part, int parts,
                                         int without_optim, zs__ckpt_verify_totals *totals,
                                         zs__ckpt_verify_progress_fn progress, void *user);
/* The bytes zs__ckpt_verify_files reads for this selection of files. */
uint64_t zs__ckpt_verify_read_bytes(const zs__ckpt_step *s, int part, int parts, int without_optim);

/* The save-shaped checks of a parsed manifest (see above). */
zs_status zs__ckpt_check_manifest(const zs__manifest *m, const char *where);

#endif
