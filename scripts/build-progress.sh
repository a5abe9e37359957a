#!/usr/bin/env bash
# Shows a build's progress: reads ninja's output (NINJA_STATUS "[%f/%t] ") on stdin, appends
# all of it to the log named by $1, and prints on stderr only the progress: on a terminal one
# line that each "[done/total] step" line rewrites (cleared at the end), otherwise a line
# every 10 percent, so that CI logs and scripts/test.sh stay short. scripts/build.sh uses it.
# Usage: ... | scripts/build-progress.sh LOG
set -euo pipefail
log=${1:?usage: build-progress.sh LOG}
terminal=0
columns=80
if [[ -t 2 ]]; then
  terminal=1
  columns=$(stty size </dev/tty 2>/dev/null | cut -d' ' -f2) || true
  [[ $columns =~ ^[0-9]+$ && $columns -gt 10 ]] || columns=80
fi
exec awk -v logfile="$log" -v terminal="$terminal" -v columns="$columns" '
  { print >> logfile; fflush(logfile) }
  match($0, /^\[[0-9]+\/[0-9]+\] /) {
    split(substr($0, 2, RLENGTH - 3), count, "/")
    done = count[1] + 0
    total = count[2] + 0
    if (terminal) {
      printf "\r\033[K%s", substr($0, 1, columns - 1) > "/dev/stderr"
      fflush("/dev/stderr")
      shown = 1
    } else if (total > 0) {
      tenth = int(done * 10 / total)
      if (tenth > last) {
        printf "kvfuzz: build %d%% (%d/%d)\n", int(done * 100 / total), done, total > "/dev/stderr"
        last = tenth
      }
    }
  }
  END { if (shown) printf "\r\033[K" > "/dev/stderr" }
'
