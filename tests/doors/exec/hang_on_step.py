#!/usr/bin/env python3
"""An honest engine that stops answering on the Nth step of an engine (counted per case's
engine, so that a case hangs whatever ran before it in the same process, as a kernel
stuck on one input does), for tests/cli/test_check_ci.cpp:

    python3 hang_on_step.py N

With HANG_ON_STEP_LOG set, each hang appends one line to that file first: how many times
kvfuzz let the engine hang.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
# kvfuzz.exec_server by itself, the checkout's (standard library only: the python3 running
# this need not have the package; python/kvfuzz/exec_server.py says why).
sys.path[:0] = [os.path.join(ROOT, "examples", "python-engine"),
                os.path.join(ROOT, "python", "kvfuzz")]

from exec_server import serve  # noqa: E402
from honest_engine import HonestEngine  # noqa: E402

HANG_AT = int(sys.argv[1])


class HangingEngine(HonestEngine):
    def __init__(self, config):
        super().__init__(config)
        self.steps = 0

    def step(self, chunks):
        self.steps += 1
        if self.steps == HANG_AT:
            sys.stderr.write(f"hang_on_step: step {self.steps}, not answering\n")
            sys.stderr.flush()
            if os.environ.get("HANG_ON_STEP_LOG"):
                with open(os.environ["HANG_ON_STEP_LOG"], "a") as log:
                    log.write("hang\n")
            time.sleep(3600)
        return super().step(chunks)


if __name__ == "__main__":
    serve(HangingEngine)
