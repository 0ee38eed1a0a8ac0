/* The NVMe tier's storage: one swap file per rank holding optimizer-state
 * blocks, read and written asynchronously by a small pool of I/O threads
 * (pread/pwrite), every block protected by an XXH3-64 checksum kept in memory.
 *
 * The file never has a name: it is opened with O_TMPFILE in <dir>, so it
 * exists only as long as its descriptor, nothing of it is ever visible in
 * <dir>, and nothing is left whatever happens to the process.
 *
 * Where the file system has no O_TMPFILE (NFS, some FUSE ones; swap_named.c),
 * a named file is created and unlinked at once, in a per-run directory:
 *   <dir>/zeroshard-swap-<runid>/            the per-run directory
 *       owner-<rank>                          "host=<h> pid=<p>", flock()ed by
 *                                             the rank while it lives
 *       rank-<rank>.swap                      unlinked right after open
 * The directory and its owner files stay until destroy, where the last rank
 * out removes the directory; a directory left by a killed run (no owner lock
 * held, owner on this host) is removed by the next create.
 *
 * Threads: create, destroy and buffer_alloc/free are called from one
 * thread; submit and wait may be called from several threads at once
 * (nvme_state's sweep and its cache), each request waited for by one
 * thread; the I/O threads only run requests. Requests complete in any
 * order. Two in-flight requests must not overlap in the file (nvme_state's
 * sweep window guarantees it; it is not checked). */
#ifndef ZS_OFFLOAD_SWAP_H
#define ZS_OFFLOAD_SWAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/memory.h"
#include "zeroshard.h"

typedef struct zs__swap zs__swap;
typedef struct zs__swap_req zs__swap_req; /* one outstanding read or write */

/* O_DIRECT needs buffers, offsets and sizes aligned to the logical block
 * size of the device; 4096 covers every current NVMe and 4Kn disk. */
#define ZS_SWAP_ALIGNMENT 4096
/* Host memory per block: its XXH3-64 and its written flag. */
#define ZS_SWAP_META_BYTES_PER_BLOCK 9

/* "<host>-<pid>" of this process, a valid runid (at most 64 characters). */
void zs__swap_default_runid(char *out, size_t cap);

typedef struct zs__swap_config {
    /* I/O threads, each running one request's pread/pwrite at a time, so
     * this many requests are in flight at the device (default 2). */
    int io_threads;
    /* A wait fails with ZS_ERR_TIMEOUT, naming the file and the offset,
     * when no I/O on this swap file completed for this long (default 120 s). */
    double timeout_s;
    /* The per-run directory's name is zeroshard-swap-<runid>. Every rank of
     * one job must pass the same runid to share a directory; NULL or "" uses
     * "<host>-<pid>" of this process (right for one process per run). At most
     * 64 characters of [A-Za-z0-9._-]. */
    const char *runid;
    /* 1 (default) tries O_DIRECT; 0 uses buffered I/O (benchmarks only). */
    int try_direct;
    /* Test only: called by an I/O thread before each system call of a
     * request, so a test can stall the "device" and exercise the deadline.
     * NULL in production. */
    void (*test_before_io)(void *arg);
    void *test_arg;
    /* 1 (default) opens the file with O_TMPFILE where the file system has
     * it; 0 always takes the named way (tests of that fallback). */
    int try_tmpfile;
} zs__swap_config;

#define ZS__SWAP_CONFIG_INIT {2, 120.0, NULL, 1, NULL, NULL, 1}

/* Opens rank's swap file in dir (which must exist) with O_TMPFILE, or, where
 * the file system has none, creates dir/zeroshard-swap-<runid>/ (first
 * removing per-run directories there whose owners are all gone: killed runs
 * on this host), creates the file there and unlinks it at once. Either way
 * with O_DIRECT where the file system allows it (otherwise buffered I/O with
 * one log line saying why). Then reserves `capacity` bytes (fallocate; posix_fallocate; else
 * ftruncate and an INFO line: space is then claimed at write time and a full
 * disk shows up as ENOSPC from a write). `block_bytes` is the I/O and
 * checksum granularity, a multiple of ZS_SWAP_ALIGNMENT; capacity is rounded
 * up to a whole block. The checksum table (ZS_SWAP_META_BYTES_PER_BLOCK per
 * block) is charged to ZS_MEM_HOST_STATE in `mem`. Errors name the path and what to do. */
