#!/usr/bin/env bash
# The prepared device check of issue 26 for a session that is lent a GPU (one
# H100 or H200; 15 minutes of device time in all, machine start included, at
# most 10 minutes a call): ONE call that ends within 8 minutes, most important
# first, every part under a fixed budget, every log in one archive.
#
#   bash scripts/gpu-check.sh BUILD_DIR [check|confirm]
#
# Prepare here (no GPU needed), from the project root, after `git add` of any
# new file (bundle.sh packs the tracked files):
#   cmake -S . -B build-gpu -DZS_CUDA=ON -DZS_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu -j
#   bash ../shared/gpu/bundle.sh build-gpu
#   (optional) llm.c's trainer, built here from its public source without cuDNN,
#   at .gpu/llmc/train_gpt2cu (.gpu/ is ignored; never commit it)
# Then one device call:
#   run(command="bash .gpu/run.sh 'bash scripts/gpu-check.sh build-gpu'", carry=[".gpu"], timeout_s=540)
# and after fixes, a 3-minute confirmation (scripts/gpu-confirm.sh):
#   run(command="bash .gpu/run.sh 'bash scripts/gpu-confirm.sh build-gpu'", carry=[".gpu"], timeout_s=240)
#
# What comes back: $OUT/gpu-check.tar.gz (gpu-confirm.tar.gz), every log, in
#   gpu-check/summary.txt        the lines printed to stdout
#   gpu-check/env.txt            nvidia-smi -q, tool versions, cores, memory
#   gpu-check/1-tests/NAME.log   each ctest -L cuda test; NAME.blocking.log and
#                                NAME.sanitizer.log for a failed one's reruns
#   gpu-check/2-sanitizer/*.log  compute-sanitizer memcheck and racecheck
#   gpu-check/3-gpt2/*.log       peaks.log (cuBLASLt bf16 GEMMs, PCIe), shard.log,
#                                zs-B16.log, zs-B64.log (with GPT2_CUDA_PROFILE's
#                                table and the fusion line), llmc-B16.log,
#                                llmc-B64.log; *.log.mem: the run's largest
#                                memory.used of the GPU (MiB)
#   gpu-check/4-offload/*        774M none and host (logs, metrics .jsonl), 1558M
#                                start (timestamped log)
# plus $OUT/gpu-check-summary.txt (the summary alone) and run.sh's gpu-run.log:
# three files of the eight a call may bring back. Logs over 3 MiB keep their
# first and last MiB. The archive is rewritten after every step, so a call
# stopped early still brings back what ran.
#
# Budgets. The whole check has GPU_CHECK_SECONDS (450 s for check, 160 s for
# confirm): with run.sh's unpacking (about 10-20 s) the call ends within 8
# minutes (3 for confirm). Each part has a fixed budget and ends at the sum of
# its budget and those before it, so a part that finishes early leaves its
# time to the next and a part that overruns cannot take the next one's; each
# step inside a part runs under `timeout -k 5` at the smallest of its own cap,
# what is left of the part and what is left of the whole, and is not started
# with less than 8 s. GPU_CHECK_TESTS=REGEX runs only the CUDA tests it
# matches (a narrower confirmation). Without a GPU (nvidia-smi finds none) it says "no GPU", writes
# the archive and exits 2 within seconds; GPU_CHECK_FORCE=1 runs the parts
# anyway (to try the script's logic on a machine without one).
set -u
build=${1:-build-gpu}
mode=${2:-check}
case $mode in
  check) total=${GPU_CHECK_SECONDS:-450} name=gpu-check ;;
  confirm) total=${GPU_CHECK_SECONDS:-160} name=gpu-confirm ;;
  *) echo "usage: gpu-check.sh BUILD_DIR [check|confirm]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/$name-out}
mkdir -p "$out"
work=$(mktemp -d "/tmp/$name.XXXXXX")
logs=$work/$name
mkdir -p "$logs"
summary=$logs/summary.txt
# Whatever ends the script (a limit's SIGTERM too): the archive as it stands.
trap 'archive; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
t_start=$(date +%s)
deadline=$((t_start + total))
min_step=8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export build root
# The kernels compute-sanitizer leaves out: cuBLAS/cuBLASLt (cutlass, xmma,
# nvjet, gemm/gemv, split-K reductions) and NCCL. They are NVIDIA's, they
# dominate the instrumented time, and a finding in them would not be ours to
# fix; every kernel of ours (names in examples/gpt2/*.cu, kernels/cuda_*.cu,
# none with these substrings) is still checked. The regex key came with the
# option's rename from --kernel-regex-exclude; a sanitizer that refuses it
# makes part 2 run again without the exclusion (slower, same findings plus
# the libraries').
san_exclude='regex=cublas|cutlass|xmma|nvjet|gemm|gemv|splitK|nccl'
export san_exclude
# The exclusion's arguments, or none once it was refused.
san_excl_args() { [ -n "$san_exclude" ] && printf '%s\n' --kernel-name-exclude "$san_exclude"; }

