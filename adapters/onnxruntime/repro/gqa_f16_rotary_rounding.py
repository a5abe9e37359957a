#!/usr/bin/env python3
"""GroupQueryAttention's f16 rotary (do_rotary = 1) caches keys that are not one rounding
of the exactly rotated key: the cos/sin caches are f16 inputs, so the angle's cosine and
sine are rounded before the rotation. Uses only onnxruntime and numpy (ort_nodes.py).

Keys (head_size 64, f16 values) of a 200-token prompt rotated by ORT (NeoX half-split,
theta 10000, cos/sin computed in float64 and rounded to f16 as the input type requires)
are compared with the float64 rotation of the same keys rounded once to f16, in f16 ulps
of each pair's norm (the scale of the rotation's own error).

Output with onnxruntime 1.32.0:
  f16 do_rotary: |cached - exact| up to 0.98 f16 ulps of the pair's norm
    (one rounding of the exact key: 0.50); 25% of elements differ from it
  f32 do_rotary: |cached - exact| up to 1.29 f32 ulps of the pair's norm
    (one rounding of the exact key: 0.50); 31% of elements differ from it
In f32 that is noise far below kvfuzz's f32 bound; in f16 it is twice what one rounding
allows, which is why the f16 adapter rotates q and k itself (--rope adapter).
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import gqa_prompt

TOKENS, HEAD, THETA = 200, 64, 10000.0
half = HEAD // 2
inv_freq = THETA ** (-2.0 * np.arange(half) / HEAD)
angles = np.arange(TOKENS)[:, None] * inv_freq[None, :]
rng = np.random.default_rng(2)
keys = rng.standard_normal((TOKENS, 1, HEAD))


def rotated(x):
    a, b = x[:, :half], x[:, half:]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles), a * np.sin(angles) + b * np.cos(angles)], axis=1)


print(f"onnxruntime {ort.__version__}")
for dtype in (np.float16, np.float32):
    k = keys.astype(dtype)
    exact = rotated(k[:, 0].astype(np.float64))
    extra = {"cos_cache": np.cos(angles).astype(dtype), "sin_cache": np.sin(angles).astype(dtype)}
    _, cached = gqa_prompt(k, k, k, extra=extra, present=True, do_rotary=1)
    got = cached[0].astype(np.float64)
    norm = np.sqrt(exact[:, :half] ** 2 + exact[:, half:] ** 2)
    ulp = np.spacing(np.tile(norm, 2).astype(dtype)).astype(np.float64)
    once = exact.astype(dtype).astype(np.float64)
    name = "f16" if dtype is np.float16 else "f32"
    worst_ort = (np.abs(got - exact) / ulp).max()
    worst_once = (np.abs(once - exact) / ulp).max()
    print(f"  {name} do_rotary: |cached - exact| up to {worst_ort:.2f} {name} ulps of the pair's norm\n"
          f"    (one rounding of the exact key: {worst_once:.2f}); "
          f"{100 * np.mean(got != once):.0f}% of elements differ from it")  # fmt: skip
