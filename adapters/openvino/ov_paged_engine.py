#!/usr/bin/env python3
"""OpenVINO's PagedAttentionExtension on the CPU plugin (openvino 2026.4.1, PyPI), as a
kvfuzz engine with block tables kept here:

    kvfuzz check --engine "exec:.venv/bin/python adapters/openvino/ov_paged_engine.py --no-alibi"

    import kvfuzz, ov_paged_engine                       # in-process, the same engine
    kvfuzz.check(ov_paged_engine.factory(["--no-alibi"]), cases=100)

One op (28 inputs, paged_attention_op.py lists them) is compiled per head layout and KV precision
and cached for the process. Each step is one call of the op over all of the step's chunks
(past_lens, subsequence_begins, block_indices, block_indices_begins describe them; --per-chunk:
one call per chunk). The op writes the new tokens' K and V into the key_cache / value_cache
tensors it is given, in place: they are the pool, kept here as ov.Tensors across calls.

What maps to what (each measured: README.md):
  * q_heads, kv_heads, head_dim, value_dim: query [tokens, H*S], key [tokens, Hk*S], value
    [tokens, Hk*SV]; rt_info num_k_heads/k_head_size/num_v_heads/v_head_size (compile fails
    without them). q head h reads kv head h // (H/Hk), as kvfuzz's.
  * page_size: not used. The CPU plugin's block size is 32 (it asserts "block size must be
    32"); the cache is [blocks, Hk, 32, S] and [blocks, Hk, 32, SV].
  * page_order: the order blocks are handed out (pages beyond the 32-token blocks needed
    are simply not used; the pool grows past it when a case needs more).
  * poison: every pool slot that holds no token holds it (the pool is filled when made,
    freed blocks and truncated slots are filled again).
  * scale: the `scale` input, always passed (0 would mean 1/sqrt(S) to the op).
  * window W: `sliding_window` = W: the query at p sees keys p - W + 1 .. p.
  * alibi: `alibi_slopes` [H]: logit += slope * (key_pos - query_pos), kvfuzz's convention.
    The CPU kernel drops ALiBi when sliding_window is set (measured: the rows are the
    window's without the bias; docs/findings/openvino.md): such a layout fails, so
    --no-alibi leaves ALiBi undeclared, for a check of everything else.
  * sinks: `sinks` [1, H, 1, 1], one unscaled logit per q head, kvfuzz's convention.
  * RoPE: the op has none usable for this (its rotation inputs re-rotate cached blocks);
    the adapter rotates q and k in float64 at their positions and rounds them once to the
    kernel's dtype, so the cache holds rotated keys.
  * reset, truncate, fork: bookkeeping over the block tables (adapters/common/block_tables.py:
    a fork shares the source's full blocks and copies its partial last block, copy on write
    at a truncate into a shared block).

--kv f32 (default): KV_CACHE_PRECISION f32, INFERENCE_PRECISION_HINT f32 (without the two
hints the CPU plugin picks bf16 compute and a u8 cache on this machine); takes all three
dtypes (f16 and bf16 values are exact in f32). --kv f16: an f16 cache with f32 compute,
for f16 layouts (the cache holds K and V rounded to f16, exact for f16 values).
--bug window|alibi|scale|sinks|gqa breaks one mapping on purpose (negative controls; gqa: the
kv heads handed to the op in reverse order).
"""

import argparse
import functools
import os
import sys

import numpy as np
import openvino as ov

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "common"))

import kv_adapter as common  # noqa: E402
import paged_attention_op as op  # noqa: E402
from block_tables import BlockTables  # noqa: E402
from paged_attention_op import BLOCK  # noqa: E402

BUGS = ("window", "alibi", "scale", "sinks", "gqa")
KV = {"f32": (ov.Type.f32, np.float32), "f16": (ov.Type.f16, np.float16)}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv", choices=sorted(KV), default="f32", help="KV_CACHE_PRECISION")
    parser.add_argument("--per-chunk", action="store_true", help="one op call per chunk, not per step")
    parser.add_argument("--no-alibi", action="store_true", help="do not declare alibi")
    parser.add_argument("--no-sinks", action="store_true", help="do not declare sinks")
    parser.add_argument("--threads", type=int, default=1, help="INFERENCE_NUM_THREADS")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    return lambda config: OvPagedEngine(config, options)


