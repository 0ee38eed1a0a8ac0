/*
 * ex_batch — the same global batch at any world size (app.global_batch).
 *
 * With app.global_batch = G sequences per optimizer step, the trainer
 * derives the per-rank micro-batch B and the runtime's
 * gradient_accumulation_steps A from G and the world size W:
 *
 *   W x B x A = G,   B the largest divisor of G / W with B <= cap,
 *
 * where cap is app.batch_size (the memory cap: the activations of B
 * sequences must fit). The largest B means the fewest micro-steps. A
 * combination exists exactly when W divides G (B = 1 always divides) and
 * A stays within gradient_accumulation_steps' maximum; otherwise the
 * trainer refuses to start, naming the keys and the numbers.
 *
 * The data order is then the same computation at every world size: a
 * micro-step m of an optimizer step starting at global sample p gives rank
 * r the samples p + m W B + r B + b (b < B; ex_data.h), so every optimizer
 * step consumes exactly the samples p .. p + G - 1, each once, whatever W
 * and B are, and the saved data position advances by G per step. The
 * gradient is the mean over the same G x T positions; only the order of
 * the additions differs (per rank, then across ranks and micro-steps), so
 * runs at different world sizes agree to rounding, not to the bit.
 *
 * zs-run (tools/zs_run/decide.py, batch_split) applies the same rule to
 * choose a world size that keeps G; keep the two alike.
 */
#ifndef EX_BATCH_H
#define EX_BATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime's upper bound on gradient_accumulation_steps (config schema). */
#define EX_BATCH_MAX_ACCUMULATION 65536

typedef struct ex_batch {
    int micro_batch;   /* B: sequences per rank per micro-step */
    int accumulation;  /* A: micro-steps per optimizer step */
} ex_batch;

/* Fills *out for global_batch G >= 1, world W >= 1 and cap >= 1; returns 0.
 * Returns -1 with a message in err (naming app.global_batch,
 * app.batch_size and the world size, with the numbers and what would work)
 * when no combination keeps G. */
int ex_batch_derive(int64_t global_batch, int world, int cap, ex_batch *out, char *err,
                    size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif /* EX_BATCH_H */
