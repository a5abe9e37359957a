#!/usr/bin/env python3
"""torch.nn.functional.scaled_dot_product_attention on the CPU, natively in bf16, f16 or
f32, as a kvfuzz engine:

    kvfuzz check --engine "exec:.venv/bin/python adapters/torch/torch_sdpa_engine.py"
    kvfuzz check --engine "exec:.venv/bin/python adapters/torch/torch_sdpa_engine.py --dtype bf16"

By default (--dtype layout) it computes in each case's layout dtype and declares that
case's numerics (numerics keyed by dtype: one engine for all three); --dtype D takes only
layouts of D.

    import kvfuzz, torch_sdpa_engine                     # in-process, the same engine
    kvfuzz.check(torch_sdpa_engine.factory(["--dtype", "bf16"]), cases=100)

Every chunk is one call at batch 1: q (1, q_heads, new, d) against the sequence's cached
keys and values, past and new concatenated (1, kv_heads, past + new, d), enable_gqa for
GQA and MQA. The CPU flash-attention kernel is required (torch.nn.attention.sdpa_kernel),
so a layout it would hand to the math kernel fails loudly instead of changing arithmetic:
that is why value_dim must equal head_dim (supports.value_dim_is_head_dim).

  * causal mask: is_causal=True when the chunk has no past and no window (torch's causal
    mask is top-left aligned, right only when queries and keys start together); otherwise
    a boolean attn_mask (new, past + new) that lets the query at position p see keys
    max(0, p - W + 1) .. p.
  * scale: always passed.
  * RoPE: torch's attention has none; the adapter rotates q and k in float64 at their
    positions and rounds them once to the dtype, so the cache holds rotated keys.

What the kernel computes (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp, read for
torch 2.15; README.md in this folder has the measurements): q.k^T by a gemm of the dtype
into f32, scaled, the row max; exp(s - max) in f32, the vectorised part by fexp_u20
(a degree-3 polynomial on the exponent bits, up to 940 ulps off, and exp(0) = 0.99995;
16 floats at a time with AVX-512, 8 with AVX2) and the tail by std::exp; the f32 sum of those; P rounded to the dtype for the P.V gemm
(f32 accumulation); keys in blocks of 512 rescaled by exp(m_old - m_new); the output
multiplied by 1 / sum and rounded to the dtype.

--bug window|scale|rope|numerics|exp breaks one mapping on purpose (negative controls): a
window mask of W + 1 keys, the default scale, interleaved (GPT-J) RoPE pairs, no numerics
declared, or (bf16, f16) the exp's error left undeclared.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import kv_adapter as common  # noqa: E402

torch.set_num_threads(1)  # kvfuzz runs cases side by side; results do not depend on it

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
BUGS = ("window", "scale", "rope", "numerics", "exp")
# exp(s - m): bf16 and f16 by Vectorized<float>::fexp_u20, measured up to 940 f32 ulps
# (1.12e-4 relative) off over 3e6 arguments in [-87, 0] (README.md), declared with some room;
# f32 by exp_u20, "a faster version of exp with ULP=20" (measured: 3.2).
EXP_ULPS = {"bf16": 1024, "f16": 1024, "f32": 20}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES) + ["layout"], default="layout")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    return lambda config: TorchSdpaEngine(config, options)


def numerics(dtype, bug=None):
    """The declarations of the kernel in `dtype` (see the module's docstring)."""
    if bug == "numerics":
        return {}
    half = dtype != "f32"
    declared = {
        "output": dtype,
        "p": dtype if half else "none",
        "score_accumulation": "f32",
        "value_accumulation": "f32",
        "rotated_keys_in_storage": True,
        "rotated_queries_in_storage": True,
        "rope_angles_exact": True,
    }
    if bug != "exp":
        declared["exp_ulps"] = EXP_ULPS[dtype]
    return declared


class TorchSdpaEngine(common.CacheHistory):
    def __init__(self, config, options):
        self.config, self.options = config, options
        self.dtype = config.dtype if options.dtype == "layout" else options.dtype
        self.torch_dtype = TORCH_DTYPES[self.dtype]
        self.name = f"torch-{torch.__version__}-sdpa-cpu-{options.dtype}"
        self.name += f" (bug: {options.bug})" if options.bug else ""
        self.numerics, dtypes = common.per_dtype(
            options.dtype, TORCH_DTYPES, lambda dtype: numerics(dtype, options.bug)
        )
        self.supports = {"dtypes": dtypes, "value_dim_is_head_dim": True}
        zeros = lambda shape: torch.zeros(shape, dtype=self.torch_dtype)  # noqa: E731
        self.caches = common.Caches(config, zeros, config.head_dim, config.value_dim)

    def step(self, chunks):
        common.check_step(chunks, self.caches, self.config, self.dtype, "torch's")
        return [self._forward(chunk) for chunk in chunks]

    def _input(self, rows, rotate_from=None):
        """rows[token][head][lane] as (1, heads, tokens, lanes) in the kernel's dtype."""
        array = np.asarray(rows, dtype=np.float64)
        if rotate_from is not None and self.config.rope_theta is not None:
            array = common.rotate(self.config, array, rotate_from, self.options.bug == "rope")
        return torch.from_numpy(array).to(self.torch_dtype).permute(1, 0, 2).unsqueeze(0)

    def _mask(self, past, new):
        """attn_mask[i][j]: query i of the chunk (position past + i) sees key j when
        j <= position and (with a window W) j > position - W."""
        positions = past + torch.arange(new)[:, None]
        keys = torch.arange(past + new)[None, :]
        mask = keys <= positions
        if self.config.window:
            mask &= keys > positions - (self.config.window + (self.options.bug == "window"))
        return mask

    def _forward(self, chunk):
        c = self.config
        past_keys, past_values = self.caches.entries[chunk.seq]
        past, new = past_keys.shape[2], len(chunk.q)
        keys = torch.cat([past_keys, self._input(chunk.k, past)], dim=2)
        values = torch.cat([past_values, self._input(chunk.v)], dim=2)
        self.caches.entries[chunk.seq] = (keys, values)
        q = self._input(chunk.q, past)
        scale = None if self.options.bug == "scale" else float(c.scale)
        causal = past == 0 and not c.window
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(
                q,
                keys,
                values,
                attn_mask=None if causal else self._mask(past, new),
                is_causal=causal,
                scale=scale,
                enable_gqa=c.q_heads != c.kv_heads,
            )
        rows = out[0].permute(1, 0, 2).to(torch.float64).numpy()
        return range(past, past + new), rows


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
