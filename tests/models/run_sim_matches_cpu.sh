#!/usr/bin/env bash
# A language model's trainer on the simulated device (backend = "sim",
# issue 41) gives the cpu backend's bits: the same command runs on both
# backends, and the printed losses, gradient norms, validation losses, the
# sampled text, every shard file of the last checkpoint and every file of its
# Hugging Face export (zs-ckpt export --hf) must be the same. Cases: np 1 and
# 2, stages 0 and 3, two of them with gradient accumulation. The sim
# device's stream-order check is on (its
# default), so a model kernel that raced the runtime, or host code that
# touched a pinned buffer a queued copy still owned, ends the run with a
# report, and the case fails. No micro-step may make the model's device
# block the host, nor, at np 1, the runtime (the trainer prints both counts
# on a device).
# Usage: run_sim_matches_cpu.sh MPIRUN ZS_CKPT TRAINER CONFIG [OVERRIDES...]
set -u
mpirun=$1 zsckpt=$2 trainer=$3 config=$4
shift 4
extra=("$@")
work=$(mktemp -d /tmp/zs_models_sim.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
src=$(cd "$(dirname "$0")/../.." && pwd)
# The corpus every model test trains on: this project's own docs.
cat "$src"/README.md "$src"/docs/*.md > "$work/corpus.txt"
steps=3
# Few steps, one validation batch, a short sample and a checkpoint at the end.
common=(app.steps=$steps scheduler.total_steps=$((steps + 1)) scheduler.warmup_steps=1
        app.log_every=1 app.val_every=$steps app.val_batches=1 app.sample_tokens=8
        checkpoint.every=$steps "app.train_data=\"$work/corpus.txt\"")
failed=0 passed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# The log with what may differ between runs taken out: the timings. grep -a:
# a byte-token model's sample may print any byte, and grep would call the
# log binary.
numbers() {
    grep -aE '^(step |validation|final)' "$1" |
        sed -E 's/ \| [0-9.]+ (ms|ms\/step|tok\/s|TFLOP\/s)//g'
}
sample() { sed -n '/^sample/,/^$/p' "$1"; }

# compare NAME NP STAGE [OVERRIDES...]: the case on cpu, then on sim.
compare() {
    local name=$1 np=$2 stage=$3 b
    shift 3
    for b in cpu sim; do
        if ! "$mpirun" --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS \
            -x OPENBLAS_NUM_THREADS "$trainer" "$config" backend="\"$b\"" zero.stage=$stage \
            "${common[@]}" "checkpoint.dir=$work/$name.$b.ckpt" ${extra[@]+"${extra[@]}"} "$@" \
            > "$work/$name.$b.log" 2>&1; then
            fail "$name: the trainer on $b exited nonzero"
            tail -20 "$work/$name.$b.log"
            return
        fi
        grep -aq "backend $b," "$work/$name.$b.log" || { fail "$name: the run was not on $b"; return; }
    done
    [ "$(numbers "$work/$name.cpu.log" | wc -l)" -ge $((steps + 1)) ] ||
        { fail "$name: the log has no step lines"; return; }
    diff <(numbers "$work/$name.cpu.log") <(numbers "$work/$name.sim.log") > "$work/$name.diff" ||
        { fail "$name: the logs differ (< cpu, > sim)"; head -10 "$work/$name.diff"; return; }
    [ -n "$(sample "$work/$name.cpu.log")" ] || { fail "$name: no sample printed"; return; }
    diff <(sample "$work/$name.cpu.log") <(sample "$work/$name.sim.log") > /dev/null ||
        { fail "$name: the samples differ"; return; }
    local last_c last_s f n=0
    last_c=$(ls -d "$work/$name.cpu.ckpt"/step_* | tail -1)
    last_s=$(ls -d "$work/$name.sim.ckpt"/step_* | tail -1)
    for f in "$last_c"/*.safetensors; do
        cmp -s "$f" "$last_s/$(basename "$f")" || { fail "$name: $(basename "$f") differs"; return; }
        n=$((n + 1))
    done
    # A LoRA run's export is its adapters (PEFT's layout), a full run's the
    # Hugging Face model.
    local kind=--hf
    printf '%s\n' "${extra[@]}" | grep -q '^app.lora_r=[1-9]' && kind=--peft
    for b in cpu sim; do
        local last=$last_c
        [ $b = sim ] && last=$last_s
        "$zsckpt" export "$kind" "$work/$name.$b.hf" "$last" > "$work/$name.$b.export.log" 2>&1 ||
            { fail "$name: zs-ckpt export $kind of the $b run"; cat "$work/$name.$b.export.log"; return; }
    done
    local m=0
    for f in "$work/$name.cpu.hf"/*; do
        cmp -s "$f" "$work/$name.sim.hf/$(basename "$f")" ||
            { fail "$name: the Hugging Face export's $(basename "$f") differs"; return; }
        m=$((m + 1))
    done
    # The trainer's step on a device: tokens up and losses back without the
    # runtime blocking the host inside a micro-step; at np 2 the collectives
    # stage through host memory, and those waits are the only ones.
    local waits
    waits=$(sed -n 's/^host waits in micro-steps: \([0-9]*\) in .*/\1/p' "$work/$name.sim.log")
    local device_waits
    device_waits=$(sed -n 's/^host waits in micro-steps: .*, \([0-9]*\) of them the model.*/\1/p' \
        "$work/$name.sim.log")
    [ -n "$waits" ] || { fail "$name: the sim run printed no host-wait count"; return; }
    if [ "$device_waits" != 0 ]; then
        fail "$name: the model's device blocked the host $device_waits times in micro-steps"
        return
    fi
    if [ "$np" -eq 1 ] && [ "$waits" -ne 0 ]; then
        fail "$name: $waits host waits inside micro-steps at np 1 (expected none)"
        return
    fi
    echo "$name: cpu and sim agree ($(numbers "$work/$name.cpu.log" | wc -l) log lines, the" \
         "sample, $n shard files, $m export files; $waits host waits in micro-steps)"
    passed=$((passed + 1))
}

# Three micro-steps per step in two cases: the third writes the token
# buffers of the first with no optimizer step's wait between, so a missing
# wait for the first's upload is a race the check reports.
compare np1_stage0 1 0 gradient_accumulation_steps=3
# The shape these cases ran (overrides may have changed the config's).
grep -a -m1 '^model:' "$work/np1_stage0.sim.log" || true
compare np1_stage3 1 3
compare np2_stage0 2 0
compare np2_stage3 2 3 gradient_accumulation_steps=3
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
