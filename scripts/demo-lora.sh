#!/usr/bin/env bash
# make demo-lora: LoRA fine-tuning of the Llama demo's trained model on a
# text it has not seen (issue 42), on 2 ranks of this machine, in a few
# minutes:
#   1. the base: the Llama demo (configs/llama_demo.cfg: Shakespeare, byte
#      tokens) trained and exported in Hugging Face's layout to
#      out/llama_demo_hf, once (skipped when it is there);
#   2. LoRA rank 8 on every Linear of that frozen base (configs/
#      llama_lora_demo.cfg) on this project's own documentation, English
#      prose the base never saw: the loss on it falls while the base's
#      weights stay as they were;
#   3. the adapters exported as PEFT saves them, to out/llama_demo_lora_peft
#      (adapter_model.safetensors, adapter_config.json), which
#      peft.PeftModel.from_pretrained loads onto out/llama_demo_hf.
# Usage: demo-lora.sh BUILD_DIR MPIRUN...
set -euo pipefail
build=${1:?usage: demo-lora.sh BUILD_DIR MPIRUN...}
shift
mpirun=("$@")
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
mkdir -p out
base=out/llama_demo_hf
if [ ! -f "$base/model.safetensors" ]; then
  echo "== the base: the Llama demo on Shakespeare (once; out/llama_demo_hf)"
  rm -rf out/llama_demo_ckpt
  "${mpirun[@]}" -np 2 "$build/examples/llama/llama_train" configs/llama_demo.cfg \
    checkpoint.dir=\"out/llama_demo_ckpt\" checkpoint.every=1600 app.sample_tokens=0
  "$build/tools/zs-ckpt" export --hf "$base" out/llama_demo_ckpt
fi
# The new text: this checkout's documentation.
cat README.md docs/*.md > out/lora_corpus.txt
echo "== LoRA on the frozen base, on text it has not seen (out/lora_corpus.txt)"
rm -rf out/llama_demo_lora_ckpt out/llama_demo_lora_peft
"${mpirun[@]}" -np 2 "$build/examples/llama/llama_train" configs/llama_lora_demo.cfg
echo "== the adapters in PEFT's layout"
"$build/tools/zs-ckpt" export --peft out/llama_demo_lora_peft out/llama_demo_lora_ckpt
ls -l out/llama_demo_lora_peft
