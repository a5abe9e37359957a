"""The numpy engine with one real-world bug: reset() clears the cache but not the position
counter, so the next request's tokens continue at the old request's length. kvfuzz's check
finds it and shrinks it to one token, a reset and one token (docs/python.md)."""

from numpy_engine import NumpyEngine


class BuggyNumpyEngine(NumpyEngine):
    def reset(self, seq):
        position = self.sequences[seq].position
        super().reset(seq)
        self.sequences[seq].position = position  # the bug: the counter survives the reset
