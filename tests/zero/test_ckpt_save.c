/* The write side of checkpoints (issue 9), at np 2, driven by
 * run_ckpt_save.sh, which makes the work directory and removes it whatever
 * happens:   test_ckpt_save <work dir>
 * Each case builds the tiny model with its own checkpoint.keep, sets the step
 * counter directly (the protocol does not care what the values are) and
 * saves into its own root, then rank 0 inspects the root:
 *   rollback_keep1 / rollback_keep2  retention goes by commit order, keeps the
 *                    step just committed, deletes the abandoned timeline first
 *   foreign_entries  a subdirectory in a step, a symlink and a file named like
 *                    steps, a leftover .old_step_ with a subdirectory: pruning
 *                    goes on, re-saving a step with a subdirectory succeeds
 *   failed_save      a write failing on rank 1 (RLIMIT_FSIZE; once with the
 *                    default SIGXFSZ action, once ignored): every rank fails,
 *                    the message names the file-size limit, nothing is left
 *   stale_leftovers  the next save removes temp entries of crashed runs
 *   symlinks         links planted at the predictable temp names of the old
 *                    protocol receive nothing
 *   latest_dir       `latest` being a directory fails clearly, saves nothing */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "zero/ground.h"

#if __has_include("checkpoint/commit_order.h")
#include "checkpoint/commit_order.h"
#include "commit_order_path.h"
#define HAVE_COMMIT_ORDER 1
#endif

static const char *g_work;

static zs_ctx *build(const char *root, int keep) {
    char extra[1024];
    snprintf(extra, sizeof extra, "checkpoint: { dir = \"%s\"; every = 0; keep = %d; resume = \"none\"; };",
             root, keep);
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 4, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .config_extra = extra};
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);
    return zs;
}

static zs_status save_at(zs_ctx *zs, int64_t step) {
    zs->step = step;
    return zs_save(zs, NULL);
}

static void root_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_work, name);
}

/* The root's entries, space separated and sorted, for messages and checks. */
static void listing(const char *root, char *out, size_t cap) {
    struct dirent **names = NULL;
    out[0] = '\0';
    int n = scandir(root, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? " " : "",
                     names[i]->d_name);
        free(names[i]);
    }
    free(names);
}

static int is_real_dir(const char *root, const char *name) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", root, name);
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* No entry of a failed or interrupted save may remain. */
static void check_no_temp(const char *root, const char *when) {
    char all[4096];
    listing(root, all, sizeof all);
    ZT_CHECK_MSG(!strstr(all, ".tmp_step_") && !strstr(all, ".latest.tmp") && !strstr(all, ".old_step_"),
                 "%s: temporary entries left in %s: %s", when, root, all);
}

static void case_rollback(int keep) {
    char root[512], all[4096], latest[64];
    snprintf(root, sizeof root, "%s/rollback_keep%d", g_work, keep);
    zs_ctx *zs = build(root, keep);
    ZT_OK(save_at(zs, 40));
    ZT_OK(save_at(zs, 60));
    /* A run resumed from 40 (60 exists) saves 50. */
    ZT_OK(save_at(zs, 50));
    if (zt_rank == 0) {
        listing(root, all, sizeof all);
        const char *want = keep == 1 ? "latest step_00000050" : "latest step_00000040 step_00000050";
        ZT_CHECK_MSG(strcmp(all, want) == 0, "keep = %d after saving 40, 60, then 50: have '%s', "
                     "want '%s' (the step just committed stays; the abandoned 60 goes first)",
                     keep, all, want);
        char path[600];
        snprintf(path, sizeof path, "%s/latest", root);
        zt_read_text(path, latest, sizeof latest);
        ZT_CHECK_MSG(strcmp(latest, "step_00000050\n") == 0, "latest holds '%s'", latest);
    }
    zs_destroy(zs);
}

