/* gpt2_llmc — llm.c's GPT-2 model and tokenizer files (see gpt2_llmc.h for
 * the formats and the contracts). */
#include "gpt2_llmc.h"
#include "ex_error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define TOKENIZER_MAGIC 20240328
#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)


static uint32_t read_le_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads exactly n bytes at offset, looping over short reads and EINTR.
 * Returns 0, or -1 with errno set (0 for an early end of file) and *done the
 * bytes read before the failure. */
static int pread_full(int fd, void *buf, size_t n, int64_t offset, size_t *done) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30; /* well under SSIZE_MAX */
        ssize_t r = pread(fd, p + got, want, (off_t)(offset + (int64_t)got));
        if (r < 0) {
            if (errno == EINTR) continue;
            *done = got;
            return -1;
        }
        if (r == 0) {
            *done = got;
            errno = 0;
            return -1;
        }
        got += (size_t)r;
    }
    *done = got;
    return 0;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ------------------------------------------------------------------ model */

/* llm.c's tensors, in file order. */
enum {
    T_WTE, T_WPE, T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_ATTPROJW, T_ATTPROJB,
    T_LN2W, T_LN2B, T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_LNFW, T_LNFB, T_COUNT
};

/* Our per-layer names; suffix i is llm.c's tensor T_LN1W + i. */
#define LAYER_TENSORS 12
static const char *const layer_suffix[LAYER_TENSORS] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

struct gpt2_llmc_model {
    char *path;
    int fd;
    gpt2_llmc_config cfg;
    int64_t rows[T_COUNT];   /* one layer's (or the whole) tensor as [rows, cols] */
    int64_t cols[T_COUNT];   /* 1 for vectors */
    int64_t offset[T_COUNT]; /* byte offset of the tensor (layer 0) in the file */
};

/* [rows, cols] of llm.c tensor t for one layer (per-layer tensors) or whole. */
static void llmc_shape(const gpt2_llmc_config *cfg, int t, int64_t *rows, int64_t *cols) {
    int64_t C = cfg->channels;
    static const int row_mult[T_COUNT] = {0, 0, 1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1, 1, 1};
    static const int col_mult[T_COUNT] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0, 0, 0};
    *rows = t == T_WTE ? cfg->padded_vocab_size : t == T_WPE ? cfg->max_seq_len : row_mult[t] * C;
    *cols = col_mult[t] ? col_mult[t] * C : 1;
}

static int is_per_layer(int t) { return t >= T_LN1W && t <= T_FCPROJB; }

/* Fills rows, cols and offsets; returns the total element count, or -1 on
 * int64 overflow. */
static int64_t layout(const gpt2_llmc_config *cfg, int64_t rows[T_COUNT], int64_t cols[T_COUNT],
                      int64_t offset[T_COUNT]) {
    int64_t total = 0;
    for (int t = 0; t < T_COUNT; t++) {
        int64_t n;
        llmc_shape(cfg, t, &rows[t], &cols[t]);
        if (__builtin_mul_overflow(rows[t], cols[t], &n)) return -1;
        if (is_per_layer(t) && __builtin_mul_overflow(n, (int64_t)cfg->num_layers, &n)) return -1;
        int64_t bytes;
        if (__builtin_mul_overflow(total, (int64_t)4, &bytes) ||
            __builtin_add_overflow(bytes, (int64_t)HEADER_BYTES, &offset[t]))
            return -1;
        if (__builtin_add_overflow(total, n, &total)) return -1;
    }
    /* The file's size must be representable too. */
    int64_t bytes;
    if (__builtin_mul_overflow(total, (int64_t)4, &bytes) ||
        __builtin_add_overflow(bytes, (int64_t)HEADER_BYTES, &bytes))
        return -1;
    return total;
}

int64_t gpt2_llmc_file_param_count(const gpt2_llmc_config *cfg) {
    int64_t rows[T_COUNT], cols[T_COUNT], offset[T_COUNT];
    return layout(cfg, rows, cols, offset);
}

