#!/usr/bin/env bash
# QLoRA with llama_train (issue 43): LoRA on a base the runtime stores
# quantized (zero.frozen_storage = "nf4" or "int8"; each block's matrices in
# their unit, its norms in a unit of their own), imported in Hugging Face's
# layout (app.init_from), the untied test shape, every Linear adapted:
#   - stages 0-3 give bit-identical losses and adapters at np 3 (bf16, more
#     ranks than cores), NF4 and int8;
#   - 6 steps straight = 3 + checkpoint + resume + 3, bit for bit (NF4 with
#     double quantization, stage 3), the checkpoint recording the base;
#   - the first step's loss (the adapters' B is zero, so it is the base's)
#     moves off the bf16 base's by at most the first-order bound of the
#     quantization error: |L_q - L| <= 2 |g| |dW|, g the bf16 base's
#     gradient (its norm, the loss log's third column, over every
#     parameter), dW the quantized minus the original matrices (computed
#     here from the base's file by the rule of kernels/quantize.h), 2 the
#     slack for the second-order terms; and NF4 moves it more than int8;
#   - QLoRA's losses equal LoRA's on a base whose matrices were replaced by
#     their NF4 dequantization, bit for bit: the layers compute on exactly
#     the quantized values, each matrix in its place;
#   - with the matrices quantized a run without zero.max_live_units for
#     three units at once fails naming it.
# Usage: run_llama_qlora.sh MPIEXEC llama_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/../models/model_runs.sh"
export PYTHONPATH="$SRC/tests/models${PYTHONPATH:+:$PYTHONPATH}"

# The base: 3 steps of full training from the shape, exported in Hugging
# Face's layout.
llama_hf_base "$work/base"

lora="init_from = \"$work/base\"; lora_r = 3; lora_alpha = 6.0; lora_target_modules = \"all-linear\";"
for storage in nf4 int8; do
  q="frozen_storage = \"$storage\"; max_live_units = 3;"
  for stage in 0 1 2 3; do
    tag=$storage.s$stage
    model_config "$work/$tag.cfg" "$stage" bf16 "$lora" "$q"
    run 3 "$work/$tag.log" "$work/$tag.cfg" app.steps=3 app.batch_size=2 \
        "checkpoint.dir=$work/ckpt.$tag" checkpoint.every=3 "app.loss_log=$work/$tag.loss"
    "$ZSCKPT" export --peft "$work/$tag.peft" "$work/ckpt.$tag" > /dev/null ||
      fail "export --peft of $tag"
  done
  for stage in 1 2 3; do
    cmp -s "$work/$storage.s0.loss" "$work/$storage.s$stage.loss" ||
      { paste "$work/$storage.s0.loss" "$work/$storage.s$stage.loss"; fail "$storage: stage $stage losses differ from stage 0"; }
    cmp -s "$work/$storage.s0.peft/adapter_model.safetensors" \
        "$work/$storage.s$stage.peft/adapter_model.safetensors" ||
      fail "$storage: stage $stage adapters are not bit-identical to stage 0"
  done
  echo "np 3 bf16 $storage: stages 0-3 bit-identical"
done

# Resume: np 2, stage 3, NF4 with its scales double-quantized (the base is
# recorded, and quantized from the same file on every start).
model_config "$work/res.cfg" 3 bf16 "$lora" \
    "frozen_storage = \"nf4\"; frozen_double_quant = true; max_live_units = 3;"
check_resume "$work/res.cfg"
echo "QLoRA (double-quantized): 6 steps straight = 3 + resume + 3, bit for bit"

# The first step against the bf16 base (np 2, stage 3): the base model's
# own loss and gradient norm, then LoRA on the quantized base.
model_config "$work/full.cfg" 3 bf16 "init_from = \"$work/base\";"
run 2 "$work/full.log" "$work/full.cfg" app.steps=1 app.batch_size=2 "app.loss_log=$work/full.loss"
for storage in nf4 int8; do
  model_config "$work/first.$storage.cfg" 3 bf16 "$lora" \
      "frozen_storage = \"$storage\"; max_live_units = 3;"
  run 2 "$work/first.$storage.log" "$work/first.$storage.cfg" app.steps=1 app.batch_size=2 \
      "app.loss_log=$work/first.$storage.loss"
done
python3 - "$work/base/model.safetensors" "$work/full.loss" "$work/first.nf4.loss" \
    "$work/first.int8.loss" <<'PY' || fail "the quantized base's loss against the bf16 base's"
import math, struct, sys
from st_read import tensors, floats
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]
def bf16(x):  # round to nearest even
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7fff + ((b >> 16) & 1)) & 0xffff0000
    return struct.unpack("<f", struct.pack("<I", b))[0]
def quantized(block, rule):
    amax = max(abs(v) for v in block)
    if amax == 0: return [0.0] * len(block)
    if rule == "int8":
        s = f32(amax / 127)
        return [f32(max(-127, min(127, round(v / s))) * s) for v in block]
    return [f32(min(NF4, key=lambda l: abs(v / amax - l)) * amax) for v in block]
