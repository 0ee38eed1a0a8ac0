/*
 * The argument checks every model op of llama_layers.c starts with, the
 * same on every device. Private to the library (a trainer includes
 * llama_backend.h only).
 */
#ifndef LLAMA_BACKEND_IMPL_H
#define LLAMA_BACKEND_IMPL_H

#include <stddef.h>

#include "llama_backend.h"
#include "nn_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The widths a block computes with, from the dims (both backends). */
typedef struct llama__sizes {
    int C, F, NH, NKV, hd, Q, KV, W; /* Q = NH hd, KV = NKV hd, W = Q + 2 KV: the qkv row */
} llama__sizes;

static inline llama__sizes llama__sizes_of(const llama_dims *d) {
    llama__sizes s;
    s.C = d->n_embd;
    s.F = d->n_ff;
    s.NH = d->n_head;
    s.NKV = d->n_kv_head;
    s.hd = d->head_dim;
    s.Q = s.NH * s.hd;
    s.KV = s.NKV * s.hd;
    s.W = s.Q + 2 * s.KV;
    return s;
}

/* NN_OK, or NN_ERR_ARG with a message naming `op`: B >= 1, 1 <= T <=
 * be->max_T (the RoPE table's rows), and B*T rows within an int (GEMM
 * sizes). */
int llama__check_shape(const char *op, const llama_backend *be, int B, int T, char *err,
                       size_t cap);
/* NN_ERR_ARG when the struct or one of its tensors that these dims use is
 * NULL (`what` names it: "w" or "g"); absent biases are not looked at. */
int llama__check_embed_w(const char *op, const char *what, const llama_embed_w *w, char *err,
                         size_t cap);
int llama__check_head_w(const char *op, const char *what, const llama_head_w *w, char *err,
                        size_t cap);
/* sourced: the block's matrices may be NULL (llama_backend.weights gives
 * them). */
int llama__check_block_w(const char *op, const char *what, const llama_dims *d,
                         const llama_block_w *w, int sourced, char *err, size_t cap);
int llama__check_acts(const char *op, const llama_block_acts *a, char *err, size_t cap);
/* NN_ERR_ARG when p is NULL. */
int llama__check_ptr(const char *op, const char *what, const void *p, char *err, size_t cap);
/* NN_ERR_ARG when chunk_rows < 1. */
int llama__check_chunk(const char *op, int chunk_rows, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* LLAMA_BACKEND_IMPL_H */
