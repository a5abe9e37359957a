#!/usr/bin/env python3
"""kvfuzz's tiny transformer as an mlx-lm llama model, run by the model's own __call__ with
its per-layer caches, as a kvfuzz whole-model engine (ids in, logits out):

    KVFUZZ_ENGINE_TIMEOUT=60 kvfuzz check --engine "exec:.venv/bin/python adapters/mlx/mlx_model_engine.py"

    import kvfuzz, mlx_model_engine                 # in-process, the same engine
    kvfuzz.check(mlx_model_engine.factory([]), cases=40)

Per case the model is mlx_lm.models.llama.Model whose ModelArgs are the case's model and
layout: vocab_size, hidden_size (width), intermediate_size (ffn), num_hidden_layers,
num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps 1e-5, rope_theta,
rope_traditional False (NeoX half-split pairs, kvfuzz's RoPE), tie_word_embeddings False;
its weights are kvfuzz's (config.weights(), transposed to MLX's Linear [out][in]) loaded with
load_weights(strict=True); each attention module's `scale` is the layout's scale (llama's
Attention takes head_dim^-0.5 otherwise). Per chunk, batch 1: model(ids, cache=caches) with
the sequence's list of per-layer caches (mlx_lm.models.cache.make_prompt_cache: one KVCache
per layer); the model takes each layer's RoPE offset from its cache and builds its own
causal mask (create_attention_mask). reset makes new caches, truncate trims every layer's
(cache.trim), fork copies every layer's state and buffer (mlx_sdpa_engine.copy_cache).

A layout whose K and V are stored in one affine format and group (kvfuzz's affine2/4/8,
kv_affine and kv_one_format) gets mlx-lm's QuantizedKVCache(group_size, bits) in every
layer, as generate(..., kv_bits, kv_group_size) makes them: each layer's rotated K and V
quantized as they arrive (mx.quantize, scales and biases in f32), its attention mlx-lm's
quantized_scaled_dot_product_attention (mx.quantized_matmul for q.k and P.v, f32 sums). The
model level judges the logits with each stored element's error in its group as rounding
noise (docs/fixture-format.md, "Quantized KV caches").

f32 only, and no windows: mlx-lm's llama has no sliding window, and in bf16 or f16 every
weight and product would be rounded too, which kvfuzz's model numerics do not describe.
RoPE is always applied (rope_required), and q, k and v have one head size
(value_dim_is_head_dim). Numerics: the attention as mlx_sdpa_engine declares it in f32
(score and value sums in f32, simd::exp's 64 ulps), with RoPE by mx.fast.rope: its
frequencies base^(-2i/d) and angles position * frequency in f32 (rope_angles_exact false).

--bug rope|scale|bits breaks one mapping on purpose (negative controls): rope_theta doubled,
llama's own head_dim^-0.5 scale kept, or a quantized cache of 8 bits for a 4-bit format and
of 4 for the others.
"""

import argparse
import os
import sys

import mlx.core as mx
import numpy as np
from mlx_lm.models import llama
from mlx_lm.models.cache import QuantizedKVCache, make_prompt_cache

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mlx_sdpa_engine import AFFINE_BITS, EXP_ULPS, common, copy_cache  # noqa: E402

mx.set_default_device(mx.cpu)

BUGS = ("rope", "scale", "bits")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def weights_of(weights):
    """kvfuzz's weights as llama.Model's (kv_adapter.llama_weights: Linear [out][in])."""
    return [(name, mx.array(array.astype(np.float32))) for name, array in common.llama_weights(weights).items()]


