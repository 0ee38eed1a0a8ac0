/* The argument checks and messages both backends share; see
 * gpt2_backend_impl.h. */
#include "gpt2_backend_impl.h"

#include <limits.h>
#include <stdio.h>

int gpt2__check_shape(const char *op, const gpt2_dims *d, int B, int T, char *err, size_t cap) {
    if (d == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "gpt2 %s: dims is NULL", op);
    }
    char why[256];
    if (gpt2_dims_check(d, why, sizeof(why)) != 0) {
        return ex_error(err, cap, NN_ERR_ARG, "gpt2 %s: %s", op, why);
    }
    if (B < 1 || T < 1 || T > d->block_size) {
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 %s: B = %d and T = %d; need B >= 1 and 1 <= T <= block_size "
                           "(%d)",
                           op, B, T, d->block_size);
    }
    // Rows are GEMM sizes (int); offsets into [BT][4C] are int64. The head's
    // chunks are at most BT rows, so this bounds them too.
    const long long BT = (long long)B * T;
    if (BT > INT_MAX / 4) {
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 %s: B * T = %lld rows is too many for one call; split the "
                           "batch",
                           op, BT);
    }
    return NN_OK;
}

int gpt2__check_ptr(const char *op, const char *what, const void *p, char *err, size_t cap) {
    if (p == NULL) {
        return ex_error(err, cap, NN_ERR_ARG, "gpt2 %s: %s is NULL", op, what);
    }
    return NN_OK;
}

int gpt2__check_embed_w(const char *op, const char *what, const gpt2_embed_w *w, char *err,
                        size_t cap) {
    if (w == NULL || w->wte == NULL || w->wpe == NULL || w->lnfw == NULL || w->lnfb == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 %s: %s (unit 0: wte, wpe, lnfw, lnfb) is NULL or has a NULL "
                           "tensor",
                           op, what);
    }
    return NN_OK;
}

int gpt2__check_block_w(const char *op, const char *what, const gpt2_block_w *w, char *err,
                        size_t cap) {
    if (w == NULL || w->ln1w == NULL || w->ln1b == NULL || w->qkvw == NULL || w->qkvb == NULL ||
        w->attprojw == NULL || w->attprojb == NULL || w->ln2w == NULL || w->ln2b == NULL ||
        w->fcw == NULL || w->fcb == NULL || w->fcprojw == NULL || w->fcprojb == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 %s: %s (a block's 12 tensors) is NULL or has a NULL tensor", op,
                           what);
    }
    return NN_OK;
}

int gpt2__check_acts(const char *op, const gpt2_block_acts *a, char *err, size_t cap) {
    if (a == NULL || a->ln1 == NULL || a->ln1_mean == NULL || a->ln1_rstd == NULL ||
        a->qkv == NULL || a->att == NULL || a->atty == NULL || a->res1 == NULL ||
        a->ln2 == NULL || a->ln2_mean == NULL || a->ln2_rstd == NULL || a->fch == NULL ||
        a->fch_gelu == NULL) {
        return ex_error(err, cap, NN_ERR_ARG,
                           "gpt2 %s: acts is NULL or has a NULL tensor (carve it with "
                           "gpt2_block_acts_carve)",
                           op);
    }
    return NN_OK;
}
