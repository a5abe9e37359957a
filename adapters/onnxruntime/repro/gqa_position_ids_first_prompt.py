#!/usr/bin/env python3
"""GroupQueryAttention's position_ids in a first prompt: only the first element is read,
and the prompt's tokens are rotated at consecutive positions from it; after a past, every
element is used. Uses only onnxruntime and numpy (ort_nodes.py).

The schema says so ("When processing the first prompt the kernel uses only the first
element"), so this is a documented difference, but it means a first prompt cannot carry
positions with gaps (packed sequences, a skipped token), while a later chunk can: the same
ids give different caches depending on whether the cache was empty.

The keys ORT caches (present_key, rotated) are compared with keys rotated in float64 at
the given ids and at consecutive positions from the first id.

Output with onnxruntime 1.32.0:
  past 0, position_ids [0, 2, 4]: cached keys rotated at [0, 2, 4]: max err 1.6; at [0, 1, 2]: max err 1.2e-07
  past 0, position_ids [5, 6, 7]: cached keys rotated at [5, 6, 7]: max err 1e-07; at [5, 6, 7]: max err 1e-07
  past 4, position_ids [4, 6, 8]: cached keys rotated at [4, 6, 8]: max err 1.5e-07; at [4, 5, 6]: max err 4.4
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import gqa_prompt

HEAD, THETA, POSITIONS = 16, 10000.0, 32
inv_freq = THETA ** (-2.0 * np.arange(HEAD // 2) / HEAD)
angles = np.arange(POSITIONS)[:, None] * inv_freq[None, :]
caches = {"cos_cache": np.cos(angles).astype(np.float32), "sin_cache": np.sin(angles).astype(np.float32)}


def rotated(x, positions):
    """NeoX half-split RoPE (rotary_interleaved = 0) of x (tokens, head_size) in float64."""
    a = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    x1, x2 = x[:, : HEAD // 2], x[:, HEAD // 2 :]
    return np.concatenate([x1 * np.cos(a) - x2 * np.sin(a), x1 * np.sin(a) + x2 * np.cos(a)], axis=1)


rng = np.random.default_rng(5)
print(f"onnxruntime {ort.__version__}")
for cached, ids in ((0, [0, 2, 4]), (0, [5, 6, 7]), (4, [4, 6, 8])):
    q, k, v = (rng.standard_normal((3, 1, HEAD)).astype(np.float32) for _ in range(3))
    past = (rotated(rng.standard_normal((cached, HEAD)), range(cached))[None].astype(np.float32),
            rng.standard_normal((1, cached, HEAD)).astype(np.float32))  # fmt: skip
    extra = {**caches, "position_ids": np.array([ids], np.int64)}
    _, keys = gqa_prompt(q, k, v, past=past, extra=extra, present=True, do_rotary=1)
    new = keys[0, cached:]
    consecutive = list(range(ids[0], ids[0] + 3))
    errors = [np.abs(new - rotated(k[:, 0], p)).max() for p in (ids, consecutive)]
    print(f"  past {cached}, position_ids {ids}: cached keys rotated at {ids}: max err {errors[0]:.2g}; "
          f"at {consecutive}: max err {errors[1]:.2g}")  # fmt: skip
