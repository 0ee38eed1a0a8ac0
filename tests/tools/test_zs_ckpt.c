/* zs-ckpt against the synthetic checkpoint of fixture.h, run as separate
 * processes exactly as a user runs them:
 *
 *   test_zs_ckpt <zs-ckpt> <make_fixture> <work dir> <case>
 *
 * Cases (one ctest each, each in its own fresh directory under <work dir>):
 *   info     the layout, files and totals are printed, from a root and a step
 *   verify   a good checkpoint passes with the right counts
 *   export   fp32 equals the master values bit for bit; bf16/fp16 equal
 *            zs_convert of them; names, shapes, metadata; no optim file read
 *   buffer   a 4096-byte (and a 16-byte) buffer gives the same bytes as 64 MiB
 *   corrupt  a flipped shard byte, a truncated shard, a deleted shard, a
 *            flipped manifest byte, an unlisted tensor, a corrupt master
 *            under export, a hostile `latest`, and usage errors
 *   progress with ZS_PROGRESS_AFTER_S=0, verify and export print progress
 *            lines (percent, ETA, ending at 100%) to stderr; --quiet and a
 *            short run under the default quiet period print none
 *   hostile_header  a shard whose header lists 1,000,000 tensors (52 MB of
 *            header) is refused before it is parsed: a message that names
 *            the bound from the manifest, in a few MB of memory (the
 *            unbounded parse took 1.9 GB and 7.9 s)
 *   user_state  user-state shards damaged four ways (a flipped data byte,
 *            truncated, metadata of another world size, deleted): verify,
 *            export and export --hf all exit 1 with the same message
 *   hostile_names  a unit and a parameter named with ESC sequences, a C1
 *            control and Unicode bidirectional override and isolate: info
 *            prints them escaped (\xNN, \u{NNNN}), never raw
 *   world_size  a manifest whose world size is too large for its file
 *            count to be listed: verify says so in words (it printed -1)
 *
 *   test_zs_ckpt <zs-ckpt> <make_fixture> <work dir> real <root> <dump.f32>
 *
 * checks a checkpoint written by the runtime (make_real_ckpt.c): it
 * verifies, and its fp32 export equals the gathered parameters bit for bit
 * (bf16: zs_convert of them). */
#define _GNU_SOURCE /* memmem, wait4 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "fixture.h"
#include "test_util.h"

static const char *tool, *fixture_tool;
static char work[4096];

typedef struct run_result {
    int status; /* exit code, or -1 if it did not exit normally */
    long maxrss_kb; /* the child's peak resident memory */
    char out[1 << 16];
    char err[1 << 16];
} run_result;

/* The address-space limit of the children run() starts (0: none). */
static rlim_t child_address_space;

/* Runs argv (NULL-terminated) with stdout and stderr captured. */
static void run(run_result *r, const char *const *argv) {
    char out_path[4200], err_path[4200];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", work);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", work);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        if (child_address_space) {
            const struct rlimit limit = {child_address_space, child_address_space};
            if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    wait4(pid, &st, 0, &usage);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->maxrss_kb = usage.ru_maxrss;
    zt_read_text(out_path, r->out, sizeof r->out);
    zt_read_text(err_path, r->err, sizeof r->err);
}

#define RUN(r, ...)                                                   \
    do {                                                              \
        const char *argv_[] = {__VA_ARGS__, NULL};                    \
        run((r), argv_);                                              \
    } while (0)

#define CHECK_CONTAINS(text, needle)                                                   \
    ZT_CHECK_MSG(strstr((text), (needle)) != NULL, "expected \"%s\" in:\n%s", (needle), \
                 (text))

static char root[4300], step[4400], dump_path[4300];

/* A fresh fixture under <work>/<name>.ckpt, made with make_fixture's
 * options (up to two; NULL for none). */
static void fresh_fixture_with(const char *name, const char *option, const char *value) {
    snprintf(root, sizeof root, "%s/%s.ckpt", work, name);
    snprintf(step, sizeof step, "%s/%s", root, FX_STEP_DIR);
    snprintf(dump_path, sizeof dump_path, "%s/%s.f32", work, name);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ZT_REQUIRE(system(cmd) == 0);
    run_result *r = malloc(sizeof *r);
    if (option && value)
        RUN(r, fixture_tool, root, dump_path, option, value);
    else if (option)
        RUN(r, fixture_tool, root, dump_path, option);
    else
        RUN(r, fixture_tool, root, dump_path);
    ZT_CHECK_MSG(r->status == 0, "make_fixture failed (%d): %s", r->status, r->err);
    ZT_REQUIRE(r->status == 0);
    free(r);
}

