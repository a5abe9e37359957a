#!/bin/sh
# check_junit.sh KVFUZZ PYTHON DIR SOURCE: kvfuzz check --junit on mutants (rejected and
# missed) and on an exec engine whose name holds the characters XML escapes, then the
# report read by junitparser (check_junit.py).
set -eu
kvfuzz=$1 python=$2 dir=$3 source=$4
rm -rf "$dir" && mkdir -p "$dir"
status=0
"$kvfuzz" check --engine every --cases 10 --quiet --out "$dir/out" --junit "$dir/every.xml" \
  >"$dir/every.txt" || status=$?
[ "$status" -le 1 ] || { echo "check --engine every: exit $status"; exit 1; }
status=0
"$kvfuzz" check --engine "exec:python3 $source/tests/doors/exec/misbehaving_engine.py traceback # <&\"'>" \
  --cases 2 --quiet --max-tokens 8 --out "$dir/out" --junit "$dir/traceback.xml" \
  >"$dir/traceback.txt" || status=$?
[ "$status" -eq 1 ] || { echo "check of the traceback engine: exit $status, expected 1"; exit 1; }
exec "$python" "$source/tests/cli/check_junit.py" "$dir/every.xml" "$dir/traceback.xml"
