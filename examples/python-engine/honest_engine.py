#!/usr/bin/env python3
"""A correct KV-cached attention engine for kvfuzz in plain Python: copy it to start yours.

    kvfuzz check --engine "exec:python3 examples/python-engine/honest_engine.py"

What it owns, as any engine under test does: per sequence, the cache of the current
request (the RoPE-rotated keys and the values of every token, per kv head) and the
position counter that says where the next token goes. kvfuzz never hands it a position;
it reports the position it gave each token, and kvfuzz compares every output row with
full-prefix attention at that position.

The math, as the scenario's layout asks (see Config in kvfuzz.exec_server,
python/kvfuzz/exec_server.py):
  * RoPE, NeoX half-split: for i < head_dim/2, angle = position * theta^(-2i/head_dim),
    (x[i], x[i+half]) -> (x[i] cos - x[i+half] sin, x[i] sin + x[i+half] cos);
  * the query at buffer index i sees keys max(0, i - window + 1) .. i (all when no window);
  * query head h reads kv head h // (q_heads // kv_heads) (MHA, GQA and MQA alike);
  * softmax(scale * q.k) over the visible keys, weighting the values.
Everything is computed in double precision, which kvfuzz's tolerance allows.
"""

import math
import os
import sys
from operator import mul

# The loop that speaks the protocol is kvfuzz.exec_server (python/kvfuzz/exec_server.py).
# Run from the checkout, this engine imports that file by itself, not the package: it is
# standard library only, so a plain python3 without the kvfuzz package (or before its
# compiled extension is built) runs the engine, and runs the checkout's code. A copy of
# this file elsewhere finds a copy of exec_server.py beside it, or else the installed
# package's (pip install kvfuzz). Your own engine, the package installed, needs only the
# last line.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.join(HERE, "..", "..", "python", "kvfuzz"))
try:
    from exec_server import serve
except ImportError:
    from kvfuzz.exec_server import serve


class Sequence:
    """One request slot: the cache of its current request and its next position."""

    def __init__(self, kv_heads):
        self.keys = [[] for _ in range(kv_heads)]  # keys[kv_head][index]: rotated k
        self.values = [[] for _ in range(kv_heads)]  # values[kv_head][index]
        self.position = 0  # the position of the next token

    def length(self):
        return len(self.keys[0])

    def copy(self):
        other = Sequence(len(self.keys))
        other.keys = [list(k) for k in self.keys]  # the rows themselves are never changed
        other.values = [list(v) for v in self.values]
        other.position = self.position
        return other


class HonestEngine:
    name = "honest-python"

    def __init__(self, config):
        self.config = config
        self.sequences = [Sequence(config.kv_heads) for _ in range(config.sequences)]

    # The protocol's operations ---------------------------------------------------------

    def step(self, chunks):
        """One batched forward: every chunk's tokens appended to its sequence."""
        seen = set()
        for chunk in chunks:
            self._sequence(chunk.seq)
            if chunk.seq in seen:
                raise ValueError(f"sequence {chunk.seq} appears in two chunks of one step")
            seen.add(chunk.seq)
        return [self._forward(chunk) for chunk in chunks]

    def reset(self, seq):
        """A new request on this slot: empty cache, positions from 0."""
        self._sequence(seq)
        self.sequences[seq] = Sequence(self.config.kv_heads)

    def truncate(self, seq, keep):
        """Roll back to the first `keep` tokens (speculative decoding): the next token
        gets position `keep`."""
        sequence = self._sequence(seq)
        if not 0 <= keep <= sequence.length():
            raise ValueError(f"sequence {seq} holds {sequence.length()} tokens, cannot keep {keep}")
        for keys, values in zip(sequence.keys, sequence.values):
            del keys[keep:]
            del values[keep:]
        sequence.position = keep

    def fork(self, src, dst):
        """`dst` starts over with a copy of `src`'s tokens (a shared prefix)."""
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        self.sequences[dst] = self._sequence(src).copy()
        self._sequence(dst)

    # The forward pass ------------------------------------------------------------------

    def _sequence(self, seq):
        if not 0 <= seq < len(self.sequences):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.sequences)})")
        return self.sequences[seq]

    def _forward(self, chunk):
        """Each token in turn: take a position, store its rotated key and its value, then
        attend with every query head. Returns (positions, out[token][q_head][value_dim])."""
        c = self.config
        sequence = self.sequences[chunk.seq]
        positions, rows = [], []
        for q, k, v in zip(chunk.q, chunk.k, chunk.v):
            position = sequence.position
            sequence.position += 1
            rotate = self._rotation(position)
            for h in range(c.kv_heads):
                sequence.keys[h].append(rotate(k[h]))
                sequence.values[h].append(v[h])
            end = sequence.length()
            start = max(0, end - c.window) if c.window else 0
            rows.append(
                [
                    self._attend(rotate(q[h]), sequence, h // c.group, start, end)
                    for h in range(c.q_heads)
                ]
            )
            positions.append(position)
        return positions, rows

    def _rotation(self, position):
        """RoPE at `position`, as a function of one head's vector."""
        theta, dim = self.config.rope_theta, self.config.head_dim
        if theta is None:
            return lambda x: x
        half = dim // 2
        angles = [position * theta ** (-2.0 * i / dim) for i in range(half)]
        cos = [math.cos(a) for a in angles]
        sin = [math.sin(a) for a in angles]

        def rotate(x):
            a, b = x[:half], x[half:]
            return [ai * c - bi * s for ai, bi, c, s in zip(a, b, cos, sin)] + [
                ai * s + bi * c for ai, bi, c, s in zip(a, b, cos, sin)
            ]

        return rotate

    def _attend(self, q, sequence, kv_head, start, end):
        """softmax(scale * q.k) over keys start..end-1 of one kv head, weighting values."""
        keys = sequence.keys[kv_head][start:end]
        values = sequence.values[kv_head][start:end]
        scale = self.config.scale
        scores = [scale * sum(map(mul, q, key)) for key in keys]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        return [sum(map(mul, weights, column)) / total for column in zip(*values)]


if __name__ == "__main__":
    serve(HonestEngine)
