#!/bin/sh
# expect_exit.sh EXIT COMMAND...: runs COMMAND, shows its output, and passes when it exits
# with EXIT. A run expected to fail (EXIT 1) must fail on a row, not by an engine error:
# a broken adapter is not a caught bug.
expected=$1
shift
log=$(mktemp)
"$@" >"$log" 2>&1
status=$?
cat "$log"
if [ "$status" -ne "$expected" ]; then
  echo "expect_exit: exit status $status, expected $expected"
  rm -f "$log"
  exit 1
fi
if [ "$expected" -ne 0 ] && grep -q 'engine-error' "$log"; then
  echo "expect_exit: the expected failure is an engine error, not a wrong row"
  rm -f "$log"
  exit 1
fi
rm -f "$log"
