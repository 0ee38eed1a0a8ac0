/* Checkpoint formats: the safetensors writer and reader (round trips, the
 * streaming writer against the one-shot one, every header byte flipped, every
 * truncation, crafted hostile headers), the manifest (round trip and hostile
 * documents), and the file-system steps of the commit protocol.
 *
 * Built twice: against the library, and (test_formats_sanitized) from the
 * format sources directly with ASan + UBSan, so hostile input is checked for
 * out-of-bounds reads in every build. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "core/config.h"
#include "core/fs.h"
#include "fs_path.h"
#include "test_util.h"

/* ================================================================ helpers */

static char g_dir[1024];

/* dir/name in one of a few rotating buffers, so two paths can be live at once. */
static const char *path_of(const char *name) {
    static char buffers[4][2048];
    static int next;
    char *p = buffers[next++ % 4];
    snprintf(p, sizeof buffers[0], "%s/%s", g_dir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    ZT_REQUIRE(bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    ZT_REQUIRE(fclose(f) == 0);
}

static unsigned char *read_bytes(const char *path, size_t *bytes) {
    char *data = NULL;
    ZT_REQUIRE(zt_fs_read_file(path, (size_t)1 << 30, &data, bytes) == ZS_OK);
    return (unsigned char *)data;
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

/* ================================================================ safetensors: round trip */

static float g_w[12];
static uint16_t g_b16[4];
static uint16_t g_bf[6];
static uint8_t g_blob[5];
static float g_scalar = 3.5f;

static int g_progress[16];
static int g_progress_count;

static void record_progress(void *ctx, int index) {
    (void)ctx;
    if (g_progress_count < 16) g_progress[g_progress_count] = index;
    g_progress_count++;
}

static int fixture_specs(zs__st_tensor_spec *specs) {
    for (int k = 0; k < 12; k++) g_w[k] = (float)k * 0.25f - 1.0f;
    for (int k = 0; k < 4; k++) g_b16[k] = (uint16_t)(0x3C00 + k);
    for (int k = 0; k < 6; k++) g_bf[k] = (uint16_t)(0x4000 + 3 * k);
    for (int k = 0; k < 5; k++) g_blob[k] = (uint8_t)(0xF0 + k);
    const zs__st_tensor_spec list[] = {
        {"layer.0.weight", ZS_ST_F32, 2, {3, 4}, g_w, sizeof g_w, NULL, NULL},
        {"layer.0.bias", ZS_ST_F16, 1, {4}, g_b16, sizeof g_b16, NULL, NULL},
        {"emb:exp_avg", ZS_ST_BF16, 2, {2, 3}, g_bf, sizeof g_bf, NULL, NULL},
        {"empty", ZS_ST_F32, 2, {0, 7}, NULL, 0, NULL, NULL},
        {"global:rng", ZS_ST_U8, 1, {5}, g_blob, sizeof g_blob, NULL, NULL},
        {"scale", ZS_ST_F32, 0, {0}, &g_scalar, sizeof g_scalar, NULL, NULL},
    };
    memcpy(specs, list, sizeof list);
    return (int)(sizeof list / sizeof list[0]);
}

static const zs__st_meta g_meta[] = {
    {"format", "pt"},
    {"layer.0.weight@offset", "12"},
    {"note", "slash/and \"quotes\" and \xc3\xa9"},
};

static void test_st_roundtrip(void) {
    zs__st_tensor_spec specs[8];
    int n = fixture_specs(specs);
    const char *path = path_of("round.safetensors");
    uint64_t hashes[8] = {0}, file_hash = 0, file_bytes = 0;
    g_progress_count = 0;
    ZT_OK(zs__st_write(path, specs, n, g_meta, 3, record_progress, NULL, hashes, &file_hash,
                       &file_bytes));
    ZT_EQ_INT(g_progress_count, n);
    for (int k = 0; k < n && k < 16; k++) ZT_EQ_INT(g_progress[k], k);

    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    ZT_EQ_U64(file_bytes, size);
    ZT_EQ_U64(file_hash, XXH3_64bits(bytes, size));
    uint64_t header_len = le64(bytes);
    ZT_EQ_U64((8 + header_len) % 8, 0);
    ZT_CHECK(bytes[8] == '{');
    /* Only spaces pad the header after the closing brace. */
    size_t close_at = 8 + header_len - 1;
    while (close_at > 8 && bytes[close_at] == ' ') close_at--;
    ZT_CHECK(bytes[close_at] == '}');
    ZT_CHECK(close_at + 8 > 8 + header_len - 1); /* at most 7 bytes of padding */

    zs__st_file *f = NULL;
    ZT_OK(zs__st_open(path, &f));
    ZT_REQUIRE(f != NULL);
    ZT_EQ_INT(zs__st_count(f), n);
    ZT_EQ_U64(zs__st_file_bytes(f), size);
    ZT_CHECK(strcmp(zs__st_path(f), path) == 0);
    uint64_t expect_begin = 0;
    for (int k = 0; k < n; k++) {
        const zs__st_entry *e = zs__st_entry_at(f, k);
        ZT_REQUIRE(e != NULL);
        ZT_CHECK_MSG(strcmp(e->name, specs[k].name) == 0, "%s vs %s", e->name, specs[k].name);
        ZT_EQ_INT(e->dtype, specs[k].dtype);
        ZT_EQ_INT(e->ndim, specs[k].ndim);
        for (int d = 0; d < e->ndim; d++) ZT_EQ_INT(e->shape[d], specs[k].shape[d]);
        ZT_EQ_U64(e->begin, expect_begin);
        ZT_EQ_U64(e->end - e->begin, specs[k].bytes);
        expect_begin = e->end;
        ZT_CHECK(zs__st_find(f, specs[k].name) == e);
        unsigned char buffer[64] = {0};
        ZT_OK(zs__st_read(f, e, 0, buffer, specs[k].bytes));
        ZT_CHECK(specs[k].bytes == 0 || memcmp(buffer, specs[k].data, specs[k].bytes) == 0);
        /* The same bytes sit in the file where the header says. */
        ZT_CHECK(specs[k].bytes == 0 ||
                 memcmp(bytes + 8 + header_len + e->begin, specs[k].data, specs[k].bytes) == 0);
        uint64_t h = 0;
        ZT_OK(zs__st_hash_entry(f, e, &h));
        uint64_t independent = XXH3_64bits(specs[k].bytes ? specs[k].data : "", specs[k].bytes);
        ZT_EQ_U64(h, independent);
        ZT_EQ_U64(hashes[k], independent);
        /* A read past the entry is refused, never served from the neighbour. */
        ZT_FAILS_WITH(zs__st_read(f, e, 0, buffer, specs[k].bytes + 1), ZS_ERR_INVALID_ARGUMENT,
                      "is outside header tensor");
        ZT_FAILS_WITH(zs__st_read(f, e, specs[k].bytes + 1, buffer, 0), ZS_ERR_INVALID_ARGUMENT,
                      "is outside header tensor");
    }
    ZT_EQ_U64(8 + header_len + expect_begin, size);
    /* A partial read from the middle. */
    float two[2];
    ZT_OK(zs__st_read(f, zs__st_find(f, "layer.0.weight"), 4 * 5, two, sizeof two));
    ZT_CHECK(two[0] == g_w[5] && two[1] == g_w[6]);
    uint64_t whole = 0;
    ZT_OK(zs__st_hash_file(f, &whole));
    ZT_EQ_U64(whole, file_hash);
    ZT_CHECK(zs__st_find(f, "missing") == NULL);
    ZT_CHECK(zs__st_entry_at(f, n) == NULL && zs__st_entry_at(f, -1) == NULL);
    for (int k = 0; k < 3; k++) {
        const char *v = zs__st_meta_get(f, g_meta[k].key);
        ZT_CHECK_MSG(v && strcmp(v, g_meta[k].value) == 0, "metadata %s", g_meta[k].key);
    }
    ZT_CHECK(zs__st_meta_get(f, "absent") == NULL);
    zs__st_close(f);
    zs__st_close(NULL);

    /* The streaming writer, fed in odd pieces, writes the same bytes. */
    const char *spath = path_of("stream.safetensors");
    zs__st_stream *s = NULL;
    ZT_OK(zs__st_stream_open(spath, specs, n, g_meta, 3, &s));
    for (int k = 0; k < n; k++) {
        const unsigned char *p = specs[k].data;
        uint64_t left = specs[k].bytes, piece = 1;
        while (left > 0) {
            uint64_t take = piece < left ? piece : left;
            ZT_OK(zs__st_stream_append(s, p, take));
            p += take;
            left -= take;
            piece += 2;
        }
        ZT_OK(zs__st_stream_append(s, NULL, 0));
    }
    uint64_t stream_hash = 0, stream_bytes = 0;
    ZT_OK(zs__st_stream_close(s, &stream_hash, &stream_bytes));
    size_t ssize = 0;
    unsigned char *sbytes = read_bytes(spath, &ssize);
    ZT_EQ_U64(ssize, size);
    ZT_CHECK(ssize == size && memcmp(sbytes, bytes, size) == 0);
    ZT_EQ_U64(stream_hash, file_hash);
    ZT_EQ_U64(stream_bytes, file_bytes);
    free(sbytes);
    free(bytes);

    /* Too many bytes: refused, and the file is gone after close. */
    ZT_OK(zs__st_stream_open(spath, specs, n, NULL, 0, &s));
    ZT_FAILS_WITH(zs__st_stream_append(s, g_w, 1000), ZS_ERR_INVALID_ARGUMENT, "exceed");
    ZT_FAILS_WITH(zs__st_stream_append(s, g_w, 1), ZS_ERR_STATE, "already failed");
    ZT_FAILS_WITH(zs__st_stream_close(s, NULL, NULL), ZS_ERR_STATE, "removed");
    ZT_CHECK(!zt_fs_is_file(spath));
    /* Too few bytes. */
    ZT_OK(zs__st_stream_open(spath, specs, n, NULL, 0, &s));
    ZT_OK(zs__st_stream_append(s, g_w, 8));
    ZT_FAILS_WITH(zs__st_stream_close(s, NULL, NULL), ZS_ERR_INVALID_ARGUMENT,
                  "8 of the 77 declared data bytes");
    ZT_CHECK(!zt_fs_is_file(spath));
    /* Abort removes the file. */
    ZT_OK(zs__st_stream_open(spath, specs, n, NULL, 0, &s));
    ZT_CHECK(zt_fs_is_file(spath));
    zs__st_stream_abort(s);
    ZT_CHECK(!zt_fs_is_file(spath));
    zs__st_stream_abort(NULL);

    /* An empty file (no tensors, no metadata) round-trips. */
    ZT_OK(zs__st_write(spath, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL, &file_bytes));
    ZT_EQ_U64(file_bytes, 16);
    ZT_OK(zs__st_open(spath, &f));
    ZT_EQ_INT(zs__st_count(f), 0);
    zs__st_close(f);
    ZT_CHECK(unlink(spath) == 0);
    ZT_CHECK(unlink(path) == 0);
}

/* The writer refuses what the reader would refuse, before creating anything. */
static void test_st_writer_rejects(void) {
    const char *path = path_of("reject.safetensors");
    float v[2] = {1, 2};
    struct {
        zs__st_tensor_spec spec;
        const char *text;
    } cases[] = {
        {{"a/b", ZS_ST_F32, 1, {2}, v, 8, NULL, NULL}, "'/'"},
        {{"a..b", ZS_ST_F32, 1, {2}, v, 8, NULL, NULL}, "\"..\""},
        {{"", ZS_ST_F32, 1, {2}, v, 8, NULL, NULL}, "empty"},
        {{"__metadata__", ZS_ST_F32, 1, {2}, v, 8, NULL, NULL}, "reserved"},
        {{"a", ZS_ST_F32, 1, {2}, v, 12, NULL, NULL}, "declares 12 bytes"},
        {{"a", (zs__st_dtype)9, 1, {2}, v, 8, NULL, NULL}, "dtype 9"},
        {{"a", ZS_ST_F32, 1, {-2}, v, 8, NULL, NULL}, "negative"},
        {{"a", ZS_ST_F32, 9, {1, 1, 1, 1, 1, 1, 1, 1}, v, 4, NULL, NULL}, "dimensions"},
        {{"a", ZS_ST_F32, 3, {INT64_MAX, INT64_MAX, 2}, v, 8, NULL, NULL}, "more than"},
        {{"\xff", ZS_ST_F32, 1, {2}, v, 8, NULL, NULL}, "UTF-8"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ZT_FAILS_WITH(zs__st_write(path, &cases[k].spec, 1, NULL, 0, NULL, NULL, NULL, NULL, NULL),
                      ZS_ERR_INVALID_ARGUMENT, cases[k].text);
        ZT_CHECK(!zt_fs_is_file(path));
    }
    zs__st_tensor_spec two[2] = {{"a", ZS_ST_F32, 1, {1}, v, 4, NULL, NULL}, {"a", ZS_ST_F32, 1, {1}, v, 4, NULL, NULL}};
    ZT_FAILS_WITH(zs__st_write(path, two, 2, NULL, 0, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "duplicate tensor name");
    char long_value[ZS_ST_META_VALUE_MAX + 2];
    memset(long_value, 'x', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    zs__st_meta bad_meta[] = {{"", "x"}, {"k", long_value}, {"k", NULL}};
    ZT_FAILS_WITH(zs__st_write(path, two, 1, &bad_meta[0], 1, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "metadata key");
    ZT_FAILS_WITH(zs__st_write(path, two, 1, &bad_meta[1], 1, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "metadata value");
    ZT_FAILS_WITH(zs__st_write(path, two, 1, &bad_meta[2], 1, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "metadata value");
    zs__st_meta dup_meta[] = {{"k", "1"}, {"k", "2"}};
    ZT_FAILS_WITH(zs__st_write(path, two, 1, dup_meta, 2, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "duplicate metadata key");
    zs__st_tensor_spec null_data = {"a", ZS_ST_F32, 1, {2}, NULL, 8, NULL, NULL};
    ZT_FAILS_WITH(zs__st_write(path, &null_data, 1, NULL, 0, NULL, NULL, NULL, NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "NULL data");
    ZT_CHECK(!zt_fs_is_file(path));
    ZT_FAILS_WITH(zs__st_write("/nonexistent-dir/x.safetensors", two, 1, NULL, 0, NULL, NULL, NULL,
                               NULL, NULL),
                  ZS_ERR_IO, "/nonexistent-dir/x.safetensors: cannot create");
}

/* ================================================================ safetensors: write_at */

/* zs__st_write_at / zs__st_stream_open_at create the file new relative to a
 * directory descriptor: an entry already at the name (a regular file, a
 * symlink to a file outside, a dangling symlink) makes the create fail with
 * EEXIST and is left exactly as it was, and nothing outside the directory is
 * written or created. These checks fail if O_EXCL is dropped from the create
 * (the file is reused, or the symlink followed or refused with ELOOP instead
 * of EEXIST); with O_EXCL, O_NOFOLLOW adds nothing Linux can show here, as
 * O_CREAT|O_EXCL already refuses a symlink at the last component. */
static void test_st_write_at(void) {
    zs__st_tensor_spec specs[8];
    int n = fixture_specs(specs);
    char dir[2048], outside[2048], outside_new[2048], moved[2048], text[64];
    snprintf(dir, sizeof dir, "%s", path_of("atdir"));
    snprintf(outside, sizeof outside, "%s", path_of("at_outside.txt"));
    snprintf(outside_new, sizeof outside_new, "%s", path_of("at_outside_new"));
    snprintf(moved, sizeof moved, "%s", path_of("atdir_moved"));
    ZT_REQUIRE(mkdir(dir, 0755) == 0);
    write_bytes(outside, "precious\n", 9);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ZT_REQUIRE(dfd >= 0);

    /* A new name: the same bytes as the path-based writer, the same hashes. */
    const char *ref = path_of("at_ref.safetensors");
    uint64_t ref_hashes[8] = {0}, ref_hash = 0, ref_bytes = 0;
    uint64_t hashes[8] = {0}, file_hash = 0, file_bytes = 0;
    ZT_OK(zs__st_write(ref, specs, n, g_meta, 3, NULL, NULL, ref_hashes, &ref_hash, &ref_bytes));
    g_progress_count = 0;
    ZT_OK(zs__st_write_at(dfd, dir, "new.safetensors", specs, n, g_meta, 3, record_progress, NULL,
                          hashes, &file_hash, &file_bytes));
    ZT_EQ_INT(g_progress_count, n);
    ZT_EQ_U64(file_hash, ref_hash);
    ZT_EQ_U64(file_bytes, ref_bytes);
    for (int k = 0; k < n; k++) ZT_EQ_U64(hashes[k], ref_hashes[k]);
    char made[2300];
    snprintf(made, sizeof made, "%s/new.safetensors", dir);
    size_t a_size = 0, b_size = 0;
    unsigned char *a = read_bytes(ref, &a_size), *b = read_bytes(made, &b_size);
    ZT_CHECK_MSG(a_size == b_size && memcmp(a, b, a_size) == 0,
                 "zs__st_write_at wrote %zu bytes that differ from zs__st_write's %zu", b_size,
                 a_size);
    free(a);
    free(b);
    ZT_CHECK(unlink(ref) == 0);

    /* Writing the same name again: it exists (created by the writer itself). */
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "new.safetensors", specs, n, NULL, 0, NULL, NULL, NULL,
                                  NULL, NULL),
                  ZS_ERR_IO, "new.safetensors: cannot create: File exists");
    ZT_CHECK_MSG(zt_fs_is_file(made), "a refused create removed the existing %s", made);

    /* A regular file planted at the name keeps its content. */
    char planted[2300];
    snprintf(planted, sizeof planted, "%s/file.partial", dir);
    write_bytes(planted, "mine\n", 5);
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "file.partial", specs, n, NULL, 0, NULL, NULL, NULL,
                                  NULL, NULL),
                  ZS_ERR_IO, "/atdir/file.partial: cannot create: File exists");
    zt_read_text(planted, text, sizeof text);
    ZT_CHECK_MSG(strcmp(text, "mine\n") == 0, "the planted file was written: '%s'", text);

    /* A symlink to a file outside: not followed, not removed, target untouched. */
    char link_path[2300];
    snprintf(link_path, sizeof link_path, "%s/link.partial", dir);
    ZT_REQUIRE(symlink(outside, link_path) == 0);
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "link.partial", specs, n, NULL, 0, NULL, NULL, NULL,
                                  NULL, NULL),
                  ZS_ERR_IO, "/atdir/link.partial: cannot create: File exists");
    zt_read_text(outside, text, sizeof text);
    ZT_CHECK_MSG(strcmp(text, "precious\n") == 0, "a write followed the symlink to %s: '%s'",
                 outside, text);
    struct stat st;
    ZT_CHECK_MSG(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode), "the symlink %s was removed",
                 link_path);
    zs__st_stream *s = NULL;
    ZT_FAILS_WITH(zs__st_stream_open_at(dfd, dir, "link.partial", specs, n, NULL, 0, &s),
                  ZS_ERR_IO, "File exists");
    ZT_CHECK(s == NULL);
    zt_read_text(outside, text, sizeof text);
    ZT_CHECK_MSG(strcmp(text, "precious\n") == 0, "the stream followed the symlink: '%s'", text);

    /* A dangling symlink: plain O_CREAT would create its target outside. */
    char dangling[2300];
    snprintf(dangling, sizeof dangling, "%s/dangling.partial", dir);
    ZT_REQUIRE(symlink(outside_new, dangling) == 0);
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "dangling.partial", specs, n, NULL, 0, NULL, NULL,
                                  NULL, NULL, NULL),
                  ZS_ERR_IO, "/atdir/dangling.partial: cannot create: File exists");
    ZT_CHECK_MSG(lstat(outside_new, &st) != 0 && errno == ENOENT,
                 "a write through the dangling symlink created %s", outside_new);

    /* Names are one component. */
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "../escape", specs, n, NULL, 0, NULL, NULL, NULL, NULL,
                                  NULL),
                  ZS_ERR_INVALID_ARGUMENT, "invalid file name");
    /* Invalid specs are refused before anything is created. */
    zs__st_tensor_spec bad = {"a/b", ZS_ST_F32, 1, {2}, g_w, 8, NULL, NULL};
    ZT_FAILS_WITH(zs__st_write_at(dfd, dir, "bad.partial", &bad, 1, NULL, 0, NULL, NULL, NULL,
                                  NULL, NULL),
                  ZS_ERR_INVALID_ARGUMENT, "'/'");
    ZT_CHECK(zs__fs_kind_at(dfd, "bad.partial") == ZS_FS_KIND_MISSING);

    /* The directory renamed away and a symlink to elsewhere put in its
     * place: the writer follows the descriptor, not the path. */
    ZT_REQUIRE(rename(dir, moved) == 0);
    ZT_REQUIRE(symlink(g_dir, dir) == 0);
    ZT_OK(zs__st_stream_open_at(dfd, dir, "swapped.partial", specs, n, NULL, 0, &s));
    ZT_CHECK(zs__fs_kind_at(dfd, "swapped.partial") == ZS_FS_KIND_FILE);
    ZT_CHECK_MSG(!zt_fs_is_file(path_of("swapped.partial")),
                 "the writer resolved the swapped path into %s", g_dir);
    /* The stream owns a duplicate of the descriptor: after the caller closes
     * its own, a failure still unlinks the file in the right directory. */
    ZT_CHECK(close(dfd) == 0);
    ZT_OK(zs__st_stream_append(s, g_w, 8));
    ZT_FAILS_WITH(zs__st_stream_close(s, NULL, NULL), ZS_ERR_INVALID_ARGUMENT, "removed");
    char swapped[2300];
    snprintf(swapped, sizeof swapped, "%s/swapped.partial", moved);
    ZT_CHECK_MSG(lstat(swapped, &st) != 0, "a failed stream left %s", swapped);

    ZT_CHECK(unlink(dir) == 0);
    snprintf(made, sizeof made, "%s/new.safetensors", moved);
    ZT_CHECK(unlink(made) == 0);
    snprintf(planted, sizeof planted, "%s/file.partial", moved);
    ZT_CHECK(unlink(planted) == 0);
    snprintf(link_path, sizeof link_path, "%s/link.partial", moved);
    ZT_CHECK(unlink(link_path) == 0);
    snprintf(dangling, sizeof dangling, "%s/dangling.partial", moved);
    ZT_CHECK(unlink(dangling) == 0);
    ZT_CHECK_MSG(rmdir(moved) == 0, "%s: %s (an unexpected entry was left)", moved,
                 strerror(errno));
    ZT_CHECK(unlink(outside) == 0);
}

