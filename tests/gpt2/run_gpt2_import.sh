#!/usr/bin/env bash
# Pretrained weights from an llm.c model file: numpy writes a tiny GPT-2 in
# llm.c's format (write_llmc_gpt2.py, independent of our reader); gpt2_train
# imports it at np 2, stage 3 (each rank reading only what it owns), saves
# without training, and the export of that checkpoint must hold exactly the
# numpy values under nanoGPT's names and shapes. Skipped (77) without numpy.
# Usage: run_gpt2_import.sh MPIEXEC gpt2_train zs-ckpt
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
source "$(dirname "$0")/e2e_common.sh"
if ! reason=$(python3 -c "import numpy" 2>&1); then
  echo "SKIP: python3 cannot import numpy (${reason##*$'\n'})"
  exit 77
fi
python3 "$SRC/tests/gpt2/write_llmc_gpt2.py" --layers 2 --heads 2 --channels 32 --vocab 256 \
  --padded-vocab 320 --max-seq-len 16 --seed 7 --model "$work/model.bin" --npz "$work/expected.npz" ||
  fail "write_llmc_gpt2.py"
for stage in 0 3; do
  tiny_config "$work/i.cfg" "$stage" fp32 ""
  run 2 "$work/import.$stage.log" "$work/i.cfg" "app.init_from=$work/model.bin" app.steps=0 \
      app.save_final=true "checkpoint.dir=$work/ckpt.$stage"
  export_ckpt "$work/ckpt.$stage" "$work/imported.$stage.safetensors"
  python3 - "$work/imported.$stage.safetensors" "$work/expected.npz" <<'PY' || fail "stage $stage: imported values differ"
import json, struct, sys
import numpy as np
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
expected = np.load(sys.argv[2])
names = [k for k in header if k != "__metadata__"]
assert sorted(names) == sorted(expected.files), sorted(set(names) ^ set(expected.files))
for name in names:
    info = header[name]
    b, e = info["data_offsets"]
    got = np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"])
    want = expected[name]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)), name
print(f"{len(names)} tensors imported bit for bit under nanoGPT's names and shapes")
PY
done
echo "1 passed, 0 failed"
