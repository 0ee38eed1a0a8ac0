#!/bin/sh
# The memory plan claimed for configs/gpt3_6.7b_offload.cfg (docs/GPU.md, "A
# model too large for one GPU"), checked with zs-estimate on one rank:
#   run_6p7b_plan.sh <zs-estimate> <config> <work dir>
# (a) without offload the runtime's device bytes exceed the device (80 GB);
# (b) with the configuration's own offload setting they fit;
# (c) the host bytes of that setting, plus a reserve for the OS, fit the
#     host (128 GiB, the GPU machines' memory).
# zs-estimate takes no model sizes from a configuration's app group, so the
# layout comes from an llm.c model file written here with the config's
# app.n_layer, n_head, n_embd, vocab and block_size: a 1024-byte header and
# a sparse tail of the size the header implies (no disk blocks; removed at
# the end). An app.model preset is passed as --preset instead.
# DEVICE_BYTES, HOST_BYTES and OS_RESERVE_BYTES override the limits.
set -u
tool=$1 cfg=$2 work=$3
device=${DEVICE_BYTES:-80000000000}            # 80 GB: an H100's 80 GB, rounded down
host=${HOST_BYTES:-137438953472}               # 128 GiB
reserve=${OS_RESERVE_BYTES:-17179869184}       # 16 GiB for the OS, the CUDA driver, the data
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
rm -rf "$work" && mkdir -p "$work" || exit 1
trap 'rm -f "$work/model.bin"' EXIT

# --- the configuration's settings (comments dropped, one line) ---------------
text=$(sed 's/#.*//' "$cfg" | tr '\n' ' ')
key() { # <group> <key>: the value of group.key ("" if absent), quotes removed
    echo "$text" | sed -n "s/.*$1 *[:=] *{\([^}]*\)}.*/\1/p" |
        tr ';' '\n' | sed -n "s/^ *$2 *= *\"\{0,1\}\([^\" ]*\)\"\{0,1\} *\$/\1/p" | head -n 1
}
stage=$(key zero stage)
mode=$(key offload optimizer)
params_to=$(key offload params)
model=$(key app model)
L=$(key app n_layer) NH=$(key app n_head) C=$(key app n_embd) V=$(key app vocab) T=$(key app block_size)
: "${mode:=none}" "${params_to:=none}"
case $mode in none) col=0 ;; host) col=1 ;; nvme) col=2 ;;
    *) echo "FAIL: $cfg: offload.optimizer \"$mode\" unknown" >&2; exit 1 ;; esac
[ -n "$stage" ] || { echo "FAIL: $cfg sets no zero.stage" >&2; exit 1; }

# --- the layout ---------------------------------------------------------------
if [ -n "$model" ]; then
    layout="--preset $model"
else
    for v in "$L" "$NH" "$C" "$V" "$T"; do
        case $v in '' | *[!0-9]*) echo "FAIL: $cfg: app.n_layer, n_head, n_embd, vocab or" \
            "block_size missing or not an integer ($L $NH $C $V $T)" >&2; exit 1 ;; esac
    done
    le32() { # the integer $1 as 4 little-endian bytes
        printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 & 255)) $((($1 >> 8) & 255)) \
            $((($1 >> 16) & 255)) $((($1 >> 24) & 255)))"
    }
    Vp=$(((V + 127) / 128 * 128)) # llm.c pads the vocabulary to a multiple of 128
    { le32 20240326; le32 3; le32 "$T"; le32 "$V"; le32 "$L"; le32 "$NH"; le32 "$C"; le32 "$Vp"
      head -c 992 /dev/zero; } > "$work/model.bin" || exit 1
    # fp32 values: wte [Vp][C], wpe [T][C], L blocks of 12 C^2 + 13 C, ln_f 2 C.
    numel=$((Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C))
    dd if=/dev/null of="$work/model.bin" bs=1 seek=$((1024 + 4 * numel)) 2> /dev/null || exit 1
    layout="--llmc $work/model.bin"
fi

# --- the plan -------------------------------------------------------------------
# shellcheck disable=SC2086 # $layout is two words
"$tool" $layout --config "$cfg" --world 1 --device-memory "$device" > "$work/plan.txt" \
    2> "$work/plan.err" || { echo "FAIL: zs-estimate exited $?: $(cat "$work/plan.err")" >&2; exit 1; }
table=$(sed -n "/^stage $stage on 1 rank /,/^\$/p" "$work/plan.txt")
[ -n "$table" ] || { echo "FAIL: no stage-$stage table in: $(cat "$work/plan.txt")" >&2; exit 1; }
# Each column is "human exact" (3 fields); column k's exact bytes of a tag.
# The device's share is the tags zs-estimate's --device-memory counts; the
# host's is the rest of the total (host_state, host_params, offload_staging,
# comm's pinned staging).
bytes() { echo "$table" | awk -v tag="$1" -v k="$2" '$1 == tag { print $(4 + 3 * k) }'; }
device_of() {
    sum=0
    for tag in params grads master optim live_params live_grads live_free; do
        b=$(bytes $tag "$1")
        case $b in '' | *[!0-9]*) echo "FAIL: no $tag bytes in column $1" >&2; echo 0; return ;; esac
        sum=$((sum + b))
    done
    echo $sum
}
total_of() { echo "$table" | awk -v k="$1" '$1 == "total" { print $(6 + 3 * k) }'; }
gb() { awk -v b="$1" 'BEGIN { printf "%.1f GB (%.1f GiB)", b / 1e9, b / 1073741824 }'; }
none_device=$(device_of 0)
mode_device=$(device_of $col)
mode_host=$(($(total_of $col) - mode_device))
fit_part() { sed -n "/offload $1:\$/,/^device memory/p" "$work/plan.txt"; }

echo "config $cfg: stage $stage, offload.optimizer \"$mode\", offload.params \"$params_to\""
sed -n "1,2p" "$work/plan.txt" | tr -s " "
echo "device bytes per rank, 1 rank, no offload:  $none_device = $(gb "$none_device") (device $(gb "$device"))"
echo "device bytes per rank, 1 rank, offload $mode: $mode_device = $(gb "$mode_device")"
echo "host bytes per rank, offload $mode:           $mode_host = $(gb "$mode_host")" \
     "(+ $(gb "$reserve") reserve <= $(gb "$host")?)"

# (a) no offload does not fit, in the bytes and in zs-estimate's own answer.
[ "$none_device" -gt "$device" ] || fail "(a) without offload $none_device bytes fit $device"
fit_part none | grep -q "^  stage $stage does not fit on 1 rank" ||
    fail "(a) zs-estimate does not say stage $stage without offload does not fit: $(fit_part none)"
# (b) the configuration's offload fits.
[ "$mode" != none ] || fail "(b) $cfg offloads nothing (offload.optimizer = \"none\")"
[ "$mode_device" -le "$device" ] || fail "(b) with offload $mode $mode_device bytes > $device"
fit_part "$mode" | grep -q "^  stage $stage fits on 1 rank" ||
    fail "(b) zs-estimate does not say stage $stage with offload $mode fits: $(fit_part "$mode")"
# (c) the host holds the offloaded state with room for the OS.
[ "$mode_host" -gt 0 ] && [ $((mode_host + reserve)) -le "$host" ] ||
    fail "(c) host bytes $mode_host + reserve $reserve > $host"

[ "$fails" -eq 0 ] && echo "PASS" && exit 0
echo "$fails check(s) failed; zs-estimate's output is in $work/plan.txt" >&2
exit 1
