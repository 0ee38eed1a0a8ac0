#!/usr/bin/env bash
# llama_train on Hugging Face checkpoints as users bring them (issue 38,
# item 6), on the tied golden model (tests/llama/golden/tied_biases, written
# by golden_to_hf.py) and a stream of random token ids:
#   - an evaluation without training (app.steps = 0) prints the validation
#     loss with six decimals, equal to within 2e-6 to an independent float64
#     implementation's (llama_numpy_ref.py, where numpy is installed) over
#     the windows docs/LLAMA.md says are evaluated, and exits 0;
#   - a tied checkpoint that also carries lm_head.weight (a copy that even
#     differs from the embedding) is accepted as transformers accepts it:
#     the copy is skipped by name in the import's INFO line and the loss is
#     the one without it (the head is the embedding);
#   - a NaN in the weights ends an evaluation-only run and a training run
#     with exit status 1, saying which loss at which step;
#   - a tensor the model does not have is refused with advice naming
#     app.init_ignore, and that key skips it;
#   - app.init_from beside a checkpoint to resume: the run resumes, and
#     rank 0 warns that app.init_from is not used, naming it and the step.
# Usage: run_llama_hf_cases.sh MPIEXEC llama_train
set -u
MPIEXEC=$1 TRAIN=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/zs_llama_hf_cases.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
command -v python3 > /dev/null || { echo "SKIP: python3 is missing"; exit 77; }
failures=0 passes=0
pass() { echo "ok: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

golden=$here/golden/tied_biases
hf() { # OUT [golden_to_hf.py options]
  local out=$1
  shift
  python3 "$here/golden_to_hf.py" "$golden" "$work/$out" "$@" || { echo "FAIL: golden_to_hf.py $*"; exit 1; }
}
hf plain
hf copy --lm-head-copy 0.5
hf nan --nan model.layers.1.mlp.up_proj.weight
hf extra --extra model.layers.0.self_attn.extra.weight

# Token ids below the model's vocabulary of 37 as llm.c shards (magic
# 20240520, version 1, uint16 tokens): 3000 to train on, 300 held out.
python3 - "$work" <<'PY'
import random, struct, sys
rng = random.Random(38)
for name, count in (("tokens", 3000), ("val", 300)):
    tokens = [rng.randrange(37) for _ in range(count)]
    with open(f"{sys.argv[1]}/{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY

cat > "$work/c.cfg" <<CFG
zero: { stage = 3; };
optimizer: { type = "adamw"; lr = 1e-3; };
log: { level = "info"; };
comm: { timeout_s = 60; };
app: {
  seq_len = 8; batch_size = 2; train_data = "$work/tokens.bin"; val_data = "$work/val.bin";
  val_every = 0; val_batches = 2; sample_tokens = 0; log_every = 1; steps = 0;
};
CFG

# run NAME NP [overrides]: the exit status in $rc, the output in $work/NAME.log.
run() {
  local name=$1 np=$2
  shift 2
  # INFO from rank 0 (ctest sets ZS_LOG_LEVEL=warn): the import names what it skipped.
  ZS_LOG_LEVEL=info timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$np" \
      -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x ZS_LOG_LEVEL "$TRAIN" "$work/c.cfg" "$@" > "$work/$name.log" 2>&1
  rc=$?
}
show() { sed 's/^/    /' "$work/$1.log" | tail -n 15; }
val_loss() { sed -n 's/^validation after [0-9]* steps: loss \([0-9.]*\) .*/\1/p' "$work/$1.log"; }

# Evaluation only: six decimals, exit 0, and the loss of an independent
# implementation over the first val_batches x ranks x batch_size = 2 x 2 x 2
# windows of seq_len + 1 tokens of the validation stream (docs/LLAMA.md).
run eval 2 "app.init_from=\"$work/plain\""
loss=$(val_loss eval)
if [ "$rc" -eq 0 ] && [[ "$loss" =~ ^[0-9]+\.[0-9]{6}$ ]]; then
  pass "evaluation only (app.steps=0): validation loss $loss, exit 0"
else
  fail "evaluation only: exit $rc, loss '$loss' (expected six decimals)"; show eval
fi
reference=$(cd "$here" && python3 - "$work/plain" "$work/val.bin" 8 8 <<'PY'
import json, struct, sys
try:
    import numpy as np
except ImportError:
    sys.exit(0)  # no numpy: the comparison is skipped
import llama_numpy_ref as ref
model, val, T, windows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
raw = open(f"{model}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
params = {}
for name, t in json.loads(raw[8:8 + n]).items():
    if name != "__metadata__":
        b, e = t["data_offsets"]
        params[name] = np.frombuffer(raw[8 + n + b:8 + n + e], "<f4").astype(np.float64).reshape(t["shape"])
cfg = json.load(open(f"{model}/config.json"))
rope = cfg.pop("rope_parameters", None)  # transformers 5's name of rope_scaling
if rope:
    cfg["rope_theta"], cfg["rope_scaling"] = rope["rope_theta"], rope
tokens = np.frombuffer(open(val, "rb").read()[1024:], "<u2").astype(np.int64)
K = (len(tokens) - 1) // T
w = np.stack([tokens[(j % K) * T:(j % K) * T + T + 1] for j in range(windows)])
losses, _, _ = ref.run(cfg, params, w[:, :-1], w[:, 1:])
print(f"{losses.mean():.9f}")
PY
)
if [ -z "$reference" ]; then
  echo "skip: the comparison with llama_numpy_ref.py (python3 has no numpy)"
elif python3 -c "import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 2e-6)" \
     "$loss" "$reference"; then
  pass "evaluation only: $loss is llama_numpy_ref.py's $reference"
else
  fail "evaluation only: $loss, but llama_numpy_ref.py gives $reference over the same windows"
fi

# The tied checkpoint with an lm_head.weight copy: accepted, skipped by
# name, the loss that of the embedding as the head.
run copy 2 "app.init_from=\"$work/copy\""
copy_loss=$(val_loss copy)
if [ "$rc" -eq 0 ] && grep -q "tensors ignored: lm_head.weight" "$work/copy.log" &&
   [ -n "$copy_loss" ] && [ "$copy_loss" = "$loss" ]; then
  pass "tied with an lm_head.weight copy: accepted, the copy skipped, loss $copy_loss as without it"
else
  fail "tied with an lm_head.weight copy: exit $rc, loss '$copy_loss' (without the copy '$loss')"
  show copy
fi

# A NaN in the weights: the evaluation-only run and a training run fail.
run nan_eval 2 "app.init_from=\"$work/nan\""
if [ "$rc" -ne 0 ] &&
   grep -q "the validation loss after step 0 is NaN" "$work/nan_eval.log" &&
   ! grep -q "^validation after" "$work/nan_eval.log"; then
  pass "NaN weights, evaluation only: exit $rc, the validation loss named"
else
  fail "NaN weights, evaluation only: exit $rc"; show nan_eval
fi
run nan_train 1 "app.init_from=\"$work/nan\"" app.steps=3
if [ "$rc" -ne 0 ] && grep -q "the training loss of step 1 is NaN" "$work/nan_train.log" &&
   ! grep -q "^step *2/" "$work/nan_train.log"; then
  pass "NaN weights, training: exit $rc after step 1, the training loss named"
else
  fail "NaN weights, training: exit $rc"; show nan_train
fi

# A tensor the model does not have: the advice names app.init_ignore,
# which then skips it.
run extra 1 "app.init_from=\"$work/extra\""
if [ "$rc" -ne 0 ] && grep -q "app.init_ignore" "$work/extra.log" &&
   grep -q 'unexpected tensor "model.layers.0.self_attn.extra.weight"' "$work/extra.log"; then
  pass "an extra tensor: refused, naming it and app.init_ignore"
else
  fail "an extra tensor: exit $rc"; show extra
fi
run extra_ignored 2 "app.init_from=\"$work/extra\"" 'app.init_ignore="*.extra.weight, *.nothing"'
if [ "$rc" -eq 0 ] && [ "$(val_loss extra_ignored)" = "$loss" ]; then
  pass "an extra tensor skipped with app.init_ignore: the same loss"
else
  fail "app.init_ignore: exit $rc, loss '$(val_loss extra_ignored)'"; show extra_ignored
fi

# app.init_from beside a checkpoint: resume wins, loudly.
ckpt=$work/ckpt
run first 2 "app.init_from=\"$work/plain\"" app.steps=2 "checkpoint.dir=\"$ckpt\"" \
    checkpoint.every=2 'checkpoint.resume="auto"'
[ "$rc" -eq 0 ] || { fail "training 2 steps into $ckpt: exit $rc"; show first; }
run resumed 2 "app.init_from=\"$work/plain\"" app.steps=3 "checkpoint.dir=\"$ckpt\"" \
    checkpoint.every=2 'checkpoint.resume="auto"'
if [ "$rc" -eq 0 ] && grep -q "resumed at step 2" "$work/resumed.log" &&
   grep -q "WARN app.init_from = \"$work/plain\" is not used: this run resumed from the checkpoint of step 2" \
       "$work/resumed.log" &&
   [ "$(grep -c 'WARN app.init_from' "$work/resumed.log")" -eq 1 ]; then
  pass "app.init_from beside a checkpoint: resumed at step 2, one warning naming both"
else
  fail "app.init_from beside a checkpoint: exit $rc"; show resumed
fi

if [ "$failures" -ne 0 ]; then
  echo "$passes passed, $failures failed"
  exit 1
fi
echo "$passes passed, 0 failed"
