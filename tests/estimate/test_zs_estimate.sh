#!/bin/sh
# zs-estimate as a user runs it:
#   test_zs_estimate.sh <zs-estimate> <zs-ckpt> <make_fixture> <work dir> [<real checkpoint root>]
# - GPT-2 124M on 2 ranks in bf16: the stage-3 model state is 16 x the shard
#   (2 + 2 + 4 + 8 bytes per owned element), the shard is Psi/2, and the
#   paper's formula line shows (2+2+K)Psi/N with the same bytes;
# - --device-memory: the smallest world size found is one where the stage
#   fits and one rank fewer is one where it does not (asked with --world);
# - a synthetic checkpoint (make_fixture), the runtime's own (make_real_ckpt,
#   when given) and a zs-ckpt export are read: units and parameters agree
#   with zs-ckpt info; a tiny llm.c file gives GPT-2's layout;
# - QLoRA (--qlora, issue 43): the frozen tag of Llama tiny equals the records'
#   formula (per quantized unit and shard of S elements: the values, two per
#   byte for nf4 or one for int8, rounded up to 4 bytes, then an fp32 scale
#   per 64 elements, or with zero.frozen_double_quant an int8 code per 64
#   rounded up to 4 bytes and an fp32 scale per 256 codes; this rank's in
#   stage 3, every shard's below) plus the
#   compute-dtype frozen units; Llama 3.1 70B QLoRA (NF4 base, LoRA r 64 on
#   every Linear, bf16, recomputation, B 1, T 2048) on 2 x 24 GiB does not fit
#   with everything on the device and fits in stage 3 with the base and the
#   optimizer on the host (docs/QLORA.md);
# - llama_train's workspace (--batch, --seq) is added to the device total and
#   to what --device-memory must fit (its rows: test_estimate_workspace);
# - bytes per step follow the layout's flags (frozen units reduce nothing);
# - usage errors exit 2 with a message, unreadable inputs exit 1 naming the file.
set -u
tool=$1 ckpt=$2 fixture=$3 work=$4 real=${5:-}
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
rm -rf "$work" && mkdir -p "$work" || exit 1

# --- 124M, world 2, bf16 ----------------------------------------------------
"$tool" --preset 124M --world 2 --dtype bf16 > "$work/124M.txt" 2> "$work/124M.err" ||
    fail "124M exited $?: $(cat "$work/124M.err")"
stage3=$(sed -n '/^stage 3 on 2 ranks/,/^$/p' "$work/124M.txt")
# Columns: none, host, nvme, each "human exact"; the none column's exact bytes.
params=$(echo "$stage3" | awk '$1 == "params" {print $4}')
state=$(echo "$stage3" | awk '$1 == "model" && $2 == "state" {print $5}')
shard=$(echo "$stage3" | awk '$1 == "shard" {print $4}')
[ -n "$shard" ] && [ -n "$state" ] || fail "no stage-3 shard or model state in: $stage3"
[ "$state" = "$((16 * shard))" ] || fail "stage-3 model state $state != 16 x shard $shard"
[ "$params" = "$((2 * shard))" ] || fail "stage-3 params $params != 2 x shard $shard"
[ "$shard" = "$((124439808 / 2))" ] || fail "shard $shard != Psi/2 (GPT-2 124M pads nothing)"
echo "$stage3" | grep -q "ZeRO paper  *(2+2+K)Psi/N = $state bytes .*K = 12" ||
    fail "no paper formula line with $state bytes in: $stage3"
for s in 0 1 2 3; do
    grep -q "^stage $s on 2 ranks  *offload: none  *offload: host  *offload: nvme" "$work/124M.txt" ||
        fail "no stage $s table"
done
# The nvme column: master and moments (12 bytes per shard element, whole
# chunks) in nvme_state, which the memory total leaves out; host memory
# keeps the new bf16 parameters before they go back (2 bytes per shard
# element) and the tier's buffers.
nvme_state=$(echo "$stage3" | awk '$1 == "nvme_state" {print $NF}')
nvme_total=$(echo "$stage3" | awk '$1 == "total" {print $NF}')
none_total=$(echo "$stage3" | awk '$1 == "total" {print $6}')
[ -n "$nvme_state" ] && [ "$nvme_state" -ge "$((12 * shard))" ] ||
    fail "stage-3 nvme_state $nvme_state < 12 x shard $shard"
[ -n "$nvme_total" ] && [ "$nvme_total" -lt "$((none_total - 12 * shard + 2 * shard + 100000000))" ] ||
    fail "stage-3 total with nvme $nvme_total counts the disk (none: $none_total)"