@functools.lru_cache(maxsize=32)
def compiled(H, Hk, S, SV, kv, threads):
    """The op compiled for one head layout, with its one infer request (the cases of one
    process run one after another, so they share it)."""
    model = op.build(H, Hk, S, SV, kv_precision=kv, infer_precision="f32", threads=threads)
    return model, model.create_infer_request()


class Pool:
    """key_cache / value_cache as ov.Tensors [blocks, Hk, 32, width] (the op writes into
    them), poison in every unused slot: the store of BlockTables."""

    def __init__(self, config, ov_type, np_dtype, key_width, value_width):
        self.ov_type, self.np_dtype = ov_type, np_dtype
        self.Hk, self.widths = config.kv_heads, (key_width, value_width)
        self.poison_value = common.poison_value(config.poison, np_dtype)
        self.keys = self.values = None

    def grow(self, blocks):
        tensors = []
        for width, previous in zip(self.widths, (self.keys, self.values)):
            tensor = ov.Tensor(self.ov_type, ov.Shape([blocks, self.Hk, BLOCK, width]))
            tensor.data[...] = self.poison_value
            if previous is not None:
                tensor.data[: previous.data.shape[0]] = previous.data
            tensors.append(tensor)
        self.keys, self.values = tensors

    def poison(self, block, slot):
        self.keys.data[block, :, slot:] = self.poison_value
        self.values.data[block, :, slot:] = self.poison_value

    def copy(self, src, dst, slots):
        for tensor in (self.keys, self.values):
            tensor.data[dst, :, :slots] = tensor.data[src, :, :slots]


