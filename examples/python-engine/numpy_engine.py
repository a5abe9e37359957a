"""A correct KV-cached attention engine in numpy, tested in-process by the kvfuzz package:

    pip install .                                    # from the repository root
    pytest examples/python-engine/test_numpy_engine.py

Each sequence owns its cache (RoPE-rotated keys and values, per kv head) and a position
counter that says where the next token goes; kvfuzz never hands it a position. Every chunk
is one vectorised pass: rotate its queries and keys at their positions, append the keys and
values, and attend each query over the keys it may see (causal, and the sliding window
when there is one), query head h reading kv head h // group. In float64, which kvfuzz's
tolerance allows; the arrays kvfuzz hands in are float32 numpy arrays the engine may keep.
"""

import numpy as np


class Sequence:
    """One request slot: the cache of its current request and its next position."""

    def __init__(self, kv_heads, head_dim, value_dim):
        self.keys = np.zeros((0, kv_heads, head_dim))  # rotated, [token, kv_head, head_dim]
        self.values = np.zeros((0, kv_heads, value_dim))
        self.position = 0

    def copy(self):
        other = Sequence(0, 0, 0)
        other.keys, other.values, other.position = self.keys, self.values, self.position
        return other  # the arrays are never changed in place, only replaced


class NumpyEngine:
    def __init__(self, config):
        self.config = config
        self.sequences = [self._empty() for _ in range(config.sequences)]

    def step(self, chunks):
        """One batched forward: one (positions, out[token, q_head, value_dim]) per chunk."""
        return [self._forward(chunk) for chunk in chunks]

    def reset(self, seq):
        self.sequences[seq] = self._empty()

    def truncate(self, seq, keep):
        s = self.sequences[seq]
        s.keys, s.values, s.position = s.keys[:keep], s.values[:keep], keep

    def fork(self, src, dst):
        self.sequences[dst] = self.sequences[src].copy()

    def _empty(self):
        c = self.config
        return Sequence(c.kv_heads, c.head_dim, c.value_dim)

    def _forward(self, chunk):
        c, s = self.config, self.sequences[chunk.seq]
        positions = s.position + np.arange(chunk.tokens)
        start = len(s.keys)  # buffer index of the chunk's first token
        s.keys = np.concatenate([s.keys, self._rotate(chunk.k, positions)])
        s.values = np.concatenate([s.values, chunk.v.astype(np.float64)])
        s.position += chunk.tokens
        q = self._rotate(chunk.q, positions)  # [t, q_head, d]
        keys = np.repeat(s.keys, c.group, axis=1)  # [n, q_head, d]: kv head h // group
        values = np.repeat(s.values, c.group, axis=1)
        scores = np.einsum("thd,nhd->thn", q, keys) * c.scale
        index = start + np.arange(chunk.tokens)[:, None]  # each query's own buffer index
        key = np.arange(len(s.keys))[None, :]
        visible = key <= index
        if c.window is not None:
            visible &= key > index - c.window
        scores = np.where(visible[:, None, :], scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=2, keepdims=True))
        weights /= weights.sum(axis=2, keepdims=True)
        return positions, np.einsum("thn,nhd->thd", weights, values)

    def _rotate(self, x, positions):
        """RoPE, NeoX half-split: (x[i], x[i + d/2]) rotated by position * theta^(-2i/d)."""
        x = x.astype(np.float64)
        theta, dim = self.config.rope_theta, self.config.head_dim
        if theta is None:
            return x
        half = dim // 2
        angles = positions[:, None] * theta ** (-2.0 * np.arange(half) / dim)  # [t, half]
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        a, b = x[..., :half], x[..., half : 2 * half]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos, x[..., 2 * half :]], axis=-1)
