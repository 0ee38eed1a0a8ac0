/* Durability errors after a save's commit point (issue 22, item 17), np 2:
 *   test_ckpt_durability <work dir>
 * An EIO is injected (ZS_FAULT_ERRNO) at the n-th fsync and at the n-th
 * rename of each rank, for every n through a whole save, so that one n hits
 * the fsync of the checkpoint root right after the step directory's rename
 * (the commit) and one hits the rename of `latest`, whatever the number of
 * steps before them. For every n, with checkpoint.on_durability_error =
 * "fail" (the default):
 *   - every rank gets the same status;
 *   - a failed save leaves the previous step the one the loader picks (the
 *     commit records), `latest` naming it, and no temporary entry;
 *   - the failures at the root's fsync and at latest's rename name the file
 *     and the errno on every rank.
 * Then with "warn", the same two faults only warn: the save succeeds and the
 * new step is the one the loader picks. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/select.h"
#include "harness.h"
#include "test_util.h"
#include "zero/ground.h"

#define SWEEP 48 /* more fsyncs and renames than one save makes on any rank */

static const char *g_work;

static zs_ctx *build(const char *root, const char *policy) {
    char extra[1024];
    snprintf(extra, sizeof extra,
             "checkpoint: { dir = \"%s\"; every = 0; keep = 0; resume = \"none\"; "
             "on_durability_error = \"%s\"; };",
             root, policy);
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 4, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .config_extra = extra};
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    ZT_REQUIRE(harness_build(MPI_COMM_WORLD, &opt, &zs, params) == ZS_OK);
    return zs;
}

/* Saves `step` with ZS_FAULT_ERRNO = spec (NULL: none) on every rank; the
 * message of a failure is copied to `message`. The hook counts calls from
 * when the variable's text changes, so each save gets a text of its own
 * (a "#<serial>" the hook does not read). */
static zs_status save_with(zs_ctx *zs, int64_t step, const char *spec, char *message,
                           size_t cap) {
    static int serial;
    char text[128];
    snprintf(text, sizeof text, "%s:#%d", spec ? spec : "", ++serial);
    if (spec) setenv("ZS_FAULT_ERRNO", text, 1);
    zs->step = step;
    zs_status st = zs_save(zs, NULL);
    unsetenv("ZS_FAULT_ERRNO");
    snprintf(message, cap, "%s", st == ZS_OK ? "" : zs_last_error());
    return st;
}

static void step_name(char *out, size_t cap, int64_t step) {
    snprintf(out, cap, "step_%08lld", (long long)step);
}

/* Rank 0: the step the loader picks (the commit records) and `latest` must
 * both be `step`, and no temporary entry may be left. */
