# Shared by the GPT-2 end-to-end tests (sourced, not run). The caller sets
# MPIEXEC and TRAIN (and ZSCKPT where needed) before sourcing.
#
# The tiny configuration of issue 10: 2 layers, n_embd 32, sequences of 16
# bytes, tied embedding; trained on the project's own documentation (real
# English text that every checkout has), so these tests need no download.
source "$(dirname "${BASH_SOURCE[0]}")/../models/model_runs.sh"

# tiny_config FILE STAGE DTYPE [DIMS] — the runtime settings of the tiny runs;
# DIMS (default: the tiny model's sizes) replaces the model's sizes ("" when
# they come from a model file).
TINY_DIMS="n_layer = 2; n_head = 4; n_embd = 32; vocab = 256; block_size = 16;"
tiny_config() {
  model_config "$1" "$2" "$3" "${4-$TINY_DIMS}"
}
