/* safetensors files: the shard container of a checkpoint and the export format.
 *
 * Layout (the public format): 8 bytes, a little-endian u64 N; N bytes of a
 * UTF-8 JSON object mapping tensor names to {"dtype", "shape", "data_offsets"}
 * plus an optional "__metadata__" object of strings; then the data section.
 * data_offsets are [begin, end) byte offsets relative to the data section.
 * Like the reference implementation, the writer pads the header with spaces
 * so that the data section starts at a multiple of 8 bytes.
 *
 * The reader treats every file as hostile: the header length is bounded and
 * checked against the file size before anything is allocated, the JSON text
 * is lexed strictly before json-c sees it (zs__json_parse_strict), and the
 * tensors must tile the data section exactly, so that no byte of a valid file
 * is unaccounted for and no read can leave the file. */
#include "checkpoint/json_strict.h"
#include "checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"

/* Reads and hashes go through a buffer of this size, so memory does not grow
 * with the file; writes of smaller pieces are gathered into one of this size. */
#define ST_IO_CHUNK ((size_t)1 << 20)
#define ST_METADATA_KEY "__metadata__"
/* An escaped tensor name (zs__st_printable: at most 4 bytes per byte of a
 * 255-byte name) and a message's "header tensor N (\"name\")". */
#define ST_SHOWN_NAME_BYTES (4 * ZS_ST_NAME_MAX + 8)
#define ST_LABEL_BYTES (ST_SHOWN_NAME_BYTES + 48)

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    [ZS_ST_F32] = {"F32", 4},
    [ZS_ST_F16] = {"F16", 2},
    [ZS_ST_BF16] = {"BF16", 2},
    [ZS_ST_U8] = {"U8", 1},
};
#define ST_DTYPE_COUNT ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

size_t zs__st_dtype_size(zs__st_dtype dtype) {
    if ((int)dtype < 0 || (int)dtype >= ST_DTYPE_COUNT) return 0;
    return st_dtypes[dtype].size;
}

const char *zs__st_dtype_name(zs__st_dtype dtype) {
    if ((int)dtype < 0 || (int)dtype >= ST_DTYPE_COUNT) return "unknown";
    return st_dtypes[dtype].name;
}

/* ================================================================ names */

/* Why a tensor name (or metadata key, with `tensor` 0) is refused, or NULL. */
static const char *st_name_problem(const char *name, size_t len, int tensor) {
    if (len == 0) return "is empty";
    if (len > ZS_ST_NAME_MAX) return "is longer than 255 bytes";
    if (memchr(name, '\0', len)) return "contains a NUL byte";
    if (!zs__json_utf8_valid(name, len)) return "is not valid UTF-8";
    if (tensor) {
        if (memchr(name, '/', len)) return "contains '/'";
        if (strstr(name, "..")) return "contains \"..\"";
        if (strcmp(name, ST_METADATA_KEY) == 0) return "is reserved for the metadata";
    }
    return NULL;
}

static int st_parse_dtype(const char *s, size_t len, zs__st_dtype *out) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        if (strlen(st_dtypes[d].name) == len && memcmp(st_dtypes[d].name, s, len) == 0) {
            *out = (zs__st_dtype)d;
            return 1;
        }
    }
    return 0;
}

/* Bytes of a tensor of this shape and dtype; 0 in *ok on overflow. */
static uint64_t st_shape_bytes(const int64_t *shape, int ndim, zs__st_dtype dtype, int *ok) {
    uint64_t n = zs__st_dtype_size(dtype);
    *ok = 1;
    for (int d = 0; d < ndim; d++) {
        uint64_t extent = (uint64_t)shape[d];
        if (extent != 0 && n > UINT64_MAX / extent) {
            *ok = 0;
            return 0;
        }
        n *= extent;
    }
    return n;
}

/* ================================================================ low-level I/O */

static zs_status st_pread_all(int fd, void *dst, size_t bytes, uint64_t offset, const char *path) {
    unsigned char *p = dst;
    size_t done = 0;
    if (offset > (uint64_t)INT64_MAX || bytes > (uint64_t)INT64_MAX - offset)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: read at byte %llu is out of range", path,
                        (unsigned long long)offset);
    while (done < bytes) {
        size_t want = bytes - done;
        if (want > (size_t)SSIZE_MAX) want = (size_t)SSIZE_MAX;
        ssize_t n = pread(fd, p + done, want, (off_t)(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return zs__fail(ZS_ERR_IO, "%s: read failed at byte %llu: %s", path,
                            (unsigned long long)(offset + done), strerror(errno));
        }
        if (n == 0)
            return zs__fail(ZS_ERR_IO,
                            "%s: unexpected end of file at byte %llu (did the file shrink "
                            "after it was opened?)",
                            path, (unsigned long long)(offset + done));
        done += (size_t)n;
    }
    return ZS_OK;
}

/* ================================================================ writer */

struct zs__st_stream {
    char *path;             /* shown in messages */
    int fd;
    /* The file is dir_fd/name, which is what a failed stream unlinks: for
     * zs__st_stream_open, AT_FDCWD and the path itself; for
     * zs__st_stream_open_at, a duplicate of the caller's directory
     * descriptor (owned by the stream, so the caller may close its own). */
    int dir_fd;
    char *name;
    XXH3_state_t *hash;     /* of every byte of the file, in order */
    uint64_t written;       /* bytes handed to the file so far (header included) */
    uint64_t data_declared; /* bytes of the data section the header announces */
    uint64_t data_appended;
    unsigned char *buffer;  /* small appends are gathered here */
    size_t buffered;
    int failed;
    int opened;             /* the file exists because this stream created it */
};

/* Adds value under key, taking ownership of it in every case (json-c leaves
 * the value with the caller when the insertion itself fails). */
static int st_add_member(struct json_object *obj, const char *key, struct json_object *value) {
    if (!value) return 0;
    if (json_object_object_add(obj, key, value) != 0) {
        json_object_put(value);
        return 0;
    }
    return 1;
}

static int st_add_int(struct json_object *array, int64_t v) {
    struct json_object *x = json_object_new_int64(v);
    if (!x) return 0;
    if (json_object_array_add(array, x) != 0) {
        json_object_put(x);
        return 0;
    }
    return 1;
}

/* {"dtype": .., "shape": [..], "data_offsets": [begin, end]}, or NULL when
 * out of memory. */