say() { echo "$*" | tee -a "$summary"; }
now() { date +%s; }

# Rewrites the archive from everything logged so far (atomically, so a call
# stopped in the middle still brings back the previous one whole).
archive() {
  cp "$summary" "$out/$name-summary.txt" 2>/dev/null
  tar -C "$work" -czf "$out/.$name.tar.gz.part" "$name" 2>/dev/null &&
    mv -f "$out/.$name.tar.gz.part" "$out/$name.tar.gz"
}

# A log over 3 MiB keeps its first and last MiB (a sanitizer gone wild must
# not push the archive over the 16 MiB a file may bring back).
cap_log() {
  local f=$1 size
  size=$(stat -c %s "$f" 2>/dev/null || echo 0)
  [ "$size" -gt $((3 << 20)) ] || return 0
  { head -c $((1 << 20)) "$f"; printf '\n... [%d bytes cut by gpu-check] ...\n' $((size - (2 << 20)));
    tail -c $((1 << 20)) "$f"; } > "$f.cut" && mv -f "$f.cut" "$f"
}

# part NAME BUDGET — starts a part that ends BUDGET seconds after the previous
# part's end (or at the overall deadline, whichever is first).
part_end=$t_start
part() {
  part_name=$1
  part_end=$((part_end + $2))
  [ "$part_end" -le "$deadline" ] || part_end=$deadline
  say "== $part_name: budget until +$((part_end - t_start)) s (now +$(($(now) - t_start)) s)"
}

# The seconds a step may run now: its cap, within the part and the whole
# (less the 5 s that timeout -k may add).
limit_for() {
  local cap=$1 n l
  n=$(now)
  l=$cap
  [ $((part_end - n - 5)) -lt "$l" ] && l=$((part_end - n - 5))
  [ $((deadline - n - 5)) -lt "$l" ] && l=$((deadline - n - 5))
  echo "$l"
}

# step LOG CAP COMMAND... — COMMAND (a program or an exported function) under
# its limit, stdout and stderr into LOG. Sets step_rc (124/137: stopped at the
# limit; 125: not started, too little budget left) and step_s.
step() {
  local log=$1 cap=$2 lim t
  shift 2
  mkdir -p "$(dirname "$log")"
  lim=$(limit_for "$cap")
  if [ "$lim" -lt "$min_step" ]; then
    echo "not run: $lim s left of the budget" > "$log"
    step_rc=125 step_s=0
    return 125
  fi
  t=$(now)
  echo "# $(date +%T) limit $lim s: $*" > "$log"
  timeout -k 5 "$lim" bash -c '"$@"' _ "$@" >> "$log" 2>&1
  step_rc=$?
  step_s=$(($(now) - t))
  echo "# exit $step_rc after $step_s s" >> "$log"
  cap_log "$log"
  archive
  return "$step_rc"
}

# How a step ended, in words.
verdict() {
  case $1 in
    0) echo "ok" ;;
    124|137) echo "STOPPED at its limit" ;;
    125) echo "not run (budget spent)" ;;
    77) echo "skipped" ;;
    *) echo "FAILED (exit $1)" ;;
  esac
}

# ---------------------------------------------------------------- environment
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0 2>/dev/null | head -1)
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -a)"; echo "cores: $(nproc)"
  free -g 2>/dev/null; echo
  nvidia-smi -q 2>&1 | head -200; echo
  command -v nvcc >/dev/null && nvcc --version
  compute-sanitizer --version 2>&1 | head -3
  ctest --version 2>&1 | head -1; mpirun --version 2>&1 | head -1
  git -C "$root" log --oneline -1 2>/dev/null
} > "$logs/env.txt" 2>&1
say "$name: ${gpu:-no GPU}; $(nproc) cores; build $build; budget $total s; started $(date +%T)"
if [ -z "$gpu" ] && [ "${GPU_CHECK_FORCE:-0}" != 1 ]; then
  say "$name: no GPU: nvidia-smi finds no device here; nothing ran (GPU_CHECK_FORCE=1 runs the parts anyway)"
  archive
  echo "$name: archive $out/$name.tar.gz"
  exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  say "$name: $build is not a build directory (configure and build it, then bundle it)"
  archive
  exit 2
