#!/usr/bin/env bash
# LoRA fine-tuning with llama_train (issue 42) on a base it imports in
# Hugging Face's layout (app.init_from), the untied test shape (grouped
# queries, sizes that divide nothing), every Linear adapted at rank 3:
#   - stages 0-3 give bit-identical losses and parameters at np 2 (fp32)
#     and np 3 (bf16, more ranks than cores);
#   - the base is frozen: every base tensor after training equals the
#     imported one bit for bit (fp32), the adapters' B moved off zero;
#   - the loss falls;
#   - 6 steps straight = 3 + checkpoint + resume + 3, bit for bit;
#   - the checkpoint records the base (path, hash) and copies none of it;
#     resuming on another base (one bit changed) is refused naming both,
#     on a copy of the same base accepted; an export reads the base back
#     and refuses it once it changed;
#   - zs-ckpt export --peft writes PEFT's adapter_model.safetensors (names,
#     shapes, the adapters' bytes) and adapter_config.json (r, alpha,
#     targets, the base's path); --hf --merge writes W + (alpha / r) B A bit
#     for bit; a plain --hf refuses adapters, naming --peft; a run
#     started from that directory (app.lora_init_from) holds the same
#     adapters bit for bit, and another rank's are refused naming the key;
#   - dropout on the adapters' input: stages 0-3 bitwise with it, resume
#     bitwise with it, the losses after the first step changed by it;
#   - bf16 on the CPU: the first step's loss (B = 0) is the base model's;
#   - an unknown target module and a dropout of 1 are refused, naming the key.
# Usage: run_llama_lora.sh MPIEXEC llama_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/../models/model_runs.sh"
# st_read.py: safetensors with the standard library.
export PYTHONPATH="$SRC/tests/models${PYTHONPATH:+:$PYTHONPATH}"

# The base: 3 steps of full training from the shape, exported as a
# Hugging Face directory (config.json + model.safetensors).
llama_hf_base "$work/base"
"$ZSCKPT" export "$work/ckpt.base" "$work/base.safetensors" > /dev/null || fail "export of the base"

lora="init_from = \"$work/base\"; lora_r = 3; lora_alpha = 6.0; lora_target_modules = \"all-linear\";"
check_stages lora.np2.fp32 2 fp32 "$lora"
echo "np 2 fp32: stages 0-3 bit-identical with LoRA"
# With dropout on the adapters' input (0.2): stages bitwise too (the mask
# is a function of the step, micro-step, rank, block, Linear and element),
# and the losses after the first step differ from the run without it (the
# first is the base's: B = 0).
check_stages lora.np3.bf16 3 bf16 "$lora lora_dropout = 0.2;"
echo "np 3 bf16, dropout 0.2: stages 0-3 bit-identical with LoRA"
model_config "$work/drop.cfg" 0 fp32 "$lora lora_dropout = 0.2;"
run 2 "$work/drop.log" "$work/drop.cfg" app.steps=3 app.batch_size=2 "app.loss_log=$work/drop.loss"
python3 - "$work/lora.np2.fp32.s0.loss" "$work/drop.loss" <<'PY' || fail "dropout"
import sys
plain, drop = ([line.split()[1] for line in open(p)] for p in sys.argv[1:])
assert plain[0] == drop[0], "the first step (B = 0) differs with dropout"
assert plain[1:] != drop[1:], "dropout 0.2 changed no loss"
print("dropout: the first step's loss the base's, the later ones changed")
PY

# bf16 on the CPU (fp32 views of the block's and its adapters' tensors,
# made at once): the first step's loss with LoRA (B = 0) is the base
# model's own, bit for bit (the adapters' views once overwrote the block's).
model_config "$work/b16.full.cfg" 3 bf16 "init_from = \"$work/base\";"
model_config "$work/b16.lora.cfg" 3 bf16 "$lora"
same_first_loss 2 "$work/b16.full.cfg" "$work/b16.lora.cfg" "bf16"

