#!/usr/bin/env bash
# LoRA fine-tuning with gpt2_train (issue 42) on a shape that divides
# nothing evenly (3 layers, 3 heads of 14, 42 channels) at np 3, more ranks
# than cores, every Linear adapted at rank 3:
#   - stages 0-3 give bit-identical losses and parameters (bf16), with
#     dropout 0.2 on the adapters' input; resume (below) with dropout 0.1;
#   - training starts from the base exactly: the first step's loss is the
#     full model's, bit for bit (B = 0);
#   - the base is frozen: the embeddings, norms, biases and the tied head
#     after 40 steps equal the initial ones bit for bit (fp32), every
#     adapter's B moved off zero, and the loss falls on a repeated sentence;
#   - 6 steps straight = 3 + checkpoint + resume + 3, bit for bit;
#   - "c_proj" adapts attn.c_proj and mlp.c_proj of every block and nothing
#     else, and zs-ckpt export --peft names them as PEFT does;
#   - on an llm.c model file (app.init_from) the file is the frozen base
#     and the adapters keep their initialization;
#   - an unknown target module is refused, listing the Linears, and a
#     quantized base (zero.frozen_storage = "nf4") naming the key.
# Usage: run_gpt2_lora.sh MPIEXEC gpt2_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/e2e_common.sh"
# st_read.py: safetensors with the standard library.
export PYTHONPATH="$SRC/tests/models${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

ODD="n_layer = 3; n_head = 3; n_embd = 42; vocab = 256; block_size = 24;"
lora="$ODD lora_r = 3; lora_alpha = 6.0; lora_target_modules = \"all-linear\";"
# With dropout on the adapters' input (0.2; its scratch is [BT][4C],
# mlp.c_proj's input) the stages stay bit-identical.
check_stages lora.bf16 3 bf16 "$lora lora_dropout = 0.2;"
echo "np 3 bf16, dropout 0.2: stages 0-3 bit-identical with LoRA"

# B = 0: the first step's loss is the base model's.
model_config "$work/full.cfg" 3 fp32 "$ODD"
model_config "$work/lora.cfg" 3 fp32 "$lora"
same_first_loss 3 "$work/full.cfg" "$work/lora.cfg" "fp32"

# The initial base (a checkpoint before any step), then 40 steps on one
# sentence repeated, which the adapters alone can fit: the base unchanged
# bit for bit, every lora_B moved, the mean loss of the last five steps at
# least 0.15 nats below the first five's.
run 3 "$work/init.log" "$work/lora.cfg" app.steps=0 app.save_final=true \
    "checkpoint.dir=$work/ckpt.init"
export_ckpt "$work/ckpt.init" "$work/init.safetensors"
for i in $(seq 300); do echo "The runtime shards the model over every rank. "; done > "$work/one.txt"
run 3 "$work/learn.log" "$work/lora.cfg" app.steps=40 app.batch_size=4 optimizer.lr=1e-2 \
    "app.train_data=\"$work/one.txt\"" "app.loss_log=$work/learn.loss" \
    "checkpoint.dir=$work/ckpt.learn" checkpoint.every=40
export_ckpt "$work/ckpt.learn" "$work/learn.safetensors"
python3 - "$work/init.safetensors" "$work/learn.safetensors" "$work/learn.loss" <<'PY' ||
import sys
from st_read import tensors
(init, _), (tuned, _) = tensors(sys.argv[1]), tensors(sys.argv[2])
base = [k for k in init if ".lora_" not in k]
adapters = [k for k in tuned if ".lora_" in k]
assert len(base) == 4 + 3 * 12, f"{len(base)} base tensors, want 40"
assert len(adapters) == 3 * 4 * 2, f"{len(adapters)} adapter tensors, want 24"
for k in base:
    assert k in tuned and tuned[k].raw == init[k].raw, f"the frozen base tensor {k} changed"
moved = [k for k in adapters if k.endswith("lora_B.weight") and tuned[k].raw != init[k].raw]
assert len(moved) == 12, f"{len(moved)} of 12 lora_B moved: {moved}"
losses = [float.fromhex(line.split()[1]) for line in open(sys.argv[3])]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
assert last < first - 0.15, f"loss did not fall: first five {first}, last five {last}"
print(f"frozen base: {len(base)} tensors unchanged; 12 of 12 lora_B moved; mean loss of the "
      f"first five steps {first:.4f}, of the last five {last:.4f}")
PY
  fail "frozen base / adapters / loss"

# Resume with LoRA (np 2, stage 3, bf16).
model_config "$work/res.cfg" 3 bf16 "$lora lora_dropout = 0.1;"
check_resume "$work/res.cfg"
echo "LoRA: 6 steps straight = 3 + resume + 3, bit for bit"

# "c_proj" is both c_projs (PEFT's suffix rule): the adapters' names in
# the checkpoint and in PEFT's export say which Linears were adapted.
model_config "$work/cproj.cfg" 3 fp32 "$ODD lora_r = 3; lora_target_modules = \"c_proj\";"
run 3 "$work/cproj.log" "$work/cproj.cfg" app.steps=1 app.batch_size=2 \
    "checkpoint.dir=$work/ckpt.cproj" checkpoint.every=1