class OvPagedEngine(common.CacheHistory):
    """reset, truncate and fork: CacheHistory's, over the block tables (self.caches)."""

    def __init__(self, config, options):
        c = self.config = config
        self.options = options
        self.name = f"openvino-{ov.__version__.split('-')[0]}-paged-attention-cpu-kv{options.kv}"
        self.name += " (per chunk)" if options.per_chunk else ""
        self.name += f" (bug: {options.bug})" if options.bug else ""
        # f32 compute throughout (INFERENCE_PRECISION_HINT f32): rows in f32, P not rounded.
        self.numerics = {
            "output": "f32",
            "p": "none",
            "score_accumulation": "f32",
            "value_accumulation": "f32",
            # Keys are rotated in float64 and rounded once to the cache's dtype (f32, or f16
            # for --kv f16): "in storage" when that is the layout's dtype; a bf16 or f16 layout
            # in an f32 cache keeps its rotated keys at f32. Rotated queries are passed in f32.
            "rotated_keys_in_storage": config.dtype == options.kv,
            "rotated_queries_in_storage": config.dtype == "f32",
            "rope_angles_exact": True,
        }
        self.supports = {
            "dtypes": ["f32", "f16", "bf16"] if options.kv == "f32" else ["f16"],
            "windows": True,
            "sinks": not options.no_sinks,
            "alibi": not options.no_alibi,
        }
        self.ov_type, self.np_dtype = KV[options.kv]
        self.model, self.request = compiled(c.q_heads, c.kv_heads, c.head_dim, c.value_dim, options.kv, options.threads)
        self.pool = Pool(c, self.ov_type, self.np_dtype, c.head_dim, c.value_dim)
        self.caches = BlockTables(c.sequences, BLOCK, c.page_order, self.pool)
        self.scale = 1.0 / np.sqrt(c.head_dim) if options.bug == "scale" else float(c.scale)
        self.window = (c.window + (options.bug == "window")) if c.window else 0
        self.alibi = None
        if c.alibi is not None:
            slopes = np.asarray(c.alibi, np.float64)
            self.alibi = -slopes if options.bug == "alibi" else slopes
        self.sinks = None
        if c.sinks is not None:
            sinks = list(c.sinks)
            self.sinks = sinks[1:] + sinks[:1] if options.bug == "sinks" else sinks

    # --- the op ---------------------------------------------------------------------------

    def _array(self, rows, heads, width, rotate_from=None):
        """rows[token][head][lane] as [tokens, heads * width] f32, rotated (RoPE) in float64 and
        rounded once to the kernel's storage dtype for keys (f32 or f16), f32 for queries."""
        array = np.asarray(rows, dtype=np.float64).reshape(len(rows), heads, width)
        if rotate_from is not None and self.config.rope_theta:
            array = common.rotate(self.config, array, rotate_from)
        return array.reshape(len(rows), heads * width)

    def step(self, chunks):
        return common.paged_step(chunks, self.caches, self.config, self.supports["dtypes"], self._attend)

    def _attend(self, chunks):
        """One call of the op over the chunks, or one per chunk (--per-chunk)."""
        if not self.options.per_chunk:
            return self._call(chunks)
        rows = {}
        for chunk in chunks:
            rows.update(self._call([chunk]))
        return rows

    def _call(self, chunks):
        c = self.config
        H, Hk, S, SV = c.q_heads, c.kv_heads, c.head_dim, c.value_dim
        qs, ks, vs = [], [], []
        past, begins, blocks, block_begins = [], [0], [], [0]
        for chunk in chunks:
            n, t = self.caches.lengths[chunk.seq], len(chunk.q)
            self.caches.reserve(chunk.seq, t)
            qs.append(self._array(chunk.q, H, S, n))
            k = self._array(chunk.k, Hk, S, n)
            if self.np_dtype != np.float32:  # one rounding, f64 -> f16; the op's f32 -> f16 is then exact
                k = k.astype(self.np_dtype)
            v = self._array(chunk.v, Hk, SV)
            if self.options.bug == "gqa":  # kv heads handed over in reverse: q head h reads the wrong one
                k, v = (a.reshape(len(a), Hk, -1)[:, ::-1].reshape(len(a), -1) for a in (k, v))
            ks.append(k)
            vs.append(v)
            past.append(n)
            begins.append(begins[-1] + t)
            blocks += self.caches.tables[chunk.seq]
            block_begins.append(len(blocks))
        f32 = np.float32
        feeds = {
            "query": np.concatenate(qs).astype(f32),
            "key": np.concatenate(ks).astype(f32),
            "value": np.concatenate(vs).astype(f32),
            "past_lens": np.array(past, np.int32),
            "subsequence_begins": np.array(begins, np.int32),
            "block_indices": np.array(blocks, np.int32),
            "block_indices_begins": np.array(block_begins, np.int32),
            "scale": np.array(self.scale, f32),
            "sliding_window": np.array(self.window, np.int32),
            "alibi_slopes": np.array(self.alibi if self.alibi is not None else [], f32),
            "max_context_len": np.array(max(p + b - a for p, a, b in zip(past, begins, begins[1:])), np.int32),
            "sinks": (np.array(self.sinks, f32).reshape(1, H, 1, 1) if self.sinks is not None
                      else np.zeros((0, 0, 0, 0), f32)),
        }
        for name, et, shape in op.INPUTS:
            if name in feeds or name in ("key_cache", "value_cache"):
                continue
            rank = len(shape(1, 1, 1, 1))
            feeds[name] = np.zeros((0,) * rank, op.NP[et])  # scalars: 0 (off)
        request = self.request
        for name, array in feeds.items():
            request.set_tensor(name, op.tensor(array))
        request.set_tensor("key_cache", self.pool.keys)
        request.set_tensor("value_cache", self.pool.values)
        request.infer()
        out = request.get_output_tensor(0).data
        rows = {}
        for chunk, n, a, b in zip(chunks, past, begins, begins[1:]):
            rows[chunk.seq] = (range(n, n + b - a), out[a:b].reshape(b - a, H, SV).astype(np.float64))
            self.caches.advance(chunk.seq, b - a)
        return rows


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
