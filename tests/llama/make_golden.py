#!/usr/bin/env python3
"""Makes the golden fixture of tests/llama/test_llama_golden.c with Hugging
Face's own LlamaForCausalLM (PyTorch, CPU, float32):

    python3 tests/llama/make_golden.py [OUTDIR]      (default tests/llama/golden)

Run once where torch and transformers are installed (pip install torch
transformers); the outputs are committed, so the test needs neither.

Two tiny models, each grouped-query (4 query heads on 2 K/V heads) with
sizes that divide nothing evenly and a head_dim (6) that is not
hidden_size / num_attention_heads (20 / 4):
  untied       separate lm_head, no biases, default RoPE;
  tied_biases  lm_head tied to the embedding, attention_bias and mlp_bias
               (q/k/v/o and gate/up/down biases), llama3 RoPE scaling with a
               short original context so that its three bands all occur
               (wavelengths 6.3 kept, 135 smoothed, 2900 slowed), another
               rms_norm_eps.
Weights are drawn from numpy's PCG64 with a fixed seed (every matrix
normal(0, 0.15), norms 1 + normal(0, 0.2), biases normal(0, 0.2)), then a
fixed batch of tokens and targets. Saved per model under OUTDIR/<name>/:
  config.json            what save_pretrained writes (the C test parses it)
  weights.bin, grads.bin every parameter and the gradient of the mean
                         cross-entropy, float32 little-endian, in the order
                         of named_parameters (index.json gives each offset)
  tokens.bin, targets.bin  int32 [B*T]
  logits.bin             float32 [B*T][V], the model's logits
  losses.bin             float32 [B*T], per-position cross-entropy
  index.json             shapes, offsets, B, T, the mean loss, the versions
                         and the script that made them
"""
import json
import os
import platform
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

B, T = 2, 9
SHAPE = dict(vocab_size=37, hidden_size=20, intermediate_size=36, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=6,
             max_position_embeddings=128, initializer_range=0.02)
VARIANTS = {
    "untied": dict(tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                   rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, seed=1),
    "tied_biases": dict(tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                        rms_norm_eps=1e-6, rope_theta=10000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                      "low_freq_factor": 0.25, "high_freq_factor": 8.0,
                                      "original_max_position_embeddings": 64},
                        seed=2),
}


def make(outdir, name, spec):
    spec = dict(spec)
    seed = spec.pop("seed")
    config = LlamaConfig(**SHAPE, **spec)
    config._attn_implementation = "eager"  # the plain softmax(QK^T)V, in float32
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()  # eval: no dropout (there is none anyway)
    rng = np.random.default_rng(seed)
    names, shapes = [], []
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                v = 1.0 + 0.2 * rng.standard_normal(p.shape)
            elif pname.endswith(".bias"):
                v = 0.2 * rng.standard_normal(p.shape)
            else:
                v = 0.15 * rng.standard_normal(p.shape)
            p.copy_(torch.from_numpy(v.astype(np.float32)))
            names.append(pname)
            shapes.append(list(p.shape))
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        assert "lm_head.weight" not in names
    tokens = rng.integers(0, SHAPE["vocab_size"], size=(B, T)).astype(np.int64)
    tokens[0, 2] = tokens[1, 5] = 3  # a repeated token
    targets = rng.integers(0, SHAPE["vocab_size"], size=(B, T)).astype(np.int64)

    logits = model(input_ids=torch.from_numpy(tokens)).logits  # [B, T, V]
    losses = F.cross_entropy(logits.reshape(-1, SHAPE["vocab_size"]),
                             torch.from_numpy(targets).reshape(-1), reduction="none")
    loss = losses.mean()
    loss.backward()

    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    config.save_pretrained(d)
    params = dict(model.named_parameters())
    weights = np.concatenate([params[n].detach().numpy().reshape(-1) for n in names])
    grads = np.concatenate([params[n].grad.numpy().reshape(-1) for n in names])
    le = "<f4"
    weights.astype(le).tofile(os.path.join(d, "weights.bin"))
    grads.astype(le).tofile(os.path.join(d, "grads.bin"))
    tokens.astype("<i4").tofile(os.path.join(d, "tokens.bin"))
    targets.astype("<i4").tofile(os.path.join(d, "targets.bin"))
    logits.detach().numpy().astype(le).tofile(os.path.join(d, "logits.bin"))
    losses.detach().numpy().astype(le).tofile(os.path.join(d, "losses.bin"))
    tensors, off = [], 0
    for n, s in zip(names, shapes):
        numel = int(np.prod(s))
        tensors.append({"name": n, "shape": s, "offset": off, "numel": numel})
        off += numel
    index = {
        "made_by": "tests/llama/make_golden.py",
        "model": "transformers.LlamaForCausalLM, attn_implementation eager, float32, CPU",
        "loss": "mean over B*T positions of torch.nn.functional.cross_entropy(logits, targets)",
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "torch": torch.__version__, "transformers": transformers.__version__},
        "seed": seed,
        "B": B,
        "T": T,
        "mean_loss": float(loss.item()),
        "tensors": tensors,
    }
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print("%s: loss %.9f, %d tensors, %d parameters -> %s" % (name, loss.item(), len(names), off, d))


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
    torch.set_num_threads(1)  # the same sums on every machine this runs on
    for name, spec in VARIANTS.items():
        make(outdir, name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
