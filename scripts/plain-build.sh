#!/usr/bin/env bash
# Builds kvfuzz as a new user or a packager does: plain CMake, Release (-O3), the system
# compiler, no preset, so warnings are not errors (KVFUZZ_WERROR is off outside the
# presets). It must build, and build without a warning: a warning that only -O3 shows (g++
# 12's -Wrestrict false positive on a std::string assignment was one) fails here instead
# of breaking the build of everyone who builds without the presets.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build/plain-release
log=build/plain-release.log
mkdir -p build
echo "== build: plain CMake, Release (cmake -S . -B $dir -DCMAKE_BUILD_TYPE=Release)"
if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release && cmake --build "$dir" -j"$(nproc)"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "kvfuzz: the plain Release build failed (log: $log)" >&2
  exit 1
fi
if grep -n "warning:" "$log" >&2; then
  echo "kvfuzz: the plain Release build has warnings (above; log: $log)" >&2
  exit 1
fi
echo "plain Release build: no warnings"
