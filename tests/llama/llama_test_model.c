/* A whole Llama-family model on one backend for the tests; see
 * llama_test_model.h. */
#include "llama_test_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TM_TRY(call) MT_TRY(call, m->be->ops->last_error(m->be))
#define DEV_TRY(call) MT_TRY(call, m->dev->ops->last_error(m->dev))

int llama_tm_init(llama_tm *m, llama_backend *be, int B, int T, int chunk_rows) {
    memset(m, 0, sizeof(*m));
    m->be = be;
    m->dev = be->dev;
    m->d = be->dims;
    m->B = B;
    m->T = T;
    m->chunk_rows = chunk_rows;
    const llama_dims *d = &m->d;
    const int L = d->n_layer;
    const size_t BT = (size_t)B * T, C = (size_t)d->n_embd;
    if (m->dev->dtype != NN_F32) {
        fprintf(stderr, "llama_tm_init: fp32 devices only\n");
        return NN_ERR_ARG;
    }
    m->n_params = llama_num_params(d);
    m->w = calloc((size_t)L, sizeof(llama_block_w));
    m->g = calloc((size_t)L, sizeof(llama_block_w));
    m->acts = calloc((size_t)L, sizeof(llama_block_acts));
    m->host_losses = calloc(BT, sizeof(float));
    if (!m->w || !m->g || !m->acts || !m->host_losses) {
        fprintf(stderr, "llama_tm_init: out of host memory\n");
        return NN_ERR_NOMEM;
    }
    m->acts_bytes = (size_t)llama_block_acts_bytes(d, B, T, NN_F32);
    const size_t bscratch = be->ops->block_scratch_bytes(be, B, T);
    const size_t hscratch = be->ops->head_scratch_bytes(be, B, T, chunk_rows);
    nn_device *dev = m->dev;
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * (size_t)m->n_params, (void **)&m->params));
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * (size_t)m->n_params, (void **)&m->grads));
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * (size_t)(L + 1) * BT * C, (void **)&m->resid));
    DEV_TRY(dev->ops->alloc(dev, (size_t)L * m->acts_bytes, (void **)&m->acts_mem));
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * BT * C, (void **)&m->dres[0]));
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * BT * C, (void **)&m->dres[1]));
    DEV_TRY(dev->ops->alloc(dev, bscratch, &m->bscratch));
    DEV_TRY(dev->ops->alloc(dev, hscratch, &m->hscratch));
    DEV_TRY(dev->ops->alloc(dev, sizeof(float) * BT, (void **)&m->losses));
    DEV_TRY(dev->ops->alloc(dev, sizeof(int) * BT, (void **)&m->tokens));
    DEV_TRY(dev->ops->alloc(dev, sizeof(int) * BT, (void **)&m->targets));
    llama_embed_w_carve(d, NN_F32, m->params, &m->w0);
    llama_embed_w_carve(d, NN_F32, m->grads, &m->g0);
    const int head = d->tied ? 0 : llama_head_unit(d);
    const int64_t hoff = mt_unit_offset(&llama_param_table, d, head);
    llama_head_w_carve(d, NN_F32, m->params + hoff, &m->wh);
    llama_head_w_carve(d, NN_F32, m->grads + hoff, &m->gh);
    for (int l = 0; l < L; l++) {
        const int64_t at = mt_unit_offset(&llama_param_table, d, 1 + l);
        llama_block_w_carve(d, NN_F32, m->params + at, &m->w[l]);
        llama_block_w_carve(d, NN_F32, m->grads + at, &m->g[l]);
        llama_block_acts_carve(d, B, T, NN_F32, m->acts_mem + (size_t)l * m->acts_bytes,
                               &m->acts[l]);
    }
    return NN_OK;
}

void llama_tm_free(llama_tm *m) {
    if (m->dev != NULL) {
        const nn_device_ops *ops = m->dev->ops;
        void *bufs[] = {m->params, m->grads, m->resid, m->acts_mem, m->dres[0], m->dres[1],
                        m->bscratch, m->hscratch, m->losses, m->tokens, m->targets,
                        m->lora_params, m->lora_grads};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops->free(m->dev, bufs[i]);
    }
    free(m->w);
    free(m->g);
    free(m->acts);
    free(m->host_losses);
    free(m->lora_at);
    memset(m, 0, sizeof(*m));
}

int llama_tm_set_lora(llama_tm *m, const unsigned *targets) {
    const llama_dims *d = &m->d;
    const int L = d->n_layer, r = m->be->lora.r;
    if (r <= 0 || m->lora_at != NULL) {
        fprintf(stderr, "llama_tm_set_lora: %s\n",
                r <= 0 ? "the backend has no LoRA rank (llama_backend_set_lora first)"
                       : "LoRA is set already");
        return NN_ERR_ARG;
    }
    m->lora_at = malloc(sizeof(int64_t) * (size_t)L * LLAMA_LORA_TARGETS);
    if (m->lora_at == NULL) return NN_ERR_NOMEM;
    m->n_lora = 0;
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            int in, out;
            llama_lora_target_shape(d, t, &in, &out);
            const int on = (targets[l] >> t) & 1u;
            m->lora_at[l * LLAMA_LORA_TARGETS + t] = on ? m->n_lora : -1;
            if (on) m->n_lora += (int64_t)r * (in + out);
        }
    }
    const size_t bytes = sizeof(float) * (size_t)m->n_lora; /* zero-filled */
    DEV_TRY(m->dev->ops->alloc(m->dev, bytes, (void **)&m->lora_params));
    DEV_TRY(m->dev->ops->alloc(m->dev, bytes, (void **)&m->lora_grads));
    // The frozen base: no gradient pointer anywhere but the adapters'.
    memset(&m->g0, 0, sizeof m->g0);
    memset(&m->gh, 0, sizeof m->gh);
    for (int l = 0; l < L; l++) {
        memset(&m->g[l], 0, sizeof m->g[l]);
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            const int64_t at = m->lora_at[l * LLAMA_LORA_TARGETS + t];
            if (at < 0) continue;
            int in, out;
            llama_lora_target_shape(d, t, &in, &out);
            m->w[l].lora_A[t] = m->lora_params + at;
            m->w[l].lora_B[t] = m->lora_params + at + (int64_t)r * in;
            m->g[l].lora_A[t] = m->lora_grads + at;
            m->g[l].lora_B[t] = m->lora_grads + at + (int64_t)r * in;
        }
    }
    return NN_OK;
}

