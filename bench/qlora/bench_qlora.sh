#!/usr/bin/env bash
# QLoRA (issue 43): LoRA on a base stored 4-bit (zero.frozen_storage =
# "nf4") against LoRA on the same base in bf16 (zero.frozen_storage =
# "compute"), llama_train, bf16, LoRA rank 8 on every Linear, the same
# initialization and batch (8 sequences of 128 bytes per rank), CPU backend.
# Two shapes, as bench/lora/bench_lora_step.sh's: the demo's "tiny" (128
# channels, 4 blocks, MLP 352) and a wider one (512 channels, MLP 1376, 8
# query / 4 key-value heads, 2 blocks). Three tables:
#   1. step time, np 1, stages 3 and 0, one OpenMP thread, two ways, each a
#      median over ROUNDS interleaved rounds (the order of the two settings
#      alternating): a run's median step (median_ms of its log,
#      bench/lib/common.sh: the first two steps left out) and its fastest
#      step (min_ms); both settings
#      with zero.max_live_units = 3 (QLoRA needs it: a block fetches its
#      matrices, its norms and its adapters), so only the storage differs;
#   2. bytes all-gathered per step, np 2, stage 3: rank 0's
#      comm_bytes.all_gather of the last step in log.metrics_file, against
#      the formula from the shape (below);
#   3. memory per rank, np 2, stage 3: full fine-tuning, LoRA, QLoRA, each
#      with the settings it runs with (QLoRA: max_live_units = 3, the others
#      the default 2), the runtime's report (app.memory_file, rank 0) beside
#      zs-estimate's stage-3 column for the same configuration (--qlora nf4
#      where this zs-estimate has it); then zs-estimate alone for Llama
#      3.2 1B and 3.1 8B on one rank (LoRA r 16 on every Linear).
# Usage: bench_qlora.sh BUILD_DIR [STEPS] [ROUNDS]
set -euo pipefail
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZS_LOG_LEVEL=warn
build=$(cd "${1:?usage: bench_qlora.sh BUILD_DIR [STEPS] [ROUNDS]}" && pwd)
train=$build/examples/llama/llama_train estimate=$build/tools/zs-estimate
steps=${2:-12} rounds=${3:-9}
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/bench/lib/common.sh"

# The wider shape: the tiny one's layout at 512 channels.
python3 - "$work/wide.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
           "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 4,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
           "mlp_bias": False}, open(sys.argv[1], "w"))
PY
declare -A shape_args=([tiny]='app.model="tiny"'
                       [wide]="app.model=\"\" app.config=\"$work/wide.json\"")
declare -A shape_layout=([tiny]="--llama tiny" [wide]="--hf-config $work/wide.json")
lora=(app.lora_r=8 app.lora_alpha=16 'app.lora_target_modules="all-linear"')
qlora=('zero.frozen_storage="nf4"' zero.max_live_units=3)
# shellcheck disable=SC2034  # read through the nameref `storage` below
storage_q=("${qlora[@]}")
# shellcheck disable=SC2034
storage_b=('zero.frozen_storage="compute"' zero.max_live_units=3)

