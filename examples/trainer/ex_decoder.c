/*
 * The decoder's micro-step (ex_decoder.h): GPT-2's and the Llama family's,
 * which were the same sequence of fetches, ops and releases written twice.
 */
#include "ex_decoder.h"

/* The family's math failed on this rank: the job ends here. */
static void check_op(const ex_decoder *dec, int rc, const char *what) {
    if (rc != 0) ex_abort_job(dec->program, what, dec->ops->last_error(dec->model));
}

static void units_or_abort(const ex_decoder *dec, int rc, const char *what, const char *err) {
    if (rc != 0) ex_abort_job(dec->program, what, err);
}

static void *residual(const ex_decoder *dec, int l, int B, int T) {
    return ex_stream_residual(dec->ws, l, B, T);
}

/* Block l's adapter unit (LoRA), or NULL. */
static zs_unit *adapter_unit(const ex_decoder *dec, int l) {
    return dec->lora ? dec->units->unit[dec->lora_unit0 + l] : NULL;
}

/* Fetches block l (and its adapters) and points p (and a) at their
 * tensors; *ap is a, or NULL without LoRA. */
static zs_status fetch_block(const ex_decoder *dec, zs_ctx *zs, int l, void **p, void **a,
                             void *const **ap) {
    char err[1024];
    zs_status st = zs_fetch(zs, dec->units->unit[1 + l]);
    if (st != ZS_OK) return st;
    /* QLoRA: the block's norms live in a unit of their own (ex_lora.h). */
    const int norms = dec->units->companion[1 + l];
    if (norms >= 0 && (st = zs_fetch(zs, dec->units->unit[norms])) != ZS_OK) return st;
    units_or_abort(dec, ex_units_params(dec->units, 1 + l, p, err, sizeof err), "block", err);
    *ap = NULL;
    if (!dec->lora) return ZS_OK;
    if ((st = zs_fetch(zs, adapter_unit(dec, l))) != ZS_OK) return st;
    units_or_abort(dec, ex_units_params(dec->units, dec->lora_unit0 + l, a, err, sizeof err),
                   "adapters", err);
    *ap = a;
    return ZS_OK;
}

static zs_status release_block(const ex_decoder *dec, zs_ctx *zs, int l) {
    const int norms = dec->units->companion[1 + l];
    zs_status st = norms >= 0 ? zs_release(zs, dec->units->unit[norms]) : ZS_OK;
    if (st == ZS_OK) st = zs_release(zs, dec->units->unit[1 + l]);
    if (st == ZS_OK && dec->lora) st = zs_release(zs, adapter_unit(dec, l));
    return st;
}

/* Forward of the embedding and every block on the uploaded tokens, (B, T):
 * res[L] holds the last block's output. */
static zs_status forward_blocks(const ex_decoder *dec, zs_ctx *zs, const int *tokens, int B,
                                int T) {
    char err[1024];
    void *p[EX_UNIT_MAX_PARAMS], *a[EX_UNIT_MAX_PARAMS];
    void *const *ap = NULL;
    zs_status st = zs_fetch(zs, dec->units->unit[0]);
    if (st != ZS_OK) return st;
    units_or_abort(dec, ex_units_params(dec->units, 0, p, err, sizeof err), "embedding", err);
    check_op(dec, dec->ops->embed_forward(dec->model, B, T, p, tokens, residual(dec, 0, B, T)),
             "embedding forward");
    if ((st = zs_release(zs, dec->units->unit[0])) != ZS_OK) return st;
    for (int l = 0; l < dec->n_layer; l++) {
        if ((st = fetch_block(dec, zs, l, p, a, &ap)) != ZS_OK) return st;
        check_op(dec, dec->ops->block_forward(dec->model, l, B, T, p, ap, residual(dec, l, B, T),
                                              residual(dec, l + 1, B, T)),
                 "block forward");
        if ((st = release_block(dec, zs, l)) != ZS_OK) return st;
    }
    return ZS_OK;
}

