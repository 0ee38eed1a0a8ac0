/* Tests of the llm.c file readers (examples/gpt2/gpt2_llmc.h).
 *
 *   test_gpt2_llmc                    tokenizer files and model files written
 *                                     here in C: decoding, tensor offsets worked
 *                                     out by hand, full coverage of the file,
 *                                     and every header error
 *   test_gpt2_llmc MODEL.bin RAW_DIR  MODEL.bin and RAW_DIR as written by
 *                                     write_llmc_gpt2.py: every tensor of ours
 *                                     read in odd-sized ranges and compared bit
 *                                     for bit with RAW_DIR/<name>.f32
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_llmc.h"
#include "data_test_files.h"

static void put_le32(unsigned char *p, uint32_t u) {
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(u >> (8 * k));
}

/* ---------------------------------------------------------------- tokenizer */

/* A tokenizer file: header (magic, version, vocab, eot) then the tokens. */
typedef struct tok_file {
    unsigned char data[4096];
    size_t size;
} tok_file;

static void tok_begin(tok_file *f, uint32_t magic, uint32_t version, uint32_t vocab,
                      uint32_t eot) {
    memset(f, 0, sizeof *f);
    put_le32(f->data, magic);
    put_le32(f->data + 4, version);
    put_le32(f->data + 8, vocab);
    put_le32(f->data + 12, eot);
    f->size = 1024;
}

static void tok_add(tok_file *f, const void *bytes, size_t n) {
    ZT_REQUIRE(n <= 255 && f->size + 1 + n <= sizeof f->data);
    f->data[f->size++] = (unsigned char)n;
    memcpy(f->data + f->size, bytes, n);
    f->size += n;
}

static char long_token[255];

/* The six tokens used below; token 5 is the end-of-text marker. */
static const struct {
    const char *bytes;
    size_t len;
} TOKENS[6] = {
    {"a", 1}, {"bc", 2}, {"\0", 1}, {"\xe2\x82", 2}, {long_token, 255}, {"<|endoftext|>", 13},
};

static void tok_add_all(tok_file *f) {
    for (int k = 0; k < 6; k++) tok_add(f, TOKENS[k].bytes, TOKENS[k].len);
}