/* ================================================================ safetensors: hostile files */

typedef struct st_snapshot {
    int count;
    zs__st_entry entries[4];
    char meta[64];
    int has_meta;
} st_snapshot;

static void st_snapshot_of(const zs__st_file *f, st_snapshot *s) {
    memset(s, 0, sizeof *s);
    s->count = zs__st_count(f);
    for (int k = 0; k < s->count && k < 4; k++) s->entries[k] = *zs__st_entry_at(f, k);
    const char *v = zs__st_meta_get(f, "k");
    s->has_meta = v != NULL;
    if (v) snprintf(s->meta, sizeof s->meta, "%s", v);
}

static int st_snapshot_equal(const st_snapshot *a, const st_snapshot *b) {
    if (a->count != b->count || a->has_meta != b->has_meta || strcmp(a->meta, b->meta) != 0)
        return 0;
    for (int k = 0; k < a->count && k < 4; k++) {
        const zs__st_entry *x = &a->entries[k], *y = &b->entries[k];
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->begin != y->begin || x->end != y->end)
            return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
    }
    return 1;
}

/* Reads every byte of every entry of an accepted file, so a bad layout that
 * slipped through would show up as an out-of-bounds read under ASan. */
static void st_touch_all(const zs__st_file *f) {
    unsigned char buffer[256];
    for (int k = 0; k < zs__st_count(f); k++) {
        const zs__st_entry *e = zs__st_entry_at(f, k);
        uint64_t h;
        if (e->end - e->begin <= sizeof buffer)
            (void)zs__st_read(f, e, 0, buffer, e->end - e->begin);
        (void)zs__st_hash_entry(f, e, &h);
    }
}

