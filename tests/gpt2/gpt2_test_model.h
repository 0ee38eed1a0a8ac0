/*
 * A whole GPT-2 on one backend, for the tests: every unit's parameters and
 * gradients in one flat backend array each (units in order, each in table
 * order), activations for every block, and one call for a full training
 * step (embed -> blocks -> head -> blocks backward -> embed backward). This
 * is the order a trainer runs the units in; the trainer itself does not need
 * this file.
 */
#ifndef GPT2_TEST_MODEL_H
#define GPT2_TEST_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "gpt2_backend.h"
#include "model_tm.h"

typedef struct gpt2_tm {
    gpt2_backend *be; /* not owned */
    gpt2_dims d;
    int B, T, chunk_rows;
    size_t elem;             /* bytes of one element of the backend's dtype */
    int64_t n_params;
    void *params;            /* backend [n_params] elements */
    void *grads;             /* backend [n_params] elements */
    gpt2_embed_w w0, g0;     /* unit 0, carved from params / grads */
    gpt2_block_w *w, *g;     /* [L] host arrays of backend pointers */
    unsigned char *resid;    /* backend [L + 1][BT][C] elements: input of block l at l; head input at L */
    unsigned char *acts_mem; /* backend [L][acts_bytes] */
    size_t acts_bytes;       /* gpt2_block_acts_bytes */
    gpt2_block_acts *acts;   /* [L] */
    void *dres[2];           /* backend [BT][C] elements each */
    void *bscratch;          /* backend, block scratch */
    void *hscratch;          /* backend, head scratch */
    float *losses;           /* backend [BT] */
    int *tokens, *targets;   /* backend [BT] */
    float *host_losses;      /* host [BT] */
    void *host_elems;        /* host staging of conversions: max(n_params, (L+1) BT C) elements */
} gpt2_tm;

/* 0 or a nn_status (message printed to stderr). */
int gpt2_tm_init(gpt2_tm *m, gpt2_backend *be, const gpt2_dims *d, int B, int T,
                 int chunk_rows);
void gpt2_tm_free(gpt2_tm *m);

/* The residual stream entering block l (l = L: the head's input). */
void *gpt2_tm_resid(const gpt2_tm *m, int l);

/* n elements of the backend's dtype at backend `src` into host fp32 (read),
 * and host fp32 into backend `dst`, rounded to nearest even (write). */
int gpt2_tm_read(gpt2_tm *m, const void *src, size_t n, float *host);
int gpt2_tm_write(gpt2_tm *m, void *dst, const float *host, size_t n);

/* Host fp32 -> backend (params converted to the backend's dtype). */
int gpt2_tm_set_params(gpt2_tm *m, const float *host_params);
int gpt2_tm_set_data(gpt2_tm *m, const int *host_tokens, const int *host_targets);

/* Forward only (head_forward); *mean_loss = mean of the per-position losses,
 * summed in double on the host. */
int gpt2_tm_loss(gpt2_tm *m, double *mean_loss);
/* A full step: with zero_grads, grads holds on return the gradient of
 * dloss_scale * sum of the per-position losses (pass 1 / (B*T) for the mean
 * loss); without, that gradient is added to what grads held. */
int gpt2_tm_step(gpt2_tm *m, float dloss_scale, int zero_grads, double *mean_loss);

/* The flat arrays follow GPT-2's table (mt_unit_offset(&gpt2_param_table,
 * ...)); test inputs come from model_tm.h (mt_init_params with gain 1,
 * jitter 0 is GPT-2's init; the gradient check uses larger values so that
 * attention is not uniform, GELU not linear, and every bias and gain
 * matters). */

/* One step of a model of dims `d` (parameters from seed 5 with gain 3 and
 * jitter 0.1, tokens and targets from seeds 6 and 7) on `be` with `threads`
 * OpenMP threads; 0 or a nn_status. */
int gpt2_tm_run_step(gpt2_backend *be, const gpt2_dims *d, int B, int T, int chunk_rows,
                     int threads, mt_step_result *out);
#endif /* GPT2_TEST_MODEL_H */
