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
"$tool" --help | grep -q -- "--device-memory SIZE" || fail "--help does not document --device-memory"

if [ "$fails" -ne 0 ]; then
    echo "test_zs_estimate: $fails failure(s)" >&2
    exit 1
fi
echo "test_zs_estimate: passed"
