#!/usr/bin/env bash
# The CMake package door end to end (tests/doors/package_tests.cmake):
#   1. cmake --install BUILD into a temporary prefix;
#   2. configure and build examples/cpp-engine against it (find_package(kvfuzz CONFIG));
#   3. `ctest -LE buggy` (the honest engine) must pass;
#   4. `ctest -L buggy` (the same engine with a wrong causal mask) must fail, and every
#      failed test must have left a shrunk fixture that the installed `kvfuzz replay`
#      parses, that passes on kvfuzz's contiguous engine, and that is small;
#   5. the engines' plugins (kvfuzz_add_engine_plugin): the replay command each failure
#      message suggests names the buggy engine's plugin and fails there, the same fixture
#      passes on the honest engine's plugin, and explain, shrink and check run on them;
#      no message says "shrunk from X to X" or asks to copy a corpus fixture into the
#      corpus.
# Usage: package_example.sh BUILD_DIR SOURCE_DIR CXX_COMPILER [COMPILER_LAUNCHER]
set -euo pipefail
build=$1
source=$2
cxx=$3
launcher=${4:-}
# Shrunk fixtures of at most this many rows count as small (the mask bug's minimum is 2).
max_rows=16

work=$(mktemp -d "${TMPDIR:-/tmp}/kvfuzz-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
example=$work/example
# The example's tests read these; a caller's long-run settings must not leak in.
unset KVFUZZ_CASES KVFUZZ_SEED KVFUZZ_FAILURES_DIR KVFUZZ_SHRINK_SECONDS

fail() {
  echo "package:cpp-engine-example: FAIL: $*" >&2
  exit 1
}
started=$SECONDS
step() { echo "== $* ($((SECONDS - started)) s)"; }
# Runs a command quietly; on failure shows its output and fails with the message.
quietly() {
  local message=$1
  shift
  "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log" >&2; fail "$message"; }
}

step "install $build into $prefix"
quietly "cmake --install failed: is the build complete? (cmake --build $build)" \
  cmake --install "$build" --prefix "$prefix"
kvfuzz=$prefix/bin/kvfuzz
[[ -x $kvfuzz ]] || fail "the install has no $kvfuzz"

step "configure examples/cpp-engine against $prefix"
quietly "configuring the example failed" \
  cmake -S "$source/examples/cpp-engine" -B "$example" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} -DCMAKE_PREFIX_PATH="$prefix"
step "build the example"
quietly "building the example failed" cmake --build "$example"

step "ctest -LE buggy: the honest engine must pass"
(cd "$example" && ctest -LE buggy --output-on-failure -j2) ||
  fail "the honest engine's tests failed"

step "ctest -L buggy: the buggy engine must fail"
if (cd "$example" && ctest -L buggy -j2 >"$work/buggy.log" 2>&1); then
  cat "$work/buggy.log"
  fail "the buggy engine's tests all passed: kvfuzz missed the wrong causal mask"
fi
grep -E "tests passed|Failed|\*\*\*" "$work/buggy.log" || true

# Which test left which fixture: each failure message has a line "shrunk fixture: PATH",
# and, the buggy engine having a plugin, "replay it on BuggyEngine with" and the command.
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     /^shrunk fixture: / { sub(/^shrunk fixture: /, ""); print name "\t" $0 }' "$example/Testing/Temporary/LastTest.log" \
  >"$work/fixtures.tsv"
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     command { sub(/^ +/, ""); print name "\t" $0; command = 0 }
     /^replay it on BuggyEngine with$/ { command = 1 }' "$example/Testing/Temporary/LastTest.log" \
  >"$work/commands.tsv"
log=$example/Testing/Temporary/LastTest.log
if grep -E "Shrunk from ([0-9]+ ops?, [0-9]+ tokens?) to \1 " "$log"; then
  fail "a failure message says it shrank a case to the same size"
fi
if grep -B30 "regression test of BuggyEngine already" "$log" | grep -q "copy it into"; then
  fail "a corpus fixture's failure asks to copy it into the corpus"
fi
grep -q "regression test of BuggyEngine already, in its corpus: $source/examples/cpp-engine/corpus/" \
  "$log" || fail "the corpus fixture's failure does not say where in the corpus it is"
