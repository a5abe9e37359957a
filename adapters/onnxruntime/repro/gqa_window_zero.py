#!/usr/bin/env python3
"""GroupQueryAttention with local_window_size = 0 returns rows of zeros, without an error.
Uses only onnxruntime and numpy (ort_nodes.py).

A window of 0 keys is not a window (-1 means none, the schema says; a positive W is W
keys, the current one included, see gqa_window_convention.py), yet the CPU kernel accepts
it and every query sees no key: each output row is 0, which no softmax over a non-empty
set can give when every value is 1.

Output with onnxruntime 1.32.0:
  local_window_size=-1: max |out - 1| 6e-08
  local_window_size=1: max |out - 1| 0
  local_window_size=0: max |out - 1| 1, every value 0.0, no error raised
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import gqa_prompt

rng = np.random.default_rng(0)
q = rng.standard_normal((4, 2, 8)).astype(np.float32)
k = rng.standard_normal((4, 1, 8)).astype(np.float32)
v = np.ones((4, 1, 8), np.float32)  # every visible set of keys averages to 1

print(f"onnxruntime {ort.__version__}")
for window in (-1, 1, 0):
    out = gqa_prompt(q, k, v, local_window_size=window)
    said = f", every value {np.unique(out)[0]}, no error raised" if np.all(out == 0) else ""
    print(f"  local_window_size={window}: max |out - 1| {np.abs(out - 1).max():.2g}{said}")