fi
build=$(cd "$build" && pwd)
# The spec-sheet dense bf16 peak: H100 SXM 989.4 TFLOP/s; the H200 is the
# same chip at the same clocks, 989.4 too. Others: GPU_PEAK_TFLOPS.
case $gpu in
  *H100*PCIe*) spec_peak=756 ;;
  *H100*NVL*) spec_peak=835 ;;
  *H100*|*H200*|*H800*) spec_peak=989.4 ;;
  *A100*) spec_peak=312 ;;
  *) spec_peak=0 ;;
esac
spec_peak=${GPU_PEAK_TFLOPS:-$spec_peak}
gpu_mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -dc 0-9; }

# The carried .gpu folder (llm.c's trainer): in the project root, or, when
# run.sh recreated the build's path as a link to the bundle's tree (and cd'd
# there), in the checkout run.sh was started from: the working directory of
# an ancestor process.
find_carried() {
  local p=$$ d
  [ -d "$root/.gpu" ] && { echo "$root/.gpu"; return; }
  while [ "${p:-1}" -gt 1 ]; do
    d=$(readlink "/proc/$p/cwd" 2>/dev/null)
    [ -n "$d" ] && [ -d "$d/.gpu" ] && { echo "$d/.gpu"; return; }
    p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
  done
}
carried=$(find_carried)
llmc=${GPU_CHECK_LLMC:-${carried:+$carried/llmc/train_gpt2cu}}

# ------------------------------------------------------ 1. the CUDA tests
# -V: the output of passing tests too (the pin-chunk lines are information).
run_ctest() { cd "$build" && ctest -V -R "^$1\$" --timeout 600; }
run_ctest_blocking() { CUDA_LAUNCH_BLOCKING=1 run_ctest "$1"; }
# Every process the test starts (mpirun's ranks too) under memcheck; the
# small sizes of test_cuda_kernels (other tests ignore ZT_CUDA_SMALL).
run_ctest_sanitized() {
  local excl
  mapfile -t excl < <(san_excl_args)
  cd "$build" && ZT_CUDA_SMALL=1 compute-sanitizer --tool memcheck --target-processes all \
    --error-exitcode 99 --print-limit 50 "${excl[@]}" ctest -V -R "^$1\$" --timeout 600
}
export -f san_excl_args run_ctest run_ctest_blocking run_ctest_sanitized

# Each test's cap, from what it runs (the whole part's budget bounds them
# together): test_cuda_kernels' 2^27-2^28-element arrays are generated and
# summed on the host too (a few seconds) beside a few thousand small views;
# the stage tests start np ranks and CUDA contexts and run 7 configurations;
# gpt2_cuda_matches_cpu runs the trainer 9 times (CPU and CUDA).
test_cap() {
  case $1 in
    test_cuda_kernels) echo 60 ;;
    test_cuda_stages_np1) echo 35 ;;
    test_cuda_stages_np2) echo 40 ;;
    test_cuda_stages_np3) echo 45 ;;
    test_gpt2_cuda) echo 40 ;;
    gpt2_cuda_matches_cpu) echo 60 ;;
    *) echo 45 ;;
  esac
}

