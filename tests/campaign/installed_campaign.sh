#!/usr/bin/env bash
# `kvfuzz campaign` from an installed prefix (tests/campaign/CMakeLists.txt): cmake --install
# of this build (with its fuzz targets) into a temporary prefix, then campaigns run by the
# installed kvfuzz from an empty working directory:
#   1. on a mutant, with every default: the targets come from PREFIX/libexec/kvfuzz, the
#      seeds from the installed corpus (no warning about seeds), the finding is shrunk and
#      filed under OUT/regressions, and the working directory stays empty;
#   2. with an empty seeds directory and no dictionary: both are warnings on the terminal
#      ("found no seed inputs" included), and the working directory still stays empty.
# Every progress line that shows 0 exec/s says why.
# Usage: installed_campaign.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/kvfuzz-installed-campaign.XXXXXX")
trap '[[ -n ${KVFUZZ_KEEP:-} ]] || rm -rf "$work"' EXIT
prefix=$work/prefix
fail() {
  echo "installed-campaign: FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install failed: is the build complete?"; }
kvfuzz=$prefix/bin/kvfuzz
for file in bin/kvfuzz libexec/kvfuzz/fuzz_prefix libexec/kvfuzz/fuzz_fixture \
  share/kvfuzz/fixture.dict share/kvfuzz/corpus/seeds/worked-example.json; do
  [[ -e $prefix/$file ]] || fail "the install has no $file"
done
mkdir "$work/cwd" "$work/empty"

# Runs the installed kvfuzz campaign from the empty directory: campaign STATUS OUT FLAGS...
campaign() {
  local expected=$1 out=$2
  shift 2
  local status=0
  (cd "$work/cwd" && "$kvfuzz" campaign --out "$out" --progress 1 "$@") \
    >"$out.stdout" 2>"$out.stderr" || status=$?
  ((status == expected)) || {
    cat "$out.stdout" "$out.stderr" >&2
    fail "campaign $* exited $status, expected $expected"
  }
  if [[ -n $(ls -A "$work/cwd") ]]; then
    fail "campaign $* wrote into the working directory: $(ls -A "$work/cwd")"
  fi
  if grep -E "^campaign: .* 0 exec/s " "$out.stderr" | grep -v "failures [0-9]*  ("; then
    fail "campaign $*: a progress line shows 0 exec/s without saying why"
  fi
}

echo "== a mutant, every default"
campaign 1 "$work/mutant" --engine mask-origin --targets prefix --time 6s --shrink-time 10
if grep "warning" "$work/mutant.stderr"; then
  fail "a campaign of the installed kvfuzz warns with its own defaults"
fi
grep -qE "^INFO: -fork=1: [1-9][0-9]* seed inputs" "$work/mutant/logs/fuzz_prefix.log" ||
  fail "fuzz_prefix did not load the installed corpus: $(grep 'seed inputs' "$work/mutant/logs/fuzz_prefix.log")"
filed=$(find "$work/mutant/regressions" -name 'mask-origin-prefix-mismatch-*.json' | head -1)
[[ -n $filed ]] || { cat "$work/mutant.stdout" >&2; fail "no finding filed under OUT/regressions"; }
grep -q "$work/mutant/regressions/" "$work/mutant.stdout" ||
  fail "the summary does not name the filed fixture: $(cat "$work/mutant.stdout")"
"$kvfuzz" replay "$filed" --engine contiguous >/dev/null ||
  fail "the filed fixture does not pass on contiguous"
status=0
"$kvfuzz" replay "$filed" --engine mask-origin >/dev/null 2>&1 || status=$?
((status == 1)) || fail "the filed fixture does not fail on mask-origin (status $status)"
echo "filed $(basename "$filed"); the working directory is empty"

echo "== no seeds, no dictionary"
campaign 0 "$work/bare" --engine contiguous --targets prefix --time 4s \
  --seeds "$work/empty" --dict "$work/none.dict"
for warning in "warning: --dict $work/none.dict: no such file" \
  "warning: fuzz_prefix found no seed inputs"; do
  grep -qF "$warning" "$work/bare.stderr" || {
    cat "$work/bare.stderr" >&2
    fail "no '$warning' on the terminal"
  }
done
echo "both warned on the terminal; the working directory is empty"
