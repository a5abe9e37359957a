#!/usr/bin/env python3
"""ONNX Runtime's CPU GroupQueryAttention (com.microsoft) as a kvfuzz exec engine:

    kvfuzz check --engine "exec:.venv/bin/python adapters/onnxruntime/ort_gqa_engine.py" --cases 100
    ... ort_gqa_engine.py --dtype f32      # the f32 kernel instead of the f16 one

Every chunk of a step is one run of a one-node ONNX graph, batch 1: the new tokens' q/k/v,
the sequence's past_key/past_value (the engine's state, BNSH), seqlens_k (total length
minus one) and total_sequence_length. ORT returns the output rows and present_key /
present_value, which become the next past. ORT derives each new token's position from
seqlens_k (past length + index), so the position of a token is its index in the cache:
reset empties the cache, truncate slices it, fork copies it, and all three are exact.

What maps to what (README.md in this folder has the reasoning and the measurements):
  * GQA: num_heads = q_heads, kv_num_heads = kv_heads; ORT maps q head h to kv head
    h / (q_heads / kv_heads), as kvfuzz does.
  * scale: passed explicitly (ORT's default is 1/sqrt of the padded head size).
  * window W (keys p-W+1 .. p): local_window_size = W. ORT 1.32's CPU kernel counts the
    current key in its window (measured: W - 1 sees one key fewer at every row past the
    window's edge, W + 1 one more).
  * RoPE, --rope ort (the f32 default): do_rotary = 1, rotary_interleaved = 0 (NeoX
    half-split), cos/sin caches computed here in float64 for positions 0 .. total-1 and
    rounded to the kernel's dtype (ORT takes them in it); ORT rotates q and k at their
    positions and caches the rotated keys in that dtype.
    --rope adapter (the f16 default): the adapter rotates q and k in float64 at their
    positions and rounds them once to the kernel's dtype; do_rotary = 0. ORT's f16 rotary
    cannot do that: its cos/sin caches are f16, so its rotated keys are up to 1.5 f16 ulps
    of the pair's norm off (measured), not one rounding of the rotated key.
  * head sizes: ORT needs one head size for q, k and v, a multiple of 8, and with RoPE a
    multiple of 16 whose rotated part (twice the cos cache's width) is a multiple of 16 too.
    The adapter declares 16 (supports.head_dim_multiple); until kvfuzz generates only
    such layouts, and always where value_dim != head_dim, it pads with zeros, which is
    exact (zero lanes add exact zeros to q.k; padded output lanes are dropped). With RoPE
    kvfuzz's halves (i, i + head_dim/2) go to ORT's lanes (i, i + R/2), R = head_dim
    rounded up to 16, and the cos/sin of the padded pairs are 1 and 0.

--bug window|scale|rope breaks one mapping on purpose (negative controls for the tests):
window W + 1, ORT's default scale, interleaved (GPT-J) RoPE pairs, no numerics declared.
"""

import argparse
import os
import sys

import numpy as np
import onnxruntime as ort

ort.set_default_logger_severity(3)  # errors come back as exceptions, hence as error replies

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "examples", "python-engine")]

import onnx_proto as proto  # noqa: E402
from kvfuzz_engine import serve  # noqa: E402

# ORT's CPU kernel: "head_size must be a multiple of 8"; with do_rotary "head_size shall be
# a multiple of 16" and "cos_cache dimension 1 must be <= head_size / 2 and a multiple of 8".
HEAD_SIZE_MULTIPLE = 8
ROTARY_MULTIPLE = 16
NUMPY_DTYPES = {"f16": np.float16, "f32": np.float32}
ONNX_DTYPES = {"f16": proto.FLOAT16, "f32": proto.FLOAT}
BUGS = ("window", "scale", "rope", "numerics")
ROPE_MODES = ("ort", "adapter")
DEFAULT_ROPE = {"f32": "ort", "f16": "adapter"}


