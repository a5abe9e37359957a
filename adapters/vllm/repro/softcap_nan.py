#!/usr/bin/env python3
"""V3: the AVX-512 builds' soft cap is NaN past s / softcap = 88.72 or below -87.

    .venv-vllm/bin/python adapters/vllm/repro/softcap_nan.py [_C_AVX512 | _C | _C_AVX2]

One query against two keys, scores x and 0 (scale 1, softcap 1, head size 32), values 1:
the row is 1 whatever the capped logits are. Its tanh is (e - 1/e) / (e + 1/e) with e a
fast exp that is +inf past 88.72 and 0 from about -87 (then 1/e is +inf): inf / inf.
"""

import sys

import torch

from vllm_ops import attend, load

load(sys.argv[1] if len(sys.argv) > 1 else "_C_AVX512")
for x in (-86.0, -87.0, -88.0, 88.72, 88.73, 100.0):
    q = torch.zeros(1, 1, 32)
    q[0, 0, 0] = 1.0
    k = torch.zeros(2, 1, 32)
    k[0, 0, 0] = x
    v = torch.ones(2, 1, 32)
    row = attend(q, k, v, 0.0, softcap=1.0)
    print(f"s / softcap = {x:7.2f}: row[0] = {row[0, 0, 0].item()} (expected 1.0)")
