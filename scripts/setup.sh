#!/usr/bin/env bash
# Installs the Debian packages kvfuzz needs, only those that are missing. Idempotent and
# quiet when everything is present. Run as root (or through sudo) on Debian 12.
set -euo pipefail

packages=(cmake ninja-build g++ clang libclang-rt-14-dev libgtest-dev librapidcheck-dev python3
          nlohmann-json3-dev libcli11-dev clang-format)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "kvfuzz setup: installing ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "kvfuzz setup: missing packages (${missing[*]}) and not root; run as root" >&2; exit 2
  fi
else
  SUDO=
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
