/* ex_data — token streams, views, sampling and the unigram baseline (see
 * ex_data.h for the formats and the contracts). */
#include "ex_data.h"
#include "ex_error.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* llm.c's token shards: 256 int32 of header, then the tokens: uint16 in
 * GPT-2's format, uint32 in the Llama 3 one (llm.c's dev/data). */
#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD32_MAGIC 20240801
#define SHARD32_VERSION 7
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

/* One mapped file. Its tokens are stream indices [first, first + count). */
typedef struct ex_file {
    char *path;
    void *map;               /* the whole file, PROT_READ; NULL when length 0 */
    size_t map_len;
    const unsigned char *data; /* the first token: bytes, little-endian uint16 or uint32 */
    int64_t first;
    int64_t count;
} ex_file;

struct ex_tokens {
    int bytes_per_token; /* 1: raw text; llm.c shards: 2 (GPT-2's format) or 4 (Llama 3's) */
    int num_files;
    ex_file *files;    /* [num_files], in stream order */
    int64_t count;
    int max_token;       /* -1 until ex_tokens_max_token computes it */
};


static int32_t read_le_i32(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return (int32_t)u; /* two's complement on every platform we build for */
}

/* Token k of the file. A 32-bit token above INT32_MAX is no id of any
 * vocabulary: it reads as INT32_MAX, which every model's vocabulary check
 * then refuses (a negative id would slip past it). */
static inline int file_token(const ex_file *f, int bytes_per_token, int64_t k) {
    if (bytes_per_token == 1) return f->data[k];
    if (bytes_per_token == 2) {
        const unsigned char *p = f->data + 2 * k;
        return (int)p[0] | (int)p[1] << 8;
    }
    const unsigned char *p = f->data + 4 * k;
    const uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24;
    return u > (uint32_t)INT32_MAX ? INT32_MAX : (int)u;
}

/* ------------------------------------------------------------------ open */

/* Maps f->path read-only after checking it is a regular file; for shards
 * (*bytes_per_token != 1), validates the header against the size and sets
 * *bytes_per_token from its format: 2 or 4, which must equal a width already
 * set by an earlier file of the stream (nonzero). Fills everything but
 * f->first. */
