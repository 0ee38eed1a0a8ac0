/* Configurations from text, for tests (see config_text.h). */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "config_text.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

zs_config *zt_config_text(const char *text) {
    char path[] = "/tmp/zs_test_config_XXXXXX";
    const int fd = mkstemp(path);
    ZT_CHECK_MSG(fd >= 0, "cannot create %s for a configuration", path);
    if (fd < 0) return NULL;
    const size_t len = strlen(text);
    const int written = write(fd, text, len) == (ssize_t)len;
    close(fd);
    ZT_CHECK_MSG(written, "cannot write %s", path);
    zs_config *cfg = NULL;
    if (written) ZT_OK(zs_config_load(path, &cfg));
    unlink(path);
    return cfg;
}
