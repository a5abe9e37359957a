#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice,
# once in the normal build (g++) and once under ASan + UBSan (clang), and builds kvfuzz
# the way a new user or a packager does, with plain CMake and no preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
status=0
failed=()
tails=() # (preset, test name) pairs whose output is repeated at the end
for preset in default sanitize; do
  echo "== build and test: $preset"
  scripts/build.sh "$preset"
  if ! ctest --preset "$preset" -j"$(nproc)"; then
    status=1
    # ctest's own list of what failed, repeated at the end: a long log's tail must name it.
    list=build/$preset/Testing/Temporary/LastTestsFailed.log
    if [[ -f $list ]]; then
      while IFS= read -r line; do
        failed+=("$preset: ${line#*:}")
        tails+=("$preset" "${line#*:}")
      done <"$list"
    else
      failed+=("$preset: ctest failed (no list of failed tests at $list)")
    fi
  fi
done
scripts/plain-build.sh || { status=1; failed+=("plain Release build (log: build/plain-release.log)"); }
if ((status != 0)); then
  # The end of each failed test's own output, from ctest's log: CI shows only the tail.
  for ((i = 0; i < ${#tails[@]}; i += 2)); do
    echo "== output of ${tails[i]}: ${tails[i + 1]} (its last 80 lines)" >&2
    awk -v name="${tails[i + 1]}" '
      $0 ~ "^[0-9]+/[0-9]+ Testing: " && substr($0, index($0, ": ") + 2) == name { on = 1; next }
      on && /^<end of output>$/ { exit }
      on { print }' "build/${tails[i]}/Testing/Temporary/LastTest.log" | tail -n 80 >&2 || true
  done
  echo "== kvfuzz test: FAILED (${#failed[@]}):" >&2
  printf '  %s\n' "${failed[@]}" >&2
fi
exit $status