static void test_st_flips_and_truncations(void) {
    float a[2] = {1.0f, -2.0f};
    uint8_t b[3] = {7, 8, 9};
    zs__st_tensor_spec specs[] = {{"a.w", ZS_ST_F32, 1, {2}, a, sizeof a, NULL, NULL},
                                  {"b", ZS_ST_U8, 2, {1, 3}, b, sizeof b, NULL, NULL}};
    zs__st_meta meta[] = {{"k", "v"}};
    const char *good = path_of("small.safetensors");
    ZT_OK(zs__st_write(good, specs, 2, meta, 1, NULL, NULL, NULL, NULL, NULL));
    size_t size = 0;
    unsigned char *bytes = read_bytes(good, &size);
    uint64_t header_end = 8 + le64(bytes);
    zs__st_file *f = NULL;
    ZT_OK(zs__st_open(good, &f));
    st_snapshot original;
    st_snapshot_of(f, &original);
    zs__st_close(f);

    const char *bad = path_of("flipped.safetensors");
    unsigned char *copy = malloc(size);
    ZT_REQUIRE(copy != NULL);
    int rejected = 0, accepted_different = 0, flips = 0;
    const unsigned char masks[2] = {0xFF, 0x01};
    for (uint64_t pos = 0; pos < header_end; pos++) {
        for (int m = 0; m < 2; m++) {
            memcpy(copy, bytes, size);
            copy[pos] ^= masks[m];
            write_bytes(bad, copy, size);
            flips++;
            f = NULL;
            zs_status st = zs__st_open(bad, &f);
            if (st != ZS_OK) {
                ZT_CHECK_MSG(f == NULL && zs_last_error()[0] != '\0' &&
                                 strstr(zs_last_error(), bad) != NULL,
                             "rejection at byte %llu must name the path: %s",
                             (unsigned long long)pos, zs_last_error());
                rejected++;
                continue;
            }
            st_snapshot now;
            st_snapshot_of(f, &now);
            st_touch_all(f);
            int differs = !st_snapshot_equal(&original, &now);
            ZT_CHECK_MSG(differs, "flip 0x%02x at header byte %llu was accepted with the same "
                                  "entries",
                         masks[m], (unsigned long long)pos);
            accepted_different += differs;
            zs__st_close(f);
        }
    }
    fprintf(stderr, "  safetensors: %d header flips over %llu bytes: %d rejected, %d accepted "
                    "with different entries\n",
            flips, (unsigned long long)header_end, rejected, accepted_different);
    ZT_EQ_INT(rejected + accepted_different, flips);
    ZT_CHECK(rejected > flips / 2);

    /* Flips in the data section keep the layout, but the entry hash sees them. */
    for (uint64_t pos = header_end; pos < size; pos++) {
        memcpy(copy, bytes, size);
        copy[pos] ^= 0x01;
        write_bytes(bad, copy, size);
        ZT_OK(zs__st_open(bad, &f));
        if (!f) continue;
        int hashes_differ = 0;
        for (int k = 0; k < zs__st_count(f); k++) {
            const zs__st_entry *e = zs__st_entry_at(f, k);
            uint64_t h = 0;
            ZT_OK(zs__st_hash_entry(f, e, &h));
            if (h != XXH3_64bits(specs[k].data, specs[k].bytes)) hashes_differ++;
        }
        ZT_EQ_INT(hashes_differ, 1);
        zs__st_close(f);
    }

    /* Every truncation is refused. */
    int truncations = 0;
    for (size_t len = 0; len < size; len++) {
        write_bytes(bad, bytes, len);
        f = NULL;
        zs_status st = zs__st_open(bad, &f);
        ZT_CHECK_MSG(st == ZS_ERR_INVALID_ARGUMENT && f == NULL,
                     "a file truncated to %zu of %zu bytes was not refused (%s)", len, size,
                     zs_last_error());
        if (f) zs__st_close(f);
        truncations++;
    }
    /* And so is one extra byte at the end. */
    memcpy(copy, bytes, size);
    unsigned char *longer = malloc(size + 1);
    ZT_REQUIRE(longer != NULL);
    memcpy(longer, bytes, size);
    longer[size] = 0;
    write_bytes(bad, longer, size + 1);
    ZT_FAILS_WITH(zs__st_open(bad, &f), ZS_ERR_INVALID_ARGUMENT, "trailing bytes");
    fprintf(stderr, "  safetensors: %d truncations of a %zu-byte file, all refused\n", truncations,
            size);
    free(longer);
    free(copy);
    free(bytes);
    ZT_CHECK(unlink(bad) == 0);
    ZT_CHECK(unlink(good) == 0);
}

