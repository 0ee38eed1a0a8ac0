#!/usr/bin/env bash
# The CPU backend's NF4 dequantization beside int4's (issue 43): bench/comm/
# bench_quantize runs the int8 and int4 formats; this builds a copy of it in
# a scratch directory whose format loop runs int4 and then NF4 (bits =
# ZS_K_QUANT_NF4, printed as "int-4"), with the build's own flags and link
# line (BUILD_DIR/bench/comm/CMakeFiles/bench_quantize.dir), and runs it on
# N values in blocks of 64 on one thread. "dequantize -> bf16" is what
# llama_train does to each base matrix before its products, in the forward
# and again in the backward (zs_param_dequantize into the compute dtype).
# Usage: nf4_dequant_rate.sh BUILD_DIR [N]
set -euo pipefail
build=$(cd "${1:?usage: nf4_dequant_rate.sh BUILD_DIR [N]}" && pwd)
n=${2:-5799936}   # the wide shape's base: 2 blocks of 2899968 matrix elements
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$build/bench/comm/CMakeFiles/bench_quantize.dir
[ -f "$dir/link.txt" ] || { echo "nf4_dequant_rate: $dir/link.txt missing (build bench_quantize)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/zs_nf4.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The copy keeps its "../lib/..." includes: bench/lib beside it.
mkdir "$tmp/comm"
ln -s "$src/bench/lib" "$tmp/lib"
grep -q 'for (int bits = 8; bits >= 4; bits -= 4)' "$src/bench/comm/bench_quantize.c" ||
  { echo "nf4_dequant_rate: bench_quantize.c's format loop changed; update this script" >&2; exit 1; }
sed 's/for (int bits = 8; bits >= 4; bits -= 4)/for (int bits = 4; bits >= ZS_K_QUANT_NF4; bits -= 8)/' \
  "$src/bench/comm/bench_quantize.c" > "$tmp/comm/nf4.c"
flags=$(sed -n 's/^C_\(FLAGS\|INCLUDES\|DEFINES\) = //p' "$dir/flags.make" | tr '\n' ' ')
# shellcheck disable=SC2086  # the build's flags are words
cc $flags -c "$tmp/comm/nf4.c" -o "$tmp/nf4.o"
link=$(sed -e "s|CMakeFiles/bench_quantize.dir/bench_quantize.c.o|$tmp/nf4.o|" \
           -e "s|-o bench_quantize|-o $tmp/nf4|" "$dir/link.txt")
(cd "$build/bench/comm" && eval "$link")
OMP_NUM_THREADS=1 "$tmp/nf4" --n "$n" --block 64 --reps 7 | grep -E '^level|dequantize -> bf16'