class MlxModel:
    whole_model = True
    options = parse([])
    supports = {"dtypes": ["f32"], "value_dim_is_head_dim": True, "head_dim_multiple": 2,
                "rope_required": True, "windows": False, "kv_affine": True,
                "kv_one_format": True}  # fmt: skip
    numerics = {
        "output": "f32",
        "score_accumulation": "f32",
        "value_accumulation": "f32",
        "rope_angles_exact": False,  # mx.fast.rope's frequencies and angles in f32
        "exp_ulps": EXP_ULPS,
    }

    def __init__(self, config):
        self.name = f"mlx-{mx.__version__}-llama" + (f" (bug: {self.options.bug})" if self.options.bug else "")
        self.new_case(config)

    def new_case(self, config):
        """The next case's model, as a fresh object would be (kvfuzz reuses this object)."""
        layout, model, bug = config.engine, config.model, self.options.bug
        self.lengths = [0] * layout.sequences
        if layout.rope_theta is None or layout.head_dim % 2 or layout.value_dim != layout.head_dim:
            self.model = None  # kvfuzz's probe (the smallest layout) asks only for declarations
            self.caches = [None] * layout.sequences
            return
        args = llama.ModelArgs(
            model_type="llama", hidden_size=model.width, num_hidden_layers=model.layers,
            intermediate_size=model.ffn, num_attention_heads=layout.q_heads, rms_norm_eps=1e-5,
            vocab_size=model.vocab, num_key_value_heads=layout.kv_heads, head_dim=layout.head_dim,
            rope_theta=layout.rope_theta * (2 if bug == "rope" else 1), rope_traditional=False,
            tie_word_embeddings=False,
        )  # fmt: skip
        self.model = llama.Model(args)
        self.model.load_weights(weights_of(config.weights()), strict=True)
        if bug != "scale":
            for layer in self.model.model.layers:
                layer.self_attn.scale = float(layout.scale)
        self.quantized = self._quantized(layout.k_format, layout.v_format, bug)
        self.caches = [self._new_caches() for _ in range(layout.sequences)]

    @staticmethod
    def _quantized(k_format, v_format, bug):
        """(group_size, bits) of mlx-lm's QuantizedKVCache for the layout's affine format, or
        None for an unquantized cache."""
        if k_format is None and v_format is None:
            return None
        kinds = [(f or {}).get("type") for f in (k_format, v_format)]
        if k_format != v_format or kinds[0] not in AFFINE_BITS:
            raise ValueError(
                f"layout.k_format {k_format}, v_format {v_format}: mlx-lm's QuantizedKVCache "
                "stores K and V in one affine format and group"
            )
        bits = AFFINE_BITS[kinds[0]]
        if bug == "bits":
            bits = 8 if bits == 4 else 4
        return k_format["group"], bits

    def _new_caches(self):
        if self.quantized is None:
            return make_prompt_cache(self.model)
        group, bits = self.quantized
        return [QuantizedKVCache(group_size=group, bits=bits) for _ in self.model.layers]

    def step(self, chunks):
        seqs = [chunk.seq for chunk in chunks]
        if len(set(seqs)) != len(seqs) or not all(0 <= s < len(self.caches) for s in seqs):
            raise ValueError(f"step's sequences {seqs}: expected distinct ones in 0..{len(self.caches) - 1}")
        return [self._forward(chunk) for chunk in chunks]

    def _forward(self, chunk):
        past, n = self.lengths[chunk.seq], len(chunk.ids)
        ids = mx.array(np.asarray(chunk.ids, np.int32))[None]
        logits = self.model(ids, cache=self.caches[chunk.seq])
        self.lengths[chunk.seq] += n
        return range(past, past + n), np.array(logits[0].astype(mx.float32))

    def reset(self, seq):
        self.caches[seq] = self._new_caches()
        self.lengths[seq] = 0

    def truncate(self, seq, keep):
        length = self.lengths[seq]
        if not 0 <= keep <= length:
            raise ValueError(f"sequence {seq} holds {length} tokens, cannot keep {keep}")
        for cache in self.caches[seq]:
            cache.trim(length - keep)
        self.lengths[seq] = keep

    def fork(self, src, dst):
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        self.caches[dst] = [copy_cache(cache) for cache in self.caches[src]]
        self.lengths[dst] = self.lengths[src]


def factory(argv=None):
    """The engine class for these command-line flags (a class: kvfuzz reads whole_model off it)."""
    return type("MlxModel", (MlxModel,), {"options": parse(argv)})


def main():
    common.serve_model_exec(factory())


if __name__ == "__main__":
    main()
