#define _GNU_SOURCE
#include "core/log.h"

#include "core/env.h"
#include "core/file_pattern.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int rank;           /* -1 until a context says which rank this is */
    zs_log_level level;
    int all_ranks;
    FILE *file;         /* NULL means stderr */
} g_log = {-1, ZS_LOG_INFO, 0, NULL};

int zs__log_level_parse(const char *text) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (text && strcmp(text, names[i]) == 0) return i;
    return -1;
}

const char *zs__log_level_name(zs_log_level level) {
    switch (level) {
    case ZS_LOG_ERROR: return "ERROR";
    case ZS_LOG_WARN: return "WARN";
    case ZS_LOG_INFO: return "INFO";
    case ZS_LOG_DEBUG: return "DEBUG";
    }
    return "?";
}

void zs__log_configure(int rank, zs_log_level config_level, const char *config_file_pattern) {
    g_log.rank = rank;
    g_log.level = config_level;
    const char *env_level = zs__env_text(ZS_ENV_LOG_LEVEL);
    if (env_level) {
        int parsed = zs__log_level_parse(env_level);
        if (parsed >= 0) g_log.level = (zs_log_level)parsed;
        else fprintf(stderr, "zeroshard: rank %d: WARN ignoring ZS_LOG_LEVEL=%s "
                             "(use error, warn, info or debug)\n", rank, env_level);
    }
    g_log.all_ranks = zs__env_flag(ZS_ENV_LOG_ALL_RANKS);
    const char *pattern = zs__env_text(ZS_ENV_LOG_FILE);
    if (!pattern) pattern = config_file_pattern;
    if (g_log.file) {
        fclose(g_log.file);
        g_log.file = NULL;
    }
    if (pattern && *pattern) {
        char path[1024];
        zs__file_pattern_expand(pattern, rank, path, sizeof path);
        g_log.file = fopen(path, "a");
        if (!g_log.file)
            fprintf(stderr, "zeroshard: rank %d: WARN cannot open log file '%s'; "
                            "logging to stderr\n", rank, path);
    }
}

int zs__log_enabled(zs_log_level level) {
    if (level > g_log.level) return 0;
    if (level >= ZS_LOG_INFO && g_log.rank > 0 && !g_log.all_ranks) return 0;
    return 1;
}

void zs__log(zs_log_level level, const char *fmt, ...) {
    if (!zs__log_enabled(level)) return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    FILE *out = g_log.file ? g_log.file : stderr;
    if (g_log.rank >= 0)
        fprintf(out, "zeroshard: rank %d: %s %s\n", g_log.rank, zs__log_level_name(level), line);
    else
        fprintf(out, "zeroshard: %s %s\n", zs__log_level_name(level), line);
    fflush(out);
}
