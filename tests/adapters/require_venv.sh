#!/bin/sh
# require_venv.sh PYTHON MODULE...: passes when PYTHON runs and imports every MODULE (each
# a PyPI package of the project's .venv or .venv-vllm); otherwise one line naming what is missing.
python=$1
shift
if ! "$python" -c '' 2>/dev/null; then
  echo "$python does not run: its virtual environment is missing; run scripts/setup.sh"
  exit 1
fi
for module in "$@"; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    echo "$python cannot import $module: the PyPI package $module is missing from its virtual environment; run scripts/setup.sh"
    exit 1
  fi
done
