#!/usr/bin/env bash
# The C plugin door end to end with a user's own engine (examples/c-plugin, registered in
# tests/doors/package_tests.cmake), following the example's README:
#   1. cmake --install BUILD into a temporary prefix;
#   2. configure and build examples/c-plugin against it (a C project; find_package(kvfuzz)
#      for the include directory of kvfuzz/engine_abi.h only);
#   3. the honest engine, my-engine: `kvfuzz check` passes, kvfuzz's installed corpus
#      replays clean, and every corpus fixture passes all six properties (kvfuzz shrink
#      --property P exits 0 on a fixture that passes P);
#   4. the buggy engine, my-engine-buggy: `kvfuzz check` exits 1 and leaves exactly one
#      fixture; `kvfuzz shrink` exits 1 and leaves one fixture of a few tokens; `replay` of
#      it fails on my-engine-buggy and passes on my-engine and on kvfuzz's contiguous
#      engine; `explain` shows the failing row;
#   5. the README's plain `cc` line builds the same plugin: one exported symbol, a clean
#      short check, and the same verdicts on the shrunk fixture.
# Usage: c_plugin_example.sh BUILD_DIR SOURCE_DIR [COMPILER_LAUNCHER]
# The C compiler is $CC, else cc (kvfuzz itself is built by a C++ compiler only).
set -euo pipefail
build=$1
source=$2
launcher=${3:-}
cc=${CC:-cc}
# Shrunk fixtures of at most this many tokens count as small (the off-by-one window shows
# with window + 1 tokens; kvfuzz shrink gets it to 3: window 2, three tokens).
max_tokens=4

