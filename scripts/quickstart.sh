#!/usr/bin/env bash
# The main job: install what is missing, build, replay the corpus against the honest
# engines, then run a short random check against every built-in engine (the honest ones
# must pass, the mutants must be rejected) and print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default
kvfuzz=build/default/harness/kvfuzz

echo "== kvfuzz replay corpus/ (honest engines)"
"$kvfuzz" replay corpus/
echo
echo "== kvfuzz check (every built-in engine: honest must pass, mutants must be rejected)"
"$kvfuzz" check --engine every --cases 1000 --seed 1 --out build/kvfuzz-out