grep -q "^  nvme_state  *0 B  *0  *0 B  *0  *n/a" "$work/124M.txt" || fail "stage 0 nvme column is not n/a"

# --- the inverse question ---------------------------------------------------
"$tool" --preset 124M --dtype bf16 --device-memory 1GiB > "$work/fit.txt" 2>&1 ||
    fail "--device-memory exited $?: $(cat "$work/fit.txt")"
# The "offload none" answers come first (then "offload host").
none_part() { sed -n '/offload none:$/,/offload host:$/p' "$1"; }
n=$(none_part "$work/fit.txt" | sed -n 's/^  stage 3 fits from \([0-9]*\) ranks\{0,1\}: .* per rank$/\1/p')
if [ -z "$n" ] || [ "$n" -lt 2 ]; then
    fail "expected 'stage 3 fits from N ranks' (N >= 2) in: $(cat "$work/fit.txt")"
else
    "$tool" --preset 124M --dtype bf16 --device-memory 1GiB --world "$n" > "$work/fit_n.txt" 2>&1
    none_part "$work/fit_n.txt" | grep -q "^  stage 3 fits on $n ranks" ||
        fail "stage 3 should fit on $n ranks: $(cat "$work/fit_n.txt")"
    "$tool" --preset 124M --dtype bf16 --device-memory 1GiB --world $((n - 1)) > "$work/fit_m.txt" 2>&1
    none_part "$work/fit_m.txt" | grep -q "^  stage 3 does not fit on $((n - 1)) rank" ||
        fail "stage 3 should not fit on $((n - 1)) ranks: $(cat "$work/fit_m.txt")"
fi
none_part "$work/fit.txt" | grep -q "^  stage 0 does not fit on up to 65536 ranks" ||
    fail "stage 0 (1.9 GiB at any world size) should not fit 1 GiB: $(cat "$work/fit.txt")"
"$tool" --preset 124M --dtype bf16 --device-memory 80GB > "$work/fit80.txt" 2>&1
grep -q "^  stage 0 fits from 1 rank: " "$work/fit80.txt" ||
    fail "80 GB holds stage 0 on 1 rank: $(cat "$work/fit80.txt")"
# With the optimizer on the host, 124M's device share fits 1 GiB on 1 rank.
sed -n '/offload host:$/,$p' "$work/fit.txt" | grep -q "^  stage 3 fits from 1 rank: " ||
    fail "offload host: stage 3 should fit 1 GiB on 1 rank: $(cat "$work/fit.txt")"

# --- checkpoints and safetensors --------------------------------------------
# "layout N units, P parameters, E elements" (zs-ckpt info) against
# "N units, P tensors, Psi = E parameters" (zs-estimate).
check_ckpt() { # <checkpoint dir> <name>
    "$ckpt" info "$1" > "$work/$2.info" 2>&1 || { fail "zs-ckpt info $1 failed"; return; }
    want=$(sed -n 's/^layout  *\([0-9]*\) units\{0,1\}, \([0-9]*\) parameters\{0,1\}, \([0-9]*\) elements$/\1 \2 \3/p' "$work/$2.info")
    "$tool" --checkpoint "$1" --world 3 > "$work/$2.txt" 2>&1 || fail "--checkpoint $1 exited $?: $(cat "$work/$2.txt")"
    got=$(sed -n 's/^  *\([0-9]*\) units\{0,1\}, \([0-9]*\) tensors\{0,1\}, Psi = \([0-9]*\) parameters.*/\1 \2 \3/p' "$work/$2.txt")
    [ -n "$want" ] && [ "$want" = "$got" ] || fail "$2: zs-ckpt info says '$want', zs-estimate '$got'"
    grep -q "^stage 3 on 3 ranks" "$work/$2.txt" || fail "$2: no stage-3 table"
}
"$fixture" "$work/fixture" "$work/fixture.f32" > /dev/null || fail "make_fixture failed"
check_ckpt "$work/fixture" fixture
check_ckpt "$work/fixture/step_00000010" fixture_step
[ -n "$real" ] && check_ckpt "$real" real
"$ckpt" export --quiet "$work/fixture" "$work/export.safetensors" > /dev/null || fail "export failed"
"$tool" "$work/export.safetensors" --world 2 --unit-per-tensor > "$work/st.txt" 2>&1 ||
    fail "safetensors exited $?: $(cat "$work/st.txt")"
grep -q "^  *3 units, 3 tensors, Psi = 5283 parameters" "$work/st.txt" ||
    fail "safetensors --unit-per-tensor layout: $(head -3 "$work/st.txt")"

