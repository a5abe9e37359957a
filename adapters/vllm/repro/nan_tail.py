#!/usr/bin/env python3
"""V1: NaN in the unused slots of a sequence's last block reaches its rows.

    .venv-vllm/bin/python adapters/vllm/repro/nan_tail.py

One sequence of one token, q = k = v = 0 (head size 32), in a block of 32 whose other 31
slots hold NaN (what a freed block can hold after a request whose K/V were NaN: vLLM
reuses blocks without clearing them). The row sees one key, its own: it is 0. The kernel
masks the 31 slots out of the scores but multiplies their V by the weight 0: NaN. vLLM's
CUDA paged attention zeroes V past the context for this reason (vllm issue #641).
"""

import sys

import torch

from vllm_ops import attend, load

load(sys.argv[1] if len(sys.argv) > 1 else "_C_AVX2")
zero = torch.zeros(1, 1, 32)
for fill in (0.0, float("nan")):
    row = attend(zero, zero, zero, fill)
    print(f"unused slots {fill}: row[0] = {row[0, 0, 0].item()} (expected 0.0)")
