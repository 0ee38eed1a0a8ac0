/* "Did you mean ...?" for unknown configuration keys: the nearest known key by
 * edit distance (Levenshtein: insertions, deletions, substitutions). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config_internal.h"

/* Edit distance between a[0, an) and b[0, bn); SIZE_MAX if memory runs out
 * (the suggestion is a courtesy, so running out only loses the suggestion). */
static size_t edit_distance(const char *a, size_t an, const char *b, size_t bn) {
    size_t *row = zs__malloc((bn + 1) * sizeof *row);
    if (!row) return SIZE_MAX;
    for (size_t j = 0; j <= bn; j++) row[j] = j;
    for (size_t i = 1; i <= an; i++) {
        size_t diagonal = row[0]; /* row[i-1][j-1] */
        row[0] = i;
        for (size_t j = 1; j <= bn; j++) {
            size_t above = row[j]; /* row[i-1][j] */
            size_t best = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    size_t d = row[bn];
    free(row);
    return d;
}

static const char *last_component(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

const char *zs__config_nearest(const char *word, const char *const *candidates, size_t count) {
    const char *word_last = last_component(word);
    size_t word_n = strlen(word), word_last_n = strlen(word_last);
    const char *best = NULL;
    size_t best_score = SIZE_MAX;
    for (size_t i = 0; i < count; i++) {
        const char *c = candidates[i];
        const char *c_last = last_component(c);
        size_t score = edit_distance(word, word_n, c, strlen(c));
        /* A right name in the wrong group ("stage" for "zero.stage") costs one. */
        size_t by_last = edit_distance(word_last, word_last_n, c_last, strlen(c_last));
        if (by_last != SIZE_MAX && by_last + 1 < score) score = by_last + 1;
        if (score < best_score) {
            best_score = score;
            best = c;
        }
    }
    /* Beyond this many edits a suggestion is more confusing than helpful. */
    size_t threshold = (word_last_n + 2) / 3;
    if (threshold < 2) threshold = 2;
    return best_score <= threshold ? best : NULL;
}
