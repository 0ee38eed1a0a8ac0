/* File name patterns (see file_pattern.h). */
#define _GNU_SOURCE
#include "core/file_pattern.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

size_t zs__file_pattern_expand(const char *pattern, int rank, char *out, size_t capacity) {
    size_t needed = 0;
    for (const char *c = pattern; *c; c++) {
        char piece[256];
        if (c[0] == '%' && c[1]) {
            c++;
            if (*c == 'h') {
                if (gethostname(piece, sizeof piece) != 0) strcpy(piece, "host");
                piece[sizeof piece - 1] = '\0';
            } else if (*c == 'p') {
                snprintf(piece, sizeof piece, "%ld", (long)getpid());
            } else if (*c == 'r') {
                snprintf(piece, sizeof piece, "%d", rank);
            } else {
                piece[0] = *c;
                piece[1] = '\0';
            }
        } else {
            piece[0] = *c;
            piece[1] = '\0';
        }
        size_t n = strlen(piece);
        /* Copy what fits; keep counting past the end, like snprintf. */
        if (capacity > 0 && needed < capacity - 1) {
            size_t room = capacity - 1 - needed;
            memcpy(out + needed, piece, n < room ? n : room);
        }
        needed += n;
    }
    if (capacity > 0) out[needed < capacity ? needed : capacity - 1] = '\0';
    return needed;
}