static struct json_object *st_make_entry(const zs__st_tensor_spec *spec, uint64_t begin) {
    struct json_object *entry = json_object_new_object();
    struct json_object *shape = json_object_new_array();
    struct json_object *offsets = json_object_new_array();
    int ok = entry && shape && offsets;
    for (int d = 0; ok && d < spec->ndim; d++) ok = st_add_int(shape, spec->shape[d]);
    ok = ok && st_add_int(offsets, (int64_t)begin) &&
         st_add_int(offsets, (int64_t)(begin + spec->bytes));
    if (!ok) {
        json_object_put(entry);
        json_object_put(shape);
        json_object_put(offsets);
        return NULL;
    }
    ok = st_add_member(entry, "dtype", json_object_new_string(zs__st_dtype_name(spec->dtype)));
    ok = st_add_member(entry, "shape", shape) && ok;
    ok = st_add_member(entry, "data_offsets", offsets) && ok;
    if (!ok) {
        json_object_put(entry);
        return NULL;
    }
    return entry;
}

/* Validates the specs and builds the padded header (without the 8-byte length). */
static zs_status st_build_header(const char *path, const zs__st_tensor_spec *tensors,
                                 int tensor_count, const zs__st_meta *meta, int meta_count,
                                 char **header_out, size_t *header_bytes, uint64_t *data_bytes) {
    zs_status status = ZS_OK;
    struct json_object *root = NULL;
    *header_out = NULL;
    if (tensor_count < 0 || tensor_count > ZS_ST_MAX_TENSORS || (tensor_count > 0 && !tensors))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor count %d is out of range [0, %d]",
                        path, tensor_count, ZS_ST_MAX_TENSORS);
    if (meta_count < 0 || (meta_count > 0 && !meta))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: invalid metadata count %d", path, meta_count);
    root = json_object_new_object();
    if (!root) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot build the header", path);

    if (meta_count > 0) {
        struct json_object *m = json_object_new_object();
        if (!st_add_member(root, ST_METADATA_KEY, m)) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot build the header", path);
            goto fail;
        }
        for (int k = 0; k < meta_count; k++) {
            const char *key = meta[k].key, *value = meta[k].value;
            const char *why = key ? st_name_problem(key, strlen(key), 0) : "is NULL";
            if (why) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: metadata key %d (\"%s\") %s", path,
                                  k, key ? key : "", why);
                goto fail;
            }
            if (!value || strlen(value) > ZS_ST_META_VALUE_MAX ||
                !zs__json_utf8_valid(value, strlen(value))) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: metadata value of \"%s\" is NULL, longer than %d bytes or "
                                  "not UTF-8",
                                  path, key, ZS_ST_META_VALUE_MAX);
                goto fail;
            }
            if (json_object_object_get_ex(m, key, NULL)) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: duplicate metadata key \"%s\"",
                                  path, key);
                goto fail;
            }
            if (!st_add_member(m, key, json_object_new_string(value))) {
                status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot build the header", path);
                goto fail;
            }
        }
    }

    uint64_t offset = 0;
    for (int t = 0; t < tensor_count; t++) {
        const zs__st_tensor_spec *spec = &tensors[t];
        const char *why = spec->name ? st_name_problem(spec->name, strlen(spec->name), 1)
                                     : "is NULL";
        if (why) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor %d's name \"%s\" %s", path, t,
                              spec->name ? spec->name : "", why);
            goto fail;
        }
        if (zs__st_dtype_size(spec->dtype) == 0 || spec->ndim < 0 ||
            spec->ndim > ZS_ST_MAX_DIMS) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensor \"%s\" has dtype %d and %d dimensions (want a known "
                              "dtype and 0..%d dimensions)",
                              path, spec->name, (int)spec->dtype, spec->ndim, ZS_ST_MAX_DIMS);
            goto fail;
        }
        for (int d = 0; d < spec->ndim; d++) {
            if (spec->shape[d] < 0) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: tensor \"%s\" has a negative extent %lld in dimension %d",
                                  path, spec->name, (long long)spec->shape[d], d);
                goto fail;
            }
        }
        int ok;
        uint64_t want = st_shape_bytes(spec->shape, spec->ndim, spec->dtype, &ok);
        if (!ok || want != spec->bytes) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensor \"%s\" declares %llu bytes but its shape and dtype "
                              "need %s%llu",
                              path, spec->name, (unsigned long long)spec->bytes,
                              ok ? "" : "more than ", (unsigned long long)want);
            goto fail;
        }
        if (spec->bytes > (uint64_t)INT64_MAX - offset) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the data section exceeds 2^63 bytes",
                              path);
            goto fail;
        }
        if (json_object_object_get_ex(root, spec->name, NULL)) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: duplicate tensor name \"%s\"", path,
                              spec->name);
            goto fail;
        }
        struct json_object *entry = st_make_entry(spec, offset);
        if (!st_add_member(root, spec->name, entry)) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot build the header", path);
            goto fail;
        }
        offset += spec->bytes;
    }

    size_t json_len = 0;
    const char *json = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &json_len);
    if (!json) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: out of host memory for the JSON header", path);
        goto fail;
    }
    /* Pad so the data section starts 8-byte aligned (8 + padded is a multiple of 8). */
    size_t padded = (json_len + 7) & ~(size_t)7;
    if (padded > ZS_ST_HEADER_MAX) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: the header would take %zu bytes, more than the %u readers accept "
                          "(too many tensors or too much metadata)",
                          path, padded, ZS_ST_HEADER_MAX);
        goto fail;
    }
    char *header = zs__malloc(padded);
    if (!header) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the header", path);
        goto fail;
    }
    memcpy(header, json, json_len);
    memset(header + json_len, ' ', padded - json_len);
    *header_out = header;
    *header_bytes = padded;
    *data_bytes = offset;
fail:
    json_object_put(root);
    return status;
}

static zs_status st_stream_flush(zs__st_stream *s) {
    if (s->buffered == 0) return ZS_OK;
    zs_status status = zs__fs_write_all(s->fd, s->buffer, s->buffered, s->path,
                                    s->written - s->buffered);
    s->buffered = 0;
    return status;
}