/* Writes 8-byte length `declared` + header + data_bytes of data and opens it. */
static zs_status open_crafted(const char *header, size_t header_len, uint64_t declared,
                              size_t data_bytes) {
    const char *path = path_of("crafted.safetensors");
    size_t size = 8 + header_len + data_bytes;
    unsigned char *file = malloc(size);
    ZT_REQUIRE(file != NULL);
    for (int k = 0; k < 8; k++) file[k] = (unsigned char)(declared >> (8 * k));
    memcpy(file + 8, header, header_len);
    memset(file + 8 + header_len, 0xAB, data_bytes);
    write_bytes(path, file, size);
    free(file);
    zs__st_file *f = NULL;
    zs_status status = zs__st_open(path, &f);
    if (f) {
        st_touch_all(f);
        zs__st_close(f);
    }
    return status;
}

/* sizeof on the literal keeps embedded NUL bytes. */
#define CRAFT(literal, data) open_crafted(literal, sizeof(literal) - 1, sizeof(literal) - 1, data)
#define ENTRY(name, dtype, shape, begin, end)                                                      \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" begin \
    "," end "]}"
#define BAD(literal, data, text) ZT_FAILS_WITH(CRAFT(literal, data), ZS_ERR_INVALID_ARGUMENT, text)

static void test_st_crafted(void) {
    /* Valid shapes of header, as the reference implementation writes them. */
    ZT_OK(CRAFT("{" ENTRY("a", "F32", "[2]", "0", "8") "}", 8));
    ZT_OK(CRAFT("{" ENTRY("a", "F32", "[2]", "0", "8") "}       ", 8));
    ZT_OK(CRAFT("{\"__metadata__\":{\"format\":\"pt\"}," ENTRY("a", "F32", "[2]", "0", "8") "}",
                8));
    ZT_OK(CRAFT("{ \"a\" : { \"shape\" : [ 2 ] ,\n\"data_offsets\":[0,8],\"dtype\":\"F32\"}}", 8));
    ZT_OK(CRAFT("{}", 0));
    ZT_OK(CRAFT("{" ENTRY("z", "F32", "[0]", "0", "0") "," ENTRY("a", "F32", "[2]", "0", "8") ","
                ENTRY("y", "BF16", "[0,3]", "8", "8") "}",
                8));
    ZT_OK(CRAFT("{" ENTRY("b", "U8", "[4]", "4", "8") "," ENTRY("a", "F16", "[2]", "0", "4") "}",
                8));

    /* Header length. */
    const char valid[] = "{" ENTRY("a", "F32", "[2]", "0", "8") "}";
    size_t vlen = sizeof valid - 1;
    ZT_FAILS_WITH(open_crafted(valid, vlen, UINT64_MAX, 8), ZS_ERR_INVALID_ARGUMENT,
                  "bytes 0..7 do not hold a valid header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, (uint64_t)1 << 63, 8), ZS_ERR_INVALID_ARGUMENT,
                  "header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, (uint64_t)ZS_ST_HEADER_MAX + 1, 8),
                  ZS_ERR_INVALID_ARGUMENT, "header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, vlen + 9, 8), ZS_ERR_INVALID_ARGUMENT,
                  "header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, 0, 8), ZS_ERR_INVALID_ARGUMENT, "bytes 0..7 do not hold a valid header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, 1, 8), ZS_ERR_INVALID_ARGUMENT, "bytes 0..7 do not hold a valid header length");
    ZT_FAILS_WITH(open_crafted(valid, vlen, vlen - 1, 8), ZS_ERR_INVALID_ARGUMENT, "header");
    write_bytes(path_of("crafted.safetensors"), "\x02\0\0\0\0", 5);
    zs__st_file *f = NULL;
    ZT_FAILS_WITH(zs__st_open(path_of("crafted.safetensors"), &f), ZS_ERR_INVALID_ARGUMENT,
                  "too short");
    ZT_FAILS_WITH(zs__st_open(path_of("no-such-file"), &f), ZS_ERR_IO, "no-such-file: cannot open");
    ZT_FAILS_WITH(zs__st_open(g_dir, &f), ZS_ERR_INVALID_ARGUMENT, "not a regular file");

    /* Shapes and sizes. */
    BAD("{" ENTRY("a", "F32", "[-2]", "0", "8") "}", 8, "shape[0]");
    BAD("{" ENTRY("a", "U8", "[4294967296,4294967296,4294967296]", "0", "8") "}", 8,
        "overflows");
    BAD("{" ENTRY("a", "U8", "[9223372036854775808]", "0", "8") "}", 8, "64-bit range");
    BAD("{" ENTRY("a", "U8", "[99999999999999999999999]", "0", "8") "}", 8, "64-bit range");
    BAD("{" ENTRY("a", "U8", "[-9223372036854775809]", "0", "8") "}", 8, "64-bit range");
    BAD("{" ENTRY("a", "F32", "[2.0]", "0", "8") "}", 8, "shape[0]");
    BAD("{" ENTRY("a", "F32", "[2e0]", "0", "8") "}", 8, "shape[0]");
    BAD("{" ENTRY("a", "F32", "[\"2\"]", "0", "8") "}", 8, "shape[0]");
    BAD("{" ENTRY("a", "F32", "[02]", "0", "8") "}", 8, "leading zero");
    BAD("{" ENTRY("a", "F32", "[1,1,1,1,1,1,1,1,2]", "0", "8") "}", 8, "too many elements");
    BAD("{" ENTRY("a", "F32", "2", "0", "8") "}", 8, "shape must be an array");
    BAD("{" ENTRY("a", "F32", "[3]", "0", "8") "}", 8, "need 12");
    BAD("{" ENTRY("a", "F64", "[1]", "0", "8") "}", 8, "dtype outside the allowed");
    BAD("{" ENTRY("a", "f32", "[2]", "0", "8") "}", 8, "dtype outside the allowed");
    BAD("{" ENTRY("a", "I64", "[1]", "0", "8") "}", 8, "dtype outside the allowed");
    BAD("{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");
    BAD("{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");

    /* Offsets. */
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "," ENTRY("b", "F32", "[2]", "4", "12") "}", 12,
        "overlap");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "," ENTRY("b", "F32", "[2]", "0", "8") "}", 8,
        "overlap");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "," ENTRY("b", "F32", "[2]", "12", "20") "}", 20,
        "gap");
    BAD("{" ENTRY("a", "F32", "[2]", "4", "12") "}", 12, "gap");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}", 12, "trailing bytes");
    BAD("{}", 4, "trailing bytes");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}", 4, "beyond");
    BAD("{" ENTRY("a", "F32", "[2]", "8", "0") "}", 8, "data_offsets");
    BAD("{" ENTRY("a", "F32", "[0]", "4", "4") "," ENTRY("b", "F32", "[2]", "0", "8") "}", 8,
        "overlap"); /* an empty tensor inside another is not where the tiling puts it */
    BAD("{" ENTRY("a", "F32", "[2]", "0", "18446744073709551615") "}", 8, "64-bit range");
    BAD("{" ENTRY("a", "F32", "[2]", "-8", "0") "}", 8, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", 8, "data_offsets");

    /* Entry structure. */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "exactly the fields");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
        "exactly the fields");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offset\":[0,8]}}", 8, "exactly the fields");
    BAD("{\"a\":5}", 0, "not an object");
    BAD("{\"a\":[]}", 0, "not an object");

    /* Names. */
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "," ENTRY("a", "F32", "[2]", "8", "16") "}", 16,
        "duplicate key");
    BAD("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "duplicate key");
    BAD("{" ENTRY("x/y", "F32", "[2]", "0", "8") "}", 8, "contains '/'");
    BAD("{" ENTRY("..", "F32", "[2]", "0", "8") "}", 8, "\"..\"");
    BAD("{" ENTRY("a..b", "F32", "[2]", "0", "8") "}", 8, "\"..\"");
    BAD("{" ENTRY("a\\u0000b", "F32", "[2]", "0", "8") "}", 8, "NUL");
    BAD("{" ENTRY("", "F32", "[2]", "0", "8") "}", 8, "is empty");
    BAD("{" ENTRY("\\ud800", "F32", "[2]", "0", "8") "}", 8, "surrogate");
    BAD("{" ENTRY("\\udc00x", "F32", "[2]", "0", "8") "}", 8, "surrogate");
    BAD("{" ENTRY("\xff", "F32", "[2]", "0", "8") "}", 8, "UTF-8");
    BAD("{" ENTRY("\xc0\xaf", "F32", "[2]", "0", "8") "}", 8, "UTF-8"); /* overlong '/' */
    BAD("{" ENTRY("\xed\xa0\x80", "F32", "[2]", "0", "8") "}", 8, "UTF-8"); /* surrogate */
    BAD("{" ENTRY("a\tb", "F32", "[2]", "0", "8") "}", 8, "control character");
    BAD("{" ENTRY("a\0b", "F32", "[2]", "0", "8") "}", 8, "control character");
    BAD("{" ENTRY("a\\qb", "F32", "[2]", "0", "8") "}", 8, "invalid escape");
    ZT_OK(CRAFT("{" ENTRY("a\\u00e9\\ud83d\\ude00", "F32", "[2]", "0", "8") "}", 8));
    {
        char header[600];
        char name[ZS_ST_NAME_MAX + 2];
        memset(name, 'n', sizeof name - 1);
        name[sizeof name - 1] = '\0';
        int len = snprintf(header, sizeof header, "{" ENTRY("%s", "F32", "[2]", "0", "8") "}",
                           name);
        ZT_FAILS_WITH(open_crafted(header, (size_t)len, (uint64_t)len, 8), ZS_ERR_INVALID_ARGUMENT,
                      "longer than 255");
        name[ZS_ST_NAME_MAX] = '\0';
        len = snprintf(header, sizeof header, "{" ENTRY("%s", "F32", "[2]", "0", "8") "}", name);
        ZT_OK(open_crafted(header, (size_t)len, (uint64_t)len, 8));
    }

    /* Metadata. */
    BAD("{\"__metadata__\":{\"k\":1}," ENTRY("a", "F32", "[2]", "0", "8") "}", 8,
        "not a string");
    BAD("{\"__metadata__\":{\"k\":null}}", 0, "not a string");
    BAD("{\"__metadata__\":{\"k\":[\"v\"]}}", 0, "not a string");
    BAD("{\"__metadata__\":\"x\"}", 0, "__metadata__ is not an object");
    BAD("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "NUL");
    BAD("{\"__metadata__\":{\"\":\"v\"}}", 0, "is empty");
    BAD("{\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{\"k\":\"v\"}}", 0, "duplicate key");
    {
        char header[ZS_ST_META_VALUE_MAX + 64];
        char value[ZS_ST_META_VALUE_MAX + 2];
        memset(value, 'v', sizeof value - 1);
        value[sizeof value - 1] = '\0';
        int len = snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"%s\"}}", value);
        ZT_FAILS_WITH(open_crafted(header, (size_t)len, (uint64_t)len, 0),
                      ZS_ERR_INVALID_ARGUMENT, "longer than 4096");
    }

    /* Not JSON, or more than one JSON object. */
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}x", 8, "trailing bytes");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}{}", 8, "trailing bytes");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "} \n", 8, "only space padding");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}\t", 8, "only space padding");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") "}\0", 8, "only space padding");
    BAD(" {" ENTRY("a", "F32", "[2]", "0", "8") "}", 8, "start with '{'");
    BAD("[1, 2]", 0, "start with '{'");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8") ",}", 8, "not valid JSON");
    BAD("{" ENTRY("a", "F32", "[2]", "0", "8"), 8, "ends before");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]]}", 8, "mismatched");
    BAD("{'a':{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "unexpected character");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[NaN],\"data_offsets\":[0,8]}}", 8,
        "unexpected character");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[nan],\"data_offsets\":[0,8]}}", 8, "unexpected word");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2] /* c */,\"data_offsets\":[0,8]}}", 8,
        "unexpected character");
    BAD("{\"a\":{\"b\":{\"c\":[1]}}}", 0, "nested too deeply");
    BAD("{\"a\" \"b\"}", 0, "not valid JSON");
    BAD("{\"a\":1:2}", 0, "not valid JSON");
}

