/* zs_load and `zs-ckpt verify` give the same answer on every damaged
 * checkpoint (issue 9), through the one verification they share:
 *   - sampled byte flips and truncations, a shard from another step, a
 *     missing shard, a manifest naming a path outside the directory (the
 *     cases of test_ckpt_corrupt.c, sampled so this stays fast);
 *   - a manifest whose step differs from its shards' (step 99, shards 3);
 *   - extra tensors: one in a shard the manifest does not list, and 1000
 *     empty ones listed in both;
 *   - a shard that is a symlink (to an identical copy outside the step
 *     directory), a FIFO, a directory; a shard whose header holds a secret,
 *     which no message may echo;
 * and for a root, both choose the same step: the newest commit (over a stale
 * `latest`), never an abandoned step, the one before when the newest is damaged, never a
 * symlinked step directory; resume = "auto" skips a regular file named
 * step_N with a warning and starts fresh when nothing else is there.
 * Usage: test_ckpt_agree <zs-ckpt>  (one rank). Everything it creates lives
 * in one /tmp directory removed at exit, also on failure. */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "harness.h"
#include "test_util.h"

static const char *g_tool;
static char g_root[64], g_step[128], g_other[128], g_out[128];
static zs_ctx *g_zs;

static void cleanup(void) {
    if (!g_root[0]) return;
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", g_root);
    if (system(command) != 0) fprintf(stderr, "could not remove %s\n", g_root);
}

static unsigned char *slurp(const char *path, size_t *n) {
    struct stat st;
    *n = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
    unsigned char *data = malloc(*n + 1);
    FILE *f = fopen(path, "rb");
    if (f) {
        if (fread(data, 1, *n, f) != *n) *n = 0;
        fclose(f);
    }
    data[*n] = 0;
    return data;
}

