#!/usr/bin/env python3
"""V2: bf16 rows truncated, not rounded, by the builds without AVX512-BF16.

    .venv-vllm/bin/python adapters/vllm/repro/bf16_truncated.py [_C_AVX2 | _C_AVX512 | _C]

Two keys with q = k = 0 and the same value, 3 (head size 32), and an ALiBi slope of 1/32:
the weights are e^-1/32 and 1, the row is exactly 3. The kernel's f32 row is 3 less one f32
ulp (P times 1 / sum); rounded to bf16 that is 3, truncated 2.984375.
"""

import sys

import torch

from vllm_ops import attend, load

load(sys.argv[1] if len(sys.argv) > 1 else "_C_AVX2")
q = torch.zeros(1, 1, 32, dtype=torch.bfloat16)
k = torch.zeros(2, 1, 32, dtype=torch.bfloat16)
v = torch.full((2, 1, 32), 3.0, dtype=torch.bfloat16)
row = attend(q, k, v, 0.0, alibi=torch.tensor([1 / 32]))
print(f"bf16 row[0] = {row[0, 0, 0].item()} (expected 3.0; truncation gives 2.984375)")