# An llm.c model file (header: magic, version 3, maxT 4, V 16, L 1, NH 2, C 8,
# Vp 16; then 1048 zero floats): GPT-2's table gives 2 units, 16 tensors.
if command -v python3 > /dev/null; then
    python3 -c "
import struct, sys
h = [20240326, 3, 4, 16, 1, 2, 8, 16] + [0] * 248
open(sys.argv[1], 'wb').write(struct.pack('<256i', *h) + bytes(4 * 1048))" "$work/tiny.bin"
    "$tool" --llmc "$work/tiny.bin" --world 2 > "$work/llmc.txt" 2>&1 ||
        fail "--llmc exited $?: $(cat "$work/llmc.txt")"
    grep -q "^  *2 units, 16 tensors, Psi = 1048 parameters" "$work/llmc.txt" ||
        fail "llm.c layout: $(head -3 "$work/llmc.txt")"
fi

# --- QLoRA: the frozen tag against the records' formula -----------------------
# Llama tiny (C 128, F 352, 4 query and 2 key-value heads of 32, vocab 256, 4
# blocks, untied head) in bf16: zero.align is raised to the block (64); each
# block's matrices make one quantized unit, its two norms a unit "<block>.norms",
# the embedding and the head (model.norm, lm_head) units of their own.
pad() { echo $(( ($1 + $2 - 1) / $2 * $2 )); }
record() { # <shard elements> <nf4|int8|nf4dq>: values rounded up to 4 bytes, then the
    # scales: fp32, or (double quantization) int8 codes rounded up to 4 bytes and an fp32
    # scale per 256 codes
    if [ "$2" = int8 ]; then v=$1; else v=$(( ($1 + 1) / 2 )); fi
    blocks=$(( ($1 + 63) / 64 ))
    if [ "$2" = nf4dq ]; then
        echo $(( $(pad "$v" 4) + $(pad "$blocks" 4) + 4 * ((blocks + 255) / 256) ))
    else
        echo $(( $(pad "$v" 4) + 4 * blocks ))
    fi
}
frozen_row() { # <stage> <world> <file>: the frozen tag's exact bytes, offload none
    sed -n "/^stage $1 on $2 rank/,/^\$/p" "$3" | awk '$1 == "frozen" {print $4}'
}
for w in 2 3; do
    for f in nf4 int8 nf4dq; do
        dq=false
        [ $f = nf4dq ] && dq=true
        "$tool" --llama tiny --lora 4 --qlora ${f%dq} --dtype bf16 --world $w \
            --set zero.frozen_double_quant=$dq > "$work/qlora_$f$w.txt" 2>&1 ||
            fail "--qlora $f --world $w exited $?: $(cat "$work/qlora_$f$w.txt")"
        m=$((w * 64))
        blk=$(pad $((2 * 16384 + 2 * 8192 + 3 * 45056)) $m)           # q, o; k, v; gate, up, down
        rec=$(record $((blk / w)) $f)
        compute=$(( $(pad 32768 $m) + $(pad $((128 + 32768)) $m) + 4 * $(pad 256 $m) ))
        # Double quantization: the decoded scales of one record (its blocks
        # and a group more, fp32) beside the records.
        decoded=0
        [ $f = nf4dq ] && decoded=$(( 4 * ((blk / w + 63) / 64 + 256) ))
        want3=$(( 4 * rec + 2 * compute / w + decoded ))
        want1=$(( w * 4 * rec + 2 * compute + decoded ))
        got3=$(frozen_row 3 $w "$work/qlora_$f$w.txt")
        got1=$(frozen_row 1 $w "$work/qlora_$f$w.txt")
        [ "$got3" = "$want3" ] || fail "--qlora $f, $w ranks, stage 3: frozen $got3, formula $want3"
        [ "$got1" = "$want1" ] || fail "--qlora $f, $w ranks, stage 1: frozen $got1, formula $want1"
    done
done
grep -q "^  *14 units, 55 tensors" "$work/qlora_nf42.txt" ||
    fail "tiny QLoRA: 6 units + 4 norms units + 4 adapter units: $(head -3 "$work/qlora_nf42.txt")"
grep -q "QLoRA: the matrices of 4 blocks stored nf4 (4.500 bits per element" "$work/qlora_nf42.txt" ||
    fail "no QLoRA line in: $(head -8 "$work/qlora_nf42.txt")"
