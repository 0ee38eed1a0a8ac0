/* A small dense network for the runtime's equivalence tests, with layer sizes
 * that divide by nothing convenient (13 -> 29 -> 17 -> 5), written with plain
 * loops so that the reference run depends on nothing but this file.
 *
 * Two gradient modes:
 *   TINY_GRAD_TRUE:   the true gradient of the mean squared error of a tanh
 *                     MLP, for tolerance checks against a reference.
 *   TINY_GRAD_DYADIC: per-sample gradients that are multiples of 2^-8 in
 *                     [-8, 8] (a deterministic function of the parameters,
 *                     the sample and the step). Their sums over any grouping
 *                     of samples are exact in fp32, so results must be
 *                     bit-identical for every world size. */
#ifndef ZS_TESTS_TINY_MODEL_H
#define ZS_TESTS_TINY_MODEL_H

#include <stdint.h>

#define TINY_MAX_LAYERS 32 /* the deep shape's layers fit; arrays of layers are this long */
#define TINY_BATCH 12 /* global batch: divides by 1, 2, 3 and 4 ranks */

typedef enum { TINY_GRAD_TRUE = 0, TINY_GRAD_DYADIC = 1 } tiny_grad_mode;

/* Two shapes, one chosen per process before the model is used:
 *   TINY_SHAPE_WIDE (the default): 13 -> 29 -> 17 -> 5, three units whose
 *     largest is about half the model, the friendly shape most tests use;
 *   TINY_SHAPE_DEEP: 13 -> 26 hidden layers of 7..13 -> 5, 26 units whose
 *     largest is about 5% of the model, as in real models (many blocks).
 *     A bug that sizes a buffer by the largest unit where it needs the
 *     model, or the reverse, shows only here (a heap overflow of hybrid
 *     sharding hid behind the wide shape). */
typedef enum { TINY_SHAPE_WIDE = 0, TINY_SHAPE_DEEP = 1 } tiny_shape;

void tiny_shape_select(tiny_shape shape);
/* The layers (= units) of the chosen shape. */
int tiny_layer_count(void);
/* The widths: input, each layer's output ([tiny_layer_count() + 1]). */
extern const int *tiny_dims;

/* Elements of layer l's weight [out][in] and bias [out]. */
int64_t tiny_weight_numel(int l);
int64_t tiny_bias_numel(int l);

/* Sample `index` of step `step`: input x[13] and target y[5]. */
void tiny_sample(int64_t step, int64_t index, float *x, float *y);

/* Per-batch activations kept from forward for backward. */
typedef struct tiny_acts {
    int batch;
    float *a[TINY_MAX_LAYERS + 1]; /* a[0] = inputs [batch][13]; a[l+1] = layer l output [batch][dims[l+1]] */
    float *y;                  /* targets [batch][5] */
    float *delta;              /* scratch [batch][max dim] */
    float *delta_prev;         /* scratch [batch][max dim] */
    float loss_scale;          /* set by tiny_backward_begin */
} tiny_acts;

void tiny_acts_init(tiny_acts *acts, int batch);
void tiny_acts_free(tiny_acts *acts);

/* Fills inputs and targets for samples first .. first + batch - 1 of step. */
void tiny_load_batch(tiny_acts *acts, int64_t step, int64_t first);

/* Layer l forward: a[l+1] = act(W a[l] + b) (tanh, none on the last layer). */
void tiny_forward(int l, const float *w, const float *b, tiny_acts *acts);
/* Mean over the batch of 0.5 * |out - y|^2 (call after the last forward). */
double tiny_loss(const tiny_acts *acts);

/* Starts backward: delta = loss_scale * d(loss)/d(out) for the last layer
 * (the loss is multiplied by the runtime's loss scale before backward). */
void tiny_backward_begin(tiny_acts *acts, float loss_scale);
/* Layer l backward: ADDS d(loss)/dW, d(loss)/db into gw, gb and moves delta
 * to the layer's input. In dyadic mode gw/gb get the synthetic gradients,
 * scaled by `world` and the loss scale (see the header comment), and delta
 * is left alone. */
void tiny_backward(int l, const float *w, const float *b, float *gw, float *gb, tiny_acts *acts,
                   tiny_grad_mode mode, int64_t step, int64_t first_sample, int world);

#endif
