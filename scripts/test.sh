#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice,
# once in the normal build (g++) and once under ASan + UBSan (clang), and builds kvfuzz
# the way a new user or a packager does, with plain CMake and no preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
status=0
for preset in default sanitize; do
  echo "== build and test: $preset"
  scripts/build.sh "$preset"
  ctest --preset "$preset" -j"$(nproc)" || status=1
done
scripts/plain-build.sh || status=1
exit $status