cuda_tests() {
  local budget=$1 t all names=() failed=()
  # Part 1's budget: the 8 CUDA tests of today take an estimated 10-30 s
  # each when they pass (test_cuda_kernels' host-side arrays, the trainer
  # started 9 times by gpt2_cuda_matches_cpu, deadlines_cuda waiting out
  # comm.timeout_s = 3 in each scenario): about 150 s together. A hang costs
  # one test's cap, not the part; the tests that come after a spent budget
  # are listed as not run. Reruns of failures share what is left.
  part "1 CUDA tests (ctest -L cuda, each under its own limit)" "$budget"
  all=$(cd "$build" && ctest -N -L cuda 2>/dev/null | sed -nE 's/^ *Test +#[0-9]+: +([^ ]+).*/\1/p')
  # Most important first: the runtime's kernels, stages at np 1-3 (2 and 3
  # share the GPU through host staging), GPT-2's kernels and trainer.
  for t in test_cuda_kernels test_cuda_stages_np1 test_cuda_stages_np2 test_cuda_stages_np3 \
           test_gpt2_cuda gpt2_cuda_matches_cpu; do
    grep -qx "$t" <<< "$all" && names+=("$t")
  done
  for t in $all; do
    [[ " ${names[*]} " == *" $t "* ]] || names+=("$t")
  done
  # GPU_CHECK_TESTS (an extended regex) keeps only the tests it matches.
  if [ -n "${GPU_CHECK_TESTS:-}" ]; then
    local kept=()
    for t in "${names[@]}"; do grep -qE "$GPU_CHECK_TESTS" <<< "$t" && kept+=("$t"); done
    names=("${kept[@]}")
  fi
  [ ${#names[@]} -gt 0 ] || say "  no test labelled cuda in $build (built without CUDA?)"
  for t in "${names[@]}"; do
    step "$logs/1-tests/$t.log" "$(test_cap "$t")" run_ctest "$t"
    local rc=$step_rc
    # ctest exits 0 for a skipped test: say so.
    if [ $rc = 0 ] && grep -q '\*\*\*Skipped' "$logs/1-tests/$t.log"; then rc=77; fi
    say "  $t: $(verdict $rc) ($step_s s)"
    [ $rc = 0 ] || [ $rc = 77 ] || [ $rc = 125 ] || failed+=("$t")
    [ $rc = 77 ] && grep -m1 -h "SKIP" "$logs/1-tests/$t.log" | sed 's/^/    /' | tee -a "$summary"
  done
  tests_failed=${#failed[@]}
  # The informative lines of the pin-chunk case (what the driver does with a
  # copy across two registrations).
  grep -h "pin chunks" "$logs/1-tests/test_cuda_kernels.log" 2>/dev/null | sed 's/^/    /' | tee -a "$summary"
  for t in "${failed[@]}"; do
    step "$logs/1-tests/$t.blocking.log" "$(test_cap "$t")" run_ctest_blocking "$t"
    say "  $t again with CUDA_LAUNCH_BLOCKING=1: $(verdict $step_rc) ($step_s s)"
    grep -m3 -h "check failed\|error\|Error" "$logs/1-tests/$t.blocking.log" | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"
  done
  if [ ${#failed[@]} -gt 0 ] && [ "$mode" = check ] && ! command -v compute-sanitizer >/dev/null; then
    say "  compute-sanitizer not found: no rerun under it"
    return
  fi
  for t in "${failed[@]}"; do
    [ "$mode" = check ] || break
    step "$logs/1-tests/$t.sanitizer.log" 90 run_ctest_sanitized "$t"
    say "  $t under compute-sanitizer memcheck: $(verdict $step_rc) ($step_s s); $(grep -h 'ERROR SUMMARY' "$logs/1-tests/$t.sanitizer.log" | sort | uniq -c | tr -s ' ' | head -3 | tr '\n' ';')"
  done
}

# ------------------------------------------------------ 2. compute-sanitizer
# The tiny GPT-2 of the end-to-end tests, a little wider (64 channels, T 64,
# B 4) so that every kernel runs several blocks, bf16, stage 3, 2 steps.
tiny_gpt2_config() {
  cat "$root"/README.md "$root"/docs/*.md > "$work/corpus.txt"
  cat > "$work/tiny.cfg" <<CFG
zero: { stage = 3; align = 16; };
precision: { dtype = "bf16"; };
optimizer: { type = "adamw"; lr = 3e-3; weight_decay = 0.1; };
gradient_clipping = 1.0;
log: { level = "warn"; };
app: {
  n_layer = 2; n_head = 4; n_embd = 64; vocab = 256; block_size = 64; seq_len = 64;
  batch_size = 4; steps = 2; train_data = "$work/corpus.txt"; val_fraction = 0.1;
  val_every = 0; val_batches = 1; sample_tokens = 0; log_every = 1;
};
CFG
}
san_kernels() { # TOOL [OPTION...]
  local tool=$1 excl
  shift
  mapfile -t excl < <(san_excl_args)
  ZT_CUDA_SMALL=1 compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 100 \
    "${excl[@]}" "$@" "$build/tests/cuda/test_cuda_kernels"
}
san_gpt2() {
  local excl
  mapfile -t excl < <(san_excl_args)
  mpirun --bind-to none -np 1 compute-sanitizer --tool "$1" --error-exitcode 99 --print-limit 100 \
    "${excl[@]}" "$build/examples/gpt2/gpt2_train" "$2" backend=\"cuda\"
}
export -f san_kernels san_gpt2

# One line for a sanitizer log: its summaries, or why it did not run.
san_result() {
  local log=$1 s
  s=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log" | sed 's/^=* *//' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  if [ -n "$s" ]; then echo "$s"; return; fi
  s=$(grep -m1 -hiE "not supported|unable to|error 999|unrecognized|invalid (option|value)" "$log" | cut -c1-160)
  [ -n "$s" ] && echo "REFUSED: $s" || echo "no summary (see the log)"
}

sanitizer() {
  # Part 2's budget: instrumented, the small test_cuda_kernels runs its few
  # thousand launches in seconds to tens of seconds, the tiny GPT-2's two
  # steps in seconds plus start-up; racecheck is slower than memcheck.
  part "2 compute-sanitizer (runtime kernels small, GPT-2 bf16 tiny; cuBLAS/NCCL left out)" "$1"
  if ! command -v compute-sanitizer >/dev/null; then
    say "  compute-sanitizer not found on this machine: part skipped"
    return
  fi
  tiny_gpt2_config
  local what tool log r
  for what in kernels:memcheck kernels:racecheck gpt2:memcheck gpt2:racecheck; do
    tool=${what#*:}
    log=$logs/2-sanitizer/${what%%:*}-$tool.log
    if [ "${what%%:*}" = kernels ]; then
      if [ "$tool" = memcheck ]; then
        step "$log" 35 san_kernels "$tool" --leak-check full
      else
        step "$log" 35 san_kernels "$tool"
      fi
    else
      step "$log" 30 san_gpt2 "$tool" "$work/tiny.cfg"
    fi
    r=$(san_result "$log")
    if [ -n "$san_exclude" ] && [[ $r == REFUSED* ]] && grep -qi "kernel-name-exclude\|regex" "$log"; then
      say "  ${what%%:*} $tool: the sanitizer refuses --kernel-name-exclude $san_exclude: again without it"
      san_exclude=
      export san_exclude
      case $what in
        kernels:memcheck) step "$log" 35 san_kernels "$tool" --leak-check full ;;
        kernels:*) step "$log" 35 san_kernels "$tool" ;;
        *) step "$log" 30 san_gpt2 "$tool" "$work/tiny.cfg" ;;
      esac
      r=$(san_result "$log")
    fi
    say "  ${what%%:*} $tool: $(verdict $step_rc) ($step_s s): $r"
    grep -m5 -h "Invalid\|Race reported\|Hazard\|Program hit" "$log" | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"
    case $r in REFUSED*) say "  compute-sanitizer refused on this machine: the rest of part 2 skipped"; return ;; esac
  done
}

# ------------------------------------------------------ 3. GPT-2 124M
# An llm.c token shard (256 int32 header: magic 20240520, version 1, count;
# then uint16 tokens), random tokens below GPT-2's vocabulary, fixed seed:
# both trainers read the same file (gpt2_data.h reads this format).
make_shard() {
  python3 - "$1" "$2" <<'PY'
import array, random, struct, sys
n = int(sys.argv[2])
raw = array.array('H')
raw.frombytes(random.Random(20240520).randbytes(2 * n))
tokens = array.array('H', (t % 50257 for t in raw))
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, n, *([0] * 253)))
    f.write(tokens.tobytes())
PY
}
zs_gpt2() { # B STEPS SHARD [extra overrides]
  local B=$1 steps=$2 shard=$3
  shift 3
  mpirun --bind-to none -np 1 "$build/examples/gpt2/gpt2_train" "$root/configs/gpt2_124m.cfg" \
    backend=\"cuda\" zero.stage=3 precision.dtype=\"bf16\" app.seq_len=1024 app.batch_size="$B" \
    app.steps="$steps" scheduler.total_steps=$((steps + 10)) scheduler.warmup_steps=1 \
    app.log_every=1 app.val_every=0 app.val_batches=1 app.sample_tokens=0 \
    "app.train_data=\"$shard\"" "app.val_data=\"$shard\"" log.level=\"warn\" "$@"
}
# llm.c at its defaults for this model (random init "d12", no cuDNN in the
# build): only B, T, the total batch (no accumulation) and the step count set;
# one validation batch, no sampling, no HellaSwag. Under mpirun when it was
# built with MPI.
llmc_gpt2() { # B STEPS SHARD
  local launch=()
  ldd "$llmc" 2>/dev/null | grep -q libmpi && launch=(mpirun --bind-to none -np 1)
  cd "$(dirname "$llmc")" && "${launch[@]}" "$llmc" -i "$3" -j "$3" -e d12 -b "$1" -t 1024 \
    -d $(($1 * 1024)) -x "$2" -v 100000 -m 1 -s 0 -h 0
}
export -f make_shard zs_gpt2 llmc_gpt2
export llmc

