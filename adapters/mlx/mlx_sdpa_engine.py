#!/usr/bin/env python3
"""MLX's attention on the CPU as mlx-lm's models run it: mlx_lm's KVCache per sequence,
its mask, and mlx_lm.models.base.scaled_dot_product_attention (mx.fast's, with sinks), as
a kvfuzz engine:

    kvfuzz check --engine "exec:.venv/bin/python adapters/mlx/mlx_sdpa_engine.py"

    import kvfuzz, mlx_sdpa_engine                       # in-process, the same engine
    kvfuzz.check(mlx_sdpa_engine.factory([]), cases=100)

Each chunk is what one attention layer of an mlx-lm model does for one sequence (mlx_lm/
models/llama.py's Attention.__call__): the mask from the cache before it is updated
(base.create_attention_mask(h, cache, window_size=W), which calls cache.make_mask:
"causal", None for one token, or a boolean array that lets the query at position p see
keys p - W + 1 .. p), then cache.update_and_fetch(k, v) and base.scaled_dot_product_attention(q, keys, values, cache, scale, mask, sinks), at
batch 1. reset is a new cache, truncate is cache.trim(length - keep) (what mlx-lm's
prompt cache trimming calls), fork copies the cache's state and buffers. --cache rotating
gives a windowed layout's sequences RotatingKVCache(max_size=W), as mlx-lm's sliding-window
layers do, and has no truncate (it cannot trim once its ring has wrapped). --cache quantized
gives a layout whose K and V are stored in one of kvfuzz's affine formats (affine2, affine4,
affine8 with groups of 32, 64 or 128: MLX's own quantizer, docs/fixture-format.md)
QuantizedKVCache(group_size, bits), mlx-lm's quantized cache, whose attention is
base.quantized_scaled_dot_product_attention (mx.quantized_matmul for q.k and P.v); other
layouts get KVCache, as with --cache kv.

  * RoPE: the adapter rotates q and k in float64 at their positions and rounds them once
    to the dtype (mx.fast.rope in the model's dtype is a numerics kvfuzz models as
    rope_tables, left for later), so the cache holds rotated keys.
  * sinks: one logit per q head, passed as MLX's `sinks` (rounded to the dtype).

What it computes (mlx 0.32's CPU backend has no fused kernel: force_fused=True raises
"no fused kernel is available in CPU backend", so mlx/fast.cpp's fallback runs, read at
v0.32.1): q * scale in the dtype; scores = q @ k^T (one gemm of the dtype, f32 sums); the
boolean mask as where(mask, scores, finfo(dtype).min); the sinks concatenated as one more
column; softmax(precise=True): the row max, exp(s - max) by mlx's simd::exp (a Cephes
polynomial after x * log2(e) in f32; measured up to 65 ulps of 2^-24 relative on
[-87, 0], README.md) summed in f32, each exp times 1 / sum, rounded to the dtype (P
normalised); out = P @ v (f32 sums), rounded to the dtype.

In f32 (the default, --dtype f32) every one of those steps is what kvfuzz's numerics
declare (score and value sums in f32, an exp of 64 f32 ulps). With --dtype f16 two steps
have no exact declaration: q * scale rounded to f16 before the dot products, and the
scores rounded to f16 by the gemm. Together they are at most 2 u16 of the score's
magnitude bound, inside what `score_accumulation: f16` tolerates (8 sqrt(d + 2) u16 of
it), so f16 is declared that way, with P rounded to f16 after normalising (`p`,
`p_normalised`): honest but loose, and about a third of f16 rows end up unjudged (their
bound covers every value in range; README.md, "Half precision"). Sinks are f32 only (MLX
rounds them to f16, which the judge does not model). bf16 is not offered: kvfuzz cannot
declare scores rounded to bf16 yet.

The quantized cache (--cache quantized, f32): mlx-lm's QuantizedKVCache quantizes each new
row with mx.quantize in the dtype it is given, so the adapter gives it K and V in the
layout's dtype (f32, f16 or bf16), and each group's scale and bias are stored in that dtype
(kvfuzz's definition); the attention then runs in f32 (queries f32, the scales and biases
cast up to f32, which is exact, for mx.quantized_matmul). queries * scale in f32; q.k by
quantized_matmul (transpose=True: each element read as scale * q + bias in f32, summed in
f32 in head_dim order); the boolean mask as where(mask, s, finfo.min); softmax(precise);
P.v by quantized_matmul (f32 sums in key order): the f32 declarations hold as they are.
mlx-lm refuses sinks with a quantized cache, so this engine declares none.

--bug window|scale|rope|sinks|gqa|bits breaks one mapping on purpose (negative controls): a
window one key wider, the default scale 1/sqrt(head_dim), interleaved (GPT-J) RoPE pairs,
the sinks of q head h taken from h + 1, the kv heads tiled before the call (repeat where
repeat_interleave was meant), so q head h reads kv head h % kv_heads, or (--cache quantized)
a QuantizedKVCache of 8 bits for a 4-bit format and of 4 for the others, as a model whose
kv_bits were set apart from the cache it was checked against.
"""

