/*
 * mlp_model — a multilayer perceptron classifier and a synthetic task for it,
 * written on plain float pointers so that it knows nothing of zeroshard.
 *
 * Two programs use it: examples/mlp/mlp_train.c trains it through the runtime
 * one layer (= one zeroshard unit) at a time, and the runtime's equivalence
 * tests use the whole-model calls (mlp_model_forward / mlp_model_backward) as
 * a single-process reference. Every function is reentrant: there is no global
 * state, and all memory is owned by the caller (mlp_workspace_init is the one
 * call that allocates, and mlp_workspace_free gives it back).
 *
 * Conventions:
 *   - Matrices are row-major; each pointer's shape is written next to it.
 *   - Layer l maps dims[l] inputs to dims[l + 1] outputs with weight
 *     W: [dims[l + 1]][dims[l]] and bias b: [dims[l + 1]]; every layer but the
 *     last is followed by a ReLU, and the last one produces logits.
 *   - Sizes need not be multiples of anything (61 -> 127 -> 93 -> 10 is fine).
 *   - Backward passes ADD into dW and db (which the caller zeroes once per
 *     step), matching zeroshard's gradient convention, so a caller may run
 *     several micro-batches into the same gradient buffers.
 *
 * The loss is softmax cross-entropy averaged over the batch that one call
 * sees, i.e. over a rank's local batch. zeroshard averages gradients over
 * ranks, so when the global batch is split into equal local batches the
 * averaged gradient is exactly the gradient of the mean loss over the global
 * batch (mean of equal-sized means = global mean), whatever the world size.
 */
#ifndef MLP_MODEL_H
#define MLP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- dataset */

/*
 * The synthetic task. Sample i (a global index: any rank can generate any
 * sample without generating the ones before it) is defined as follows.
 *
 * Features: x_j = sqrt(3) * (2 u - 1) for j = 0..D-1, where u in [0, 1) is the
 * top 24 bits of splitmix64's output for counter i * D + j under a key derived
 * from data_seed. Each feature is thus uniform with mean 0 and variance 1, and
 * samples are independent of each other and of how a batch is split.
 *
 * Label: y = argmax over c in 0..C-1 of |u_c . x|, where u_c is a fixed unit
 * vector in R^D drawn (uniform entries, then normalized) from a hash of
 * MLP_RULE_SEED and (c, j). In words: "which of C fixed directions is x most
 * aligned with, up to sign". The rule does not depend on data_seed: it is the
 * task, and data_seed only chooses the samples.
 *
 * Why this rule: the label is invariant under x -> -x, while a linear model's
 * logits satisfy l(-x) = 2b - l(x), so a linear classifier cannot fit it (it
 * stays close to chance). A ReLU network can represent it exactly, since
 * |z| = relu(z) + relu(-z): one hidden layer with 2C units suffices, and
 * larger output scales drive the loss toward zero. Classes are balanced up to
 * sampling noise because the directions are random and nearly orthogonal.
 */
typedef struct mlp_dataset {
    int input_dim;      /* D */
    int classes;        /* C */
    uint64_t data_seed; /* chooses the samples, not the rule */
} mlp_dataset;

/* The seed of the labelling rule: part of the task's definition, not a knob. */
#define MLP_RULE_SEED UINT64_C(0x6d6c702d72756c65) /* "mlp-rule" */

/* Returns 0, or -1 if input_dim < 1 or classes < 2. */
int mlp_dataset_init(mlp_dataset *ds, int input_dim, int classes, uint64_t data_seed);

/* One sample. x: [D]. */
void mlp_dataset_sample(const mlp_dataset *ds, uint64_t index, float *x, int *label);

/* Samples first .. first + count - 1, in order. x: [count][D], labels: [count]. */
void mlp_dataset_batch(const mlp_dataset *ds, uint64_t first, int count, float *x,
                       int *labels);

/* The first global index of rank `rank`'s share of the global batch of `step`
 * when a global batch of `global_batch` samples is split evenly over
 * `world_size` ranks (the caller checks global_batch % world_size == 0).
 * Step s uses samples [s * global_batch, (s + 1) * global_batch), so the
 * global batch of a step is the same for every world size. */
uint64_t mlp_batch_first_index(int64_t step, int64_t global_batch, int rank, int world_size);

/* ------------------------------------------------------------------- shape */

/* A structural limit of mlp_shape's array, not a tuning knob. */
#define MLP_MAX_LAYERS 16

typedef struct mlp_shape {
    int num_layers;                /* L, 1..MLP_MAX_LAYERS */
    int dims[MLP_MAX_LAYERS + 1];  /* dims[0] = D (input), dims[L] = C (classes) */
} mlp_shape;

/* dims: [num_layers + 1], every entry >= 1 and the last >= 2. Returns 0 or -1. */
int mlp_shape_init(mlp_shape *shape, int num_layers, const int *dims);
/* Elements of layer l's weight (dims[l + 1] * dims[l]) and bias (dims[l + 1]). */
int64_t mlp_layer_weight_numel(const mlp_shape *shape, int layer);
int64_t mlp_layer_bias_numel(const mlp_shape *shape, int layer);
/* All weights and biases together. */
int64_t mlp_param_count(const mlp_shape *shape);
/* The largest entry of dims. */
int mlp_max_dim(const mlp_shape *shape);

