#!/usr/bin/env bash
# Cases per second of the ONNX Runtime adapters (adapters/onnxruntime), through the exec
# door and in-process (the Python package), beside built-in engines: the same check of
# CASES cases, seed 1, all six properties, one worker (--jobs 1), wall time of the whole
# command, median of REPEATS runs. Prints a Markdown table for docs/BENCHMARKS.md.
#
# usage: bench/ort_adapters.sh [CASES=200] [REPEATS=3]
# Needs the default preset's kvfuzz (scripts/build.sh default) and the project's .venv
# with onnxruntime and the kvfuzz package (scripts/setup.sh; docs/python.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-200}
repeats=${2:-3}
kvfuzz=build/default/harness/kvfuzz
python=.venv/bin/python
[[ -x $kvfuzz ]] || { echo "ort_adapters: $kvfuzz not built (scripts/build.sh default)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# Seconds of wall time of one command; a check that does not pass is no measurement.
timed() {
  local start end
  start=$(date +%s.%N)
  if ! "$@" >"$out/log" 2>&1; then
    cat "$out/log" >&2
    echo "ort_adapters: failed: $*" >&2
    exit 1
  fi
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {print b - a}'
}

cli() { timed "$kvfuzz" check --engine "$1" --cases "$cases" --seed 1 --jobs 1 --quiet --out "$out/k"; }

inprocess() {
  timed "$python" -c "
import sys
sys.path.insert(0, 'adapters/onnxruntime')
import kvfuzz, $1 as adapter
result = kvfuzz.check(adapter.factory(sys.argv[1:]), cases=$cases, seed=1, jobs=1, out='$out/p')
sys.exit(0 if result.passed else 1)" "${@:2}"
}

row() {  # row LABEL DOOR COMMAND...
  local label=$1 door=$2 m
  shift 2
  : >"$out/times"
  for ((r = 0; r < repeats; r++)); do "$@" >>"$out/times"; done
  m=$(median <"$out/times")
  awk -v l="$label" -v d="$door" -v m="$m" -v n="$cases" \
    'BEGIN {printf "| %s | %s | %.2f s | %.1f |\n", l, d, m, n / m}'
}

echo "| engine | door | check of $cases cases (median of $repeats) | cases/s |"
echo "|---|---|---:|---:|"
row contiguous built-in cli contiguous
row flash-f16 built-in cli flash-f16
variants=(
  "ort_gqa_engine --dtype f32 --path legacy"
  "ort_gqa_engine --dtype f32 --path batched"
  "ort_gqa_engine --dtype f32 --path shared"
  "ort_gqa_engine --dtype f16 --path legacy"
  "ort_gqa_engine --dtype f16 --path batched"
  "ort_gqa_engine --dtype f16 --path shared"
  "ort_attention_engine --dtype f32"
)
for variant in "${variants[@]}"; do
  read -r module flags <<<"$variant"
  # shellcheck disable=SC2086  # the flags are words
  row "\`$module.py $flags\`" exec cli "exec:$python adapters/onnxruntime/$module.py $flags"
  # shellcheck disable=SC2086
  row "\`$module.py $flags\`" in-process inprocess "$module" $flags
done
