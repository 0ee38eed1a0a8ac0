/*
 * ex_sample — picking the next token from logits, as GPT-2 samplers do:
 * temperature, then top-k, then a draw from the renormalized softmax.
 *
 * Deterministic: the draw comes from the caller's generator (ex_rng), so
 * every rank that seeds it alike picks the same tokens (in stage 3 every rank
 * must run the same forward passes, so all of them sample, and one prints).
 */
#ifndef EX_SAMPLE_H
#define EX_SAMPLE_H

#include <stdint.h>

typedef struct ex_rng {
    uint64_t state;
} ex_rng;

void ex_rng_seed(ex_rng *rng, uint64_t seed);
/* Uniform in [0, 1), 53 bits. */
double ex_rng_uniform(ex_rng *rng);

/* The next token from logits [V] (host memory). temperature <= 0 picks the
 * most likely token (ties: the lowest id); top_k <= 0 or >= V keeps every
 * token. scratch: V floats and V ints (host), contents unspecified on return.
 * Returns the token id, in [0, V). */
int ex_sample_token(const float *logits, int V, double temperature, int top_k, ex_rng *rng,
                      float *scratch_values, int *scratch_ids);

#endif
