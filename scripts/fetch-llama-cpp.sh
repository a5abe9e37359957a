#!/usr/bin/env bash
# Fetches the llama.cpp source of the llama.cpp adapter (adapters/llama.cpp/): the pinned
# sdist of llama-cpp-python (adapters/llama.cpp/source.txt) through the project's .venv pip,
# checks its sha256, and unpacks its vendor/llama.cpp into third_party/llama.cpp (ignored by
# git), which the default preset builds (KVFUZZ_LLAMA_CPP). Idempotent: nothing is fetched
# when third_party/llama.cpp already holds the pinned version. On failure: one line, exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."
pin=adapters/llama.cpp/source.txt
dest=third_party/llama.cpp
fail() { echo "kvfuzz setup: llama.cpp source: $*" >&2; exit 2; }

field() { sed -n "s/^$1=//p" "$pin"; }
package=$(field package) version=$(field version) sha256=$(field sha256)
[[ -n $package && -n $version && -n $sha256 ]] || fail "$pin: expected package=, version= and sha256= lines"
stamp="$package $version $sha256"
[[ -f $dest/.kvfuzz-source && $(cat "$dest/.kvfuzz-source") == "$stamp" ]] && exit 0

[[ -x .venv/bin/python ]] || fail "no .venv (run scripts/setup.sh)"
echo "kvfuzz setup: fetching llama.cpp ($package $version, vendored llama.cpp)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The sdist itself (--no-binary :all:), with no dependencies; --no-build-isolation so that
# pip prepares its metadata with the .venv's scikit-build-core instead of fetching a build
# environment (seconds instead of minutes).
if ! .venv/bin/python -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
       --no-build-isolation -d "$tmp" "$package==$version" >"$tmp/log" 2>&1; then
  fail "pip download $package==$version failed: $(grep -m1 -i error "$tmp/log" || tail -n1 "$tmp/log")"
fi
archive=$(find "$tmp" -maxdepth 1 -name '*.tar.gz' -print -quit)
[[ -n $archive ]] || fail "pip download $package==$version left no .tar.gz sdist"
got=$(sha256sum "$archive" | cut -d' ' -f1)
[[ $got == "$sha256" ]] || fail "$(basename "$archive"): sha256 $got, expected $sha256 ($pin)"
# An sdist unpacks into NAME-VERSION/, named as the archive is.
top=$(basename "$archive" .tar.gz)
tar xzf "$archive" -C "$tmp" "$top/vendor/llama.cpp" || fail "$(basename "$archive") has no $top/vendor/llama.cpp"
[[ -f $tmp/$top/vendor/llama.cpp/include/llama.h ]] || fail "$(basename "$archive"): vendor/llama.cpp has no include/llama.h"
# The sdist keeps the submodule's .git file (gitdir: ../../.git/modules/...), which points
# nowhere here: llama.cpp's CMake would ask git for its build number and print "fatal: not
# a git repository" at every configure.
rm -f "$tmp/$top/vendor/llama.cpp/.git"
mkdir -p third_party
rm -rf "$dest"
mv "$tmp/$top/vendor/llama.cpp" "$dest"
echo "$stamp" >"$dest/.kvfuzz-source"
