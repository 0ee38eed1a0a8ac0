/* safetensors files: the container of zeroshard's checkpoint shards and of
 * zs-ckpt's export. Layout (https://github.com/huggingface/safetensors):
 *   8 bytes  little-endian u64 N = header length
 *   N bytes  JSON object: "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 *            and optionally "__metadata__": {"key": "string value", ...}
 *   rest     tensor bytes; data_offsets are relative to the end of the header
 * The reader treats every file as hostile: every check below is a real error
 * path (never an assert) with a message naming the file and what is wrong. */
#ifndef ZS_CHECKPOINT_SAFETENSORS_H
#define ZS_CHECKPOINT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

/* Limits of what a reader accepts. */
#define ZS_ST_HEADER_MAX (64u << 20)   /* bytes of JSON header */
#define ZS_ST_NAME_MAX 255             /* bytes of a tensor name or metadata key */
#define ZS_ST_META_VALUE_MAX 4096      /* bytes of a metadata value */
#define ZS_ST_MAX_DIMS 8
#define ZS_ST_MAX_TENSORS (1 << 20)

typedef enum zs__st_dtype {
    ZS_ST_F32 = 0, /* "F32" */
    ZS_ST_F16 = 1, /* "F16" */
    ZS_ST_BF16 = 2, /* "BF16" */
    ZS_ST_U8 = 3   /* "U8": opaque bytes (user state) */
} zs__st_dtype;

size_t zs__st_dtype_size(zs__st_dtype dtype);
const char *zs__st_dtype_name(zs__st_dtype dtype);

/* ---------------------------------------------------------------- writer */

/* Fills dst with bytes [offset, offset + bytes) of a tensor: the source of
 * a tensor too large to hold in memory at once (a checkpoint's optimizer
 * state on NVMe or a device), read piece by piece while it is written. */
typedef zs_status (*zs__st_read_fn)(void *ctx, uint64_t offset, void *dst, uint64_t bytes);

/* One tensor to write: `bytes` bytes at `data`, or, with data NULL and read
 * set, what read(read_ctx, ...) gives in pieces of at most
 * ZS_ST_PIECE_BYTES (bytes must equal the product of the shape times the
 * dtype size). */
typedef struct zs__st_tensor_spec {
    const char *name;
    zs__st_dtype dtype;
    int ndim;
    int64_t shape[ZS_ST_MAX_DIMS];
    const void *data;
    uint64_t bytes;
    zs__st_read_fn read;
    void *read_ctx;
} zs__st_tensor_spec;

/* The most bytes a writer asks a tensor's read function for at once: the
 * host memory a streamed tensor takes while it is written. */
#define ZS_ST_PIECE_BYTES ((uint64_t)4 << 20)

typedef struct zs__st_meta {
    const char *key;
    const char *value;
} zs__st_meta;

/* Called after each tensor's bytes are written (index = tensor written), so
 * fault-injection tests can stop a writer in the middle of a file. */
typedef void (*zs__st_progress_fn)(void *ctx, int index);

/* Writes a safetensors file at `path` (created or truncated; the caller
 * writes to a temporary name and renames). Tensors are laid out in the given
 * order. Every write is checked (short writes retried, errors reported with
 * the path and errno text), and the file is fsynced before returning; on
 * failure the file is unlinked. Synchronous.
 * Outputs (any may be NULL): tensor_hashes[i] = XXH3_64bits of tensor i's
 * bytes; file_hash = XXH3_64bits of the whole file; file_bytes = its size. */
zs_status zs__st_write(const char *path, const zs__st_tensor_spec *tensors, int tensor_count,
                       const zs__st_meta *meta, int meta_count, zs__st_progress_fn progress,
                       void *progress_ctx, uint64_t *tensor_hashes, uint64_t *file_hash,
                       uint64_t *file_bytes);
/* The same, for a file that must be new: `name` (one path component) is
 * created inside the directory dir_fd with openat and
 * O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0644 (zs__fs_create_at), so an
 * existing entry at the name (a file, or a symlink planted to redirect the
 * data) makes the call fail with ZS_ERR_IO naming "dir_path/name" and EEXIST,
 * and is left untouched. Nothing is resolved through a path string, so a
 * rename of the directory or a symlink put in its place cannot redirect the
 * write. `dir_path` is the path dir_fd was opened from, used only in
 * messages. dir_fd stays the caller's. On failure after the file was
 * created, it is unlinked (dir_fd/name). */
