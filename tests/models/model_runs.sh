# What every language model's end-to-end test does with its trainer
# (sourced, not run; tests/gpt2/e2e_common.sh and tests/llama's scripts).
# The caller sets MPIEXEC and TRAIN (and ZSCKPT where needed) first.
#
# Runs train on the project's own documentation (real English text that
# every checkout has), so these tests need no download.
set -u
work=$(mktemp -d /tmp/zs_model_e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
SRC=${SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cat "$SRC"/README.md "$SRC"/docs/*.md > "$work/corpus.txt"

fail() { echo "FAIL: $*"; exit 1; }

# run NP LOG args... — the trainer under mpirun; prints its log on failure.
run() {
  local np=$1 log=$2
  shift 2
  if ! "$MPIEXEC" --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 \
       -x OPENBLAS_NUM_THREADS=1 "$TRAIN" "$@" > "$log" 2>&1; then
    cat "$log"
    fail "$(basename "$TRAIN") $* exited nonzero"
  fi
}

# model_config FILE STAGE DTYPE MODEL [ZERO] — the runtime settings of the
# tiny runs; MODEL is the app group's model keys ("" when they come from a
# file given later), ZERO more keys of the zero group.
model_config() {
  cat > "$1" <<CFG
zero: { stage = $2; align = 16; ${5:-} };
precision: { dtype = "$3"; };
optimizer: { type = "adamw"; lr = 3e-3; weight_decay = 0.1; };
gradient_clipping = 1.0;
log: { level = "warn"; };
app: {
  $4 seq_len = 16;
  train_data = "$work/corpus.txt"; val_fraction = 0.1; val_every = 0; val_batches = 1;
  sample_tokens = 0; log_every = 1;
};
CFG
}

# export_ckpt DIR OUT — the checkpoint root's newest step as one fp32
# safetensors file.
export_ckpt() {
  "$ZSCKPT" export "$1" "$2" > /dev/null || fail "zs-ckpt export $1"
}

# check_stages TAG NP DTYPE MODEL — stages 0-3 at NP ranks give bit-identical
# losses, gradient norms and parameters after 3 steps (fp32 master weights,
# exported). Leaves $work/TAG.s<stage>.{cfg,loss,safetensors} behind.
check_stages() {
  local tag=$1 np=$2 dtype=$3 model=$4 stage
  for stage in 0 1 2 3; do
    model_config "$work/$tag.s$stage.cfg" "$stage" "$dtype" "$model"
    run "$np" "$work/$tag.s$stage.log" "$work/$tag.s$stage.cfg" app.steps=3 app.batch_size=2 \
        "checkpoint.dir=$work/ckpt.$tag.s$stage" checkpoint.every=3 \
        "app.loss_log=$work/$tag.s$stage.loss"
    export_ckpt "$work/ckpt.$tag.s$stage" "$work/$tag.s$stage.safetensors"
    [ "$(wc -l < "$work/$tag.s$stage.loss")" -eq 3 ] || fail "$tag stage $stage: expected 3 loss lines"
  done
  for stage in 1 2 3; do
    cmp -s "$work/$tag.s0.loss" "$work/$tag.s$stage.loss" ||
      { paste "$work/$tag.s0.loss" "$work/$tag.s$stage.loss"; fail "$tag: stage $stage losses differ from stage 0"; }
    cmp -s "$work/$tag.s0.safetensors" "$work/$tag.s$stage.safetensors" ||
      fail "$tag: stage $stage parameters are not bit-identical to stage 0"
  done
}

# check_resume CONFIG — 6 steps straight give the same losses and parameters,
# bit for bit, as 3 steps + checkpoint + a new job resuming (checkpoint.resume
# = "auto") + 3 more steps, at np 2; the data position travels in the
# checkpoint (a wrong one would feed other batches and change the losses).
# Leaves the resumed run's checkpoint root in $work/split.
check_resume() {
  local common=(app.batch_size=2 checkpoint.every=3)
  run 2 "$work/straight.log" "$1" "${common[@]}" app.steps=6 \
      "checkpoint.dir=$work/straight" "app.loss_log=$work/straight.loss"
  run 2 "$work/first.log" "$1" "${common[@]}" app.steps=3 \
      "checkpoint.dir=$work/split" "app.loss_log=$work/first.loss"
  run 2 "$work/second.log" "$1" "${common[@]}" app.steps=6 checkpoint.resume=auto \
      "checkpoint.dir=$work/split" "app.loss_log=$work/second.loss"
  grep -q "resumed at step 3, data position 12" "$work/second.log" ||
    { cat "$work/second.log"; fail "the second job did not resume at step 3, data position 12"; }
  cat "$work/first.loss" "$work/second.loss" > "$work/split.loss"
  cmp -s "$work/straight.loss" "$work/split.loss" ||
    { paste "$work/straight.loss" "$work/split.loss"; fail "losses differ after resuming"; }
  export_ckpt "$work/straight" "$work/straight.safetensors"
  export_ckpt "$work/split" "$work/split.safetensors"
  cmp -s "$work/straight.safetensors" "$work/split.safetensors" ||
    fail "parameters after 6 steps differ between the straight and the resumed run"
}

# llama_hf_base DIR — the fine-tuning tests' base: 3 steps of full training
# from the untied test shape (np 2, fp32), exported into DIR in Hugging
# Face's layout (config.json + model.safetensors). Needs ZSCKPT.
llama_hf_base() {
  cp "$SRC/tests/llama/shapes/untied.json" "$work/untied.json"
  model_config "$work/base.cfg" 3 fp32 "config = \"$work/untied.json\";"
  run 2 "$work/base.log" "$work/base.cfg" app.steps=3 app.batch_size=2 \
      "checkpoint.dir=$work/ckpt.base" checkpoint.every=3
  "$ZSCKPT" export --hf "$1" "$work/ckpt.base" > "$work/base.export.log" 2>&1 ||
    { cat "$work/base.export.log"; fail "export --hf of the base"; }
}

# same_first_loss NP FULL_CFG LORA_CFG WHAT — one step of each on NP ranks:
# with LoRA (B = 0 adds nothing) the first loss is the base model's, bit
# for bit.
same_first_loss() {
  local np=$1 which
  for which in full lora; do
    local cfg=$2
    [ $which = lora ] && cfg=$3
    run "$np" "$work/first.$which.log" "$cfg" app.steps=1 app.batch_size=2 \
        "app.loss_log=$work/first.$which.loss"
  done
  [ "$(cut -d' ' -f2 "$work/first.full.loss")" = "$(cut -d' ' -f2 "$work/first.lora.loss")" ] ||
    { paste "$work/first.full.loss" "$work/first.lora.loss"; fail "$4: LoRA's first loss is not the base's"; }
  echo "$4: the first step's loss is the base model's, bit for bit"
}
