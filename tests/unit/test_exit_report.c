/* The exit report writer (src/core/exit_report.c):
 *   - the text is valid JSON with every contract field, parsed back with
 *     json-c, whatever the message holds: quotes, backslashes, newlines,
 *     control characters, DEL, valid UTF-8 kept, invalid bytes replaced;
 *   - the peer's host and addresses come from the hosts table, "" and []
 *     when the peer is unknown;
 *   - a small buffer truncates, stays terminated and reports the length;
 *   - the file is written atomically: missing directories created, a
 *     second report replaces the first, no temporary name stays behind, a
 *     report that cannot be written leaves the old one whole;
 *   - nothing is written without a registration or a directory;
 *   - a signal handler can write one (the writer is async-signal-safe);
 *   - zs_report_config_error prints "program: message", returns
 *     ZS_CONFIG_EXIT_CODE and writes a report with cause "config": before
 *     any registration for the rank, world size, report directory and
 *     generation of the launcher's environment (OMPI_COMM_WORLD_RANK before
 *     PMIX_RANK before SLURM_PROCID), after one for the registered job. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv, dup */
#include <dirent.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/exit_report.h"
#include "test_util.h"
#include "zeroshard.h"

static char g_dir[256];

/* A report's field of json-c type `type`, or NULL when it is missing or
 * of another type (a contract break the checks then show). */
