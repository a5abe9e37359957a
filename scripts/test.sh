#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice,
# once in the normal build (g++) and once under ASan + UBSan (clang), and builds kvfuzz
# the way a new user or a packager does, with plain CMake and no preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
status=0
failed=()
for preset in default sanitize; do
  echo "== build and test: $preset"
  scripts/build.sh "$preset"
  if ! ctest --preset "$preset" -j"$(nproc)"; then
    status=1
    # ctest's own list of what failed, repeated at the end: a long log's tail must name it.
    list=build/$preset/Testing/Temporary/LastTestsFailed.log
    if [[ -f $list ]]; then
      while IFS= read -r line; do failed+=("$preset: ${line#*:}"); done <"$list"
    else
      failed+=("$preset: ctest failed (no list of failed tests at $list)")
    fi
  fi
done
scripts/plain-build.sh || { status=1; failed+=("plain Release build (log: build/plain-release.log)"); }
if ((status != 0)); then
  echo "== kvfuzz test: FAILED (${#failed[@]}):" >&2
  printf '  %s\n' "${failed[@]}" >&2
fi
exit $status
