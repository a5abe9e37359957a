#!/usr/bin/env bash
# Does feeding the cache-state events to libFuzzer as extra counters help? Runs the
# fuzz_prefix target with the counters on and off (KVFUZZ_EVENT_COUNTERS), from an empty
# corpus, and prints two Markdown tables for docs/BENCHMARKS.md:
#   1. on an honest engine for SECONDS: events (of 11) and cache states (of 143) reached,
#      corpus size and libFuzzer's coverage at the end, per seed and median;
#   2. on every mutant: inputs and seconds until the first failure, per seed and median.
#
# usage: bench/fuzz_guidance.sh [SECONDS=60] [SEEDS=3] [ENGINE=paged] [MUTANT_LIMIT=300]
#   SECONDS=0 skips the first table; MUTANT_LIMIT caps each mutant run (seconds).
#   With KVFUZZ_BYTES_ONLY=1 in the environment the targets decode bytes only (no PRNG past
#   the input), which leaves all the structure to libFuzzer's guidance.
# Needs the sanitize preset's fuzz targets (scripts/build.sh sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
seeds=${2:-3}
engine=${3:-paged}
limit=${4:-300}
mode=$([[ ${KVFUZZ_BYTES_ONLY:-0} == 1 ]] && echo "bytes only" || echo "bytes then PRNG")
target=build/sanitize/fuzzers/fuzz_prefix
[[ -x $target ]] || { echo "fuzz_guidance: $target not built (scripts/build.sh sanitize)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A copy, so that a rebuild during the measurement does not change the binary under it.
cp "$target" "$work/fuzz_prefix"
target=$work/fuzz_prefix

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

if ((seconds > 0)); then
echo "## Guidance: $engine, ${seconds} s per run, seeds 1..$seeds, empty corpus, $mode"
echo
echo "| counters | seed | events | cache states | corpus | cov | ft |"
echo "|---|---|---|---|---|---|---|"
for counters in 1 0; do
  for seed in $(seq 1 "$seeds"); do
    dir=$work/g$counters-$seed
    mkdir -p "$dir/corpus" "$dir/events"
    KVFUZZ_ENGINE=$engine KVFUZZ_EVENT_COUNTERS=$counters KVFUZZ_EVENTS_DIR=$dir/events \
      "$target" -seed="$seed" -max_total_time="$seconds" -print_final_stats=1 -print_funcs=0 \
      -artifact_prefix="$dir/" "$dir/corpus" >"$dir/log" 2>&1 || true
    file=$(ls "$dir"/events/*.json)
    events=$(grep -o '"events":{[^}]*}' "$file" | grep -o ':[0-9][0-9]*' | grep -vc ':0$' || true)
    states=$(grep -o '"states":"[01]*"' "$file" | tr -cd 1 | wc -c)
    corpus=$(find "$dir/corpus" -type f | wc -l)
    last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
    cov=$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$last")
    ft=$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$last")
    echo "| $([[ $counters == 1 ]] && echo on || echo off) | $seed | $events | $states | $corpus | $cov | $ft |"
    echo "$counters $events $states $corpus $cov $ft" >>"$work/guidance"
  done
done
for counters in 1 0; do
  row="| $([[ $counters == 1 ]] && echo on || echo off) | median |"
  for column in 2 3 4 5 6; do
    row+=" $(awk -v c="$counters" -v k="$column" '$1 == c {print $k}' "$work/guidance" | median) |"
  done
  echo "$row"
done
echo
fi

echo "## Time to the first failure of each mutant (fuzz_prefix, empty corpus, seeds 1..$seeds, $mode, at most $limit s)"
echo
echo "| mutant | counters on: inputs (median) | seconds (median) | counters off: inputs (median) | seconds (median) |"
echo "|---|---|---|---|---|"
mutants=$(build/default/harness/kvfuzz list 2>/dev/null | awk '$2 == "mutant" {print $1}')
[[ -n $mutants ]] || mutants="mask-origin stale-position stale-kv page-tail-read wrong-kv-head truncate-keeps-position fork-restarts-positions truncate-shared-in-place"
for mutant in $mutants; do
  row="| $mutant |"
  for counters in 1 0; do
    : >"$work/inputs"
    : >"$work/seconds"
    for seed in $(seq 1 "$seeds"); do
      dir=$work/m-$mutant-$counters-$seed
      mkdir -p "$dir"
      start=$(date +%s.%N)
      KVFUZZ_ENGINE=$mutant KVFUZZ_EVENT_COUNTERS=$counters "$target" -seed="$seed" \
        -max_total_time="$limit" -print_funcs=0 -artifact_prefix="$dir/" >"$dir/log" 2>&1 || true
      end=$(date +%s.%N)
      if ls "$dir"/crash-* >/dev/null 2>&1; then
        # The status line before the crash counts the inputs run; none when the first failed.
        inputs=$( (grep -oE '^#[0-9]+' "$dir/log" || true) | tail -1 | tr -d '#')
        echo "${inputs:-1}" >>"$work/inputs"
        echo "$end - $start" | bc >>"$work/seconds"
      else
        echo 999999999 >>"$work/inputs"  # not found: counts as more than any found run
        echo "$limit" >>"$work/seconds"
      fi
    done
    row+=" $(median <"$work/inputs") | $(median <"$work/seconds" | xargs printf '%.2f') |"
  done
  echo "$row"
done
