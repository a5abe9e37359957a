#!/usr/bin/env python3
"""ONNX Runtime's CPU kernel of the standard ONNX Attention operator (opset 23) with
past_key/past_value, as a kvfuzz engine:

    kvfuzz check --engine "exec:.venv/bin/python adapters/onnxruntime/ort_attention_engine.py --dtype f32"

    import kvfuzz, ort_attention_engine                  # in-process, the same engine
    kvfuzz.check(ort_attention_engine.factory(["--dtype", "f32"]), cases=100)

Every chunk of a step is one run at batch 1 with 3-D inputs: Q (1, tokens, q_heads *
head_dim), K (1, tokens, kv_heads * head_dim), V (1, tokens, kv_heads * value_dim), the
sequence's past_key / past_value (1, kv_heads, length, dim); present_key / present_value
(past and new concatenated) become the next past. The operator has no sequence lengths:
the past must hold exactly the sequence's tokens ("this only works correctly for the
special case where the past key and value do not contain padded tokens"), so a step's
chunks cannot share one padded run.

What maps to what (README.md in this folder has the measurements):
  * GQA, MQA: q_num_heads = q_heads, kv_num_heads = kv_heads (3-D inputs need both).
  * causal mask: is_causal = 1, bottom-right aligned: query i of the chunk sees key j of
    past + new iff j <= i + past_length, so the query at position p sees keys 0 .. p.
  * scale: scale, always passed (the default 1/sqrt(head_dim) equals kvfuzz's default,
    not an explicit one).
  * window W: opset 23 has no window attribute (left_window_size came with opset 25), so a
    boolean attn_mask (tokens, past + tokens) allows keys p - W + 1 .. p; is_causal is
    composed with it.
  * RoPE: the operator has none; the adapter rotates q and k in float64 at their positions
    and rounds them once to the kernel's dtype, so the cache holds rotated keys.
  * head_dim and value_dim: any, and different from each other (V's head size is its own).
  * reset, truncate, fork: the cache emptied, sliced to keep, copied (the operator cannot
    express them: the adapter slices what it passes as past).

--bug window|scale|rope|numerics|normalisation breaks one mapping on purpose (negative
controls): a window mask of W + 1 keys, the default scale, interleaved (GPT-J) RoPE pairs,
no numerics declared, or (f16) P declared rounded as FlashAttention rounds it instead of
normalised first.
"""

import argparse

import numpy as np
import onnxruntime as ort

import ort_common as common
from ort_common import proto

BUGS = ("window", "scale", "rope", "numerics", "normalisation")
OPSET = 23


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(common.NUMPY_DTYPES), default="f32")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    return parser.parse_args(argv)


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    return lambda config: OrtAttentionEngine(config, options)


def model(config, options):
    """One Attention node for this layout (symbolic lengths), with attn_mask for a window."""
    element = common.ONNX_DTYPES[options.dtype]
    attributes = {"q_num_heads": config.q_heads, "kv_num_heads": config.kv_heads, "is_causal": 1}
    if options.bug != "scale":
        attributes["scale"] = float(config.scale)
    d, e = config.head_dim, config.value_dim
    inputs = [
        proto.value_info("Q", element, [1, "new", config.q_heads * d]),
        proto.value_info("K", element, [1, "new", config.kv_heads * d]),
        proto.value_info("V", element, [1, "new", config.kv_heads * e]),
    ]
    names = ["Q", "K", "V", ""]
    if config.window:
        inputs.append(proto.value_info("attn_mask", proto.BOOL, ["new", "total"]))
        names[3] = "attn_mask"
    inputs += [
        proto.value_info("past_key", element, [1, config.kv_heads, "past", d]),
        proto.value_info("past_value", element, [1, config.kv_heads, "past", e]),
    ]
    names += ["past_key", "past_value"]
    outputs = [
        proto.value_info("Y", element, [1, "new", config.q_heads * e]),
        proto.value_info("present_key", element, [1, config.kv_heads, "total", d]),
        proto.value_info("present_value", element, [1, config.kv_heads, "total", e]),
    ]
    node = proto.node("Attention", names, ["Y", "present_key", "present_value"], "", attributes)
    return proto.model(node, inputs, outputs, {"": OPSET})


class OrtAttentionEngine(common.CacheHistory):
    def __init__(self, config, options):
        self.config, self.options = config, options
        self.dtype = options.dtype
        self.np_dtype = common.NUMPY_DTYPES[self.dtype]
        self.name = f"onnxruntime-{ort.__version__}-attention{OPSET}-{self.dtype}"
        self.name += f" (bug: {options.bug})" if options.bug else ""
        # Measured in README.md: the f16 kernel rounds its scores (Q.K^T, scaled) to f16,
        # takes the softmax of those, rounds the normalised P to f16 and sums P.V in f32,
        # rounding each output once (99.95% of values equal that model's rounding); the f32
        # kernel keeps everything in f32. q and k are rotated and rounded here before the kernel.
        half = self.dtype == "f16"
        self.numerics = {
            "output": self.dtype,
            "p": "f16" if half else "none",
            "p_normalised": half,
            "score_accumulation": "f16" if half else "f32",
            "value_accumulation": "f32",
            "rotated_keys_in_storage": True,
            "rotated_queries_in_storage": True,
            "rope_angles_exact": True,
        }
        if options.bug == "numerics":
            self.numerics = {}
        if options.bug == "normalisation":
            self.numerics["p_normalised"] = False
        self.supports = {"dtypes": [self.dtype]}
        self.session = common.session(model(config, options))
        self.caches = common.caches(config, self.np_dtype, config.head_dim, config.value_dim)

    def step(self, chunks):
        common.check_step(chunks, self.caches, self.config, self.dtype)
        return [self._forward(chunk) for chunk in chunks]

    def _input(self, rows, rotate_from=None):
        """rows[token][head][lane] as (1, tokens, heads * lanes) in the kernel's dtype."""
        array = np.asarray(rows, dtype=np.float64)
        if rotate_from is not None and self.config.rope_theta is not None:
            array = common.rotate(self.config, array, rotate_from, self.options.bug == "rope")
        return array.reshape(1, array.shape[0], -1).astype(self.np_dtype)

    def _window_mask(self, past, new):
        """attn_mask[i][j]: query i of the chunk (position past + i) may see key j when
        j > position - W (is_causal cuts j > position)."""
        width = self.config.window + (self.options.bug == "window")
        positions = past + np.arange(new)[:, None]
        return np.arange(past + new)[None, :] > positions - width

    def _forward(self, chunk):
        c = self.config
        past_keys, past_values = self.caches.entries[chunk.seq]
        past, new = past_keys.shape[2], len(chunk.q)
        feeds = {
            "Q": self._input(chunk.q, past),
            "K": self._input(chunk.k, past),
            "V": self._input(chunk.v),
            "past_key": past_keys,
            "past_value": past_values,
        }
        if c.window:
            feeds["attn_mask"] = self._window_mask(past, new)
        out, present_keys, present_values = self.session.run(None, feeds)
        self.caches.entries[chunk.seq] = (present_keys, present_values)
        return range(past, past + new), out.reshape(new, c.q_heads, c.value_dim)


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()
