/*
 * ex_stream — the workspace of a decoder's micro-step, for every model of
 * the trainer: the residual stream (the input of each of L blocks and the
 * last block's output, for B sequences of T tokens), each block's saved
 * activations (one shared set when they are recomputed in backward), the
 * residual stream's gradient in two buffers that alternate block by block,
 * and the scratch of the blocks and of the head. All device memory of the
 * model's device; the sizes that depend on the model are the caller's.
 */
#ifndef EX_STREAM_H
#define EX_STREAM_H

#include <stddef.h>

#include "nn_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ex_stream {
    nn_device *dev;
    int layers, recompute;
    size_t row_bytes;        /* one row of the stream: C elements of the device's dtype */
    unsigned char *res;      /* [L + 1][B*T][C]: block l reads res[l] and writes res[l + 1] */
    unsigned char *acts;     /* [L, or 1 with recompute][acts_bytes] */
    size_t acts_bytes;
    void *dres[2];           /* [B*T][C] each: the stream's gradient, ping-pong */
    void *block_scratch, *head_scratch;
} ex_stream;

/* Allocates for L blocks and B*T rows of row_bytes; acts_bytes per block;
 * *total (may be NULL) gets the bytes taken. 0, or -1 with the device's
 * message and the buffer that did not fit in err. */
int ex_stream_alloc(ex_stream *s, nn_device *dev, int L, int B, int T, size_t row_bytes,
                    size_t acts_bytes, int recompute, size_t block_scratch, size_t head_scratch,
                    double *total, char *err, size_t cap);
void ex_stream_free(ex_stream *s);

/* The input of block l (l = L: the last block's output) for a micro-step of
 * (B, T), B*T no more than allocated. */
void *ex_stream_residual(const ex_stream *s, int l, int B, int T);
/* The memory of block l's saved activations (its own set, or the shared one
 * with recompute), to carve with the model's layout. */
void *ex_stream_acts(const ex_stream *s, int l);

#ifdef __cplusplus
}
#endif
#endif /* EX_STREAM_H */