/* Hashes and writes (through the gathering buffer) bytes of the file. */
static zs_status st_stream_put(zs__st_stream *s, const void *data, uint64_t bytes) {
    if (bytes == 0) return ZS_OK;
    if (XXH3_64bits_update(s->hash, data, (size_t)bytes) != XXH_OK)
        return zs__fail(ZS_ERR_INTERNAL, "%s: hashing failed", s->path);
    if (bytes >= ST_IO_CHUNK) {
        ZS_CHECK(st_stream_flush(s));
        zs_status status = zs__fs_write_all(s->fd, data, (size_t)bytes, s->path, s->written);
        s->written += bytes;
        return status;
    }
    if (s->buffered + bytes > ST_IO_CHUNK) ZS_CHECK(st_stream_flush(s));
    memcpy(s->buffer + s->buffered, data, (size_t)bytes);
    s->buffered += (size_t)bytes;
    s->written += bytes;
    return ZS_OK;
}

static void st_stream_free(zs__st_stream *s, int unlink_file) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    /* Only a file this stream created is unlinked: an entry that made an
     * exclusive create fail belongs to someone else and stays. */
    if (unlink_file && s->name && s->opened) unlinkat(s->dir_fd, s->name, 0);
    if (s->dir_fd >= 0) close(s->dir_fd);
    XXH3_freeState(s->hash);
    free(s->buffer);
    free(s->name);
    free(s->path);
    free(s);
}

/* The one implementation behind zs__st_stream_open and zs__st_stream_open_at.
 * The file is dir_fd/name; `path` is what messages show. With `exclusive`
 * (dir_path set) it is created new through zs__fs_create_at
 * (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0644), so nothing already at the
 * name (a planted symlink or file) is followed, truncated or reused; without
 * it (dir_fd AT_FDCWD, name the path) it is created or truncated, as the
 * path-based callers that write a temporary name of their own expect. The
 * specs are checked before anything is created. */
static zs_status st_stream_open_impl(int dir_fd, const char *dir_path, const char *name,
                                     const char *path, int exclusive,
                                     const zs__st_tensor_spec *tensors, int tensor_count,
                                     const zs__st_meta *meta, int meta_count,
                                     zs__st_stream **out) {
    zs_status status;
    char *header = NULL;
    size_t header_bytes = 0;
    uint64_t data_bytes = 0;
    *out = NULL;
    ZS_CHECK(st_build_header(path, tensors, tensor_count, meta, meta_count, &header,
                             &header_bytes, &data_bytes));

    zs__st_stream *s = zs__calloc(1, sizeof *s);
    if (!s) {
        free(header);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a writer", path);
    }
    s->fd = -1;
    s->dir_fd = AT_FDCWD;
    s->path = zs__strdup(path);
    s->name = zs__strdup(name);
    s->hash = XXH3_createState();
    s->buffer = zs__malloc(ST_IO_CHUNK);
    if (!s->path || !s->name || !s->hash || !s->buffer || XXH3_64bits_reset(s->hash) != XXH_OK) {
        free(header);
        st_stream_free(s, 0);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a writer", path);
    }
    s->data_declared = data_bytes;
    if (exclusive) {
        s->dir_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
        if (s->dir_fd < 0) {
            status = zs__fail(ZS_ERR_IO, "%s: cannot duplicate the descriptor of %s: %s", path,
                              dir_path, strerror(errno));
            free(header);
            st_stream_free(s, 0);
            return status;
        }
        status = zs__fs_create_at(dir_fd, dir_path, name, &s->fd);
    } else {
        s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        status = s->fd < 0 ? zs__fail(ZS_ERR_IO, "%s: cannot create: %s", path, strerror(errno))
                           : ZS_OK;
    }
    if (status != ZS_OK) {
        free(header);
        st_stream_free(s, 0);
        zs__error_breadcrumb(__FILE__, __LINE__);
        return status;
    }
    s->opened = 1;
    unsigned char length[8];
    for (int k = 0; k < 8; k++) length[k] = (unsigned char)((uint64_t)header_bytes >> (8 * k));
    status = st_stream_put(s, length, sizeof length);
    if (status == ZS_OK) status = st_stream_put(s, header, header_bytes);
    free(header);
    if (status != ZS_OK) {
        st_stream_free(s, 1);
        return status;
    }
    *out = s;
    return ZS_OK;
}

zs_status zs__st_stream_open(const char *path, const zs__st_tensor_spec *tensors, int tensor_count,
                             const zs__st_meta *meta, int meta_count, zs__st_stream **out) {
    *out = NULL;
    if (!path || !*path) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "safetensors writer: empty path");
    ZS_CHECK(st_stream_open_impl(AT_FDCWD, NULL, path, path, 0, tensors, tensor_count, meta,
                                 meta_count, out));
    return ZS_OK;
}

/* "dir_path/name" in a new string for messages, or NULL when out of memory. */
static char *st_join(const char *dir_path, const char *name) {
    size_t bytes = strlen(dir_path) + 1 + strlen(name) + 1;
    char *out = zs__malloc(bytes);
    if (out) snprintf(out, bytes, "%s/%s", dir_path, name);
    return out;
}

zs_status zs__st_stream_open_at(int dir_fd, const char *dir_path, const char *name,
                                const zs__st_tensor_spec *tensors, int tensor_count,
                                const zs__st_meta *meta, int meta_count, zs__st_stream **out) {
    *out = NULL;
    if (!dir_path) dir_path = "(directory)";
    /* The name is checked again by zs__fs_create_at; here it only has to
     * make a message. */
    if (!name)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: safetensors writer: NULL name", dir_path);
    char *path = st_join(dir_path, name);
    if (!path)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s/%s: cannot allocate a writer", dir_path, name);
    zs_status status = st_stream_open_impl(dir_fd, dir_path, name, path, 1, tensors, tensor_count,
                                           meta, meta_count, out);
    free(path);
    return status;
}

zs_status zs__st_stream_append(zs__st_stream *s, const void *data, uint64_t bytes) {
    if (!s) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "safetensors writer: NULL stream");
    if (s->failed)
        return zs__fail(ZS_ERR_STATE, "%s: the writer already failed; abort it", s->path);
    if (bytes > s->data_declared - s->data_appended) {
        s->failed = 1;
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: appending %llu bytes would exceed the %llu data bytes the header "
                        "declares (%llu already appended)",
                        s->path, (unsigned long long)bytes, (unsigned long long)s->data_declared,
                        (unsigned long long)s->data_appended);
    }
    if (bytes > 0 && !data) {
        s->failed = 1;
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: NULL data for %llu bytes", s->path,
                        (unsigned long long)bytes);
    }
    zs_status status = st_stream_put(s, data, bytes);
    if (status != ZS_OK) {
        s->failed = 1;
        return status;
    }
    s->data_appended += bytes;
    return ZS_OK;
}

