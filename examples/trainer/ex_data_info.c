/* data_info — what the examples' data side makes of a token
 * stream: its files and size, the train/validation split, the windows, and
 * the unigram baseline ("a model that ignores context scores X").
 *
 *   data_info PATH [T [VAL_FRACTION [VOCAB]]]
 *
 * PATH is raw text or llm.c .bin shards (a glob pattern), as for
 * ex_tokens_open. T (default 1024) is the sequence length, VAL_FRACTION
 * (default 0.05) the held-out part, VOCAB the vocabulary used for the
 * baseline's smoothing (default 256 for text, 50257 for shards). Exit status
 * 0, 1 on any error (the message names the file), 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>

#include "ex_data.h"

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: %s PATH [T [VAL_FRACTION [VOCAB]]]\n", argv[0]);
        return 2;
    }
    long T = 1024, vocab = 0;
    double val_fraction = 0.05;
    if (argc > 2 && parse_long(argv[2], 1, 1L << 30, &T) != 0) {
        fprintf(stderr, "data_info: T = %s is not an integer in [1, 2^30]\n", argv[2]);
        return 2;
    }
    if (argc > 3) {
        char *end;
        val_fraction = strtod(argv[3], &end);
        if (*argv[3] == '\0' || *end != '\0') {
            fprintf(stderr, "data_info: VAL_FRACTION = %s is not a number\n", argv[3]);
            return 2;
        }
    }
    if (argc > 4 && parse_long(argv[4], 1, 1L << 24, &vocab) != 0) {
        fprintf(stderr, "data_info: VOCAB = %s is not an integer in [1, 2^24]\n", argv[4]);
        return 2;
    }

    char err[EX_ERR_CAP];
    ex_tokens *ts = NULL;
    if (ex_tokens_open(argv[1], &ts, err, sizeof err) != 0) {
        fprintf(stderr, "data_info: %s\n", err);
        return 1;
    }
    int rc = 1;
    int text = ex_tokens_is_text(ts);
    if (vocab == 0) vocab = text ? 256 : 50257;
    int64_t n = ex_tokens_count(ts);
    int max_token = ex_tokens_max_token(ts);
    printf("stream      %s (%s, %d file%s)\n", argv[1], text ? "raw text, byte tokens" : "llm.c shards",
           ex_tokens_num_files(ts), ex_tokens_num_files(ts) == 1 ? "" : "s");
    printf("tokens      %lld, largest id %d\n", (long long)n, max_token);
    if (max_token >= vocab) {
        fprintf(stderr, "data_info: token id %d does not fit the vocabulary of %ld\n",
                max_token, vocab);
        goto done;
    }
    ex_view train, val;
    if (ex_split(ex_view_all(ts), (int)T, val_fraction, &train, &val, err, sizeof err) != 0) {
        fprintf(stderr, "data_info: %s\n", err);
        goto done;
    }
    printf("split       T = %ld, val_fraction %g: train [%lld, %lld) %lld windows, "
           "val [%lld, %lld) %lld windows\n",
           T, val_fraction, (long long)train.begin, (long long)train.end,
           (long long)ex_view_num_windows(train, (int)T), (long long)val.begin,
           (long long)val.end, (long long)ex_view_num_windows(val, (int)T));
    ex_unigram u;
    if (ex_unigram_baseline(train, val, (int)vocab, &u, err, sizeof err) != 0) {
        fprintf(stderr, "data_info: %s\n", err);
        goto done;
    }
    printf("unigram     train entropy %.4f nats/token (%d distinct ids); val cross-entropy "
           "%.4f nats/token (add-one smoothing over %d)\n",
           u.train_entropy, u.train_distinct, u.val_cross_entropy, u.vocab_size);
    rc = 0;
done:
    ex_tokens_destroy(ts);
    return rc;
}
