/* A whole GPT-2 on one backend for the tests; see gpt2_test_model.h. */
#include "gpt2_test_model.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "zeroshard.h"

#define TM_TRY(call) MT_TRY(call, m->be->ops->last_error(m->be))

static int tm_alloc(gpt2_tm *m, size_t bytes, void **out) {
    TM_TRY(m->be->dev->ops->alloc(m->be->dev, bytes, out));
    return NN_OK;
}

int gpt2_tm_init(gpt2_tm *m, gpt2_backend *be, const gpt2_dims *d, int B, int T,
                 int chunk_rows) {
    memset(m, 0, sizeof(*m));
    m->be = be;
    m->d = *d;
    m->B = B;
    m->T = T;
    m->chunk_rows = chunk_rows;
    m->elem = nn_dtype_size(be->dtype);
    const int L = d->n_layer;
    const size_t BT = (size_t)B * T, C = (size_t)d->n_embd, e = m->elem;
    m->n_params = gpt2_num_params(d);
    const size_t resid = (size_t)(L + 1) * BT * C;
    const size_t staging = (size_t)m->n_params > resid ? (size_t)m->n_params : resid;
    m->w = calloc((size_t)L, sizeof(gpt2_block_w));
    m->g = calloc((size_t)L, sizeof(gpt2_block_w));
    m->acts = calloc((size_t)L, sizeof(gpt2_block_acts));
    m->host_losses = calloc(BT, sizeof(float));
    m->host_elems = calloc(staging, e);
    if (m->w == NULL || m->g == NULL || m->acts == NULL || m->host_losses == NULL ||
        m->host_elems == NULL) {
        fprintf(stderr, "gpt2_tm_init: out of host memory\n");
        return NN_ERR_NOMEM;
    }
    m->acts_bytes = (size_t)gpt2_block_acts_bytes(d, B, T, be->dtype);
    const size_t bscratch = be->ops->block_scratch_bytes(be, d, B, T);
    const size_t hscratch = be->ops->head_scratch_bytes(be, d, chunk_rows > 0 ? chunk_rows : 1);
    int s = NN_OK;
    if ((s = tm_alloc(m, e * (size_t)m->n_params, &m->params)) ||
        (s = tm_alloc(m, e * (size_t)m->n_params, &m->grads)) ||
        (s = tm_alloc(m, e * resid, (void **)&m->resid)) ||
        (s = tm_alloc(m, (size_t)L * m->acts_bytes, (void **)&m->acts_mem)) ||
        (s = tm_alloc(m, e * BT * C, &m->dres[0])) ||
        (s = tm_alloc(m, e * BT * C, &m->dres[1])) ||
        (s = tm_alloc(m, bscratch, &m->bscratch)) ||
        (s = tm_alloc(m, hscratch, &m->hscratch)) ||
        (s = tm_alloc(m, sizeof(float) * BT, (void **)&m->losses)) ||
        (s = tm_alloc(m, sizeof(int) * BT, (void **)&m->tokens)) ||
        (s = tm_alloc(m, sizeof(int) * BT, (void **)&m->targets))) {
        return s;
    }
    gpt2_embed_w_carve(d, be->dtype, m->params, &m->w0);
    gpt2_embed_w_carve(d, be->dtype, m->grads, &m->g0);
    for (int l = 0; l < L; l++) {
        const size_t at = (size_t)mt_unit_offset(&gpt2_param_table, d, 1 + l) * e;
        gpt2_block_w_carve(d, be->dtype, (unsigned char *)m->params + at, &m->w[l]);
        gpt2_block_w_carve(d, be->dtype, (unsigned char *)m->grads + at, &m->g[l]);
        gpt2_block_acts_carve(d, B, T, be->dtype, m->acts_mem + (size_t)l * m->acts_bytes,
                              &m->acts[l]);
    }
    return NN_OK;
}