# Frozen base, moved adapters (fp32, stage 3's export: every base tensor's
# bytes against the imported base's; safetensors read by hand, standard
# library only), and learning: on one sentence repeated, which the adapters
# alone can fit, the mean loss of the last five of 20 steps is at least 0.5
# nats below the first five's.
for i in $(seq 300); do echo "The runtime shards the model over every rank. "; done > "$work/one.txt"
model_config "$work/learn.cfg" 3 fp32 "$lora"
run 2 "$work/learn.log" "$work/learn.cfg" app.steps=40 app.batch_size=4 optimizer.lr=1e-2 \
    "app.train_data=\"$work/one.txt\"" "app.loss_log=$work/learn.loss"
python3 - "$work/base.safetensors" "$work/lora.np2.fp32.s3.safetensors" \
    "$work/learn.loss" <<'PY' || fail "frozen base / adapters / loss"
import sys
from st_read import tensors
(base, _), (tuned, _) = tensors(sys.argv[1]), tensors(sys.argv[2])
adapters = [k for k in tuned if ".lora_" in k]
blocks = sum(1 for k in base if k.endswith("self_attn.q_proj.weight"))
assert len(adapters) == blocks * 7 * 2, f"{len(adapters)} adapter tensors, want {blocks * 14}"
for k, v in base.items():
    assert k in tuned and tuned[k].raw == v.raw, f"the frozen base tensor {k} changed"
moved = [k for k in adapters if k.endswith("lora_B.weight") and any(tuned[k].raw)]
assert len(moved) == blocks * 7, f"{len(moved)} of {blocks * 7} lora_B moved off zero"
losses = [float.fromhex(line.split()[1]) for line in open(sys.argv[3])]
assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.15, f"loss did not fall: {losses}"
print(f"frozen base: {len(base)} tensors unchanged; {len(moved)} adapters moved; mean loss "
      f"of the first five steps {sum(losses[:5]) / 5:.4f}, of the last five {sum(losses[-5:]) / 5:.4f}")
PY

# Resume with LoRA and dropout: np 2, stage 3, bf16.
model_config "$work/res.cfg" 3 bf16 "$lora lora_dropout = 0.1;"
check_resume "$work/res.cfg"
echo "LoRA: 6 steps straight = 3 + resume + 3, bit for bit"

# The checkpoint records the base instead of copying it: no frozen tensor
# in its shards, the manifest's frozen_base naming the imported files and
# their hash (the flat exports above read the base back from there).
python3 - "$work/split" "$work/base" <<'PY' || fail "the base is recorded, not copied"
import glob, json, os, sys
from st_read import tensors
step = sorted(glob.glob(os.path.join(sys.argv[1], "step_*")))[-1]
m = json.load(open(os.path.join(step, "manifest.json")))
base = m["frozen_base"]
assert base["path"] == os.path.realpath(sys.argv[2]), base
frozen = [p["name"] for p in m["params"] if p["flags"] & 2]  # ZS_PARAM_FROZEN
assert frozen and base["tensors"] == len(frozen), (base, len(frozen))
saved = set()
for f in glob.glob(os.path.join(step, "*.safetensors")):
    saved |= {k.split(":")[0] for k in tensors(f)[0]}
assert not saved & set(frozen), sorted(saved & set(frozen))[:3]
print(f"checkpoint: {len(frozen)} frozen tensors recorded as the base {base['path']} "
      f"(xxh3 {base['xxh3']}), none copied; {len(saved)} tensors saved")
PY
# Another base (the same shapes, one value changed) is refused on resume,
# naming both; the same base's unchanged copy elsewhere is accepted (the
# hash is the content's).
cp -r "$work/base" "$work/base2"
python3 - "$work/base2/model.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
begin = header["model.norm.weight"]["data_offsets"][0]
data[8 + n + begin] ^= 0x01
open(sys.argv[1], "wb").write(bytes(data))
PY
cp -r "$work/base" "$work/base.copy"
cp -r "$work/split" "$work/split.copy"
run 2 "$work/same.log" "$work/res.cfg" app.batch_size=2 app.steps=7 checkpoint.resume=auto \
    "app.init_from=\"$work/base.copy\"" "checkpoint.dir=$work/split.copy"
