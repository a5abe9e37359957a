#!/usr/bin/env bash
# What the persistent exec: door (protocol version 2, docs/engine-protocol.md) saves per
# case: the same `kvfuzz check` of an exec: engine with every engine a process of its own
# (KVFUZZ_EXEC_PROTOCOL=1) and with one process serving every case (2), REPEATS times
# each, alternating; prints a Markdown table for docs/BENCHMARKS.md: the median wall time,
# per case, and the ratio.
#
# usage: bench/exec_persistent.sh [CASES=200] [REPEATS=3] [ENGINE=exec:python3 examples/python-engine/honest_engine.py]
# Needs the default preset's kvfuzz (scripts/build.sh default). The seed is 1; the cases
# are the same in both modes (the engine's declarations decide them, not the protocol).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-200}
repeats=${2:-3}
engine=${3:-exec:python3 examples/python-engine/honest_engine.py}
kvfuzz=build/default/harness/kvfuzz
[[ -x $kvfuzz ]] || { echo "exec_persistent: $kvfuzz not built (scripts/build.sh default)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# Seconds of wall time of one check; a check that does not pass is no measurement.
one_check() {
  local start end
  start=$(date +%s.%N)
  if ! KVFUZZ_EXEC_PROTOCOL=$1 "$kvfuzz" check --engine "$engine" --cases "$cases" --seed 1 \
      --quiet --out "$out" >"$out/log" 2>&1; then
    cat "$out/log" >&2
    echo "exec_persistent: the check failed with KVFUZZ_EXEC_PROTOCOL=$1" >&2
    exit 1
  fi
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {print b - a}'
}

: >"$out/1"
: >"$out/2"
for ((r = 0; r < repeats; r++)); do
  for protocol in 1 2; do one_check $protocol >>"$out/$protocol"; done
done
m1=$(median <"$out/1")
m2=$(median <"$out/2")
echo "| protocol | check of $cases cases (median of $repeats) | per case | saved per case | ratio |"
echo "|---|---:|---:|---:|---:|"
awk -v m1="$m1" -v m2="$m2" -v n="$cases" 'BEGIN {
  printf "| 1 (a process per engine) | %.2f s | %.1f ms | | 1 |\n", m1, 1000 * m1 / n
  printf "| 2 (one process) | %.2f s | %.1f ms | %.1f ms | %.2f |\n", m2, 1000 * m2 / n, 1000 * (m1 - m2) / n, m1 / m2
}'
