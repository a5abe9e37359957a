"""The numpy engine with the attention features (docs/fixture-format.md, "Attention
features"): soft cap, sinks, ALiBi and chunked local attention, declared in `supports` and
read from the config kvfuzz hands in; and one with a real-world feature bug."""

import numpy as np

from numpy_engine import NumpyEngine

FEATURES = {"softcap": True, "sinks": True, "alibi": True, "chunked_local": True}


class FeaturesEngine(NumpyEngine):
    supports = FEATURES

    def _forward(self, chunk):
        c, s = self.config, self.sequences[chunk.seq]
        positions = s.position + np.arange(chunk.tokens)
        s.keys = np.concatenate([s.keys, self._rotate(chunk.k, positions)])
        s.values = np.concatenate([s.values, chunk.v.astype(np.float64)])
        s.position += chunk.tokens
        q = self._rotate(chunk.q, positions)
        keys = np.repeat(s.keys, c.group, axis=1)
        values = np.repeat(s.values, c.group, axis=1)
        logits = np.einsum("thd,nhd->thn", q, keys) * c.scale
        if c.softcap is not None:
            logits = c.softcap * np.tanh(logits / c.softcap)
        query = positions[:, None]  # buffer index == position: truncate keeps positions
        key = np.arange(len(s.keys))[None, :]
        if c.alibi is not None:
            slopes = np.asarray(self._slopes(chunk), dtype=np.float64)
            logits = logits + slopes[None, :, None] * (key - query)[:, None, :]
        visible = key <= query
        if c.window is not None:
            visible &= key > query - c.window
        if c.chunked_local is not None:
            visible &= key >= query // c.chunked_local * c.chunked_local
        logits = np.where(visible[:, None, :], logits, -np.inf)
        top = logits.max(axis=2, keepdims=True)
        sinks = self._sinks(chunk)
        if sinks is not None:
            top = np.maximum(top, np.asarray(sinks)[None, :, None])
        weights = np.exp(logits - top)
        total = weights.sum(axis=2, keepdims=True)
        if sinks is not None:
            total = total + np.exp(np.asarray(sinks)[None, :, None] - top)
        return positions, np.einsum("thn,nhd->thd", weights / total, values)

    def _slopes(self, chunk):
        return self.config.alibi

    def _sinks(self, chunk):
        return self.config.sinks


class SinkPrefillOnlyEngine(FeaturesEngine):
    """Leaves the sink out of a row decoded alone (a one-token chunk)."""

    def _sinks(self, chunk):
        return None if chunk.tokens == 1 else self.config.sinks  # the bug