void gpt2_tm_free(gpt2_tm *m) {
    if (m->be != NULL) {
        nn_device *dev = m->be->dev;
        dev->ops->free(dev, m->params);
        dev->ops->free(dev, m->grads);
        dev->ops->free(dev, m->resid);
        dev->ops->free(dev, m->acts_mem);
        dev->ops->free(dev, m->dres[0]);
        dev->ops->free(dev, m->dres[1]);
        dev->ops->free(dev, m->bscratch);
        dev->ops->free(dev, m->hscratch);
        dev->ops->free(dev, m->losses);
        dev->ops->free(dev, m->tokens);
        dev->ops->free(dev, m->targets);
    }
    free(m->w);
    free(m->g);
    free(m->acts);
    free(m->host_losses);
    free(m->host_elems);
    memset(m, 0, sizeof(*m));
}

/* The runtime's conversions (round to nearest even, the same as the
 * devices'), through its public API. */
static zs_dtype tm_zs_dtype(nn_dtype t) {
    return t == NN_BF16 ? ZS_DTYPE_BF16 : t == NN_F16 ? ZS_DTYPE_FP16 : ZS_DTYPE_FP32;
}

int gpt2_tm_read(gpt2_tm *m, const void *src, size_t n, float *host) {
    if (m->be->dtype == NN_F32) {
        TM_TRY(m->be->dev->ops->download(m->be->dev, host, src, n * sizeof(float)));
        return NN_OK;
    }
    TM_TRY(m->be->dev->ops->download(m->be->dev, m->host_elems, src, n * m->elem));
    if (zs_convert(host, ZS_DTYPE_FP32, m->host_elems, tm_zs_dtype(m->be->dtype), (int64_t)n) !=
        ZS_OK) {
        fprintf(stderr, "gpt2_tm_read: %s\n", zs_last_error());
        return NN_ERR_ARG;
    }
    return NN_OK;
}

int gpt2_tm_write(gpt2_tm *m, void *dst, const float *host, size_t n) {
    if (m->be->dtype == NN_F32) {
        TM_TRY(m->be->dev->ops->upload(m->be->dev, dst, host, n * sizeof(float)));
        return NN_OK;
    }
    if (zs_convert(m->host_elems, tm_zs_dtype(m->be->dtype), host, ZS_DTYPE_FP32, (int64_t)n) !=
        ZS_OK) {
        fprintf(stderr, "gpt2_tm_write: %s\n", zs_last_error());
        return NN_ERR_ARG;
    }
    TM_TRY(m->be->dev->ops->upload(m->be->dev, dst, m->host_elems, n * m->elem));
    return NN_OK;
}

int gpt2_tm_set_params(gpt2_tm *m, const float *host_params) {
    return gpt2_tm_write(m, m->params, host_params, (size_t)m->n_params);
}

int gpt2_tm_set_data(gpt2_tm *m, const int *host_tokens, const int *host_targets) {
    const size_t BT = (size_t)m->B * m->T;
    TM_TRY(m->be->dev->ops->upload(m->be->dev, m->tokens, host_tokens, sizeof(int) * BT));
    TM_TRY(m->be->dev->ops->upload(m->be->dev, m->targets, host_targets, sizeof(int) * BT));
    return NN_OK;
}

void *gpt2_tm_resid(const gpt2_tm *m, int l) {
    return m->resid + (size_t)l * m->B * m->T * m->d.n_embd * m->elem;
}

static int tm_forward_blocks(gpt2_tm *m) {
    gpt2_backend *be = m->be;
    TM_TRY(be->ops->embed_forward(be, &m->d, m->B, m->T, &m->w0, m->tokens, gpt2_tm_resid(m, 0)));
    for (int l = 0; l < m->d.n_layer; l++) {
        TM_TRY(be->ops->block_forward(be, &m->d, m->B, m->T, &m->w[l], gpt2_tm_resid(m, l),
                                      &m->acts[l], gpt2_tm_resid(m, l + 1), m->bscratch));
    }
    return NN_OK;
}

static int tm_mean_loss(gpt2_tm *m, double *mean_loss) {
    const int BT = m->B * m->T;
    TM_TRY(m->be->dev->ops->download(m->be->dev, m->host_losses, m->losses, sizeof(float) * (size_t)BT));
    double sum = 0.0;
    for (int r = 0; r < BT; r++) {
        sum += m->host_losses[r];
    }
    *mean_loss = sum / BT;
    return NN_OK;
}