/* ================================================================ manifest */

static const char *const k_file_names[] = {
    "rank00000.master.safetensors", "rank00001.master.safetensors",
    "rank00000.optim.safetensors",  "rank00001.optim.safetensors",
    "rank00000.user.safetensors",   "rank00001.user.safetensors",
};

static void set_tensor(zs__ckpt_tensor *t, int file, const char *key, zs__ckpt_state state,
                       int param, int64_t offset, int64_t count, uint64_t hash) {
    t->file = file;
    snprintf(t->key, sizeof t->key, "%s", key);
    t->state = state;
    t->param = param;
    t->offset = offset;
    t->count = count;
    t->xxh3 = hash;
}

/* Two ranks, stage 2: three parameters split across ranks for master and
 * exp_avg, exp_avg_sq for one, user state global and per rank. */
static zs__manifest *make_manifest(void) {
    zs__manifest *m = NULL;
    ZT_REQUIRE(zs__manifest_alloc(2, 3, 6, 12, &m) == ZS_OK);
    m->step = 1234;
    m->skipped_total = 5;
    m->world_size = 2;
    m->stage = 2;
    m->config_hash = 0xfedcba9876543210ull;
    m->compute_dtype = ZS_DTYPE_FP16;
    m->optimizer = ZS_OPTIMIZER_ADAMW;
    m->scaler = (zs__ckpt_scaler){0.1, 1239, -1, 2, 0, 5};
    snprintf(m->units[0].name, sizeof m->units[0].name, "block0");
    snprintf(m->units[1].name, sizeof m->units[1].name, "block1");
    const struct {
        const char *name;
        int unit, ndim;
        int64_t d0, d1;
        unsigned flags;
    } params[] = {{"w0", 0, 2, 4, 3, 0}, {"b0", 0, 1, 3, 0, ZS_PARAM_NO_DECAY},
                  {"w1", 1, 1, 5, 0, 0}};
    for (int i = 0; i < 3; i++) {
        snprintf(m->params[i].name, sizeof m->params[i].name, "%s", params[i].name);
        m->params[i].unit = params[i].unit;
        m->params[i].ndim = params[i].ndim;
        m->params[i].shape[0] = params[i].d0;
        m->params[i].shape[1] = params[i].d1;
        m->params[i].flags = params[i].flags;
    }
    for (int i = 0; i < 6; i++) {
        snprintf(m->files[i].name, sizeof m->files[i].name, "%s", k_file_names[i]);
        m->files[i].rank = i % 2;
        m->files[i].kind = (zs__ckpt_file_kind)(i / 2);
        m->files[i].bytes = 1000u + (uint64_t)i;
        m->files[i].xxh3 = 0x8000000000000000ull | (uint64_t)i;
    }
    zs__ckpt_tensor *t = m->tensors;
    set_tensor(&t[0], 0, "w0", ZS_CKPT_STATE_MASTER, 0, 0, 7, 0xffffffffffffffffull);
    set_tensor(&t[1], 1, "w0", ZS_CKPT_STATE_MASTER, 0, 7, 5, 1);
    set_tensor(&t[2], 0, "b0", ZS_CKPT_STATE_MASTER, 1, 0, 3, 2);
    set_tensor(&t[3], 1, "b0", ZS_CKPT_STATE_MASTER, 1, 3, 0, 3); /* owns nothing of b0 */
    set_tensor(&t[4], 1, "w1", ZS_CKPT_STATE_MASTER, 2, 0, 5, 4);
    set_tensor(&t[5], 2, "w0:exp_avg", ZS_CKPT_STATE_EXP_AVG, 0, 0, 7, 5);
    set_tensor(&t[6], 3, "w0:exp_avg", ZS_CKPT_STATE_EXP_AVG, 0, 7, 5, 6);
    set_tensor(&t[7], 2, "b0:exp_avg", ZS_CKPT_STATE_EXP_AVG, 1, 0, 3, 7);
    set_tensor(&t[8], 3, "w1:exp_avg_sq", ZS_CKPT_STATE_EXP_AVG_SQ, 2, 0, 5, 8);
    set_tensor(&t[9], 4, "global:rng", ZS_CKPT_STATE_USER_GLOBAL, -1, 0, 16, 9);
    set_tensor(&t[10], 4, "rank:rng", ZS_CKPT_STATE_USER_RANK, -1, 0, 8, 10);
    set_tensor(&t[11], 5, "rank:rng", ZS_CKPT_STATE_USER_RANK, -1, 0, 8, 11);
    return m;
}

