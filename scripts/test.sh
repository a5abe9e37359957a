#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice,
# once in the normal build (g++) and once under ASan + UBSan (clang), and builds kvfuzz
# the way a new user or a packager does, with plain CMake and no preset.
#
#   scripts/test.sh          what CI runs (.ci/run); the target is 30 minutes on a fresh
#                            2-core machine, the last measured times are in
#                            docs/BENCHMARKS.md, "The test command"
#   scripts/test.sh --long   also the long generated runs under ASan + UBSan (ctest label
#                            `long`: they always run in the default build), every case of
#                            the honest engines' generated runs there (a fifth otherwise:
#                            KVFUZZ_TEST_LONG=1, tests/generated_cases.h), the fuzz
#                            preset's build, the ClusterFuzzLite build (clusterfuzzlite_build,
#                            also label `long`), and the RapidCheck properties at 1000
#                            cases instead of 60; before a release
#
# Each phase's time is printed at the end (docs/BENCHMARKS.md, "The test command"), so that
# drift shows in every CI log.
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
case "${1:-}" in
  "") ;;
  --long)
    long=1
    export KVFUZZ_TEST_LONG=1
    ;;
  -h | --help)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "scripts/test.sh: unknown argument '$1' (expected nothing or --long)" >&2
    exit 2
    ;;
esac

phases=() # "name seconds" per finished phase, printed at the end
started=$SECONDS
# timed NAME COMMAND...: runs COMMAND, records its wall time under NAME, returns its status.
timed() {
  local name=$1 start=$SECONDS status=0
  shift
  "$@" || status=$?
  phases+=("$name $((SECONDS - start))")
  return $status
}
print_phases() {
  echo "== kvfuzz test: time per phase (seconds)"
  local entry
  for entry in "${phases[@]}"; do printf '  %-22s %5s\n' "${entry% *}" "${entry##* }"; done
  printf '  %-22s %5s\n' total $((SECONDS - started))
}

timed setup scripts/setup.sh
status=0
failed=()
tails=() # (preset, test name) pairs whose output is repeated at the end
for preset in default sanitize; do
  echo "== build and test: $preset"
  # `all`: the sanitize build without the fuzz preset's that scripts/build.sh adds for
  # campaigns. No test runs those targets; clusterfuzzlite_build (label `long`) compiles the
  # same fuzz-targets-only configuration with the service's flags and runs it, and --long
  # builds the fuzz preset too.
  timed "build $preset" scripts/build.sh "$preset" all
  # One test more than cores: a fifth of the tests' time is spent waiting (an engine's
  # timeout, a hang, a campaign's clock, a child's start), and a third test fills it
  # (docs/BENCHMARKS.md, "The test command": the sanitize tests' CPU use 79% -> 90%).
  ctest_args=(--preset "$preset" -j"$(($(nproc) + 1))")
  # Under ASan + UBSan the sanitizers are what is tested; the long generated runs (label
  # `long`) check behaviour and counts, which the default build already did.
  if [[ $preset == sanitize ]] && ((!long)); then ctest_args+=(--label-exclude long); fi
  if ! timed "ctest $preset" ctest "${ctest_args[@]}"; then
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
if ((long)); then
  timed "build fuzz" scripts/build.sh fuzz || { status=1; failed+=("fuzz preset build (log: build/fuzz.log)"); }
  timed "properties x1000" env RC_PARAMS="seed=1 max_success=1000" build/default/properties/properties ||
    { status=1; failed+=("default: properties at 1000 cases (RC_PARAMS=\"seed=1 max_success=1000\")"); }
fi
timed "plain build" scripts/plain-build.sh ||
  { status=1; failed+=("plain Release build (log: build/plain-release.log)"); }
print_phases
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