zs_status zs__st_stream_close(zs__st_stream *s, uint64_t *file_hash, uint64_t *file_bytes) {
    if (!s) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "safetensors writer: NULL stream");
    zs_status status = ZS_OK;
    if (s->failed) {
        status = zs__fail(ZS_ERR_STATE, "%s: the writer failed earlier; the file was removed",
                          s->path);
        goto fail;
    }
    if (s->data_appended != s->data_declared) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: %llu of the %llu declared data bytes were appended; the file was "
                          "removed",
                          s->path, (unsigned long long)s->data_appended,
                          (unsigned long long)s->data_declared);
        goto fail;
    }
    ZS_CHECK_GOTO(st_stream_flush(s), status, fail);
    if (fsync(s->fd) != 0) {
        status = zs__fail(ZS_ERR_IO, "%s: fsync failed: %s", s->path, strerror(errno));
        goto fail;
    }
    int fd = s->fd;
    s->fd = -1;
    if (close(fd) != 0) {
        status = zs__fail(ZS_ERR_IO, "%s: close failed: %s", s->path, strerror(errno));
        goto fail;
    }
    if (file_hash) *file_hash = XXH3_64bits_digest(s->hash);
    if (file_bytes) *file_bytes = s->written;
    st_stream_free(s, 0);
    return ZS_OK;
fail:
    st_stream_free(s, 1);
    return status;
}

void zs__st_stream_abort(zs__st_stream *s) { st_stream_free(s, 1); }

/* Appends every tensor of an open stream and closes it: the one write loop
 * behind zs__st_write and zs__st_write_at. The stream is consumed. */
static zs_status st_write_tensors(zs__st_stream *s, const zs__st_tensor_spec *tensors,
                                  int tensor_count, zs__st_progress_fn progress,
                                  void *progress_ctx, uint64_t *tensor_hashes,
                                  uint64_t *file_hash, uint64_t *file_bytes) {
    void *piece = NULL; /* for tensors given by a read function */
    for (int t = 0; t < tensor_count; t++) {
        zs_status status = ZS_OK;
        if (!tensors[t].data && tensors[t].read && tensors[t].bytes > 0) {
            /* Piece by piece through one bounded buffer, hashed as it goes. */
            XXH3_state_t *hash = tensor_hashes ? XXH3_createState() : NULL;
            if (!piece) piece = zs__malloc((size_t)ZS_ST_PIECE_BYTES);
            if (!piece || (tensor_hashes && (!hash || XXH3_64bits_reset(hash) != XXH_OK)))
                status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "writing '%s': out of host memory",
                                  s->path);
            for (uint64_t at = 0; status == ZS_OK && at < tensors[t].bytes;) {
                const uint64_t n = tensors[t].bytes - at < ZS_ST_PIECE_BYTES
                                       ? tensors[t].bytes - at
                                       : ZS_ST_PIECE_BYTES;
                status = tensors[t].read(tensors[t].read_ctx, at, piece, n);
                if (status == ZS_OK) status = zs__st_stream_append(s, piece, n);
                if (status == ZS_OK && hash) XXH3_64bits_update(hash, piece, (size_t)n);
                at += n;
            }
            if (status == ZS_OK && hash) tensor_hashes[t] = XXH3_64bits_digest(hash);
            XXH3_freeState(hash);
        } else {
            status = zs__st_stream_append(s, tensors[t].data, tensors[t].bytes);
            if (status == ZS_OK && tensor_hashes)
                tensor_hashes[t] = XXH3_64bits(tensors[t].bytes ? tensors[t].data : "",
                                               (size_t)tensors[t].bytes);
        }
        if (status == ZS_OK && progress) {
            /* The callback may stop the process: what it reports must be on disk. */
            status = st_stream_flush(s);
            if (status != ZS_OK) s->failed = 1;
        }
        if (status != ZS_OK) {
            free(piece);
            zs__st_stream_abort(s);
            zs__error_breadcrumb(__FILE__, __LINE__);
            return status;
        }
        if (progress) progress(progress_ctx, t);
    }
    free(piece);
    ZS_CHECK(zs__st_stream_close(s, file_hash, file_bytes));
    return ZS_OK;
}

zs_status zs__st_write(const char *path, const zs__st_tensor_spec *tensors, int tensor_count,
                       const zs__st_meta *meta, int meta_count, zs__st_progress_fn progress,
                       void *progress_ctx, uint64_t *tensor_hashes, uint64_t *file_hash,
                       uint64_t *file_bytes) {
    zs__st_stream *s = NULL;
    ZS_CHECK(zs__st_stream_open(path, tensors, tensor_count, meta, meta_count, &s));
    ZS_CHECK(st_write_tensors(s, tensors, tensor_count, progress, progress_ctx, tensor_hashes,
                              file_hash, file_bytes));
    return ZS_OK;
}

zs_status zs__st_write_at(int dir_fd, const char *dir_path, const char *name,
                          const zs__st_tensor_spec *tensors, int tensor_count,
                          const zs__st_meta *meta, int meta_count, zs__st_progress_fn progress,
                          void *progress_ctx, uint64_t *tensor_hashes, uint64_t *file_hash,
                          uint64_t *file_bytes) {
    zs__st_stream *s = NULL;
    ZS_CHECK(zs__st_stream_open_at(dir_fd, dir_path, name, tensors, tensor_count, meta,
                                   meta_count, &s));
    ZS_CHECK(st_write_tensors(s, tensors, tensor_count, progress, progress_ctx, tensor_hashes,
                              file_hash, file_bytes));
    return ZS_OK;
}

/* ================================================================ reader */

typedef struct st_meta_item {
    char *key;
    char *value;
} st_meta_item;

struct zs__st_file {
    char *path;
    int fd;
    uint64_t file_bytes;
    uint64_t data_start; /* 8 + header length */
    /* What this open accepts (zs__st_limits), resolved: the format's own
     * bounds, or the caller's tighter ones. */
    uint64_t max_header_bytes;
    int max_tensors;
    const char *expected; /* the caller's words for the bounds, or NULL; the caller's string,
                             so cleared when the open returns */
    const char *dtypes;   /* the caller's words for the dtypes it reads, or NULL; cleared too */
    int name_tensors;
    /* zs__st_limits.report_holes: the first range of data bytes no tensor
     * covers, kept instead of failing the open (trailing: it ends the data
     * section). */
    int report_holes, has_hole, hole_trailing;
    uint64_t hole_begin, hole_end, hole_covered;
    int count;
    zs__st_entry *entries;          /* header order */
    const zs__st_entry **by_name;   /* sorted by name, for zs__st_find */
    int meta_count;
    st_meta_item *meta;             /* sorted by key */
};