static int map_file(ex_file *f, int *bytes_per_token, char *err, size_t err_cap) {
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) return ex_fail(err, err_cap, "cannot open %s: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ex_fail(err, err_cap, "cannot stat %s: %s", f->path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ex_fail(err, err_cap, "%s is not a regular file", f->path);
    }
    int64_t size = (int64_t)st.st_size;
    int64_t header = 0, count = size;
    if (*bytes_per_token != 1) {
        unsigned char h[SHARD_HEADER_BYTES];
        if (size < SHARD_HEADER_BYTES) {
            close(fd);
            return ex_fail(err, err_cap,
                        "%s: truncated header: the file has %lld bytes, an llm.c token shard "
                        "starts with a %d-byte header",
                        f->path, (long long)size, SHARD_HEADER_BYTES);
        }
        ssize_t got;
        do {
            got = pread(fd, h, sizeof h, 0);
        } while (got < 0 && errno == EINTR);
        if (got != (ssize_t)sizeof h) {
            int e = errno;
            close(fd);
            return ex_fail(err, err_cap, "%s: cannot read the header at byte offset 0: %s", f->path,
                        got < 0 ? strerror(e) : "short read");
        }
        int32_t magic = read_le_i32(h), version = read_le_i32(h + 4), n = read_le_i32(h + 8);
        if (magic != SHARD_MAGIC && magic != SHARD32_MAGIC) {
            close(fd);
            const char *hint = magic == 20240326   ? " (that is llm.c's model file magic)"
                               : magic == 20240328 ? " (that is llm.c's tokenizer file magic)"
                                                   : "";
            return ex_fail(err, err_cap,
                        "%s: bad magic %d at byte offset 0%s; an llm.c token shard has %d "
                        "(GPT-2's uint16 tokens) or %d (Llama 3's uint32 tokens)",
                        f->path, (int)magic, hint, SHARD_MAGIC, SHARD32_MAGIC);
        }
        const int wide = magic == SHARD32_MAGIC;
        if (version != (wide ? SHARD32_VERSION : SHARD_VERSION)) {
            close(fd);
            return ex_fail(err, err_cap,
                        "%s: unsupported version %d at byte offset 4; a token shard with magic "
                        "%d has version %d (%s tokens)",
                        f->path, (int)version, (int)magic,
                        wide ? SHARD32_VERSION : SHARD_VERSION, wide ? "uint32" : "uint16");
        }
        const int width = wide ? 4 : 2;
        if (*bytes_per_token != 0 && *bytes_per_token != width) {
            close(fd);
            return ex_fail(err, err_cap,
                        "%s: a token shard of %s tokens in a stream whose earlier shards hold "
                        "%s tokens; one stream is one format (one tokenizer)",
                        f->path, wide ? "uint32" : "uint16", wide ? "uint16" : "uint32");
        }
        *bytes_per_token = width;
        if (n < 0) {
            close(fd);
            return ex_fail(err, err_cap, "%s: negative token count %d at byte offset 8", f->path,
                        (int)n);
        }
        /* n < 2^31, so 1024 + 4 n cannot overflow int64; checked all the same
         * so that the rule holds if the count ever widens. */
        int64_t want;
        if (__builtin_mul_overflow((int64_t)n, (int64_t)width, &want) ||
            __builtin_add_overflow(want, (int64_t)SHARD_HEADER_BYTES, &want)) {
            close(fd);
            return ex_fail(err, err_cap, "%s: token count %d at byte offset 8 overflows the size",
                        f->path, (int)n);
        }
        if (size < want) {
            close(fd);
            return ex_fail(err, err_cap,
                        "%s: truncated: the header (byte offset 8) declares %d tokens, which need "
                        "%lld bytes, but the file has %lld (the data ends at byte offset %lld)",
                        f->path, (int)n, (long long)want, (long long)size, (long long)size);
        }
        if (size > want) {
            close(fd);
            return ex_fail(err, err_cap,
                        "%s: the header (byte offset 8) declares %d tokens, which end at byte "
                        "offset %lld, but the file has %lld bytes (%lld unexpected trailing "
                        "bytes)",
                        f->path, (int)n, (long long)want, (long long)size,
                        (long long)(size - want));
        }
        header = SHARD_HEADER_BYTES;
        count = n;
    }
    if ((uint64_t)size > (uint64_t)SIZE_MAX) {
        close(fd);
        return ex_fail(err, err_cap, "%s: %lld bytes do not fit in this process's address space",
                    f->path, (long long)size);
    }
    f->map = NULL;
    f->map_len = (size_t)size;
    if (size > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ex_fail(err, err_cap, "cannot map %s (%lld bytes): %s", f->path,
                        (long long)size, strerror(e));
        }
        /* No access advice: sampling reads windows at random places while
         * max_token and the baseline read whole files in order, so the
         * kernel's default read-ahead is the compromise. */
        f->map = m;
    }
    close(fd); /* the mapping stays valid */
    f->data = f->map ? (const unsigned char *)f->map + header : NULL;
    f->count = count;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Fills ts->files with the paths the stream reads (not yet mapped). */
static int list_files(ex_tokens *ts, const char *path, char *err, size_t err_cap) {
    int is_pattern = ts->bytes_per_token != 1 && strpbrk(path, "*?[") != NULL;
    if (!is_pattern) {
        ts->files = calloc(1, sizeof(ex_file));
        if (!ts->files || !(ts->files[0].path = strdup(path)))
            return ex_fail(err, err_cap, "out of memory opening %s", path);
        ts->num_files = 1;
        return 0;
    }
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc = glob(path, GLOB_ERR, NULL, &g); /* sorted: no GLOB_NOSORT */
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return ex_fail(err, err_cap, "no file matches the token shard pattern %s", path);
    }
    if (rc != 0) {
        globfree(&g);
        return ex_fail(err, err_cap, "cannot expand the token shard pattern %s: %s", path,
                    rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
    }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        globfree(&g);
        return ex_fail(err, err_cap, "the pattern %s matches too many files", path);
    }
    ts->files = calloc(g.gl_pathc, sizeof(ex_file));
    if (!ts->files) {
        globfree(&g);
        return ex_fail(err, err_cap, "out of memory opening %s", path);
    }
    for (size_t k = 0; k < g.gl_pathc; k++) {
        ts->files[k].path = strdup(g.gl_pathv[k]);
        if (!ts->files[k].path) {
            ts->num_files = (int)k;
            globfree(&g);
            return ex_fail(err, err_cap, "out of memory opening %s", path);
        }
    }
    ts->num_files = (int)g.gl_pathc;
    globfree(&g);
    return 0;
}