#ifdef HAVE_COMMIT_ORDER
/* keep = 0 keeps everything; the order is by commit, 60 is abandoned. */
static void case_commit_order(void) {
    char root[512];
    root_path(root, sizeof root, "commit_order");
    zs_ctx *zs = build(root, 0);
    ZT_OK(save_at(zs, 40));
    ZT_OK(save_at(zs, 60));
    ZT_OK(save_at(zs, 50));
    ZT_OK(save_at(zs, 55));
    if (zt_rank == 0) {
        zs__ckpt_commit *order = NULL;
        int count = 0;
        ZT_OK(zt_checkpoint_commit_order(root, &order, &count));
        ZT_EQ_INT(count, 4);
        const int64_t steps[4] = {55, 50, 60, 40};
        const int abandoned[4] = {0, 0, 1, 0};
        for (int i = 0; i < count && i < 4; i++) {
            ZT_EQ_INT(order[i].step, steps[i]);
            ZT_EQ_INT(order[i].abandoned, abandoned[i]);
            if (i > 0) ZT_CHECK(order[i].seq < order[i - 1].seq);
        }
        free(order);
    }
    /* Re-saving 60 puts it back on the current timeline. */
    ZT_OK(save_at(zs, 60));
    if (zt_rank == 0) {
        zs__ckpt_commit *order = NULL;
        int count = 0;
        ZT_OK(zt_checkpoint_commit_order(root, &order, &count));
        ZT_EQ_INT(count, 4);
        for (int i = 0; i < count; i++) ZT_EQ_INT(order[i].abandoned, 0);
        if (count > 0) ZT_EQ_INT(order[0].step, 60);
        free(order);
    }
    zs_destroy(zs);
}
#endif

