/* Configurations from text, for tests (config_text.c). */
#ifndef ZS_TEST_CONFIG_TEXT_H
#define ZS_TEST_CONFIG_TEXT_H

#include "zeroshard.h"

/* A configuration loaded from `text`, through a temporary file (the runtime
 * reads configurations from files only), removed again; NULL, with a
 * failed check (test_util.h), when it does not load. The caller destroys
 * it. */
zs_config *zt_config_text(const char *text);

#endif