const char *zs__st_path(const zs__st_file *f) { return f->path; }
uint64_t zs__st_file_bytes(const zs__st_file *f) { return f->file_bytes; }
int zs__st_count(const zs__st_file *f) { return f->count; }

const zs__st_entry *zs__st_entry_at(const zs__st_file *f, int index) {
    if (index < 0 || index >= f->count) return NULL;
    return &f->entries[index];
}

static int st_cmp_entry_name(const void *a, const void *b) {
    const zs__st_entry *x = *(const zs__st_entry *const *)a, *y = *(const zs__st_entry *const *)b;
    return strcmp(x->name, y->name);
}

static int st_cmp_entry_begin(const void *a, const void *b) {
    const zs__st_entry *x = *(const zs__st_entry *const *)a, *y = *(const zs__st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int st_cmp_meta(const void *a, const void *b) {
    return strcmp(((const st_meta_item *)a)->key, ((const st_meta_item *)b)->key);
}

const zs__st_entry *zs__st_find(const zs__st_file *f, const char *name) {
    zs__st_entry probe;
    const zs__st_entry *key = &probe;
    if (!name || strlen(name) > ZS_ST_NAME_MAX || f->count == 0) return NULL;
    strcpy(probe.name, name);
    const zs__st_entry **hit = bsearch(&key, f->by_name, (size_t)f->count, sizeof *f->by_name,
                                       st_cmp_entry_name);
    return hit ? *hit : NULL;
}

const char *zs__st_meta_get(const zs__st_file *f, const char *key) {
    if (!key || f->meta_count == 0) return NULL;
    st_meta_item probe = {(char *)key, NULL};
    const st_meta_item *hit = bsearch(&probe, f->meta, (size_t)f->meta_count, sizeof *f->meta,
                                      st_cmp_meta);
    return hit ? hit->value : NULL;
}

void zs__st_close(zs__st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int k = 0; k < f->meta_count; k++) {
        free(f->meta[k].key);
        free(f->meta[k].value);
    }
    free(f->meta);
    free(f->by_name);
    free(f->entries);
    free(f->path);
    free(f);
}

/* A non-negative JSON integer (the lexer guaranteed it fits in int64). */
static int st_json_nonneg(struct json_object *v, int64_t *out) {
    if (!json_object_is_type(v, json_type_int)) return 0;
    int64_t x = json_object_get_int64(v);
    if (x < 0) return 0;
    *out = x;
    return 1;
}

static zs_status st_parse_metadata(zs__st_file *f, struct json_object *m) {
    const char *path = f->path;
    if (!json_object_is_type(m, json_type_object))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: __metadata__ is not an object of strings",
                        path);
    int n = json_object_object_length(m);
    if (n == 0) return ZS_OK;
    f->meta = zs__calloc((size_t)n, sizeof *f->meta);
    if (!f->meta) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the metadata", path);
    /* Messages name entries by position, never by their text: this file may
     * not be a checkpoint at all, and its bytes are not ours to print. */
    int index = 0;
    json_object_object_foreach(m, key, value) {
        const char *why = st_name_problem(key, strlen(key), 0);
        if (why)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: __metadata__ entry %d: the key %s",
                            path, index, why);
        if (!json_object_is_type(value, json_type_string))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: __metadata__ entry %d: the value is not a string", path, index);
        const char *text = json_object_get_string(value);
        size_t len = (size_t)json_object_get_string_len(value);
        if (len > ZS_ST_META_VALUE_MAX || strlen(text) != len)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: __metadata__ entry %d: the value is longer than %d bytes or "
                            "holds a NUL byte",
                            path, index, ZS_ST_META_VALUE_MAX);
        st_meta_item *item = &f->meta[f->meta_count];
        item->key = zs__strdup(key);
        item->value = zs__strdup(text);
        f->meta_count++; /* counted before checking, so close frees a half-made item */
        if (!item->key || !item->value)
            return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate the metadata", path);
        index++;
    }
    qsort(f->meta, (size_t)f->meta_count, sizeof *f->meta, st_cmp_meta);
    return ZS_OK;
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF) and its code point, or 0. */
static size_t st_utf8_sequence(const unsigned char *s, unsigned *code) {
    const unsigned c = s[0];
    size_t n = 0;
    unsigned min = 0;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
    if (n == 0) return 0;
    unsigned v = c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *code = v;
    return n;
}

/* Code points a terminal obeys rather than shows: the C1 controls, and the
 * bidirectional embeddings, overrides and isolates that reorder what
 * follows them (the "Trojan Source" characters). */
static int st_unsafe_code_point(unsigned code) {
    return (code >= 0x80 && code <= 0x9F) || (code >= 0x202A && code <= 0x202E) ||
           (code >= 0x2066 && code <= 0x2069);
}

void zs__st_printable(const char *text, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (cap < 8) { /* no room for an escape and the "..." of a cut */
        if (cap > 0) out[0] = '\0';
        return;
    }
    for (const unsigned char *s = (const unsigned char *)text; *s;) {
        /* What this character becomes: its bytes, \xNN or \u{NNNN}. */
        char form[16];
        size_t len = 0, used = 1;
        unsigned code = 0;
        size_t seq = *s >= 0x80 ? st_utf8_sequence(s, &code) : 0;
        if (*s < 0x20 || *s == 0x7f || *s == '"' || *s == '\\' || (*s >= 0x80 && seq == 0)) {
            form[len++] = '\\';
            form[len++] = 'x';
            form[len++] = hex[*s >> 4];
            form[len++] = hex[*s & 15];
        } else if (seq > 0 && st_unsafe_code_point(code)) {
            len = (size_t)snprintf(form, sizeof form, "\\u{%x}", code);
            used = seq;
        } else {
            used = seq > 0 ? seq : 1;
            memcpy(form, s, used);
            len = used;
        }
        /* Room for this form and the "..." of a cut text. */
        if (o + len + 3 + 1 > cap) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, form, len);
        o += len;
        s += used;
    }
    out[o] = '\0';
}

