#!/usr/bin/env python3
"""The honest engine with one real-world bug, for kvfuzz to catch:

    kvfuzz check --engine "exec:python3 examples/python-engine/buggy_engine.py"

reset() clears the slot's cache but forgets its position counter. The next request on
the slot then starts at the old request's length instead of 0: its reported positions are
wrong, and so are its RoPE angles. A server that recycles request slots without resetting
their positions has exactly this bug; kvfuzz reports it as a wrong_position failure on the
first row after a reset, and `kvfuzz shrink` cuts the case down to a few tokens.
"""

# serve: kvfuzz.exec_server's, found as honest_engine.py says.
from honest_engine import HonestEngine, serve


class StalePositionEngine(HonestEngine):
    name = "buggy-python (position survives reset)"

    def reset(self, seq):
        sequence = self._sequence(seq)
        for keys, values in zip(sequence.keys, sequence.values):
            keys.clear()
            values.clear()
        # The bug: sequence.position = 0 is missing.


if __name__ == "__main__":
    serve(StalePositionEngine)