static int manifests_equal(const zs__manifest *a, const zs__manifest *b) {
    if (a->version != b->version || a->step != b->step || a->skipped_total != b->skipped_total ||
        a->world_size != b->world_size || a->stage != b->stage ||
        a->config_hash != b->config_hash || a->compute_dtype != b->compute_dtype ||
        a->optimizer != b->optimizer)
        return 0;
    if (memcmp(&a->scaler.scale, &b->scaler.scale, sizeof(double)) != 0 ||
        a->scaler.cur_iter != b->scaler.cur_iter ||
        a->scaler.last_overflow_iter != b->scaler.last_overflow_iter ||
        a->scaler.cur_hysteresis != b->scaler.cur_hysteresis ||
        a->scaler.consecutive_overflows != b->scaler.consecutive_overflows ||
        a->scaler.overflows_total != b->scaler.overflows_total)
        return 0;
    if (a->unit_count != b->unit_count || a->param_count != b->param_count ||
        a->file_count != b->file_count || a->tensor_count != b->tensor_count)
        return 0;
    for (int i = 0; i < a->unit_count; i++)
        if (strcmp(a->units[i].name, b->units[i].name) != 0) return 0;
    for (int i = 0; i < a->param_count; i++) {
        const zs__ckpt_param *x = &a->params[i], *y = &b->params[i];
        if (strcmp(x->name, y->name) || x->unit != y->unit || x->ndim != y->ndim ||
            x->flags != y->flags)
            return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
    }
    for (int i = 0; i < a->file_count; i++) {
        const zs__ckpt_file *x = &a->files[i], *y = &b->files[i];
        if (strcmp(x->name, y->name) || x->rank != y->rank || x->kind != y->kind ||
            x->bytes != y->bytes || x->xxh3 != y->xxh3)
            return 0;
    }
    for (int i = 0; i < a->tensor_count; i++) {
        const zs__ckpt_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (x->file != y->file || strcmp(x->key, y->key) || x->state != y->state ||
            x->param != y->param || x->offset != y->offset || x->count != y->count ||
            x->xxh3 != y->xxh3)
            return 0;
    }
    return a->has_base == b->has_base && strcmp(a->base_path, b->base_path) == 0 &&
           strcmp(a->base_prefix, b->base_prefix) == 0 && a->base_xxh3 == b->base_xxh3 &&
           a->base_tensors == b->base_tensors;
}

/* A frozen base recorded (frozen_base.h): w1 frozen, its values the base's
 * (no tensor of it), the record round trips; a master tensor of a frozen
 * parameter beside the record, or no record, is refused. */
static void test_manifest_frozen_base(void) {
    zs__manifest *m = make_manifest();
    m->params[2].flags = ZS_PARAM_FROZEN;
    /* w1's master (tensors[4]) and exp_avg_sq (tensors[8]) become b0's
     * empty ranges, which cover nothing. */
    set_tensor(&m->tensors[4], 1, "b0x", ZS_CKPT_STATE_MASTER, 1, 3, 0, 4);
    set_tensor(&m->tensors[8], 3, "b0:exp_avg_sq", ZS_CKPT_STATE_EXP_AVG_SQ, 1, 0, 3, 8);
    m->has_base = 1;
    snprintf(m->base_path, sizeof m->base_path, "/models/base dir/model.safetensors");
    snprintf(m->base_prefix, sizeof m->base_prefix, "base_model.model.");
    m->base_xxh3 = 0x0123456789abcdefull;
    m->base_tensors = 1;
    char *text = NULL;
    size_t bytes = 0;
    ZT_OK(zs__manifest_to_json(m, &text, &bytes));
    ZT_CHECK(strstr(text, "\"frozen_base\"") != NULL);
    zs__manifest *back = NULL;
    ZT_OK(zs__manifest_from_json(text, bytes, "mem", &back));
    ZT_CHECK(back && back->has_base && manifests_equal(m, back));
    zs__manifest_free(back);
    free(text);
    m->has_base = 0;
    ZT_FAILS_WITH(zs__manifest_to_json(m, &text, &bytes), ZS_ERR_INVALID_ARGUMENT,
                  "has no master tensor");
    m->has_base = 1;
    set_tensor(&m->tensors[4], 1, "w1", ZS_CKPT_STATE_MASTER, 2, 0, 5, 4);
    ZT_FAILS_WITH(zs__manifest_to_json(m, &text, &bytes), ZS_ERR_INVALID_ARGUMENT,
                  "its values are the frozen_base's, but it has a master tensor");
    zs__manifest_free(m);
}

static char *g_good_manifest;
static size_t g_good_bytes;

static void test_manifest_roundtrip(void) {
    zs__manifest *m = make_manifest();
    char *text = NULL;
    size_t bytes = 0;
    ZT_OK(zs__manifest_to_json(m, &text, &bytes));
    ZT_REQUIRE(text != NULL);
    ZT_EQ_U64(bytes, strlen(text));
    ZT_CHECK(strstr(text, "\"config_hash\": \"fedcba9876543210\"") != NULL);
    ZT_CHECK(strstr(text, "\"xxh3\": \"ffffffffffffffff\"") != NULL);
    ZT_CHECK(strstr(text, "\"format\": \"zeroshard-checkpoint\"") != NULL);
    zs__manifest *back = NULL;
    ZT_OK(zs__manifest_from_json(text, bytes, "mem", &back));
    ZT_REQUIRE(back != NULL);
    ZT_CHECK(manifests_equal(m, back));
    char *again = NULL;
    size_t again_bytes = 0;
    ZT_OK(zs__manifest_to_json(back, &again, &again_bytes));
    ZT_CHECK(again && again_bytes == bytes && memcmp(again, text, bytes) == 0);
    free(again);
    zs__manifest_free(back);

    /* Extremes survive: the largest counters, a subnormal-free odd scale. */
    m->step = INT64_MAX;
    m->scaler.scale = 65536.0 * 3.0 / 7.0;
    m->scaler.overflows_total = INT64_MAX;
    m->config_hash = 0;
    char *t2 = NULL;
    size_t b2 = 0;
    ZT_OK(zs__manifest_to_json(m, &t2, &b2));
    ZT_OK(zs__manifest_from_json(t2, b2, "mem", &back));
    ZT_CHECK(back && manifests_equal(m, back));
    zs__manifest_free(back);
    free(t2);

    /* to_json refuses what from_json would refuse. */
    m->world_size = 0;
    ZT_FAILS_WITH(zs__manifest_to_json(m, &t2, &b2), ZS_ERR_INVALID_ARGUMENT,
                  "manifest to write: world_size 0");
    m->world_size = 2;
    snprintf(m->params[2].name, sizeof m->params[2].name, "w\xff");
    ZT_FAILS_WITH(zs__manifest_to_json(m, &t2, &b2), ZS_ERR_INVALID_ARGUMENT, "UTF-8");
    snprintf(m->params[2].name, sizeof m->params[2].name, "w1");
    m->tensors[1].offset = 6;
    ZT_FAILS_WITH(zs__manifest_to_json(m, &t2, &b2), ZS_ERR_INVALID_ARGUMENT, "overlap");
    zs__manifest_free(m);
    zs__manifest_free(NULL);

    ZT_CHECK(strcmp(zs__ckpt_state_name(ZS_CKPT_STATE_EXP_AVG_SQ), "exp_avg_sq") == 0);
    ZT_CHECK(strcmp(zs__ckpt_state_name((zs__ckpt_state)42), "unknown") == 0);
    ZT_CHECK(strcmp(zs__ckpt_file_kind_name(ZS_CKPT_FILE_OPTIM), "optim") == 0);
    zs__ckpt_param p = {"p", 0, 3, {4, 5, 6}, 0};
    ZT_EQ_INT(zs__ckpt_param_numel(&p), 120);
    p.shape[1] = INT64_MAX;
    ZT_EQ_INT(zs__ckpt_param_numel(&p), -1);

    g_good_manifest = text;
    g_good_bytes = bytes;
}

/* The good manifest with the value at a dotted path ("tensors.3.offset")
 * replaced by `value` (NULL: removed), parsed by zs__manifest_from_json. */