# sample_mem FILE — the largest memory.used of GPU 0 (MiB) until killed.
sample_mem() {
  local max=0 v
  while :; do
    v=$(gpu_mem_used)
    if [ -n "$v" ] && [ "$v" -gt "$max" ]; then max=$v; echo "$max" > "$1"; fi
    sleep 0.25
  done
}

# Median of the ms/step of a log's step lines after the first two (warm-up).
median_ms() { # LOG SED-EXPRESSION
  grep -E '^step ' "$1" | sed -nE "$2" | tail -n +3 | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
zs_ms='s/.*\| ([0-9.]+) ms$/\1/p'
llmc_ms='s/.*\| ([0-9.]+) ms \|.*/\1/p'

# timed_run LOG CAP WHO B STEPS — a trainer's run with GPU memory sampled;
# prints its row of the table.
timed_run() {
  local log=$1 cap=$2 who=$3 B=$4 steps=$5 base sampler ms mem fn
  base=$(gpu_mem_used)
  rm -f "$log.mem"
  sample_mem "$log.mem" &
  sampler=$!
  fn=zs_gpt2
  [ "$who" = llm.c ] && fn=llmc_gpt2
  GPT2_CUDA_PROFILE=1 step "$log" "$cap" "$fn" "$B" "$steps" "$shard"
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  mem=$(( $(cat "$log.mem" 2>/dev/null || echo 0) - ${base:-0} ))
  if [ "$who" = llm.c ]; then ms=$(median_ms "$log" "$llmc_ms"); else ms=$(median_ms "$log" "$zs_ms"); fi
  if [ -z "$ms" ]; then
    say "$(printf '  %-9s %3d  %s' "$who" "$B" "$(verdict $step_rc) ($step_s s), no step time: see $(basename "$log")")"
    grep -m3 -hiE "error|failed|fatal" "$log" | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"
    return
  fi
  # FLOP per token: the zeroshard trainer's own count (6N + 12LCT, from its
  # TFLOP/s and tok/s columns), used for llm.c's row too so that the two
  # are compared by the same arithmetic.
  if [ "$who" = zeroshard ]; then
    fpt=$(grep -E '^step ' "$log" | tail -1 |
          sed -nE 's/.*\| ([0-9.]+) tok\/s \| ([0-9.]+) TFLOP\/s.*/\1 \2/p' | awk '{if ($1 > 0) print $2 * 1e12 / $1}')
  fi
  awk -v who="$who" -v B="$B" -v ms="$ms" -v fpt="${fpt:-859885056}" -v spec="$spec_peak" \
      -v gemm="${gemm_peak:-0}" -v mem="$mem" -v s="$step_s" \
    'BEGIN {tps = B * 1024 / (ms / 1000); tf = tps * fpt / 1e12;
            printf "  %-9s %3d %9.1f %10.0f %8.1f %9s %9s %9d   (%d s)\n", who, B, ms, tps, tf,
                   (spec > 0 ? sprintf("%.3f", tf / spec) : "n/a"),
                   (gemm > 0 ? sprintf("%.3f", tf / gemm) : "n/a"), mem, s}' | tee -a "$summary"
}

