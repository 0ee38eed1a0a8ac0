# Shared by the shell benchmarks (sourced): the median step time of a
# gpt2_train log, from its progress lines ("... | 175.3 ms"), skipping the
# first two steps (warm-up: first touches, prefetch order still recorded).
median_ms() {
  grep -E '^step ' "$1" | sed -E 's/.*\| ([0-9.]+) ms$/\1/' | tail -n +3 | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