static void fresh_fixture(const char *name, int extra_tensor) {
    fresh_fixture_with(name, extra_tensor ? "--extra-tensor" : NULL, NULL);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void *read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *bytes = (size_t)n;
    return buf;
}

static const char *const file_names[FX_RANKS * 3] = {
    "rank00000.master.safetensors", "rank00000.optim.safetensors", "rank00000.user.safetensors",
    "rank00001.master.safetensors", "rank00001.optim.safetensors", "rank00001.user.safetensors"};

static uint64_t total_shard_bytes(void) {
    uint64_t sum = 0;
    char path[4700];
    for (int i = 0; i < FX_RANKS * 3; i++) {
        snprintf(path, sizeof path, "%s/%s", step, file_names[i]);
        sum += file_size(path);
    }
    return sum;
}

static void case_info(void) {
    fresh_fixture("info", 0);
    run_result *r = malloc(sizeof *r);
    for (int from_root = 1; from_root >= 0; from_root--) {
        RUN(r, tool, "info", from_root ? root : step);
        ZT_CHECK_MSG(r->status == 0, "info exited %d: %s", r->status, r->err);
        CHECK_CONTAINS(r->out, FX_STEP_DIR);
        if (from_root) CHECK_CONTAINS(r->out, "(chosen in the root");
        CHECK_CONTAINS(r->out, "version 1");
        CHECK_CONTAINS(r->out, "matches manifest.json.xxh3");
        CHECK_CONTAINS(r->out, "step           10 ");
        CHECK_CONTAINS(r->out, "skipped steps  2");
        CHECK_CONTAINS(r->out, "2 ranks, ZeRO stage 3");
        CHECK_CONTAINS(r->out, "compute dtype  fp32");
        CHECK_CONTAINS(r->out, "optimizer      adamw");
        CHECK_CONTAINS(r->out, "loss scale     1\n");
        CHECK_CONTAINS(r->out, "config hash    0123456789abcdef");
        CHECK_CONTAINS(r->out, "2 units, 3 parameters, 5283 elements");
        CHECK_CONTAINS(r->out, "unit 0: embed");
        CHECK_CONTAINS(r->out, "unit 1: block");
        CHECK_CONTAINS(r->out, "[37, 113]  4181 elements");
        CHECK_CONTAINS(r->out, "[97]  97 elements  no_decay");
        CHECK_CONTAINS(r->out, "[3, 5, 67]  1005 elements");
        char line[128];
        for (int i = 0; i < FX_RANKS * 3; i++) {
            char path[4700];
            snprintf(path, sizeof path, "%s/%s", step, file_names[i]);
            snprintf(line, sizeof line, "%llu bytes", (unsigned long long)file_size(path));
            CHECK_CONTAINS(r->out, file_names[i]);
            CHECK_CONTAINS(r->out, line);
        }
        snprintf(line, sizeof line, "total bytes    %llu\n",
                 (unsigned long long)total_shard_bytes());
        CHECK_CONTAINS(r->out, line);
    }
    free(r);
}