gpt2_speed() {
  local batches=$2 B
  # Part 3's budget: the peaks take seconds; each trainer run is a start-up
  # (CUDA, cuBLASLt, 124M initialized, 5-10 s) and a few steps of 16 or 64
  # x 1024 tokens (at llm.c's 320k tokens/s 50 ms and 200 ms; at the old 23k
  # tokens/s 0.7 s and 2.8 s): 2 warm-up steps, then 6 (B 16) or 4 (B 64)
  # measured. B 16 for both trainers first, then B 64.
  part "3 GPT-2 124M, T 1024, bf16, stage 3, np 1 (zeroshard and llm.c on one shard)" "$1"
  shard=$work/shard_000000.bin
  export shard
  step "$logs/3-gpt2/shard.log" 20 make_shard "$shard" $((1 << 21))
  [ -f "$shard" ] || { say "  could not write the token shard: $(tail -2 "$logs/3-gpt2/shard.log")"; return; }
  if [ "$mode" = check ]; then
    step "$logs/3-gpt2/peaks.log" 25 "$build/bench/bench_gpu_peaks"
    gemm_peak=$(sed -nE 's/^gemm peak: ([0-9.]+) .*/\1/p' "$logs/3-gpt2/peaks.log")
    pcie_h2d=$(sed -nE 's/^pcie host->device: ([0-9.]+) .*/\1/p' "$logs/3-gpt2/peaks.log")
    pcie_d2h=$(sed -nE 's/^pcie device->host: ([0-9.]+) .*/\1/p' "$logs/3-gpt2/peaks.log")
    say "  cuBLASLt bf16 GEMM peak ${gemm_peak:-?} TFLOP/s (best shape of $(grep -c '^gemm bf16' "$logs/3-gpt2/peaks.log")); pinned PCIe host->device ${pcie_h2d:-?} GB/s, device->host ${pcie_d2h:-?} GB/s ($(verdict $step_rc))"
    grep -h '^gemm bf16' "$logs/3-gpt2/peaks.log" | sed 's/^/    /' | tee -a "$summary"
  fi
  say "  MFU-spec: against the spec sheet's dense bf16 peak ($([ "$spec_peak" = 0 ] && echo "unknown for this GPU: set GPU_PEAK_TFLOPS" || echo "$spec_peak TFLOP/s")); MFU-gemm: against the cuBLASLt peak measured here (${gemm_peak:-not measured}); FLOP = zeroshard's 6N + 12LCT per token for both trainers"
  say "$(printf '  %-9s %3s %9s %10s %8s %9s %9s %9s' trainer B ms/step tokens/s TFLOP/s MFU-spec MFU-gemm 'peak MiB')"
  [ -x "$llmc" ] || say "  llm.c not carried (no executable .gpu/llmc/train_gpt2cu${carried:+ in $carried}${GPU_CHECK_LLMC:+, nor GPU_CHECK_LLMC=$GPU_CHECK_LLMC}): its rows are missing"
  for B in $batches; do
    local steps=8
    [ "$B" -ge 64 ] && steps=6
    timed_run "$logs/3-gpt2/zs-B$B.log" $((B >= 64 ? 50 : 35)) zeroshard "$B" "$steps"
    [ -x "$llmc" ] && timed_run "$logs/3-gpt2/llmc-B$B.log" $((B >= 64 ? 35 : 25)) llm.c "$B" "$steps"
  done
  # GPT2_CUDA_PROFILE (examples/nn/nn_cuda_profile.cu): the device time
  # of every op of one training micro-step after 2 warm-up ones, on stderr
  # at the end of the run, every row starting "profile " (op calls total_ms
  # ms_per_step pct_step, longest first, then all_ops, outside_ops, step),
  # and the fused/fallback epilogue counts ("fusion: ..."). The profiled
  # step adds events but no host wait; it is one of the 6 or 4 medianed.
  for B in $batches; do
    local f=$logs/3-gpt2/zs-B$B.log
    [ -f "$f" ] || continue
    grep -m1 -h '^fusion:' "$f" | sed "s/^/  B $B: /" | tee -a "$summary"
    grep -m1 -h '^gpt2 cuda profile' "$f" | sed "s/^/  B $B: /" | tee -a "$summary"
    { grep -h '^profile ' "$f" | grep -vE '^profile (all_ops|outside_ops|step) ' | head -13
      grep -hE '^profile (all_ops|outside_ops|step) ' "$f"; } | sed "s/^/    B $B: /" | tee -a "$summary"
  done
}