static void test_tokenizer(void) {
    char p[2048], err[EX_ERR_CAP];
    memset(long_token, 'x', sizeof long_token);
    long_token[100] = 'y';
    tok_file f;
    gpt2_llmc_tokenizer *tok = NULL;

    tok_begin(&f, 20240328, 2, 6, 5);
    tok_add_all(&f);
    gt_write("tok_v2.bin", f.data, f.size);
    GT_OK(gpt2_llmc_tokenizer_open(gt_path(p, sizeof p, "tok_v2.bin"), &tok, err, sizeof err), err);
    ZT_REQUIRE(tok != NULL);
    ZT_EQ_INT(gpt2_llmc_tokenizer_vocab_size(tok), 6);
    ZT_EQ_INT(gpt2_llmc_tokenizer_eot(tok), 5);
    for (int k = 0; k < 6; k++) {
        size_t len = 0;
        const char *s = gpt2_llmc_tokenizer_decode(tok, k, &len);
        ZT_CHECK_MSG(s && len == TOKENS[k].len && memcmp(s, TOKENS[k].bytes, len) == 0 &&
                         s[len] == '\0',
                     "token %d decodes to %zu bytes starting 0x%02x, expected %zu starting 0x%02x",
                     k, len, s ? (unsigned char)s[0] : 0u, TOKENS[k].len,
                     (unsigned char)TOKENS[k].bytes[0]);
    }
    size_t len = 99;
    ZT_CHECK(gpt2_llmc_tokenizer_decode(tok, 6, &len) == NULL && len == 0);
    ZT_CHECK(gpt2_llmc_tokenizer_decode(tok, -1, &len) == NULL);
    gpt2_llmc_tokenizer_destroy(tok);
    gpt2_llmc_tokenizer_destroy(NULL);

    /* Version 1 has no end-of-text id (header[3] is ignored). */
    tok_begin(&f, 20240328, 1, 6, 12345);
    tok_add_all(&f);
    gt_write("tok_v1.bin", f.data, f.size);
    GT_OK(gpt2_llmc_tokenizer_open(gt_path(p, sizeof p, "tok_v1.bin"), &tok, err, sizeof err), err);
    ZT_CHECK(tok && gpt2_llmc_tokenizer_eot(tok) == -1);
    gpt2_llmc_tokenizer_destroy(tok);

    /* Errors. */
    tok_begin(&f, 20240520, 2, 6, 5);
    tok_add_all(&f);
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(gt_path(p, sizeof p, "tok_bad.bin"), &tok, err, sizeof err),
                  err, "tok_bad.bin", "bad magic 20240520 at byte offset 0", "token shard");
    ZT_CHECK(tok == NULL);
    tok_begin(&f, 20240328, 3, 6, 5);
    tok_add_all(&f);
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "unsupported version 3 at byte offset 4");
    tok_begin(&f, 20240328, 2, 6, 6);
    tok_add_all(&f);
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "end-of-text token 6 at byte offset 12");
    tok_begin(&f, 20240328, 2, 6, 5);
    tok_add_all(&f);
    gt_write("tok_bad.bin", f.data, f.size - 1); /* the last token loses a byte */
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "truncated: token 5 (length 13 at byte offset", "runs past the end");
    tok_begin(&f, 20240328, 2, 7, 5); /* declares 7, holds 6 */
    tok_add_all(&f);
    tok_add(&f, "z", 1);
    f.size -= 2; /* and the 7th is cut entirely */
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "token 6's length byte", "past the end of the file");
    tok_begin(&f, 20240328, 2, 6, 5);
    tok_add_all(&f);
    f.data[f.size++] = 'q';
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "1 unexpected bytes after the last of 6 tokens");
    tok_begin(&f, 20240328, 2, 6, 5);
    tok_add(&f, "a", 1);
    tok_add(&f, "", 0);
    for (int k = 2; k < 6; k++) tok_add(&f, TOKENS[k].bytes, TOKENS[k].len);
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "token 1 has length 0 (byte offset 1026)");
    tok_begin(&f, 20240328, 2, 4000000000u, 5);
    tok_add_all(&f);
    gt_write("tok_bad.bin", f.data, f.size);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err,
                  "vocab_size = 4000000000 at byte offset 8 is impossible");
    gt_write("tok_bad.bin", f.data, 100);
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(p, &tok, err, sizeof err), err, "truncated header",
                  "100 bytes");
    GT_FAILS_WITH(gpt2_llmc_tokenizer_open(gt_path(p, sizeof p, "no_tokenizer.bin"), &tok, err,
                                           sizeof err),
                  err, "cannot open", "no_tokenizer.bin");
}

/* -------------------------------------------------------- model, written here */

/* The tiny model: L = 2, heads = 2, C = 4, V = 5, Vp = 8, maxT = 3. Element
 * counts in llm.c's order, worked out by hand:
 *   wte 8*4 = 32, wpe 3*4 = 12, ln1w 2*4 = 8, ln1b 8, qkvw 2*12*4 = 96,
 *   qkvb 2*12 = 24, attprojw 2*4*4 = 32, attprojb 8, ln2w 8, ln2b 8,
 *   fcw 2*16*4 = 128, fcb 2*16 = 32, fcprojw 2*4*16 = 128, fcprojb 8,
 *   lnfw 4, lnfb 4: 540 in all, starting at elements
 *   0, 32, 44, 52, 60, 156, 180, 212, 220, 228, 236, 364, 396, 524, 532, 536. */
enum { TINY_TOTAL = 540 };

/* Writes a model file with the given header and `total` parameters whose
 * values are their element indices (exact in fp32), plus `extra` bytes. */
static void write_model(const char *name, const int32_t hdr[8], int total, int extra) {
    size_t size = 1024 + 4 * (size_t)total + (size_t)extra;
    unsigned char *buf = calloc(1, size);
    ZT_REQUIRE(buf != NULL);
    for (int k = 0; k < 8; k++) put_le32(buf + 4 * k, (uint32_t)hdr[k]);
    for (int e = 0; e < total; e++) {
        float v = (float)e;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        put_le32(buf + 1024 + 4 * (size_t)e, bits);
    }
    gt_write(name, buf, size);
    free(buf);
}