zs_status zs__swap_create(const char *dir, int rank, uint64_t capacity, size_t block_bytes,
                          zs__mem *mem, zs__swap **out);
/* The same with explicit settings; cfg NULL means ZS__SWAP_CONFIG_INIT. */
zs_status zs__swap_create_with(const char *dir, int rank, uint64_t capacity, size_t block_bytes,
                               const zs__swap_config *cfg, zs__mem *mem, zs__swap **out);
/* Waits for the outstanding requests (with the deadline), frees requests
 * never waited for, closes the file (its space returns to the file system),
 * releases this rank's owner lock and removes the per-run directory if this
 * was the last rank in it. NULL is a no-op. If an I/O thread is stuck past the
 * deadline, logs an error and leaks the object rather than free memory a
 * thread still uses. */
void zs__swap_destroy(zs__swap *sw);

/* Buffers for O_DIRECT: `bytes` rounded up to ZS_SWAP_ALIGNMENT, aligned to
 * it, zero-filled, charged to `tag` in the swap's accountant. Free with the
 * same bytes and tag. */
zs_status zs__swap_buffer_alloc(zs__swap *sw, size_t bytes, zs_mem_tag tag, void **out);
void zs__swap_buffer_free(zs__swap *sw, void *p, size_t bytes, zs_mem_tag tag);

/* Asynchronous: each returns at once with *req (or an argument error). `buf`
 * must stay valid and untouched until zs__swap_wait. `offset` is a multiple
 * of block_bytes; `bytes` may end with a partial block, but the transfer is
 * always whole blocks, so `buf` must hold bytes rounded up to block_bytes
 * (the caller pads the last block). With O_DIRECT, buf must be aligned to
 * ZS_SWAP_ALIGNMENT (zs__swap_buffer_alloc); an unaligned buf fails at
 * submission. A write records each block's checksum once it is on the file;
 * a read verifies every block and fails (ZS_ERR_IO) naming the file, the
 * byte offset of the block and `label` (the unit) on a mismatch, on a short
 * read (truncated file) or for a block never written. `label` is copied. */
zs_status zs__swap_write(zs__swap *sw, uint64_t offset, const void *buf, size_t bytes,
                         const char *label, zs__swap_req **req);
zs_status zs__swap_read(zs__swap *sw, uint64_t offset, void *buf, size_t bytes,
                        const char *label, zs__swap_req **req);
/* Blocks until req is done and frees it; returns its status and records its
 * message (zs_last_error). ZS_ERR_TIMEOUT after timeout_s without any I/O on
 * this file completing: the request stays with the I/O thread (its buffer
 * must stay valid until zs__swap_destroy) and is freed there. */
zs_status zs__swap_wait(zs__swap *sw, zs__swap_req *req);

/* 1 when the block at `offset` holds a completed write (a read of it is
 * checked against its checksum); 0 for a block never written or whose last
 * write failed. */
int zs__swap_written(const zs__swap *sw, uint64_t offset);

/* Forgets every block's contents: each reads as never written until it is
 * written again (a new start after the data was lost). No request may be
 * in flight. */
void zs__swap_forget(zs__swap *sw);

/* The swap file's path (it has no name on the disk: this is for messages). */
const char *zs__swap_path(const zs__swap *sw);
/* 1 when the file is open with O_DIRECT. */
int zs__swap_is_direct(const zs__swap *sw);
/* 1 when the file was opened with O_TMPFILE; 0 when it took the named way. */
int zs__swap_is_tmpfile(const zs__swap *sw);
/* The per-run directory of the named way, or dir itself with O_TMPFILE. */
const char *zs__swap_dir(const zs__swap *sw);

/* Test only: the swap file's descriptor, so a test can flip a byte or
 * truncate the unlinked file. Nothing else may use it. */
int zs__swap_fd_for_test(const zs__swap *sw);

#endif