static void spit(const char *path, const void *data, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    ZT_REQUIRE(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* Runs zs-ckpt; returns its exit status, stdout+stderr in g_out. */
static int tool(const char *command, const char *dir) {
    char line[512];
    snprintf(line, sizeof line, "'%s' %s '%s' > '%s' 2>&1", g_tool, command, dir, g_out);
    int rc = system(line);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Both verdicts on the step directory: they must agree and be `ok`. */
static void expect(const char *what, int ok) {
    zs_status st = zs_load(g_zs, g_step);
    char load_error[2048];
    snprintf(load_error, sizeof load_error, "%s", st == ZS_OK ? "" : zs_last_error());
    int rc = tool("verify", g_step);
    size_t n = 0;
    char *out = (char *)slurp(g_out, &n);
    ZT_CHECK_MSG((st == ZS_OK) == (rc == 0), "%s: zs_load says %s (%s) but zs-ckpt verify exits "
                 "%d (%s)", what, zs_status_name(st), load_error, rc, out);
    ZT_CHECK_MSG((st == ZS_OK) == ok, "%s: zs_load returned %s (%s), expected %s", what,
                 zs_status_name(st), load_error, ok ? "success" : "an error");
    ZT_CHECK_MSG((rc == 0) == ok, "%s: zs-ckpt verify exited %d (%s)", what, rc, out);
    /* No message may carry file content: the planted secret never shows. */
    ZT_CHECK_MSG(!strstr(load_error, "SECRET") && !strstr(out, "SECRET"),
                 "%s: a message echoes file content: %s / %s", what, load_error, out);
    free(out);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

/* Rewrites manifest.json of the step with `edit` applied, and its hash. */
static void write_manifest(const zs__manifest *m) {
    char *json = NULL, path[256], hash[32];
    size_t bytes = 0;
    ZT_REQUIRE(zs__manifest_to_json(m, &json, &bytes) == ZS_OK);
    path_in(path, sizeof path, g_step, "manifest.json");
    spit(path, json, bytes);
    snprintf(hash, sizeof hash, "%016" PRIx64 "\n", (uint64_t)XXH3_64bits(json, bytes));
    path_in(path, sizeof path, g_step, "manifest.json.xxh3");
    spit(path, hash, strlen(hash));
    free(json);
}

static zs__manifest *read_manifest(void) {
    char path[256];
    size_t n = 0;
    path_in(path, sizeof path, g_step, "manifest.json");
    char *text = (char *)slurp(path, &n);
    zs__manifest *m = NULL;
    ZT_REQUIRE(zs__manifest_from_json(text, n, path, &m) == ZS_OK);
    free(text);
    return m;
}

/* Rewrites file f of the manifest with `extra` more tensors (named
 * "<first>:extra<k>", `extra_count` elements each, listed in the manifest
 * when `listed`), keeping its metadata, and updates the manifest. */
static void add_tensors(zs__manifest *m, int f, int extra, int64_t extra_count, int listed) {
    char path[256];
    path_in(path, sizeof path, g_step, m->files[f].name);
    zs__st_file *sf = NULL;
    ZT_REQUIRE(zs__st_open(path, &sf) == ZS_OK);
    const int n = zs__st_count(sf);
    zs__st_tensor_spec *specs = calloc((size_t)(n + extra), sizeof *specs);
    char (*names)[64] = calloc((size_t)extra + 1, sizeof *names);
    static float zeros[16];
    for (int i = 0; i < n; i++) {
        const zs__st_entry *e = zs__st_entry_at(sf, i);
        void *data = malloc(e->end - e->begin + 1);
        ZT_REQUIRE(zs__st_read(sf, e, 0, data, e->end - e->begin) == ZS_OK);
        specs[i] = (zs__st_tensor_spec){e->name, e->dtype, e->ndim, {0}, data, e->end - e->begin, NULL, NULL};
        memcpy(specs[i].shape, e->shape, sizeof e->shape);
    }
    for (int k = 0; k < extra; k++) {
        snprintf(names[k], sizeof names[k], "w:extra%d", k);
        specs[n + k] = (zs__st_tensor_spec){names[k], ZS_ST_F32, 1, {extra_count}, zeros,
                                            (uint64_t)extra_count * 4, NULL, NULL};
    }
    static const char *keys[] = {"format", "version", "step", "rank", "world_size", "kind"};
    zs__st_meta meta[6];
    for (int k = 0; k < 6; k++) meta[k] = (zs__st_meta){keys[k], zs__st_meta_get(sf, keys[k])};
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    uint64_t *hashes = calloc((size_t)(n + extra), sizeof *hashes);
    ZT_REQUIRE(zs__st_write(tmp, specs, n + extra, meta, 6, NULL, NULL, hashes, &m->files[f].xxh3,
                            &m->files[f].bytes) == ZS_OK);
    ZT_REQUIRE(rename(tmp, path) == 0);
    for (int i = 0; i < n; i++) free((void *)specs[i].data);
    zs__st_close(sf);
    if (listed) {
        zs__manifest *bigger = NULL;
        ZT_REQUIRE(zs__manifest_alloc(m->unit_count, m->param_count, m->file_count,
                                      m->tensor_count + extra, &bigger) == ZS_OK);
        zs__manifest copy = *bigger;
        *bigger = *m;
        bigger->units = copy.units;
        bigger->params = copy.params;
        bigger->files = copy.files;
        bigger->tensors = copy.tensors;
        bigger->tensor_count = m->tensor_count + extra;
        memcpy(bigger->units, m->units, sizeof *m->units * (size_t)m->unit_count);
        memcpy(bigger->params, m->params, sizeof *m->params * (size_t)m->param_count);
        memcpy(bigger->files, m->files, sizeof *m->files * (size_t)m->file_count);
        memcpy(bigger->tensors, m->tensors, sizeof *m->tensors * (size_t)m->tensor_count);
        for (int k = 0; k < extra; k++) {
            zs__ckpt_tensor *t = &bigger->tensors[m->tensor_count + k];
            *t = (zs__ckpt_tensor){.file = f, .state = ZS_CKPT_STATE_MASTER, .param = 0,
                                   .offset = 0, .count = extra_count, .xxh3 = hashes[n + k]};
            snprintf(t->key, sizeof t->key, "%s", names[k]);
        }
        write_manifest(bigger);
        zs__manifest_free(bigger);
    } else {
        write_manifest(m);
    }
    free(hashes);
    free(names);
    free(specs);
}

/* Saves a pristine copy of the step directory and restores it. */
static void snapshot(int restore) {
    char command[512];
    if (restore)
        snprintf(command, sizeof command, "rm -rf '%s' && cp -a '%s/pristine' '%s'", g_step,
                 g_root, g_step);
    else
        snprintf(command, sizeof command, "cp -a '%s' '%s/pristine'", g_step, g_root);
    ZT_REQUIRE(system(command) == 0);
}

static const char *const g_files[] = {"manifest.json", "manifest.json.xxh3",
                                      "rank00000.master.safetensors",
                                      "rank00000.optim.safetensors",
                                      "rank00000.user.safetensors"};

static void step_cases(void) {
    char path[256], other[256], what[128];
    expect("the untouched checkpoint", 1);
    /* Byte flips, sampled: every file, ~25 positions each. */
    for (size_t f = 0; f < sizeof g_files / sizeof g_files[0]; f++) {
        path_in(path, sizeof path, g_step, g_files[f]);
        size_t n = 0;
        unsigned char *data = slurp(path, &n);
        ZT_REQUIRE(n > 0);
        for (size_t i = 0; i < n; i += n / 25 + 1) {
            data[i] ^= 0xff;
            spit(path, data, n);
            data[i] ^= 0xff;
            snprintf(what, sizeof what, "%s byte %zu flipped", g_files[f], i);
            expect(what, 0);
        }
        spit(path, data, n);
        free(data);
    }
    /* Truncations of a shard. */
    path_in(path, sizeof path, g_step, "rank00000.master.safetensors");
    size_t n = 0;
    unsigned char *data = slurp(path, &n);
    for (size_t len = 0; len < n; len += n / 15 + 1) {
        spit(path, data, len);
        snprintf(what, sizeof what, "shard truncated to %zu bytes", len);
        expect(what, 0);
    }
    spit(path, data, n);
    expect("restored", 1);
    /* A shard of another step. */
    path_in(other, sizeof other, g_other, "rank00000.master.safetensors");
    size_t on = 0;
    unsigned char *other_data = slurp(other, &on);
    spit(path, other_data, on);
    expect("shard from another step", 0);
    free(other_data);
    /* A missing shard. */
    unlink(path);
    expect("missing shard", 0);
    /* A symlink to an identical copy outside the step directory: the
     * content would verify, only the refusal to follow links stops it. */
    path_in(other, sizeof other, g_root, "outside.safetensors");
    spit(other, data, n);
    ZT_REQUIRE(symlink(other, path) == 0);
    expect("shard is a symlink to an identical file outside", 0);
    unlink(path);
    /* Non-regular files. */
    ZT_REQUIRE(mkfifo(path, 0600) == 0);
    expect("shard is a FIFO", 0);
    unlink(path);
    ZT_REQUIRE(mkdir(path, 0700) == 0);
    expect("shard is a directory", 0);
    rmdir(path);
    /* A file whose header holds a secret in an invalid name. */
    static const char secret[] = "{\"SECRET/hunter2\":{\"dtype\":\"F32\",\"shape\":[1],"
                                 "\"data_offsets\":[0,4]}}";
    unsigned char crafted[128] = {0};
    crafted[0] = (unsigned char)(sizeof secret - 1);
    memcpy(crafted + 8, secret, sizeof secret - 1);
    spit(path, crafted, 8 + sizeof secret - 1 + 4);
    expect("shard whose header holds a secret", 0);
    spit(path, data, n);
    free(data);
    expect("restored again", 1);

    /* A manifest naming a path outside the directory (with a valid hash). */
    zs__manifest *m = read_manifest();
    snprintf(m->files[2].name, sizeof m->files[2].name, "../outside.safetensors");
    char *json = NULL;
    size_t bytes = 0;
    /* zs__manifest_to_json refuses to write it; build the text by hand. */
    zs__manifest_free(m);
    m = read_manifest();
    ZT_REQUIRE(zs__manifest_to_json(m, &json, &bytes) == ZS_OK);
    char *at = strstr(json, "rank00000.user.safetensors");
    ZT_REQUIRE(at != NULL);
    memcpy(at, "../../etc/passwd_xxxxxxxx", 25);
    char hash[32];
    snprintf(hash, sizeof hash, "%016" PRIx64 "\n", (uint64_t)XXH3_64bits(json, bytes));
    path_in(path, sizeof path, g_step, "manifest.json");
    spit(path, json, bytes);
    path_in(path, sizeof path, g_step, "manifest.json.xxh3");
    spit(path, hash, strlen(hash));
    free(json);
    expect("manifest naming a path outside the directory", 0);
    snapshot(1);

    /* The manifest says step 99, the shards say 3. */
    m->step = 99;
    write_manifest(m);
    expect("manifest step 99, shards of step 3", 0);
    snapshot(1);
    zs__manifest_free(m);

    /* An unlisted tensor in a shard. */
    m = read_manifest();
    add_tensors(m, 0, 1, 3, 0);
    expect("a shard holds a tensor the manifest does not list", 0);
    snapshot(1);
    zs__manifest_free(m);
    /* 1000 empty tensors, listed in both. */
    m = read_manifest();
    add_tensors(m, 0, 1000, 0, 1);
    expect("1000 extra empty tensors in the manifest and the shard", 0);
    snapshot(1);
    zs__manifest_free(m);
    expect("restored at the end", 1);
}

/* The step the runtime and the tool choose in the root. */
static void expect_choice(const char *what, int want) {
    zs_status st = zs_load(g_zs, g_root);
    ZT_CHECK_MSG(st == ZS_OK && zs_step_count(g_zs) == want, "%s: zs_load chose step %lld (%s: "
                 "%s), expected %d", what, (long long)zs_step_count(g_zs), zs_status_name(st),
                 st == ZS_OK ? "" : zs_last_error(), want);
    int rc = tool("info", g_root);
    size_t n = 0;
    char *out = (char *)slurp(g_out, &n), name[32];
    snprintf(name, sizeof name, "step_%08d (chosen", want);
    ZT_CHECK_MSG(rc == 0 && strstr(out, name), "%s: zs-ckpt info exited %d, expected %s: %s", what,
                 rc, name, out);
    free(out);
}

/* Rewrites the commit record of step_NNNNNNNN (commit_order.h). */
static void set_commit(int step, int seq) {
    char dir[128], path[256], text[96];
    snprintf(dir, sizeof dir, "%s/step_%08d", g_root, step);
    path_in(path, sizeof path, dir, "commit");
    int n = snprintf(text, sizeof text, "zeroshard-commit seq=%d step=%d\n", seq, step);
    spit(path, text, (size_t)n);
}

/* Neither the runtime nor the tool may load anything from the root. */
static void expect_no_choice(const char *what) {
    zs_status st = zs_load(g_zs, g_root);
    ZT_CHECK_MSG(st != ZS_OK, "%s: zs_load chose step %lld, expected a failure", what,
                 (long long)zs_step_count(g_zs));
    int rc = tool("verify", g_root);
    ZT_CHECK_MSG(rc != 0, "%s: zs-ckpt verify of the root passed, expected a failure", what);
}

static void root_cases(void) {
    char path[256];
    path_in(path, sizeof path, g_root, "latest");
    set_commit(3, 1);
    set_commit(4, 2);
    spit(path, "step_00000004\n", 14);
    expect_choice("latest names the newest commit", 4);
    /* A crash between step 4's commit and the update of latest: the commit
     * records decide. */
    spit(path, "step_00000003\n", 14);
    expect_choice("latest is stale (names step 3, step 4 committed after it)", 4);
    /* A run resumed from step 3 and committed it again after step 4: step 4
     * belongs to the abandoned timeline and is never chosen. */
    set_commit(3, 3);
    expect_choice("step 3 committed after step 4 (abandoned timeline)", 3);
    /* ... not even when the current timeline's step does not verify. */
    char shard[256];
    path_in(shard, sizeof shard, g_step, "rank00000.optim.safetensors");
    ZT_REQUIRE(truncate(shard, 100) == 0);
    expect_no_choice("the only current step is damaged, the other is abandoned");
    /* The newest commit damaged: fall back to the one before. */
    set_commit(3, 1);
    set_commit(4, 2);
    snapshot(1);
    char shard4[256], dir4[128];
    snprintf(dir4, sizeof dir4, "%s/step_00000004", g_root);
    path_in(shard4, sizeof shard4, dir4, "rank00000.optim.safetensors");
    char *saved = NULL;
    size_t saved_bytes = 0;
    saved = (char *)slurp(shard4, &saved_bytes);
    ZT_REQUIRE(saved != NULL && truncate(shard4, 100) == 0);
    expect_choice("the newest commit is damaged", 3);
    spit(shard4, saved, saved_bytes);
    free(saved);
    expect_choice("restored", 4);
    /* A symlinked step directory, even one named by latest, is never used;
     * a regular file named step_N is skipped. */
    char link[256];
    path_in(link, sizeof link, g_root, "step_00000009");
    ZT_REQUIRE(symlink(g_other, link) == 0);
    spit(path, "step_00000009\n", 14);
    expect_choice("latest names a symlinked step directory", 4);
    unlink(link);
    spit(link, "not a directory", 15);
    spit(path, "step_00000004\n", 14);
    expect_choice("a regular file named step_00000009", 4);
}

/* resume = "auto" with a regular file named step_N in the root. */
static void resume_case(const char *dir, int want) {
    char extra[512];
    snprintf(extra, sizeof extra, "checkpoint: { dir = \"%s\"; resume = \"auto\"; };", dir);
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 1, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .config_extra = extra};
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    zs_status st = harness_build(MPI_COMM_WORLD, &opt, &zs, params);
    ZT_CHECK_MSG(st == ZS_OK && zs_step_count(zs) == want,
                 "resume = \"auto\" in %s: %s (%s), step %lld, expected step %d", dir,
                 zs_status_name(st), st == ZS_OK ? "" : zs_last_error(),
                 zs ? (long long)zs_step_count(zs) : -1LL, want);
    zs_destroy(zs);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 1 && argc == 2);
    g_tool = argv[1];
    char root[] = "/tmp/zs_agree_XXXXXX";
    ZT_REQUIRE(mkdtemp(root) != NULL);
    snprintf(g_root, sizeof g_root, "%s", root);
    atexit(cleanup);
    snprintf(g_step, sizeof g_step, "%s/step_00000003", root);
    snprintf(g_other, sizeof g_other, "%s/step_00000004", root);
    snprintf(g_out, sizeof g_out, "%s/tool.out", root);

    ZT_REQUIRE(harness_save_steps_3_and_4(MPI_COMM_WORLD, root) == 0);
    snapshot(0);

    zs_param *params[2 * TINY_MAX_LAYERS];
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 4, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant"};
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &g_zs, params) == ZS_OK);
    step_cases();
    root_cases();
    zs_destroy(g_zs);

    /* resume = "auto": a regular file named step_N alone means no
     * checkpoint yet (start fresh); next to real steps it is skipped. */
    char fresh[128], file[160];
    snprintf(fresh, sizeof fresh, "%s/fresh", root);
    ZT_REQUIRE(mkdir(fresh, 0700) == 0);
    snprintf(file, sizeof file, "%s/step_00000007", fresh);
    spit(file, "x", 1);
    resume_case(fresh, 0);
    resume_case(root, 4); /* step 4 is the newest commit; step_00000009 is a file */

    int rc = zt_finish("test_ckpt_agree");
    MPI_Finalize();
    return rc;
}