static const int32_t TINY[8] = {20240326, 3, 3, 5, 2, 2, 4, 8};

static void test_model_offsets(void) {
    char p[2048], err[EX_ERR_CAP];
    write_model("tiny.bin", TINY, TINY_TOTAL, 0);
    gpt2_llmc_model *m = NULL;
    GT_OK(gpt2_llmc_model_open(gt_path(p, sizeof p, "tiny.bin"), &m, err, sizeof err), err);
    ZT_REQUIRE(m != NULL);
    const gpt2_llmc_config *cfg = gpt2_llmc_model_config(m);
    ZT_CHECK(cfg->max_seq_len == 3 && cfg->vocab_size == 5 && cfg->num_layers == 2 &&
             cfg->num_heads == 2 && cfg->channels == 4 && cfg->padded_vocab_size == 8);
    ZT_EQ_INT(gpt2_llmc_file_param_count(cfg), TINY_TOTAL);
    ZT_EQ_INT(gpt2_llmc_num_tensors(cfg), 28);

    /* Offsets worked out by hand (element index; bytes = 1024 + 4 e). */
    static const struct {
        const char *name;
        int64_t numel, element;
    } want[] = {
        {"transformer.wte.weight", 20, 0},
        {"transformer.wpe.weight", 12, 32},
        {"transformer.h.0.ln_1.weight", 4, 44},
        {"transformer.h.1.ln_1.weight", 4, 48},
        {"transformer.h.1.ln_1.bias", 4, 56},
        {"transformer.h.0.attn.c_attn.weight", 48, 60},
        {"transformer.h.1.attn.c_attn.weight", 48, 108},
        {"transformer.h.1.attn.c_attn.bias", 12, 168},
        {"transformer.h.1.attn.c_proj.weight", 16, 196},
        {"transformer.h.0.attn.c_proj.bias", 4, 212},
        {"transformer.h.1.ln_2.weight", 4, 224},
        {"transformer.h.0.ln_2.bias", 4, 228},
        {"transformer.h.1.mlp.c_fc.weight", 64, 300},
        {"transformer.h.1.mlp.c_fc.bias", 16, 380},
        {"transformer.h.1.mlp.c_proj.weight", 64, 460},
        {"transformer.h.1.mlp.c_proj.bias", 4, 528},
        {"transformer.ln_f.weight", 4, 532},
        {"transformer.ln_f.bias", 4, 536},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int64_t off = -1;
        GT_OK(gpt2_llmc_param_offset(m, want[k].name, want[k].numel, &off, err, sizeof err), err);
        ZT_CHECK_MSG(off == 1024 + 4 * want[k].element, "%s at byte %lld, by hand %lld",
                     want[k].name, (long long)off, (long long)(1024 + 4 * want[k].element));
    }

    /* Every tensor of ours, read whole: contiguous values from its offset,
     * and together they cover the file exactly once but for wte's padding
     * rows (elements 20..31). */
    int covered[TINY_TOTAL] = {0};
    float buf[64];
    for (int k = 0; k < gpt2_llmc_num_tensors(cfg); k++) {
        char name[64];
        int64_t shape[2];
        int ndim = 0;
        int64_t numel = gpt2_llmc_tensor_info(cfg, k, name, sizeof name, shape, &ndim);
        ZT_REQUIRE(numel > 0 && numel <= 64 && numel == shape[0] * shape[1]);
        int64_t off;
        GT_OK(gpt2_llmc_param_offset(m, name, numel, &off, err, sizeof err), err);
        GT_OK(gpt2_llmc_param_read(m, name, numel, 0, numel, buf, err, sizeof err), err);
        int64_t e0 = (off - 1024) / 4;
        for (int64_t i = 0; i < numel; i++) {
            ZT_CHECK_MSG(buf[i] == (float)(e0 + i), "%s[%lld] = %g, expected element %lld", name,
                         (long long)i, buf[i], (long long)(e0 + i));
            covered[e0 + i]++;
        }
    }
    for (int e = 0; e < TINY_TOTAL; e++) {
        int expect = (e >= 20 && e < 32) ? 0 : 1;
        ZT_CHECK_MSG(covered[e] == expect, "element %d is covered %d times, expected %d", e,
                     covered[e], expect);
    }
    /* Tensor names and shapes in the documented order. */
    char name[64];
    int64_t shape[2];
    int ndim;
    ZT_EQ_INT(gpt2_llmc_tensor_info(cfg, 0, name, sizeof name, shape, &ndim), 20);
    ZT_CHECK(strcmp(name, "transformer.wte.weight") == 0 && shape[0] == 5 && shape[1] == 4 && ndim == 2);
    ZT_EQ_INT(gpt2_llmc_tensor_info(cfg, 3, name, sizeof name, shape, &ndim), 4);
    ZT_CHECK(strcmp(name, "transformer.ln_f.bias") == 0 && ndim == 1);
    ZT_EQ_INT(gpt2_llmc_tensor_info(cfg, 4 + 12 + 10, name, sizeof name, shape, &ndim), 64);
    ZT_CHECK_MSG(strcmp(name, "transformer.h.1.mlp.c_proj.weight") == 0 && shape[0] == 4 &&
                     shape[1] == 16 && ndim == 2,
                 "tensor 26 is %s [%lld, %lld]", name, (long long)shape[0], (long long)shape[1]);
    ZT_EQ_INT(gpt2_llmc_tensor_info(cfg, 28, name, sizeof name, shape, &ndim), -1);
    ZT_EQ_INT(gpt2_llmc_tensor_info(cfg, 5, name, 8, shape, &ndim), -1); /* name too long */

    /* A range in the middle of a tensor. */
    GT_OK(gpt2_llmc_param_read(m, "transformer.h.1.attn.c_attn.weight", 48, 17, 5, buf, err,
                               sizeof err),
          err);
    ZT_CHECK_MSG(buf[0] == 125.0f && buf[4] == 129.0f, "range [17, 22) starts %g ends %g", buf[0],
                 buf[4]);
    GT_OK(gpt2_llmc_param_read(m, "transformer.ln_f.bias", 4, 4, 0, buf, err, sizeof err), err);

    /* Names, layers, counts and ranges that are wrong. */
    int64_t off;
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.h.0.attn.bias", 4, &off, err, sizeof err),
                  err, "tiny.bin", "unknown GPT-2 parameter name \"transformer.h.0.attn.bias\"");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "lm_head.weight", 20, &off, err, sizeof err), err,
                  "unknown GPT-2 parameter name");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.h.01.ln_1.weight", 4, &off, err,
                                         sizeof err),
                  err, "unknown");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.h..ln_1.weight", 4, &off, err, sizeof err),
                  err, "unknown");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.h.2.ln_1.weight", 4, &off, err, sizeof err),
                  err, "layer 2 is out of range", "2 layers (0..1)");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.h.99999999999.ln_1.weight", 4, &off, err,
                                         sizeof err),
                  err, "out of range");
    GT_FAILS_WITH(gpt2_llmc_param_offset(m, "transformer.wte.weight", 32, &off, err, sizeof err),
                  err, "\"transformer.wte.weight\" has 20 elements in the file ([5, 4])",
                  "the caller expected 32");
    GT_FAILS_WITH(gpt2_llmc_param_read(m, "transformer.wte.weight", 20, 18, 3, buf, err, sizeof err),
                  err, "[18, 18 + 3)", "of 20 elements");
    GT_FAILS_WITH(gpt2_llmc_param_read(m, "transformer.wte.weight", 20, -1, 3, buf, err, sizeof err),
                  err, "not inside");

    /* The file shrinks after it was opened: the read says where it ended. */
    ZT_REQUIRE(truncate(p, 1024 + 4 * 400) == 0);
    GT_FAILS_WITH(gpt2_llmc_param_read(m, "transformer.h.1.mlp.c_proj.weight", 64, 0, 64, buf,
                                       err, sizeof err),
                  err, "tiny.bin", "\"transformer.h.1.mlp.c_proj.weight\"",
                  "at byte offset 2864", "unexpected end of file");
    gpt2_llmc_model_destroy(m);
    gpt2_llmc_model_destroy(NULL);
}