/* How messages name header tensor `index`: by its position always (the
 * bytes of a checkpoint's file are not ours to print), followed by its
 * name, escaped, when the caller opened a file whose names are public
 * (zs__st_limits.name_tensors) and the name passed its checks. */
static const char *st_shown_name(const zs__st_file *f, const char *name, char *buf, size_t cap) {
    buf[0] = '\0';
    if (f->name_tensors && name) {
        char shown[ST_SHOWN_NAME_BYTES];
        zs__st_printable(name, shown, sizeof shown);
        snprintf(buf, cap, " (\"%s\")", shown);
    }
    return buf;
}

static const char *st_label(const zs__st_file *f, int index, const char *name, char *buf,
                            size_t cap) {
    char shown[ST_SHOWN_NAME_BYTES + 8];
    snprintf(buf, cap, "header tensor %d%s", index, st_shown_name(f, name, shown, sizeof shown));
    return buf;
}

/* Messages name the entry by its position among the header's tensors
 * (`index`, counting from 0 in file order), and by its name only as
 * st_label allows. */
static zs_status st_parse_entry(const zs__st_file *f, int index, const char *name,
                                struct json_object *v, zs__st_entry *e) {
    const char *path = f->path;
    char label[ST_LABEL_BYTES];
    const char *why = st_name_problem(name, strlen(name), 1);
    if (why)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: header tensor %d: the name %s", path, index,
                        why);
    memcpy(e->name, name, strlen(name) + 1);
    st_label(f, index, name, label, sizeof label);
    if (!json_object_is_type(v, json_type_object))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s is not an object", path, label);
    struct json_object *dtype = NULL, *shape = NULL, *offsets = NULL;
    if (json_object_object_length(v) != 3 || !json_object_object_get_ex(v, "dtype", &dtype) ||
        !json_object_object_get_ex(v, "shape", &shape) ||
        !json_object_object_get_ex(v, "data_offsets", &offsets))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s must have exactly the fields dtype, shape and data_offsets", path,
                        label);
    if (!json_object_is_type(dtype, json_type_string) ||
        !st_parse_dtype(json_object_get_string(dtype), (size_t)json_object_get_string_len(dtype),
                        &e->dtype)) {
        /* The dtype's text is shown only where names are: it is the file's. */
        char shown[48] = "";
        if (f->name_tensors && json_object_is_type(dtype, json_type_string)) {
            char text[24];
            zs__st_printable(json_object_get_string(dtype), text, sizeof text);
            snprintf(shown, sizeof shown, " %s,", text);
        }
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s has a dtype%s outside %s", path, label,
                        shown, f->dtypes ? f->dtypes : "the allowed F32, F16, BF16, U8");
    }
    if (!json_object_is_type(shape, json_type_array) ||
        json_object_array_length(shape) > ZS_ST_MAX_DIMS)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s shape must be an array of at most %d dimensions", path, label,
                        ZS_ST_MAX_DIMS);
    e->ndim = (int)json_object_array_length(shape);
    for (int d = 0; d < e->ndim; d++) {
        if (!st_json_nonneg(json_object_array_get_idx(shape, (size_t)d), &e->shape[d]))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: %s shape[%d] is not a non-negative integer", path, label, d);
    }
    int64_t begin, end;
    if (!json_object_is_type(offsets, json_type_array) || json_object_array_length(offsets) != 2 ||
        !st_json_nonneg(json_object_array_get_idx(offsets, 0), &begin) ||
        !st_json_nonneg(json_object_array_get_idx(offsets, 1), &end) || begin > end)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s data_offsets must be [begin, end] with 0 <= begin <= end", path,
                        label);
    e->begin = (uint64_t)begin;
    e->end = (uint64_t)end;
    int ok;
    uint64_t want = st_shape_bytes(e->shape, e->ndim, e->dtype, &ok);
    if (!ok)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s shape overflows 64 bits", path, label);
    if (want != e->end - e->begin)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %s spans %llu bytes but its shape and dtype need %llu", path, label,
                        (unsigned long long)(e->end - e->begin), (unsigned long long)want);
    return ZS_OK;
}

/* The failure of bytes [begin, end) of the data section that no tensor
 * covers: a gap before the next tensor, or trailing bytes after the last
 * (then `covered` is where the tensors end). */
static zs_status st_hole_failure(const zs__st_file *f, int trailing, uint64_t begin, uint64_t end,
                                 uint64_t covered) {
    if (trailing)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: trailing bytes: the tensors cover %llu of the %llu bytes of the "
                        "data section",
                        f->path, (unsigned long long)covered, (unsigned long long)end);
    return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                    "%s: gap in the data section: bytes %llu..%llu belong to no tensor", f->path,
                    (unsigned long long)begin, (unsigned long long)end);
}

/* Bytes [begin, end) belong to no tensor: the open fails, or, with
 * report_holes, the first such range is kept for the caller. */
static zs_status st_hole(zs__st_file *f, int trailing, uint64_t begin, uint64_t end,
                         uint64_t covered) {
    if (!f->report_holes) return st_hole_failure(f, trailing, begin, end, covered);
    if (!f->has_hole) {
        f->has_hole = 1;
        f->hole_trailing = trailing;
        f->hole_begin = begin;
        f->hole_end = end;
        f->hole_covered = covered;
    }
    return ZS_OK;
}

int zs__st_hole(const zs__st_file *f, uint64_t *begin, uint64_t *end) {
    if (!f->has_hole) return 0;
    *begin = f->hole_begin;
    *end = f->hole_end;
    return 1;
}

zs_status zs__st_check_holes(const zs__st_file *f) {
    if (!f->has_hole) return ZS_OK;
    return st_hole_failure(f, f->hole_trailing, f->hole_begin, f->hole_end, f->hole_covered);
}

/* The tensors sorted by offset must tile [0, data_bytes) exactly (bytes no
 * tensor covers are kept instead with report_holes). */