grep -q "resumed at step 6" "$work/same.log" || { cat "$work/same.log"; fail "no resume on the base's copy"; }
if "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$TRAIN" "$work/res.cfg" app.batch_size=2 \
     app.steps=7 checkpoint.resume=auto "app.init_from=\"$work/base2\"" "checkpoint.dir=$work/split" \
     > "$work/other.log" 2>&1; then
  fail "a checkpoint trained on $work/base resumed on another base"
fi
grep -q "was saved on the frozen base $(realpath "$work/base") (xxh3 .*), but this run's base is $(realpath "$work/base2") (xxh3 " "$work/other.log" ||
  { cat "$work/other.log"; fail "resuming on another base was not refused naming both"; }
echo "resume: the same base's copy accepted, another base refused naming both"
# The export reads the base back and refuses it once it changed.
cp "$work/base2/model.safetensors" "$work/base/model.safetensors.changed"
mv "$work/base/model.safetensors" "$work/base/model.safetensors.orig"
mv "$work/base/model.safetensors.changed" "$work/base/model.safetensors"
if "$ZSCKPT" export "$work/split" "$work/changed.safetensors" > "$work/changed.log" 2>&1; then
  fail "zs-ckpt export read a base that changed since the save"
fi
grep -q "the frozen base .* changed since the checkpoint was saved" "$work/changed.log" ||
  { cat "$work/changed.log"; fail "the changed base was not named"; }
mv "$work/base/model.safetensors.orig" "$work/base/model.safetensors"
echo "export: a base changed since the save is refused"

# The adapters as PEFT saves them: names, shapes and adapter_config.json
# (standard library only; PEFT itself is not installed on CI machines).
"$ZSCKPT" export --peft "$work/peft" --dtype fp32 "$work/ckpt.lora.np2.fp32.s3" > "$work/peft.log" 2>&1 ||
  { cat "$work/peft.log"; fail "export --peft"; }
python3 - "$work/peft" "$work/lora.np2.fp32.s3.safetensors" "$work/base" <<'PY' || fail "export --peft"
import json, os, sys
from st_read import tensors
head, meta = tensors(os.path.join(sys.argv[1], "adapter_model.safetensors"))
assert meta.get("format") == "pt", meta
full, _ = tensors(sys.argv[2])
cfg = json.load(open(os.path.join(sys.argv[1], "adapter_config.json")))
assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["r"] == 3 and cfg["lora_alpha"] == 6.0 and cfg["bias"] == "none", cfg
assert sorted(cfg["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj",
                                               "gate_proj", "up_proj", "down_proj"]), cfg
assert os.path.realpath(cfg["base_model_name_or_path"]) == os.path.realpath(sys.argv[3]), cfg
adapters = {k: v for k, v in full.items() if ".lora_" in k}
assert set(head) == {"base_model.model." + k for k in adapters}, sorted(head)[:4]
for k, v in adapters.items():
    h = head["base_model.model." + k]
    r = 3
    assert h.shape[0 if k.endswith("lora_A.weight") else 1] == r, (k, h.shape)
    assert h.shape == v.shape and h.dtype == "F32" and h.raw == v.raw, k
print(f"export --peft: {len(head)} adapter tensors under PEFT's names, adapter_config.json")
PY
# Back in: a run starting from that PEFT directory (app.lora_init_from)
# holds the very adapters (one step at lr 1e-30 moves no bit of them);
# adapters of another rank are refused, naming the key.
model_config "$work/back.cfg" 3 fp32 "$lora lora_init_from = \"$work/peft\";"
run 2 "$work/back.log" "$work/back.cfg" app.steps=1 app.batch_size=2 optimizer.lr=1e-30 \
    "checkpoint.dir=$work/ckpt.back" checkpoint.every=1
