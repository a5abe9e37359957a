#!/usr/bin/env python3
"""How many keys GroupQueryAttention's local_window_size lets a query see, and ONNX
Attention's left_window_size (opset 25) beside it. Uses only onnxruntime and numpy (ort_nodes.py).

One head, head_size 8, q = k = 0, so softmax weights every visible key equally; the value
of the token at position j is 2^j in every lane, so the row of the query at position p is
the mean of the values it sees, and that mean names the set of keys. Six tokens in one
prompt; the last query (position 5) is printed for each window size.

Output with onnxruntime 1.32.0:
  GQA local_window_size=1: sees 1 keys (positions 5..5)
  GQA local_window_size=2: sees 2 keys (positions 4..5)
  GQA local_window_size=3: sees 3 keys (positions 3..5)
  Attention left_window_size=1: sees 2 keys (positions 4..5)
  Attention left_window_size=2: sees 3 keys (positions 3..5)
GQA's local_window_size counts the current key (W keys: p - W + 1 .. p); Attention's
left_window_size does not (W + 1 keys: p - W .. p). kvfuzz's window W is GQA's.
"""

import numpy as np
import onnxruntime as ort
from ort_nodes import attention_prompt, gqa_prompt

TOKENS, HEAD = 6, 8
values = np.repeat((2.0 ** np.arange(TOKENS))[:, None, None], HEAD, axis=2).astype(np.float32)
zeros = np.zeros((TOKENS, 1, HEAD), np.float32)


def keys_seen(row):
    """How many keys, ending at the query, have the mean of 2^j that row holds."""
    for count in range(1, TOKENS + 1):
        if np.isclose(values[TOKENS - count :, 0, 0].mean(), row, rtol=1e-6):
            return count
    return None


def gqa(window):
    return gqa_prompt(zeros, zeros, values, local_window_size=window)


def attention(left):
    return attention_prompt(zeros, zeros, values, opset=25, is_causal=1, left_window_size=left)


print(f"onnxruntime {ort.__version__}")
for w in (1, 2, 3):
    n = keys_seen(gqa(w)[TOKENS - 1, 0, 0])
    print(f"  GQA local_window_size={w}: sees {n} keys (positions {TOKENS - n}..{TOKENS - 1})")
for w in (1, 2):
    n = keys_seen(attention(w)[TOKENS - 1, 0, 0])
    print(f"  Attention left_window_size={w}: sees {n} keys (positions {TOKENS - n}..{TOKENS - 1})")