export_ckpt "$work/ckpt.cproj" "$work/cproj.safetensors"
"$ZSCKPT" export --peft "$work/peft" --dtype fp32 "$work/ckpt.cproj" > "$work/peft.log" 2>&1 ||
  { cat "$work/peft.log"; fail "export --peft"; }
python3 - "$work/cproj.safetensors" "$work/peft" <<'PY' || fail "c_proj targets"
import json, os, sys
from st_read import tensors
full, _ = tensors(sys.argv[1])
want = {f"transformer.h.{l}.{m}.lora_{w}.weight" for l in range(3)
        for m in ("attn.c_proj", "mlp.c_proj") for w in "AB"}
got = {k for k in full if ".lora_" in k}
assert got == want, f"adapters {sorted(got)}, want {sorted(want)}"
assert full["transformer.h.0.mlp.c_proj.lora_A.weight"].shape == [3, 168]
assert full["transformer.h.0.mlp.c_proj.lora_B.weight"].shape == [42, 3]
peft, _ = tensors(os.path.join(sys.argv[2], "adapter_model.safetensors"))
assert set(peft) == {"base_model.model." + k for k in want}, sorted(peft)
cfg = json.load(open(os.path.join(sys.argv[2], "adapter_config.json")))
assert sorted(cfg["target_modules"]) == ["attn.c_proj", "mlp.c_proj"], cfg
print(f"c_proj: {len(got)} adapter tensors, both c_projs of every block; export --peft names them")
PY

# LoRA on an llm.c model file (app.init_from; 1 layer, 8 channels, vocab
# 256, 16 positions, written here with the standard library: llm.c's
# 256-int header, then seeded normal floats): the file is the frozen base
# (every base tensor after a step at lr 1e-30 equals what the same file
# gives without LoRA, bit for bit) and the adapters keep PEFT's
# initialization (no A is zero: the file did not overwrite them).
python3 - "$work/base.bin" <<'PY' || fail "writing the llm.c file"
import random, struct, sys
L, NH, C, V, T = 1, 1, 8, 256, 16
floats = V * C + T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C
                              + 4 * C * C + C) + 2 * C
header = [20240326, 3, T, V, L, NH, C, V] + [0] * 248
rng = random.Random(7)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack(f"<{floats}f", *[rng.gauss(0.0, 0.1) for _ in range(floats)]))
PY
model_config "$work/llmc.cfg" 3 fp32 "init_from = \"$work/base.bin\"; lora_r = 3; lora_target_modules = \"all-linear\";"
for r in 0 3; do
  run 1 "$work/llmc.$r.log" "$work/llmc.cfg" app.steps=1 app.lora_r=$r app.batch_size=1 \
      optimizer.lr=1e-30 "checkpoint.dir=$work/ckpt.llmc.$r" checkpoint.every=1
  "$ZSCKPT" export "$work/ckpt.llmc.$r" "$work/llmc.$r.safetensors" > /dev/null || fail "export llmc.$r"
done
python3 - "$work/llmc.0.safetensors" "$work/llmc.3.safetensors" <<'PY' || fail "LoRA on an llm.c file"
import sys
from st_read import tensors
(full, _), (lora, _) = tensors(sys.argv[1]), tensors(sys.argv[2])
for k, v in full.items():
    assert k in lora and lora[k].raw == v.raw, f"base tensor {k} is not the file's"
a = [k for k in lora if k.endswith("lora_A.weight")]
assert len(a) == 4 and all(any(lora[k].raw) for k in a), "an adapter's A was overwritten"
print(f"llm.c base under LoRA: {len(full)} base tensors the file's, {len(a)} A kept")
PY

# Refusals, named: an unknown module.
model_config "$work/bad.cfg" 3 fp32 "lora_r = 3;"
if "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$TRAIN" "$work/bad.cfg" app.steps=1 \
     'app.lora_target_modules="c_attn,q_proj"' > "$work/bad.log" 2>&1; then
  fail "an unknown target module was accepted"
fi
want="not a Linear of this model; its Linears are c_attn, attn.c_proj, c_fc, mlp.c_proj"
grep -qF -- "$want" "$work/bad.log" || { cat "$work/bad.log"; fail "no \"$want\""; }
# ... and a quantized base (QLoRA), which GPT-2's layers do not dequantize.
if "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$TRAIN" "$work/bad.cfg" app.steps=1 \
     'zero.frozen_storage="nf4"' > "$work/nf4.log" 2>&1; then
  fail "GPT-2 ran on a quantized base"
fi
want="zero.frozen_storage: this model family's layers do not dequantize a quantized base"
grep -qF -- "$want" "$work/nf4.log" || { cat "$work/nf4.log"; fail "no \"$want\""; }
echo "refusals name the key"
echo "PASS"
