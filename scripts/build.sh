#!/usr/bin/env bash
# Configures (once) and builds one CMake preset: scripts/build.sh [default|sanitize|clang]
# Quiet on success; on failure prints the build log.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}
mkdir -p build
log=build/$preset.log
echo "kvfuzz: building preset '$preset' (log: $log)" >&2
if { [[ -f build/$preset/build.ninja ]] || cmake --preset "$preset"; } >"$log" 2>&1 &&
   cmake --build --preset "$preset" -- -j"$(nproc)" >>"$log" 2>&1; then
  exit 0
fi
cat "$log" >&2
echo "kvfuzz: build of preset '$preset' failed (log: $log)" >&2
exit 1
