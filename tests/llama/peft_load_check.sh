#!/usr/bin/env bash
# The LoRA exports of llama_train loaded by the real libraries (issue 42),
# where PyTorch, transformers and peft are installed (CI machines lack them:
# exit 77, skipped, with the reason on one line):
#   - a tiny base (the untied test shape, 3 steps of full training, zs-ckpt
#     export --hf), LoRA trained on it for 4 steps (r 3, alpha 6,
#     all-linear, fp32, np 2), exported with --peft and with --hf --merge;
#   - transformers loads the base, peft.PeftModel.from_pretrained wraps it
#     with the --peft directory (every adapter tensor loaded, bit for bit);
#     on a fixed batch of byte tokens its logits agree with transformers on
#     the --hf --merge directory within 1e-5 relative, and differ from the
#     base's (the adapters moved);
#   - llama_train's evaluation of the trained checkpoint (app.steps=0 on
#     the resumed run) prints the validation loss over those very windows;
#     PEFT's cross-entropy on them agrees within 5e-6.
# Usage: peft_load_check.sh MPIEXEC llama_train zs-ckpt
# The python: $PEFT_PYTHON, else python3.
MPIEXEC=$1 TRAIN=$2 ZSCKPT=$3
PY=${PEFT_PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
if ! why=$("$PY" -c "import torch, transformers, peft" 2>&1); then
  echo "SKIP: $PY cannot import torch, transformers and peft ($(printf '%s\n' "$why" | tail -n 1))"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
source "$here/../models/model_runs.sh"

# The base: 3 steps of full training from the shape, in Hugging Face's layout.
llama_hf_base "$work/base"

# LoRA on it: 4 steps at a learning rate that moves the adapters well off
# zero, then the two exports.
lora="init_from = \"$work/base\"; lora_r = 3; lora_alpha = 6.0; lora_target_modules = \"all-linear\";"
model_config "$work/lora.cfg" 3 fp32 "$lora"
run 2 "$work/lora.log" "$work/lora.cfg" app.steps=4 app.batch_size=2 optimizer.lr=1e-2 \
    "checkpoint.dir=$work/ckpt.lora" checkpoint.every=4
"$ZSCKPT" export --peft "$work/peft" --dtype fp32 "$work/ckpt.lora" > "$work/peft.log" 2>&1 ||
  { cat "$work/peft.log"; fail "export --peft"; }
"$ZSCKPT" export --hf "$work/merged" --merge --dtype fp32 "$work/ckpt.lora" > "$work/merged.log" 2>&1 ||
  { cat "$work/merged.log"; fail "export --hf --merge"; }

# The fixed batch: the first ranks x batch_size = 2 x 2 windows of T + 1 =
# 17 bytes of a text (docs/LLAMA.md: window j holds bytes j T ... j T + T),
# evaluated by the trained checkpoint (resumed, app.steps=0).
printf '%s' "Every rank keeps a shard of the optimizer state; the adapters learn what the frozen base lacks." \
    > "$work/val.txt"
run 2 "$work/eval.log" "$work/lora.cfg" app.steps=0 app.batch_size=2 app.val_batches=1 \
    app.save_final=false checkpoint.resume=auto "checkpoint.dir=$work/ckpt.lora" \
    "app.val_data=\"$work/val.txt\""
grep -q "resumed at step 4" "$work/eval.log" || { cat "$work/eval.log"; fail "the evaluation did not resume step 4"; }
loss=$(sed -n 's/^validation after [0-9]* steps: loss \([0-9.]*\) .*/\1/p' "$work/eval.log")
[ -n "$loss" ] || { cat "$work/eval.log"; fail "no validation loss in the evaluation run"; }

"$PY" "$here/peft_load_check.py" --base "$work/base" --peft "$work/peft" --merged "$work/merged" \
    --tokens "$work/val.txt" --seq-len 16 --windows 4 --trainer-loss "$loss" ||
  fail "PEFT and transformers on the exports"
echo "PASS"
