#!/usr/bin/env bash
# The main job: install what is missing, build, replay the corpus against the honest
# engines, then run a short random check of all six properties against every built-in
# engine, on every core (the honest ones must pass, the mutants must be rejected) and print
# the table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only the command: its engines are built in, and the tests, benchmarks and llama.cpp are
# for scripts/test.sh (a whole build is about four times as long).
scripts/build.sh default kvfuzz
kvfuzz=build/default/harness/kvfuzz

echo "== kvfuzz replay corpus/ (honest engines)"
"$kvfuzz" replay corpus/
echo
echo "== kvfuzz check (every built-in engine, all six properties: honest must pass, mutants must be rejected)"
# One worker per core: each case is judged by all six properties (about six times the work
# of prefix alone), and the results are the same for every --jobs.
"$kvfuzz" check --engine every --cases 1000 --seed 1 --jobs "$(nproc)" --out build/kvfuzz-out