static zs_status st_check_layout(zs__st_file *f, uint64_t data_bytes) {
    const char *path = f->path;
    const zs__st_entry **order = NULL;
    zs_status status = ZS_OK;
    char label[ST_LABEL_BYTES], other[ST_LABEL_BYTES];
    for (int k = 0; k < f->count; k++) {
        if (f->entries[k].end > data_bytes)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: %s ends at data byte %llu, beyond the %llu-byte data section "
                            "(the file is truncated, or its header claims more than it holds)",
                            path, st_label(f, k, f->entries[k].name, label, sizeof label),
                            (unsigned long long)f->entries[k].end,
                            (unsigned long long)data_bytes);
    }
    if (f->count > 0) {
        order = zs__malloc((size_t)f->count * sizeof *order);
        if (!order) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate an index", path);
        for (int k = 0; k < f->count; k++) order[k] = &f->entries[k];
        qsort(order, (size_t)f->count, sizeof *order, st_cmp_entry_begin);
    }
    uint64_t covered = 0;
    int previous = -1;
    for (int k = 0; k < f->count; k++) {
        const zs__st_entry *e = order[k];
        const int index = (int)(e - f->entries);
        if (e->begin < covered) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: header tensors %d%s and %d%s overlap (data bytes %llu..%llu)",
                              path, previous,
                              st_shown_name(f, previous >= 0 ? f->entries[previous].name : NULL,
                                            other, sizeof other),
                              index, st_shown_name(f, e->name, label, sizeof label),
                              (unsigned long long)e->begin, (unsigned long long)covered);
            goto done;
        }
        if (e->begin > covered) {
            status = st_hole(f, 0, covered, e->begin, covered);
            if (status != ZS_OK) goto done;
        }
        if (e->end > e->begin) previous = index;
        covered = e->end;
    }
    if (covered != data_bytes) status = st_hole(f, 1, covered, data_bytes, covered);
done:
    free(order);
    return status;
}

static zs_status st_parse_header(zs__st_file *f, const char *text, size_t bytes) {
    const char *path = f->path;
    struct json_object *root = NULL;
    zs_status status = ZS_OK;
    /* Depth 3: the header object, an entry or __metadata__, shape/data_offsets.
     * The lexer stops at the first top-level member beyond the tensors
     * allowed (plus __metadata__), before json-c builds anything. */
    const zs__json_rules rules = {3, ZS_ST_MAX_DIMS, 1};
    int over_limit = 0;
    zs_status parsed = zs__json_parse_strict_bounded(text, bytes, &rules,
                                                     (int64_t)f->max_tensors + 1, path, "header",
                                                     &over_limit, &root);
    if (over_limit && f->expected)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: the header lists more than %d tensors, the bound for %s; the "
                        "file is not the one expected",
                        path, f->max_tensors, f->expected);
    if (over_limit)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the header lists more than %d tensors, the "
                        "limit of this reader", path, f->max_tensors);
    ZS_CHECK(parsed);

    struct json_object *meta = NULL;
    int has_meta = json_object_object_get_ex(root, ST_METADATA_KEY, &meta);
    int64_t count = (int64_t)json_object_object_length(root) - (has_meta ? 1 : 0);
    if (count > f->max_tensors) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %lld tensors exceed the limit of %d", path,
                          (long long)count, f->max_tensors);
        goto done;
    }
    if (has_meta) ZS_CHECK_GOTO(st_parse_metadata(f, meta), status, done);
    if (count > 0) {
        f->entries = zs__calloc((size_t)count, sizeof *f->entries);
        f->by_name = zs__malloc((size_t)count * sizeof *f->by_name);
        if (!f->entries || !f->by_name) {
            status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %lld entries", path,
                              (long long)count);
            goto done;
        }
    }
    json_object_object_foreach(root, name, value) {
        if (strcmp(name, ST_METADATA_KEY) == 0) continue;
        ZS_CHECK_GOTO(st_parse_entry(f, f->count, name, value, &f->entries[f->count]), status,
                      done);
        f->by_name[f->count] = &f->entries[f->count];
        f->count++;
    }
    if (f->count > 0) {
        qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, st_cmp_entry_name);
        /* The JSON check already refuses duplicate keys; this keeps zs__st_find
         * unambiguous even if that check changes. */
        for (int k = 1; k < f->count; k++) {
            if (strcmp(f->by_name[k - 1]->name, f->by_name[k]->name) == 0) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: header tensors %d and %d have the same name", path,
                                  (int)(f->by_name[k - 1] - f->entries),
                                  (int)(f->by_name[k] - f->entries));
                goto done;
            }
        }
    }
done:
    json_object_put(root);
    return status;
}

/* Validates the file open at f->fd (regular, checked by the caller's open):
 * everything after the open is shared by zs__st_open and zs__st_open_at. */
static zs_status st_open_fd(zs__st_file *f) {
    const char *path = f->path;
    zs_status status = ZS_OK;
    char *header = NULL;
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return zs__fail(ZS_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a regular file", path);
    f->file_bytes = (uint64_t)st.st_size;
    if (f->file_bytes < 8)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %llu bytes is too short for a safetensors file (its header length "
                        "alone takes 8)",
                        path, (unsigned long long)f->file_bytes);
    unsigned char length_bytes[8];
    ZS_CHECK(st_pread_all(f->fd, length_bytes, sizeof length_bytes, 0, path));
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | length_bytes[k];
    /* Bounded and checked against the file size before anything is
     * allocated. The length read is not printed: for a file that is not
     * safetensors at all, those 8 bytes are its first 8 bytes of content.
     * A caller's tighter bound has its own message, for a length the file
     * could hold: it says what the bound was derived from. */
    if (f->expected && n > f->max_header_bytes && n <= f->file_bytes - 8)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: the header is longer than the %llu bytes allowed for %s; the "
                        "file claims far more tensors than expected, or is not the one expected",
                        path, (unsigned long long)f->max_header_bytes, f->expected);
    if (n < 2 || n > f->max_header_bytes || n > f->file_bytes - 8)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: bytes 0..7 do not hold a valid header length (expected a little-"
                        "endian integer of at least 2, at most %llu, and within the file's %llu "
                        "bytes); the file is truncated or not safetensors",
                        path, (unsigned long long)f->max_header_bytes,
                        (unsigned long long)f->file_bytes);
    header = zs__malloc((size_t)n);
    if (!header)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a %llu-byte header", path,
                        (unsigned long long)n);
    ZS_CHECK_GOTO(st_pread_all(f->fd, header, (size_t)n, 8, path), status, done);
    f->data_start = 8 + n;
    ZS_CHECK_GOTO(st_parse_header(f, header, (size_t)n), status, done);
    ZS_CHECK_GOTO(st_check_layout(f, f->file_bytes - f->data_start), status, done);
done:
    free(header);
    return status;
}

/* A reader for `path` (shown in messages) under `limits` (NULL: the
 * format's own bounds), not yet opened. */
