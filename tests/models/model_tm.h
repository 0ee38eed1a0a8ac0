/*
 * model_tm — what the test models of every family share (tests/gpt2's
 * gpt2_tm, tests/llama's llama_tm: a backend driven on one device without
 * zeroshard): seeded inputs, the parameter layout of a family's table
 * (nn_param.h) in one flat fp32 array, bitwise comparison, and the
 * whole-model finite-difference gradient check. A new family's test model
 * drives its backend and gets the rest from here.
 */
#ifndef MODEL_TM_H
#define MODEL_TM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nn_device.h"
#include "nn_param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns a backend op's failure from a test model's function, printing
 * where, the call, its status and `why` (the backend's last_error). */
#define MT_TRY(call, why)                                                                     \
    do {                                                                                      \
        int mt_status_ = (call);                                                              \
        if (mt_status_ != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s failed (%s): %s\n", __FILE__, __LINE__, #call,         \
                    nn_status_name(mt_status_), (why));                                       \
            return mt_status_;                                                                \
        }                                                                                     \
    } while (0)

/* ------------------------------------------------------------ inputs */

/* Uniform in [0, 1) and standard normal (Box-Muller) from a splitmix64
 * state: the same numbers on every machine. */
double mt_uniform(uint64_t *state);
double mt_normal(uint64_t *state);
/* n tokens in [0, vocab) from seed. */
void mt_random_tokens(int n, int vocab, int *out, uint64_t seed);

/* Every tensor of the table, in unit and registration order, into
 * host_params at its offset (mt_param_offset): init NORMAL gets gain *
 * init_std * z, ZEROS jitter * z, ONES 1 + jitter * z, z standard normal
 * from seed. gain > 1 and jitter > 0 move a model off its init so that
 * every term of every gradient is sizeable. */
void mt_init_params(const nn_param_table *t, const void *dims, float *host_params, uint64_t seed,
                    double gain, double jitter);

/* Elements before unit `unit` in the flat array (the units' sizes summed),
 * and before tensor `index` of it. */
int64_t mt_unit_offset(const nn_param_table *t, const void *dims, int unit);
int64_t mt_param_offset(const nn_param_table *t, const void *dims, int unit, int index);
/* Elements of every unit. */
int64_t mt_num_params(const nn_param_table *t, const void *dims);

/* The first index where a and b differ bitwise, or -1. */
long long mt_first_diff(const float *a, const float *b, size_t n);

/* Everything one training step produces, on the host in fp32: the mean
 * loss, every gradient, the residual stream, the block activations (their
 * raw bytes, fp32 on the host backends) and the per-position losses. */
typedef struct mt_step_result {
    double loss;
    float *grads, *resid, *acts, *losses;
    size_t n_grads, n_resid, n_acts, n_losses;
} mt_step_result;

/* Host arrays of these sizes; 0, or -1 (nothing held) when memory runs out. */
int mt_step_result_alloc(mt_step_result *r, size_t n_grads, size_t n_resid, size_t n_acts,
                         size_t n_losses);
void mt_step_result_free(mt_step_result *r);
/* 0 when the two are bit for bit equal; else 1 with the first difference
 * described in `what`. */
int mt_step_result_compare(const mt_step_result *a, const mt_step_result *b, char *what,
                           size_t cap);

/* ------------------------------------------- finite-difference gradients */

/*
 * The five-point stencil with h = MT_FD_STEP on the mean loss. With h =
 * 1e-2 (parameters here are 0.05 to 1), noise and truncation put about 1e-4
 * of absolute error on a derivative. An element passes when |backward - fd|
 * <= MT_FD_RTOL |fd| + MT_FD_ATOL_FRAC * max |backward| over its tensor (+
 * MT_FD_ATOL_MIN for tensors whose gradient is all tiny). Every tensor's
 * MT_FD_TOP largest-gradient elements are checked (a wrong scale or a
 * dropped term shows there first), plus MT_FD_RANDOM random ones. A 10%
 * error in one tensor is 10x MT_FD_RTOL on its largest elements, so it
 * fails; the errors measured on correct code stay below a fifth of the
 * bound.
 */
#define MT_FD_STEP 1e-2
#define MT_FD_RTOL 1e-2
#define MT_FD_ATOL_FRAC 2e-3
#define MT_FD_ATOL_MIN 1e-5
#define MT_FD_TOP 3
#define MT_FD_RANDOM 5

/* The model under the check: its loss at given parameters. */
typedef struct mt_fd_model {
    void *model;
    int (*set_params)(void *model, const float *host_params);
    int (*loss)(void *model, double *mean_loss);
} mt_fd_model;

/* Checks grads (the backward's, at params) against finite differences of
 * fm's loss, tensor by tensor; params is restored. Prints each failing
 * element to stderr with `label`, and with verbose every element checked.
 * Returns the failures (elements out of bound, and tensors whose largest
 * gradient is under 1e-4, where the check would be vacuous), and the worst
 * |diff| / bound in *worst. -1 when the model's loss fails. */
int mt_gradient_check(const mt_fd_model *fm, const nn_param_table *t, const void *dims,
                      float *params, const float *grads, const char *label, int verbose,
                      double *worst);

#ifdef __cplusplus
}
#endif
#endif /* MODEL_TM_H */
