/*
 * gpt2_llmc — readers for llm.c's GPT-2 files: the model checkpoint
 * (gpt2_124M.bin, fp32) and the tokenizer (gpt2_tokenizer.bin). Plain C on
 * POSIX files; it knows nothing of zeroshard.
 *
 * The model file is read by tensor ranges with pread, never whole: a trainer
 * rank asks for the elements it owns, in chunks of its choosing, under our
 * parameter names (nanoGPT's), and gpt2_llmc finds them in llm.c's layout.
 *
 * Model file: a header of 256 little-endian int32, then fp32 parameters.
 *   header[0] magic 20240326
 *   header[1] version: 3 = fp32 parameters (supported); 5 = bf16 (refused)
 *   header[2] max_seq_len (maxT)   header[3] vocab_size (V, 50257 for GPT-2)
 *   header[4] num_layers (L)       header[5] num_heads
 *   header[6] channels (C)         header[7] padded_vocab_size (Vp, 50304)
 * The parameters are 16 tensors back to back, each stacked over the layers
 * where it is per-layer, row-major, Linear weights as [out, in]:
 *   wte [Vp, C]  wpe [maxT, C]  ln1w [L, C]  ln1b [L, C]  qkvw [L, 3C, C]
 *   qkvb [L, 3C]  attprojw [L, C, C]  attprojb [L, C]  ln2w [L, C]
 *   ln2b [L, C]  fcw [L, 4C, C]  fcb [L, 4C]  fcprojw [L, C, 4C]
 *   fcprojb [L, C]  lnfw [C]  lnfb [C]
 * and the file is exactly 1024 + 4 * (their total) bytes.
 *
 * Our names (nanoGPT's; the shapes are the same row-major layouts):
 *   transformer.wte.weight   [V, C]    the first V rows of wte: the padding
 *                                      rows V..Vp-1 are skipped
 *   transformer.wpe.weight   [maxT, C]
 *   transformer.ln_f.weight  [C]       transformer.ln_f.bias [C]
 *   for each layer l (decimal, no leading zeros), prefix transformer.h.<l>.:
 *   ln_1.weight [C]  ln_1.bias [C]  attn.c_attn.weight [3C, C]
 *   attn.c_attn.bias [3C]  attn.c_proj.weight [C, C]  attn.c_proj.bias [C]
 *   ln_2.weight [C]  ln_2.bias [C]  mlp.c_fc.weight [4C, C]  mlp.c_fc.bias [4C]
 *   mlp.c_proj.weight [C, 4C]  mlp.c_proj.bias [C]
 * Each of these is one contiguous run of fp32 in the file. nanoGPT's
 * lm_head.weight is tied to wte and is not a separate tensor here.
 *
 * Tokenizer file: a header of 256 little-endian uint32 (magic 20240328,
 * version 1 or 2, vocab_size, and for version 2 the end-of-text token id),
 * then per token one uint8 length (>= 1) and that many bytes.
 *
 * Errors as in ex_error.h: `char *err, size_t err_cap` (err may be NULL),
 * 0 or -1, messages naming the file; EX_ERR_CAP below is a size that holds
 * them. Nothing calls exit() or prints.
 * Handles are read-only once opened: several threads may read one.
 */
#ifndef GPT2_LLMC_H
#define GPT2_LLMC_H

#include <stddef.h>
#include <stdint.h>

#include "ex_error.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ------------------------------------------------------------------ model */

typedef struct gpt2_llmc_config {
    int max_seq_len;       /* maxT (block size), header[2] */
    int vocab_size;        /* V, header[3] */
    int num_layers;        /* L, header[4] */
    int num_heads;         /* header[5]; divides channels */
    int channels;          /* C, header[6] */
    int padded_vocab_size; /* Vp >= V, header[7] */
} gpt2_llmc_config;

typedef struct gpt2_llmc_model gpt2_llmc_model; /* opaque: an open model file */

/* Byte offset of the first parameter in a model file. */
#define GPT2_LLMC_HEADER_BYTES 1024

/*
 * Opens an llm.c model file and validates its header: magic, version 3
 * (version 5 is refused: bf16 parameters are not supported), every size
 * positive, channels % num_heads == 0, padded_vocab_size >= vocab_size, and
 * the file size exactly 1024 + 4 * (parameter count), computed with checked
 * arithmetic. Reads the header only; keeps the file descriptor open for
 * gpt2_llmc_param_read. *out is NULL on failure.
 */
