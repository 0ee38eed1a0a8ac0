/* Checkpoint soak (run_ckpt_soak.sh drives it, np 2, keep = 2):
 *   test_ckpt_soak <root> <state file> <saves> <seed> <kill point or "none">
 * Saves <saves> times with the step counter set directly: mostly forward,
 * sometimes back (a run resumed from an earlier step: the abandoned
 * timeline), about a third of the saves with an injected ENOSPC or EIO at the
 * n-th write, fsync, rename, mkdir or create of one rank (ZS_FAULT_ERRNO).
 * Rank 0 keeps a model of the committed step directories in commit order and
 * checks after every save: no temporary entry anywhere; after a save with no
 * injected failure, exactly the directories retention must keep (checkpoint.keep
 * = 2, by commit order, abandoned ones first to go), and `latest` naming the
 * newest commit. With a kill point (ZS_FAULT=<point>:<rank>), the last save
 * is killed there; the model is kept in the state file, so the next run
 * (the script's next segment) continues it, counting the killed save as
 * committed when the kill came after the rename. Open file descriptors and
 * RSS must be flat from a third of the way in to the end (under ASan, with
 * a small quarantine so that freed memory does not read as growth). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "zero/ground.h"

#define KEEP 2
#define MAX_DIRS 4096

/* The model: committed step directories still present, oldest commit first. */
static int64_t model[MAX_DIRS];
static int model_count;

static void model_commit(int64_t step) {
    int j = 0;
    for (int i = 0; i < model_count; i++)
        if (model[i] != step) model[j++] = model[i];
    model_count = j;
    ZT_REQUIRE(model_count < MAX_DIRS);
    model[model_count++] = step;
}

/* Retention's rule, written independently: walking from the newest commit,
 * a directory is abandoned when a later commit has a lower step; KEEP slots
 * go to the others newest first, then to abandoned ones newest first. */
static void model_retain(void) {
    int abandoned[MAX_DIRS], kept[MAX_DIRS] = {0};
    int64_t lowest = INT64_MAX;
    for (int i = model_count - 1; i >= 0; i--) {
        abandoned[i] = model[i] > lowest;
        if (model[i] < lowest) lowest = model[i];
    }
    int slots = KEEP;
    for (int pass = 0; pass < 2; pass++)
        for (int i = model_count - 1; i >= 0; i--)
            if (abandoned[i] == pass && slots > 0) kept[i] = 1, slots--;
    int j = 0;
    for (int i = 0; i < model_count; i++)
        if (kept[i]) model[j++] = model[i];
    model_count = j;
}

/* After a save with an injected failure that still committed, retention may
 * have stopped part way (its failures only warn): the model drops what the
 * root no longer has, so it stays exactly the root, which must never hold a
 * step directory the model does not. */
static void model_sync(const char *root, int save) {
    int j = 0;
    for (int i = 0; i < model_count; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/step_%08lld", root, (long long)model[i]);
        DIR *d = opendir(path);
        if (d) closedir(d), model[j++] = model[i];
    }
    model_count = j;
    DIR *d = opendir(root);
    ZT_REQUIRE(d != NULL);
    for (struct dirent *e; (e = readdir(d));) {
        long long step;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &step, &tail) != 1) continue;
        int known = 0;
        for (int i = 0; i < model_count && !known; i++) known = model[i] == step;
        ZT_CHECK_MSG(known, "save %d: %s/%s is not a committed step of the model", save, root,
                     e->d_name);
    }
    closedir(d);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Checks the root: at most `temp_allowed` temporary entries (a save that
 * failed removes its own, but only the next successful save removes those of
 * a killed run); when `exact`, exactly the model's directories and latest
 * naming the newest commit. Returns the number of temporary entries. */
static int check_root(const char *root, int exact, int save, int temp_allowed) {
    DIR *d = opendir(root);
    ZT_REQUIRE(d != NULL);
    int64_t have[MAX_DIRS];
    int n = 0, temp = 0;
    char all[8192] = "";
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0)) continue;
        if (strlen(all) < sizeof all - 300)
            snprintf(all + strlen(all), sizeof all - strlen(all), " %s", e->d_name);
        temp += e->d_name[0] == '.';
        long long step;
        char tail;
        if (sscanf(e->d_name, "step_%lld%c", &step, &tail) == 1 && n < MAX_DIRS) have[n++] = step;
    }
    closedir(d);
    ZT_CHECK_MSG(temp <= temp_allowed, "save %d: %d temporary entries in %s (at most %d allowed):%s",
                 save, temp, root, temp_allowed, all);
    if (!exact) return temp;
    int64_t want[MAX_DIRS];
    memcpy(want, model, sizeof(int64_t) * (size_t)model_count);
    qsort(want, (size_t)model_count, sizeof *want, cmp64);
    qsort(have, (size_t)n, sizeof *have, cmp64);
    int same = n == model_count;
    for (int i = 0; same && i < n; i++) same = have[i] == want[i];
    char w[512] = "";
    for (int i = 0; i < model_count; i++)
        snprintf(w + strlen(w), sizeof w - strlen(w), " %lld", (long long)want[i]);
    ZT_CHECK_MSG(same, "save %d: step directories differ from the model: want%s; the root has%s",
                 save, w, all);
    if (model_count > 0) {
        char path[1024], text[64] = "", expect[64];
        snprintf(path, sizeof path, "%s/latest", root);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t got = fread(text, 1, sizeof text - 1, f);
            text[got] = '\0';
            fclose(f);
        }
        snprintf(expect, sizeof expect, "step_%08lld\n", (long long)model[model_count - 1]);
        ZT_CHECK_MSG(strcmp(text, expect) == 0, "save %d: latest holds '%s', want '%s'", save, text,
                     expect);
    }
    return temp;
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* State between segments: the model, the step to continue from, and a
 * killed save (its step and kill point) whose outcome the next run settles. */