zs_status zs__st_write_at(int dir_fd, const char *dir_path, const char *name,
                          const zs__st_tensor_spec *tensors, int tensor_count,
                          const zs__st_meta *meta, int meta_count, zs__st_progress_fn progress,
                          void *progress_ctx, uint64_t *tensor_hashes, uint64_t *file_hash,
                          uint64_t *file_bytes);

/* Streaming writer for files too large to hold (zs-ckpt export): the header
 * is written first from the specs (their `data` is ignored), then the caller
 * appends each tensor's bytes, in order, in pieces of any size. */
typedef struct zs__st_stream zs__st_stream;
zs_status zs__st_stream_open(const char *path, const zs__st_tensor_spec *tensors, int tensor_count,
                             const zs__st_meta *meta, int meta_count, zs__st_stream **out);
/* The streaming writer for a file that must be new, created as by
 * zs__st_write_at (dir_fd/name, O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC). The
 * stream keeps its own duplicate of dir_fd, so the caller may close dir_fd
 * at any time; a failed close or an abort unlinks dir_fd/name. */
zs_status zs__st_stream_open_at(int dir_fd, const char *dir_path, const char *name,
                                const zs__st_tensor_spec *tensors, int tensor_count,
                                const zs__st_meta *meta, int meta_count, zs__st_stream **out);
zs_status zs__st_stream_append(zs__st_stream *s, const void *data, uint64_t bytes);
/* Checks that exactly the declared bytes were appended, fsyncs, closes. The
 * stream is freed whether or not this succeeds; on failure the file is
 * unlinked (as by zs__st_stream_abort). After a failed append, only
 * zs__st_stream_abort or zs__st_stream_close (which then fails) may follow. */
zs_status zs__st_stream_close(zs__st_stream *s, uint64_t *file_hash, uint64_t *file_bytes);
void zs__st_stream_abort(zs__st_stream *s); /* closes and unlinks; NULL is a no-op */

/* ---------------------------------------------------------------- reader */

