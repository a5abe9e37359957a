#!/usr/bin/env bash
# Configures (once) and builds one CMake preset: scripts/build.sh [default|sanitize|clang|fuzz]
# [TARGET...] (sanitize also builds fuzz: the campaign targets without sanitizers). With
# targets, only those and what they need (the quick start builds only the command).
# Shows the build's progress (scripts/build-progress.sh: one updating line on a terminal, a
# line every 10 percent otherwise); the full output goes to the log, printed on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}
targets=("${@:2}")
target_args=()
((${#targets[@]} == 0)) || target_args=(--target "${targets[@]}")
mkdir -p build
log=build/$preset.log
echo "kvfuzz: building preset '$preset' (log: $log)" >&2
: >"$log"
# The status format the progress filter reads, whatever the caller's NINJA_STATUS.
export NINJA_STATUS="[%f/%t] "
# Configured again when CMakePresets.json changed since: a preset's new cache variables
# would otherwise never reach a build folder made before them.
if { [[ -f build/$preset/build.ninja && build/$preset/CMakeCache.txt -nt CMakePresets.json ]] ||
     cmake --preset "$preset"; } >>"$log" 2>&1 &&
   cmake --build --preset "$preset" "${target_args[@]}" -- -j"$(nproc)" 2>&1 |
   scripts/build-progress.sh "$log"; then
  # The sanitize preset's fuzz targets serve the CI smoke tests and `kvfuzz campaign
  # --sanitize`; a plain `kvfuzz campaign` runs the fuzz preset's (no sanitizers, several
  # times faster), so whatever builds the one builds the other.
  if [[ $preset == sanitize && ${#targets[@]} -eq 0 ]]; then exec "$0" fuzz; fi
  exit 0
fi
cat "$log" >&2
echo "kvfuzz: build of preset '$preset' failed (log: $log)" >&2
exit 1