static void case_foreign_entries(void) {
    char root[512], path[1024], victim[512], all[4096];
    root_path(root, sizeof root, "foreign");
    root_path(victim, sizeof victim, "foreign_victim");
    if (zt_rank == 0) {
        ZT_REQUIRE(mkdir(root, 0755) == 0 && mkdir(victim, 0755) == 0);
        snprintf(path, sizeof path, "%s/keep_me", victim);
        FILE *f = fopen(path, "w");
        ZT_REQUIRE(f != NULL);
        fputs("precious\n", f);
        fclose(f);
        snprintf(path, sizeof path, "%s/step_00000000", root);
        ZT_REQUIRE(symlink(victim, path) == 0);
        snprintf(path, sizeof path, "%s/step_00000002", root);
        f = fopen(path, "w");
        ZT_REQUIRE(f != NULL);
        fclose(f);
        snprintf(path, sizeof path, "%s/.old_step_00000001_1234", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/.old_step_00000001_1234/sub", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zs_ctx *zs = build(root, 2);
    ZT_OK(save_at(zs, 3));
    if (zt_rank == 0) {
        snprintf(path, sizeof path, "%s/step_00000003/extra", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 4; s <= 9; s++) ZT_OK(save_at(zs, s));
    /* Re-saving a step whose directory holds a subdirectory succeeds. */
    if (zt_rank == 0) {
        snprintf(path, sizeof path, "%s/step_00000009/extra2", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ZT_OK(save_at(zs, 9));
    if (zt_rank == 0) {
        int real_steps = 0;
        DIR *d = opendir(root);
        ZT_REQUIRE(d != NULL);
        for (struct dirent *e; (e = readdir(d));)
            if (strncmp(e->d_name, "step_", 5) == 0 && is_real_dir(root, e->d_name)) real_steps++;
        closedir(d);
        listing(root, all, sizeof all);
        ZT_CHECK_MSG(real_steps == 2 && is_real_dir(root, "step_00000008") &&
                     is_real_dir(root, "step_00000009"),
                     "keep = 2 with foreign entries: want step directories 8 and 9, have: %s", all);
        snprintf(path, sizeof path, "%s/step_00000009/extra2", root);
        struct stat st;
        ZT_CHECK_MSG(lstat(path, &st) != 0, "the re-saved step 9 is not fresh: %s exists", path);
        snprintf(path, sizeof path, "%s/keep_me", victim);
        char text[64];
        zt_read_text(path, text, sizeof text);
        ZT_CHECK_MSG(strcmp(text, "precious\n") == 0, "the symlink's target was touched: '%s'", text);
        snprintf(path, sizeof path, "%s/step_00000000", root);
        ZT_CHECK_MSG(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "the symlink was removed");
        snprintf(path, sizeof path, "%s/step_00000002", root);
        ZT_CHECK_MSG(lstat(path, &st) == 0 && S_ISREG(st.st_mode), "the file step_00000002 was removed");
        ZT_CHECK_MSG(!strstr(all, ".tmp_step_"), "temporary directories left: %s", all);
    }
    /* A file where the step's directory would go: a clear error, nothing
     * saved, nothing replaced. */
    zs_status st = save_at(zs, 2);
    ZT_CHECK_MSG(st != ZS_OK && strstr(zs_last_error(), "step_00000002 exists and is a file"),
                 "saving step 2 over a regular file: status %d, '%s'", (int)st, zs_last_error());
    if (zt_rank == 0) {
        /* The .old_step_ directories holding the user's subdirectories stay. */
        listing(root, all, sizeof all);
        ZT_CHECK_MSG(!strstr(all, ".tmp_step_") && !strstr(all, ".latest.tmp"),
                     "a refused save left temporary entries: %s", all);
    }
    zs_destroy(zs);
}

/* Rank 1's writes fail past a tiny file-size limit. With SIGXFSZ at its
 * default action the process must survive (EFBIG); ignored by the test, the
 * save must still clean up everywhere. */
static void case_failed_save(int test_ignores_sigxfsz) {
    char root[512], all[4096];
    snprintf(root, sizeof root, "%s/failed_save_%d", g_work, test_ignores_sigxfsz);
    zs_ctx *zs = build(root, 2);
    ZT_OK(save_at(zs, 1));
    struct rlimit saved;
    ZT_REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct sigaction before, now;
    if (zt_rank == 1) {
        if (test_ignores_sigxfsz) signal(SIGXFSZ, SIG_IGN);
        sigaction(SIGXFSZ, NULL, &before);
        struct rlimit tiny = {100, saved.rlim_max};
        ZT_REQUIRE(setrlimit(RLIMIT_FSIZE, &tiny) == 0);
    }
    zs_status st = save_at(zs, 2);
    if (zt_rank == 1) {
        ZT_REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
        sigaction(SIGXFSZ, NULL, &now);
        ZT_CHECK_MSG(now.sa_handler == before.sa_handler, "the SIGXFSZ disposition was not restored");
        signal(SIGXFSZ, SIG_DFL);
    }
    ZT_CHECK_MSG(st != ZS_OK, "a save failing on rank 1 returned ZS_OK on rank %d", zt_rank);
    ZT_CHECK_MSG(strstr(zs_last_error(), "RLIMIT_FSIZE") && !strstr(zs_last_error(), "disk full"),
                 "the message does not name the file-size limit: %s", zs_last_error());
    MPI_Barrier(MPI_COMM_WORLD);
    if (zt_rank == 0) {
        check_no_temp(root, "after a failed save");
        listing(root, all, sizeof all);
        ZT_CHECK_MSG(strcmp(all, "latest step_00000001") == 0, "after a failed save of step 2: %s", all);
    }
    ZT_OK(save_at(zs, 3));
    zs_destroy(zs);
}

static void case_stale_leftovers(void) {
    char root[512], path[1024], all[4096];
    root_path(root, sizeof root, "stale");
    zs_ctx *zs = build(root, 2);
    ZT_OK(save_at(zs, 1));
    if (zt_rank == 0) {
        snprintf(path, sizeof path, "%s/.tmp_step_00000002_dead", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/.tmp_step_00000002_dead/rank00001.optim.safetensors.partial", root);
        FILE *f = fopen(path, "w");
        ZT_REQUIRE(f != NULL);
        fclose(f);
        snprintf(path, sizeof path, "%s/.latest.tmp.4242", root);
        f = fopen(path, "w");
        ZT_REQUIRE(f != NULL);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ZT_OK(save_at(zs, 3));
    if (zt_rank == 0) {
        check_no_temp(root, "after a save following a crashed one");
        listing(root, all, sizeof all);
        ZT_CHECK_MSG(strcmp(all, "latest step_00000001 step_00000003") == 0, "%s", all);
    }
    zs_destroy(zs);
}

/* Symlinks at every name the old protocol would have used for step 7. */
static void case_symlinks(void) {
    char root[512], path[1024], victim[512], victim_dir[512], text[64];
    root_path(root, sizeof root, "symlinks");
    root_path(victim, sizeof victim, "symlinks_victim");
    root_path(victim_dir, sizeof victim_dir, "symlinks_victim_dir");
    zs_ctx *zs = build(root, 2);
    ZT_OK(save_at(zs, 1));
    long pid0 = (long)getpid();
    MPI_Bcast(&pid0, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (zt_rank == 0) {
        FILE *f = fopen(victim, "w");
        ZT_REQUIRE(f != NULL);
        fputs("precious\n", f);
        fclose(f);
        ZT_REQUIRE(mkdir(victim_dir, 0755) == 0);
        snprintf(path, sizeof path, "%s/.latest.tmp.%ld", root, pid0);
        ZT_REQUIRE(symlink(victim, path) == 0);
        for (long long t = (long long)time(NULL); t < (long long)time(NULL) + 4; t++) {
            unsigned long long nonce = (unsigned long long)t ^ ((unsigned long long)pid0 << 20);
            snprintf(path, sizeof path, "%s/.tmp_step_00000007_%llx", root, nonce);
            ZT_REQUIRE(symlink(victim_dir, path) == 0);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ZT_OK(save_at(zs, 7));
    if (zt_rank == 0) {
        zt_read_text(victim, text, sizeof text);
        ZT_CHECK_MSG(strcmp(text, "precious\n") == 0, "a write followed the symlink at "
                     ".latest.tmp.<pid>: the target now holds '%s'", text);
        char all[4096];
        listing(victim_dir, all, sizeof all);
        ZT_CHECK_MSG(all[0] == '\0', "shards went through a symlink into %s: %s", victim_dir, all);
        ZT_CHECK_MSG(is_real_dir(root, "step_00000007"), "step_00000007 is not a real directory");
    }
    zs_destroy(zs);
}

static void case_latest_dir(void) {
    char root[512], path[1024], all[4096];
    root_path(root, sizeof root, "latest_dir");
    zs_ctx *zs = build(root, 2);
    if (zt_rank == 0) {
        ZT_REQUIRE(mkdir(root, 0755) == 0);
        snprintf(path, sizeof path, "%s/latest", root);
        ZT_REQUIRE(mkdir(path, 0755) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zs_status st = save_at(zs, 3);
    ZT_CHECK_MSG(st != ZS_OK && strstr(zs_last_error(), "latest is a directory") &&
                 strstr(zs_last_error(), "Move it away"),
                 "status %d, message: %s", (int)st, zs_last_error());
    if (zt_rank == 0) {
        listing(root, all, sizeof all);
        ZT_CHECK_MSG(strcmp(all, "latest") == 0, "a refused save left: %s", all);
    }
    zs_destroy(zs);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc == 2);
    g_work = argv[1];
    case_rollback(1);
    case_rollback(2);
#ifdef HAVE_COMMIT_ORDER
    case_commit_order();
#endif
    case_foreign_entries();
    case_failed_save(1);
    case_failed_save(0);
    case_stale_leftovers();
    case_symlinks();
    case_latest_dir();
    int rc = zt_finish("test_ckpt_save");
    MPI_Finalize();
    return rc;
}
