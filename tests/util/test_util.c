#include "test_util.h"

#include <dirent.h>

#include <string.h>

int zt_failures = 0;
int zt_checks = 0;
int zt_rank = -1;

void zt_fail_header(const char *file, int line) {
    zt_failures++;
    if (zt_rank >= 0)
        fprintf(stderr, "FAIL rank %d %s:%d\n", zt_rank, file, line);
    else
        fprintf(stderr, "FAIL %s:%d\n", file, line);
}

void zt_fails_with_(zs_status got, zs_status expected, const char *text, const char *expr,
                    const char *file, int line) {
    zt_checks++;
    const char *message = zs_last_error();
    if (got != expected || (text && !strstr(message, text))) {
        zt_fail_header(file, line);
        fprintf(stderr, "  %s\n  expected status %s with a message containing \"%s\"\n"
                        "  got      status %s with message \"%s\"\n",
                expr, zs_status_name(expected), text ? text : "", zs_status_name(got), message);
    }
}

int zt_finish(const char *test_name) {
    if (zt_rank <= 0 || zt_failures) {
        if (zt_rank >= 0)
            fprintf(stderr, "%s: rank %d: %d checks, %d failed\n", test_name, zt_rank, zt_checks,
                    zt_failures);
        else
            fprintf(stderr, "%s: %d checks, %d failed\n", test_name, zt_checks, zt_failures);
    }
    if (zt_checks == 0) {
        fprintf(stderr, "%s: no checks ran; a test that checks nothing fails\n", test_name);
        return 1;
    }
    return zt_failures ? 1 : 0;
}

void zt_read_text(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

int zt_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}