zs_status ex_decoder_train_micro_step(const ex_decoder *dec, zs_ctx *zs, const int *tokens,
                                      const int *targets, int B, int T, float dloss,
                                      float *losses) {
    char err[1024];
    void *p[EX_UNIT_MAX_PARAMS], *g[EX_UNIT_MAX_PARAMS], *a[EX_UNIT_MAX_PARAMS];
    void *ga[EX_UNIT_MAX_PARAMS];
    void *const *ap = NULL;
    /* A frozen unit's gradient tensors (LoRA): none. */
    void *const none[EX_UNIT_MAX_PARAMS] = {NULL};
    const int L = dec->n_layer, tied = dec->head_unit == 0;
    zs_status st = forward_blocks(dec, zs, tokens, B, T);
    if (st != ZS_OK) return st;

    /* The head. Tied, it is unit 0 fetched a second time, whose gradient
     * stays open until the embedding's backward adds its part. */
    zs_unit *head = dec->units->unit[dec->head_unit];
    if ((st = zs_fetch(zs, head)) != ZS_OK) return st;
    units_or_abort(dec, ex_units_params(dec->units, dec->head_unit, p, err, sizeof err), "head",
                   err);
    if (!dec->lora)
        units_or_abort(dec, ex_units_grads(dec->units, dec->head_unit, g, err, sizeof err),
                       "head", err);
    void *dy = dec->ws->dres[0], *dx = dec->ws->dres[1];
    check_op(dec, dec->ops->head_forward_backward(dec->model, B, T, p, dec->lora ? none : g,
                                                  residual(dec, L, B, T), targets, dloss, dy,
                                                  losses),
             "head");
    if (!dec->lora) {
        units_or_abort(dec,
                       ex_units_commit(dec->units, dec->head_unit, EX_UNITS_ALL, err, sizeof err),
                       "head", err);
        if (!tied && (st = zs_grads_ready(zs, head)) != ZS_OK) return st;
    }
    if ((st = zs_release(zs, head)) != ZS_OK) return st;

    for (int l = L - 1; l >= 0; l--) {
        if ((st = fetch_block(dec, zs, l, p, a, &ap)) != ZS_OK) return st;
        if (dec->recompute)
            /* The block's output is already in res[l + 1]; recomputing writes
             * the same bits there and rebuilds the activations. */
            check_op(dec, dec->ops->block_forward(dec->model, l, B, T, p, ap,
                                                  residual(dec, l, B, T),
                                                  residual(dec, l + 1, B, T)),
                     "recomputing a block");
        /* The gradients: the block's, or (LoRA) its adapters' alone. */
        const int owner = dec->lora ? dec->lora_unit0 + l : 1 + l;
        units_or_abort(dec, ex_units_grads(dec->units, owner, dec->lora ? ga : g, err, sizeof err),
                       "block", err);
        check_op(dec, dec->ops->block_backward(dec->model, l, B, T, p, dec->lora ? none : g, ap,
                                               dec->lora ? ga : NULL, residual(dec, l, B, T), dy,
                                               dx),
                 "block backward");
        units_or_abort(dec, ex_units_commit(dec->units, owner, EX_UNITS_ALL, err, sizeof err),
                       "block", err);
        if ((st = zs_grads_ready(zs, dec->units->unit[owner])) != ZS_OK) return st;
        if ((st = release_block(dec, zs, l)) != ZS_OK) return st;
        void *t = dy;
        dy = dx;
        dx = t;
    }
    /* A frozen embedding has no backward. */
    if (dec->lora) return ZS_OK;
    /* The embedding's backward needs no parameters: tied, it adds into the
     * gradient the head left open; untied, into one opened now without
     * gathering the table. Either way it is reduced once. */
    zs_unit *embed = dec->units->unit[0];
    if (tied) {
        units_or_abort(dec, ex_units_grads_again(dec->units, 0, dec->embed_grads, g, err,
                                                 sizeof err),
                       "embedding", err);
    } else {
        if ((st = zs_grads_open(zs, embed)) != ZS_OK) return st;
        units_or_abort(dec, ex_units_grads(dec->units, 0, g, err, sizeof err), "embedding", err);
    }
    check_op(dec, dec->ops->embed_backward(dec->model, B, T, g, tokens, dy), "embedding backward");
    units_or_abort(dec, ex_units_commit(dec->units, 0, dec->embed_grads, err, sizeof err),
                   "embedding", err);
    return zs_grads_ready(zs, embed);
}