# Both ways: the corpus's minimal fixture cannot shrink, the window one does.
grep -A1 "fails prefix on fixture .*/decode-after-one-cached-token.json" "$log" |
  grep -q "^Already minimal for the shrinker's moves: 2 ops, 2 tokens" ||
  fail "the already minimal corpus fixture's failure does not say it was minimal"
grep -A1 "fails prefix on fixture .*/window-chunk-after-cache.json" "$log" |
  grep -q "^Shrunk from 2 ops, 5 tokens to 2 ops, 2 tokens" ||
  fail "the window fixture's failure does not say what it shrank from and to"
honest_plugin=$example/libmy_engine_plugin.so
buggy_plugin=$example/libbuggy_engine_plugin.so
[[ -f $honest_plugin && -f $buggy_plugin ]] || fail "the plugins were not built: $(ls "$example")"
failed=$(cut -d: -f2- "$example/Testing/Temporary/LastTestsFailed.log")
[[ -n $failed ]] || fail "ctest failed but recorded no failed test"
while IFS= read -r test; do
  fixture=$(awk -F'\t' -v t="$test" '$1 == t { print $2; exit }' "$work/fixtures.tsv")
  if [[ -z $fixture ]]; then
    cat "$example/Testing/Temporary/LastTest.log" >&2
    fail "$test failed without naming a shrunk fixture"
  fi
  [[ -f $fixture ]] || fail "$test names $fixture, which does not exist"
  replay=$("$kvfuzz" replay "$fixture" --engine contiguous 2>&1) ||
    fail "$test: kvfuzz replay $fixture --engine contiguous does not pass:"$'\n'"$replay"
  rows=$(sed -nE 's/^ok .* \(([0-9]+) rows.*/\1/p' <<<"$replay")
  [[ -n $rows ]] || fail "$test: cannot read the row count from: $replay"
  ((rows <= max_rows)) || fail "$test: $fixture has $rows rows, not shrunk (at most $max_rows)"
  echo "$test -> $(basename "$fixture"): $rows rows, passes on contiguous"

  # The command the message suggests, as written: on the buggy engine's plugin, it fails.
  suggested=$(awk -F'\t' -v t="$test" '$1 == t { print $2; exit }' "$work/commands.tsv")
  [[ $suggested == "$kvfuzz replay $fixture --engine plugin:$buggy_plugin" ]] ||
    fail "$test suggests '$suggested', not the replay of $fixture on $buggy_plugin"
  status=0
  out=$(bash -c "$suggested" 2>&1) || status=$?
  ((status == 1)) || fail "$test: '$suggested' exits $status, expected 1 (mismatch):"$'\n'"$out"
  out=$("$kvfuzz" replay "$fixture" --engine "plugin:$honest_plugin" 2>&1) ||
    fail "$test: $fixture does not pass on the honest engine's plugin:"$'\n'"$out"
  echo "$test: the suggested replay fails on BuggyEngine's plugin, passes on MyEngine's"
done <<<"$failed"

# The other commands on the plugins, on the prefix property's fixture (explain and shrink
# judge prefix; under ctest -j2 the schedule test's fixture may come first in the log).
first=$(awk -F'\t' '$1 == "BuggyEngine:Properties.prefix" { print $2; exit }' "$work/fixtures.tsv")
[[ -n $first ]] || fail "BuggyEngine:Properties.prefix left no fixture: $(cat "$work/fixtures.tsv")"
status=0
out=$("$kvfuzz" explain "$first" --engine "plugin:$buggy_plugin" 2>&1) || status=$?
((status == 1)) && grep -q "BuggyEngine" <<<"$out" ||
  fail "explain on the buggy plugin exits $status:"$'\n'"$out"
status=0
out=$("$kvfuzz" shrink "$first" --engine "plugin:$buggy_plugin" --out "$work/shrunk" \
  --raw "$work/raw" --time 20 2>&1) || status=$?
((status == 1)) && compgen -G "$work/shrunk/*.json" >/dev/null ||
  fail "shrink on the buggy plugin exits $status:"$'\n'"$out"
quietly "check on the honest plugin failed" \
  "$kvfuzz" check --engine "plugin:$honest_plugin" --cases 30 --out "$work/check"
status=0
out=$("$kvfuzz" check --engine "plugin:$buggy_plugin" --cases 30 --out "$work/check" 2>&1) ||
  status=$?
((status == 1)) || fail "check on the buggy plugin exits $status, expected 1:"$'\n'"$out"
echo "explain, shrink and check run on the plugins"
step "done"
