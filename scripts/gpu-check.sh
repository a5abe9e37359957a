#!/usr/bin/env bash
# The CUDA engines on a GPU, in one command (issue 16). CI has no GPU and runs the cuda-*
# engines' kernels on the SIMT launcher; this script is what a machine with a GPU runs:
#
#   1. builds build/gpu with KVFUZZ_CUDA_DEVICE=ON (the engines' sources compiled by nvcc
#      for sm_90, their kernels launched on the device): kvfuzz, properties (built only, to
#      show the GoogleTest suites link against the device engines; kvfuzz check below runs
#      the same properties) and cuda_decode_bandwidth;
#   2. all six properties on cuda-paged and cuda-paged-bf16 (kvfuzz check), whose cases per
#      second are the "checks/s" of the summary;
#   3. the five kernel-only mutants, each of which must be rejected;
#   4. the corpus (kvfuzz replay corpus/);
#   5. the paged decode kernel's bandwidth, bytes of K/V read per second against a
#      device-to-device copy of the same bytes (bench/cuda_decode_bandwidth.cu);
#   6. compute-sanitizer memcheck and racecheck over a bounded run, failing on any error
#      (last: the slowest, so a short budget cuts them rather than the rest);
#
# and ends with a summary block to paste into docs/BENCHMARKS.md ("CUDA engines on a
# device"). At most 8 minutes on one H200: every stage runs under `timeout`, within its own
# cap and within what is left of one budget for the whole run, so a stage that hangs
# costs its cap, not the machine. Each stage's full output is kept in $GPU_CHECK_LOGS.
#
# Exit status: 0 every stage passed; 1 a stage failed (the summary says which); 2 it cannot
# run here: no GPU, a driver older than the toolkit, or a tool or library missing (one line
# says which). It installs nothing and needs no network (the device machine may have
# none), so it never calls scripts/setup.sh or pip.
#
# Settings (environment):
#   GPU_CHECK_CASES    cases of the property run (default 200; each on both engines)
#   GPU_CHECK_SEED     its seed (default 1)
#   GPU_CHECK_JOBS     kvfuzz's workers and the build's jobs (default: the number of cores)
#   GPU_CHECK_LOGS     where the logs, JSON summaries and fixtures go (default build/gpu/gpu-check)
#   COMPUTE_SANITIZER  compute-sanitizer's path, when it is neither on the PATH nor in the
#                      CUDA toolkit's usual places
set -euo pipefail
cd "$(dirname "$0")/.."

# Seconds for every stage together: 8 minutes, less the margin of each stage's --kill-after
# and of the checks before the first stage.
readonly BUDGET=450
readonly BUILD=build/gpu
readonly KVFUZZ=$BUILD/harness/kvfuzz
readonly CASES=${GPU_CHECK_CASES:-200}
readonly SEED=${GPU_CHECK_SEED:-1}
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
readonly JOBS
readonly LOGS=${GPU_CHECK_LOGS:-$BUILD/gpu-check}
readonly HONEST=cuda-paged,cuda-paged-bf16
# The wide-pool mutant is run on its own, one worker at a time: on the device its pool is a
# real allocation past 2^32 elements (16 GiB and more per engine), and many at once could run
# out of memory, which would be "rejected" by an allocation error instead of by its bug.
# The hazard mutants (cuda-race-unsynced-pages, cuda-barrier-per-branch,
# cuda-race-merge-no-syncwarp) are left out: they are the SIMT launcher's race and barrier
# checks' to name, and on a device their rows may come out right by the luck of the order
# (compute-sanitizer's racecheck, run below, is the device's check).
readonly MUTANTS=cuda-missing-tile-sync,cuda-empty-split-unwritten,cuda-half-warp-reduce,cuda-split-bound-past-length
readonly WIDE_MUTANT=cuda-offset-32bit

die() { # one line and exit 2: this machine cannot run the check
  echo "gpu-check: $*" >&2
  exit 2
}

