/* The MLP's math and its synthetic task; see mlp_model.h for the contracts. */
#include "mlp_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"

/* ---------------------------------------------------------------- hashing */

/* splitmix64 (Steele, Lea and Flood 2014) used as a counter-based generator:
 * output n of the stream with key k is mix(k + (n + 1) * gamma). Evaluating
 * any position costs the same as the next one, which is what lets every rank
 * generate exactly its own samples. */
#define MLP_SPLITMIX_GAMMA UINT64_C(0x9e3779b97f4a7c15)

static uint64_t mlp__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t mlp__hash_at(uint64_t key, uint64_t counter) {
    return mlp__mix64(key + (counter + 1) * MLP_SPLITMIX_GAMMA);
}

/* The top 24 bits, so that the value is exact in a float: uniform in [0, 1). */
static float mlp__unit_float(uint64_t h) {
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

/* Distinct domain tags keep the feature stream and the rule stream apart even
 * if someone picks data_seed equal to MLP_RULE_SEED. */
#define MLP_DOMAIN_FEATURES UINT64_C(0x66656174) /* "feat" */
#define MLP_DOMAIN_RULE UINT64_C(0x72756c65)     /* "rule" */

/* ----------------------------------------------------------------- dataset */

int mlp_dataset_init(mlp_dataset *ds, int input_dim, int classes, uint64_t data_seed) {
    if (ds == NULL || input_dim < 1 || classes < 2) {
        return -1;
    }
    ds->input_dim = input_dim;
    ds->classes = classes;
    ds->data_seed = data_seed;
    return 0;
}

void mlp_dataset_sample(const mlp_dataset *ds, uint64_t index, float *x, int *label) {
    const int D = ds->input_dim;
    const uint64_t feature_key = mlp__mix64(ds->data_seed ^ MLP_DOMAIN_FEATURES);
    const uint64_t rule_key = mlp__mix64(MLP_RULE_SEED ^ MLP_DOMAIN_RULE);
    // sqrt(3) * (2u - 1) has variance 1 for u uniform in [0, 1).
    const float half_width = 1.7320508075688772f;
    for (int j = 0; j < D; j++) {
        float u = mlp__unit_float(mlp__hash_at(feature_key, index * (uint64_t)D + (uint64_t)j));
        x[j] = half_width * (2.0f * u - 1.0f);
    }
    // The rule's direction u_c is regenerated from its hash instead of stored,
    // which keeps mlp_dataset a plain value; the cost (C * D hashes) is small
    // next to one sample's forward and backward pass. Scores are computed in
    // double from the float features the model sees, so labels are the same
    // on every rank and machine.
    int best = 0;
    double best_score = -1.0;
    for (int c = 0; c < ds->classes; c++) {
        double dot = 0.0;
        double norm2 = 0.0;
        for (int j = 0; j < D; j++) {
            uint64_t counter = (uint64_t)c * (uint64_t)D + (uint64_t)j;
            double u = 2.0 * (double)mlp__unit_float(mlp__hash_at(rule_key, counter)) - 1.0;
            dot += u * (double)x[j];
            norm2 += u * u;
        }
        double score = fabs(dot) / sqrt(norm2 > 0.0 ? norm2 : 1.0);
        if (score > best_score) {
            best_score = score;
            best = c;
        }
    }
    *label = best;
}

void mlp_dataset_batch(const mlp_dataset *ds, uint64_t first, int count, float *x,
                       int *labels) {
    for (int i = 0; i < count; i++) {
        mlp_dataset_sample(ds, first + (uint64_t)i, x + (size_t)i * (size_t)ds->input_dim,
                           &labels[i]);
    }
}

uint64_t mlp_batch_first_index(int64_t step, int64_t global_batch, int rank, int world_size) {
    int64_t local_batch = global_batch / world_size;
    return (uint64_t)step * (uint64_t)global_batch + (uint64_t)rank * (uint64_t)local_batch;
}

/* ------------------------------------------------------------------- shape */

int mlp_shape_init(mlp_shape *shape, int num_layers, const int *dims) {
    if (shape == NULL || dims == NULL || num_layers < 1 || num_layers > MLP_MAX_LAYERS) {
        return -1;
    }
    for (int l = 0; l <= num_layers; l++) {
        if (dims[l] < 1) {
            return -1;
        }
    }
    if (dims[num_layers] < 2) {
        return -1;
    }
    memset(shape, 0, sizeof(*shape));
    shape->num_layers = num_layers;
    memcpy(shape->dims, dims, sizeof(int) * (size_t)(num_layers + 1));
    return 0;
}

int64_t mlp_layer_weight_numel(const mlp_shape *shape, int layer) {
    return (int64_t)shape->dims[layer + 1] * (int64_t)shape->dims[layer];
}

int64_t mlp_layer_bias_numel(const mlp_shape *shape, int layer) {
    return (int64_t)shape->dims[layer + 1];
}

int64_t mlp_param_count(const mlp_shape *shape) {
    int64_t n = 0;
    for (int l = 0; l < shape->num_layers; l++) {
        n += mlp_layer_weight_numel(shape, l) + mlp_layer_bias_numel(shape, l);
    }
    return n;
}

int mlp_max_dim(const mlp_shape *shape) {
    int m = 0;
    for (int l = 0; l <= shape->num_layers; l++) {
        if (shape->dims[l] > m) {
            m = shape->dims[l];
        }
    }
    return m;
}

mlp_activation mlp_layer_activation(const mlp_shape *shape, int layer) {
    return layer + 1 < shape->num_layers ? MLP_ACT_RELU : MLP_ACT_NONE;
}

double mlp_layer_init_std(const mlp_shape *shape, int layer) {
    double gain = mlp_layer_activation(shape, layer) == MLP_ACT_RELU ? 2.0 : 1.0;
    return sqrt(gain / (double)shape->dims[layer]);
}

/* --------------------------------------------------------------- workspace */

size_t mlp_workspace_bytes(const mlp_shape *shape, int max_batch) {
    const size_t B = (size_t)max_batch;
    const size_t max_dim = (size_t)mlp_max_dim(shape);
    size_t floats = 2 * B * max_dim;
    for (int l = 0; l <= shape->num_layers; l++) {
        floats += B * (size_t)shape->dims[l];
    }
    // Floats first, then the int labels: both are 4-byte aligned, so one
    // block carved by offsets serves both without padding.
    return floats * sizeof(float) + B * sizeof(int);
}

void mlp_workspace_carve(mlp_workspace *ws, const mlp_shape *shape, int max_batch,
                         void *memory) {
    const size_t B = (size_t)max_batch;
    const size_t max_dim = (size_t)mlp_max_dim(shape);
    memset(ws, 0, sizeof(*ws));
    // Only address arithmetic: the memory may be a device's, which this
    // thread cannot touch.
    float *cursor = memory;
    for (int l = 0; l <= shape->num_layers; l++) {
        ws->acts[l] = cursor; // [B][dims[l]]
        cursor += B * (size_t)shape->dims[l];
    }
    ws->grad[0] = cursor; // [B][max_dim]
    cursor += B * max_dim;
    ws->grad[1] = cursor; // [B][max_dim]
    cursor += B * max_dim;
    ws->labels = (int *)(void *)cursor; // [B]
    ws->max_batch = max_batch;
}

int mlp_workspace_init(mlp_workspace *ws, const mlp_shape *shape, int max_batch) {
    ex_blas_init(); /* OpenMP's threads drive the BLAS (cpu_blas.h) */
    if (ws == NULL) {
        return -1;
    }
    memset(ws, 0, sizeof(*ws));
    if (shape == NULL || max_batch < 1) {
        return -1;
    }
    void *memory = malloc(mlp_workspace_bytes(shape, max_batch));
    if (memory == NULL) {
        return -1;
    }
    mlp_workspace_carve(ws, shape, max_batch, memory);
    ws->memory_ = memory;
    return 0;
}

void mlp_workspace_free(mlp_workspace *ws) {
    if (ws == NULL) {
        return;
    }
    free(ws->memory_);
    memset(ws, 0, sizeof(*ws));
}

/* ------------------------------------------------------------------ layers */

void mlp_layer_forward(int batch, int in_dim, int out_dim, mlp_activation act,
                       const float *x, const float *W, const float *b, float *y) {
    if (batch <= 0) {
        return;
    }
    // y: [batch][out_dim] starts as the bias on every row, then
    // y += x: [batch][in_dim] . W^T: [in_dim][out_dim] with beta = 1.
    for (int i = 0; i < batch; i++) {
        memcpy(y + (size_t)i * (size_t)out_dim, b, sizeof(float) * (size_t)out_dim);
    }
    ex_sgemm(0, 1, batch, out_dim, in_dim, 1.0f, x, in_dim, W, in_dim, 1.0f, y, out_dim);
    if (act == MLP_ACT_RELU) {
        const size_t n = (size_t)batch * (size_t)out_dim;
        for (size_t k = 0; k < n; k++) {
            y[k] = y[k] > 0.0f ? y[k] : 0.0f;
        }
    }
}

void mlp_layer_backward(int batch, int in_dim, int out_dim, mlp_activation act,
                        const float *x, const float *y, const float *W, float *dy,
                        float *dW, float *db, float *dx) {
    if (batch <= 0) {
        return;
    }
    // Through the ReLU: y > 0 exactly where the pre-activation was > 0, so the
    // output serves as the mask and the pre-activation need not be kept.
    if (act == MLP_ACT_RELU) {
        const size_t n = (size_t)batch * (size_t)out_dim;
        for (size_t k = 0; k < n; k++) {
            if (!(y[k] > 0.0f)) {
                dy[k] = 0.0f;
            }
        }
    }
    // dW: [out_dim][in_dim] += dz^T: [out_dim][batch] . x: [batch][in_dim]
    // (beta = 1: the runtime's buffers accumulate).
    ex_sgemm(1, 0, out_dim, in_dim, batch, 1.0f, dy, out_dim, x, in_dim, 1.0f, dW, in_dim);
    // db: [out_dim] += column sums of dz: [batch][out_dim].
    for (int i = 0; i < batch; i++) {
        const float *row = dy + (size_t)i * (size_t)out_dim;
        for (int o = 0; o < out_dim; o++) {
            db[o] += row[o];
        }
    }
    // dx: [batch][in_dim] = dz: [batch][out_dim] . W: [out_dim][in_dim].
    if (dx != NULL) {
        ex_sgemm(0, 0, batch, in_dim, out_dim, 1.0f, dy, out_dim, W, in_dim, 0.0f, dx, in_dim);
    }
}

/* -------------------------------------------------------------------- loss */

double mlp_softmax_xent(int batch, int classes, const float *logits, const int *labels,
                        float grad_scale, float *dlogits, int *correct) {
    double loss_sum = 0.0;
    int hits = 0;
    const double row_scale = batch > 0 ? (double)grad_scale / (double)batch : 0.0;
    for (int i = 0; i < batch; i++) {
        const float *z = logits + (size_t)i * (size_t)classes; // [classes]
        int argmax = 0;
        for (int c = 1; c < classes; c++) {
            if (z[c] > z[argmax]) {
                argmax = c;
            }
        }
        // log-sum-exp shifted by the largest logit so that exp cannot overflow.
        const double zmax = (double)z[argmax];
        double sum = 0.0;
        for (int c = 0; c < classes; c++) {
            sum += exp((double)z[c] - zmax);
        }
        const double lse = zmax + log(sum);
        const int y = labels[i];
        loss_sum += lse - (double)z[y];
        hits += argmax == y;
        if (dlogits != NULL) {
            // d(mean loss)/dz_c = (softmax_c - [c == y]) / batch. Every read of
            // z for this row happens above, so dlogits may alias logits.
            float *g = dlogits + (size_t)i * (size_t)classes; // [classes]
            for (int c = 0; c < classes; c++) {
                double p = exp((double)z[c] - lse);
                g[c] = (float)(row_scale * (p - (c == y ? 1.0 : 0.0)));
            }
        }
    }
    if (correct != NULL) {
        *correct = hits;
    }
    return batch > 0 ? loss_sum / (double)batch : 0.0;
}

/* ------------------------------------------------------------ whole model */

double mlp_model_forward(const mlp_shape *shape, int batch, const float *const *W,
                         const float *const *b, float dlogits_scale, mlp_workspace *ws,
                         int *correct) {
    const int L = shape->num_layers;
    for (int l = 0; l < L; l++) {
        mlp_layer_forward(batch, shape->dims[l], shape->dims[l + 1],
                          mlp_layer_activation(shape, l), ws->acts[l], W[l], b[l],
                          ws->acts[l + 1]);
    }
    float *dlogits = dlogits_scale > 0.0f ? ws->grad[0] : NULL;
    return mlp_softmax_xent(batch, shape->dims[L], ws->acts[L], ws->labels, dlogits_scale,
                            dlogits, correct);
}

void mlp_model_backward(const mlp_shape *shape, int batch, const float *const *W,
                        float *const *dW, float *const *db, mlp_workspace *ws) {
    // The output gradient of layer l sits in grad[(L - 1 - l) % 2] and its
    // input gradient goes to the other buffer, which layer l - 1 reads next.
    const int L = shape->num_layers;
    for (int l = L - 1; l >= 0; l--) {
        float *dy = ws->grad[(L - 1 - l) % 2];
        float *dx = l > 0 ? ws->grad[(L - l) % 2] : NULL;
        mlp_layer_backward(batch, shape->dims[l], shape->dims[l + 1],
                           mlp_layer_activation(shape, l), ws->acts[l], ws->acts[l + 1], W[l],
                           dy, dW[l], db[l], dx);
    }
}
