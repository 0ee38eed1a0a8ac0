#!/usr/bin/env python3
"""Makes the LoRA golden fixture of tests/llama/test_llama_golden.c (its
--lora check) with PEFT on Hugging Face's own LlamaForCausalLM (PyTorch,
CPU, float32):

    python3 tests/llama/make_lora_golden.py [OUTDIR]   (default tests/llama/golden_lora)

Run once where torch, transformers and peft are installed (pip install
torch transformers peft safetensors numpy); the outputs are committed, so
the test needs none of them. The versions that made it are in index.json.

The base is the "untied" model of the golden fixture (tests/llama/golden/
untied, made by make_golden.py): its config.json, its weights placed by
name from weights.bin and its tokens and targets, read from the committed
files so that both fixtures hold one model. PEFT's get_peft_model adapts
q_proj, k_proj, o_proj, gate_proj and down_proj (not v_proj nor up_proj:
adapted and plain Linears side by side, MLP ones among both) with r = 3,
lora_alpha = 5 (scale 5/3, not 1) and no dropout; lora_A keeps PEFT's
initialisation (torch.manual_seed(0)) and lora_B, which PEFT starts at
zero, is set from numpy's PCG64 (normal(0, 0.3)) so that neither gradient is
trivial. One forward and backward of the mean cross-entropy on the fixed
batch; the base is frozen (PEFT's requires_grad False, checked: it gets no
gradient). Saved under OUTDIR:
  adapter_model.safetensors, adapter_config.json
                     the adapters exactly as PeftModel.save_pretrained
                     writes them (names base_model.model.model.layers.N.
                     self_attn.q_proj.lora_A.weight, A [r][in], B [out][r])
  grads.bin          the gradient of the mean loss of every lora_A and
                     lora_B, float32 little-endian (index.json: names as
                     in the safetensors, shapes, offsets)
  logits.bin         float32 [B*T][V]; losses.bin float32 [B*T]
  index.json         the base, B, T, the mean loss, r, alpha, the targets,
                     the versions and the script that made them
"""
import json
import os
import platform
import sys

import numpy as np
import peft
import safetensors
import torch
import torch.nn.functional as F
import transformers
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = "untied"
R, ALPHA = 3, 5
TARGETS = ["q_proj", "k_proj", "o_proj", "gate_proj", "down_proj"]
SEED = 7


def load_base(golden):
    """The golden model, its batch and its index from the committed files."""
    config = LlamaConfig.from_pretrained(golden)
    config._attn_implementation = "eager"  # the plain softmax(QK^T)V, in float32
    model = LlamaForCausalLM(config).float().eval()
    index = json.load(open(os.path.join(golden, "index.json")))
    weights = np.fromfile(os.path.join(golden, "weights.bin"), dtype="<f4")
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(t["name"] for t in index["tensors"])
    with torch.no_grad():
        for t in index["tensors"]:
            v = weights[t["offset"]:t["offset"] + t["numel"]].reshape(t["shape"])
            params[t["name"]].copy_(torch.from_numpy(v.copy()))
    shape = (index["B"], index["T"])
    tokens = np.fromfile(os.path.join(golden, "tokens.bin"), dtype="<i4").reshape(shape)
    targets = np.fromfile(os.path.join(golden, "targets.bin"), dtype="<i4").reshape(shape)
    return model, config, index, tokens.astype(np.int64), targets.astype(np.int64)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "golden_lora")
    torch.set_num_threads(1)  # the same sums on every machine this runs on
    model, config, base_index, tokens, targets = load_base(os.path.join(HERE, "golden", BASE))
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS,
                                             lora_dropout=0.0, bias="none"))
    rng = np.random.default_rng(SEED)
    lora = [(n, p) for n, p in model.named_parameters() if ".lora_" in n]
    with torch.no_grad():
        for n, p in lora:
            if ".lora_B." in n:
                p.copy_(torch.from_numpy((0.3 * rng.standard_normal(p.shape)).astype(np.float32)))
    assert all(p.requires_grad == (".lora_" in n) for n, p in model.named_parameters())

    V = config.vocab_size
    logits = model(input_ids=torch.from_numpy(tokens)).logits  # [B, T, V]
    losses = F.cross_entropy(logits.reshape(-1, V), torch.from_numpy(targets).reshape(-1),
                             reduction="none")
    loss = losses.mean()
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if ".lora_" not in n)

    os.makedirs(outdir, exist_ok=True)
    model.save_pretrained(outdir)
    readme = os.path.join(outdir, "README.md")  # a model card template, not data
    if os.path.exists(readme):
        os.remove(readme)
    le = "<f4"
    # PEFT's names in the file drop the adapter's name (".default").
    tensors, grads, off = [], [], 0
    for n, p in lora:
        name = n.replace(".default", "")
        tensors.append({"name": name, "shape": list(p.shape), "offset": off,
                        "numel": p.numel()})
        grads.append(p.grad.numpy().reshape(-1))
        off += p.numel()
    saved = safetensors.safe_open(os.path.join(outdir, "adapter_model.safetensors"), "np")
    assert sorted(saved.keys()) == sorted(t["name"] for t in tensors), sorted(saved.keys())
    np.concatenate(grads).astype(le).tofile(os.path.join(outdir, "grads.bin"))
    logits.detach().numpy().astype(le).tofile(os.path.join(outdir, "logits.bin"))
    losses.detach().numpy().astype(le).tofile(os.path.join(outdir, "losses.bin"))
    index = {
        "made_by": "tests/llama/make_lora_golden.py",
        "base": "tests/llama/golden/" + BASE,
        "model": "peft.get_peft_model(transformers.LlamaForCausalLM, LoraConfig), "
                 "attn_implementation eager, float32, CPU",
        "loss": "mean over B*T positions of torch.nn.functional.cross_entropy(logits, targets)",
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "torch": torch.__version__, "transformers": transformers.__version__,
                     "peft": peft.__version__, "safetensors": safetensors.__version__},
        "r": R,
        "lora_alpha": ALPHA,
        "target_modules": TARGETS,
        "seed": SEED,
        "B": base_index["B"],
        "T": base_index["T"],
        "mean_loss": float(loss.item()),
        "tensors": tensors,
    }
    with open(os.path.join(outdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print("loss %.9f (the base alone %.9f), %d adapter tensors, %d parameters -> %s"
          % (loss.item(), base_index["mean_loss"], len(tensors), off, outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
