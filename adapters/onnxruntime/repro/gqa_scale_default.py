#!/usr/bin/env python3
"""GroupQueryAttention's default scale is 1/sqrt of the head size it is given, so a caller
that zero-pads a head (head_size must be a multiple of 8 on the CPU) gets the padded size's
scale, not the model's. Uses only onnxruntime and numpy (ort_nodes.py).

A head of 4 real lanes padded with zeros to head_size 8: q.k is unchanged by the zero
lanes, but the default scale becomes 1/sqrt(8) instead of 1/sqrt(4). Passing scale
explicitly gives the model's attention.

Output with onnxruntime 1.32.0:
  default scale: max |out - attention at 1/sqrt(4)| 0.19, |out - attention at 1/sqrt(8)| 1e-07
  scale=0.5:     max |out - attention at 1/sqrt(4)| 1.3e-07
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import gqa_prompt

TOKENS, REAL, PADDED = 5, 4, 8
rng = np.random.default_rng(1)
q = np.zeros((TOKENS, 1, PADDED), np.float32)
k = np.zeros((TOKENS, 1, PADDED), np.float32)
q[..., :REAL] = rng.standard_normal((TOKENS, 1, REAL)) * 2
k[..., :REAL] = rng.standard_normal((TOKENS, 1, REAL)) * 2
v = rng.standard_normal((TOKENS, 1, PADDED)).astype(np.float32)


def attention(scale):
    """Causal attention in float64 at this scale."""
    out = np.zeros((TOKENS, PADDED))
    for p in range(TOKENS):
        scores = scale * (k[: p + 1, 0].astype(np.float64) @ q[p, 0])
        w = np.exp(scores - scores.max())
        out[p] = w @ v[: p + 1, 0] / w.sum()
    return out


model, padded = attention(1 / np.sqrt(REAL)), attention(1 / np.sqrt(PADDED))
print(f"onnxruntime {ort.__version__}")
default = gqa_prompt(q, k, v)[:, 0]
print(f"  default scale: max |out - attention at 1/sqrt({REAL})| {np.abs(default - model).max():.2g}, "
      f"|out - attention at 1/sqrt({PADDED})| {np.abs(default - padded).max():.2g}")  # fmt: skip
explicit = gqa_prompt(q, k, v, scale=float(1 / np.sqrt(REAL)))[:, 0]
print(f"  scale={1 / np.sqrt(REAL)}:     max |out - attention at 1/sqrt({REAL})| {np.abs(explicit - model).max():.2g}")
