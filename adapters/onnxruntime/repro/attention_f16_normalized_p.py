#!/usr/bin/env python3
"""The ONNX Attention operator's f16 CPU kernel rounds the scaled scores Q.K^T and the
normalized softmax weights P to f16 before P.V, so three equally weighted keys get
P = 1/3 rounded to f16 and the row is not the f16 value nearest the exact mean. Uses only
onnxruntime and numpy (ort_nodes.py).

This follows the operator's definition (computed in the input type T; softmax_precision
only sets the type of the softmax itself), so it is a numerics choice, not a bug; a
FlashAttention-style kernel instead rounds the unnormalized exp(s - max), where the
maximum key's weight is exactly 1.

Output with onnxruntime 1.32.0:
  f16 Attention: 1.666015625; exact mean 1.6666666666666667 rounds to 1.6669921875 in f16
  model "scores and P rounded to f16, P.V in f32, output rounded": 1.666015625
  over random cases: 99.94% of values equal that model's rounding
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import attention_prompt

print(f"onnxruntime {ort.__version__}")
zeros = np.zeros((3, 1, 8), np.float16)
v = np.array([1.0, 2.0, 2.0], np.float16)[:, None, None].repeat(8, axis=2)
got = attention_prompt(zeros, zeros, v, is_causal=1)[2, 0, 0]
p16 = np.float16(1 / 3).astype(np.float64)
model = np.float16(p16 * 5.0)
print(f"  f16 Attention: {got}; exact mean {5 / 3} rounds to {np.float16(5 / 3)} in f16")
print(f'  model "scores and P rounded to f16, P.V in f32, output rounded": {model}')


def modelled(q, k, v, scale):
    """Causal attention with the scores and the normalized P rounded to f16, P.V in float64."""
    tokens, heads, _ = q.shape
    out = np.zeros((tokens, heads, v.shape[2]))
    for p in range(tokens):
        for h in range(heads):
            s = (scale * (k[: p + 1, 0].astype(np.float64) @ q[p, h].astype(np.float64))).astype(np.float16)
            w = np.exp(s.astype(np.float64) - s.max())
            weights = (w / w.sum()).astype(np.float16).astype(np.float64)
            out[p, h] = weights @ v[: p + 1, 0]
    return out.astype(np.float16)


rng = np.random.default_rng(3)
equal = total = 0
for _ in range(30):
    d, tokens = int(rng.choice([8, 16, 32, 64])), int(rng.integers(2, 70))
    q = rng.standard_normal((tokens, 2, d)).astype(np.float16)
    k = rng.standard_normal((tokens, 1, d)).astype(np.float16)
    v = (rng.standard_normal((tokens, 1, d)) * 4).astype(np.float16)
    got = attention_prompt(q, k, v, is_causal=1, scale=float(1 / np.sqrt(d)))
    want = modelled(q, k, v, 1 / np.sqrt(d))
    equal, total = equal + int(np.sum(got == want)), total + got.size
print(f"  over random cases: {100 * equal / total:.2f}% of values equal that model's rounding")
