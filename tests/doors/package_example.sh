#!/usr/bin/env bash
# The CMake package door end to end (tests/doors/package_tests.cmake):
#   1. cmake --install BUILD into a temporary prefix;
#   2. configure and build examples/cpp-engine against it (find_package(kvfuzz CONFIG));
#   3. `ctest -LE buggy` (the honest engine) must pass;
#   4. `ctest -L buggy` (the same engine with a wrong causal mask) must fail, and every
#      failed test must have left a shrunk fixture that the installed `kvfuzz replay`
#      parses, that passes on kvfuzz's contiguous engine, and that is small.
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

# Which test left which fixture: each failure message has a line "shrunk fixture: PATH".
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     /^shrunk fixture: / { sub(/^shrunk fixture: /, ""); print name "\t" $0 }' "$example/Testing/Temporary/LastTest.log" \
  >"$work/fixtures.tsv"
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
done <<<"$failed"
step "done"