static void expect_model_error(const char *name, const int32_t hdr[8], int total, int extra,
                               const char *a, const char *b) {
    char p[2048], err[EX_ERR_CAP];
    gpt2_llmc_model *m = NULL;
    write_model(name, hdr, total, extra);
    GT_FAILS_WITH(gpt2_llmc_model_open(gt_path(p, sizeof p, name), &m, err, sizeof err), err, name,
                  a, b);
    ZT_CHECK(m == NULL);
}

static void test_model_header_errors(void) {
    int32_t h[8];
    memcpy(h, TINY, sizeof h);
    h[0] = 20240520;
    expect_model_error("m_magic.bin", h, TINY_TOTAL, 0, "bad magic 20240520 at byte offset 0",
                       "token shard");
    memcpy(h, TINY, sizeof h);
    h[1] = 5;
    expect_model_error("m_bf16.bin", h, TINY_TOTAL / 2, 0, "version 5 (bf16", "not supported");
    h[1] = 4;
    expect_model_error("m_v4.bin", h, TINY_TOTAL, 0, "unsupported version 4", "version 3");
    expect_model_error("m_long.bin", TINY, TINY_TOTAL, 4, "size mismatch",
                       "540 parameters, i.e. 3184 bytes, but the file has 3188");
    expect_model_error("m_short.bin", TINY, TINY_TOTAL - 1, 0, "size mismatch",
                       "the file has 3180 bytes");
    memcpy(h, TINY, sizeof h);
    h[5] = 3;
    expect_model_error("m_heads.bin", h, TINY_TOTAL, 0, "channels = 4",
                       "not a multiple of num_heads = 3");
    memcpy(h, TINY, sizeof h);
    h[7] = 4;
    expect_model_error("m_pad.bin", h, TINY_TOTAL, 0, "padded_vocab_size = 4",
                       "smaller than vocab_size = 5");
    memcpy(h, TINY, sizeof h);
    h[4] = 0;
    expect_model_error("m_layers.bin", h, TINY_TOTAL, 0, "num_layers = 0 at byte offset 16",
                       "must be positive");
    memcpy(h, TINY, sizeof h);
    h[6] = -8;
    expect_model_error("m_neg.bin", h, TINY_TOTAL, 0, "channels = -8", "must be positive");
    memcpy(h, TINY, sizeof h);
    h[4] = 1 << 30;
    h[5] = 1;
    h[6] = 1 << 30;
    expect_model_error("m_huge.bin", h, TINY_TOTAL, 0, "overflows int64", "L = 1073741824");
    char p[2048], err[EX_ERR_CAP];
    gpt2_llmc_model *m = NULL;
    gt_write("m_tiny_header.bin", "\x7e\xd6\x34\x01", 4);
    GT_FAILS_WITH(gpt2_llmc_model_open(gt_path(p, sizeof p, "m_tiny_header.bin"), &m, err,
                                       sizeof err),
                  err, "truncated header", "4 bytes");
    GT_FAILS_WITH(gpt2_llmc_model_open(gt_path(p, sizeof p, "m_absent.bin"), &m, err, sizeof err),
                  err, "cannot open the llm.c model file", "m_absent.bin");
}