grep -q "stored nf4 (4.127 bits per element: a double-quantized scale" "$work/qlora_nf4dq2.txt" ||
    fail "no double-quantized QLoRA line in: $(head -8 "$work/qlora_nf4dq2.txt")"
grep -q "override zero.frozen_storage=\"nf4\" (--qlora)" "$work/qlora_nf42.txt" ||
    fail "--qlora nf4 did not set zero.frozen_storage"
# --set wins over --qlora: the same layout kept in the compute dtype.
"$tool" --llama tiny --lora 4 --qlora nf4 --dtype bf16 --world 2 --set 'zero.frozen_storage="compute"' \
    > "$work/qlora_compute.txt" 2>&1 || fail "--qlora with frozen_storage compute exited $?"
grep -q "zero.frozen_storage = \"compute\": the block matrices are kept in bf16" "$work/qlora_compute.txt" ||
    fail "no compute note in: $(head -8 "$work/qlora_compute.txt")"
# Stage 3 gathers the records: fewer bytes per step than the compute dtype's.
bytes3() { sed -n '/^stage 3 on/,/^$/p' "$1" | awk '$1 == "bytes" {gsub(/[(),]/, "", $8); print $8}'; }
b_nf4=$(bytes3 "$work/qlora_nf42.txt") b_bf16=$(bytes3 "$work/qlora_compute.txt")
[ -n "$b_nf4" ] && [ -n "$b_bf16" ] && [ "$b_nf4" -lt "$b_bf16" ] ||
    fail "stage-3 bytes per step: nf4 '$b_nf4', bf16 '$b_bf16'"
# Frozen units reduce nothing: LoRA's stage-0 all-reduce is its adapters'.
"$tool" --llama tiny --world 2 > "$work/tiny_full.txt" 2>&1 || fail "tiny exited $?"
"$tool" --llama tiny --world 2 --lora 4 > "$work/tiny_lora.txt" 2>&1 || fail "tiny --lora exited $?"
bytes0() { sed -n '/^stage 0 on/,/^$/p' "$1" | awk '$1 == "bytes" {gsub(/[(),]/, "", $8); print $8}'; }
b_full=$(bytes0 "$work/tiny_full.txt") b_lora=$(bytes0 "$work/tiny_lora.txt")
[ -n "$b_lora" ] && [ -n "$b_full" ] && [ $((b_lora * 20)) -lt "$b_full" ] ||
    fail "stage-0 bytes per step: LoRA '$b_lora', full '$b_full' (frozen units reduced?)"

# --- QLoRA: the 70B plan of docs/QLORA.md ---------------------------------------
# The page's four commands; the numbers it quotes (exact bytes per rank).
plan="--llama llama-3.1-70b --dtype bf16 --lora 64 --lora-targets all-linear --qlora nf4"
plan="$plan --batch 1 --seq 2048 --recompute --world 2 --stage 3 --device-memory 24GiB"
# shellcheck disable=SC2086
"$tool" $plan --set 'backend="cuda"' --set zero.max_live_units=3 > "$work/plan_device.txt" 2>&1 ||
    fail "70B plan exited $?: $(cat "$work/plan_device.txt")"
# shellcheck disable=SC2086
"$tool" $plan --set 'backend="cuda"' --set zero.max_live_units=3 --set zero.stage=3 \
    --set 'offload.params="host"' > "$work/plan_host.txt" 2>&1 ||
    fail "70B plan, host exited $?: $(cat "$work/plan_host.txt")"
# shellcheck disable=SC2086
"$tool" $plan --set 'backend="cuda"' --set zero.max_live_units=3 --set zero.stage=3 \
    --set 'offload.params="host"' --set zero.live_bytes=3221225472 > "$work/plan_live.txt" 2>&1 ||
    fail "70B plan, 3 GiB live exited $?: $(cat "$work/plan_live.txt")"
# shellcheck disable=SC2086
"$tool" $plan --set 'backend="cuda"' --set zero.max_live_units=3 --set zero.stage=3 \
    --set 'offload.params="host"' --set zero.frozen_double_quant=true > "$work/plan_dq.txt" 2>&1 ||
    fail "70B plan, double quantization exited $?: $(cat "$work/plan_dq.txt")"
none_part "$work/plan_device.txt" | grep -q "^  stage 3 does not fit on 2 ranks: .* (runtime .* + llama_train workspace " ||
    fail "70B QLoRA with everything on the device should not fit 24 GiB: $(cat "$work/plan_device.txt")"