# train NP SHAPE LOG STEPS [OVERRIDES...]
train() {
  local np=$1 shape=$2 log=$3 n=$4
  shift 4
  # shellcheck disable=SC2086  # the shape's overrides are words
  mpirun --oversubscribe --bind-to none -np "$np" "$train" "$src/configs/llama_demo.cfg" \
    ${shape_args[$shape]} app.steps=$n scheduler.total_steps=$((n + 1)) scheduler.warmup_steps=1 \
    app.log_every=1 app.val_every=0 app.sample_tokens=0 "app.train_data=\"$corpus\"" \
    "checkpoint.dir=$work/ckpt.$RANDOM" checkpoint.every=0 "$@" > "$log" 2>&1 ||
    { tail -20 "$log"; echo "bench_qlora: a run failed ($log)" >&2; exit 1; }
}
# The fastest step of a log after the first two: on a loaded machine other
# processes only add to a step, so its minimum is the less disturbed figure.
min_ms() { grep -E '^step ' "$1" | sed -E 's/.*\| ([0-9.]+) ms$/\1/' | tail -n +3 | sort -g | head -1; }
last() { echo "${@: -1}"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "== 1. step time: LoRA r 8 (every Linear), base NF4 against base bf16; np 1, bf16, 1 thread, $steps steps x $rounds rounds"
table1=()
for shape in tiny wide; do
  for stage in 3 0; do
    declare -A med=() fast=()
    for r in $(seq "$rounds"); do
      order="b q"
      [ $((r % 2)) -eq 0 ] && order="q b"
      for which in $order; do
        unset -n storage
        declare -n storage=storage_$which
        train 1 $shape "$work/t.log" "$steps" zero.stage=$stage "${lora[@]}" "${storage[@]}"
        med[$which]+=" $(median_ms "$work/t.log")" fast[$which]+=" $(min_ms "$work/t.log")"
      done
      # shellcheck disable=SC2086  # the lists are words
      echo "$shape stage $stage round $r (ms: median step, fastest):" \
        "bf16 base $(last ${med[b]}) $(last ${fast[b]}), NF4 base $(last ${med[q]}) $(last ${fast[q]})"
    done
    # shellcheck disable=SC2086
    table1+=("$shape $stage $(median ${med[b]}) $(median ${med[q]}) $(median ${fast[b]}) $(median ${fast[q]})")
  done
done

echo
echo "== 2, 3: running np 2, stage 3 (5 steps each): full fine-tuning, LoRA, QLoRA"
for shape in tiny wide; do
  train 2 $shape "$work/$shape.full.log" 5 "log.metrics_file=$work/$shape.full.jsonl" \
    "app.memory_file=$work/$shape.full.mem"
  train 2 $shape "$work/$shape.lora.log" 5 "${lora[@]}" "log.metrics_file=$work/$shape.lora.jsonl" \
    "app.memory_file=$work/$shape.lora.mem"
  train 2 $shape "$work/$shape.qlora.log" 5 "${lora[@]}" "${qlora[@]}" \
    "log.metrics_file=$work/$shape.qlora.jsonl" "app.memory_file=$work/$shape.qlora.mem"
  # shellcheck disable=SC2086  # the layout's options are words
  est() { "$estimate" ${shape_layout[$shape]} --world 2 --config "$src/configs/llama_demo.cfg" "$@"; }
  est > "$work/$shape.full.est"
  est --lora 8 --lora-targets all-linear > "$work/$shape.lora.est"
  if "$estimate" --help 2>&1 | grep -q -- '--qlora'; then
    est --lora 8 --lora-targets all-linear --qlora nf4 --set zero.max_live_units=3 > "$work/$shape.qlora.est"
  else
    : > "$work/$shape.qlora.est"
  fi
done

python3 - "$work" "${table1[@]}" <<'PY'
import json, re, sys
work, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
MIB = 1 << 20

print("\n1. ms per step, NF4 / bf16 (the goal: <= 1.10), medians over rounds: a run's median "
      "step, its fastest step")
print("| shape | stage | median step: bf16 base | NF4 base | NF4 / bf16 | fastest step: bf16 | NF4 | "
      "NF4 / bf16 |")
print("|---|---|---|---|---|---|---|---|")
for shape, stage, *ms in rows:
    cells = []
    for b, q in zip(*[iter(float(x) for x in ms)] * 2):
        cells.append(f"{b:.1f} ms | {q:.1f} ms | {q / b:.3f}")
    print(f"| {shape} | {stage} | " + " | ".join(cells) + " |")

def dims(shape):
    line = next(l for l in open(f"{work}/{shape}.qlora.log") if l.startswith("model: "))
    m = re.search(r"(\d+) layers, (\d+) query / (\d+) key-value heads of (\d+), (\d+) channels, "
                  r"MLP (\d+), vocab (\d+), untied head", line)
    return [int(x) for x in m.groups()]

def last(shape, run):
    return [json.loads(l) for l in open(f"{work}/{shape}.{run}.jsonl")][-1]

# The bytes rank 0 sends in one step's all-gathers at world w: (w - 1) / w
# of every unit gathered, each time it is gathered. Per step llama_train
# gathers each block unit (matrices, norms, adapters) twice (the forward's
# fetch and the backward's), the embedding once (its forward; frozen, it has
# no backward), and the head unit (final norm and lm_head) once: its
# forward and backward are one operation under one fetch (ex_decoder.c).
# Everything in bf16 (2 bytes) except the NF4 matrices: half a byte per
# element and a 4-byte fp32 scale per 64.
NF4 = 0.5 + 4 / 64
def gathered(shape, b, w=2):
    L, nq, nkv, hd, d, f, V = dims(shape)
    mats = d * nq * hd + 2 * d * nkv * hd + nq * hd * d + 3 * d * f
    adapters = 8 * ((d + nq * hd) * 2 + (d + nkv * hd) * 2 + (d + f) * 3)
    per_block = mats * b + (2 * d + adapters) * 2
    return (w - 1) / w * (V * d * 2 + (V * d + d) * 2 + 2 * L * per_block), (w - 1) / w * 2 * L * mats

print("\n2. bytes all-gathered per step by rank 0, np 2, stage 3 (LoRA r 8, every Linear)")
print("| shape | base bf16 | base NF4 | NF4 / bf16 measured | formula | "
      "base matrices: measured by difference | formula (4 + 32/64) / 16 |")
print("|---|---|---|---|---|---|---|")
for shape in ("tiny", "wide"):
    bb = last(shape, "lora")["comm_bytes"]["all_gather"]
    qb = last(shape, "qlora")["comm_bytes"]["all_gather"]
    fb, mats = gathered(shape, 2)
    fq, _ = gathered(shape, NF4)
    # The matrices' share, from the two runs: everything else is the same.
    rm = 1 - (bb - qb) / (2 * mats)
    print(f"| {shape} | {bb} B ({fb:.0f}) | {qb} B ({fq:.0f}) | {qb / bb:.4f} | {fq / fb:.4f} | "
          f"{rm:.4f} | {NF4 / 2:.4f} |")
    if abs(bb - fb) > 1024 or abs(qb - fq) > 1024:
        print(f"  note: {shape}: measured and formula differ by {bb - fb:.0f} B (bf16), "
              f"{qb - fq:.0f} B (NF4)")
print("(in parentheses: the formula's bytes)")

def estimated(path):
    """zs-estimate's stage-3, offload-none bytes per tag."""
    out, on = {}, False
    for l in open(path):
        if l.startswith("stage "):
            on = l.startswith("stage 3 ")
        elif on:
            m = re.match(r"  (\S[\w ]*?)\s{2,}\S+ \S+\s+(\d+)\s", l)
            if m: out[m.group(1)] = int(m.group(2))
    return out

STATE = ("params", "grads", "master", "optim", "frozen")
print("\n3. memory per rank, np 2, stage 3, MiB: the runtime's report (rank 0), "
      "zs-estimate's in parentheses")
print("| shape | run | model state | of which frozen | live buffer | live carved at peak | "
      "total (every tag) | tags = estimate |")
print("|---|---|---|---|---|---|---|---|")
for shape in ("tiny", "wide"):
    full_state = None
    for run, name in (("full", "full fine-tuning"), ("lora", "LoRA"), ("qlora", "QLoRA (NF4)")):
        rank = json.load(open(f"{work}/{shape}.{run}.mem"))["ranks"][0]
        cur = rank["current"]
        state = sum(cur[t] for t in STATE)
        total = sum(cur.values())
        full_state = full_state or state
        e = estimated(f"{work}/{shape}.{run}.est")
        def cell(v, key):
            if key not in e: return f"{v / MIB:.3f} (n/a)"
            mark = "" if e[key] == v else " !"
            return f"{v / MIB:.3f} ({e[key] / MIB:.3f}){mark}"
        same = [t for t in cur if e.get(t) == cur[t]]
        tags = (f"all {len(cur)}" if len(same) == len(cur) else
                "not " + ", ".join(t for t in cur if t not in same)) if e else "n/a"
        print(f"| {shape} | {name} | {cell(state, 'model state')} ({state / full_state:.3f} of full) | "
              f"{cell(cur['frozen'], 'frozen')} | {cell(cur['live_free'], 'live_free')} | "
              f"{rank['live_bytes_peak'] / MIB:.3f} | {cell(total, 'total per rank')} | {tags} |")
print("(! = the estimate differs from the runtime's bytes; total includes the 4 MiB ring staging)")
PY

echo
echo "== 3b. zs-estimate: model state per rank, one rank, bf16, LoRA r 16 on every Linear"
for model in llama-3.2-1b llama-3.1-8b; do
  row=()
  for args in "" "--lora 16 --lora-targets all-linear" "--lora 16 --lora-targets all-linear --qlora nf4"; do
    if [[ $args == *qlora* ]] && ! "$estimate" --help 2>&1 | grep -q -- '--qlora'; then row+=(n/a); continue; fi
    # shellcheck disable=SC2086
    row+=("$("$estimate" --llama $model --world 1 --dtype bf16 $args |
      awk '/^stage 0/ {on = 1} on && !done && /^  model state/ {printf "%.2f GiB", $5 / 2^30; done = 1}')")
  done
  echo "$model: full ${row[0]}, LoRA ${row[1]}, QLoRA NF4 ${row[2]}"
done