/* ------------------------------------------------- model, written by numpy */

static int compare_with_raw(const char *model_path, const char *raw_dir) {
    char err[EX_ERR_CAP], p[4096];
    gpt2_llmc_model *m = NULL;
    GT_OK(gpt2_llmc_model_open(model_path, &m, err, sizeof err), err);
    ZT_REQUIRE(m != NULL);
    const gpt2_llmc_config *cfg = gpt2_llmc_model_config(m);

    snprintf(p, sizeof p, "%s/index.txt", raw_dir);
    FILE *index = fopen(p, "r");
    ZT_REQUIRE(index != NULL);
    int L, H, C, V, VP, T;
    ZT_REQUIRE(fscanf(index, "config %d %d %d %d %d %d", &L, &H, &C, &V, &VP, &T) == 6);
    ZT_CHECK_MSG(L == cfg->num_layers && H == cfg->num_heads && C == cfg->channels &&
                     V == cfg->vocab_size && VP == cfg->padded_vocab_size && T == cfg->max_seq_len,
                 "header L=%d heads=%d C=%d V=%d Vp=%d maxT=%d, writer's %d %d %d %d %d %d",
                 cfg->num_layers, cfg->num_heads, cfg->channels, cfg->vocab_size,
                 cfg->padded_vocab_size, cfg->max_seq_len, L, H, C, V, VP, T);

    /* Odd-sized ranges, so chunks straddle everything. */
    static const int64_t chunks[] = {1, 7, 3, 13, 64, 5, 250, 2, 31};
    int tensors = 0;
    int64_t elements = 0;
    for (int k = 0;; k++) {
        char wname[256];
        int wndim;
        long long d0 = 0, d1 = 1;
        int got = fscanf(index, "%255s %d %lld", wname, &wndim, &d0);
        if (got == EOF) break;
        ZT_REQUIRE(got == 3 && (wndim == 1 || wndim == 2));
        if (wndim == 2) ZT_REQUIRE(fscanf(index, "%lld", &d1) == 1);
        char name[64];
        int64_t shape[2];
        int ndim;
        int64_t numel = gpt2_llmc_tensor_info(cfg, k, name, sizeof name, shape, &ndim);
        ZT_CHECK_MSG(numel >= 0 && strcmp(name, wname) == 0 && ndim == wndim && shape[0] == d0 &&
                         shape[1] == d1,
                     "tensor %d: ours %s %dD [%lld, %lld], the writer's %s %dD [%lld, %lld]", k,
                     numel >= 0 ? name : "(none)", ndim, (long long)shape[0], (long long)shape[1],
                     wname, wndim, d0, d1);
        if (numel < 0) break;

        snprintf(p, sizeof p, "%s/%s.f32", raw_dir, wname);
        FILE *f = fopen(p, "rb");
        ZT_REQUIRE(f != NULL);
        uint32_t *want = malloc(sizeof(uint32_t) * (size_t)numel);
        uint32_t *have = malloc(sizeof(uint32_t) * (size_t)numel);
        ZT_REQUIRE(want && have);
        ZT_REQUIRE(fread(want, 4, (size_t)numel, f) == (size_t)numel && fgetc(f) == EOF);
        fclose(f);
        memset(have, 0xab, sizeof(uint32_t) * (size_t)numel);
        int64_t first = 0;
        for (int c = k % 9; first < numel; c = (c + 1) % 9) {
            int64_t n = chunks[c] < numel - first ? chunks[c] : numel - first;
            GT_OK(gpt2_llmc_param_read(m, name, numel, first, n, (float *)(have + first), err,
                                       sizeof err),
                  err);
            first += n;
        }
        for (int64_t i = 0; i < numel; i++) {
            if (have[i] != want[i]) {
                float hf, wf;
                memcpy(&hf, &have[i], 4);
                memcpy(&wf, &want[i], 4);
                ZT_CHECK_MSG(0, "%s[%lld]: read 0x%08x (%g), numpy wrote 0x%08x (%g)", name,
                             (long long)i, have[i], hf, want[i], wf);
                break;
            }
        }
        zt_checks++;
        free(want);
        free(have);
        tensors++;
        elements += numel;
    }
    fclose(index);
    ZT_EQ_INT(tensors, gpt2_llmc_num_tensors(cfg));
    printf("%s: %d tensors, %lld elements compared bit for bit\n", model_path, tensors,
           (long long)elements);
    gpt2_llmc_model_destroy(m);
    return zt_finish("test_gpt2_llmc (numpy)");
}

int main(int argc, char **argv) {
    if (argc == 3) return compare_with_raw(argv[1], argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [MODEL.bin RAW_DIR]\n", argv[0]);
        return 2;
    }
    test_tokenizer();
    test_model_offsets();
    test_model_header_errors();
    return zt_finish("test_gpt2_llmc");
}