static json_object *field(json_object *o, const char *key, json_type type) {
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

static const char *get_str(json_object *o, const char *key) {
    json_object *v = field(o, key, json_type_string);
    return v ? json_object_get_string(v) : "(missing)";
}

static int64_t get_int(json_object *o, const char *key) {
    json_object *v = field(o, key, json_type_int);
    return v ? json_object_get_int64(v) : INT64_MIN;
}

/* A job of 4 ranks: this is rank 3 on host "node-b"; rank 1 is on "node-a". */
static zs__host_addresses g_hosts[4];

static zs__exit_job make_job(const char *report_dir) {
    memset(g_hosts, 0, sizeof g_hosts);
    for (int r = 0; r < 4; r++) {
        snprintf(g_hosts[r].host, sizeof g_hosts[r].host, "%s", r < 2 ? "node-a" : "node-b");
        g_hosts[r].count = 2;
        snprintf(g_hosts[r].address[0], sizeof g_hosts[r].address[0], "10.0.0.%d", r < 2 ? 1 : 2);
        snprintf(g_hosts[r].address[1], sizeof g_hosts[r].address[1], "fd00::%d", r < 2 ? 1 : 2);
    }
    zs__exit_job job;
    memset(&job, 0, sizeof job);
    job.rank = 3;
    job.world_size = 4;
    job.generation = 7;
    snprintf(job.report_dir, sizeof job.report_dir, "%s", report_dir);
    snprintf(job.checkpoint_dir, sizeof job.checkpoint_dir, "/ckpt/\"quoted\"");
    job.self = g_hosts[3];
    job.hosts = g_hosts;
    return job;
}

static const char g_message[] = "waited \"for\" rank 1\\n\nline two\ttab\x01\x1f\x7f "
                                "caf\xc3\xa9 bad\xff\xc3 end";
static const char g_message_back[] = "waited \"for\" rank 1\\n\nline two\ttab\x01\x1f\x7f "
                                     "caf\xc3\xa9 bad\xef\xbf\xbd\xef\xbf\xbd end";

static void test_format(void) {
    const zs__exit_job job = make_job("/unused");
    const zs__exit_report report = {ZS_EXIT_CAUSE_TIMEOUT, 75, 1, "all_reduce", g_message};
    char text[ZS_EXIT_REPORT_BYTES];
    const size_t n = zs__exit_report_format(text, sizeof text, &job, 12, -1, 4242, 1712345678.25,
                                            &report);
    ZT_EQ_U64(n, strlen(text));
    ZT_CHECK_MSG(text[n - 1] == '\n', "the report ends with a newline: %s", text);
    json_tokener *tok = json_tokener_new();
    json_object *o = json_tokener_parse_ex(tok, text, (int)n);
    ZT_CHECK_MSG(o != NULL && json_tokener_get_error(tok) == json_tokener_success,
                 "the report is not valid JSON (%s): %s",
                 json_tokener_error_desc(json_tokener_get_error(tok)), text);
    json_tokener_free(tok);
    ZT_REQUIRE(o != NULL);
    ZT_EQ_INT(get_int(o, "version"), 1);
    ZT_CHECK_MSG(strcmp(get_str(o, "cause"), "timeout") == 0, "cause %s", get_str(o, "cause"));
    ZT_EQ_INT(get_int(o, "exit_code"), 75);
    ZT_EQ_INT(get_int(o, "rank"), 3);
    ZT_EQ_INT(get_int(o, "world_size"), 4);
    ZT_CHECK(strcmp(get_str(o, "host"), "node-b") == 0);
    ZT_EQ_INT(get_int(o, "pid"), 4242);
    ZT_EQ_INT(get_int(o, "generation"), 7);
    ZT_EQ_INT(get_int(o, "step"), 12);
    ZT_EQ_INT(get_int(o, "last_committed_step"), -1);
    ZT_CHECK(strcmp(get_str(o, "checkpoint_dir"), "/ckpt/\"quoted\"") == 0);
    ZT_EQ_INT(get_int(o, "peer"), 1);
    ZT_CHECK(strcmp(get_str(o, "peer_host"), "node-a") == 0);
    ZT_CHECK(strcmp(get_str(o, "op"), "all_reduce") == 0);
    ZT_CHECK_MSG(strcmp(get_str(o, "message"), g_message_back) == 0,
                 "the message did not come back: %s", get_str(o, "message"));
    json_object *addresses = field(o, "addresses", json_type_array);
    json_object *peer_addresses = field(o, "peer_addresses", json_type_array);
    ZT_REQUIRE(addresses && peer_addresses);
    ZT_EQ_INT(json_object_array_length(addresses), 2);
    ZT_CHECK(strcmp(json_object_get_string(json_object_array_get_idx(addresses, 0)),
                    "10.0.0.2") == 0);
    ZT_CHECK(strcmp(json_object_get_string(json_object_array_get_idx(peer_addresses, 1)),
                    "fd00::1") == 0);
    json_object *time = field(o, "time", json_type_double);
    ZT_CHECK(time && json_object_get_double(time) == 1712345678.25);
    json_object_put(o);

    /* An unknown peer: -1, "" and []. */
    const zs__exit_report unknown = {ZS_EXIT_CAUSE_STOPPED, 76, -1, NULL, NULL};
    zs__exit_report_format(text, sizeof text, &job, 0, 5, 1, 0.0, &unknown);
    o = json_tokener_parse(text);
    ZT_REQUIRE(o != NULL);
    ZT_EQ_INT(get_int(o, "peer"), -1);
    ZT_CHECK(strcmp(get_str(o, "peer_host"), "") == 0);
    ZT_CHECK(strcmp(get_str(o, "op"), "") == 0 && strcmp(get_str(o, "message"), "") == 0);
    json_object *none_listed = field(o, "peer_addresses", json_type_array);
    ZT_CHECK(none_listed && json_object_array_length(none_listed) == 0);
    ZT_EQ_INT(get_int(o, "last_committed_step"), 5);
    json_object_put(o);

    /* Truncation: terminated, and the full length reported. */
    char small[40];
    const size_t full = zs__exit_report_format(small, sizeof small, &job, 12, -1, 4242, 1.0,
                                               &report);
    ZT_EQ_U64(strlen(small), sizeof small - 1);
    ZT_CHECK(full > sizeof small);
}

static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static json_object *read_report(const char *path) {
    json_object *o = json_object_from_file(path);
    ZT_CHECK_MSG(o != NULL, "%s does not parse: %s", path, json_util_get_last_err());
    return o;
}

static void on_signal(int sig) {
    (void)sig;
    const zs__exit_report report = {ZS_EXIT_CAUSE_TERMINATED, 78, -1, "", "from a handler"};
    (void)zs__exit_report_write(&report, NULL, 0);
}

static void test_write(void) {
    const zs__exit_report report = {ZS_EXIT_CAUSE_FAILED, 1, 2, "zs_step", "first"};
    zs__exit_report_unregister();
    ZT_EQ_INT(zs__exit_report_write(&report, NULL, 0), 1);
    zs__exit_job none = make_job("");
    zs__exit_report_register(&none);
    ZT_EQ_INT(zs__exit_report_write(&report, NULL, 0), 1);

    char dir[512], path[600], written[600];
    snprintf(dir, sizeof dir, "%s/nested/reports/", g_dir); /* missing, with a trailing '/' */
    zs__exit_job job = make_job(dir);
    zs__exit_report_register(&job);
    zs__exit_report_set_step(9);
    zs__exit_report_set_committed(8);
    ZT_EQ_INT(zs__exit_report_write(&report, written, sizeof written), 0);
    snprintf(path, sizeof path, "%s/nested/reports/rank-00003.json", g_dir);
    ZT_CHECK_MSG(strcmp(written, path) == 0, "written to %s, expected %s", written, path);
    json_object *o = read_report(path);
    ZT_EQ_INT(get_int(o, "step"), 9);
    ZT_EQ_INT(get_int(o, "last_committed_step"), 8);
    ZT_EQ_INT(get_int(o, "pid"), getpid());
    ZT_CHECK(strcmp(get_str(o, "cause"), "failed") == 0 &&
             strcmp(get_str(o, "peer_host"), "node-b") == 0);
    json_object_put(o);

    /* A second report replaces the first; no temporary name stays. */
    const zs__exit_report second = {ZS_EXIT_CAUSE_STOPPED, 76, -1, "zs_step", "second"};
    ZT_EQ_INT(zs__exit_report_write(&second, NULL, 0), 0);
    o = read_report(path);
    ZT_CHECK(strcmp(get_str(o, "message"), "second") == 0);
    json_object_put(o);
    snprintf(dir, sizeof dir, "%s/nested/reports", g_dir);
    ZT_EQ_INT(count_entries(dir, "."), 2); /* "." and ".." only */
    ZT_EQ_INT(count_entries(dir, "rank-"), 1);

    /* A signal handler writes one. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ZT_REQUIRE(sigaction(SIGUSR2, &sa, NULL) == 0);
    raise(SIGUSR2);
    o = read_report(path);
    ZT_CHECK(strcmp(get_str(o, "message"), "from a handler") == 0 &&
             strcmp(get_str(o, "cause"), "terminated") == 0);
    json_object_put(o);

    /* A report that cannot be written (the directory's name is a file's)
     * fails with the errno and leaves nothing. */
    char blocker[600];
    snprintf(blocker, sizeof blocker, "%s/blocker", g_dir);
    FILE *f = fopen(blocker, "w");
    ZT_REQUIRE(f != NULL);
    fclose(f);
    job = make_job(blocker);
    zs__exit_report_register(&job);
    ZT_CHECK(zs__exit_report_write(&second, NULL, 0) < 0);
    ZT_EQ_INT(count_entries(g_dir, "."), 2);
    zs__exit_report_unregister();
    ZT_EQ_INT(zs__exit_report_write(&second, NULL, 0), 1);
    remove(blocker);
    remove(path);
    snprintf(dir, sizeof dir, "%s/nested/reports", g_dir);
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/nested", g_dir);
    rmdir(dir);
}

/* zs_report_config_error with stderr captured into `said`. */
static int config_error_said(const char *program, const char *message, char *said, size_t cap) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    const int saved = dup(2);
    FILE *f = fopen(path, "w+");
    ZT_REQUIRE(saved >= 0 && f != NULL);
    dup2(fileno(f), 2);
    const int code = zs_report_config_error(program, message);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    const size_t n = fread(said, 1, cap - 1, f);
    said[n] = '\0';
    fclose(f);
    remove(path);
    return code;
}