for f in plan_host plan_live plan_dq; do
    sed -n '/offload host:$/,/offload nvme:$/p' "$work/$f.txt" | grep -q "^  stage 3 fits on 2 ranks: " ||
        fail "$f: 70B QLoRA, base and optimizer on the host, should fit 24 GiB: $(cat "$work/$f.txt")"
done
row() { # <file> <row name> <column 1-3>: the row's exact bytes in that column
    sed -n '/^stage 3 on 2 ranks/,/^$/p' "$1" |
        awk -v name="$2" -v col="$3" 'index($0, "  " name " ") == 1 {
            n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $(i - 1) ~ /B$/) { n++; if (n == col) print $i } }'
}
check_row() { # <file> <row> <column> <bytes quoted>
    got=$(row "$work/$1.txt" "$2" "$3")
    [ "$got" = "$4" ] || fail "$1: $2 (column $3) is '$got'; docs/QLORA.md quotes $4"
}
check_row plan_device "frozen" 1 21354520576
check_row plan_device "live_free" 1 6366216192
check_row plan_device "llama_train workspace" 1 5541233664
check_row plan_device "device total" 1 39888970752
check_row plan_host "device total" 2 11907449856
check_row plan_host "host_params" 2 22182895616
check_row plan_host "host_state" 2 5798625280
check_row plan_host "host total" 2 27981520896
check_row plan_live "device total" 2 8762459136
check_row plan_dq "device total" 2 11934189568
check_row plan_dq "host_params" 2 20613669888
check_row plan_dq "host total" 2 26412295168
# The device total is the device's tags plus the workspace.
wsb=$(row "$work/plan_host.txt" "llama_train workspace" 2)
live=$(row "$work/plan_host.txt" "live_free" 2)
dev=$(row "$work/plan_host.txt" "device total" 2)
[ -n "$wsb" ] && [ "$dev" = "$((wsb + live))" ] ||
    fail "70B, offload host: device total $dev != workspace $wsb + live $live"

# --- errors -----------------------------------------------------------------
expect() { # <exit status> <text in stderr> <args...>
    want=$1 text=$2
    shift 2
    "$tool" "$@" > "$work/err.out" 2> "$work/err.txt"
    got=$?
    [ "$got" = "$want" ] || fail "zs-estimate $*: exit $got, expected $want"
    grep -q -- "$text" "$work/err.txt" || fail "zs-estimate $*: no '$text' in: $(cat "$work/err.txt")"
}
expect 2 "missing the layout" --world 2
expect 2 "unknown --preset \"999M\"" --preset 999M --world 2
expect 2 "give --world" --preset 124M
expect 2 "--world \"0\"" --preset 124M --world 0
expect 2 "--device-memory \"80XB\"" --preset 124M --device-memory 80XB
expect 2 "--world needs a value" --preset 124M --world
expect 2 "unknown option --frobnicate" --preset 124M --world 2 --frobnicate
expect 2 "give one layout" --preset 124M --llmc x.bin --world 2
expect 2 "no_such_group" --preset 124M --world 2 --set no_such_group.key=1
expect 1 "$work/missing.bin" --llmc "$work/missing.bin" --world 2
echo "not a safetensors file" > "$work/bad.safetensors"
expect 1 "$work/bad.safetensors" --safetensors "$work/bad.safetensors" --world 2
expect 1 "$work/nowhere.cfg" --preset 124M --world 2 --config "$work/nowhere.cfg"
expect 2 "--qlora needs --lora" --llama tiny --world 2 --qlora nf4
expect 2 "unknown --qlora \"nf5\"" --llama tiny --world 2 --lora 4 --qlora nf5
expect 2 "apply to Llama layouts" --preset 124M --world 2 --lora 4 --qlora nf4
expect 2 "apply to Llama layouts" --preset 124M --world 2 --batch 2
expect 2 "longer than" --llama tiny --world 2 --seq 257
expect 2 "--lora-dropout \"1\"" --llama tiny --world 2 --lora 4 --lora-dropout 1
printf 'optimizer: { lr = 0.001; };\nzero: { frozen_storage = "int8"; };\n' > "$work/int8.cfg"
expect 2 "sets zero.frozen_storage = \"int8\"" --llama tiny --world 2 --lora 4 --qlora nf4 \
    --config "$work/int8.cfg"
"$tool" --help | grep -q -- "--device-memory SIZE" || fail "--help does not document --device-memory"
"$tool" --help | grep -q -- "--qlora nf4|int8" || fail "--help does not document --qlora"

if [ "$fails" -ne 0 ]; then
    echo "test_zs_estimate: $fails failure(s)" >&2
    exit 1
fi
echo "test_zs_estimate: passed"