export_ckpt "$work/ckpt.back" "$work/back.safetensors"
python3 - "$work/back.safetensors" "$work/lora.np2.fp32.s3.safetensors" <<'PY' || fail "lora_init_from"
import sys
from st_read import tensors
(back, _), (trained, _) = tensors(sys.argv[1]), tensors(sys.argv[2])
adapters = [k for k in trained if ".lora_" in k]
for k in adapters:
    assert back[k].raw == trained[k].raw, f"{k} differs after the PEFT round trip"
print(f"lora_init_from: {len(adapters)} adapters back bit for bit")
PY
if "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$TRAIN" "$work/back.cfg" app.steps=1 \
     app.lora_r=4 > "$work/back.bad.log" 2>&1; then
  fail "adapters of rank 3 were accepted with app.lora_r = 4"
fi
grep -q "r = 3, but app.lora_r = 4" "$work/back.bad.log" ||
  { cat "$work/back.bad.log"; fail "the rank mismatch was not named"; }

# --hf --merge: the Hugging Face model with the adapters added into their
# Linears, W + (alpha / r) B A, bit for bit as computed here (double sums,
# one rounding), every other tensor the trained checkpoint's, no adapter.
"$ZSCKPT" export --hf "$work/merged" --merge --dtype fp32 "$work/ckpt.lora.np2.fp32.s3" \
    > "$work/merged.log" 2>&1 || { cat "$work/merged.log"; fail "export --hf --merge"; }
python3 - "$work/merged/model.safetensors" "$work/lora.np2.fp32.s3.safetensors" <<'PY' || fail "--merge"
import struct, sys
from st_read import floats, tensors
load = lambda path: {k: (t.shape, floats(t)) for k, t in tensors(path)[0].items()}
merged, trained = load(sys.argv[1]), load(sys.argv[2])
assert not [k for k in merged if ".lora_" in k], "adapters in the merged export"
assert set(merged) == {k for k in trained if ".lora_" not in k}, "tensors differ"
scale, checked = 6.0 / 3, 0
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
for k, (shape, w) in trained.items():
    if ".lora_" in k:
        continue
    module = k[:-len(".weight")]
    if module + ".lora_A.weight" not in trained:
        assert merged[k][1] == w, f"{k} changed without an adapter"
        continue
    (r, n_in), a = trained[module + ".lora_A.weight"]
    _, b = trained[module + ".lora_B.weight"]
    out = shape[0]
    want = [f32(w[o * n_in + i] + scale * sum(b[o * r + j] * a[j * n_in + i] for j in range(r)))
            for o in range(out) for i in range(n_in)]
    assert merged[k][1] == want, f"{k}: not W + (alpha / r) B A"
    checked += 1
print(f"export --hf --merge: {checked} Linears merged bit for bit, {len(merged)} tensors")
PY

# A plain --hf export of adapters is refused, pointing at --peft.
if "$ZSCKPT" export --hf "$work/hf.lora" "$work/ckpt.lora.np2.fp32.s3" > "$work/hf.lora.log" 2>&1; then
  fail "export --hf of a LoRA checkpoint was accepted"
fi
grep -q -- "--peft" "$work/hf.lora.log" || { cat "$work/hf.lora.log"; fail "export --hf did not point at --peft"; }

# Refusals, named.
model_config "$work/bad.cfg" 3 fp32 "$lora"
for bad in 'app.lora_target_modules="q_proj,wq"|not a Linear of this model; its Linears are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj' \
           'app.lora_dropout=1.0|app.lora_dropout = 1: a dropout probability lies in [0, 1)'; do
  set_key=${bad%%|*} want=${bad#*|}
  if "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$TRAIN" "$work/bad.cfg" app.steps=1 \
       "$set_key" > "$work/bad.log" 2>&1; then
    fail "$set_key was accepted"
  fi
  grep -qF -- "$want" "$work/bad.log" || { cat "$work/bad.log"; fail "$set_key: no \"$want\""; }
done
echo "refusals name the key"
echo "PASS"