int ex_tokens_open(const char *path, ex_tokens **out, char *err, size_t err_cap) {
    if (!out) return ex_fail(err, err_cap, "ex_tokens_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return ex_fail(err, err_cap, "ex_tokens_open: empty path");
    ex_tokens *ts = calloc(1, sizeof *ts);
    if (!ts) return ex_fail(err, err_cap, "out of memory opening %s", path);
    /* Shards: 0 until the first file's header says 2 or 4. */
    ts->bytes_per_token = ends_with(path, ".bin") ? 0 : 1;
    ts->max_token = -1;
    if (list_files(ts, path, err, err_cap) != 0) goto fail;
    int64_t total = 0;
    for (int k = 0; k < ts->num_files; k++) {
        ex_file *f = &ts->files[k];
        if (map_file(f, &ts->bytes_per_token, err, err_cap) != 0) goto fail;
        f->first = total;
        if (__builtin_add_overflow(total, f->count, &total)) {
            ex_fail(err, err_cap, "%s: the stream's token count overflows int64 at this file",
                 f->path);
            goto fail;
        }
    }
    if (total == 0) {
        if (ts->bytes_per_token == 1)
            ex_fail(err, err_cap, "%s is empty: a text stream needs at least one byte", path);
        else
            ex_fail(err, err_cap, "%s: the token shards (%d file%s) hold no tokens", path,
                 ts->num_files, ts->num_files == 1 ? "" : "s");
        goto fail;
    }
    ts->count = total;
    *out = ts;
    return 0;
fail:
    ex_tokens_destroy(ts);
    return -1;
}

void ex_tokens_destroy(ex_tokens *ts) {
    if (!ts) return;
    for (int k = 0; k < ts->num_files; k++) {
        if (ts->files[k].map) munmap(ts->files[k].map, ts->files[k].map_len);
        free(ts->files[k].path);
    }
    free(ts->files);
    free(ts);
}

/* ------------------------------------------------------------- accessors */

int64_t ex_tokens_count(const ex_tokens *ts) { return ts->count; }

int ex_tokens_is_text(const ex_tokens *ts) { return ts->bytes_per_token == 1; }

int ex_tokens_num_files(const ex_tokens *ts) { return ts->num_files; }

const char *ex_tokens_file_path(const ex_tokens *ts, int k) {
    return k >= 0 && k < ts->num_files ? ts->files[k].path : NULL;
}

/* The file that holds stream token i (0 <= i < count): the last file that
 * starts at or before i. An empty file starts where the next one does, so it
 * is never that last file. O(log files). */
static int file_of(const ex_tokens *ts, int64_t i) {
    int lo = 0, hi = ts->num_files - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (ts->files[mid].first <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

int ex_tokens_at(const ex_tokens *ts, int64_t i) {
    if (i < 0 || i >= ts->count) return -1;
    const ex_file *f = &ts->files[file_of(ts, i)];
    return file_token(f, ts->bytes_per_token, i - f->first);
}

/* Copies tokens [first, first + count), which the caller has range-checked,
 * walking across file boundaries. */
static void copy_tokens(const ex_tokens *ts, int64_t first, int64_t count, int32_t *out) {
    if (count <= 0) return;
    int k = file_of(ts, first);
    while (count > 0) {
        const ex_file *f = &ts->files[k];
        int64_t at = first - f->first;
        int64_t n = f->count - at < count ? f->count - at : count;
        if (ts->bytes_per_token == 1) {
            for (int64_t j = 0; j < n; j++) out[j] = f->data[at + j];
        } else if (ts->bytes_per_token == 2) {
            const unsigned char *p = f->data + 2 * at;
            for (int64_t j = 0; j < n; j++) out[j] = (int32_t)p[2 * j] | (int32_t)p[2 * j + 1] << 8;
        } else {
            for (int64_t j = 0; j < n; j++) out[j] = file_token(f, 4, at + j);
        }
        out += n;
        first += n;
        count -= n;
        k++;
    }
}

int ex_tokens_read(const ex_tokens *ts, int64_t first, int64_t count, int32_t *out,
                     char *err, size_t err_cap) {
    if (first < 0 || count < 0 || first > ts->count || count > ts->count - first)
        return ex_fail(err, err_cap,
                    "ex_tokens_read: tokens [%lld, %lld + %lld) are not inside the stream of "
                    "%lld tokens (%s)",
                    (long long)first, (long long)first, (long long)count, (long long)ts->count,
                    ts->files[0].path);
    copy_tokens(ts, first, count, out);
    return 0;
}

/* Calls visit(ctx, f, lo, hi) for the part [lo, hi) (file-relative token
 * indices) of every file that [begin, end) covers, in stream order; stops and
 * returns -1 when visit does. Visitors loop over a file's tokens themselves,
 * so that the per-token work of a pass over a large stream stays inlined. */
typedef int (*chunk_visitor)(void *ctx, const ex_file *f, int bytes_per_token, int64_t lo,
                             int64_t hi);

static int visit_chunks(const ex_tokens *ts, int64_t begin, int64_t end, chunk_visitor visit,
                        void *ctx) {
    if (begin >= end) return 0;
    for (int k = file_of(ts, begin); k < ts->num_files && ts->files[k].first < end; k++) {
        const ex_file *f = &ts->files[k];
        int64_t lo = begin > f->first ? begin - f->first : 0;
        int64_t hi = end < f->first + f->count ? end - f->first : f->count;
        if (lo < hi && visit(ctx, f, ts->bytes_per_token, lo, hi) != 0) return -1;
    }
    return 0;
}

static int visit_max(void *ctx, const ex_file *f, int bytes_per_token, int64_t lo,
                     int64_t hi) {
    int *m = ctx;
    int best = *m;
    for (int64_t j = lo; j < hi; j++) {
        int t = file_token(f, bytes_per_token, j);
        best = t > best ? t : best;
    }
    *m = best;
    return 0;
}

int ex_tokens_max_token(ex_tokens *ts) {
    if (ts->max_token < 0) {
        int m = 0;
        visit_chunks(ts, 0, ts->count, visit_max, &m);
        ts->max_token = m;
    }
    return ts->max_token;
}

/* ----------------------------------------------------------------- views */

ex_view ex_view_all(const ex_tokens *ts) {
    ex_view v = {ts, 0, ts->count};
    return v;
}

int ex_view_range(const ex_tokens *ts, int64_t begin, int64_t end, ex_view *out,
                    char *err, size_t err_cap) {
    if (begin < 0 || begin > end || end > ts->count)
        return ex_fail(err, err_cap,
                    "view [%lld, %lld) is not a range of the stream of %lld tokens (%s)",
                    (long long)begin, (long long)end, (long long)ts->count, ts->files[0].path);
    out->tokens = ts;
    out->begin = begin;
    out->end = end;
    return 0;
}

int64_t ex_view_length(ex_view v) { return v.end - v.begin; }

int64_t ex_view_num_windows(ex_view v, int T) {
    if (T < 1) return -1;
    int64_t n = v.end - v.begin;
    return n > T ? (n - 1) / T : 0;
}

int ex_split(ex_view all, int T, double val_fraction, ex_view *train, ex_view *val,
               char *err, size_t err_cap) {
    if (T < 1) return ex_fail(err, err_cap, "ex_split: sequence length T = %d must be >= 1", T);
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return ex_fail(err, err_cap, "ex_split: val_fraction = %g must be in [0, 1)", val_fraction);
    int64_t n = all.end - all.begin;
    if (val_fraction == 0.0) {
        if (n <= T)
            return ex_fail(err, err_cap,
                        "the stream (%s) has %lld tokens: too few for one training window of "
                        "T + 1 = %lld tokens",
                        all.tokens->files[0].path, (long long)n, (long long)T + 1);
        *train = all;
        *val = all;
        val->begin = all.end;
        return 0;
    }
    /* n_val <= n since val_fraction < 1; the double is exact up to 2^53
     * tokens, far beyond any corpus here. */
    int64_t n_val = (int64_t)ceil(val_fraction * (double)n);
    int64_t k = n - 1 - n_val >= 0 ? (n - 1 - n_val) / T : 0;
    int64_t cut = all.begin + k * T + 1;
    if (k < 1)
        return ex_fail(err, err_cap,
                    "the stream (%s) has %lld tokens: after holding out %lld (val_fraction %g) "
                    "for validation, too few remain for one training window of T + 1 = %lld "
                    "tokens",
                    all.tokens->files[0].path, (long long)n, (long long)n_val, val_fraction,
                    (long long)T + 1);
    if (all.end - cut < (int64_t)T + 1)
        return ex_fail(err, err_cap,
                    "the stream (%s) has %lld tokens: the validation part (val_fraction %g) "
                    "would hold %lld tokens, fewer than one window of T + 1 = %lld; raise "
                    "val_fraction or give a validation file",
                    all.tokens->files[0].path, (long long)n, val_fraction,
                    (long long)(all.end - cut), (long long)T + 1);
    train->tokens = val->tokens = all.tokens;
    train->begin = all.begin;
    train->end = cut;
    val->begin = cut;
    val->end = all.end;
    return 0;
}

/* -------------------------------------------------------------- sampling */

/* splitmix64's output function: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

#define PERM_ROUNDS 8
#define GOLDEN UINT64_C(0x9e3779b97f4a7c15)

static uint64_t low_mask(int bits) { return (UINT64_C(1) << bits) - 1; } /* 1 <= bits <= 63 */

/* One pass of the network over [0, 2^bits), 2 <= bits <= 63. */
static uint64_t feistel(uint64_t x, int bits, uint64_t key) {
    for (int r = 0; r < PERM_ROUNDS; r++) {
        int w = (r % 2 == 0) ? bits / 2 : bits - bits / 2; /* width of the low part */
        int hw = bits - w;
        uint64_t lo = x & low_mask(w), hi = x >> w;
        uint64_t f = mix64(key ^ mix64(lo + (uint64_t)(r + 1) * GOLDEN)) & low_mask(hw);
        x = (lo << hw) | (hi ^ f);
    }
    return x;
}

int64_t ex_perm_index(uint64_t seed, uint64_t epoch, int64_t K, int64_t i) {
    if (K < 1 || i < 0 || i >= K) return -1;
    if (K == 1) return 0;
    int bits = 2;
    while (bits < 63 && (UINT64_C(1) << bits) < (uint64_t)K) bits++;
    /* The key depends on both, so that each epoch has its own order. */
    uint64_t key = mix64(mix64(seed + GOLDEN) ^ (epoch * UINT64_C(0xd1b54a32d192ed03)) ^ epoch);
    uint64_t x = (uint64_t)i;
    do {
        x = feistel(x, bits, key);
    } while (x >= (uint64_t)K);
    return (int64_t)x;
}

int64_t ex_sample_window(uint64_t seed, int64_t K, int64_t g) {
    if (K < 1 || g < 0) return -1;
    return ex_perm_index(seed, (uint64_t)(g / K), K, g % K);
}

/* Window w of v (the caller checked w < K): inputs [T], targets [T]. */
static void fill_window(ex_view v, int T, int64_t w, int32_t *inputs, int32_t *targets) {
    int64_t start = v.begin + w * T;
    copy_tokens(v.tokens, start, T, inputs);
    memcpy(targets, inputs + 1, sizeof(int32_t) * (size_t)(T - 1));
    targets[T - 1] = ex_tokens_at(v.tokens, start + T);
}

int ex_train_batch(ex_view train, int T, uint64_t seed, int64_t pos, int rank, int B,
                     int32_t *inputs, int32_t *targets, char *err, size_t err_cap) {
    if (T < 1 || B < 1 || rank < 0 || pos < 0)
        return ex_fail(err, err_cap,
                    "ex_train_batch: bad arguments T = %d, B = %d, rank = %d, pos = %lld "
                    "(need T >= 1, B >= 1, rank >= 0, pos >= 0)",
                    T, B, rank, (long long)pos);
    int64_t K = ex_view_num_windows(train, T);
    if (K < 1)
        return ex_fail(err, err_cap,
                    "the training view [%lld, %lld) of %s has %lld tokens: too few for one "
                    "window of T + 1 = %lld tokens",
                    (long long)train.begin, (long long)train.end, train.tokens->files[0].path,
                    (long long)(train.end - train.begin), (long long)T + 1);
    /* Rows are samples first .. first + B - 1; the last must fit in int64. */
    int64_t first, last;
    if (__builtin_mul_overflow((int64_t)rank, (int64_t)B, &first) ||
        __builtin_add_overflow(first, pos, &first) ||
        __builtin_add_overflow(first, (int64_t)B - 1, &last))
        return ex_fail(err, err_cap,
                    "ex_train_batch: sample numbers overflow int64 (pos = %lld, rank = %d, "
                    "B = %d)",
                    (long long)pos, rank, B);
    for (int64_t g = first; g <= last; g++) {
        int64_t b = g - first;
        int64_t w = ex_sample_window(seed, K, g);
        fill_window(train, T, w, inputs + (size_t)b * (size_t)T, targets + (size_t)b * (size_t)T);
    }
    return 0;
}

int ex_val_sample(ex_view val, int T, int64_t j, int32_t *inputs, int32_t *targets,
                    char *err, size_t err_cap) {
    if (T < 1) return ex_fail(err, err_cap, "ex_val_sample: T = %d must be >= 1", T);
    int64_t K = ex_view_num_windows(val, T);
    if (j < 0 || j >= K)
        return ex_fail(err, err_cap,
                    "validation sample %lld does not exist: the validation view [%lld, %lld) "
                    "of %s has %lld windows of T + 1 = %lld tokens",
                    (long long)j, (long long)val.begin, (long long)val.end,
                    val.tokens->files[0].path, (long long)K, (long long)T + 1);
    fill_window(val, T, j, inputs, targets);
    return 0;
}

/* -------------------------------------------------------------- baseline */

typedef struct count_ctx {
    int64_t *counts; /* [vocab] */
    int vocab;
    int bad_token;       /* the first token >= vocab, if any */
    const ex_file *bad_file;
    int64_t bad_at;      /* its index in bad_file */
} count_ctx;

static int visit_count(void *ctx, const ex_file *f, int bytes_per_token, int64_t lo,
                       int64_t hi) {
    count_ctx *c = ctx;
    int64_t *counts = c->counts;
    for (int64_t j = lo; j < hi; j++) {
        int t = file_token(f, bytes_per_token, j);
        if (t >= c->vocab) {
            c->bad_token = t;
            c->bad_file = f;
            c->bad_at = j;
            return -1;
        }
        counts[t]++;
    }
    return 0;
}

/* Counts the tokens of v into c->counts (zeroed first). */
static int count_view(ex_view v, count_ctx *c, const char *which, char *err, size_t err_cap) {
    memset(c->counts, 0, sizeof(int64_t) * (size_t)c->vocab);
    if (visit_chunks(v.tokens, v.begin, v.end, visit_count, c) != 0) {
        const ex_file *f = c->bad_file;
        return ex_fail(err, err_cap,
                    "%s: token id %d at token %lld of the file (stream token %lld, in the %s "
                    "view) is outside the vocabulary of %d",
                    f->path, c->bad_token, (long long)c->bad_at,
                    (long long)(f->first + c->bad_at), which, c->vocab);
    }
    return 0;
}

int ex_unigram_baseline(ex_view train, ex_view val, int vocab_size, ex_unigram *out,
                          char *err, size_t err_cap) {
    if (vocab_size < 1)
        return ex_fail(err, err_cap, "ex_unigram_baseline: vocab_size = %d must be >= 1",
                    vocab_size);
    int64_t n = train.end - train.begin, m = val.end - val.begin;
    if (n < 1) return ex_fail(err, err_cap, "ex_unigram_baseline: the training view is empty");
    int64_t *train_counts = calloc((size_t)vocab_size, sizeof(int64_t));
    int64_t *val_counts = calloc((size_t)vocab_size, sizeof(int64_t));
    int rc = -1;
    if (!train_counts || !val_counts) {
        ex_fail(err, err_cap, "ex_unigram_baseline: out of memory for %d counts", vocab_size);
        goto done;
    }
    count_ctx c = {train_counts, vocab_size, 0, NULL, 0};
    if (count_view(train, &c, "training", err, err_cap) != 0) goto done;
    c.counts = val_counts;
    if (m > 0 && count_view(val, &c, "validation", err, err_cap) != 0) goto done;

    /* Sums over the vocabulary, not the tokens: O(V) logs, whatever n is. */
    double h = 0.0, xent = 0.0;
    int distinct = 0;
    double log_n = log((double)n), log_smooth = log((double)n + (double)vocab_size);
    for (int t = 0; t < vocab_size; t++) {
        double ct = (double)train_counts[t];
        if (ct > 0) {
            h -= ct * (log(ct) - log_n); /* c ln(c / n), summed, then / n below */
            distinct++;
        }
        if (val_counts[t] > 0) xent -= (double)val_counts[t] * (log(ct + 1.0) - log_smooth);
    }
    out->train_entropy = h / (double)n;
    out->val_cross_entropy = m > 0 ? xent / (double)m : NAN;
    out->train_tokens = n;
    out->val_tokens = m;
    out->vocab_size = vocab_size;
    out->train_distinct = distinct;
    rc = 0;
done:
    free(train_counts);
    free(val_counts);
    return rc;
}
