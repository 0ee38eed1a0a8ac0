#!/usr/bin/env python3
"""A Llama-family decoder in numpy (float64), forward and backward written
out by hand from the definitions (Hugging Face's LlamaForCausalLM:
RMSNorm, rotary embeddings rotating channel i with channel i + hd/2,
grouped-query causal attention, SwiGLU, optional biases, tied or untied
head), independently of the C code, and checked against what
tests/llama/llama_dump_tiny wrote for each variant directory:

    llama_numpy_ref.py DIR [DIR ...]

For each: the mean loss, every position's loss, every logit, and the
gradient of every parameter of the mean loss. A directory with lora.json
(r, lora_alpha) is LoRA on a frozen base: each adapted Linear adds PEFT's
scale (x A^T) B^T (scale = lora_alpha / r; A [r][in], B [out][r]); the
gradients checked are those of every A and B, and every base tensor's must
be absent (NaN, as the dump filled it).

Tolerances. C computes in float32, this script in float64. For each tensor
the error is max |c - numpy| / max |numpy| (the tensor's scale, so that
elements near zero do not dominate), and must stay below 1e-5; the loss and
the losses below 1e-5 relative. Measured on these models: about 1e-7 on
losses and logits and below 1e-6 on gradients; a mistake is far above
(a RoPE sign flipped: 1e-1; rms_norm_eps ten times larger: 1e-4; LoRA's
scale taken as alpha instead of alpha / r: about 1 on logits, dA and dB).
"""
import json
import math
import os
import sys

import numpy as np

RTOL = 1e-5


def load(path, dtype):
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))