int gpt2_llmc_model_open(const char *path, gpt2_llmc_model **out, char *err, size_t err_cap) {
    if (!out) return ex_fail(err, err_cap, "gpt2_llmc_model_open: out is NULL");
    *out = NULL;
    if (!path) return ex_fail(err, err_cap, "gpt2_llmc_model_open: path is NULL");
    gpt2_llmc_model *m = calloc(1, sizeof *m);
    if (!m) return ex_fail(err, err_cap, "out of memory opening %s", path);
    m->fd = -1;
    if (!(m->path = strdup(path))) {
        free(m);
        return ex_fail(err, err_cap, "out of memory opening %s", path);
    }
    m->fd = open(path, O_RDONLY);
    if (m->fd < 0) {
        ex_fail(err, err_cap, "cannot open the llm.c model file %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(m->fd, &st) != 0) {
        ex_fail(err, err_cap, "cannot stat %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        ex_fail(err, err_cap, "%s is not a regular file", path);
        goto fail;
    }
    int64_t size = (int64_t)st.st_size;
    if (size < HEADER_BYTES) {
        ex_fail(err, err_cap,
             "%s: truncated header: the file has %lld bytes, an llm.c model file starts with a "
             "%d-byte header",
             path, (long long)size, HEADER_BYTES);
        goto fail;
    }
    unsigned char h[HEADER_BYTES];
    size_t done;
    if (pread_full(m->fd, h, sizeof h, 0, &done) != 0) {
        ex_fail(err, err_cap, "%s: cannot read the header at byte offset %zu: %s", path, done,
             errno ? strerror(errno) : "unexpected end of file");
        goto fail;
    }
    int32_t hdr[8];
    for (int k = 0; k < 8; k++) hdr[k] = (int32_t)read_le_u32(h + 4 * k);
    if (hdr[0] != MODEL_MAGIC) {
        const char *hint = hdr[0] == 20240520   ? " (that is llm.c's token shard magic)"
                           : hdr[0] == TOKENIZER_MAGIC ? " (that is llm.c's tokenizer file magic)"
                                                       : "";
        ex_fail(err, err_cap, "%s: bad magic %d at byte offset 0%s; an llm.c GPT-2 model file has %d",
             path, (int)hdr[0], hint, MODEL_MAGIC);
        goto fail;
    }
    if (hdr[1] == MODEL_VERSION_BF16) {
        ex_fail(err, err_cap,
             "%s: version 5 (bf16 parameters) at byte offset 4 is not supported; use the fp32 "
             "file (version 3, e.g. gpt2_124M.bin rather than gpt2_124M_bf16.bin)",
             path);
        goto fail;
    }
    if (hdr[1] != MODEL_VERSION_FP32) {
        ex_fail(err, err_cap,
             "%s: unsupported version %d at byte offset 4; only version 3 (fp32 parameters, "
             "padded vocabulary) is supported",
             path, (int)hdr[1]);
        goto fail;
    }
    static const char *const field[8] = {"magic",      "version",   "max_seq_len",
                                         "vocab_size", "num_layers", "num_heads",
                                         "channels",   "padded_vocab_size"};
    for (int k = 2; k < 8; k++) {
        if (hdr[k] <= 0) {
            ex_fail(err, err_cap, "%s: %s = %d at byte offset %d must be positive", path, field[k],
                 (int)hdr[k], 4 * k);
            goto fail;
        }
    }
    m->cfg.max_seq_len = hdr[2];
    m->cfg.vocab_size = hdr[3];
    m->cfg.num_layers = hdr[4];
    m->cfg.num_heads = hdr[5];
    m->cfg.channels = hdr[6];
    m->cfg.padded_vocab_size = hdr[7];
    if (m->cfg.channels % m->cfg.num_heads != 0) {
        ex_fail(err, err_cap, "%s: channels = %d (byte offset 24) is not a multiple of num_heads = %d "
             "(byte offset 20)", path, m->cfg.channels, m->cfg.num_heads);
        goto fail;
    }
    if (m->cfg.padded_vocab_size < m->cfg.vocab_size) {
        ex_fail(err, err_cap, "%s: padded_vocab_size = %d (byte offset 28) is smaller than "
             "vocab_size = %d (byte offset 12)", path, m->cfg.padded_vocab_size,
             m->cfg.vocab_size);
        goto fail;
    }
    int64_t total = layout(&m->cfg, m->rows, m->cols, m->offset);
    if (total < 0) {
        ex_fail(err, err_cap, "%s: the header's sizes (L = %d, C = %d, maxT = %d, Vp = %d) give a "
             "parameter count that overflows int64", path, m->cfg.num_layers, m->cfg.channels,
             m->cfg.max_seq_len, m->cfg.padded_vocab_size);
        goto fail;
    }
    int64_t want = HEADER_BYTES + 4 * total; /* checked in layout() */
    if (size != want) {
        ex_fail(err, err_cap,
             "%s: size mismatch: the header (L = %d, C = %d, heads = %d, maxT = %d, V = %d, "
             "Vp = %d) implies %lld parameters, i.e. %lld bytes, but the file has %lld bytes",
             path, m->cfg.num_layers, m->cfg.channels, m->cfg.num_heads, m->cfg.max_seq_len,
             m->cfg.vocab_size, m->cfg.padded_vocab_size, (long long)total, (long long)want,
             (long long)size);
        goto fail;
    }
    *out = m;
    return 0;
fail:
    gpt2_llmc_model_destroy(m);
    return -1;
}

void gpt2_llmc_model_destroy(gpt2_llmc_model *m) {
    if (!m) return;
    if (m->fd >= 0) close(m->fd);
    free(m->path);
    free(m);
}

const gpt2_llmc_config *gpt2_llmc_model_config(const gpt2_llmc_model *m) { return &m->cfg; }

int gpt2_llmc_num_tensors(const gpt2_llmc_config *cfg) {
    return 4 + LAYER_TENSORS * cfg->num_layers;
}

/* Our tensor k as (llm.c tensor, layer or -1). */
static void tensor_of_index(int k, int *t, int *layer) {
    static const int head[4] = {T_WTE, T_WPE, T_LNFW, T_LNFB};
    if (k < 4) {
        *t = head[k];
        *layer = -1;
    } else {
        *t = T_LN1W + (k - 4) % LAYER_TENSORS;
        *layer = (k - 4) / LAYER_TENSORS;
    }
}

/* [rows, cols] of our tensor for llm.c tensor t: wte loses its padding rows. */
static void our_shape(const gpt2_llmc_config *cfg, int t, int64_t *rows, int64_t *cols) {
    llmc_shape(cfg, t, rows, cols);
    if (t == T_WTE) *rows = cfg->vocab_size;
}

static int tensor_name(int t, int layer, char *name, size_t cap) {
    int n;
    switch (t) {
    case T_WTE: n = snprintf(name, cap, "transformer.wte.weight"); break;
    case T_WPE: n = snprintf(name, cap, "transformer.wpe.weight"); break;
    case T_LNFW: n = snprintf(name, cap, "transformer.ln_f.weight"); break;
    case T_LNFB: n = snprintf(name, cap, "transformer.ln_f.bias"); break;
    default: n = snprintf(name, cap, "transformer.h.%d.%s", layer, layer_suffix[t - T_LN1W]);
    }
    return n >= 0 && (size_t)n < cap ? 0 : -1;
}

int64_t gpt2_llmc_tensor_info(const gpt2_llmc_config *cfg, int k, char *name, size_t name_cap,
                              int64_t shape[2], int *ndim) {
    if (k < 0 || k >= gpt2_llmc_num_tensors(cfg)) return -1;
    int t, layer;
    tensor_of_index(k, &t, &layer);
    if (tensor_name(t, layer, name, name_cap) != 0) return -1;
    our_shape(cfg, t, &shape[0], &shape[1]);
    if (ndim) {
        /* Decided by the tensor, not by its sizes: wpe is a matrix even when
         * C = 1. */
        static const int is_matrix[T_COUNT] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
        *ndim = is_matrix[t] ? 2 : 1;
    }
    return shape[0] * shape[1];
}

/* Parses one of our names into (llm.c tensor, layer or -1). Returns 0, -1 for
 * an unknown name, -2 for a layer index outside [0, L) (*layer is then the
 * index, or INT_MAX when it does not fit). */
static int parse_name(const gpt2_llmc_config *cfg, const char *name, int *t, int *layer) {
    static const struct { const char *name; int t; } top[] = {
        {"transformer.wte.weight", T_WTE},
        {"transformer.wpe.weight", T_WPE},
        {"transformer.ln_f.weight", T_LNFW},
        {"transformer.ln_f.bias", T_LNFB},
    };
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++) {
        if (strcmp(name, top[k].name) == 0) {
            *t = top[k].t;
            *layer = -1;
            return 0;
        }
    }
    static const char prefix[] = "transformer.h.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    const char *p = name + sizeof prefix - 1;
    /* Decimal without leading zeros, so that every tensor has one name. */
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
    long long l = 0;
    while (*p >= '0' && *p <= '9') {
        if (l <= INT_MAX) l = l * 10 + (*p - '0');
        p++;
    }
    if (*p != '.') return -1;
    p++;
    for (int i = 0; i < LAYER_TENSORS; i++) {
        if (strcmp(p, layer_suffix[i]) == 0) {
            *t = T_LN1W + i;
            *layer = l > INT_MAX ? INT_MAX : (int)l;
            return l < cfg->num_layers ? 0 : -2;
        }
    }
    return -1;
}

/* Resolves name to its byte offset and element count, checking numel. */
static int resolve(const gpt2_llmc_model *m, const char *name, int64_t numel,
                   int64_t *offset_bytes, char *err, size_t err_cap) {
    int t, layer;
    int rc = parse_name(&m->cfg, name, &t, &layer);
    if (rc == -1)
        return ex_fail(err, err_cap,
                    "%s: unknown GPT-2 parameter name \"%s\" (expected nanoGPT's names: "
                    "transformer.wte.weight, transformer.wpe.weight, transformer.ln_f.weight, "
                    "transformer.ln_f.bias, or transformer.h.<layer>.<ln_1|ln_2>.<weight|bias>, "
                    ".attn.<c_attn|c_proj>.<weight|bias>, .mlp.<c_fc|c_proj>.<weight|bias>)",
                    m->path, name);
    if (rc == -2)
        return ex_fail(err, err_cap,
                    "%s: parameter \"%s\": layer %d is out of range: the file has %d layers "
                    "(0..%d)",
                    m->path, name, layer, m->cfg.num_layers, m->cfg.num_layers - 1);
    int64_t rows, cols;
    our_shape(&m->cfg, t, &rows, &cols);
    int64_t have = rows * cols; /* bounded by the file's total: no overflow */
    if (numel != have)
        return ex_fail(err, err_cap,
                    "%s: parameter \"%s\" has %lld elements in the file ([%lld, %lld]), the caller "
                    "expected %lld",
                    m->path, name, (long long)have, (long long)rows, (long long)cols,
                    (long long)numel);
    int64_t lrows, lcols;
    llmc_shape(&m->cfg, t, &lrows, &lcols);
    *offset_bytes = m->offset[t] + (layer > 0 ? 4 * (int64_t)layer * lrows * lcols : 0);
    return 0;
}

int gpt2_llmc_param_offset(const gpt2_llmc_model *m, const char *name, int64_t numel,
                           int64_t *offset_bytes, char *err, size_t err_cap) {
    return resolve(m, name, numel, offset_bytes, err, err_cap);
}

int gpt2_llmc_param_read(const gpt2_llmc_model *m, const char *name, int64_t numel,
                         int64_t first, int64_t count, float *out, char *err, size_t err_cap) {
    int64_t base;
    if (resolve(m, name, numel, &base, err, err_cap) != 0) return -1;
    if (first < 0 || count < 0 || first > numel || count > numel - first)
        return ex_fail(err, err_cap,
                    "%s: elements [%lld, %lld + %lld) are not inside parameter \"%s\" of %lld "
                    "elements",
                    m->path, (long long)first, (long long)first, (long long)count, name,
                    (long long)numel);
    if ((uint64_t)count > (uint64_t)(SIZE_MAX / 4))
        return ex_fail(err, err_cap, "%s: %lld elements of \"%s\" do not fit in one buffer",
                    m->path, (long long)count, name);
    int64_t offset = base + 4 * first;
    size_t done;
    if (pread_full(m->fd, out, 4 * (size_t)count, offset, &done) != 0)
        return ex_fail(err, err_cap,
                    "%s: cannot read parameter \"%s\" elements [%lld, %lld) at byte offset %lld: "
                    "%s",
                    m->path, name, (long long)first, (long long)(first + count),
                    (long long)(offset + (int64_t)done),
                    errno ? strerror(errno)
                          : "unexpected end of file (was it truncated after it was opened?)");
    if (!host_is_little_endian()) {
        unsigned char *b = (unsigned char *)out;
        for (int64_t k = 0; k < count; k++, b += 4) {
            unsigned char t0 = b[0], t1 = b[1];
            b[0] = b[3];
            b[1] = b[2];
            b[2] = t1;
            b[3] = t0;
        }
    }
    return 0;
}

/* -------------------------------------------------------------- tokenizer */

struct gpt2_llmc_tokenizer {
    int vocab_size;
    int eot; /* -1 when the file does not say */
    uint32_t *start;     /* [vocab]: where token k's bytes start in blob */
    unsigned char *len;  /* [vocab] */
    char *blob;          /* every token's bytes, each followed by a NUL */
};

void gpt2_llmc_tokenizer_destroy(gpt2_llmc_tokenizer *tok) {
    if (!tok) return;
    free(tok->start);
    free(tok->len);
    free(tok->blob);
    free(tok);
}

/* Reads the whole (small) file into a new buffer. */
static int read_whole(const char *path, unsigned char **data, int64_t *size, char *err,
                      size_t err_cap) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ex_fail(err, err_cap, "cannot open the llm.c tokenizer file %s: %s", path,
                            strerror(errno));
    struct stat st;
    int stat_rc = fstat(fd, &st);
    if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
        int e = stat_rc != 0 ? errno : 0;
        close(fd);
        return ex_fail(err, err_cap, "%s is not a readable regular file%s%s", path,
                    e ? ": " : "", e ? strerror(e) : "");
    }
    /* GPT-2's is about 0.5 MB; 1 GiB is far beyond any tokenizer. */
    if (st.st_size > ((int64_t)1 << 30)) {
        close(fd);
        return ex_fail(err, err_cap, "%s has %lld bytes: too large for a tokenizer file", path,
                    (long long)st.st_size);
    }
    *size = (int64_t)st.st_size;
    *data = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!*data) {
        close(fd);
        return ex_fail(err, err_cap, "out of memory reading %s", path);
    }
    size_t done;
    if (pread_full(fd, *data, (size_t)*size, 0, &done) != 0) {
        int e = errno;
        close(fd);
        free(*data);
        *data = NULL;
        return ex_fail(err, err_cap, "%s: cannot read byte offset %zu: %s", path, done,
                    e ? strerror(e) : "unexpected end of file");
    }
    close(fd);
    return 0;
}