# ------------------------------------------------------ 4. offload
offload_run() { # MODEL B STEPS METRICS [overrides]
  local model=$1 B=$2 steps=$3 metrics=$4
  shift 4
  mpirun --bind-to none -np 1 "$build/examples/gpt2/gpt2_train" "$root/configs/gpt2_124m.cfg" \
    backend=\"cuda\" "app.model=\"$model\"" zero.stage=3 precision.dtype=\"bf16\" app.seq_len=1024 \
    app.batch_size="$B" app.recompute=true app.steps="$steps" scheduler.total_steps=$((steps + 10)) \
    scheduler.warmup_steps=1 app.log_every=1 app.val_every=0 app.val_batches=1 app.sample_tokens=0 \
    "app.train_data=\"$shard\"" "app.val_data=\"$shard\"" "log.metrics_file=\"$metrics\"" "$@"
}
# Each output line stamped with the time since launch (bash's EPOCHREALTIME).
offload_start() { # METRICS
  local t0=$EPOCHREALTIME
  echo "launch at $t0"
  offload_run 1558M 4 1 "$1" 'offload.optimizer="host"' log.level=\"info\" 2>&1 |
    while IFS= read -r line; do
      awk -v a="$EPOCHREALTIME" -v b="$t0" -v l="$line" 'BEGIN {printf "[+%7.2f s] %s\n", a - b, l}'
    done
  return "${PIPESTATUS[0]}"
}
export -f offload_run offload_start