def read_model(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    params = load(os.path.join(d, "params.bin"), np.float32).astype(np.float64)
    grads = load(os.path.join(d, "grads.bin"), np.float32).astype(np.float64)
    p, g, order = {}, {}, []
    for line in open(os.path.join(d, "manifest.txt")):
        name, ndim, d0, d1, off, numel = line.split()
        shape = (int(d0),) if int(ndim) == 1 else (int(d0), int(d1))
        off, numel = int(off), int(numel)
        p[name] = params[off:off + numel].reshape(shape)
        g[name] = grads[off:off + numel].reshape(shape)
        order.append(name)
    return cfg, p, g, order


def inv_freq(cfg, hd):
    """Rotary frequencies, in float64: theta^(-2i/hd), scaled as Llama 3.1
    defines it when rope_scaling is llama3."""
    theta = cfg.get("rope_theta", 10000.0)
    f = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        smooth = (old / wavelen - lo) / (hi - lo)
        out = np.where(wavelen > old / lo, f / factor, f)
        mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        f = np.where(mid, (1 - smooth) * f / factor + smooth * f, out)
    return f


def rope(x, cos, sin):
    """x: [B, T, H, hd]; rotate channel i with channel i + hd/2 by position t's angles."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def rope_back(d, cos, sin):
    """The transpose of the rotation applied to a gradient."""
    h = d.shape[-1] // 2
    a, b = d[..., :h], d[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return np.concatenate([a * c + b * s, b * c - a * s], axis=-1)


def rmsnorm(x, w, eps):
    r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    return w * (x * r), r


def rmsnorm_back(dout, x, w, r):
    """Gradients of out = w * x * r with r = (mean(x^2) + eps)^-1/2."""
    xhat = x * r
    dw = (dout * xhat).reshape(-1, x.shape[-1]).sum(axis=0)
    g = dout * w
    dx = r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dw


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def linear(x, p, name, scale):
    """x W^T (+ b), plus LoRA's scale (x A^T) B^T where the Linear has an
    adapter (PEFT's update, scale = lora_alpha / r)."""
    y = x @ p[name + ".weight"].T
    if name + ".bias" in p:
        y = y + p[name + ".bias"]
    if name + ".lora_A.weight" in p:
        y = y + scale * (x @ p[name + ".lora_A.weight"].T) @ p[name + ".lora_B.weight"].T
    return y


def linear_back(dy, x, p, name, grads, scale):
    """Adds the weight's (and bias's, and an adapter's A and B) gradient;
    returns the input's. With y += scale t B^T, t = x A^T: dB = scale dy^T t,
    dt = scale dy B, dA = dt^T x, dx += dt A."""
    dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    grads[name + ".weight"] = dy2.T @ x2
    if name + ".bias" in p:
        grads[name + ".bias"] = dy2.sum(axis=0)
    dx = dy @ p[name + ".weight"]
    if name + ".lora_A.weight" in p:
        A, Bm = p[name + ".lora_A.weight"], p[name + ".lora_B.weight"]
        t = x2 @ A.T
        dt = scale * dy2 @ Bm
        grads[name + ".lora_B.weight"] = scale * dy2.T @ t
        grads[name + ".lora_A.weight"] = dt.T @ x2
        dx = dx + (dt @ A).reshape(dx.shape)
    return dx


def run(cfg, p, tokens, targets, scale=0.0):
    """Forward and backward of the mean loss, with LoRA's adapters where p
    has them (scale = lora_alpha / r). Returns (losses [B, T], logits
    [B, T, V], gradients by name: every parameter's, the frozen base's too)."""
    B, T = tokens.shape
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads", NH)
    hd = cfg.get("head_dim", C // NH)
    G = NH // NKV
    eps = cfg["rms_norm_eps"]
    tied = cfg.get("tie_word_embeddings", False)
    f = inv_freq(cfg, hd)
    angles = np.arange(T, dtype=np.float64)[:, None] * f[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    causal = np.tril(np.ones((T, T), dtype=bool))
    wte = p["model.embed_tokens.weight"]

    # ---- forward, keeping what the backward needs
    x = wte[tokens]
    saved = []
    for l in range(L):
        pre = "model.layers.%d." % l
        xn1, r1 = rmsnorm(x, p[pre + "input_layernorm.weight"], eps)
        q = linear(xn1, p, pre + "self_attn.q_proj", scale).reshape(B, T, NH, hd)
        k = linear(xn1, p, pre + "self_attn.k_proj", scale).reshape(B, T, NKV, hd)
        v = linear(xn1, p, pre + "self_attn.v_proj", scale).reshape(B, T, NKV, hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # Query head h attends with K/V head h // G.
        kh = np.repeat(k, G, axis=2).transpose(0, 2, 1, 3)  # [B, NH, T, hd]
        vh = np.repeat(v, G, axis=2).transpose(0, 2, 1, 3)
        qh = q.transpose(0, 2, 1, 3)
        s = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(hd)
        s = np.where(causal, s, -np.inf)
        P = np.exp(s - s.max(axis=-1, keepdims=True))
        P = P / P.sum(axis=-1, keepdims=True)
        y = (P @ vh).transpose(0, 2, 1, 3).reshape(B, T, NH * hd)
        res1 = x + linear(y, p, pre + "self_attn.o_proj", scale)
        xn2, r2 = rmsnorm(res1, p[pre + "post_attention_layernorm.weight"], eps)
        gate = linear(xn2, p, pre + "mlp.gate_proj", scale)
        up = linear(xn2, p, pre + "mlp.up_proj", scale)
        h = gate * sigmoid(gate) * up
        out = res1 + linear(h, p, pre + "mlp.down_proj", scale)
        saved.append((x, xn1, r1, qh, kh, vh, P, y, res1, xn2, r2, gate, up, h))
        x = out
    xf, rf = rmsnorm(x, p["model.norm.weight"], eps)
    wout = wte if tied else p["lm_head.weight"]
    logits = xf @ wout.T
    zmax = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - zmax)
    lse = zmax[..., 0] + np.log(e.sum(axis=-1))
    losses = lse - np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]

    # ---- backward of the mean loss
    grads = {}
    dlogits = e / e.sum(axis=-1, keepdims=True)
    np.put_along_axis(dlogits, targets[..., None],
                      np.take_along_axis(dlogits, targets[..., None], axis=-1) - 1.0, axis=-1)
    dlogits /= B * T
    dwout = dlogits.reshape(-1, dlogits.shape[-1]).T @ xf.reshape(-1, C)
    dxf = dlogits @ wout
    dx, grads["model.norm.weight"] = rmsnorm_back(dxf, x, p["model.norm.weight"], rf)
    for l in reversed(range(L)):
        pre = "model.layers.%d." % l
        xin, xn1, r1, qh, kh, vh, P, y, res1, xn2, r2, gate, up, h = saved[l]
        # MLP
        dres1 = dx.copy()
        dh = linear_back(dx, h, p, pre + "mlp.down_proj", grads, scale)
        sg = sigmoid(gate)
        dup = dh * gate * sg
        dgate = dh * up * sg * (1 + gate * (1 - sg))
        dxn2 = linear_back(dgate, xn2, p, pre + "mlp.gate_proj", grads, scale)
        dxn2 = dxn2 + linear_back(dup, xn2, p, pre + "mlp.up_proj", grads, scale)
        d, grads[pre + "post_attention_layernorm.weight"] = rmsnorm_back(
            dxn2, res1, p[pre + "post_attention_layernorm.weight"], r2)
        dres1 = dres1 + d
        # attention
        dxin = dres1.copy()
        dy = linear_back(dres1, y, p, pre + "self_attn.o_proj", grads, scale)
        dyh = dy.reshape(B, T, NH, hd).transpose(0, 2, 1, 3)
        dvh = P.transpose(0, 1, 3, 2) @ dyh
        dP = dyh @ vh.transpose(0, 1, 3, 2)
        ds = P * (dP - (P * dP).sum(axis=-1, keepdims=True)) / math.sqrt(hd)
        dqh = ds @ kh
        dkh = ds.transpose(0, 1, 3, 2) @ qh
        # A K/V head's gradient: the sum over its group of query heads.
        dk = dkh.reshape(B, NKV, G, T, hd).sum(axis=2).transpose(0, 2, 1, 3)
        dv = dvh.reshape(B, NKV, G, T, hd).sum(axis=2).transpose(0, 2, 1, 3)
        dq = dqh.transpose(0, 2, 1, 3)
        dq, dk = rope_back(dq, cos, sin), rope_back(dk, cos, sin)
        dxn1 = linear_back(dq.reshape(B, T, NH * hd), xn1, p, pre + "self_attn.q_proj",
                           grads, scale)
        dxn1 = dxn1 + linear_back(dk.reshape(B, T, NKV * hd), xn1, p, pre + "self_attn.k_proj",
                                  grads, scale)
        dxn1 = dxn1 + linear_back(dv.reshape(B, T, NKV * hd), xn1, p, pre + "self_attn.v_proj",
                                  grads, scale)
        d, grads[pre + "input_layernorm.weight"] = rmsnorm_back(
            dxn1, xin, p[pre + "input_layernorm.weight"], r1)
        dx = dxin + d
    dwte = np.zeros_like(wte)
    np.add.at(dwte, tokens.reshape(-1), dx.reshape(-1, C))
    if tied:
        dwte += dwout
    else:
        grads["lm_head.weight"] = dwout
    grads["model.embed_tokens.weight"] = dwte
    return losses, logits, grads


def rel_err(c, ref):
    scale = np.abs(ref).max()
    return np.abs(c - ref).max() / (scale if scale > 0 else 1.0)


def check(d):
    cfg, p, g, order = read_model(d)
    B, T = (int(v) for v in open(os.path.join(d, "shape.txt")).read().split())
    tokens = load(os.path.join(d, "tokens.bin"), np.int32).reshape(B, T)
    targets = load(os.path.join(d, "targets.bin"), np.int32).reshape(B, T)
    c_losses = load(os.path.join(d, "losses.bin"), np.float32).astype(np.float64)
    c_logits = load(os.path.join(d, "logits.bin"), np.float32).astype(np.float64)
    c_loss = float(open(os.path.join(d, "loss.txt")).read())
    lora_path = os.path.join(d, "lora.json")
    lora = json.load(open(lora_path)) if os.path.exists(lora_path) else None
    scale = lora["lora_alpha"] / lora["r"] if lora else 0.0
    losses, logits, grads = run(cfg, p, tokens, targets, scale)
    failures = []
    name = os.path.basename(os.path.normpath(d))

    def expect(what, err):
        if not err <= RTOL:
            failures.append("%s: %s: error %.3g > %.0e" % (name, what, err, RTOL))
        return err

    expect("mean loss", abs(c_loss - losses.mean()) / abs(losses.mean()))
    expect("per-position losses", rel_err(c_losses, losses.reshape(-1)))
    expect("logits", rel_err(c_logits, logits.reshape(-1)))
    worst, worst_name = 0.0, ""
    assert sorted(grads) == sorted(order), (sorted(set(grads) ^ set(order)))
    adapters = [k for k in order if ".lora_" in k]
    if lora:
        # A frozen base has no gradient: its buffer, NaN before the step,
        # comes back NaN in every element.
        for k in order:
            if k not in adapters and not np.isnan(g[k]).all():
                failures.append("%s: the frozen %s got a gradient (%d of %d elements written)"
                                % (name, k, int((~np.isnan(g[k])).sum()), g[k].size))
        assert adapters, "lora.json but no adapter in the manifest"
    for k in (adapters if lora else order):
        e = expect("gradient of " + k, rel_err(g[k], grads[k]))
        if e >= worst:
            worst, worst_name = e, k
    print("%s: loss %.9f (numpy %.9f), %d gradients%s, worst %.2e (%s)"
          % (name, c_loss, losses.mean(), len(adapters) if lora else len(order),
             " (LoRA r %d alpha %g, the base frozen)" % (lora["r"], lora["lora_alpha"])
             if lora else "", worst, worst_name))
    return failures


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    failures = []
    for d in sys.argv[1:]:
        failures += check(d)
    for f in failures:
        print("FAIL:", f)
    print("%d passed, %d failed" % (len(sys.argv) - 1 - len({f.split(":")[0] for f in failures}),
                                    len({f.split(":")[0] for f in failures})))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