/* The forward through the head's fetch, its tensors into p; the caller
 * runs the head op and releases. */
static zs_status forward_to_head(const ex_decoder *dec, zs_ctx *zs, const int *tokens, int B,
                                 int T, void **p) {
    char err[1024];
    zs_status st = forward_blocks(dec, zs, tokens, B, T);
    if (st == ZS_OK) st = zs_fetch(zs, dec->units->unit[dec->head_unit]);
    if (st != ZS_OK) return st;
    units_or_abort(dec, ex_units_params(dec->units, dec->head_unit, p, err, sizeof err), "head",
                   err);
    return ZS_OK;
}

zs_status ex_decoder_eval_losses(const ex_decoder *dec, zs_ctx *zs, const int *tokens,
                                 const int *targets, int B, int T, float *losses) {
    void *p[EX_UNIT_MAX_PARAMS];
    zs_status st = forward_to_head(dec, zs, tokens, B, T, p);
    if (st != ZS_OK) return st;
    check_op(dec, dec->ops->head_forward(dec->model, B, T, p, residual(dec, dec->n_layer, B, T),
                                         targets, losses),
             "validation head");
    return zs_release(zs, dec->units->unit[dec->head_unit]);
}

zs_status ex_decoder_last_logits(const ex_decoder *dec, zs_ctx *zs, const int *tokens, int T,
                                 float *host_logits) {
    void *p[EX_UNIT_MAX_PARAMS];
    zs_status st = forward_to_head(dec, zs, tokens, 1, T, p);
    if (st != ZS_OK) return st;
    check_op(dec, dec->ops->head_logits(dec->model, 1, T, p, residual(dec, dec->n_layer, 1, T),
                                        T - 1, host_logits),
             "sampling logits");
    return zs_release(zs, dec->units->unit[dec->head_unit]);
}

/* The family's struct begins with its decoder (ex_decoder.h). */
static const ex_decoder *decoder_of(const ex_model *m) { return (const ex_decoder *)(const void *)m; }

zs_status ex_decoder_model_describe(ex_model *m, zs_ctx *zs, ex_model_facts *facts) {
    const ex_decoder *dec = decoder_of(m);
    const zs_status st =
        ex_lora_describe(dec->units, zs, dec->table, dec->dims, dec->adapters, &facts->units);
    facts->params = dec->table->num_params(dec->dims);
    facts->dtype = st == ZS_OK ? zs_param_dtype(dec->units->param[0]) : ZS_DTYPE_FP32;
    return st;
}

zs_status ex_decoder_model_train_micro_step(ex_model *m, zs_ctx *zs, const int *tokens,
                                            const int *targets, int B, int T, float dloss,
                                            float *losses) {
    const ex_decoder *dec = decoder_of(m);
    /* Dropout on the adapters' input in training micro-steps alone. */
    ex_lora_dropout_begin(dec->adapters, zs);
    const zs_status st = ex_decoder_train_micro_step(dec, zs, tokens, targets, B, T, dloss, losses);
    ex_lora_dropout_end(dec->adapters);
    return st;
}

zs_status ex_decoder_model_eval_losses(ex_model *m, zs_ctx *zs, const int *tokens,
                                       const int *targets, int B, int T, float *losses) {
    return ex_decoder_eval_losses(decoder_of(m), zs, tokens, targets, B, T, losses);
}

zs_status ex_decoder_model_last_logits(ex_model *m, zs_ctx *zs, const int *tokens, int T,
                                       float *host_logits) {
    return ex_decoder_last_logits(decoder_of(m), zs, tokens, T, host_logits);
}