int gpt2_tm_loss(gpt2_tm *m, double *mean_loss) {
    gpt2_backend *be = m->be;
    TM_TRY(tm_forward_blocks(m));
    TM_TRY(be->ops->head_forward(be, &m->d, m->B, m->T, &m->w0, gpt2_tm_resid(m, m->d.n_layer),
                                 m->targets, m->losses, m->chunk_rows, m->hscratch));
    return tm_mean_loss(m, mean_loss);
}

int gpt2_tm_step(gpt2_tm *m, float dloss_scale, int zero_grads, double *mean_loss) {
    gpt2_backend *be = m->be;
    const int L = m->d.n_layer;
    if (zero_grads) {
        TM_TRY(be->dev->ops->zero(be->dev, m->grads, m->elem * (size_t)m->n_params));
    }
    TM_TRY(tm_forward_blocks(m));
    TM_TRY(be->ops->head_forward_backward(be, &m->d, m->B, m->T, &m->w0, &m->g0,
                                          gpt2_tm_resid(m, L), m->targets, dloss_scale,
                                          m->dres[0], m->losses, m->chunk_rows, m->hscratch));
    // Block l reads d(its output) from dres[(L - 1 - l) % 2] and writes
    // d(its input) into the other one.
    for (int l = L - 1; l >= 0; l--) {
        void *dy = m->dres[(L - 1 - l) % 2];
        void *dx = m->dres[(L - l) % 2];
        TM_TRY(be->ops->block_backward(be, &m->d, m->B, m->T, &m->w[l], &m->g[l],
                                       gpt2_tm_resid(m, l), &m->acts[l], dy, dx, m->bscratch));
    }
    TM_TRY(be->ops->embed_backward(be, &m->d, m->B, m->T, &m->g0, m->tokens, m->dres[L % 2]));
    return tm_mean_loss(m, mean_loss);
}

int gpt2_tm_run_step(gpt2_backend *be, const gpt2_dims *d, int B, int T, int chunk_rows,
                     int threads, mt_step_result *out) {
    memset(out, 0, sizeof *out);
    omp_set_num_threads(threads);
    gpt2_tm m;
    int s = gpt2_tm_init(&m, be, d, B, T, chunk_rows);
    if (s != 0) return s;
    const int BT = B * T;
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    int *tokens = malloc(sizeof(int) * (size_t)BT), *targets = malloc(sizeof(int) * (size_t)BT);
    if (!params || !tokens || !targets ||
        mt_step_result_alloc(out, (size_t)m.n_params,
                             (size_t)(d->n_layer + 1) * (size_t)BT * (size_t)d->n_embd,
                             (size_t)d->n_layer * m.acts_bytes / sizeof(float), (size_t)BT) != 0)
        s = NN_ERR_NOMEM;
    if (s == 0) {
        mt_init_params(&gpt2_param_table, d, params, 5, 3.0, 0.1);
        mt_random_tokens(BT, d->vocab, tokens, 6);
        mt_random_tokens(BT, d->vocab, targets, 7);
        s = gpt2_tm_set_params(&m, params);
    }
    if (s == 0) s = gpt2_tm_set_data(&m, tokens, targets);
    if (s == 0) s = gpt2_tm_step(&m, 1.0f / (float)BT, 1, &out->loss);
    if (s == 0) s = gpt2_tm_read(&m, m.grads, out->n_grads, out->grads);
    if (s == 0) s = gpt2_tm_read(&m, m.resid, out->n_resid, out->resid);
    if (s == 0) s = be->dev->ops->download(be->dev, out->acts, m.acts_mem, sizeof(float) * out->n_acts);
    if (s == 0) s = be->dev->ops->download(be->dev, out->losses, m.losses, sizeof(float) * out->n_losses);
    free(params);
    free(tokens);
    free(targets);
    gpt2_tm_free(&m);
    if (s != 0) mt_step_result_free(out);
    return s;
}
