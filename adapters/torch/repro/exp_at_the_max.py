#!/usr/bin/env python3
"""torch's CPU flash attention in bf16: the softmax's exp of a row's vectorised part is
coarse (fexp_u20), its exp(0) is 0.99995, not 1.

    .venv/bin/python adapters/torch/repro/exp_at_the_max.py

One query sees two keys (the rest masked out): scores 2.625 and -2.5, values 4 and 0, so
the exact row is 4 / (1 + exp(-5.125)) = 3.97636, which rounds to 3.96875 in bf16. With
fewer than 16 keys in the row (AVX-512; 8 with AVX2) every exp is std::exp, and torch
returns 3.96875. From 16 keys on the first 16 go through fexp_u20: P of the key at the
max rounds to 1 while the normaliser sums the unrounded 0.99995 + exp(-5.125), so the row
is 4 / 1.00589 = 3.97657, which rounds up to 3.984375. kvfuzz judges it within the bound
only when the engine declares numerics.exp_ulps (tolerance.cpp, step 12).
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.set_num_threads(1)


def row(keys):
    d = 8
    q = torch.zeros(1, 1, keys, d)
    k = torch.zeros(1, 1, keys, d)
    v = torch.zeros(1, 1, keys, d)
    q[..., 0] = 1
    k[0, 0, 3, 0], k[0, 0, 4, 0] = 2.625, -2.5
    v[0, 0, 3, 0] = 4
    positions = torch.arange(keys)
    mask = (positions[None, :] <= positions[:, None]) & (positions[None, :] > positions[:, None] - 2)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(
            q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=mask, scale=1.0
        )
    return out[0, 0, 4, 0].item()


print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
print("exact 3.9763557 (bf16: 3.96875)")
for keys in (5, 15, 16, 17, 44):
    print(f"{keys:3d} keys in the row: {row(keys)}")