ts, _ = tensors(sys.argv[1])
def err(rule):
    sq = 0.0
    for name, t in ts.items():
        if ".layers." not in name or len(t.shape) != 2: continue
        w = floats(t)
        for b in range(0, len(w), 64):
            block = w[b:b + 64]
            sq += sum((bf16(q) - bf16(v)) ** 2 for q, v in zip(quantized(block, rule), block))
    return math.sqrt(sq)
loss, gnorm = (float.fromhex(x) for x in open(sys.argv[2]).read().split()[1:3])
for path, rule in ((sys.argv[3], "nf4"), (sys.argv[4], "int8")):
    lq = float.fromhex(open(path).read().split()[1])
    dw = err(rule)
    bound = 2 * gnorm * dw
    print(f"{rule}: loss {lq:.6f} against the bf16 base's {loss:.6f}: |diff| {abs(lq - loss):.2e} "
          f"<= 2 |g| |dW| = 2 x {gnorm:.4f} x {dw:.4f} = {bound:.2e}")
    assert abs(lq - loss) <= bound, rule
    if rule == "nf4": nf4_diff, nf4_dw = abs(lq - loss), dw
    else: assert nf4_dw > dw and nf4_diff > abs(lq - loss), "int8 moved the loss as much as NF4"
    assert lq != loss, f"{rule} changed nothing"
PY

# The layers compute on exactly the quantized values: LoRA on a base whose
# matrices were replaced by their NF4 dequantization (here, by the rule of
# kernels/quantize.h in float32: n = x * (1 / amax), the index the number of
# midpoints n exceeds, level * amax), stored in the compute dtype, gives
# QLoRA's losses bit for bit (np 2, stage 3).
mkdir -p "$work/base.nf4"
cp "$work/base/config.json" "$work/base.nf4/"
python3 - "$work/base/model.safetensors" "$work/base.nf4/model.safetensors" <<'PY' || fail "writing the NF4-dequantized base"
import json, struct, sys
L = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
     -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
     0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
     0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
# The midpoints as the kernel's float literals (bits: four of them differ
# from rounding the double midpoint).
MID = [0xbf591cd9, 0xbf1c5270, 0xbeeb8480, 0xbeadea76, 0xbe703cec, 0xbe0d38bc, 0xbd3a7871,
       0x3d22faff, 0x3df64863, 0x3e5067e0, 0x3e9582d4, 0x3ec753f9, 0x3f006d03, 0x3f248daf,
       0x3f5c89d9]
def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]
L = [f32(v) for v in L]
MID = [struct.unpack("<f", struct.pack("<I", b))[0] for b in MID]
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
for name, t in head.items():
    if name == "__metadata__" or ".layers." not in name or len(t["shape"]) != 2: continue
    assert t["dtype"] == "F32", t["dtype"]
    a, b = (8 + n + o for o in t["data_offsets"])
    w = list(struct.unpack(f"<{(b - a) // 4}f", data[a:b]))
    for s in range(0, len(w), 64):
        block = w[s:s + 64]
        amax = max(abs(v) for v in block)
        if amax == 0: continue
        inv = f32(1.0 / amax)
        w[s:s + 64] = [f32(L[sum(f32(v * inv) > m for m in MID)] * amax) for v in block]
    data[a:b] = struct.pack(f"<{len(w)}f", *w)
open(sys.argv[2], "wb").write(bytes(data))
PY
for which in q plain; do
  if [ $which = q ]; then base="$work/base" zero="frozen_storage = \"nf4\"; max_live_units = 3;"
  else base="$work/base.nf4" zero=""; fi
  model_config "$work/eq.$which.cfg" 3 bf16 \
      "init_from = \"$base\"; lora_r = 3; lora_alpha = 6.0; lora_target_modules = \"all-linear\";" "$zero"
  run 2 "$work/eq.$which.log" "$work/eq.$which.cfg" app.steps=3 app.batch_size=2 \
      "app.loss_log=$work/eq.$which.loss"
done
cmp -s "$work/eq.q.loss" "$work/eq.plain.loss" ||
  { paste "$work/eq.q.loss" "$work/eq.plain.loss"; fail "QLoRA's losses differ from LoRA's on the NF4-dequantized base"; }
echo "QLoRA = LoRA on the NF4-dequantized base, bit for bit"

# Three units at once per block (matrices, norms, adapters): with the
# default zero.max_live_units = 2 the fetch fails naming the setting.
model_config "$work/live.cfg" 3 bf16 "$lora" "frozen_storage = \"nf4\";"
if "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$TRAIN" "$work/live.cfg" app.steps=1 \
     app.batch_size=2 > "$work/live.log" 2>&1; then
  fail "three live units ran with zero.max_live_units = 2"
fi
grep -q "max_live_units" "$work/live.log" || { cat "$work/live.log"; fail "the refusal does not name zero.max_live_units"; }
echo "QLoRA: passed"
