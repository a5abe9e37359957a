#!/bin/sh
# install_package.sh PYTHON SOURCE [PIP OPTION...]: pip-installs the kvfuzz package from
# SOURCE into PYTHON's environment (the project's .venv), with the options given (the
# build's config settings, tests/python/CMakeLists.txt). --no-build-isolation: the build backend and
# nanobind are the versions pinned in scripts/python-requirements.txt, already in .venv, so
# the build needs no network and reuses build/python (an isolated build would get a new
# temporary environment, and so a new configure, every time).
set -e
python=$1
source=$2
shift 2
"$(dirname "$0")/../adapters/require_venv.sh" "$python" scikit_build_core nanobind pytest numpy
log=$(mktemp)
if ! "$python" -m pip install --no-build-isolation --disable-pip-version-check -q "$@" "$source" >"$log" 2>&1; then
  cat "$log"
  echo "pip install of $source into $python's environment failed (above)"
  rm -f "$log"
  exit 1
fi
rm -f "$log"
"$python" -c "import kvfuzz; print('kvfuzz', kvfuzz.__version__, 'installed at', kvfuzz.__file__)"