static void check_resume_point(const char *root, int64_t step, const char *when) {
    if (zt_rank != 0) return;
    char want[32], latest[64], path[1024];
    step_name(want, sizeof want, step);
    zs__ckpt_candidates c;
    ZT_OK(zs__ckpt_candidates_list(root, &c));
    ZT_CHECK_MSG(c.count > 0 && strcmp(c.names[0], want) == 0,
                 "%s: the loader picks %s, not %s", when, c.count > 0 ? c.names[0] : "nothing",
                 want);
    zs__ckpt_candidates_free(&c);
    snprintf(path, sizeof path, "%s/latest", root);
    zt_read_text(path, latest, sizeof latest);
    latest[strcspn(latest, "\n")] = '\0';
    ZT_CHECK_MSG(strcmp(latest, want) == 0, "%s: latest names '%s', not %s", when, latest, want);
    DIR *d = opendir(root);
    ZT_REQUIRE(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ZT_CHECK_MSG(strncmp(e->d_name, ".tmp_step_", 10) != 0 &&
                         strncmp(e->d_name, ".old_step_", 10) != 0 &&
                         strncmp(e->d_name, ".latest.tmp", 11) != 0,
                     "%s: %s/%s was left behind", when, root, e->d_name);
    closedir(d);
}

/* The same status on every rank. */
static void check_all_ranks(zs_status st, const char *when) {
    int mine = (int)st, low = 0, high = 0;
    MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ZT_CHECK_MSG(low == high, "%s: the ranks disagree (statuses %d to %d)", when, low, high);
}

/* The fail policy at every n of `point`; returns the first n whose failure
 * `marker` (a text of its message) identifies, or 0: for the root's fsync,
 * the one right after the commit (the fsync after latest's rename names the
 * root too, later). */
static int sweep_fail(const char *point, const char *marker_fmt) {
    char root[512], marker[700], spec[96], message[2048], when[160];
    snprintf(root, sizeof root, "%s/fail_%s", g_work, point);
    snprintf(marker, sizeof marker, marker_fmt, root);
    zs_ctx *zs = build(root, "fail");
    int64_t previous = 10;
    ZT_OK(save_with(zs, previous, NULL, message, sizeof message));
    int hit = 0;
    for (int n = 1; n <= SWEEP; n++) {
        const int64_t step = 100 + n;
        snprintf(spec, sizeof spec, "%s:EIO:%d", point, n);
        snprintf(when, sizeof when, "ZS_FAULT_ERRNO=%s saving step %lld", spec, (long long)step);
        zs_status st = save_with(zs, step, spec, message, sizeof message);
        check_all_ranks(st, when);
        if (st == ZS_OK) previous = step;
        check_resume_point(root, previous, when);
        int found = st != ZS_OK && strstr(message, marker) != NULL;
        int everywhere = 0;
        MPI_Allreduce(&found, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (everywhere) {
            if (!hit) hit = n;
            ZT_CHECK_MSG(strstr(message, strerror(EIO)) && strstr(message, "not kept") &&
                             strstr(message, "checkpoint.on_durability_error"),
                         "%s: rank %d's message: %s", when, zt_rank, message);
        }
    }
    ZT_CHECK_MSG(hit > 0, "no n of %s:EIO:n failed the save with a message containing '%s'",
                 point, marker);
    zs_destroy(zs);
    return hit;
}

/* The warn policy at the n of `point` that sweep_fail found: the save goes
 * on and its step is the one to resume from; `latest` is updated unless its
 * own rename failed. */
static void warn_at(const char *point, int n, int latest_updated) {
    char root[512], spec[96], message[2048], when[160];
    snprintf(root, sizeof root, "%s/warn_%s", g_work, point);
    zs_ctx *zs = build(root, "warn");
    ZT_OK(save_with(zs, 10, NULL, message, sizeof message));
    for (int k = 1; k <= 2; k++) {
        const int64_t step = 100 + k;
        snprintf(spec, sizeof spec, "%s:EIO:%d", point, n);
        snprintf(when, sizeof when, "warn: ZS_FAULT_ERRNO=%s saving step %lld", spec,
                 (long long)step);
        zs_status st = save_with(zs, step, spec, message, sizeof message);
        check_all_ranks(st, when);
        ZT_CHECK_MSG(st == ZS_OK, "%s failed: %s", when, message);
        if (zt_rank == 0) {
            char want[32];
            step_name(want, sizeof want, step);
            zs__ckpt_candidates c;
            ZT_OK(zs__ckpt_candidates_list(root, &c));
            ZT_CHECK_MSG(c.count > 0 && strcmp(c.names[0], want) == 0,
                         "%s: the loader picks %s, not %s", when,
                         c.count > 0 ? c.names[0] : "nothing", want);
            zs__ckpt_candidates_free(&c);
            char latest[64], path[1024], previous[32];
            snprintf(path, sizeof path, "%s/latest", root);
            zt_read_text(path, latest, sizeof latest);
            latest[strcspn(latest, "\n")] = '\0';
            step_name(previous, sizeof previous, 10); /* every rename of latest failed */
            ZT_CHECK_MSG(strcmp(latest, latest_updated ? want : previous) == 0,
                         "%s: latest names '%s'", when, latest);
        }
    }
    zs_destroy(zs);
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    ZT_REQUIRE(argc == 2);
    g_work = argv[1];
    /* The fsync of the root names the root itself; the rename of latest
     * names its target. */
    const int root_fsync = sweep_fail("fsync", "%s: fsync failed");
    const int latest_rename = sweep_fail("rename", "cannot rename to %s/latest");
    if (zt_rank == 0)
        printf("durability: the root's fsync failed at fsync %d, latest's rename at rename %d\n",
               root_fsync, latest_rename);
    if (root_fsync > 0) warn_at("fsync", root_fsync, 1);
    if (latest_rename > 0) warn_at("rename", latest_rename, 0);
    int rc = zt_finish("test_ckpt_durability");
    MPI_Finalize();
    return rc;
}