import argparse
import os
import sys

import mlx.core as mx
import numpy as np
from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import kv_adapter as common  # noqa: E402

mx.set_default_device(mx.cpu)

BUGS = ("window", "scale", "rope", "sinks", "gqa", "bits")
# exp(s - max) by mlx's simd::exp: measured up to 65 ulps of 2^-24 (32 f32 ulps of 2^-23,
# kvfuzz's unit) relative on [-87, 0] (README.md), declared with twice that.
EXP_ULPS = 64


MX_DTYPES = {"f32": mx.float32, "f16": mx.float16}
NP_DTYPES = {"f32": np.float32, "f16": np.float16}
# The dtypes a quantized cache is handed K and V in (the layout's: its scales follow it).
STORAGE_DTYPES = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
AFFINE_BITS = {"affine2": 2, "affine4": 4, "affine8": 8}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(MX_DTYPES), default="f32")
    parser.add_argument(
        "--cache",
        choices=("kv", "rotating", "quantized"),
        default="kv",
        help="rotating: a layout with a window W gets mlx-lm's RotatingKVCache(max_size=W), "
        "as mlx-lm's sliding-window layers do (no truncate: it cannot trim once it wraps); "
        "quantized: a layout with an affine KV format gets mlx-lm's QuantizedKVCache (f32)",
    )
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    if options.cache == "quantized" and options.dtype != "f32":
        raise SystemExit("--cache quantized runs its attention in f32: no --dtype f16")
    engine = {"rotating": MlxRotatingEngine, "quantized": MlxQuantizedEngine}.get(options.cache, MlxSdpaEngine)
    return lambda config: engine(config, options)


def numerics(dtype):
    """The declarations of the computation in `dtype` (see the module's docstring)."""
    half = dtype != "f32"
    return {
        "output": dtype,
        "score_accumulation": dtype,
        "p": dtype if half else "none",
        "p_normalised": half,
        "value_accumulation": "f32",
        "rotated_keys_in_storage": True,
        "rotated_queries_in_storage": True,
        "rope_angles_exact": True,
        "exp_ulps": EXP_ULPS,
    }


def _copied(array):
    """A copy of an array, or of each of a tuple's (QuantizedKVCache's packed words, scales
    and biases)."""
    if isinstance(array, tuple):
        return tuple(_copied(a) for a in array)
    if array is None:
        return None
    # Through numpy, which has no bfloat16: such an array crosses as f32 (exact) and back.
    wide = array.astype(mx.float32) if array.dtype == mx.bfloat16 else array
    return mx.array(np.array(wide)).astype(array.dtype)


def copy_cache(cache):
    """A cache of the same class holding the same tokens as `cache`, sharing no array with
    it: both classes write new tokens into their buffers in place, which a second cache
    must not see. Its state (for RotatingKVCache also the ring's write index) is copied."""
    copy = type(cache).__new__(type(cache))
    copy.__dict__.update(cache.__dict__)
    copy.keys, copy.values = _copied(cache.keys), _copied(cache.values)
    return copy


class _MlxEngine:
    """What both caches share: the step, reset and fork; a subclass says which cache a
    sequence gets (new_cache) and whether it can truncate."""

    def __init__(self, config, options):
        self.config, self.options = config, options
        kind = "" if options.cache == "kv" else f"-{options.cache}"
        self.name = f"mlx-{mx.__version__}-sdpa-cpu{kind}" + (f" (bug: {options.bug})" if options.bug else "")
        self.dtype = options.dtype
        self.numerics = numerics(self.dtype)
        self.supports = {"dtypes": [self.dtype], "windows": True, "sinks": self.dtype == "f32"}
        # The window the engine applies: kvfuzz's, or one key wider for --bug window.
        self.window = config.window + (options.bug == "window") if config.window else None
        self.caches = [self.new_cache() for _ in range(config.sequences)]
        self.sinks = None
        if config.sinks is not None:
            sinks = list(config.sinks)
            if options.bug == "sinks":
                sinks = sinks[1:] + sinks[:1]
            self.sinks = mx.array(np.asarray(sinks, NP_DTYPES[self.dtype]))

    def _cache(self, seq):
        if not 0 <= seq < len(self.caches):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.caches)})")
        return self.caches[seq]

    def step(self, chunks):
        seqs = [chunk.seq for chunk in chunks]
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"a sequence appears in two chunks of one step: {seqs}")
        if self.config.dtype not in self.supports["dtypes"]:
            raise ValueError(
                f"layout.dtype {self.config.dtype}: this engine runs MLX in {self.dtype} (supports.dtypes {self.supports['dtypes']})"
            )
        return [self._forward(chunk) for chunk in chunks]

    def reset(self, seq):
        self._cache(seq)
        self.caches[seq] = self.new_cache()

    def fork(self, src, dst):
        source = self._cache(src)
        self._cache(dst)
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        self.caches[dst] = copy_cache(source)

    def _input(self, rows, rotate_from=None, dtype=None):
        """rows[token][head][lane] as (1, heads, tokens, lanes) in `dtype` (the engine's)."""
        array = np.asarray(rows, dtype=np.float64)
        if rotate_from is not None and self.config.rope_theta is not None:
            array = common.rotate(self.config, array, rotate_from, self.options.bug == "rope")
        array = array.astype(np.float32).transpose(1, 0, 2)[None]
        return mx.array(np.ascontiguousarray(array)).astype(dtype or MX_DTYPES[self.dtype])

    def storage_dtype(self):
        """The dtype K and V are handed to the cache in (None: the engine's)."""
        return None

    def fetched(self, cached):
        """What the attention is given of what the cache fetched."""
        return cached

    def _forward(self, chunk):
        c, cache = self.config, self.caches[chunk.seq]
        past, new = cache.offset, len(chunk.q)
        # As a model builds it from its hidden states (batch, tokens, width) and the cache.
        mask = create_attention_mask(mx.zeros((1, new, 1)), cache, window_size=self.window)
        queries = self._input(chunk.q, past)
        storage = self.storage_dtype()
        keys, values = cache.update_and_fetch(self._input(chunk.k, past, storage), self._input(chunk.v, None, storage))
        keys, values = self.fetched(keys), self.fetched(values)
        if self.options.bug == "gqa" and c.group > 1 and not isinstance(keys, tuple):
            keys, values = mx.tile(keys, (1, c.group, 1, 1)), mx.tile(values, (1, c.group, 1, 1))
        scale = c.head_dim**-0.5 if self.options.bug == "scale" else float(c.scale)
        out = scaled_dot_product_attention(queries, keys, values, cache, scale, mask, self.sinks)
        rows = np.array(out[0].astype(mx.float32), dtype=np.float64).transpose(1, 0, 2)
        return range(past, past + new), rows


