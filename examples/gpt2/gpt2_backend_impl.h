/*
 * The argument checks every model op of gpt2_layers.c starts with (messages
 * formatted by nn_impl.h), the same on every device. Private to the
 * library (the trainer includes gpt2_backend.h only).
 */
#ifndef GPT2_BACKEND_IMPL_H
#define GPT2_BACKEND_IMPL_H

#include <stdarg.h>
#include <stddef.h>

#include "gpt2_backend.h"
#include "nn_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NN_OK, or NN_ERR_ARG with a message naming `op`: d valid
 * (gpt2_dims_check), B >= 1, 1 <= T <= block_size, and B*T * 4C and
 * B * NH * T * T within what the backends index (int GEMM sizes, int64
 * offsets). */
int gpt2__check_shape(const char *op, const gpt2_dims *d, int B, int T, char *err, size_t cap);
/* NN_ERR_ARG when any pointer of the struct is NULL (`what` names it). */
int gpt2__check_embed_w(const char *op, const char *what, const gpt2_embed_w *w, char *err,
                        size_t cap);
int gpt2__check_block_w(const char *op, const char *what, const gpt2_block_w *w, char *err,
                        size_t cap);
int gpt2__check_acts(const char *op, const gpt2_block_acts *a, char *err, size_t cap);
/* NN_ERR_ARG when p is NULL. */
int gpt2__check_ptr(const char *op, const char *what, const void *p, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_BACKEND_IMPL_H */