work=$(mktemp -d "${TMPDIR:-/tmp}/kvfuzz-c-plugin.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
example=$work/example

fail() {
  echo "package:c-plugin-example: FAIL: $*" >&2
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
# expect STATUS MESSAGE COMMAND...: runs it (output in $work/out.log) and fails with the
# message and the output unless it exits with STATUS.
expect() {
  local want=$1 message=$2 got=0
  shift 2
  "$@" >"$work/out.log" 2>&1 || got=$?
  if ((got != want)); then
    cat "$work/out.log" >&2
    fail "$message (exit status $got, expected $want): $*"
  fi
}
# The *.json files directly in a directory (not in raw/ below it), one per line.
fixtures_in() { find "$1" -maxdepth 1 -name '*.json' -type f 2>/dev/null | sort; }

step "install $build into $prefix"
quietly "cmake --install failed: is the build complete? (cmake --build $build)" \
  cmake --install "$build" --prefix "$prefix"
kvfuzz=$prefix/bin/kvfuzz
corpus=$prefix/share/kvfuzz/corpus
[[ -x $kvfuzz ]] || fail "the install has no $kvfuzz"
[[ -f $prefix/include/kvfuzz/engine_abi.h ]] || fail "the install has no kvfuzz/engine_abi.h"
[[ -d $corpus ]] || fail "the install has no corpus at $corpus"

step "configure and build examples/c-plugin against $prefix ($cc)"
quietly "configuring the example failed" \
  cmake -S "$source/examples/c-plugin" -B "$example" -G Ninja -DCMAKE_C_COMPILER="$cc" \
  ${launcher:+-DCMAKE_C_COMPILER_LAUNCHER="$launcher"} -DCMAKE_PREFIX_PATH="$prefix"
quietly "building the example failed" cmake --build "$example"
plugin=$example/libmy_engine.so
[[ -f $plugin ]] || fail "the build made no $plugin"
honest=plugin:$plugin:my-engine
buggy=plugin:$plugin:my-engine-buggy
cd "$work"

step "my-engine: check --cases 150 passes"
expect 0 "the honest engine failed kvfuzz check" \
  "$kvfuzz" check --engine "$honest" --cases 150 --out "$work/honest-out" --quiet
[[ -z $(fixtures_in "$work/honest-out") ]] || fail "a passing check left fixtures"

step "my-engine: kvfuzz's corpus replays clean"
expect 0 "the honest engine failed kvfuzz's corpus" \
  "$kvfuzz" replay "$corpus" --engine "$honest"
step "my-engine: every corpus fixture passes all six properties"
count=0
while IFS= read -r fixture; do
  # The example declares no attention feature, no quantized KV cache, no MLA and no
  # interleaved RoPE pairs or RoPE part: shrink refuses a fixture that has one (2).
  grep -qE '^    "(softcap|sinks|alibi|chunked_local|k_format|v_format|value_from_key|rope_style|rope_dims)"' "$fixture" &&
    continue
  for property in prefix schedule layout poison reset batch; do
    expect 0 "the honest engine fails $property on $fixture" \
      "$kvfuzz" shrink "$fixture" --engine "$honest" --property "$property" \
      --out "$work/property-out" --raw "$work/property-out/raw" --time 10 --quiet
    count=$((count + 1))
  done
done < <(find "$corpus" -name '*.json' -type f | sort)
((count >= 6)) || fail "found no fixtures under $corpus"
echo "$count fixture x property runs pass"

step "my-engine-buggy: check fails and saves one fixture"
expect 1 "kvfuzz check missed the bug of my-engine-buggy" \
  "$kvfuzz" check --engine "$buggy" --cases 200 --out "$work/buggy-out" --quiet
grep -E "^plugin:.*FAIL at case" "$work/out.log" || true
mapfile -t saved < <(fixtures_in "$work/buggy-out")
((${#saved[@]} == 1)) || fail "check left ${#saved[@]} fixtures in $work/buggy-out, expected 1"

step "shrink it"
expect 1 "kvfuzz shrink did not shrink the failure" \
  "$kvfuzz" shrink "${saved[0]}" --engine "$buggy" --out "$work/shrunk" --raw "$work/buggy-out/raw"
# Its summary: "ENGINE fails prefix/mismatch: shrunk from A ops, B tokens to C ops,
# D tokens (...)".
summary=$(grep -m1 " shrunk from " "$work/out.log" || true)
echo "$summary"
mapfile -t shrunk < <(fixtures_in "$work/shrunk")
((${#shrunk[@]} == 1)) || fail "shrink left ${#shrunk[@]} fixtures in $work/shrunk, expected 1"
tokens=$(sed -nE 's/.* to [0-9]+ ops?, ([0-9]+) tokens?.*/\1/p' <<<"$summary")
[[ -n $tokens ]] || fail "cannot read the token count from shrink's output: $(cat "$work/out.log")"
((tokens <= max_tokens)) || fail "the shrunk fixture has $tokens tokens (at most $max_tokens)"
small=${shrunk[0]}

step "replay and explain the shrunk fixture"
expect 1 "the shrunk fixture does not fail on my-engine-buggy" \
  "$kvfuzz" replay "$small" --engine "$buggy"
grep -q "mismatch at" "$work/out.log" || fail "the failure is not a value mismatch: $(cat "$work/out.log")"
expect 0 "the shrunk fixture fails on my-engine" "$kvfuzz" replay "$small" --engine "$honest"
expect 0 "the shrunk fixture fails on contiguous" "$kvfuzz" replay "$small" --engine contiguous
expect 1 "kvfuzz explain does not show the failure" "$kvfuzz" explain "$small" --engine "$buggy"
grep -q "FAIL" "$work/out.log" || fail "explain shows no failing row: $(cat "$work/out.log")"

# The README's line, plus -Werror.
step "the README's plain cc line builds the same plugin"
plain=$work/plain/libmy_engine.so
mkdir -p "$work/plain"
quietly "the plain cc build failed" \
  "$cc" -std=c11 -O2 -Wall -Wextra -Werror -pedantic -shared -fPIC -fvisibility=hidden \
  -I "$prefix/include" "$source/examples/c-plugin/my_engine.c" -o "$plain" -lm
exports() { nm -D --defined-only "$1" | awk '{ print $NF }' | sort; }
[[ $(exports "$plain") == kvfuzz_engine_plugin ]] ||
  fail "the plain build exports: $(exports "$plain" | tr '\n' ' ')"
[[ $(exports "$plain") == "$(exports "$plugin")" ]] || fail "the two builds export different symbols"
expect 0 "the plain build's my-engine failed kvfuzz check" \
  "$kvfuzz" check --engine "plugin:$plain:my-engine" --cases 50 --out "$work/plain-out" --quiet
expect 1 "the plain build's my-engine-buggy passes the shrunk fixture" \
  "$kvfuzz" replay "$small" --engine "plugin:$plain:my-engine-buggy"
expect 0 "the plain build's my-engine fails the shrunk fixture" \
  "$kvfuzz" replay "$small" --engine "plugin:$plain:my-engine"
step "done"