static void case_verify(void) {
    fresh_fixture("verify", 0);
    run_result *r = malloc(sizeof *r);
    /* Tensors: master 5 (two parameters split, one on rank 0), optim 10,
     * user 3 (rank 0's global and per-rank entries, rank 1's per-rank). */
    char expected[128];
    snprintf(expected, sizeof expected, "OK: 6 files, 18 tensors, %llu bytes verified\n",
             (unsigned long long)total_shard_bytes());
    RUN(r, tool, "verify", step);
    ZT_CHECK_MSG(r->status == 0, "verify exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->out, expected);
    RUN(r, tool, "verify", root);
    ZT_CHECK_MSG(r->status == 0, "verify of the root exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->out, expected);
    free(r);
}

static void case_progress(void) {
    fresh_fixture("progress", 0);
    run_result *r = malloc(sizeof *r);
    char out[4400];
    snprintf(out, sizeof out, "%s/progress.safetensors", work);
    /* The default quiet period (2 s) outlasts a run this small. */
    unsetenv("ZS_PROGRESS_AFTER_S");
    RUN(r, tool, "verify", step);
    ZT_CHECK_MSG(r->status == 0, "verify exited %d: %s", r->status, r->err);
    ZT_CHECK_MSG(strstr(r->err, "ETA") == NULL, "a short verify printed progress: %s", r->err);

    setenv("ZS_PROGRESS_AFTER_S", "0", 1);
    RUN(r, tool, "verify", step);
    ZT_CHECK_MSG(r->status == 0, "verify exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->err, "zs-ckpt verify: ");
    CHECK_CONTAINS(r->err, "ETA");
    CHECK_CONTAINS(r->err, "100% ");
    CHECK_CONTAINS(r->out, "OK: 6 files");
    RUN(r, tool, "export", "--dtype", "bf16", step, out);
    ZT_CHECK_MSG(r->status == 0, "export exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->err, "zs-ckpt export: ");
    CHECK_CONTAINS(r->err, "ETA");
    CHECK_CONTAINS(r->err, "100% ");
    RUN(r, tool, "verify", "--quiet", step);
    ZT_CHECK_MSG(r->status == 0, "verify --quiet exited %d: %s", r->status, r->err);
    ZT_CHECK_MSG(r->err[0] == '\0', "verify --quiet printed: %s", r->err);
    RUN(r, tool, "export", "--quiet", step, out);
    ZT_CHECK_MSG(r->status == 0, "export --quiet exited %d: %s", r->status, r->err);
    ZT_CHECK_MSG(r->err[0] == '\0', "export --quiet printed: %s", r->err);
    RUN(r, tool, "verify", "--quiet");
    ZT_EQ_INT(r->status, 2);
    unsetenv("ZS_PROGRESS_AFTER_S");
    free(r);
}

/* Checks an export against the fixture's master values, converted to dtype. */
static void check_export(const char *path, zs_dtype dtype, const float *master) {
    zs__st_file *f = NULL;
    ZT_OK(zs__st_open(path, &f));
    if (!f) return;
    ZT_EQ_INT(zs__st_count(f), FX_PARAMS);
    const char *meta_format = zs__st_meta_get(f, "format");
    const char *meta_step = zs__st_meta_get(f, "step");
    const char *meta_dtype = zs__st_meta_get(f, "dtype");
    /* "pt": transformers refuses any other format. */
    ZT_CHECK(meta_format && strcmp(meta_format, "pt") == 0);
    ZT_CHECK(meta_step && strcmp(meta_step, "10") == 0);
    ZT_CHECK_MSG(meta_dtype && strcmp(meta_dtype, zs_dtype_name(dtype)) == 0, "dtype %s",
                 meta_dtype ? meta_dtype : "(none)");
    const zs__st_dtype want = dtype == ZS_DTYPE_FP32 ? ZS_ST_F32
                            : dtype == ZS_DTYPE_BF16 ? ZS_ST_BF16
                                                     : ZS_ST_F16;
    const size_t size = zs_dtype_size(dtype);
    int64_t at = 0;
    for (int p = 0; p < FX_PARAMS; p++) {
        const fx_param *fp = &fx_params[p];
        const zs__st_entry *e = zs__st_entry_at(f, p);
        ZT_CHECK_MSG(strcmp(e->name, fp->name) == 0, "tensor %d is %s, expected %s", p, e->name,
                     fp->name);
        ZT_EQ_INT(e->dtype, want);
        ZT_EQ_INT(e->ndim, fp->ndim);
        for (int d = 0; d < fp->ndim; d++) ZT_EQ_INT(e->shape[d], fp->shape[d]);
        unsigned char *expected = malloc((size_t)fp->numel * size);
        unsigned char *got = malloc((size_t)fp->numel * size);
        ZT_OK(zs_convert(expected, dtype, master + at, ZS_DTYPE_FP32, fp->numel));
        ZT_OK(zs__st_read(f, e, 0, got, (uint64_t)fp->numel * size));
        int64_t first_bad = -1;
        for (int64_t i = 0; i < fp->numel && first_bad < 0; i++)
            if (memcmp(expected + i * (int64_t)size, got + i * (int64_t)size, size) != 0)
                first_bad = i;
        ZT_CHECK_MSG(first_bad < 0, "%s %s: element %lld differs from the master value %a",
                     path, fp->name, (long long)first_bad, first_bad >= 0 ? master[at + first_bad] : 0.0f);
        free(expected);
        free(got);
        at += fp->numel;
    }
    zs__st_close(f);
}

static void case_export(void) {
    fresh_fixture("export", 0);
    size_t dump_bytes = 0;
    float *master = read_all(dump_path, &dump_bytes);
    ZT_REQUIRE(master != NULL);
    ZT_EQ_U64(dump_bytes, (37 * 113 + 97 + 3 * 5 * 67) * sizeof(float));
    run_result *r = malloc(sizeof *r);
    static const char *const dtypes[3] = {"fp32", "bf16", "fp16"};
    static const zs_dtype values[3] = {ZS_DTYPE_FP32, ZS_DTYPE_BF16, ZS_DTYPE_FP16};
    char out[4400], tmp[4500];
    for (int d = 0; d < 3; d++) {
        snprintf(out, sizeof out, "%s/export.%s.safetensors", work, dtypes[d]);
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        if (d == 0)
            RUN(r, tool, "export", root, out); /* the default dtype is fp32 */
        else
            RUN(r, tool, "export", "--dtype", dtypes[d], root, out);
        ZT_CHECK_MSG(r->status == 0, "export %s exited %d: %s", dtypes[d], r->status, r->err);
        CHECK_CONTAINS(r->out, "exported step 10: 3 tensors");
        ZT_CHECK_MSG(access(tmp, F_OK) != 0, "%s left behind", tmp);
        check_export(out, values[d], master);
    }

    /* fp32 export: the data section is exactly the dump, byte for byte. */
    snprintf(out, sizeof out, "%s/export.fp32.safetensors", work);
    size_t bytes = 0;
    unsigned char *whole = read_all(out, &bytes);
    ZT_REQUIRE(whole != NULL && bytes > 8);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | whole[i];
    ZT_EQ_U64(bytes, 8 + header + dump_bytes);
    ZT_CHECK(8 + header + dump_bytes == bytes &&
             memcmp(whole + 8 + header, master, dump_bytes) == 0);
    free(whole);

    /* Export reads master files only: without the optimizer files it still
     * succeeds, with the same bytes. */
    char path[4700], again[4400];
    for (int rank = 0; rank < FX_RANKS; rank++) {
        snprintf(path, sizeof path, "%s/rank%05d.optim.safetensors", step, rank);
        ZT_CHECK(unlink(path) == 0);
    }
    snprintf(again, sizeof again, "%s/export.no_optim.safetensors", work);
    RUN(r, tool, "export", step, again);
    ZT_CHECK_MSG(r->status == 0, "export without optim files exited %d: %s", r->status, r->err);
    size_t b1 = 0, b2 = 0;
    void *x = read_all(out, &b1), *y = read_all(again, &b2);
    ZT_CHECK(x && y && b1 == b2 && memcmp(x, y, b1) == 0);
    free(x);
    free(y);
    free(r);
    free(master);
}

static void case_buffer(void) {
    fresh_fixture("buffer", 0);
    run_result *r = malloc(sizeof *r);
    static const char *const dtypes[2] = {"fp32", "fp16"};
    for (int d = 0; d < 2; d++) {
        char big[4400], small[4400], tiny[4400];
        snprintf(big, sizeof big, "%s/big.%s.safetensors", work, dtypes[d]);
        snprintf(small, sizeof small, "%s/small.%s.safetensors", work, dtypes[d]);
        snprintf(tiny, sizeof tiny, "%s/tiny.%s.safetensors", work, dtypes[d]);
        RUN(r, tool, "export", "--dtype", dtypes[d], "--buffer-bytes", "67108864", root, big);
        ZT_CHECK_MSG(r->status == 0, "exit %d: %s", r->status, r->err);
        /* 4096 bytes hold 1024 fp32 values (682 with fp16 copies): pieces
         * cross the ranks' split inside embed.weight and block.weight. */
        RUN(r, tool, "export", "--dtype", dtypes[d], "--buffer-bytes", "4096", root, small);
        ZT_CHECK_MSG(r->status == 0, "exit %d: %s", r->status, r->err);
        RUN(r, tool, "export", "--dtype", dtypes[d], "--buffer-bytes", "16", root, tiny);
        ZT_CHECK_MSG(r->status == 0, "exit %d: %s", r->status, r->err);
        size_t nb = 0, ns = 0, nt = 0;
        unsigned char *b = read_all(big, &nb), *s = read_all(small, &ns), *t = read_all(tiny, &nt);
        ZT_REQUIRE(b && s && t);
        ZT_EQ_U64(nb, ns);
        ZT_EQ_U64(nb, nt);
        ZT_CHECK_MSG(nb == ns && memcmp(b, s, nb) == 0, "%s: 4096-byte buffer export differs",
                     dtypes[d]);
        ZT_CHECK_MSG(nb == nt && memcmp(b, t, nb) == 0, "%s: 16-byte buffer export differs",
                     dtypes[d]);
        free(b);
        free(s);
        free(t);
    }
    free(r);
}

static void flip_byte(const char *path, long offset_from_end) {
    int fd = open(path, O_RDWR);
    ZT_REQUIRE(fd >= 0);
    off_t size = lseek(fd, 0, SEEK_END);
    off_t at = offset_from_end >= 0 ? size - 1 - offset_from_end : size / 2;
    unsigned char c = 0;
    ZT_REQUIRE(pread(fd, &c, 1, at) == 1);
    c ^= 0x40;
    ZT_REQUIRE(pwrite(fd, &c, 1, at) == 1);
    close(fd);
}

/* verify must exit 1 and name `file` in its message. */
static void expect_verify_failure(const char *what, const char *file, const char *reason) {
    run_result *r = malloc(sizeof *r);
    RUN(r, tool, "verify", step);
    ZT_CHECK_MSG(r->status == 1, "%s: verify exited %d, expected 1; stdout: %s stderr: %s", what,
                 r->status, r->out, r->err);
    CHECK_CONTAINS(r->err, file);
    CHECK_CONTAINS(r->err, reason);
    ZT_CHECK_MSG(strstr(r->out, "OK") == NULL, "%s: verify printed OK: %s", what, r->out);
    fprintf(stderr, "  %s -> %s", what, r->err);
    free(r);
}

static void case_corrupt(void) {
    char path[4700];

    fresh_fixture("flip", 0);
    snprintf(path, sizeof path, "%s/rank00001.optim.safetensors", step);
    flip_byte(path, 5);
    expect_verify_failure("flipped shard byte", "rank00001.optim.safetensors", "content hash");

    fresh_fixture("truncate", 0);
    snprintf(path, sizeof path, "%s/rank00000.master.safetensors", step);
    ZT_REQUIRE(truncate(path, (off_t)file_size(path) - 4) == 0);
    expect_verify_failure("truncated shard", "rank00000.master.safetensors", "data section");

    fresh_fixture("delete", 0);
    snprintf(path, sizeof path, "%s/rank00001.user.safetensors", step);
    ZT_REQUIRE(unlink(path) == 0);
    expect_verify_failure("deleted shard", "rank00001.user.safetensors", "incomplete");

    fresh_fixture("manifest", 0);
    snprintf(path, sizeof path, "%s/manifest.json", step);
    flip_byte(path, -1);
    expect_verify_failure("flipped manifest byte", "manifest.json", "differs from");

    fresh_fixture("extra", 1);
    expect_verify_failure("unlisted tensor", "rank00001.master.safetensors",
                          "the header holds 3 tensors but the manifest lists 2");

    /* export refuses a corrupt master value and leaves no output behind. */
    fresh_fixture("export_corrupt", 0);
    snprintf(path, sizeof path, "%s/rank00000.master.safetensors", step);
    flip_byte(path, 3);
    run_result *r = malloc(sizeof *r);
    char out[4400], tmp[4500];
    snprintf(out, sizeof out, "%s/corrupt.safetensors", work);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    RUN(r, tool, "export", step, out);
    ZT_CHECK_MSG(r->status == 1, "export of a corrupt master exited %d", r->status);
    CHECK_CONTAINS(r->err, "rank00000.master.safetensors");
    ZT_CHECK(access(out, F_OK) != 0 && access(tmp, F_OK) != 0);

    /* A hostile or broken `latest` never leads outside the root: it is
     * ignored with a warning, and the newest step that verifies is used (as
     * zs_load does). */
    fresh_fixture("latest", 0);
    static const char *const bad_latest[] = {"../latest.ckpt/step_00000010\n", "step_0000010\n",
                                             "step_000000100", "step_00000010\nstep_00000011\n",
                                             "/etc\n"};
    char latest[4400];
    snprintf(latest, sizeof latest, "%s/latest", root);
    for (size_t i = 0; i < sizeof bad_latest / sizeof bad_latest[0]; i++) {
        FILE *f = fopen(latest, "wb");
        ZT_REQUIRE(f != NULL);
        fputs(bad_latest[i], f);
        fclose(f);
        RUN(r, tool, "info", root);
        ZT_CHECK_MSG(r->status == 0, "latest \"%s\": info exited %d: %s", bad_latest[i],
                     r->status, r->err);
        CHECK_CONTAINS(r->err, "does not hold exactly a step directory name");
        CHECK_CONTAINS(r->out, FX_STEP_DIR);
    }

    /* Usage errors exit 2 with the usage text. */
    RUN(r, tool, "frobnicate", root);
    ZT_EQ_INT(r->status, 2);
    CHECK_CONTAINS(r->err, "usage: zs-ckpt");
    RUN(r, tool, "export", "--dtype", "fp8", step, out);
    ZT_EQ_INT(r->status, 2);
    RUN(r, tool, "export", "--buffer-bytes", "8", step, out);
    ZT_EQ_INT(r->status, 2);
    RUN(r, tool, "export", step);
    ZT_EQ_INT(r->status, 2);
    RUN(r, tool, "verify");
    ZT_EQ_INT(r->status, 2);
    RUN(r, tool, "--help");
    ZT_EQ_INT(r->status, 0);
    CHECK_CONTAINS(r->out, "usage: zs-ckpt");
    /* A directory that is neither a step nor a root is an error, not usage. */
    RUN(r, tool, "verify", work);
    ZT_EQ_INT(r->status, 1);
    CHECK_CONTAINS(r->err, "neither a step directory");
    free(r);
}

/* A shard whose header lists 1,000,000 tensors of 0 bytes: well-formed
 * JSON within the format's 64 MB header limit, which a reader bounded only
 * by the format parses whole. */
static void write_million_tensor_shard(const char *path) {
    enum { TENSORS = 1000000 };
    const size_t cap = (size_t)60 << 20;
    char *header = malloc(cap);
    ZT_REQUIRE(header != NULL);
    size_t n = (size_t)snprintf(header, cap, "{\"__metadata__\":{\"format\":\"zeroshard-shard\"}");
    for (int t = 0; t < TENSORS; t++)
        n += (size_t)snprintf(header + n, cap - n,
                              ",\"%x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", t);
    n += (size_t)snprintf(header + n, cap - n, "}");
    ZT_REQUIRE(n < cap);
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    unsigned char length[8];
    for (int k = 0; k < 8; k++) length[k] = (unsigned char)((uint64_t)n >> (8 * k));
    ZT_REQUIRE(fwrite(length, 1, 8, f) == 8 && fwrite(header, 1, n, f) == n);
    ZT_REQUIRE(fclose(f) == 0);
    free(header);
}

static void case_hostile_header(void) {
    fresh_fixture("hostile", 0);
    char path[4700];
    snprintf(path, sizeof path, "%s/rank00001.user.safetensors", step);
    write_million_tensor_shard(path);
    ZT_CHECK_MSG(file_size(path) > ((uint64_t)40 << 20), "the header is only %llu bytes",
                 (unsigned long long)file_size(path));
    run_result *r = malloc(sizeof *r);
    /* The assertion is on the peak resident memory, far below the header's
     * own 52 MB, which a bounded reader never allocates. A cap on the
     * address space keeps an unbounded parse (1.9 GB) from taking the
     * machine's memory; sanitizer builds reserve terabytes of address space
     * for their shadow memory, so they run uncapped, with room for the
     * shadow in the bound. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const long limit_kb = 256 << 10;
#else
    const long limit_kb = 32 << 10;
    child_address_space = (rlim_t)1 << 30;
#endif
    RUN(r, tool, "verify", "--quiet", step);
    child_address_space = 0;
    fprintf(stderr, "  verify of a 1,000,000-tensor header: exit %d, peak %ld KiB: %s", r->status,
            r->maxrss_kb, r->err);
    ZT_CHECK_MSG(r->status == 1, "verify exited %d, expected 1: %s", r->status, r->err);
    CHECK_CONTAINS(r->err, "rank00001.user.safetensors");
    CHECK_CONTAINS(r->err, "the 1 tensor the manifest lists in it");
    ZT_CHECK_MSG(r->maxrss_kb < limit_kb,
                 "verify took %ld KiB at its peak to refuse the header; a reader bounded by "
                 "the manifest needs less than %ld", r->maxrss_kb, limit_kb);
    free(r);
    char cmd[9000]; /* the 52 MB file is not kept */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ZT_CHECK(system(cmd) == 0);
}

/* The message after "<program>: error: " on stderr, for comparing verdicts. */
static const char *error_cause(const char *err) {
    const char *at = strstr(err, "error: ");
    return at ? at + strlen("error: ") : err;
}

static void case_user_state(void) {
    static const char *const damages[] = {"flipped data byte", "truncated",
                                          "metadata of another world size", "deleted"};
    char path[4700], out[4400], hf[4400];
    snprintf(out, sizeof out, "%s/user_state.safetensors", work);
    snprintf(hf, sizeof hf, "%s/user_state_hf", work);
    run_result *v = malloc(sizeof *v), *e = malloc(sizeof *e);
    for (int d = 0; d < 4; d++) {
        fresh_fixture("user_state", 0);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", out, hf);
        ZT_REQUIRE(system(cmd) == 0);
        snprintf(path, sizeof path, "%s/rank00001.user.safetensors", step);
        if (d == 0) {
            flip_byte(path, 0); /* the last byte: rank 1's rng state */
        } else if (d == 1) {
            ZT_REQUIRE(truncate(path, (off_t)file_size(path) - 3) == 0);
        } else if (d == 2) {
            /* The same length, another world size: "2" becomes "3". */
            size_t bytes = 0;
            char *text = read_all(path, &bytes);
            ZT_REQUIRE(text != NULL);
            char *at = memmem(text, bytes, "\"world_size\":\"2\"", 16);
            ZT_REQUIRE(at != NULL);
            at[14] = '3';
            FILE *f = fopen(path, "wb");
            ZT_REQUIRE(f && fwrite(text, 1, bytes, f) == bytes && fclose(f) == 0);
            free(text);
        } else {
            ZT_REQUIRE(unlink(path) == 0);
        }
        RUN(v, tool, "verify", "--quiet", step);
        ZT_CHECK_MSG(v->status == 1, "%s: verify exited %d: %s", damages[d], v->status, v->err);
        CHECK_CONTAINS(v->err, "rank00001.user.safetensors");
        RUN(e, tool, "export", "--quiet", step, out);
        ZT_CHECK_MSG(e->status == 1, "%s: export exited %d where verify refused with: %s",
                     damages[d], e->status, v->err);
        ZT_CHECK_MSG(strcmp(error_cause(e->err), error_cause(v->err)) == 0,
                     "%s: export and verify give different causes:\n  export: %s  verify: %s",
                     damages[d], e->err, v->err);
        ZT_CHECK_MSG(access(out, F_OK) != 0, "%s: export left %s", damages[d], out);
        RUN(e, tool, "export", "--quiet", "--hf", hf, step);
        ZT_CHECK_MSG(e->status == 1, "%s: export --hf exited %d where verify refused with: %s",
                     damages[d], e->status, v->err);
        ZT_CHECK_MSG(strcmp(error_cause(e->err), error_cause(v->err)) == 0,
                     "%s: export --hf and verify give different causes:\n  export --hf: %s  "
                     "verify: %s",
                     damages[d], e->err, v->err);
        ZT_CHECK_MSG(access(hf, F_OK) != 0, "%s: export --hf left %s", damages[d], hf);
        fprintf(stderr, "  %s -> %s", damages[d], v->err);
    }
    free(v);
    free(e);
}

/* The runtime's checkpoint of make_real_ckpt.c. */
static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} real_params[] = {{"embed.weight", 2, {37, 11}}, {"embed.bias", 1, {53, 0}},
                   {"head.weight", 2, {3, 43}}};

/* Whether `text` holds a byte sequence a terminal would obey: a C0 control
 * other than newline, DEL, or (UTF-8) a C1 control or a bidirectional
 * embedding, override or isolate. Sets *at to its offset. */
static int holds_terminal_control(const char *text, size_t *at) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; s[i]; i++) {
        const int c0 = (s[i] < 0x20 && s[i] != '\n') || s[i] == 0x7f;
        const int c1 = s[i] == 0xc2 && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f;
        const int bidi = s[i] == 0xe2 && ((s[i + 1] == 0x80 && s[i + 2] >= 0xaa && s[i + 2] <= 0xae) ||
                                          (s[i + 1] == 0x81 && s[i + 2] >= 0xa6 && s[i + 2] <= 0xa9));
        if (c0 || c1 || bidi) {
            *at = i;
            return 1;
        }
    }
    return 0;
}

static void case_hostile_names(void) {
    fresh_fixture_with("hostile_names", "--hostile-names", NULL);
    run_result *r = malloc(sizeof *r);
    for (int from_root = 1; from_root >= 0; from_root--) {
        /* From the root, every file is verified first: the names are those
         * of a valid checkpoint. */
        RUN(r, tool, "info", from_root ? root : step);
        ZT_CHECK_MSG(r->status == 0, "info exited %d: %s", r->status, r->err);
        size_t at = 0;
        ZT_CHECK_MSG(!holds_terminal_control(r->out, &at),
                     "info printed a terminal control character at byte %zu: \"%.40s\"", at,
                     r->out + (at > 10 ? at - 10 : 0));
        CHECK_CONTAINS(r->out, "unit 0: embed\\x1b[31m\\u{9b}2J\\u{202e}dac\n");
        CHECK_CONTAINS(r->out, "embed\\u{2066}.weight\\x1b]0;x\\x07 ");
        CHECK_CONTAINS(r->out, "[37, 113]  4181 elements");
    }
    RUN(r, tool, "verify", root);
    ZT_CHECK_MSG(r->status == 0, "verify exited %d: %s", r->status, r->err);
    free(r);
}

static void case_world_size(void) {
    fresh_fixture_with("world_size", "--world-size", "2000000000");
    run_result *r = malloc(sizeof *r);
    RUN(r, tool, "verify", step);
    ZT_EQ_INT(r->status, 1);
    CHECK_CONTAINS(r->err, "world_size 2000000000 cannot be a save's: 2000000000 ranks would "
                           "write 3 files each");
    ZT_CHECK_MSG(strstr(r->err, "-1") == NULL, "verify printed -1: %s", r->err);
    free(r);
}

static void case_real(const char *real_root, const char *real_dump) {
    run_result *r = malloc(sizeof *r);
    RUN(r, tool, "verify", real_root);
    ZT_CHECK_MSG(r->status == 0, "verify exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->out, "OK: ");
    RUN(r, tool, "info", real_root);
    ZT_CHECK_MSG(r->status == 0, "info exited %d: %s", r->status, r->err);
    CHECK_CONTAINS(r->out, "ZeRO stage 3");
    CHECK_CONTAINS(r->out, "[37, 11]  407 elements");
    fputs(r->out, stderr);
    size_t dump_bytes = 0;
    float *values = read_all(real_dump, &dump_bytes);
    ZT_REQUIRE(values != NULL);
    const int64_t total = (int64_t)(dump_bytes / sizeof(float));
    ZT_EQ_INT(total, 37 * 11 + 53 + 3 * 43);
    static const char *const dtypes[2] = {"fp32", "bf16"};
    static const zs_dtype ids[2] = {ZS_DTYPE_FP32, ZS_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        char out[4400];
        snprintf(out, sizeof out, "%s/real.%s.safetensors", work, dtypes[d]);
        RUN(r, tool, "export", "--dtype", dtypes[d], "--buffer-bytes", "100", real_root, out);
        ZT_CHECK_MSG(r->status == 0, "export exited %d: %s", r->status, r->err);
        zs__st_file *f = NULL;
        ZT_OK(zs__st_open(out, &f));
        if (!f) continue;
        ZT_EQ_INT(zs__st_count(f), 3);
        const size_t size = zs_dtype_size(ids[d]);
        unsigned char *want = malloc((size_t)total * size), *got = malloc((size_t)total * size);
        ZT_OK(zs_convert(want, ids[d], values, ZS_DTYPE_FP32, total));
        int64_t at = 0;
        for (int p = 0; p < 3 && p < zs__st_count(f); p++) {
            const zs__st_entry *e = zs__st_entry_at(f, p);
            ZT_CHECK_MSG(strcmp(e->name, real_params[p].name) == 0, "tensor %d is %s", p, e->name);
            ZT_EQ_INT(e->ndim, real_params[p].ndim);
            int64_t n = 1;
            for (int k = 0; k < e->ndim; k++) {
                ZT_EQ_INT(e->shape[k], real_params[p].shape[k]);
                n *= e->shape[k];
            }
            ZT_REQUIRE(at + n <= total);
            ZT_OK(zs__st_read(f, e, 0, got + at * (int64_t)size, (uint64_t)n * size));
            at += n;
        }
        ZT_EQ_INT(at, total);
        ZT_CHECK_MSG(memcmp(want, got, (size_t)total * size) == 0,
                     "%s export differs from the gathered parameters", dtypes[d]);
        free(want);
        free(got);
        zs__st_close(f);
    }
    free(values);
    free(r);
}

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[4], "real") == 0) {
        tool = argv[1];
        snprintf(work, sizeof work, "%s/real", argv[3]);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", work);
        ZT_REQUIRE(system(cmd) == 0);
        case_real(argv[5], argv[6]);
        return zt_finish("test_zs_ckpt real");
    }
    if (argc != 5) {
        fprintf(stderr, "usage: test_zs_ckpt <zs-ckpt> <make_fixture> <work dir> <case>\n");
        return 2;
    }
    tool = argv[1];
    fixture_tool = argv[2];
    snprintf(work, sizeof work, "%s/%s", argv[3], argv[4]);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", work, work);
    ZT_REQUIRE(system(cmd) == 0);
    const char *c = argv[4];
    if (strcmp(c, "info") == 0) case_info();
    else if (strcmp(c, "verify") == 0) case_verify();
    else if (strcmp(c, "export") == 0) case_export();
    else if (strcmp(c, "buffer") == 0) case_buffer();
    else if (strcmp(c, "corrupt") == 0) case_corrupt();
    else if (strcmp(c, "progress") == 0) case_progress();
    else if (strcmp(c, "hostile_header") == 0) case_hostile_header();
    else if (strcmp(c, "user_state") == 0) case_user_state();
    else if (strcmp(c, "hostile_names") == 0) case_hostile_names();
    else if (strcmp(c, "world_size") == 0) case_world_size();
    else {
        fprintf(stderr, "test_zs_ckpt: unknown case %s\n", c);
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "test_zs_ckpt %s", c);
    return zt_finish(name);
}
