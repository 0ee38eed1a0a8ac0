/*
 * ex_data — the examples' training data, shared by every model the trainer
 * runs: token streams read from disk, their train/validation split,
 * deterministic batch sampling that does not depend on the world size, and
 * the unigram baseline loss. Plain C on POSIX files; it knows nothing of
 * zeroshard.
 *
 * A token stream is one of:
 *   - raw text: any path not ending in ".bin", taken literally (one file, no
 *     pattern). Every byte is a token, so the vocabulary is the 256 byte
 *     values (the "byte tokenizer").
 *   - llm.c token shards: a path ending in ".bin", which may be a glob(3)
 *     pattern ("data/fineweb_train_*.bin"). The matching files, in sorted
 *     order, are read as one concatenated stream. Each file is a header of
 *     256 little-endian int32 (magic, version, token count) and then that
 *     many little-endian tokens, nothing more: uint16 tokens with magic
 *     20240520 and version 1 (GPT-2's tokenizer), uint32 with magic 20240801
 *     and version 7 (llm.c's Llama 3 format, for vocabularies above 65536).
 *     The shards of one stream share one format.
 * Files are mapped read-only with mmap, never copied: a 100M-token shard
 * costs address space and page cache, not heap.
 *
 * Windows and samples. A view of N tokens holds K = floor((N - 1) / T)
 * windows of T + 1 tokens, window k being tokens [k T, k T + T] (inclusive):
 * its first T tokens are a sequence's inputs and its last T the targets, so
 * consecutive windows share one token. Training samples are numbered globally
 * from 0: sample g is in epoch e = g / K and is window perm(seed, e, g % K) of
 * the training view, where perm(seed, e, .) is a pseudo-random permutation of
 * [0, K) (ex_perm_index). Every window is seen exactly once per epoch.
 *
 * How ranks share the samples: a job with W ranks and B sequences per rank
 * keeps one counter `pos` (the first sample of the next micro-step, 0 at the
 * start). In a micro-step rank r takes samples [pos + r B, pos + (r + 1) B),
 * then every rank does pos += W B. Hence:
 *   - the samples of a micro-step depend only on pos and the global batch
 *     W B: one rank with B = 4 sees what 2 ranks with B = 2 see together, in
 *     the same order (rank 0's rows first);
 *   - ranks see disjoint samples, and disjoint windows within an epoch;
 *   - `pos` (an int64) is the whole sampler state: save it in a checkpoint and
 *     a resumed job continues with exactly the same samples.
 * Nothing here communicates: the trainer advances pos itself.
 *
 * Errors: fallible functions take `char *err, size_t err_cap` and return 0 on
 * success or -1 with a NUL-terminated message in err (truncated to err_cap;
 * err may be NULL to drop it). Messages name the file, what is wrong and,
 * for format errors, the byte offset. EX_ERR_CAP (below) is a size that
 * holds them. Nothing here calls exit() or prints.
 *
 * Threads: a stream is read-only once opened, so any number of threads may
 * read it concurrently, except for the first call of ex_tokens_max_token,
 * which caches its result.
 */
#ifndef EX_DATA_H
#define EX_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ex_error.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ----------------------------------------------------------------- streams */

typedef struct ex_tokens ex_tokens; /* opaque: an open token stream */

/*
 * Opens `path` as a token stream (see the top of this file for the two
 * formats). For ".bin" paths every matching file is validated here: magic,
 * version, and the header's token count against the file size, which must be
 * exactly 1024 + 2 * count bytes. Errors name the pattern when nothing
 * matches and the file otherwise. A stream with no tokens at all (an empty
 * text file, shards that declare 0 tokens) is an error.
 * On success *out owns the mappings; free it with ex_tokens_destroy. On
 * failure *out is NULL and nothing is left open.
 */
int ex_tokens_open(const char *path, ex_tokens **out, char *err, size_t err_cap);

/* Unmaps and frees; NULL is a no-op. Views of the stream become invalid. */
void ex_tokens_destroy(ex_tokens *ts);

/* Number of tokens in the whole stream (> 0). */
int64_t ex_tokens_count(const ex_tokens *ts);

/* Token i (0 <= i < count), or -1 when i is out of range. O(log files). */
int ex_tokens_at(const ex_tokens *ts, int64_t i);

/* Tokens [first, first + count) into out: [count]. Fails when the range is
 * not inside the stream. */
int ex_tokens_read(const ex_tokens *ts, int64_t first, int64_t count, int32_t *out,
                     char *err, size_t err_cap);

/* The largest token id in the stream, to check against the model's vocab.
 * The first call reads the whole stream once (O(count)) and caches the
 * result; later calls are O(1). Not thread-safe on the first call. */
int ex_tokens_max_token(ex_tokens *ts);

/* 1 for a raw-text stream (tokens are bytes, vocab 256), 0 for llm.c shards. */
int ex_tokens_is_text(const ex_tokens *ts);

/* The files the stream reads, in stream order (1 for text), for logging.
 * The path is owned by the stream. */
int ex_tokens_num_files(const ex_tokens *ts);
const char *ex_tokens_file_path(const ex_tokens *ts, int k);

/* ------------------------------------------------------------------- views */

/* Tokens [begin, end) of a stream. A plain value: copy it freely; it does not
 * own the stream, which must outlive it. */
typedef struct ex_view {
    const ex_tokens *tokens;
    int64_t begin; /* first token, index into the stream */
    int64_t end;   /* one past the last token; end >= begin */
} ex_view;

/* The whole stream. */
ex_view ex_view_all(const ex_tokens *ts);

