#!/bin/sh
# needs_cpu.sh FLAG COMMAND...: runs COMMAND when this CPU has FLAG (as /proc/cpuinfo names
# it: avx512f, avx512_bf16); otherwise prints that the test needs it and exits 77, which
# ctest reports as "Not Run" (SKIP_RETURN_CODE), never as passed.
flag=$1
shift
if ! grep -qw "$flag" /proc/cpuinfo; then
  echo "needs a CPU with $flag (this machine's has none): not run"
  exit 77
fi
exec "$@"