int gpt2_llmc_model_open(const char *path, gpt2_llmc_model **out, char *err, size_t err_cap);

/* Closes and frees; NULL is a no-op. */
void gpt2_llmc_model_destroy(gpt2_llmc_model *m);

/* The header's sizes; owned by m. */
const gpt2_llmc_config *gpt2_llmc_model_config(const gpt2_llmc_model *m);

/* Elements in llm.c's file (padded vocabulary included) for a config, or -1
 * when the count overflows int64. */
int64_t gpt2_llmc_file_param_count(const gpt2_llmc_config *cfg);

/* How many tensors our model has: 4 + 12 L. */
int gpt2_llmc_num_tensors(const gpt2_llmc_config *cfg);

/*
 * Tensor k (0 <= k < gpt2_llmc_num_tensors) of our model, in a fixed order
 * (wte, wpe, ln_f.weight, ln_f.bias, then layer 0's twelve tensors in the
 * order listed at the top of this file, then layer 1's, ...): its name into
 * name: [name_cap], its shape into shape: [2] (a 1-D tensor has shape[1] = 1)
 * and its dimension count into *ndim (1 or 2; ndim may be NULL), and its
 * element count is returned (-1 when k is out of range or name_cap is too
 * small; 64 bytes always suffice).
 */
int64_t gpt2_llmc_tensor_info(const gpt2_llmc_config *cfg, int k, char *name, size_t name_cap,
                              int64_t shape[2], int *ndim);

/*
 * Where our tensor `name` starts in the file: *offset_bytes is the byte offset
 * of its first fp32 element (the rest follow contiguously). `numel` is the
 * element count the caller expects; a different count in the file is an
 * error that gives both and the file's shape. Also fails, with the name, for
 * an unknown name or a layer index outside [0, L).
 */
int gpt2_llmc_param_offset(const gpt2_llmc_model *m, const char *name, int64_t numel,
                           int64_t *offset_bytes, char *err, size_t err_cap);

/*
 * Reads elements [first, first + count) of tensor `name` (expected to have
 * `numel` elements, checked as above) into out: [count], with pread: exactly
 * those 4 count bytes are read, looping over short reads and EINTR, so a
 * rank can load the ranges it owns in chunks of bounded size. Synchronous.
 * Fails when the range is not inside [0, numel) or the read fails or ends
 * early; read errors name the file, the byte offset and the tensor.
 */
int gpt2_llmc_param_read(const gpt2_llmc_model *m, const char *name, int64_t numel,
                         int64_t first, int64_t count, float *out, char *err, size_t err_cap);

/* -------------------------------------------------------------- tokenizer */

typedef struct gpt2_llmc_tokenizer gpt2_llmc_tokenizer; /* opaque */

/*
 * Reads and validates a tokenizer file: magic, version 1 or 2, vocab_size
 * >= 1, an end-of-text id < vocab_size (version 2), every token's length
 * >= 1, no token running past the end of the file, and no bytes after the
 * last token. Errors name the file, the token and the byte offset. *out is
 * NULL on failure.
 */
int gpt2_llmc_tokenizer_open(const char *path, gpt2_llmc_tokenizer **out, char *err,
                             size_t err_cap);

/* Frees; NULL is a no-op. */
void gpt2_llmc_tokenizer_destroy(gpt2_llmc_tokenizer *tok);

int gpt2_llmc_tokenizer_vocab_size(const gpt2_llmc_tokenizer *tok);

/* The end-of-text token id (50256 for GPT-2), or -1 for a version-1 file,
 * which does not record it. */
int gpt2_llmc_tokenizer_eot(const gpt2_llmc_tokenizer *tok);

/* The bytes of `token`, owned by tok: *len bytes (>= 1; they may include
 * NUL, and a token may be part of a UTF-8 sequence), followed by a NUL that
 * is not counted. NULL (and *len = 0) when token is outside [0, vocab). */
const char *gpt2_llmc_tokenizer_decode(const gpt2_llmc_tokenizer *tok, int token, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_LLMC_H */