static zs_status st_new(const char *path, const zs__st_limits *limits, zs__st_file **out) {
    *out = NULL;
    if (limits && limits->max_tensors < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: a negative tensor limit", path);
    zs__st_file *f = zs__calloc(1, sizeof *f);
    if (!f) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a reader", path);
    f->fd = -1;
    f->max_header_bytes = ZS_ST_HEADER_MAX;
    f->max_tensors = ZS_ST_MAX_TENSORS;
    if (limits) {
        /* A caller may tighten the bounds, never loosen them. */
        if (limits->max_header_bytes > 0 && limits->max_header_bytes < f->max_header_bytes)
            f->max_header_bytes = limits->max_header_bytes;
        if (limits->max_tensors > 0 && limits->max_tensors < f->max_tensors)
            f->max_tensors = limits->max_tensors;
        f->expected = limits->expected;
        f->dtypes = limits->dtypes;
        f->name_tensors = limits->name_tensors;
        f->report_holes = limits->report_holes;
    }
    f->path = zs__strdup(path);
    if (!f->path) {
        free(f);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a reader", path);
    }
    *out = f;
    return ZS_OK;
}

zs_status zs__st_open_limited(const char *path, const zs__st_limits *limits, zs__st_file **out) {
    *out = NULL;
    if (!path) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "safetensors reader: NULL path");
    zs__st_file *f = NULL;
    ZS_CHECK(st_new(path, limits, &f));
    zs_status status = ZS_OK;
    /* O_NONBLOCK keeps a FIFO planted at the path from blocking the open; it
     * does nothing to regular files, the only kind accepted (st_open_fd
     * checks what was opened). O_NOFOLLOW: a symlink as the last component
     * is refused, never followed, unless the caller asked to follow one. */
    const int follow = limits && limits->follow_symlinks;
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW));
    if (f->fd < 0) {
        status = errno == ELOOP && !follow
                     ? zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: is a symlink (never followed)", path)
                     : zs__fail(ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    ZS_CHECK_GOTO(st_open_fd(f), status, fail);
    f->expected = f->dtypes = NULL;
    *out = f;
    return ZS_OK;
fail:
    zs__st_close(f);
    return status;
}

zs_status zs__st_open(const char *path, zs__st_file **out) {
    ZS_CHECK(zs__st_open_limited(path, NULL, out));
    return ZS_OK;
}

zs_status zs__st_open_at_limited(int dir_fd, const char *dir_path, const char *name,
                                 const zs__st_limits *limits, zs__st_file **out) {
    *out = NULL;
    char display[4096];
    snprintf(display, sizeof display, "%s/%s", dir_path, name);
    if (limits && limits->follow_symlinks)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: a file inside a directory descriptor is never opened through a "
                        "symlink",
                        display);
    zs__st_file *f = NULL;
    ZS_CHECK(st_new(display, limits, &f));
    zs_status status = ZS_OK;
    ZS_CHECK_GOTO(zs__fs_open_file_at(dir_fd, dir_path, name, &f->fd, NULL), status, fail);
    ZS_CHECK_GOTO(st_open_fd(f), status, fail);
    f->expected = f->dtypes = NULL;
    *out = f;
    return ZS_OK;
fail:
    zs__st_close(f);
    return status;
}

zs_status zs__st_open_at(int dir_fd, const char *dir_path, const char *name, zs__st_file **out) {
    ZS_CHECK(zs__st_open_at_limited(dir_fd, dir_path, name, NULL, out));
    return ZS_OK;
}

uint64_t zs__st_entry_bytes_bound(size_t name_bytes, int ndim) {
    /* "name":{"dtype":"BF16","shape":[d0,d1],"data_offsets":[b,e]}, with
     * every integer at its longest (19 digits of an int64) and every
     * byte of the name written as a six-byte JSON escape. */
    static const char skeleton[] = "\"\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[,]},";
    const uint64_t digits = 19;
    const uint64_t dims = ndim > 0 ? (uint64_t)ndim : 0;
    return (uint64_t)(sizeof skeleton - 1) + 6 * (uint64_t)name_bytes + dims * (digits + 1) +
           2 * digits;
}

zs_status zs__st_read(const zs__st_file *f, const zs__st_entry *e, uint64_t offset, void *dst,
                      uint64_t bytes) {
    uint64_t size = e->end - e->begin;
    if (offset > size || bytes > size - offset)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: reading %llu bytes at %llu is outside header tensor %d (%llu "
                        "bytes)",
                        f->path, (unsigned long long)bytes, (unsigned long long)offset,
                        (int)(e - f->entries),
                        (unsigned long long)size);
    ZS_CHECK(st_pread_all(f->fd, dst, (size_t)bytes, f->data_start + e->begin + offset, f->path));
    return ZS_OK;
}

/* XXH3 of `bytes` file bytes from `offset`, through a bounded buffer. */
static zs_status st_hash_range(const zs__st_file *f, uint64_t offset, uint64_t bytes,
                               uint64_t *hash) {
    zs_status status = ZS_OK;
    XXH3_state_t *state = XXH3_createState();
    unsigned char *buffer = zs__malloc(ST_IO_CHUNK);
    if (!state || !buffer || XXH3_64bits_reset(state) != XXH_OK) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a hash buffer", f->path);
        goto done;
    }
    for (uint64_t done = 0; done < bytes;) {
        size_t piece = bytes - done < ST_IO_CHUNK ? (size_t)(bytes - done) : ST_IO_CHUNK;
        ZS_CHECK_GOTO(st_pread_all(f->fd, buffer, piece, offset + done, f->path), status, done);
        if (XXH3_64bits_update(state, buffer, piece) != XXH_OK) {
            status = zs__fail(ZS_ERR_INTERNAL, "%s: hashing failed", f->path);
            goto done;
        }
        done += piece;
    }
    *hash = XXH3_64bits_digest(state);
done:
    XXH3_freeState(state);
    free(buffer);
    return status;
}

zs_status zs__st_hash_entry(const zs__st_file *f, const zs__st_entry *e, uint64_t *hash) {
    ZS_CHECK(st_hash_range(f, f->data_start + e->begin, e->end - e->begin, hash));
    return ZS_OK;
}

zs_status zs__st_hash_file(const zs__st_file *f, uint64_t *hash) {
    ZS_CHECK(st_hash_range(f, 0, f->file_bytes, hash));
    return ZS_OK;
}