static zs_status try_manifest_edit(const char *path, struct json_object *value) {
    struct json_object *root = json_tokener_parse(g_good_manifest);
    ZT_REQUIRE(root != NULL);
    char buffer[256];
    snprintf(buffer, sizeof buffer, "%s", path);
    struct json_object *parent = root;
    char *segment = buffer, *dot;
    while ((dot = strchr(segment, '.')) != NULL) {
        *dot = '\0';
        struct json_object *next = NULL;
        if (json_object_is_type(parent, json_type_array))
            next = json_object_array_get_idx(parent, (size_t)atoi(segment));
        else
            json_object_object_get_ex(parent, segment, &next);
        ZT_REQUIRE(next != NULL);
        parent = next;
        segment = dot + 1;
    }
    if (json_object_is_type(parent, json_type_array)) {
        if (value)
            json_object_array_put_idx(parent, (size_t)atoi(segment), value);
        else
            json_object_array_del_idx(parent, (size_t)atoi(segment), 1);
    } else if (value) {
        json_object_object_add(parent, segment, value);
    } else {
        json_object_object_del(parent, segment);
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    zs__manifest *m = NULL;
    zs_status status = zs__manifest_from_json(text, strlen(text), "step/manifest.json", &m);
    zs__manifest_free(m);
    json_object_put(root);
    return status;
}

/* The good manifest with the first `from` replaced by `to`, parsed. */
static zs_status try_manifest_text(const char *from, const char *to) {
    const char *at = strstr(g_good_manifest, from);
    ZT_REQUIRE(at != NULL);
    size_t head = (size_t)(at - g_good_manifest), from_len = strlen(from), to_len = strlen(to);
    size_t size = g_good_bytes - from_len + to_len;
    char *text = malloc(size + 1);
    ZT_REQUIRE(text != NULL);
    memcpy(text, g_good_manifest, head);
    memcpy(text + head, to, to_len);
    memcpy(text + head + to_len, at + from_len, g_good_bytes - head - from_len + 1);
    zs__manifest *m = NULL;
    zs_status status = zs__manifest_from_json(text, size, "step/manifest.json", &m);
    zs__manifest_free(m);
    free(text);
    return status;
}

#define EDIT(path, value, text) \
    ZT_FAILS_WITH(try_manifest_edit(path, value), ZS_ERR_INVALID_ARGUMENT, text)
#define TEXT(from, to, text) \
    ZT_FAILS_WITH(try_manifest_text(from, to), ZS_ERR_INVALID_ARGUMENT, text)

static void test_manifest_hostile(void) {
    /* The unchanged document parses through both helpers. */
    ZT_OK(try_manifest_edit("step", json_object_new_int64(1234)));
    ZT_OK(try_manifest_text("\"step\": 1234", "\"step\":1234"));

    /* Version first, and strictly. */
    EDIT("version", json_object_new_int64(2), "unsupported version 2");
    EDIT("version", NULL, "missing field \"version\"");
    EDIT("version", json_object_new_string("1"), "version must be an integer");
    TEXT("\"version\": 1", "\"version\": 2, \"brand_new_field\": {}", "unsupported version 2");
    EDIT("format", json_object_new_string("safetensors"), "format is not");
    EDIT("format", json_object_new_int64(1), "format is not");

    /* Fields: unknown, missing, wrong JSON type. */
    EDIT("extra", json_object_new_int64(1), "manifest has an unknown field");
    EDIT("tensors.0.bogus", json_object_new_int64(1), "tensors[0] has an unknown field");
    EDIT("scaler.loss", json_object_new_int64(1), "scaler has an unknown field");
    EDIT("step", NULL, "missing field \"step\"");
    EDIT("files.1.xxh3", NULL, "missing field \"xxh3\" in files[1]");
    EDIT("params.2.shape", NULL, "missing field \"shape\" in params[2]");
    EDIT("step", json_object_new_string("5"), "step must be an integer");
    EDIT("step", json_object_new_double(5.0), "step must be an integer");
    EDIT("step", json_object_new_int64(-1), "manifest.step is out of range");
    EDIT("units", json_object_new_string("x"), "units must be an array");
    EDIT("units.0", json_object_new_string("block0"), "units[0] must be an object");
    EDIT("scaler", json_object_new_int64(3), "scaler must be an object");
    EDIT("scaler.scale", json_object_new_string("big"), "scale must be a number");
    EDIT("scaler.scale", json_object_new_double(-1.0), "scaler state out of range");
    EDIT("scaler.scale", json_object_new_int64(0), "scaler state out of range");
    EDIT("scaler.last_overflow_iter", json_object_new_int64(-2), "out of range");
    EDIT("params.0.shape", json_object_new_int64(3), "shape must be an array");
    EDIT("params.0.shape", json_object_new_array(), "shape must be an array of 1..8");
    EDIT("params.0.shape.0", json_object_new_int64(-3), "shape[0] must be a positive integer");
    EDIT("params.0.shape.0", json_object_new_int64(0), "shape[0] must be a positive integer");
    EDIT("params.0.name", json_object_new_int64(7), "params[0].name must be a string");
    EDIT("tensors.0.offset", json_object_new_double(1.5), "tensors[0].offset must be an integer");
    EDIT("tensors.0.state", json_object_new_string("weird"), "is not a known value");
    EDIT("compute_dtype", json_object_new_string("fp64"), "manifest.compute_dtype is not a known value");
    EDIT("optimizer", json_object_new_string("lion"), "manifest.optimizer is not a known value");
    EDIT("optimizer", json_object_new_int64(2), "optimizer must be a string");
    EDIT("world_size", json_object_new_int64(0), "manifest.world_size is out of range");
    EDIT("world_size", json_object_new_int64(1LL << 40), "world_size");
    EDIT("stage", json_object_new_int64(4), "manifest.stage is out of range");

    /* Hashes: exactly 16 lowercase hex digits. */
    EDIT("config_hash", json_object_new_string("xyz"), "16 lowercase hex digits");
    EDIT("config_hash", json_object_new_string("FEDCBA9876543210"), "16 lowercase hex digits");
    EDIT("config_hash", json_object_new_string("fedcba987654321"), "16 lowercase hex digits");
    EDIT("config_hash", json_object_new_string("fedcba98765432100"), "16 lowercase hex digits");
    EDIT("config_hash", json_object_new_string("0x00000000000000"), "16 lowercase hex digits");
    EDIT("files.0.xxh3", json_object_new_int64(5), "files[0].xxh3 must be a hash");
    EDIT("tensors.3.xxh3", json_object_new_string(" 000000000000000"), "hex digits");

    /* Indices and ranges. */
    EDIT("tensors.0.file", json_object_new_int64(99), "file index 99 is out of range");
    EDIT("tensors.0.file", json_object_new_int64(-1), "out of range");
    EDIT("tensors.0.param", json_object_new_int64(3), "param index 3 is out of range");
    EDIT("params.1.unit", json_object_new_int64(2), "unit index 2 is out of range");
    EDIT("files.1.rank", json_object_new_int64(2), "rank 2 is out of range [0, world_size 2)");
    EDIT("tensors.0.offset", json_object_new_int64(INT64_MAX), "exceed params[0]");
    EDIT("tensors.0.count", json_object_new_int64(INT64_MAX), "exceed params[0]");
    EDIT("tensors.0.count", json_object_new_int64(13), "exceed params[0]");
    EDIT("tensors.0.count", json_object_new_int64(-1), "tensors[0].count is out of range");
    TEXT("\"step\": 1234", "\"step\": 99999999999999999999", "64-bit range");
    TEXT("\"offset\": 7", "\"offset\": 9223372036854775808", "64-bit range");

    /* Coverage: overlap, gap, short, missing master. */
    EDIT("tensors.1.offset", json_object_new_int64(6),
         "params[0] master: tensors[0] and tensors[1] overlap");
    EDIT("tensors.1.count", json_object_new_int64(4), "elements [11, 12) are missing");
    {
        /* [0, 7) then [8, 12): element 7 is in no tensor. */
        struct json_object *root = json_tokener_parse(g_good_manifest);
        struct json_object *t1 = json_object_array_get_idx(
            json_object_object_get(root, "tensors"), 1);
        json_object_object_add(t1, "offset", json_object_new_int64(8));
        json_object_object_add(t1, "count", json_object_new_int64(4));
        const char *text = json_object_to_json_string(root);
        zs__manifest *m = NULL;
        ZT_FAILS_WITH(zs__manifest_from_json(text, strlen(text), "gap", &m),
                      ZS_ERR_INVALID_ARGUMENT, "elements [7, 8) are missing");
        json_object_put(root);
    }
    EDIT("tensors.6.offset", json_object_new_int64(0), "exp_avg");
    EDIT("tensors.4", NULL, "params[2] has no master");
    EDIT("tensors.4.state", json_object_new_string("exp_avg"), "belongs in optim files");
    EDIT("tensors.5.state", json_object_new_string("master"), "belongs in master files");
    EDIT("tensors.0.file", json_object_new_int64(2), "belongs in master files");
    EDIT("tensors.9.file", json_object_new_int64(0), "belongs in user files");
    EDIT("tensors.9.param", json_object_new_int64(0), "must have param -1 and offset 0");
    EDIT("tensors.9.offset", json_object_new_int64(3), "must have param -1 and offset 0");
    EDIT("tensors.5.param", json_object_new_int64(-1), "param index -1 is out of range");

    /* Names. */
    EDIT("files.1.name", json_object_new_string("../x"), "files[1]: the file name");
    EDIT("files.1.name", json_object_new_string("a/b"), "outside [A-Za-z0-9._-]");
    EDIT("files.1.name", json_object_new_string("."), "is \".\"");
    EDIT("files.1.name", json_object_new_string(""), "is empty");
    EDIT("files.1.name", json_object_new_string("r\xc3\xa9.safetensors"), "outside");
    EDIT("files.1.name",
         json_object_new_string("a123456789012345678901234567890123456789012345678901234567890123"),
         "longer than 63");
    EDIT("files.1.name", json_object_new_string(k_file_names[0]), "file entries 0 and 1 have the same name");
    EDIT("params.0.name", json_object_new_string("a/b"), "contains '/'");
    EDIT("params.0.name", json_object_new_string("a..b"), "contains \"..\"");
    EDIT("params.0.name", json_object_new_string(""), "is empty");
    EDIT("params.0.name", json_object_new_string_len("a\0b", 3), "contains a NUL byte");
    EDIT("params.1.name", json_object_new_string("w0"), "parameter entries 0 and 1 have the same name");
    EDIT("units.1.name", json_object_new_string("block0"), "unit entries 0 and 1 have the same name");
    EDIT("tensors.2.key", json_object_new_string("w0"), "tensor key (in one file) entries 0 and 2 have the same name");
    EDIT("tensors.2.key", json_object_new_string("x/y"), "contains '/'");
    EDIT("params.0.flags", json_object_new_int64(4), "unknown flags 0x4");
    EDIT("params.0.flags", json_object_new_int64(-1), "out of range");
    {
        char big[600];
        memset(big, 'k', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        EDIT("tensors.2.key", json_object_new_string(big), "longer than");
        big[ZS_CKPT_NAME_MAX + 1] = '\0';
        EDIT("params.0.name", json_object_new_string(big), "longer than 255");
    }

    /* Not JSON, or not only JSON. */
    TEXT("\"step\": 1234", "\"step\": 1234, \"step\": 1235", "duplicate key");
    TEXT("\"scale\"", "\"scale\": 1, \"scale\"", "duplicate key");
    TEXT("\"step\": 1234", "\"step\": 1234,", "not valid JSON");
    TEXT("\"step\": 1234", "'step': 1234", "unexpected character");
    TEXT("\"step\": 1234", "\"step\": 01234", "leading zero");
    TEXT("\"scale\": 0.1", "\"scale\": NaN", "unexpected character");
    TEXT("\"scale\": 0.1", "\"scale\": Infinity", "unexpected character");
    TEXT("\"block0\"", "\"block\\u0000\"", "NUL");
    TEXT("\"step\"", "\"st\\u0000ep\"", "a key contains \\u0000");
    {
        size_t n = g_good_bytes;
        char *text = malloc(n + 3);
        ZT_REQUIRE(text != NULL);
        memcpy(text, g_good_manifest, n);
        memcpy(text + n, "{}", 3);
        zs__manifest *m = NULL;
        ZT_FAILS_WITH(zs__manifest_from_json(text, n + 2, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "m.json: manifest has trailing bytes");
        /* A NUL inside the given length is not the end of the text. */
        text[n] = '\0';
        ZT_FAILS_WITH(zs__manifest_from_json(text, n + 1, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "trailing bytes");
        ZT_OK(zs__manifest_from_json(text, n, "m.json", &m));
        zs__manifest_free(m);
        m = NULL;
        ZT_FAILS_WITH(zs__manifest_from_json(text, (size_t)ZS_CKPT_MANIFEST_MAX + 1, "m.json", &m),
                      ZS_ERR_INVALID_ARGUMENT, "more than the limit");
        ZT_FAILS_WITH(zs__manifest_from_json(text, 1, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "ends before");
        ZT_FAILS_WITH(zs__manifest_from_json("", 0, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "not a JSON object");
        ZT_FAILS_WITH(zs__manifest_from_json("[1]", 3, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "not a JSON object");
        ZT_FAILS_WITH(zs__manifest_from_json("{}", 2, "m.json", &m), ZS_ERR_INVALID_ARGUMENT,
                      "missing field \"version\"");
        ZT_CHECK(m == NULL);
        free(text);
    }
}

/* ================================================================ fs */

static void test_fs(void) {
    const char *d = path_of("fsdir");
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", d);
    ZT_OK(zt_fs_mkdir(dir));
    ZT_OK(zt_fs_mkdir(dir));
    ZT_CHECK(zs__fs_is_dir(dir) && !zt_fs_is_file(dir));
    ZT_OK(zs__fs_fsync_dir(dir));

    ZT_OK(zt_fs_write_atomic(dir, "m.json", "hello", 5));
    char path[2200];
    snprintf(path, sizeof path, "%s/m.json", dir);
    ZT_CHECK(zt_fs_is_file(path) && !zs__fs_is_dir(path));
    char *data = NULL;
    size_t bytes = 0;
    ZT_OK(zt_fs_read_file(path, 100, &data, &bytes));
    ZT_CHECK(bytes == 5 && data && memcmp(data, "hello", 6) == 0);
    free(data);
    ZT_OK(zt_fs_write_atomic(dir, "m.json", "bye!!!", 6));
    ZT_OK(zt_fs_read_file(path, 100, &data, &bytes));
    ZT_CHECK(bytes == 6 && data && strcmp(data, "bye!!!") == 0);
    free(data);
    ZT_OK(zt_fs_write_atomic(dir, "empty", NULL, 0));
    ZT_FAILS_WITH(zt_fs_read_file(path, 5, &data, &bytes), ZS_ERR_INVALID_ARGUMENT,
                  "larger than the limit");
    ZT_CHECK(data == NULL);
    ZT_FAILS_WITH(zt_fs_read_file(dir, 5, &data, &bytes), ZS_ERR_INVALID_ARGUMENT,
                  "not a regular file");
    ZT_FAILS_WITH(zt_fs_write_atomic(dir, "a/b", "x", 1), ZS_ERR_INVALID_ARGUMENT, "a/b");
    ZT_FAILS_WITH(zt_fs_write_atomic(dir, "..", "x", 1), ZS_ERR_INVALID_ARGUMENT, "..");
    ZT_FAILS_WITH(zt_fs_write_atomic("/nonexistent-zs-dir", "x", "x", 1), ZS_ERR_IO,
                  "/nonexistent-zs-dir: cannot open");
    ZT_FAILS_WITH(zt_fs_mkdir(path), ZS_ERR_IO, "not a directory");
    ZT_FAILS_WITH(zs__fs_fsync_dir(path), ZS_ERR_IO, "m.json");

    /* Listing is sorted and shows no temporary left behind. */
    ZT_OK(zt_fs_write_atomic(dir, "c", "3", 1));
    ZT_OK(zt_fs_write_atomic(dir, "a", "1", 1));
    ZT_OK(zt_fs_write_atomic(dir, "b", "2", 1));
    char **names = NULL;
    int count = 0;
    ZT_OK(zt_fs_list(dir, &names, &count));
    const char *expect[] = {"a", "b", "c", "empty", "m.json"};
    ZT_EQ_INT(count, 5);
    for (int k = 0; k < count && k < 5; k++)
        ZT_CHECK_MSG(strcmp(names[k], expect[k]) == 0, "entry %d: %s", k, names[k]);
    zs__fs_list_free(names, count);
    zs__fs_list_free(NULL, 0);
    ZT_FAILS_WITH(zt_fs_list(path_of("absent"), &names, &count), ZS_ERR_IO, "absent");

    /* Renames. */
    char from[2300], to[2300];
    snprintf(from, sizeof from, "%s/c", dir);
    snprintf(to, sizeof to, "%s/d", dir);
    ZT_OK(zs__fs_rename(from, to));
    ZT_CHECK(zt_fs_is_file(to) && !zt_fs_is_file(from));
    ZT_FAILS_WITH(zs__fs_rename(from, to), ZS_ERR_IO, "/c: cannot rename");

    /* remove_dir refuses a subdirectory and a symlink, and leaves all in place. */
    char sub[2300], link_path[2300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ZT_OK(zt_fs_mkdir(sub));
    ZT_FAILS_WITH(zt_fs_remove_dir(dir), ZS_ERR_IO, "refusing to remove");
    ZT_CHECK(zt_fs_is_file(path) && zs__fs_is_dir(sub));
    ZT_CHECK(rmdir(sub) == 0);
    snprintf(link_path, sizeof link_path, "%s/link", dir);
    ZT_CHECK(symlink(path, link_path) == 0);
    ZT_FAILS_WITH(zt_fs_remove_dir(dir), ZS_ERR_IO, "refusing to remove");
    ZT_CHECK(zt_fs_is_file(path));
    ZT_CHECK(unlink(link_path) == 0);
    /* A symlink to a directory is not removed through. */
    const char *alias = path_of("fsalias");
    ZT_CHECK(symlink(dir, alias) == 0);
    ZT_FAILS_WITH(zt_fs_remove_dir(alias), ZS_ERR_IO, "not a directory");
    ZT_CHECK(unlink(alias) == 0);
    ZT_CHECK(zt_fs_is_file(path));
    /* Only regular files: removed. */
    ZT_OK(zt_fs_remove_dir(dir));
    ZT_CHECK(!zs__fs_is_dir(dir));
    ZT_FAILS_WITH(zt_fs_remove_dir(dir), ZS_ERR_IO, "fsdir");
    ZT_FAILS_WITH(zs__fs_fsync_dir(dir), ZS_ERR_IO, "fsdir");
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/zs_test_formats.XXXXXX", base && *base ? base : "/tmp");
    ZT_REQUIRE(mkdtemp(g_dir) != NULL);

    test_st_roundtrip();
    test_st_writer_rejects();
    test_st_write_at();
    test_st_flips_and_truncations();
    test_st_crafted();
    test_manifest_roundtrip();
    test_manifest_frozen_base();
    ZT_REQUIRE(g_good_manifest != NULL);
    test_manifest_hostile();
    free(g_good_manifest);
    test_fs();

    /* Only regular files remain (crafted.safetensors and the like). */
    ZT_OK(zt_fs_remove_dir(g_dir));
    return zt_finish("test_formats");
}