class MlxSdpaEngine(_MlxEngine):
    """mlx-lm's KVCache for every sequence; truncate is its trim."""

    def new_cache(self):
        return KVCache()

    def truncate(self, seq, keep):
        cache = self._cache(seq)
        if not 0 <= keep <= cache.offset:
            raise ValueError(f"sequence {seq} holds {cache.offset} tokens, cannot keep {keep}")
        cache.trim(cache.offset - keep)


class MlxQuantizedEngine(MlxSdpaEngine):
    """A layout whose K and V are stored in one affine format: mlx-lm's
    QuantizedKVCache(group_size, bits) per sequence, given K and V in the layout's dtype (so
    its scales and biases are stored in that dtype, as kvfuzz's format says), and the
    attention of base.scaled_dot_product_attention (its quantized branch) in f32. Other
    layouts: KVCache, as MlxSdpaEngine. truncate is the cache's trim."""

    def __init__(self, config, options):
        formats = (config.k_format, config.v_format)
        self.quantized = None
        if any(f is not None for f in formats):
            kinds = [(f or {}).get("type") for f in formats]
            if formats[0] != formats[1] or kinds[0] not in AFFINE_BITS:
                raise ValueError(
                    f"layout.k_format {formats[0]}, v_format {formats[1]}: mlx-lm's "
                    "QuantizedKVCache stores K and V in one affine format and group"
                )
            bits = AFFINE_BITS[kinds[0]]
            if options.bug == "bits":
                bits = 8 if bits == 4 else 4
            self.quantized = (formats[0]["group"], bits)
        super().__init__(config, options)
        self.supports = {"dtypes": ["f32", "f16", "bf16"], "windows": True, "kv_affine": True}
        # f32 arithmetic for every layout dtype; rotated q and k (RoPE layouts, which have
        # no affine format) are rounded to f32, not to an f16 or bf16 layout's dtype.
        self.numerics = {**numerics("f32"), "rotated_keys_in_storage": False, "rotated_queries_in_storage": False}

    def new_cache(self):
        if self.quantized is None:
            return KVCache()
        group, bits = self.quantized
        return QuantizedKVCache(group_size=group, bits=bits)

    def storage_dtype(self):
        # K and V reach a quantized cache in the layout's dtype (exact: they are rounded to
        # it), so mx.quantize stores each group's scale and bias in that dtype.
        return STORAGE_DTYPES[self.config.dtype] if self.quantized else None

    def fetched(self, cached):
        if self.quantized is None:
            return cached
        # The packed words as stored; the scales and biases cast up to f32 (exact), so that
        # quantized_matmul runs in f32 with the queries.
        words, scales, biases = cached
        return words, scales.astype(mx.float32), biases.astype(mx.float32)


class MlxRotatingEngine(_MlxEngine):
    """A layout with a window W: mlx-lm's RotatingKVCache(max_size=W, keep=0) per sequence,
    as mlx-lm's sliding-window layers make it (a ring buffer of the last W keys once a
    decode has wrapped it; a chunk of n tokens sees W - 1 + n in temporal order). Without a
    window, KVCache. No truncate: RotatingKVCache trims only while it has not wrapped
    (is_trimmable), so kvfuzz checks this engine without truncates."""

    def new_cache(self):
        return RotatingKVCache(max_size=self.window) if self.window else KVCache()


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