typedef struct zs__st_entry {
    char name[ZS_ST_NAME_MAX + 1];
    zs__st_dtype dtype;
    int ndim;
    int64_t shape[ZS_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets within the data section */
} zs__st_entry;

typedef struct zs__st_file zs__st_file;

/* Opens and validates a file: magic-free format, so checks are:
 *   - file size >= 8; header length N: 2 <= N <= ZS_ST_HEADER_MAX and 8 + N <= file size,
 *     checked BEFORE allocating the header;
 *   - the header is one JSON object (parsed with json-c), every entry an object
 *     with exactly dtype/shape/data_offsets of the right JSON types;
 *   - dtype in the allow-list (F32, F16, BF16, U8); shape: 0..ZS_ST_MAX_DIMS
 *     non-negative integers; product x dtype size computed with overflow checks
 *     and equal to end - begin;
 *   - names: 1..ZS_ST_NAME_MAX bytes, no NUL (JSON \u0000), no '/', not
 *     containing ".."; unique;
 *   - data_offsets: begin <= end, end <= data section size; sorted by begin the
 *     tensors do not overlap and cover the data section exactly (no gaps, no
 *     trailing bytes);
 *   - __metadata__ (optional): an object of string values within the limits.
 * Errors are ZS_ERR_IO (cannot open/read) or ZS_ERR_INVALID_ARGUMENT with a
 * message "<path>: <what is wrong>". */
zs_status zs__st_open(const char *path, zs__st_file **out);
/* The same checks on regular file `name` inside the directory dir_fd, opened
 * with openat and O_NOFOLLOW (core/fs.h): a symlink, FIFO, device or
 * directory is refused. `dir_path` is the directory's path, for messages. */
zs_status zs__st_open_at(int dir_fd, const char *dir_path, const char *name, zs__st_file **out);
void zs__st_close(zs__st_file *f); /* NULL is a no-op */

/* What a caller that knows what a file should hold may add to the checks
 * above: tighter bounds, so that a hostile header is refused in time and
 * memory proportional to what was expected rather than to the format's
 * limits (a header of 1,000,000 tensors took 7.9 s and 1.9 GB to refuse
 * under ZS_ST_HEADER_MAX alone), and messages fit for files whose names
 * are public. Zero fields keep the format's limits; bounds above them are
 * ignored (a caller tightens, never loosens). */
typedef struct zs__st_limits {
    /* Bytes of JSON header: a longer header is refused after reading the
     * 8-byte length, before anything is allocated. */
    uint64_t max_header_bytes;
    /* Tensors: the strict lexer stops at the first top-level member
     * beyond max_tensors + 1 (the +1 is __metadata__), before json-c
     * builds a node. */
    int max_tensors;
    /* What the bounds were derived from, for messages ("the 22 tensors
     * expected there"; read during the open only); with it, exceeding a
     * bound gets a message of its own. */
    const char *expected;
    /* Messages name a tensor by its name (escaped, zs__st_printable) as
     * well as its position, and an unknown dtype by its text. For files
     * whose names are not secret (a Hugging Face checkpoint); a
     * checkpoint's own shards never show their bytes. */
    int name_tensors;
    /* zs__st_open_limited: the path's last component may be a symlink (a
     * Hugging Face cache's snapshot entries all are); what is opened must
     * still be a regular file. zs__st_open_at_limited refuses it: inside a
     * directory descriptor nothing is followed. */
    int follow_symlinks;
    /* The dtypes the caller reads, in the words a message lists them
     * ("F32, BF16 and F16, the dtypes parameters are imported from"), for
     * the refusal of a dtype this reader does not know; NULL lists the
     * reader's own (F32, F16, BF16, U8), which a caller may not accept.
     * Read during the open only. */
    const char *dtypes;
    /* Bytes of the data section that no tensor covers (a gap, or trailing
     * bytes) do not fail the open: the first such range is kept for
     * zs__st_hole and zs__st_check_holes, so that a caller that knows which
     * tensors the file should hold can first name the missing ones (an
     * entry removed from a header leaves its bytes as a gap). The caller
     * must then call zs__st_check_holes before it trusts the file. */
    int report_holes;
} zs__st_limits;

/* zs__st_open / zs__st_open_at under `limits` (NULL: the same as those). */
zs_status zs__st_open_limited(const char *path, const zs__st_limits *limits, zs__st_file **out);
zs_status zs__st_open_at_limited(int dir_fd, const char *dir_path, const char *name,
                                 const zs__st_limits *limits, zs__st_file **out);

/* The most bytes one tensor's entry takes in a header written without
 * whitespace, for a name of name_bytes bytes (each written as a six-byte
 * JSON escape at worst) and ndim dimensions, every integer at its longest. A
 * caller derives zs__st_limits.max_header_bytes from what it expects. */
uint64_t zs__st_entry_bytes_bound(size_t name_bytes, int ndim);

/* For a file opened with zs__st_limits.report_holes: 1 and the first range
 * of data bytes [*begin, *end) that no tensor covers, or 0 when the tensors
 * tile the data section. */
int zs__st_hole(const zs__st_file *f, uint64_t *begin, uint64_t *end);
/* ZS_OK when the tensors tile the data section, else the failure the open
 * would have returned without report_holes ("gap in the data section" or
 * "trailing bytes", with the path and the byte range). */
zs_status zs__st_check_holes(const zs__st_file *f);

/* Copies `text` into out (cap bytes, always NUL-terminated), fit for a
 * message or a terminal: C0 control characters, DEL, '"', '\\' and every
 * byte that is not part of valid UTF-8 written as \xNN; the C1 controls
 * (U+0080-U+009F) and Unicode's bidirectional overrides and isolates
 * (U+202A-U+202E, U+2066-U+2069), which a terminal would obey and which
 * would make the text read as something else, as \u{NNNN}; a text too
 * long cut with "...". At most 4 bytes of out per byte of text. */
void zs__st_printable(const char *text, char *out, size_t cap);

const char *zs__st_path(const zs__st_file *f);
uint64_t zs__st_file_bytes(const zs__st_file *f);
int zs__st_count(const zs__st_file *f);
const zs__st_entry *zs__st_entry_at(const zs__st_file *f, int index); /* file order as in the header */
const zs__st_entry *zs__st_find(const zs__st_file *f, const char *name); /* NULL if absent */
const char *zs__st_meta_get(const zs__st_file *f, const char *key);     /* NULL if absent */

/* Reads `bytes` bytes starting `offset` bytes into the entry's data
 * (bounds-checked against the entry; pread, short reads retried). */
zs_status zs__st_read(const zs__st_file *f, const zs__st_entry *e, uint64_t offset, void *dst,
                      uint64_t bytes);
/* XXH3_64bits of the entry's bytes / of the whole file, streamed through a
 * bounded buffer (memory does not grow with the file). */
zs_status zs__st_hash_entry(const zs__st_file *f, const zs__st_entry *e, uint64_t *hash);
zs_status zs__st_hash_file(const zs__st_file *f, uint64_t *hash);

#endif