int gpt2_llmc_tokenizer_open(const char *path, gpt2_llmc_tokenizer **out, char *err,
                             size_t err_cap) {
    if (!out) return ex_fail(err, err_cap, "gpt2_llmc_tokenizer_open: out is NULL");
    *out = NULL;
    if (!path) return ex_fail(err, err_cap, "gpt2_llmc_tokenizer_open: path is NULL");
    unsigned char *d;
    int64_t size = 0;
    if (read_whole(path, &d, &size, err, err_cap) != 0) return -1;
    gpt2_llmc_tokenizer *tok = NULL;
    if (size < HEADER_BYTES) {
        ex_fail(err, err_cap,
             "%s: truncated header: the file has %lld bytes, an llm.c tokenizer file starts "
             "with a %d-byte header",
             path, (long long)size, HEADER_BYTES);
        goto fail;
    }
    uint32_t magic = read_le_u32(d), version = read_le_u32(d + 4), vocab = read_le_u32(d + 8);
    if (magic != TOKENIZER_MAGIC) {
        const char *hint = magic == MODEL_MAGIC ? " (that is llm.c's model file magic)"
                           : magic == 20240520  ? " (that is llm.c's token shard magic)"
                                                : "";
        ex_fail(err, err_cap, "%s: bad magic %u at byte offset 0%s; an llm.c tokenizer file has %d",
             path, magic, hint, TOKENIZER_MAGIC);
        goto fail;
    }
    if (version != 1 && version != 2) {
        ex_fail(err, err_cap, "%s: unsupported version %u at byte offset 4; tokenizer versions 1 "
             "and 2 are supported", path, version);
        goto fail;
    }
    /* Each token takes at least 2 bytes (a length >= 1 and a byte), which
     * bounds vocab by the file size before anything is allocated. */
    if (vocab < 1 || (int64_t)vocab > (size - HEADER_BYTES) / 2 || vocab > INT_MAX) {
        ex_fail(err, err_cap, "%s: vocab_size = %u at byte offset 8 is impossible for a file of "
             "%lld bytes (each token takes at least 2 bytes after the %d-byte header)",
             path, vocab, (long long)size, HEADER_BYTES);
        goto fail;
    }
    int eot = -1;
    if (version == 2) {
        uint32_t e = read_le_u32(d + 12);
        if (e >= vocab) {
            ex_fail(err, err_cap, "%s: end-of-text token %u at byte offset 12 is not below "
                 "vocab_size = %u", path, e, vocab);
            goto fail;
        }
        eot = (int)e;
    }
    tok = calloc(1, sizeof *tok);
    if (!tok) goto oom;
    tok->vocab_size = (int)vocab;
    tok->eot = eot;
    tok->start = malloc(sizeof(uint32_t) * vocab);
    tok->len = malloc(vocab);
    /* At most size bytes of token text plus one NUL per token (<= size/2). */
    tok->blob = malloc((size_t)size + vocab);
    if (!tok->start || !tok->len || !tok->blob) goto oom;
    int64_t p = HEADER_BYTES;
    uint32_t at = 0;
    for (uint32_t k = 0; k < vocab; k++) {
        if (p >= size) {
            ex_fail(err, err_cap, "%s: truncated: token %u's length byte would be at byte offset "
                 "%lld, past the end of the file (%lld bytes; vocab_size %u)", path, k,
                 (long long)p, (long long)size, vocab);
            goto fail;
        }
        unsigned n = d[p];
        if (n == 0) {
            ex_fail(err, err_cap, "%s: token %u has length 0 (byte offset %lld); every token has "
                 "at least one byte", path, k, (long long)p);
            goto fail;
        }
        if (p + 1 + (int64_t)n > size) {
            ex_fail(err, err_cap, "%s: truncated: token %u (length %u at byte offset %lld) runs "
                 "past the end of the file (%lld bytes)", path, k, n, (long long)p,
                 (long long)size);
            goto fail;
        }
        tok->start[k] = at;
        tok->len[k] = (unsigned char)n;
        memcpy(tok->blob + at, d + p + 1, n);
        tok->blob[at + n] = '\0';
        at += n + 1;
        p += 1 + (int64_t)n;
    }
    if (p != size) {
        ex_fail(err, err_cap, "%s: %lld unexpected bytes after the last of %u tokens, from byte "
             "offset %lld", path, (long long)(size - p), vocab, (long long)p);
        goto fail;
    }
    free(d);
    *out = tok;
    return 0;
oom:
    ex_fail(err, err_cap, "out of memory reading %s", path);
fail:
    free(d);
    gpt2_llmc_tokenizer_destroy(tok);
    return -1;
}

int gpt2_llmc_tokenizer_vocab_size(const gpt2_llmc_tokenizer *tok) { return tok->vocab_size; }

int gpt2_llmc_tokenizer_eot(const gpt2_llmc_tokenizer *tok) { return tok->eot; }

const char *gpt2_llmc_tokenizer_decode(const gpt2_llmc_tokenizer *tok, int token, size_t *len) {
    if (token < 0 || token >= tok->vocab_size) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->len[token];
    return tok->blob + tok->start[token];
}
