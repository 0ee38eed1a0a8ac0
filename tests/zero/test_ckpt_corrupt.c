/* Hostile checkpoints (run under mpirun -np 2; also built with ASan + UBSan):
 *   - every single-byte flip in every file of a small step directory is
 *     rejected by zs_load, on every rank, never a crash;
 *   - every truncation length of a shard is rejected;
 *   - a shard from another step, swapped rank files, a missing shard, a
 *     manifest naming a path outside the directory, a model with another
 *     layout and a `latest` that points outside the root each give their own
 *     clear error (or, for `latest`, are ignored);
 *   - the untouched checkpoint still loads at the end (the test is not vacuous). */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "harness.h"
#include "test_util.h"

static char g_root[256], g_step[300], g_other[300];

static void sync_all(void) { MPI_Barrier(MPI_COMM_WORLD); }

static size_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static unsigned char *slurp(const char *path, size_t *n) {
    *n = file_size(path);
    unsigned char *data = malloc(*n ? *n : 1);
    FILE *f = fopen(path, "rb");
    if (f) {
        if (fread(data, 1, *n, f) != *n) *n = 0;
        fclose(f);
    }
    return data;
}

static void spit(const char *path, const unsigned char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

/* Rank 0 edits, everyone loads; returns the status every rank agreed on. */
static zs_status try_load(zs_ctx *zs, const char *dir) {
    sync_all();
    zs_status st = zs_load(zs, dir);
    int mine = (int)st, all_same = 1;
    int first = mine;
    MPI_Bcast(&first, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int same = first == mine;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    ZT_CHECK_MSG(all_same, "ranks returned different statuses for %s", dir);
    return st;
}

static const char *const g_files[] = {"manifest.json",
                                      "manifest.json.xxh3",
                                      "rank00000.master.safetensors",
                                      "rank00000.optim.safetensors",
                                      "rank00000.user.safetensors",
                                      "rank00001.master.safetensors",
                                      "rank00001.optim.safetensors",
                                      "rank00001.user.safetensors"};

static void flip_every_byte(zs_ctx *zs) {
    for (size_t f = 0; f < sizeof g_files / sizeof g_files[0]; f++) {
        char path[400];
        snprintf(path, sizeof path, "%s/%s", g_step, g_files[f]);
        size_t n = 0;
        unsigned char *data = slurp(path, &n);
        int64_t size = (int64_t)n;
        MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
        ZT_CHECK_MSG(size > 0, "%s is missing or empty", path);
        int64_t accepted = 0, first_accepted = -1;
        for (int64_t i = 0; i < size; i++) {
            if (zt_rank == 0) {
                data[i] ^= 0xff;
                spit(path, data, n);
                data[i] ^= 0xff;
            }
            if (try_load(zs, g_step) == ZS_OK) {
                if (first_accepted < 0) first_accepted = i;
                accepted++;
            }
            if (zt_rank == 0) spit(path, data, n);
        }
        ZT_CHECK_MSG(accepted == 0, "%s: %lld of %lld single-byte flips were accepted (first at "
                     "byte %lld)", g_files[f], (long long)accepted, (long long)size,
                     (long long)first_accepted);
        free(data);
    }
}

static void truncate_shard(zs_ctx *zs) {
    char path[400];
    snprintf(path, sizeof path, "%s/rank00001.master.safetensors", g_step);
    size_t n = 0;
    unsigned char *data = slurp(path, &n);
    int64_t size = (int64_t)n, accepted = 0;
    MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    for (int64_t len = 0; len < size; len++) {
        if (zt_rank == 0) spit(path, data, (size_t)len);
        accepted += try_load(zs, g_step) == ZS_OK;
    }
    if (zt_rank == 0) spit(path, data, n);
    ZT_CHECK_MSG(accepted == 0, "%lld of %lld truncations of a shard were accepted",
                 (long long)accepted, (long long)size);
    free(data);
}

/* Replaces `name` in the step directory by `data`, loads, restores. */
static void expect_error(zs_ctx *zs, const char *what, const char *name, const unsigned char *data,
                         size_t n, const char *message) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", g_step, name);
    size_t old_n = 0;
    unsigned char *old = slurp(path, &old_n);
    if (zt_rank == 0) {
        if (data) spit(path, data, n);
        else unlink(path);
    }
    zs_status st = try_load(zs, g_step);
    ZT_CHECK_MSG(st != ZS_OK && strstr(zs_last_error(), message) != NULL,
                 "%s: expected an error containing \"%s\", got %s: %s", what, message,
                 zs_status_name(st), zs_last_error());
    if (zt_rank == 0) spit(path, old, old_n);
    free(old);
}

static void hostile_cases(zs_ctx *zs) {
    size_t n0 = 0, n1 = 0, n2 = 0;
    char path[400];
    /* A shard of another step, put in place of this step's. */
    snprintf(path, sizeof path, "%s/rank00001.master.safetensors", g_other);
    unsigned char *other = slurp(path, &n0);
    expect_error(zs, "shard from another step", "rank00001.master.safetensors", other, n0,
                 "a file from another checkpoint");
    free(other);
    /* Rank files swapped. */
    snprintf(path, sizeof path, "%s/rank00000.master.safetensors", g_step);
    unsigned char *r0 = slurp(path, &n0);
    snprintf(path, sizeof path, "%s/rank00001.master.safetensors", g_step);
    unsigned char *r1 = slurp(path, &n1);
    if (zt_rank == 0) spit(path, r0, n0);
    expect_error(zs, "swapped rank files", "rank00000.master.safetensors", r1, n1,
                 "shard metadata \"rank\" is not \"0\" as the manifest says");
    if (zt_rank == 0) spit(path, r1, n1);
    free(r0);
    free(r1);
    /* A missing shard. */
    expect_error(zs, "missing shard", "rank00001.optim.safetensors", NULL, 0,
                 "rank00001.optim.safetensors");
    /* A manifest naming a path outside the directory, with a matching hash
     * file, so only the name check can stop it. */
    snprintf(path, sizeof path, "%s/manifest.json", g_step);
    unsigned char *manifest = slurp(path, &n2);
    char *text = calloc(n2 + 16, 1);
    memcpy(text, manifest, n2);
    char *at = strstr(text, "rank00001.user.safetensors");
    ZT_REQUIRE(at != NULL);
    memcpy(at, "../../etc/passwd_xxxxxxxx", 25);
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx\n", (unsigned long long)XXH3_64bits(text, n2));
    snprintf(path, sizeof path, "%s/manifest.json.xxh3", g_step);
    size_t hn = 0;
    unsigned char *old_hash = slurp(path, &hn);
    if (zt_rank == 0) spit(path, (const unsigned char *)hash, strlen(hash));
    expect_error(zs, "manifest naming a path outside the directory", "manifest.json",
                 (const unsigned char *)text, n2, "files[5]: the file name has a character outside");
    if (zt_rank == 0) spit(path, old_hash, hn);
    free(old_hash);
    free(text);
    free(manifest);
    /* A `latest` pointing outside the root is ignored; the newest step loads. */
    snprintf(path, sizeof path, "%s/latest", g_root);
    if (zt_rank == 0) spit(path, (const unsigned char *)"../../../etc\n", 13);
    ZT_OK(try_load(zs, g_root));
    ZT_EQ_INT(zs_step_count(zs), 4);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ZT_REQUIRE(world == 2);
    char root[] = "/tmp/zs_corrupt_XXXXXX";
    if (zt_rank == 0) ZT_REQUIRE(mkdtemp(root) != NULL);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(g_root, sizeof g_root, "%s", root);
    snprintf(g_step, sizeof g_step, "%s/step_00000003", root);
    snprintf(g_other, sizeof g_other, "%s/step_00000004", root);

    /* A small checkpoint at step 3, and another at step 4 to borrow from. */
    ZT_REQUIRE(harness_save_steps_3_and_4(MPI_COMM_WORLD, root) == 0);

    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 4, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant"};
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);
    ZT_OK(try_load(zs, g_step));
    ZT_EQ_INT(zs_step_count(zs), 3);

    flip_every_byte(zs);
    truncate_shard(zs);
    hostile_cases(zs);

    /* A model whose layout differs: the message names the first mismatch. */
    char cfg_path[300];
    snprintf(cfg_path, sizeof cfg_path, "%s/other.cfg", root);
    if (zt_rank == 0) {
        FILE *f = fopen(cfg_path, "w");
        fputs("optimizer: { type = \"adamw\"; lr = 0.01; };\n", f);
        fclose(f);
    }
    sync_all();
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(cfg_path, &cfg));
    zs_ctx *other = NULL;
    ZT_OK(zs_create(cfg, &other));
    zs_config_destroy(cfg);
    int64_t shape[2] = {29, 14};
    ZT_OK(zs_unit_begin(other, "layer0", NULL));
    ZT_OK(zs_param_create(other, "layer0.weight", 2, shape, ZS_INIT_ZEROS_VALUE, 0, NULL));
    ZT_OK(zs_unit_end(other));
    ZT_OK(zs_build(other));
    ZT_FAILS_WITH(zs_load(other, g_step), ZS_ERR_MISMATCH,
                  "parameter 0 differs: the checkpoint has 'layer0.weight' [29, 13], the model has "
                  "'layer0.weight' [29, 14]");
    zs_destroy(other);

    /* Everything restored: the checkpoint loads again. */
    ZT_OK(try_load(zs, g_step));
    ZT_EQ_INT(zs_step_count(zs), 3);
    zs_destroy(zs);

    sync_all();
    if (zt_rank == 0) {
        char command[600];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        ZT_CHECK(system(command) == 0);
    }
    int rc = zt_finish("test_ckpt_corrupt");
    MPI_Finalize();
    return rc;
}
