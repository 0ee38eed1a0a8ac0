#include "data_test_files.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

static char dir_path[1024];

static void remove_dir(void) {
    if (!dir_path[0]) return;
    DIR *d = opendir(dir_path);
    if (d) {
        struct dirent *e;
        char p[2048];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", dir_path, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir_path);
    dir_path[0] = '\0';
}

const char *gt_dir(void) {
    if (!dir_path[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir_path, sizeof dir_path, "%s/data_test.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir_path)) {
            fprintf(stderr, "cannot create a temporary directory from %s\n", dir_path);
            dir_path[0] = '\0';
            ZT_REQUIRE(!"mkdtemp");
        }
        atexit(remove_dir);
    }
    return dir_path;
}

char *gt_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", gt_dir(), name);
    return out;
}

void gt_write(const char *name, const void *data, size_t n) {
    char p[2048];
    FILE *f = fopen(gt_path(p, sizeof p, name), "wb");
    ZT_REQUIRE(f != NULL);
    ZT_REQUIRE(n == 0 || fwrite(data, 1, n, f) == n);
    ZT_REQUIRE(fclose(f) == 0);
}

static void put_le32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(u >> (8 * k));
}

void gt_write_shard(const char *name, int32_t magic, int32_t version, int32_t declared,
                    const uint16_t *tokens, size_t n) {
    size_t size = 1024 + 2 * n;
    unsigned char *buf = calloc(1, size);
    ZT_REQUIRE(buf != NULL);
    put_le32(buf, magic);
    put_le32(buf + 4, version);
    put_le32(buf + 8, declared);
    for (size_t k = 0; k < n; k++) {
        buf[1024 + 2 * k] = (unsigned char)(tokens[k] & 0xff);
        buf[1024 + 2 * k + 1] = (unsigned char)(tokens[k] >> 8);
    }
    gt_write(name, buf, size);
    free(buf);
}

void gt_write_shard32(const char *name, int32_t declared, const uint32_t *tokens, size_t n) {
    size_t size = 1024 + 4 * n;
    unsigned char *buf = calloc(1, size);
    ZT_REQUIRE(buf != NULL);
    put_le32(buf, 20240801);
    put_le32(buf + 4, 7);
    put_le32(buf + 8, declared);
    for (size_t k = 0; k < n; k++) put_le32(buf + 1024 + 4 * k, (int32_t)tokens[k]);
    gt_write(name, buf, size);
    free(buf);
}

void gt_check_failure(int rc, const char *err, const char *const *want, const char *expr,
                      const char *file, int line) {
    zt_checks++;
    int ok = rc == -1;
    for (const char *const *w = want; ok && *w; w++) ok = strstr(err, *w) != NULL;
    if (!ok) {
        zt_fail_header(file, line);
        fprintf(stderr, "  %s\n  expected -1 with a message containing", expr);
        for (const char *const *w = want; *w; w++) fprintf(stderr, " \"%s\"", *w);
        fprintf(stderr, "\n  got      %d with message \"%s\"\n", rc, err);
    }
}

ex_tokens *gt_counting_stream(const char *name, int n) {
    ZT_REQUIRE(n > 0 && n <= 65536);
    uint16_t *tokens = malloc(sizeof(uint16_t) * (size_t)n);
    ZT_REQUIRE(tokens != NULL);
    for (int i = 0; i < n; i++) tokens[i] = (uint16_t)i;
    gt_write_shard(name, 20240520, 1, n, tokens, (size_t)n);
    free(tokens);
    char p[2048], err[EX_ERR_CAP];
    ex_tokens *ts = NULL;
    GT_OK(ex_tokens_open(gt_path(p, sizeof p, name), &ts, err, sizeof err), err);
    ZT_REQUIRE(ts != NULL);
    return ts;
}