# Medians over the steps after the first two of a metrics file: host update
# (ms) and bytes copied per step.
offload_medians() {
  python3 - "$1" <<'PY' 2>/dev/null
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][2:]
off = [l.get("offload", {}) for l in lines]
med = lambda v: statistics.median(v) if v else 0.0
print(med([o.get("host_update_ms", 0.0) for o in off]), med([o.get("copied_bytes", 0) for o in off]))
PY
}

offload() {
  # Part 4's budget: 774M starts in 5-15 s (12 GB of pinned host state with
  # the optimizer on the host) and runs 5 steps of B 8 (about 50 TFLOP each
  # with recompute: 0.2-1 s); 1558M is started once with the host tier and
  # stopped after its first step (25 GB pinned): the start is what is timed.
  part "4 offload: 774M optimizer on the host vs none; 1558M time to the first step" "$1"
  if [ ! -f "${shard:-}" ]; then
    shard=$work/shard_000000.bin
    export shard
    step "$logs/4-offload/shard.log" 20 make_shard "$shard" $((1 << 21))
  fi
  local d=$logs/4-offload none_ms host_ms upd copied
  step "$d/774M-none.log" 35 offload_run 774M 8 5 "$d/774M-none.jsonl"
  none_ms=$(median_ms "$d/774M-none.log" "$zs_ms")
  say "  774M B 8 none: $(verdict $step_rc) ($step_s s), ${none_ms:-?} ms/step"
  step "$d/774M-host.log" 45 offload_run 774M 8 5 "$d/774M-host.jsonl" 'offload.optimizer="host"'
  host_ms=$(median_ms "$d/774M-host.log" "$zs_ms")
  read -r upd copied < <(offload_medians "$d/774M-host.jsonl")
  say "  774M B 8 host (overlapped): $(verdict $step_rc) ($step_s s), ${host_ms:-?} ms/step, host update ${upd:-?} ms, ${copied:-?} bytes copied per step"
  if [ -n "$none_ms" ] && [ -n "$host_ms" ]; then
    awk -v n="$none_ms" -v h="$host_ms" -v u="${upd:-0}" -v c="${copied:-0}" -v g1="${pcie_h2d:-0}" \
        -v g2="${pcie_d2h:-0}" \
      'BEGIN {g = (g1 > 0 && g2 > 0) ? (g1 < g2 ? g1 : g2) : 0;
              pcie = g > 0 ? c / (g * 1e9) * 1000 : 0;
              b = n; if (u > b) b = u; if (pcie > b) b = pcie;
              printf "  bound = max(GPU step %.1f, PCIe %s, host Adam %.1f) = %.1f ms; host step / bound = %.3f (goal <= 1.15); host / none = %.3f\n",
                     n, (g > 0 ? sprintf("%.1f (%.2f GB at %.1f GB/s)", pcie, c / 1e9, g) : "not measured"), u, b, h / b, h / n}' |
      tee -a "$summary"
  fi
  step "$d/1558M-start.log" 60 offload_start "$d/1558M-start.jsonl"
  local first
  first=$(grep -m1 -E '^\[\+ *[0-9.]+ s\] step +1/' "$d/1558M-start.log" | sed -nE 's/^\[\+ *([0-9.]+) s\].*/\1/p')
  say "  1558M host tier: $(verdict $step_rc) ($step_s s); launch to the first step's line: ${first:-?} s (goal <= 15 s)"
  grep -h -i "first optimizer step\|first step\|page-locked memory" "$d/1558M-start.log" | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
}

# ------------------------------------------------------ the run
tests_failed=0
if [ "$mode" = check ]; then
  # 445 s of the 450: 150 + 60 + 110 + 125, the last 5 s for the archive.
  cuda_tests 150
  sanitizer 60
  gpt2_speed 110 "16 64"
  offload 125
else
  # The confirmation, 155 s of 160: the tests (the last ones in the order
  # above may not fit; GPU_CHECK_TESTS narrows the list), then one speed
  # line (B 16: a start-up and 8 short steps per trainer).
  cuda_tests 115
  gpt2_speed 40 "16"
fi
say "$name: done after $(($(now) - t_start)) s; $tests_failed CUDA test(s) failed; archive $out/$name.tar.gz"
[ "$tests_failed" = 0 ]
