/* Logging, configured by environment like NCCL's:
 *   ZS_LOG_LEVEL = error | warn | info | debug   (default: the config's log.level, else info)
 *   ZS_LOG_FILE  = path pattern; %h host, %p pid, %r rank (default: stderr)
 * Lines carry the rank. INFO and DEBUG print on rank 0 only unless
 * ZS_LOG_ALL_RANKS=1; warnings and errors print on every rank.
 * The logger is process-wide on purpose: it must work before any context
 * exists (config errors) and every context in a process shares stderr. */
#ifndef ZS_CORE_LOG_H
#define ZS_CORE_LOG_H

typedef enum zs_log_level {
    ZS_LOG_ERROR = 0,
    ZS_LOG_WARN = 1,
    ZS_LOG_INFO = 2,
    ZS_LOG_DEBUG = 3
} zs_log_level;

/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int zs__log_level_parse(const char *text);
const char *zs__log_level_name(zs_log_level level);

/* Called by zs_create: the rank for line prefixes and %r, and the configured
 * level and file pattern (environment variables win over both). */
void zs__log_configure(int rank, zs_log_level config_level, const char *config_file_pattern);

int zs__log_enabled(zs_log_level level);
void zs__log(zs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ZS_LOG_ERROR_(...) zs__log(ZS_LOG_ERROR, __VA_ARGS__)
#define ZS_WARN(...) zs__log(ZS_LOG_WARN, __VA_ARGS__)
#define ZS_INFO(...) zs__log(ZS_LOG_INFO, __VA_ARGS__)
#define ZS_DEBUG(...) zs__log(ZS_LOG_DEBUG, __VA_ARGS__)

#endif
