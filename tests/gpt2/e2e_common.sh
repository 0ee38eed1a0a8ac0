# Shared by the GPT-2 end-to-end tests (sourced, not run). The caller sets
# MPIEXEC and TRAIN (and ZSCKPT where needed) before sourcing.
#
# The tiny configuration of issue 10: 2 layers, n_embd 32, sequences of 16
# bytes, tied embedding; trained on the project's own documentation (real
# English text that every checkout has), so these tests need no download.
set -u
work=$(mktemp -d /tmp/zs_gpt2_e2e.XXXXXX)
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
    fail "gpt2_train $* exited nonzero"
  fi
}

# tiny_config FILE STAGE DTYPE [DIMS] — the runtime settings of the tiny runs;
# DIMS (default: the tiny model's sizes) replaces the model's sizes ("" when
# they come from a model file).
tiny_config() {
  local dims=${4-n_layer = 2; n_head = 4; n_embd = 32; vocab = 256; block_size = 16;}
  cat > "$1" <<CFG
zero: { stage = $2; align = 16; };
precision: { dtype = "$3"; };
optimizer: { type = "adamw"; lr = 3e-3; weight_decay = 0.1; };
gradient_clipping = 1.0;
log: { level = "warn"; };
app: {
  $dims seq_len = 16;
  train_data = "$work/corpus.txt"; val_fraction = 0.1; val_every = 0; val_batches = 1;
  sample_tokens = 0; log_every = 1;
};
CFG
}

# export DIR OUT — the checkpoint root's newest step as one fp32 safetensors file.
export_ckpt() {
  "$ZSCKPT" export "$1" "$2" > /dev/null || fail "zs-ckpt export $1"
}
