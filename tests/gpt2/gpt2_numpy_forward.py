#!/usr/bin/env python3
"""GPT-2's forward pass in numpy (float64), written from the paper's
definition independently of the C code, checked against what
tests/gpt2/gpt2_dump_tiny wrote: the per-position losses, their mean, and one
row of logits.

    gpt2_numpy_forward.py DIR

Tolerances. The C model computes in float32, this script in float64, so
they differ by float32 rounding accumulated through two blocks and the head.
Measured on this model: 1.2e-8 relative on the mean loss, 1.3e-7 on a
position's loss, 1.5e-7 of the largest logit. The bounds leave a factor of
about 40 for other BLAS kernels and compilers, and are far below what a
mistake gives: LayerNorm's epsilon at 1e-4 instead of 1e-5 moves the mean
loss by 1.4e-4 (70x the bound), a missing causal mask by 2e-2. (Changes too
small to move a loss, such as GELU's 0.044715 rounded to 0.0447, pass.)
    mean loss:      |c - numpy| <= 5e-7 * |numpy|
    each position:  |c - numpy| <= 5e-6 * |numpy|
    logits:         |c - numpy| <= 5e-6 * max |logits|
"""
import os
import sys

import numpy as np

MEAN_RTOL = 5e-7
POS_RTOL = 5e-6
LOGIT_RTOL = 5e-6


def load(path, dtype):
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased, as PyTorch
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(p, n_layer, n_head, tokens, targets):
    """Returns (per-position losses [B, T], logits [B, T, V])."""
    B, T = tokens.shape
    wte = p["transformer.wte.weight"]
    C = wte.shape[1]
    hs = C // n_head
    x = wte[tokens] + p["transformer.wpe.weight"][np.arange(T)][None, :, :]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for l in range(n_layer):
        pre = "transformer.h.%d." % l
        h = layernorm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = h @ p[pre + "attn.c_attn.weight"].T + p[pre + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        # [B, T, C] -> [B, NH, T, hs]
        q, k, v = (t.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        scores = np.where(causal, scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        att = np.exp(scores)
        att = att / att.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ p[pre + "attn.c_proj.weight"].T + p[pre + "attn.c_proj.bias"]
        h = layernorm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        f = gelu_tanh(h @ p[pre + "mlp.c_fc.weight"].T + p[pre + "mlp.c_fc.bias"])
        x = x + f @ p[pre + "mlp.c_proj.weight"].T + p[pre + "mlp.c_proj.bias"]
    x = layernorm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    logits = x @ wte.T  # tied output projection
    zmax = logits.max(axis=-1, keepdims=True)
    lse = zmax[..., 0] + np.log(np.exp(logits - zmax).sum(axis=-1))
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return lse - picked, logits


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    n_layer, n_head, n_embd, vocab, block_size, B, T = (
        int(v) for v in open(os.path.join(d, "dims.txt")).read().split())
    flat = load(os.path.join(d, "params.bin"), np.float32).astype(np.float64)
    params = {}
    for line in open(os.path.join(d, "manifest.txt")):
        name, ndim, d0, d1, offset, numel = line.split()
        d0, d1, offset, numel = int(d0), int(d1), int(offset), int(numel)
        shape = (d0,) if ndim == "1" else (d0, d1)
        params[name] = flat[offset:offset + numel].reshape(shape)
    expected = 4 + 12 * n_layer
    if len(params) != expected:
        print("FAIL: manifest has %d tensors, expected %d" % (len(params), expected))
        return 1
    if params["transformer.wte.weight"].shape != (vocab, n_embd) or \
            params["transformer.wpe.weight"].shape != (block_size, n_embd):
        print("FAIL: embedding shapes %s, %s" % (params["transformer.wte.weight"].shape,
                                                 params["transformer.wpe.weight"].shape))
        return 1
    tokens = load(os.path.join(d, "tokens.bin"), np.int32).reshape(B, T)
    targets = load(os.path.join(d, "targets.bin"), np.int32).reshape(B, T)
    c_losses = load(os.path.join(d, "losses.bin"), np.float32).astype(np.float64).reshape(B, T)
    c_mean = float(open(os.path.join(d, "loss.txt")).read())
    c_logits = load(os.path.join(d, "logits.bin"), np.float32).astype(np.float64)

    losses, logits = forward(params, n_layer, n_head, tokens, targets)
    ok = True
    mean = losses.mean()
    err = abs(c_mean - mean)
    print("mean loss: C %.9f, numpy %.9f, |diff| %.3g (bound %.3g)"
          % (c_mean, mean, err, MEAN_RTOL * abs(mean)))
    if not err <= MEAN_RTOL * abs(mean):
        print("FAIL: mean loss")
        ok = False
    pos_err = np.abs(c_losses - losses)
    worst = np.unravel_index(np.argmax(pos_err), pos_err.shape)
    print("per-position loss: worst |diff| %.3g at %s (C %.9f, numpy %.9f)"
          % (pos_err[worst], worst, c_losses[worst], losses[worst]))
    if not np.all(pos_err <= POS_RTOL * np.abs(losses)):
        print("FAIL: per-position losses")
        ok = False
    last = logits[B - 1, T - 1]
    logit_err = np.abs(c_logits - last)
    scale = np.abs(last).max()
    print("logits of the last row: worst |diff| %.3g (bound %.3g)"
          % (logit_err.max(), LOGIT_RTOL * scale))
    if not logit_err.max() <= LOGIT_RTOL * scale:
        i = int(np.argmax(logit_err))
        print("FAIL: logits[%d]: C %.9f, numpy %.9f" % (i, c_logits[i], last[i]))
        ok = False
    print("gpt2_numpy_forward: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