int llama_tm_set_lora_params(llama_tm *m, const float *host_lora) {
    DEV_TRY(m->dev->ops->upload(m->dev, m->lora_params, host_lora,
                                sizeof(float) * (size_t)m->n_lora));
    return NN_OK;
}

float *llama_tm_resid(const llama_tm *m, int l) {
    return m->resid + (size_t)l * m->B * m->T * m->d.n_embd;
}

int llama_tm_set_params(llama_tm *m, const float *host_params) {
    DEV_TRY(m->dev->ops->upload(m->dev, m->params, host_params,
                                sizeof(float) * (size_t)m->n_params));
    return NN_OK;
}

int llama_tm_set_data(llama_tm *m, const int *host_tokens, const int *host_targets) {
    const size_t BT = (size_t)m->B * m->T;
    DEV_TRY(m->dev->ops->upload(m->dev, m->tokens, host_tokens, sizeof(int) * BT));
    DEV_TRY(m->dev->ops->upload(m->dev, m->targets, host_targets, sizeof(int) * BT));
    return NN_OK;
}

static int tm_forward_blocks(llama_tm *m) {
    llama_backend *be = m->be;
    TM_TRY(be->ops->embed_forward(be, m->B, m->T, &m->w0, m->tokens, llama_tm_resid(m, 0)));
    for (int l = 0; l < m->d.n_layer; l++) {
        TM_TRY(be->ops->block_forward(be, m->B, m->T, &m->w[l], llama_tm_resid(m, l),
                                      &m->acts[l], llama_tm_resid(m, l + 1), m->bscratch));
    }
    return NN_OK;
}

static int tm_mean_loss(llama_tm *m, double *mean_loss) {
    const int BT = m->B * m->T;
    DEV_TRY(m->dev->ops->download(m->dev, m->host_losses, m->losses, sizeof(float) * (size_t)BT));
    double sum = 0.0;
    for (int r = 0; r < BT; r++) sum += m->host_losses[r];
    *mean_loss = sum / BT;
    return NN_OK;
}

int llama_tm_loss(llama_tm *m, double *mean_loss) {
    llama_backend *be = m->be;
    TM_TRY(tm_forward_blocks(m));
    TM_TRY(be->ops->head_forward(be, m->B, m->T, &m->wh, llama_tm_resid(m, m->d.n_layer),
                                 m->targets, m->losses, m->chunk_rows, m->hscratch));
    return tm_mean_loss(m, mean_loss);
}

int llama_tm_step(llama_tm *m, float dloss_scale, int zero_grads, double *mean_loss) {
    llama_backend *be = m->be;
    const int L = m->d.n_layer;
    if (zero_grads && m->lora_at != NULL) {
        DEV_TRY(m->dev->ops->zero(m->dev, m->lora_grads, sizeof(float) * (size_t)m->n_lora));
    } else if (zero_grads) {
        DEV_TRY(m->dev->ops->zero(m->dev, m->grads, sizeof(float) * (size_t)m->n_params));
    }
    TM_TRY(tm_forward_blocks(m));
    TM_TRY(be->ops->head_forward_backward(be, m->B, m->T, &m->wh, &m->gh, llama_tm_resid(m, L),
                                          m->targets, dloss_scale, m->dres[0], m->losses,
                                          m->chunk_rows, m->hscratch));
    // Block l reads d(its output) from dres[(L - 1 - l) % 2] and writes
    // d(its input) into the other one.
    for (int l = L - 1; l >= 0; l--) {
        float *dy = m->dres[(L - 1 - l) % 2], *dx = m->dres[(L - l) % 2];
        TM_TRY(be->ops->block_backward(be, m->B, m->T, &m->w[l], &m->g[l], llama_tm_resid(m, l),
                                       &m->acts[l], dy, dx, m->bscratch));
    }
    // A frozen embedding has no gradient to take (as the trainer skips it).
    if (m->lora_at == NULL) {
        TM_TRY(be->ops->embed_backward(be, m->B, m->T, &m->g0, m->tokens, m->dres[L % 2]));
    }
    return tm_mean_loss(m, mean_loss);
}

int llama_tm_logits(llama_tm *m, int row, float *host_logits) {
    TM_TRY(m->be->ops->head_logits(m->be, m->B, m->T, &m->wh, llama_tm_resid(m, m->d.n_layer),
                                   row, host_logits, m->hscratch));
    return NN_OK;
}
