#!/usr/bin/env bash
# mlp_train on the simulated device (backend = "sim", issue 39) gives the
# cpu backend's bits at np 1, 2 and 3: for each case the same command runs
# on both backends, and the printed losses, accuracies, gradient norms,
# held-out loss (the log without its timings) and the final parameters (the
# checkpoint's master weights exported by zs-ckpt, compared with cmp) must
# be the same. Cases: stages 0 and 3 in fp32 and in bf16, at every np; at
# np 2 also stage 2 in bf16 with 2 micro-steps per optimizer step
# (mlp_zero2_bf16.cfg) and stage 3 in fp16 with its dynamic loss scale
# (mlp_zero3_fp16.cfg). Last, at np 2, a sim run killed right after
# committing step 3 (ZS_FAULT) and resumed (checkpoint.resume = "auto")
# ends with the uninterrupted cpu run's parameters.
# Usage: run_mlp_sim.sh MPIRUN MLP_TRAIN ZS_CKPT CONFIG_DIR
set -u
mpirun=$1 trainer=$2 zsckpt=$3 configs=$4
work=$(mktemp -d /tmp/zs_mlp_sim.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
steps=6
# Few steps and a small evaluation keep each run well under a second; the
# schedule is fitted to the run (warm-up shorter than it), and the target
# cannot be missed, since learning is not what is tested.
common=(app.steps=$steps scheduler.total_steps=$steps scheduler.warmup_steps=2 app.log_every=1
        app.eval_samples=600 app.target_loss=100)
mpi_extra=()
failed=0 passed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# The log with what may differ between runs taken out: the timings, the
# header's backend, and the tables (memory and communication differ by design).
numbers() { grep -E '^(step |final:)' "$1" | sed 's/ | [0-9.]* ms\/step$//'; }

# run NAME NP BACKEND CONFIG [OVERRIDES...]: one run into $work/NAME.{log,dir},
# with mpirun's options of mpi_extra.
run() {
    local name=$1 np=$2 backend=$3 config=$4
    shift 4
    "$mpirun" --oversubscribe --bind-to none -np "$np" ${mpi_extra[@]+"${mpi_extra[@]}"} \
        "$trainer" "$configs/$config" \
        backend="$backend" "${common[@]}" "checkpoint.dir=$work/$name.dir" "$@" \
        > "$work/$name.log" 2>&1
}

# export NAME: the parameters of the run's last checkpoint, in fp32.
export_params() {
    "$zsckpt" export --quiet "$work/$1.dir" "$work/$1.safetensors" > "$work/$1.export.log" 2>&1
}

# compare NAME NP CONFIG [OVERRIDES...]: the case on cpu, then on sim.
compare() {
    local name=$1 np=$2 config=$3
    shift 3
    local b
    for b in cpu sim; do
        if ! run "$name.$b" "$np" "$b" "$config" checkpoint.every=$steps "$@"; then
            fail "$name: mlp_train on $b exited nonzero"
            tail -20 "$work/$name.$b.log"
            return
        fi
        grep -q "backend $b\$" "$work/$name.$b.log" || { fail "$name: the run was not on $b"; return; }
        export_params "$name.$b" || { fail "$name: zs-ckpt export ($b) failed"; cat "$work/$name.$b.export.log"; return; }
    done
    if ! diff <(numbers "$work/$name.cpu.log") <(numbers "$work/$name.sim.log") > "$work/$name.diff"; then
        fail "$name: sim printed other numbers than cpu (< cpu, > sim):"
        cat "$work/$name.diff"
        return
    fi
    [ "$(numbers "$work/$name.cpu.log" | grep -c '^step ')" -eq $steps ] ||
        { fail "$name: expected $steps step lines"; numbers "$work/$name.cpu.log"; return; }
    if ! cmp "$work/$name.cpu.safetensors" "$work/$name.sim.safetensors"; then
        fail "$name: the final parameters differ between cpu and sim"
        return
    fi
    echo "ok: $name (np $np, $config${*:+ $*}): $(numbers "$work/$name.sim.log" | tail -1)"
    passed=$((passed + 1))
}

start=$(date +%s)
for np in 1 2 3; do
    compare "np$np.stage0.fp32" "$np" mlp_zero0.cfg
    compare "np$np.stage3.fp32" "$np" mlp_zero3.cfg
    compare "np$np.stage0.bf16" "$np" mlp_zero0.cfg precision.dtype=bf16
    compare "np$np.stage3.bf16" "$np" mlp_zero3.cfg precision.dtype=bf16
done
# global_batch 120 per micro-step is that config's own (240 per optimizer step).
compare np2.stage2.bf16.accumulate 2 mlp_zero2_bf16.cfg
compare np2.stage3.fp16 2 mlp_zero3_fp16.cfg

# Crash and resume on sim: the same parameters as the whole run on cpu.
name=np2.stage3.resume
mpi_extra=(-x ZS_FAULT)
ZS_FAULT=latest:0:3 run "$name.first" 2 sim mlp_zero3.cfg checkpoint.every=3 checkpoint.resume=auto
killed=$?
mpi_extra=()
if [ $killed -eq 0 ]; then
    fail "$name: the first run was not killed"
elif [ ! -d "$work/$name.first.dir/step_00000003" ]; then
    fail "$name: step 3 was not committed"; tail -20 "$work/$name.first.log"
else
    # The second run resumes from the first one's checkpoints.
    mv "$work/$name.first.dir" "$work/$name.dir"
    if ! run "$name" 2 sim mlp_zero3.cfg checkpoint.every=3 checkpoint.resume=auto; then
        fail "$name: the resumed run exited nonzero"; tail -20 "$work/$name.log"
    elif ! grep -q "resumed from a checkpoint at step 3" "$work/$name.log"; then
        fail "$name: it did not resume from step 3"; tail -20 "$work/$name.log"
    elif ! export_params "$name"; then
        fail "$name: zs-ckpt export failed"; cat "$work/$name.export.log"
    elif ! cmp "$work/np2.stage3.fp32.cpu.safetensors" "$work/$name.safetensors"; then
        fail "$name: the resumed sim run ends with other parameters than the whole cpu run"
    else
        echo "ok: $name (killed after step 3, resumed on sim, cpu's parameters)"
        passed=$((passed + 1))
    fi
fi

echo "$passed passed, $failed failed ($(($(date +%s) - start)) s)"
[ "$failed" -eq 0 ]
