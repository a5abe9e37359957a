#!/usr/bin/env bash
# Every mutant through a short `kvfuzz campaign` (the fuzz_prefix target only): is it found,
# how many artifacts, how many distinct signatures after deduplication, how small the
# shrunk fixture is, and where it was filed. Prints a Markdown table for docs/BENCHMARKS.md.
#
# usage: bench/campaign_mutants.sh [SECONDS=60] [SHRINK_SECONDS=30] [SEEDS=corpus]
#   corpus/ holds each mutant's own regression fixture, so with the default seeds every
#   mutant fails on its seeds at once; SEEDS=none starts from an empty corpus instead.
#   BUILD=fuzz (default: the coverage-only targets a plain `kvfuzz campaign` runs) or
#   BUILD=sanitize (the ASan + UBSan ones of `kvfuzz campaign --sanitize`) in the environment.
# Needs build/default (kvfuzz) and that build's fuzz targets; python3 reads the campaign
# records.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shrink=${2:-30}
seeds=${3:-corpus}
kvfuzz=build/default/harness/kvfuzz
build=${BUILD:-fuzz}
[[ -x $kvfuzz && -x build/$build/fuzzers/fuzz_prefix ]] ||
  { echo "campaign_mutants: build the default and $build presets first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/fuzzers"  # a copy: a rebuild meanwhile must not change the targets
cp build/$build/fuzzers/fuzz_* "$work/fuzzers/"
if [[ $seeds == none ]]; then
  seeds=$work/no-seeds
  mkdir -p "$seeds"
fi

echo "| mutant | found after (s) | artifacts | signatures | shrunk: tokens / ops | filed |"
echo "|---|---:|---:|---|---|---|"
for mutant in $("$kvfuzz" list | awk '$2 == "mutant" {print $1}'); do
  out=$work/$mutant
  "$kvfuzz" campaign --engine "$mutant" --targets prefix --time "${seconds}s" --out "$out" \
    --regressions "$out/regressions" --fuzzers "$work/fuzzers" --shrink-time "$shrink" \
    --seeds "$seeds" --progress 1 >"$out.stdout" 2>"$out.stderr" || true
  python3 - "$out" "$mutant" <<'PY'
import json, os, sys
out, mutant = sys.argv[1], sys.argv[2]
r = json.load(open(os.path.join(out, "campaign.json")))
found = next((s["elapsed_seconds"] for s in r["samples"] if s["failures"] > 0), None)
signatures = sorted({f["signature"] for f in r["findings"]})
firsts = [f for f in r["findings"] if not f["duplicate_of"] or f["filed"]]
shrunk, filed = "-", "-"
if firsts and firsts[0]["fixture"]:
    fx = json.load(open(firsts[0]["fixture"]))
    ops = len(fx["program"])
    shrunk = f'{firsts[0]["tokens_after"]} / {ops} (from {firsts[0]["tokens_before"]} tokens)'
    filed = os.path.basename(firsts[0]["filed"]) if firsts[0]["filed"] else firsts[0]["note"] or "-"
print(f'| {mutant} | {"%.1f" % found if found is not None else "not found"} | '
      f'{len(r["findings"])} | {", ".join(signatures) or "-"} | {shrunk} | {filed} |')
PY
done
