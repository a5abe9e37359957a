#!/usr/bin/env python3
"""An honest engine that stops answering on its Nth step (counted over the process's
life), as an engine stuck in a kernel or a deadlock does, for tests/cli/test_check_ci.cpp:

    python3 hang_on_step.py N
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "python-engine"))

from honest_engine import HonestEngine  # noqa: E402
from kvfuzz_engine import answer  # noqa: E402

HANG_AT = int(sys.argv[1])


def main():
    engine = None
    steps = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "step":
            steps += 1
            if steps == HANG_AT:
                sys.stderr.write(f"hang_on_step: step {steps}, not answering\n")
                sys.stderr.flush()
                time.sleep(3600)
        engine, reply = answer(engine, HonestEngine, request)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