def round_up(n, multiple):
    return -(-n // multiple) * multiple


class Lanes:
    """Where kvfuzz's head_dim and value_dim lanes sit in ORT's one padded head size."""

    def __init__(self, config, ort_rotary):
        rope = config.rope_theta is not None and ort_rotary
        multiple = ROTARY_MULTIPLE if rope else HEAD_SIZE_MULTIPLE
        # The rotated part: kvfuzz's halves at 0 and rotary / 2 (RoPE needs an even head_dim).
        self.rotary = round_up(config.head_dim, ROTARY_MULTIPLE) if rope else 0
        self.head_size = round_up(max(self.rotary, config.head_dim, config.value_dim), multiple)
        half = config.head_dim // 2
        if rope:
            self.qk = np.r_[0:half, self.rotary // 2 : self.rotary // 2 + half]
        else:
            self.qk = np.arange(config.head_dim)
        self.v = np.arange(config.value_dim)


def gqa_session(config, dtype, lanes, bug):
    """A session holding one GroupQueryAttention node for this layout (symbolic lengths)."""
    element = ONNX_DTYPES[dtype]
    rope, head_size = lanes.rotary > 0, lanes.head_size
    window = config.window or -1
    if bug == "window" and config.window:
        window = config.window + 1  # the other convention: W keys before the current one
    attributes = {
        "num_heads": config.q_heads,
        "kv_num_heads": config.kv_heads,
        "local_window_size": window,
        "do_rotary": int(rope),
        "rotary_interleaved": int(bug == "rope"),
    }
    if bug != "scale":
        attributes["scale"] = float(config.scale)
    q_width, kv_width = config.q_heads * head_size, config.kv_heads * head_size
    cache = [1, config.kv_heads, "past", head_size]
    present = [1, config.kv_heads, "total", head_size]
    inputs = [
        proto.value_info("query", element, [1, "new", q_width]),
        proto.value_info("key", element, [1, "new", kv_width]),
        proto.value_info("value", element, [1, "new", kv_width]),
        proto.value_info("past_key", element, cache),
        proto.value_info("past_value", element, cache),
        proto.value_info("seqlens_k", proto.INT32, [1]),
        proto.value_info("total_sequence_length", proto.INT32, []),
    ]
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    if rope:
        inputs += [
            proto.value_info("cos_cache", element, ["positions", "half"]),
            proto.value_info("sin_cache", element, ["positions", "half"]),
        ]
        names += ["cos_cache", "sin_cache"]
    outputs = [
        proto.value_info("output", element, [1, "new", q_width]),
        proto.value_info("present_key", element, present),
        proto.value_info("present_value", element, present),
    ]
    node = proto.node(
        "GroupQueryAttention",
        names,
        ["output", "present_key", "present_value"],
        "com.microsoft",
        attributes,
    )
    model = proto.model(node, inputs, outputs, {"": 21, "com.microsoft": 1})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # kvfuzz runs cases side by side; results do not depend on it
    options.log_severity_level = 3
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OrtGqaEngine:
    def __init__(self, config, dtype, rope_mode, bug):
        self.config = config
        self.dtype = dtype
        self.np_dtype = NUMPY_DTYPES[dtype]
        self.bug = bug
        self.adapter_rotary = config.rope_theta is not None and rope_mode == "adapter"
        self.name = f"onnxruntime-{ort.__version__}-gqa-{dtype}, rope by {rope_mode}" + (
            f" (bug: {bug})" if bug else ""
        )
        # What the kernel does, measured in README.md: f32 scores and values, P kept in
        # f32, one rounding of each output to the kernel's dtype; rotated keys cached in it.
        self.numerics = {
            "output": dtype,
            "p": "none",
            "score_accumulation": "f32",
            "value_accumulation": "f32",
            "rotated_keys_in_storage": True,
            # The kernel is handed q rotated and rounded to its dtype as well (--rope
            # adapter), or rotates it itself in f32 (--rope ort). Said of every layout (it
            # matters only with RoPE): declarations must not depend on the case.
            "rotated_queries_in_storage": rope_mode == "adapter",
            # Angles (and cos/sin, for --rope ort) are computed here in float64.
            "rope_angles_exact": True,
        }
        if bug == "numerics":  # declares nothing: judged as an f32 kernel, which it is not
            self.numerics = {}
        # No limit on head_dim, q heads or context turned up (tried up to 512 / 64 / 8192).
        self.supports = {
            "dtypes": [dtype],
            "head_dim_multiple": ROTARY_MULTIPLE,  # one for every layout, RoPE or not
            "value_dim_is_head_dim": True,  # ORT takes one head size for q, k and v
        }
        self.lanes = Lanes(config, ort_rotary=rope_mode == "ort")
        self.head_size = self.lanes.head_size
        self.session = gqa_session(config, dtype, self.lanes, bug)
        self.caches = [self._empty() for _ in range(config.sequences)]

    # The protocol's operations ---------------------------------------------------------

    def step(self, chunks):
        seqs = [chunk.seq for chunk in chunks]
        for seq in seqs:
            self._check_seq(seq)
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"a sequence appears in two chunks of one step: {seqs}")
        if self.config.dtype != self.dtype and self.dtype != "f32":  # f32 holds every dtype's values
            raise ValueError(
                f"layout.dtype {self.config.dtype}: this engine runs ORT's {self.dtype} kernel "
                f"(supports.dtypes [{self.dtype}])"
            )
        return [self._forward(chunk) for chunk in chunks]

    def reset(self, seq):
        self._check_seq(seq)
        self.caches[seq] = self._empty()

    def truncate(self, seq, keep):
        self._check_seq(seq)
        keys, values = self.caches[seq]
        if not 0 <= keep <= keys.shape[2]:
            raise ValueError(f"sequence {seq} holds {keys.shape[2]} tokens, cannot keep {keep}")
        self.caches[seq] = (keys[:, :, :keep].copy(), values[:, :, :keep].copy())

    def fork(self, src, dst):
        self._check_seq(src)
        self._check_seq(dst)
        if src == dst:
            raise ValueError(f"fork of sequence {src} into itself")
        keys, values = self.caches[src]
        self.caches[dst] = (keys.copy(), values.copy())

    # The forward pass ------------------------------------------------------------------

    def _empty(self):
        shape = (1, self.config.kv_heads, 0, self.head_size)
        return np.zeros(shape, self.np_dtype), np.zeros(shape, self.np_dtype)

    def _check_seq(self, seq):
        if not 0 <= seq < len(self.caches):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.caches)})")

    def _padded(self, rows, heads, lanes, first_position=None):
        """[token][head][lane] from JSON as (1, tokens, heads * head_size), zero-padded;
        rotated by the adapter when first_position is given (the first token's)."""
        array = np.asarray(rows, dtype=np.float64).reshape(len(rows), heads, len(lanes))
        if first_position is not None:
            array = self._rotated(array, first_position)
        out = np.zeros((len(rows), heads, self.head_size), self.np_dtype)
        out[:, :, lanes] = array  # exact: kvfuzz's values are already in the layout's dtype
        return out.reshape(1, len(rows), heads * self.head_size)

    def _angles(self, positions):
        """pos * theta^(-2i/head_dim) for i < head_dim/2: (len(positions), head_dim/2)."""
        c = self.config
        inv_freq = c.rope_theta ** (-2.0 * np.arange(c.head_dim // 2, dtype=np.float64) / c.head_dim)
        return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]

    def _rotated(self, x, first_position):
        """x[token][head][head_dim] turned by RoPE at first_position + token, in float64
        (the caller rounds it once to the kernel's dtype)."""
        angles = self._angles(first_position + np.arange(x.shape[0]))[:, None, :]
        cos, sin = np.cos(angles), np.sin(angles)
        if self.bug == "rope":  # interleaved pairs (2i, 2i + 1)
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
            return out
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def _rotary_caches(self, total):
        """cos/sin of pos * theta^(-2i/head_dim), i < head_dim/2, for positions 0..total-1,
        then the padded pairs' cos 1 and sin 0: (total, rotary / 2) each."""
        angles = np.zeros((total, self.lanes.rotary // 2))
        angles[:, : self.config.head_dim // 2] = self._angles(np.arange(total))
        return np.cos(angles).astype(self.np_dtype), np.sin(angles).astype(self.np_dtype)

    def _forward(self, chunk):
        c = self.config
        past_keys, past_values = self.caches[chunk.seq]
        past, new = past_keys.shape[2], len(chunk.q)
        total = past + new
        rotate_from = past if self.adapter_rotary else None
        feeds = {
            "query": self._padded(chunk.q, c.q_heads, self.lanes.qk, rotate_from),
            "key": self._padded(chunk.k, c.kv_heads, self.lanes.qk, rotate_from),
            "value": self._padded(chunk.v, c.kv_heads, self.lanes.v),
            "past_key": past_keys,
            "past_value": past_values,
            "seqlens_k": np.array([total - 1], np.int32),
            "total_sequence_length": np.array(total, np.int32),
        }
        if self.lanes.rotary:
            feeds["cos_cache"], feeds["sin_cache"] = self._rotary_caches(total)
        out, present_keys, present_values = self.session.run(None, feeds)
        self.caches[chunk.seq] = (present_keys, present_values)
        rows = out.reshape(new, c.q_heads, self.head_size)[:, :, : c.value_dim]
        return list(range(past, total)), rows.astype(np.float64).tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(NUMPY_DTYPES), default="f16")
    parser.add_argument("--rope", choices=ROPE_MODES, help="who rotates q and k (default: by dtype)")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    args = parser.parse_args()
    rope = args.rope or DEFAULT_ROPE[args.dtype]
    serve(lambda config: OrtGqaEngine(config, args.dtype, rope, args.bug))


if __name__ == "__main__":
    main()
