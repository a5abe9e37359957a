#!/usr/bin/env python3
"""V4: the fp8 KV cache writer truncates toward zero (the AVX-512 builds; AVX2 has no fp8).

    .venv-vllm/bin/python adapters/vllm/repro/fp8_truncated.py [_C_AVX512 | _C]

One token whose value is 31 (head size 32), K and V in fp8_e4m3 with scale 1. e4m3's
neighbours of 31 are 30 and 32; 31 is halfway and rounds to nearest even, 32, as torch's
conversion and vLLM's CUDA writer (__nv_cvt_float_to_fp8, __NV_SATFINITE) store it. The
row is the stored value.
"""

import sys

import torch

from vllm_ops import attend, load

load(sys.argv[1] if len(sys.argv) > 1 else "_C_AVX512")
q = torch.zeros(1, 1, 32)
k = torch.zeros(1, 1, 32)
v = torch.full((1, 1, 32), 31.0)
row = attend(q, k, v, 0, kv_cache_dtype="fp8_e4m3")
rounded = v.to(torch.float8_e4m3fn).float()[0, 0, 0].item()
print(f"fp8_e4m3 row[0] = {row[0, 0, 0].item()} (torch's rounding of 31: {rounded})")