static void state_write(const char *path, int64_t step, int64_t pending, const char *point) {
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f != NULL);
    fprintf(f, "%lld %lld %s %d", (long long)step, (long long)pending, point, model_count);
    for (int i = 0; i < model_count; i++) fprintf(f, " %lld", (long long)model[i]);
    fputc('\n', f);
    fclose(f);
}

static int64_t state_read(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    long long step = 1, pending = -1;
    char point[32] = "none";
    ZT_REQUIRE(fscanf(f, "%lld %lld %31s %d", &step, &pending, point, &model_count) == 4);
    ZT_REQUIRE(model_count >= 0 && model_count < MAX_DIRS);
    for (int i = 0; i < model_count; i++) {
        long long v;
        ZT_REQUIRE(fscanf(f, "%lld", &v) == 1);
        model[i] = v;
    }
    fclose(f);
    /* A kill after the step directory's rename leaves it committed. */
    if (pending >= 0 && (strcmp(point, "rename") == 0 || strcmp(point, "latest") == 0))
        model_commit(pending);
    return step;
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc == 6);
    const char *root = argv[1], *state = argv[2], *kill_point = argv[5];
    const int saves = atoi(argv[3]);
    srand((unsigned)atoi(argv[4])); /* the same on every rank: the ranks agree on every choice */
    int64_t step = 1;
    if (zt_rank == 0) step = state_read(state);
    MPI_Bcast(&step, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);

    char extra[1024];
    snprintf(extra, sizeof extra,
             "checkpoint: { dir = \"%s\"; every = 0; keep = %d; resume = \"none\"; };", root, KEEP);
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 4, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .config_extra = extra};
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);

    static const char *points[] = {"write", "fsync", "rename", "mkdir", "create"};
    static const char *errors[] = {"ENOSPC", "EIO"};
    const int warm = saves / 3 > 2 ? saves / 3 : 2;
    int fds_warm = -1;
    long rss_warm = -1;
    int failed = 0;
    /* What a killed run left; a failed save may not add to it. */
    DIR *existing = zt_rank == 0 ? opendir(root) : NULL;
    int temp = existing ? check_root(root, 0, -1, 1 << 20) : 0;
    if (existing) closedir(existing);
    for (int i = 0; i < saves; i++) {
        const int last = i == saves - 1;
        const int killing = last && strcmp(kill_point, "none") != 0;
        /* Mostly forward; sometimes back below the newest commit, as a run
         * resumed from an earlier checkpoint would. */
        if (rand() % 12 == 0 && step > 6) step -= 1 + rand() % 5;
        else step += 1 + rand() % 3;
        const int inject = !last && rand() % 3 == 0;
        const int who = rand() % 2;
        char spec[96];
        snprintf(spec, sizeof spec, "%s:%s:%d:#%d", points[rand() % 5], errors[rand() % 2],
                 1 + rand() % 8, i);
        if (inject && zt_rank == who) setenv("ZS_FAULT_ERRNO", spec, 1);
        if (killing) {
            const int kill_rank = strcmp(kill_point, "write") == 0 || strcmp(kill_point, "shard") == 0;
            char fault[64];
            snprintf(fault, sizeof fault, "%s:%d:%lld", kill_point, kill_rank, (long long)step);
            setenv("ZS_FAULT", fault, 1);
            if (zt_rank == 0) state_write(state, step, step, kill_point);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        zs->step = step;
        zs_status st = zs_save(zs, NULL);
        unsetenv("ZS_FAULT_ERRNO");
        ZT_CHECK_MSG(killing == 0, "save %d: ZS_FAULT=%s did not kill", i, getenv("ZS_FAULT"));
        if (!inject) ZT_CHECK_MSG(st == ZS_OK, "save %d of step %lld failed: %s", i, (long long)step,
                                  zs_last_error());
        if (zt_rank == 0) {
            if (st == ZS_OK) model_commit(step);
            if (!inject && st == ZS_OK) model_retain();
            if (inject) model_sync(root, i);
            temp = check_root(root, !inject, i, st == ZS_OK ? 0 : temp);
        }
        failed += st != ZS_OK;
        if (i == warm) {
            fds_warm = count_fds();
            rss_warm = rss_kib();
        }
    }
    const int fds_end = count_fds();
    const long rss_end = rss_kib();
    ZT_CHECK_MSG(fds_end == fds_warm, "open descriptors grew from %d (save %d) to %d", fds_warm,
                 warm, fds_end);
    /* Generous for allocator and sanitizer noise, far below what a leak of
     * one buffer per save would reach. */
    ZT_CHECK_MSG(rss_end - rss_warm < 4096, "RSS grew from %ld KiB (save %d) to %ld KiB",
                 rss_warm, warm, rss_end);
    if (zt_rank == 0) {
        state_write(state, step, -1, "none");
        printf("soak: %d saves, %d failed by injection, %d step directories, fds %d, RSS %ld -> %ld KiB\n",
               saves, failed, model_count, fds_end, rss_warm, rss_end);
    }
    zs_destroy(zs);
    int rc = zt_finish("test_ckpt_soak");
    MPI_Finalize();
    return rc;
}