# --- Can this machine run it at all? -------------------------------------------------
# A GPU first: without one nothing below means anything, so say so before building.
command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi is not installed (no NVIDIA driver on this machine)"
smi_query=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) ||
  die "no GPU: nvidia-smi failed: $(head -n 1 <<<"$smi_query")"
[[ -n $smi_query ]] || die "no GPU: nvidia-smi lists no device"
IFS=, read -r gpu_name driver_version gpu_memory <<<"$(head -n 1 <<<"$smi_query")"
gpu_name=${gpu_name## }
driver_version=${driver_version## }
gpu_memory=${gpu_memory## }
driver_cuda=$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1 || true)
echo "device: $gpu_name (driver $driver_version, CUDA ${driver_cuda:-?}, $gpu_memory)"

# nvcc from the toolkit's usual place when it is not on the PATH (a login shell's PATH
# often lacks /usr/local/cuda/bin); CMake's CUDA language and the bench need it.
if ! command -v nvcc >/dev/null; then
  for dir in "${CUDA_HOME:-}/bin" "${CUDA_PATH:-}/bin" /usr/local/cuda/bin; do
    if [[ -x $dir/nvcc ]]; then
      PATH=$dir:$PATH
      break
    fi
  done
fi

# Everything the build needs, said in one line: the device machine may lack what the
# development machine has, and nothing here may install it.
missing=()
cpath=${CPATH:-} # a compiler's extra include folders
for tool in cmake ninja g++ nvcc timeout; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
# Libraries by a header of each, named by their Debian packages.
for header in gtest/gtest.h:libgtest-dev rapidcheck.h:librapidcheck-dev CLI/CLI.hpp:libcli11-dev \
  nlohmann/json.hpp:nlohmann-json3-dev boost/context/detail/fcontext.hpp:libboost-context-dev; do
  found=
  for dir in /usr/include /usr/local/include ${cpath//:/ }; do
    [[ -f $dir/${header%%:*} ]] && found=1
  done
  [[ -n $found ]] || missing+=("${header#*:}")
done
((${#missing[@]} == 0)) || die "missing: ${missing[*]} (this script installs nothing; on Debian scripts/setup.sh does, where there is network)"

# A toolkit newer than the driver builds binaries the driver cannot run ("CUDA driver
# version is insufficient"): said here, not as five failed stages.
nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
if [[ -n $driver_cuda && -n $nvcc_version && ${driver_cuda%%.*} -lt ${nvcc_version%%.*} ]]; then
  die "the driver supports CUDA $driver_cuda, older than nvcc's $nvcc_version: install a driver for CUDA ${nvcc_version%%.*} or use a CUDA ${driver_cuda%%.*} toolkit"
fi

# compute-sanitizer ships with the toolkit, not always on the PATH. Its absence fails the
# two sanitizer stages (below), not the whole run.
sanitizer=${COMPUTE_SANITIZER:-}
if [[ -z $sanitizer ]]; then
  nvcc_dir=$(dirname "$(command -v nvcc)")
  for candidate in "$(command -v compute-sanitizer || true)" "$nvcc_dir/compute-sanitizer" \
    "$nvcc_dir/../compute-sanitizer/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [[ -n $candidate && -x $candidate ]]; then
      sanitizer=$candidate
      break
    fi
  done
fi

mkdir -p "$LOGS"
readonly START=$SECONDS

# --- Stages ---------------------------------------------------------------------------
stage_names=()
stage_results=()
stage_seconds=()

record() { # NAME RESULT SECONDS
  stage_names+=("$1")
  stage_results+=("$2")
  stage_seconds+=("$3")
}

# Replaces the result of the last recorded stage (a check after its command: the JSON, a
# sanitizer's summary) and says why.
fail_last() {
  stage_results[${#stage_results[@]} - 1]="FAIL ($1)"
  echo "   FAIL: $1"
}

# Prints a log: whole when short, else its head (where kvfuzz check puts its table) and its
# tail (where errors and summaries are).
show_log() {
  local log=$1
  if (($(wc -l <"$log") <= 30)); then
    sed 's/^/   /' "$log"
  else
    head -n 14 "$log" | sed 's/^/   /'
    echo "   ... ($log)"
    tail -n 14 "$log" | sed 's/^/   /'
  fi
}

# run_stage NAME CAP COMMAND...: COMMAND under `timeout`, for at most CAP seconds or what is
# left of the budget; its output goes to $LOGS/NAME.log. Records PASS or FAIL with the
# seconds it took and returns COMMAND's status.
run_stage() {
  local name=$1 cap=$2
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  local limit=$((cap < left ? cap : left))
  local log=$LOGS/$name.log t0=$SECONDS status=0
  if ((limit < 10)); then
    echo "== $name: not run, the budget of $BUDGET s is spent"
    record "$name" "FAIL (no time left)" 0
    return 1
  fi
  echo "== $name (at most $limit s): $*"
  # --kill-after: a process that ignores SIGTERM (a wedged driver call) still ends.
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || status=$?
  local took=$((SECONDS - t0))
  show_log "$log"
  if ((status == 0)); then
    record "$name" PASS "$took"
  elif ((status == 124 || status == 137)); then
    record "$name" "FAIL (timed out after $limit s)" "$took"
    echo "   FAIL: timed out after $limit s"
  else
    record "$name" "FAIL (exit status $status)" "$took"
    echo "   FAIL: exit status $status"
  fi
  return "$status"
}

# What the summary reports beside the stages.
checks_per_second=
decode_gbps=
copy_gbps=
ratio=

# The verdict of each engine of a `kvfuzz check --json` file, one "NAME VERDICT
# SIGNATURES" line each, and nonzero when some mutant was rejected only by errors (an
# engine error or a crash: out of device memory, say) and never by a wrong row: that
# rejection says nothing about its bug. Needs python3; without it the exit status alone
# judges.
mutant_verdicts() {
  command -v python3 >/dev/null || {
    echo "(python3 not found: per-mutant verdicts not read from $1)"
    return 0
  }
  python3 - "$1" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
only_errors = []
for engine in summary["engines"]:
    signatures = sorted({f["signature"] for f in summary["findings"] if f["engine"] == engine["name"]})
    print(f'{engine["name"]} {engine["verdict"]} {",".join(signatures) or "-"}')
    errors = ("engine-error", "crash/", "exit/", "timeout")
    if signatures and all(any(e in s for e in errors) for s in signatures):
        only_errors.append(engine["name"])
if only_errors:
    print("rejected only by errors, not by a wrong row: " + ", ".join(only_errors) +
          " (read the finding's report: it may be the device, not the bug)")
    sys.exit(1)
EOF
}

# Whether a compute-sanitizer log shows that the tool ran and found nothing: exit status 0
# (with --error-exitcode) is not enough alone, since a tool that could not attach prints
# an error of its own and may leave the application's status.
sanitizer_clean() {
  local log=$1
  grep -q '^========= .*SUMMARY' "$log" || return 1
  ! grep -qE '^========= (ERROR SUMMARY: [1-9]|.*\([1-9][0-9]* errors?)' "$log"
}

# --- 1. Build -------------------------------------------------------------------------
# g++ as the host compiler (the project's presets' compiler, and nvcc's default host
# compiler). CMAKE_CUDA20_STANDARD_COMPILE_OPTION: CMake before 3.26 (Debian 12 has 3.25)
# knows no -std flag for CUDA C++20 with nvcc and refuses CMAKE_CUDA_STANDARD 20; newer
# CMake sets its own and ignores this one.
built=0
if run_stage configure 60 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVFUZZ_CUDA_DEVICE=ON -DCMAKE_CXX_COMPILER=g++ -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20; then
  if run_stage build 240 cmake --build "$BUILD" -j "$JOBS" --target kvfuzz properties cuda_decode_bandwidth; then
    built=1
  fi
fi

if ((built)); then
  # --- 2. All six properties on the honest CUDA engines --------------------------------
  t0=$EPOCHREALTIME
  if run_stage properties 120 "$KVFUZZ" check --engine "$HONEST" --cases "$CASES" --seed "$SEED" \
    --jobs "$JOBS" --quiet --out "$LOGS/kvfuzz-out" --json "$LOGS/properties.json"; then
    # One check: one case on one engine, judged by all six properties.
    # Wall time of the whole run (workers' start-up and CUDA contexts included).
    read -r seconds checks_per_second < <(awk -v n="$CASES" -v t0="$t0" -v t1="$EPOCHREALTIME" \
      'BEGIN { printf "%.1f %.1f\n", t1 - t0, 2 * n / (t1 - t0) }')
    echo "   $CASES cases x 2 engines in $seconds s: $checks_per_second checks/s ($JOBS workers)"
  fi

  # The attention features on the device (cuda/logit_features.cuh): soft cap, sinks, ALiBi
  # and chunked local attention forced on every case.
  run_stage features 60 "$KVFUZZ" check --engine "$HONEST" --cases 100 --seed "$SEED" \
    --jobs "$JOBS" --quiet --feature softcap,sinks,alibi,chunked_local \
    --out "$LOGS/kvfuzz-out-features" || true

  # Quantized K/V caches on the device (cuda/dtype.cuh's fp8 with the scales in load_k and
  # load_v; cuda/blocks.cuh's ggml blocks and MLX's affine groups, written a block per
  # thread by append_kv).
  run_stage quantized-kv 60 "$KVFUZZ" check --engine "$HONEST" --cases 100 --seed "$SEED" \
    --jobs "$JOBS" --quiet \
    --kv-format fp8_e4m3fn,fp8_e5m2,q8_0,q4_0,q4_1,q5_0,q5_1,affine2,affine4,affine8 \
    --out "$LOGS/kvfuzz-out-quantized-kv" || true

  # MLA on the device: no V pool, each value read from its key row (paged_kv.cuh, load_v).
  run_stage mla 60 "$KVFUZZ" check --engine "$HONEST" --cases 100 --seed "$SEED" \
    --jobs "$JOBS" --quiet --feature value_from_key --out "$LOGS/kvfuzz-out-mla" || true

  # --- 3. The kernel-only mutants: each must be rejected ------------------------------
  # kvfuzz check exits 0 when every mutant was rejected; a mutant stops at its first
  # finding, so the cases are an upper bound, reached only by a mutant that survives. Two
  # runs (WIDE_MUTANT above), each a stage of the summary.
  for run in "mutants:$MUTANTS:$JOBS:200" "mutant-wide-pool:$WIDE_MUTANT:1:40"; do
    IFS=: read -r name engines workers cases <<<"$run"
    run_stage "$name" 60 "$KVFUZZ" check --engine "$engines" --cases "$cases" --seed "$SEED" \
      --jobs "$workers" --quiet --out "$LOGS/kvfuzz-out" --json "$LOGS/$name.json" && passed=1 || passed=0
    if [[ -f $LOGS/$name.json ]]; then
      verdicts_ok=1
      verdicts=$(mutant_verdicts "$LOGS/$name.json") || verdicts_ok=0
      while IFS= read -r line; do echo "   $line"; done <<<"$verdicts"
      if ((passed && !verdicts_ok)); then fail_last "a mutant rejected only by errors"; fi
    fi
  done

  # --- 4. The corpus -------------------------------------------------------------------
  # cuda-paged-bf16 skips the fixtures outside bf16 storage, saying so.
  run_stage replay 60 "$KVFUZZ" replay corpus/ --engine "$HONEST" || true

  # --- 5. Decode bandwidth -------------------------------------------------------------
  if run_stage bandwidth 60 "$BUILD/bench/cuda_decode_bandwidth"; then
    line=$(grep '^summary:' "$LOGS/bandwidth.log" || true)
    decode_gbps=$(sed -n 's/.* decode_gbps=\([0-9.]*\).*/\1/p' <<<"$line")
    copy_gbps=$(sed -n 's/.* copy_gbps=\([0-9.]*\).*/\1/p' <<<"$line")
    ratio=$(sed -n 's/.* ratio=\([0-9.]*\).*/\1/p' <<<"$line")
    [[ -n $decode_gbps ]] || fail_last "no summary line in $LOGS/bandwidth.log"
  fi

  # --- 6. compute-sanitizer ------------------------------------------------------------
  # A bounded run in kvfuzz's own process (--no-fork: the sanitizer follows one process,
  # and a forked worker's CUDA context would be made after the fork anyway): three cases
  # of the prefix property on cuda-paged, which launch every kernel (cache writes, decode
  # split and merge, chunked prefill, pool fills and copies). memcheck: out-of-bounds and
  # misaligned accesses, device exceptions; racecheck: shared-memory hazards, the class
  # of bug the missing-tile-sync mutant plants. --error-exitcode tells a sanitizer error
  # (86) from a kvfuzz finding (1).
  for tool in memcheck racecheck; do
    if [[ -z $sanitizer ]]; then
      echo "== $tool: compute-sanitizer not found (set COMPUTE_SANITIZER to its path)"
      record "$tool" "FAIL (compute-sanitizer not found)" 0
      continue
    fi
    cap=90 # racecheck tracks every shared-memory access: slower
    if [[ $tool == racecheck ]]; then cap=120; fi
    if run_stage "$tool" "$cap" "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
      "$KVFUZZ" check --engine cuda-paged --cases 3 --seed "$SEED" --no-fork --property prefix \
      --quiet --out "$LOGS/kvfuzz-out-$tool"; then
      sanitizer_clean "$LOGS/$tool.log" || fail_last "no clean summary from compute-sanitizer in $LOGS/$tool.log"
    fi
  done
else
  for name in properties mutants mutant-wide-pool replay bandwidth memcheck racecheck; do
    record "$name" "not run (no build)" 0
  done
fi

# --- Summary ------------------------------------------------------------------------------
status=0
for result in "${stage_results[@]}"; do
  [[ $result == PASS ]] || status=1
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $commit != unknown && -n $(git status --porcelain 2>/dev/null) ]]; then
  commit="$commit + local changes"
fi
echo
echo "== gpu-check summary (for docs/BENCHMARKS.md, \"CUDA engines on a device\")"
echo
echo "Device: $gpu_name (driver $driver_version, CUDA ${driver_cuda:-?}, $gpu_memory); nvcc $nvcc_version;"
echo "$(nproc) cores; commit $commit; $(date -u +%Y-%m-%d)."
echo "Command: scripts/gpu-check.sh ($CASES cases, seed $SEED, $JOBS workers), $((SECONDS - START)) s in all."
echo
echo "| stage | result | seconds |"
echo "|---|---|---:|"
for i in "${!stage_names[@]}"; do
  echo "| ${stage_names[i]} | ${stage_results[i]} | ${stage_seconds[i]} |"
done
echo
echo "| checks/s | decode GB/s | copy GB/s (read + write) | decode / copy |"
echo "|---:|---:|---:|---:|"
echo "| ${checks_per_second:--} | ${decode_gbps:--} | ${copy_gbps:--} | ${ratio:--} |"
echo
if ((status == 0)); then
  echo "gpu-check: every stage passed (logs: $LOGS)"
else
  echo "gpu-check: FAILED (logs: $LOGS)" >&2
fi
exit $status
