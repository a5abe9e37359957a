#!/usr/bin/env bash
# Inputs per second of fuzz targets on one core (one libFuzzer process: what -jobs=1
# -workers=1 gives each job), from an empty corpus, for docs/BENCHMARKS.md. For each build
# (the fuzz preset's coverage-only targets, the sanitize preset's ASan + UBSan ones), each
# target, tiny scenarios (inputs of at most 8 bytes: fuzzers/fuzz_sizes.h bounds their
# sizes) and default sizes (the same inputs with KVFUZZ_FULL_SIZE=1: every scenario at the
# generator's defaults, as every input was before sizes followed the input), with the
# cache-state counters on and off (KVFUZZ_EVENT_COUNTERS=0): libFuzzer's
# average_exec_per_sec (inputs per wall-clock second), per repetition and the median, and
# inputs per CPU second (libFuzzer's executed units over the process's user + system time):
# on a loaded machine the process waits for a core, which lowers the first and not the
# second, so the second is what one dedicated core would do. Prints a Markdown table.
#
# usage: bench/fuzz_speed.sh [SECONDS=10] [REPEATS=3] [ENGINE=paged] [TARGETS="prefix schedule"]
#   BUILDS="fuzz sanitize" in the environment picks the builds: a preset's name
#   (build/NAME/fuzzers) or a directory of targets (with a slash, e.g. a saved older build).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
repeats=${2:-3}
engine=${3:-paged}
targets=${4:-prefix schedule}
builds=${BUILDS:-fuzz sanitize}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy=0
for build in $builds; do
  dir=$([[ $build == */* ]] && echo "$build" || echo "build/$build/fuzzers")
  copy=$((copy + 1))
  for t in $targets; do
    binary=$dir/fuzz_$t
    [[ -x $binary ]] || { echo "fuzz_speed: $binary not built (scripts/build.sh $build)" >&2; exit 2; }
    # A copy, so that a rebuild during the measurement does not change the binary under it.
    mkdir -p "$work/$copy"
    cp "$binary" "$work/$copy/fuzz_$t"
  done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "| build | target | sizes | counters | inputs/s (median) | runs | inputs per CPU s (median) | runs |"
echo "|---|---|---|---|---:|---|---:|---|"
copy=0
for build in $builds; do
  copy=$((copy + 1))
  for t in $targets; do
    for sizes in tiny default; do
      for counters in on off; do
        rates=()
        per_cpu=()
        for ((r = 1; r <= repeats; ++r)); do
          rm -rf "$work/corpus" && mkdir "$work/corpus"
          full=$([[ $sizes == default ]] && echo 1 || echo 0)
          events=$([[ $counters == on ]] && echo 1 || echo 0)
          run=("$work/$copy/fuzz_$t" -seed="$r" -max_len=8 -max_total_time="$seconds"
            -print_final_stats=1 -rss_limit_mb=4096 -artifact_prefix="$work/" "$work/corpus")
          KVFUZZ_ENGINE=$engine KVFUZZ_FULL_SIZE=$full KVFUZZ_EVENT_COUNTERS=$events \
            /usr/bin/time -f "cpu %U %S" -o "$work/time" "${run[@]}" >"$work/log" 2>&1 || true
          rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$work/log")
          rates+=("${rate:-0}")
          units=$(awk '/stat::number_of_executed_units/ {print $2}' "$work/log")
          per_cpu+=("$(awk -v u="${units:-0}" '/^cpu/ {s = $2 + $3; printf "%.0f", (s > 0 ? u / s : 0)}' \
            "$work/time")")
        done
        med=$(printf '%s\n' "${rates[@]}" | median)
        cpu=$(printf '%s\n' "${per_cpu[@]}" | median)
        echo "| $build | fuzz_$t | $sizes | $counters | $med | ${rates[*]} | $cpu | ${per_cpu[*]} |"
      done
    done
  done
done
