#!/usr/bin/env bash
# The layering docs/architecture.md promises, checked as text:
#  * kernels/ (the engines under test) includes only public headers (harness/include/kvfuzz/)
#    and its own, never a harness stage's private ones;
#  * the judge (harness/src/judge/) knows nothing of the model level built on it, and the
#    model level nothing of the dispatch above both (harness/src/verdict/);
#  * the orchestration stage (harness/src/orchestrate/) knows nothing of the doors on it:
#    kvfuzz check's workers (harness/src/check/), the CLI, the Python package.
# Prints each offending line; exit 1 when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r line; do
  file=${line%%:*}
  header=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
  if [[ ! -f "kernels/$header" && ! -f "harness/include/$header" ]]; then
    echo "$line: kernels/ includes a header that is neither public nor the kernels' own"
    bad=1
  fi
done < <(grep -rn --include='*.cpp' --include='*.h' --include='*.cuh' '^#include "' kernels)
if grep -rn --include='*.cpp' --include='*.h' -E '^#include "(model|verdict)/' harness/src/judge; then
  echo "harness/src/judge includes the model level or the verdict above it"
  bad=1
fi
if grep -rn --include='*.cpp' --include='*.h' '^#include "verdict/' harness/src/model; then
  echo "harness/src/model includes the verdict above it"
  bad=1
fi
if grep -rn --include='*.cpp' --include='*.h' -E '^#include "(check|cli)/' harness/src/orchestrate; then
  echo "harness/src/orchestrate includes a door built on it"
  bad=1
fi
exit $bad
