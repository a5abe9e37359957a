#!/bin/sh
# expect_exit.sh [--long-cases N] EXIT COMMAND...: runs COMMAND, shows its output, and
# passes when it exits with EXIT. A run expected to fail (EXIT 1) must fail on a row, not
# by an engine error: a broken adapter is not a caught bug. With --long-cases N and
# KVFUZZ_TEST_LONG=1 (scripts/test.sh --long), COMMAND's `--cases` value becomes N.
long_cases=
if [ "$1" = "--long-cases" ]; then
  long_cases=$2
  shift 2
fi
expected=$1
shift
if [ -n "$long_cases" ] && [ "${KVFUZZ_TEST_LONG:-}" = 1 ]; then
  for arg; do
    shift
    if [ "${previous:-}" = "--cases" ]; then arg=$long_cases; fi
    set -- "$@" "$arg"
    previous=$arg
  done
fi
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
