#!/bin/bash
# Builds kvfuzz's libFuzzer targets the way ClusterFuzzLite / OSS-Fuzz expect
# (docs/campaigns.md): every target in $OUT, with <target>_seed_corpus.zip, <target>.dict
# and <target>.options next to it.
#
# The service chooses compiler, sanitizer and fuzzing engine through the environment, so
# this script adds no flags of its own:
#   $CXX, $CXXFLAGS       compiler and flags (sanitizer, coverage, -stdlib=libc++ on the
#                         service); CMake's CMAKE_CXX_FLAGS are exactly $CXXFLAGS.
#   $CC, $CFLAGS          unused: kvfuzz is C++ only (project(... LANGUAGES CXX)).
#   $LIB_FUZZING_ENGINE   how fuzz targets are linked (KVFUZZ_FUZZING_ENGINE).
#   $OUT                  where the targets and their files go (required).
#   $WORK                 scratch space; the build goes to $WORK/build (else a temp dir).
#   $SRC                  the checkout is $SRC/kvfuzz on the service; $SRC itself, or the
#                         checkout this script lies in, when run by hand.
#
# The property targets fuzz the engine named by KVFUZZ_ENGINE at run time, "contiguous"
# when unset, which is what the service runs: the honest reference engine, where any
# failure is a real bug (a mutant would "fail" by design).
set -euo pipefail

if [[ -z "${OUT:-}" ]]; then
  echo "build.sh: \$OUT is not set (the directory the fuzz targets go to)" >&2
  exit 2
fi
mkdir -p "$OUT"

# The checkout: the first of these that holds the fuzz targets' sources.
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=""
for candidate in "${SRC:+$SRC/kvfuzz}" "${SRC:-}" "$script_dir/.." "$PWD"; do
  if [[ -n "$candidate" && -f "$candidate/fuzzers/fuzz_property.cpp" ]]; then
    source_dir=$(cd "$candidate" && pwd)
    break
  fi
done
if [[ -z "$source_dir" ]]; then
  echo "build.sh: cannot find the kvfuzz checkout (tried \$SRC/kvfuzz, \$SRC, $script_dir/.., $PWD)" >&2
  exit 2
fi

if [[ -n "${WORK:-}" ]]; then
  build_dir="$WORK/build"
else
  build_dir=$(mktemp -d)
  trap 'rm -rf "$build_dir"' EXIT
fi
# A fresh configure every time: CMake reads $CXXFLAGS only into a new cache, and a cache
# left by another sanitizer's build would silently keep that sanitizer's flags.
rm -rf "$build_dir"
mkdir -p "$build_dir"

generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

echo "build.sh: building $source_dir in $build_dir (CXX=${CXX:-clang++}, engine: ${LIB_FUZZING_ENGINE:--fsanitize=fuzzer})"
# No CMAKE_BUILD_TYPE: its flags (-O2, -g, -DNDEBUG) would add to or fight the service's
# $CXXFLAGS. Warnings are not errors here: the service's clang is newer than the ones the
# project promises a warning-free build on, and a new warning must not stop the fuzzing.
cmake -S "$source_dir" -B "$build_dir" "${generator[@]}" \
  -DKVFUZZ_FUZZERS_ONLY=ON \
  -DKVFUZZ_WERROR=OFF \
  -DKVFUZZ_FUZZING_ENGINE="${LIB_FUZZING_ENGINE:--fsanitize=fuzzer}" \
  -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DCMAKE_CXX_FLAGS="${CXXFLAGS:-}"
cmake --build "$build_dir" --parallel "$(nproc)"

# In KVFUZZ_FUZZERS_ONLY mode the install rules put exactly the fuzz targets, flat, into
# the prefix; its manifest names them, so a new target needs no edit here.
cmake --install "$build_dir" --prefix "$OUT"
targets=()
# (|| [[ -n ... ]]: the manifest's last line has no newline)
while IFS= read -r installed || [[ -n $installed ]]; do targets+=("$(basename "$installed")"); done \
  < "$build_dir/install_manifest.txt"
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "build.sh: the build installed no fuzz targets" >&2
  exit 1
fi

# Every fixture under corpus/ is a valid input for every target (inputs that start with
# '{' are parsed as fixtures), so all targets share one seed corpus. The zip is written by
# CMake, so that the image needs no zip package; names are flattened (libFuzzer reads a
# corpus as a flat directory), and prefixed by their folder to keep them distinct.
corpus_dir="$build_dir/seed_corpus"
mkdir -p "$corpus_dir"
while IFS= read -r -d '' fixture; do
  relative=${fixture#"$source_dir/corpus/"}
  cp "$fixture" "$corpus_dir/${relative//\//_}"
done < <(find "$source_dir/corpus" -type f -name '*.json' -print0)
fixture_count=$(find "$corpus_dir" -type f | wc -l)
(cd "$corpus_dir" && cmake -E tar cf "$build_dir/seed_corpus.zip" --format=zip -- *.json)

for target in "${targets[@]}"; do
  cp "$build_dir/seed_corpus.zip" "$OUT/${target}_seed_corpus.zip"
  # The service picks up <target>.dict by itself; the .options file says so explicitly
  # for runners that only read options.
  cp "$source_dir/fuzzers/fixture.dict" "$OUT/$target.dict"
  printf '[libfuzzer]\ndict = %s.dict\n' "$target" > "$OUT/$target.options"
  echo "build.sh: $OUT/$target (+ seed corpus of $fixture_count fixtures, dict, options)"
done