/* This rank's report in dir, read and removed (NULL after a failed check). */
static json_object *take_report(const char *dir, int rank) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank-%05d.json", dir, rank);
    json_object *o = read_report(path);
    remove(path);
    return o;
}

static void test_config_error(void) {
    char dir[400], said[4096];
    snprintf(dir, sizeof dir, "%s/gen-000003", g_dir);
    zs__exit_report_unregister();
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMIX_RANK", "4", 1);
    setenv("SLURM_PROCID", "9", 1);
    setenv("SLURM_NTASKS", "6", 1);
    setenv("ZS_REPORT_DIR", dir, 1);
    setenv("ZS_JOB_GENERATION", "3", 1);

    /* Before any registration: the launcher's environment. PMIX_RANK wins
     * over SLURM_PROCID. */
    int code = config_error_said("trainer", "app.steps = -1 is below 0", said, sizeof said);
    ZT_EQ_INT(code, ZS_CONFIG_EXIT_CODE);
    ZT_EQ_INT(ZS_CONFIG_EXIT_CODE, 64);
    ZT_CHECK_MSG(strcmp(said, "trainer: app.steps = -1 is below 0\n") == 0,
                 "stderr: '%s', expected 'trainer: app.steps = -1 is below 0\\n'", said);
    json_object *o = take_report(dir, 4);
    ZT_REQUIRE(o != NULL);
    ZT_CHECK_MSG(strcmp(get_str(o, "cause"), "config") == 0, "cause '%s', expected 'config'",
                 get_str(o, "cause"));
    ZT_EQ_INT(get_int(o, "exit_code"), 64);
    ZT_EQ_INT(get_int(o, "rank"), 4);
    ZT_EQ_INT(get_int(o, "world_size"), 6);
    ZT_EQ_INT(get_int(o, "generation"), 3);
    ZT_EQ_INT(get_int(o, "step"), 0);
    ZT_EQ_INT(get_int(o, "last_committed_step"), -1);
    ZT_EQ_INT(get_int(o, "peer"), -1);
    ZT_CHECK_MSG(strcmp(get_str(o, "message"), "trainer: app.steps = -1 is below 0") == 0,
                 "message '%s'", get_str(o, "message"));
    json_object_put(o);

    /* OMPI_COMM_WORLD_RANK and its size come first; a rank that is not a
     * number is passed over; a generation that is not one is 0. */
    setenv("OMPI_COMM_WORLD_RANK", "x1", 1);
    setenv("PMIX_RANK", "", 1);
    setenv("ZS_JOB_GENERATION", "-2", 1);
    ZT_EQ_INT(config_error_said(NULL, "no file", said, sizeof said), 64);
    ZT_CHECK_MSG(strcmp(said, "zeroshard: no file\n") == 0, "stderr: '%s'", said);
    o = take_report(dir, 9);
    ZT_REQUIRE(o != NULL);
    ZT_EQ_INT(get_int(o, "rank"), 9);
    ZT_EQ_INT(get_int(o, "generation"), 0);
    json_object_put(o);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    ZT_EQ_INT(config_error_said("p", "m", said, sizeof said), 64);
    o = take_report(dir, 2);
    ZT_REQUIRE(o != NULL);
    ZT_EQ_INT(get_int(o, "rank"), 2);
    ZT_EQ_INT(get_int(o, "world_size"), 3);
    json_object_put(o);

    /* Without ZS_REPORT_DIR nothing is written, and the code is the same. */
    unsetenv("ZS_REPORT_DIR");
    ZT_EQ_INT(config_error_said("p", "m", said, sizeof said), 64);
    ZT_EQ_INT(count_entries(dir, "rank-"), 0);

    /* After a registration (zs_create): the registered job, whatever the
     * environment says. */
    char registered[450];
    snprintf(registered, sizeof registered, "%s/registered", g_dir);
    zs__exit_job job = make_job(registered);
    zs__exit_report_register(&job);
    zs__exit_report_set_step(5);
    ZT_EQ_INT(config_error_said("trainer", "app.global_batch = 7", said, sizeof said), 64);
    o = take_report(registered, 3);
    ZT_REQUIRE(o != NULL);
    ZT_CHECK_MSG(strcmp(get_str(o, "cause"), "config") == 0, "cause '%s'", get_str(o, "cause"));
    ZT_EQ_INT(get_int(o, "rank"), 3);
    ZT_EQ_INT(get_int(o, "generation"), 7);
    ZT_EQ_INT(get_int(o, "step"), 5);
    json_object_put(o);
    zs__exit_report_unregister();
    rmdir(registered);
    rmdir(dir);
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                          "SLURM_PROCID", "SLURM_NTASKS", "ZS_JOB_GENERATION"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/zs_exit_report.XXXXXX");
    ZT_REQUIRE(mkdtemp(g_dir) != NULL);
    test_format();
    test_write();
    test_config_error();
    rmdir(g_dir);
    return zt_finish("test_exit_report");
}
