"""The LoRA exports of llama_train in the real libraries (issue 42; run by
tests/llama/peft_load_check.sh, which makes the directories).

transformers loads the base (zs-ckpt export --hf) in float32 and
peft.PeftModel.from_pretrained wraps it with the adapters (zs-ckpt export
--peft); on a fixed batch of byte tokens its logits are compared with
  (a) transformers on the merged model (zs-ckpt export --hf --merge): within
      --tol relative (the largest difference over the largest logit);
  (b) the base alone: they must differ by more than --moved relative;
  (c) with --trainer-loss, the validation loss llama_train printed over the
      same windows: PEFT's mean cross-entropy within --loss-tol.
Also: every tensor of adapter_model.safetensors lands in the wrapped model,
bit for bit, and adapter_config.json's r, alpha and targets are PEFT's.
"""
import argparse
import json
import os
import sys

import peft
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file


def load(path):
    kw = {"dtype": torch.float32}
    if int(transformers.__version__.split(".")[0]) < 5:
        kw = {"torch_dtype": torch.float32}  # transformers 4's name of dtype
    model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    return model.eval()


def rel(a, b):
    """The largest difference over the largest magnitude of b."""
    return ((a - b).abs().max() / b.abs().max()).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True)
    p.add_argument("--peft", required=True)
    p.add_argument("--merged", required=True)
    p.add_argument("--tokens", required=True, help="a byte stream (text file)")
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--trainer-loss", type=float)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--moved", type=float, default=1e-3)
    p.add_argument("--loss-tol", type=float, default=5e-6)
    a = p.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    transformers.logging.disable_progress_bar()

    # Window j holds tokens j T ... j T + T, wrapping (docs/LLAMA.md).
    data = torch.tensor(list(open(a.tokens, "rb").read()), dtype=torch.long)
    T = a.seq_len
    K = (len(data) - 1) // T
    assert K >= 1, f"{a.tokens}: fewer than {T + 1} bytes"
    w = torch.stack([data[(j % K) * T:(j % K) * T + T + 1] for j in range(a.windows)])
    inputs, targets = w[:, :-1], w[:, 1:]

    cfg = json.load(open(os.path.join(a.peft, "adapter_config.json")))
    print(f"adapter_config.json: peft_type {cfg['peft_type']}, r {cfg['r']}, "
          f"lora_alpha {cfg['lora_alpha']}, target_modules {sorted(cfg['target_modules'])}")

    with torch.no_grad():
        base = load(a.base)
        base_logits = base(input_ids=inputs).logits
        model = peft.PeftModel.from_pretrained(base, a.peft).eval()
        lora_logits = model(input_ids=inputs).logits
        with model.disable_adapter():
            off_logits = model(input_ids=inputs).logits
        merged_logits = load(a.merged)(input_ids=inputs).logits

    # Every saved adapter is in the model, bit for bit; every LoRA Linear
    # of the model got one (none left at PEFT's initialization).
    saved = load_file(os.path.join(a.peft, "adapter_model.safetensors"))
    state = model.state_dict()
    for k, v in saved.items():
        name = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(
            ".lora_B.weight", ".lora_B.default.weight")
        assert name in state, f"{k}: no {name} in the PEFT model"
        assert torch.equal(state[name], v), f"{k}: loaded other values"
    in_model = [k for k in state if ".lora_" in k]
    assert len(in_model) == len(saved), f"{len(in_model)} adapter tensors in the model, {len(saved)} saved"
    scalings = {m.scaling["default"] for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)}
    assert scalings == {cfg["lora_alpha"] / cfg["r"]}, scalings
    print(f"peft: {len(saved)} adapter tensors loaded bit for bit, scaling {scalings.pop()}")

    d_merged, d_base = rel(lora_logits, merged_logits), rel(lora_logits, base_logits)
    d_off = rel(off_logits, base_logits)
    print(f"(a) PEFT on the base vs transformers on --hf --merge: max |diff| / max |logit| = "
          f"{d_merged:.3e}, max |diff| {(lora_logits - merged_logits).abs().max().item():.3e} "
          f"(logits {tuple(lora_logits.shape)}, max |logit| {merged_logits.abs().max().item():.3f})")
    print(f"(b) PEFT vs the base alone: max |diff| / max |logit| = {d_base:.3e}; "
          f"adapters disabled vs the base: {d_off:.3e}")
    ok = True
    if not d_merged <= a.tol:
        print(f"FAIL: (a) {d_merged:.3e} > {a.tol:g}")
        ok = False
    if not d_base > a.moved:
        print(f"FAIL: (b) the adapters change the logits by {d_base:.3e} <= {a.moved:g}")
        ok = False
    if d_off != 0.0:
        print(f"FAIL: with the adapters disabled the logits are not the base's ({d_off:.3e})")
        ok = False
    if a.trainer_loss is not None:
        ce = lambda logits: F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
        loss, base_loss = ce(lora_logits), ce(base_logits)
        print(f"(c) validation loss over the {a.windows} windows: llama_train {a.trainer_loss:.6f}, "
              f"PEFT {loss:.6f} (|diff| {abs(loss - a.trainer_loss):.2e}), merged {ce(merged_logits):.6f}, "
              f"the base alone {base_loss:.6f}")
        if not abs(loss - a.trainer_loss) <= a.loss_tol:
            print(f"FAIL: (c) |{loss:.7f} - {a.trainer_loss:.6f}| > {a.loss_tol:g}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
