/*
 * What the examples' devices and model backends share behind nn_device.h
 * and their backend headers: the formatting of last_error messages. Private
 * to the model libraries (a trainer includes the public headers only).
 */
#ifndef NN_IMPL_H
#define NN_IMPL_H

#include <stdarg.h>
#include <stddef.h>

#include "ex_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Messages are formatted by examples/common/ex_error.h (ex_error: write
 * the line, return the status), the one formatter of every example. */

/* Returns a check's failure from a backend's op; the check has already
 * written its message. */
#define NN_TRY(call)                                                                          \
    do {                                                                                      \
        int nn_try_status_ = (call);                                                          \
        if (nn_try_status_ != NN_OK) {                                                        \
            return nn_try_status_;                                                            \
        }                                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* NN_IMPL_H */
