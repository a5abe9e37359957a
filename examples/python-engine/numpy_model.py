#!/usr/bin/env python3
"""A whole model with a KV cache, in numpy: kvfuzz's tiny transformer as a serving engine
runs it (ids in, logits and positions out), for kvfuzz to judge at model level:

    import kvfuzz
    from numpy_model import NumpyModel
    kvfuzz.check(NumpyModel, cases=50)

    kvfuzz check --engine "exec:python3 examples/python-engine/numpy_model.py"

The model (docs/fixture-format.md, "model"; kvfuzz.ModelEngineConfig.weights()): token
embedding; per layer RMSNorm (eps 1e-5), q, k, v projections, RoPE (NeoX half-split, the
layout's theta) on q and k at each token's absolute position, causal attention (the layout's
window and scale; GQA), the output projection and the residual, RMSNorm, a SwiGLU MLP
(down(silu(gate(x)) * up(x))) and the residual; a final RMSNorm and the LM head. q, k and v
are rounded to the layout's dtype, as a model storing its cache in that dtype does; the rest
is float32.

What it owns, as a server does: per sequence and layer, the rotated keys and the values of
every token so far, and the sequence's length, which is where its next token goes. reset
empties a sequence, truncate keeps its first `keep` tokens, fork copies one sequence's cache
into another.

--bug names a mistake a real cache has made (the tests' negative controls; in-process, the
classes RopeInChunk and ForkAlias):
  rope-chunk  RoPE at each token's position inside its chunk, not in the sequence
  fork-alias  fork shares the source's cache lists instead of copying them
"""

import argparse
import sys

import numpy as np


def round_to(x, dtype):
    """x (float32) rounded to the layout's dtype, kept as float32."""
    return x.astype(np.float16).astype(np.float32) if dtype == "f16" else x.astype(np.float32)


def rms_norm(x, gain):
    return gain * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-5)))


def rope(x, positions, theta):
    """x[token, head, dim] turned by position * theta^(-2i/dim), pairs (i, i + dim/2)."""
    dim = x.shape[-1]
    half = dim // 2
    angles = positions[:, None].astype(np.float64) * theta ** (-2.0 * np.arange(half) / dim)
    cos = np.cos(angles)[:, None, :]
    sin = np.sin(angles)[:, None, :]
    a, b = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).astype(np.float32)


class Sequence:
    def __init__(self, layers):
        self.keys = [[] for _ in range(layers)]  # per layer: one [kv_heads, head_dim] per token
        self.values = [[] for _ in range(layers)]

    def __len__(self):
        return len(self.keys[0]) if self.keys else 0


class NumpyModel:
    whole_model = True  # kvfuzz gives it ids and judges its logits
    name = "numpy-model"
    supports = {"dtypes": ["f32", "f16"]}  # numpy has no bf16
    bug = None

    def __init__(self, config):
        self.new_case(config)

    def new_case(self, config):
        """The next case's model, as a fresh object would be (kvfuzz reuses this object)."""
        self.layout = config.engine
        self.model = config.model
        self.weights = config.weights()
        self.dtype = config.engine.dtype
        self.sequences = [Sequence(config.model.layers) for _ in range(config.engine.sequences)]

    def step(self, chunks):
        return [self._forward(self.sequences[c.seq], np.asarray(c.ids)) for c in chunks]

    def _forward(self, sequence, ids):
        layout, w = self.layout, self.weights
        start = len(sequence)
        positions = np.arange(start, start + len(ids))
        h = w["embedding"][ids]
        for layer, lw in enumerate(w["layers"]):
            x = rms_norm(h, lw["attention_norm"])
            tokens = len(ids)
            q = round_to((x @ lw["wq"]).reshape(tokens, layout.q_heads, layout.head_dim), self.dtype)
            k = round_to((x @ lw["wk"]).reshape(tokens, layout.kv_heads, layout.head_dim), self.dtype)
            v = round_to((x @ lw["wv"]).reshape(tokens, layout.kv_heads, layout.value_dim), self.dtype)
            if layout.rope_theta is not None:
                turned = positions - start if self.bug == "rope-chunk" else positions
                q = rope(q, turned, layout.rope_theta)
                k = rope(k, turned, layout.rope_theta)
            sequence.keys[layer].extend(k)
            sequence.values[layer].extend(v)
            out = self._attend(q, np.stack(sequence.keys[layer]), np.stack(sequence.values[layer]), positions)
            h = h + out.reshape(tokens, -1) @ lw["wo"]
            x = rms_norm(h, lw["mlp_norm"])
            gate, up = x @ lw["w_gate"], x @ lw["w_up"]
            h = h + (gate / (1 + np.exp(-gate)) * up) @ lw["w_down"]
        logits = rms_norm(h, w["final_norm"]) @ w["lm_head"]
        return positions, logits

    def _attend(self, q, keys, values, positions):
        """Each query row over the keys it sees: [0, p], or the window's last keys."""
        layout = self.layout
        out = np.zeros((len(q), layout.q_heads, layout.value_dim), np.float32)
        for t, p in enumerate(positions):
            lo = 0 if layout.window is None else max(0, p - layout.window + 1)
            for head in range(layout.q_heads):
                kv = head // layout.group
                scores = keys[lo : p + 1, kv] @ q[t, head] * np.float32(layout.scale)
                weights = np.exp(scores - scores.max())
                out[t, head] = weights @ values[lo : p + 1, kv] / weights.sum()
        return out

    def reset(self, seq):
        self.sequences[seq] = Sequence(self.model.layers)

    def truncate(self, seq, keep):
        for cache in self.sequences[seq].keys + self.sequences[seq].values:
            del cache[keep:]

    def fork(self, src, dst):
        source, copy = self.sequences[src], Sequence(self.model.layers)
        if self.bug == "fork-alias":
            copy.keys, copy.values = source.keys, source.values
        else:
            copy.keys = [list(cache) for cache in source.keys]
            copy.values = [list(cache) for cache in source.values]
        self.sequences[dst] = copy


class RopeInChunk(NumpyModel):
    bug = "rope-chunk"


class ForkAlias(NumpyModel):
    bug = "fork-alias"


WITH_BUG = {cls.bug: cls for cls in (RopeInChunk, ForkAlias)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", choices=sorted(WITH_BUG), help="make one mistake on purpose")
    options = parser.parse_args()
    from kvfuzz.exec_server import serve

    serve(WITH_BUG[options.bug] if options.bug else NumpyModel)
    sys.exit(0)
