/* The argument checks and messages the Llama backends share; see
 * llama_backend_impl.h. */
#include "llama_backend_impl.h"

#include <limits.h>

int llama__check_shape(const char *op, const llama_backend *be, int B, int T, char *err,
                       size_t cap) {
    if (B < 1 || T < 1 || T > be->max_T) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: B = %d and T = %d; need B >= 1 and 1 <= T <= %d (the "
                         "longest sequence the backend was created for)",
                         op, B, T, be->max_T);
    }
    // Rows are GEMM sizes (int); every offset is computed in size_t.
    const long long BT = (long long)B * T;
    if (BT > INT_MAX) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: B * T = %lld rows is too many for one call; split the batch",
                         op, BT);
    }
    return NN_OK;
}

int llama__check_ptr(const char *op, const char *what, const void *p, char *err, size_t cap) {
    if (p == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama %s: %s is NULL", op, what);
    }
    return NN_OK;
}

int llama__check_chunk(const char *op, int chunk_rows, char *err, size_t cap) {
    if (chunk_rows < 1) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: chunk_rows = %d; need >= 1 (rows of logits held at once)", op,
                         chunk_rows);
    }
    return NN_OK;
}

int llama__check_embed_w(const char *op, const char *what, const llama_embed_w *w, char *err,
                         size_t cap) {
    if (w == NULL || w->wte == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: %s (model.embed_tokens.weight) is NULL", op, what);
    }
    return NN_OK;
}

int llama__check_head_w(const char *op, const char *what, const llama_head_w *w, char *err,
                        size_t cap) {
    if (w == NULL || w->norm == NULL || w->wout == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: %s (the head: model.norm.weight and lm_head.weight, or "
                         "model.embed_tokens.weight when tied) is NULL or has a NULL tensor",
                         op, what);
    }
    return NN_OK;
}

int llama__check_block_w(const char *op, const char *what, const llama_dims *d,
                         const llama_block_w *w, int sourced, char *err, size_t cap) {
    if (w == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "llama %s: %s is NULL", op, what);
    }
    const struct {
        const char *name;
        const void *p;
        int present;
    } t[] = {{"input_layernorm.weight", w->attn_norm, 1},
             {"self_attn.q_proj.weight", w->wq, !sourced},
             {"self_attn.q_proj.bias", w->bq, d->qkv_bias},
             {"self_attn.k_proj.weight", w->wk, !sourced},
             {"self_attn.k_proj.bias", w->bk, d->qkv_bias},
             {"self_attn.v_proj.weight", w->wv, !sourced},
             {"self_attn.v_proj.bias", w->bv, d->qkv_bias},
             {"self_attn.o_proj.weight", w->wo, !sourced},
             {"self_attn.o_proj.bias", w->bo, d->o_bias},
             {"post_attention_layernorm.weight", w->mlp_norm, 1},
             {"mlp.gate_proj.weight", w->wgate, !sourced},
             {"mlp.gate_proj.bias", w->bgate, d->mlp_bias},
             {"mlp.up_proj.weight", w->wup, !sourced},
             {"mlp.up_proj.bias", w->bup, d->mlp_bias},
             {"mlp.down_proj.weight", w->wdown, !sourced},
             {"mlp.down_proj.bias", w->bdown, d->mlp_bias}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].present && t[i].p == NULL) {
            return ex_error(err, cap, NN_ERR_ARG, "llama %s: %s: the block's %s is NULL", op,
                             what, t[i].name);
        }
    }
    return NN_OK;
}

int llama__check_acts(const char *op, const llama_block_acts *a, char *err, size_t cap) {
    if (a == NULL || a->xn1 == NULL || a->rstd1 == NULL || a->qkv == NULL || a->att == NULL ||
        a->atty == NULL || a->res1 == NULL || a->xn2 == NULL || a->rstd2 == NULL ||
        a->gate == NULL || a->up == NULL || a->h == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                         "llama %s: acts is NULL or has a NULL tensor (carve it with "
                         "llama_block_acts_carve)",
                         op);
    }
    return NN_OK;
}