/* Tokens [begin, end) of the stream; fails unless 0 <= begin <= end <= count. */
int ex_view_range(const ex_tokens *ts, int64_t begin, int64_t end, ex_view *out,
                    char *err, size_t err_cap);

/* end - begin. */
int64_t ex_view_length(ex_view v);

/* K = floor((N - 1) / T) windows of T + 1 tokens in a view of N tokens
 * (0 when N <= T); -1 when T < 1. */
int64_t ex_view_num_windows(ex_view v, int T);

/*
 * Holds out the last `val_fraction` of `all` for validation when there is no
 * separate validation file. The cut is at a window boundary of `all`, right
 * after the last token of a whole training window, so that no token is in
 * both views and the training view has no leftover tokens:
 *
 *   n_val = ceil(val_fraction * N)         tokens wanted for validation
 *   k     = floor((N - 1 - n_val) / T)     training windows
 *   train = [0, k T + 1)                   exactly k windows
 *   val   = [k T + 1, N)                   n_val <= length < n_val + T
 *
 * (positions relative to all.begin). It fails, saying which side is short,
 * unless k >= 1 and the validation view holds at least one window
 * (T + 1 tokens). val_fraction = 0 makes train = all and val the empty view
 * at its end (0 windows). 0 <= val_fraction < 1. The trainer's default is
 * 0.05. With a separate validation file, use ex_view_all of each stream
 * instead.
 */
int ex_split(ex_view all, int T, double val_fraction, ex_view *train, ex_view *val,
               char *err, size_t err_cap);

/* ---------------------------------------------------------------- sampling */

/*
 * perm(seed, epoch, i): position i of the pseudo-random order of [0, K) used
 * in that epoch; -1 when K < 1 or i is not in [0, K). O(1) memory, expected
 * O(1) time (about 2 network evaluations).
 *
 * Construction: an unbalanced Feistel network over [0, 2^b) with
 * b = max(2, ceil(log2 K)) bits, and cycle-walking (apply the network again
 * until the value falls below K; this terminates because the walk follows
 * i's cycle of a permutation, and as 2^b < 2K for K > 2 it takes fewer than
 * 2 steps on average). Each of the 8 rounds splits the b-bit value into a
 * high part h and a low part l of w bits, w alternating between floor(b/2)
 * and b - floor(b/2), and maps (h, l) to (l, h XOR F_r(l)), which is
 * invertible whatever F_r is, so the network is a bijection on [0, 2^b) for
 * any b (a power-of-two domain without rounding b up to an even number).
 * F_r(l) is the low bits of splitmix64's output mixer applied to l, the round
 * number and a key mixed from (seed, epoch). K = 1 gives 0.
 */
int64_t ex_perm_index(uint64_t seed, uint64_t epoch, int64_t K, int64_t i);

/* The window of global training sample g (>= 0) in a view of K windows:
 * ex_perm_index(seed, g / K, K, g % K); -1 on bad arguments. */
int64_t ex_sample_window(uint64_t seed, int64_t K, int64_t g);

/*
 * Rank `rank`'s share of the micro-step that starts at global sample `pos`:
 * row b (0 <= b < B) is sample g = pos + rank B + b of `train`, written as
 * inputs[b][t] = window token t and targets[b][t] = window token t + 1, for
 * t in [0, T). inputs, targets: [B][T], caller-owned. Tokens are copied from
 * the mapped files; nothing is allocated. The caller advances pos by W B after
 * the micro-step (W = world size; the fill does not need W). Fails when the
 * view has no window (N <= T), or pos < 0, rank < 0, B < 1, T < 1, or the
 * sample numbers overflow int64.
 */
int ex_train_batch(ex_view train, int T, uint64_t seed, int64_t pos, int rank, int B,
                     int32_t *inputs, int32_t *targets, char *err, size_t err_cap);

/*
 * Validation sample j is window j of `val`, in order (no shuffling), so an
 * evaluation over the first n windows always sees the same tokens. There are
 * ex_view_num_windows(val, T) of them. inputs, targets: [T]. Fails unless
 * 0 <= j < that number.
 */
int ex_val_sample(ex_view val, int T, int64_t j, int32_t *inputs, int32_t *targets,
                    char *err, size_t err_cap);

/* ---------------------------------------------------------------- baseline */

/* What a model that ignores context scores, in nats per token. */
typedef struct ex_unigram {
    /* The entropy -sum_t p(t) ln p(t) of the training view's token
     * frequencies p(t) = c(t) / n (maximum likelihood, no smoothing): the
     * best loss a context-free model can reach on the training tokens. */
    double train_entropy;
    /* -1/m sum over the validation view's tokens of ln q(token), where
     * q(t) = (c(t) + 1) / (n + V) is the training frequency with add-one
     * (Laplace) smoothing over the vocab V, so that a token unseen in
     * training costs a finite ln((n + V) / 1). NAN when the validation view
     * is empty. */
    double val_cross_entropy;
    int64_t train_tokens; /* n: every token of the training view */
    int64_t val_tokens;   /* m: every token of the validation view */
    int vocab_size;       /* V as passed */
    int train_distinct;   /* how many token ids occur in the training view */
} ex_unigram;

/*
 * Counts the tokens of `train` and of `val` (one pass over each, with a
 * counts array of vocab_size entries; val may be an empty view) and fills
 * *out. vocab_size is the model's vocabulary (256 for the byte tokenizer,
 * 50257 for GPT-2's); a token >= vocab_size is an error that names it and its
 * position. Fails on an empty training view or when memory runs out.
 */
int ex_unigram_baseline(ex_view train, ex_view val, int vocab_size, ex_unigram *out,
                          char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif /* EX_DATA_H */
