#!/bin/bash
# Runs .clusterfuzzlite/build.sh here the way ClusterFuzzLite / OSS-Fuzz run it for
# libFuzzer + AddressSanitizer (docs/campaigns.md), then checks what the service would
# look for in $OUT and runs every target briefly on its own seed corpus. It catches, without
# Docker, a build.sh or CMake change that would break the service's build.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fail() {
  echo "clusterfuzzlite_build: FAIL: $*" >&2
  exit 1
}

# The variables base-builder sets for FUZZING_ENGINE=libfuzzer SANITIZER=address, less
# -stdlib=libc++ (the service's clang brings its own libc++; here the system's libstdc++
# is the one there is).
flags="-O1 -fno-omit-frame-pointer -gline-tables-only -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION"
flags+=" -fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link"
export CC=clang CXX=clang++ CFLAGS="$flags" CXXFLAGS="$flags"
export LIB_FUZZING_ENGINE=-fsanitize=fuzzer SANITIZER=address FUZZING_ENGINE=libfuzzer ARCHITECTURE=x86_64
export OUT="$scratch/out" WORK="$scratch/work" SRC="$repo"
mkdir -p "$OUT" "$WORK"

echo "clusterfuzzlite_build: running .clusterfuzzlite/build.sh (OUT=$OUT WORK=$WORK SRC=$SRC)"
bash "$repo/.clusterfuzzlite/build.sh" || fail ".clusterfuzzlite/build.sh exited with status $?"

targets=(fuzz_fixture fuzz_prefix fuzz_schedule fuzz_layout fuzz_poison fuzz_reset fuzz_batch)
for target in "${targets[@]}"; do
  [[ -x "$OUT/$target" ]] || fail "$target: no executable $OUT/$target"
  [[ -s "$OUT/${target}_seed_corpus.zip" ]] || fail "$target: no $OUT/${target}_seed_corpus.zip"
  [[ -s "$OUT/$target.dict" ]] || fail "$target: no $OUT/$target.dict"
done
echo "clusterfuzzlite_build: all ${#targets[@]} targets, seed corpora and dicts are in \$OUT"

# Each target starts from its unpacked seed corpus as the service would (the fixtures must
# load, and the honest default engine must pass them), then mutates a little with the dict.
for target in "${targets[@]}"; do
  corpus="$scratch/corpus/$target"
  artifacts="$scratch/artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  (cd "$corpus" && cmake -E tar xf "$OUT/${target}_seed_corpus.zip") ||
    fail "$target: cannot unpack ${target}_seed_corpus.zip"
  seeds=$(find "$corpus" -type f -name '*.json' | wc -l)
  [[ "$seeds" -gt 0 ]] || fail "$target: ${target}_seed_corpus.zip holds no fixtures"
  echo "clusterfuzzlite_build: $target: 300 runs from $seeds seeds"
  log="$scratch/$target.log"
  # The environment the service gives: no KVFUZZ_ENGINE, so the default engine.
  if ! env -u KVFUZZ_ENGINE "$OUT/$target" -runs=300 -seed=1 -timeout=30 -rss_limit_mb=2560 \
      -dict="$OUT/$target.dict" -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    fail "$target: the fuzz run on its seed corpus failed (log above)"
  fi
done
echo "clusterfuzzlite_build: PASS"
