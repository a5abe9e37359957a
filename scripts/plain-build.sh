#!/usr/bin/env bash
# Builds kvfuzz as a new user or a packager does: plain CMake, Release (-O3), the system
# compiler, no preset, so warnings are not errors (KVFUZZ_WERROR is off outside the
# presets). What it must prove is that such a build configures and compiles without a
# warning. The compiling is proven where it costs nothing extra: the default preset
# compiles every target with the same g++ at the same -O3 (only -g1 added), warnings as
# errors, so -O3's own warnings (g++ 12's -Wrestrict false positive on a std::string
# assignment was one) fail there (CMakePresets.json). What only this build shows is the
# configure without a preset and its generator (Unix Makefiles), so it builds the first
# two stages' libraries through them, not all 450 targets a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build/plain-release
log=build/plain-release.log
targets=(kvfuzz_support kvfuzz_scenario)
mkdir -p build
echo "== build: plain CMake, Release (cmake -S . -B $dir -DCMAKE_BUILD_TYPE=Release; targets ${targets[*]})"
if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "kvfuzz: the plain Release build failed (log: $log)" >&2
  exit 1
fi
if grep -n "warning:" "$log" >&2; then
  echo "kvfuzz: the plain Release build has warnings (above; log: $log)" >&2
  exit 1
fi
echo "plain Release build: no warnings"
