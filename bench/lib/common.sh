# Shared by the shell benchmarks (sourced after `src` is set to the checkout):
# Open MPI's root variables, the demo's corpus (fetched once, as make's set-up
# does), a scratch directory $work removed on exit, and median_ms.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
corpus=$src/data/shakespeare/shakespeare.txt
[ -f "$corpus" ] || bash "$src/scripts/fetch-shakespeare.sh"
work=$(mktemp -d /tmp/zs_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The median step time of a gpt2_train log, from its progress lines
# ("... | 175.3 ms"), skipping the first two steps (warm-up: first touches,
# the prefetch order still being recorded).
median_ms() {
  grep -E '^step ' "$1" | sed -E 's/.*\| ([0-9.]+) ms$/\1/' | tail -n +3 | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