typedef enum mlp_activation {
    MLP_ACT_NONE = 0, /* the output layer: logits */
    MLP_ACT_RELU = 1  /* every hidden layer */
} mlp_activation;

/* MLP_ACT_RELU for layers 0..L-2, MLP_ACT_NONE for layer L-1. */
mlp_activation mlp_layer_activation(const mlp_shape *shape, int layer);

/* Kaiming-style initial standard deviation of layer l's weight: sqrt(2 / in)
 * before a ReLU (He et al. 2015: the factor 2 makes up for the ReLU zeroing
 * half of its inputs, so activations keep their scale through the depth), and
 * sqrt(1 / in) for the output layer, which has no ReLU after it, so that the
 * initial logits have about unit variance. Biases start at zero. */
double mlp_layer_init_std(const mlp_shape *shape, int layer);

/* --------------------------------------------------------------- workspace */

/*
 * Activations that backward needs, plus gradient scratch, carved from one
 * allocation. acts[0] holds the input batch, acts[l + 1] the output of layer
 * l (after its ReLU for hidden layers; logits for the last layer); layer l's
 * backward reads acts[l] and acts[l + 1].
 */
typedef struct mlp_workspace {
    int max_batch;
    float *acts[MLP_MAX_LAYERS + 1]; /* acts[l]: [max_batch][dims[l]] */
    float *grad[2];                  /* ping-pong, each [max_batch][max_dim] */
    int *labels;                     /* [max_batch] */
    void *memory_;                   /* the one allocation; internal */
} mlp_workspace;

/* Returns 0, or -1 if max_batch < 1 or memory ran out (ws is then zeroed). */
int mlp_workspace_init(mlp_workspace *ws, const mlp_shape *shape, int max_batch);
/* Frees and zeroes; a zeroed workspace is a no-op. */
void mlp_workspace_free(mlp_workspace *ws);

/* mlp_workspace_init's layout in memory the caller provides, for a
 * workspace in memory that this thread may not touch (a device's: the
 * pointers are then device addresses, and nothing here dereferences them).
 * mlp_workspace_bytes is its size (max_batch >= 1); memory must be 4-byte
 * aligned at least. memory_ stays NULL: the caller frees the memory, and
 * mlp_workspace_free of such a workspace only zeroes it. */
size_t mlp_workspace_bytes(const mlp_shape *shape, int max_batch);
void mlp_workspace_carve(mlp_workspace *ws, const mlp_shape *shape, int max_batch,
                         void *memory);

/* ------------------------------------------------------------------ layers */

/*
 * y = act(x W^T + b). x: [batch][in_dim], W: [out_dim][in_dim], b: [out_dim],
 * y: [batch][out_dim]. y must not alias x. Keep x and y for the backward pass.
 */
void mlp_layer_forward(int batch, int in_dim, int out_dim, mlp_activation act,
                       const float *x, const float *W, const float *b, float *y);

/*
 * The backward pass of mlp_layer_forward with the same x, y and W.
 * dy: [batch][out_dim] holds dLoss/dy on entry and is overwritten with
 * dLoss/d(pre-activation). Adds x^T-weighted gradients into dW: [out_dim][in_dim]
 * and db: [out_dim]. Writes (not adds) dLoss/dx into dx: [batch][in_dim]; dx
 * may be NULL when the input gradient is not needed (the first layer).
 * dx must not alias dy.
 */
void mlp_layer_backward(int batch, int in_dim, int out_dim, mlp_activation act,
                        const float *x, const float *y, const float *W, float *dy,
                        float *dW, float *db, float *dx);

/* -------------------------------------------------------------------- loss */

/*
 * Softmax cross-entropy of logits: [batch][classes] against labels: [batch].
 * Returns the mean loss over the batch (accumulated in double). If dlogits:
 * [batch][classes] is not NULL, writes grad_scale * dMeanLoss/dlogits into it
 * (grad_scale is the loss scale: pass zs_loss_scale, or 1). If correct is not
 * NULL, stores how many rows have their label as the (first) largest logit.
 * dlogits may alias logits.
 */
double mlp_softmax_xent(int batch, int classes, const float *logits, const int *labels,
                        float grad_scale, float *dlogits, int *correct);

/* ------------------------------------------------------------ whole model */

/*
 * The reference path over plain arrays: W[l]: [dims[l + 1]][dims[l]] and
 * b[l]: [dims[l + 1]] for l = 0..L-1.
 *
 * mlp_model_forward runs every layer on ws->acts[0] (the caller fills it and
 * ws->labels, e.g. with mlp_dataset_batch) and returns the mean loss;
 * logits end in ws->acts[L]. If dlogits_scale > 0 it also leaves
 * dlogits_scale * dLoss/dlogits in ws->grad[0] for mlp_model_backward.
 */
double mlp_model_forward(const mlp_shape *shape, int batch, const float *const *W,
                         const float *const *b, float dlogits_scale, mlp_workspace *ws,
                         int *correct);
/* Adds the gradient of (dlogits_scale * mean loss) into dW[l] and db[l]; needs
 * the state left by mlp_model_forward with dlogits_scale > 0. */
void mlp_model_backward(const mlp_shape *shape, int batch, const float *const *W,
                        float *const *dW, float *const *db, mlp_workspace *ws);

#ifdef __cplusplus
}
#endif
#endif /* MLP_MODEL_H */
