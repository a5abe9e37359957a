#!/usr/bin/env python3
"""ONNX Runtime's CPU GroupQueryAttention (com.microsoft) as a kvfuzz engine:

    kvfuzz check --engine "exec:.venv/bin/python adapters/onnxruntime/ort_gqa_engine.py" --cases 100
    ... ort_gqa_engine.py --dtype f32 --path batched --rope ort --rotary-style interleaved

    import kvfuzz, ort_gqa_engine                        # in-process, the same engine
    kvfuzz.check(ort_gqa_engine.factory(["--dtype", "f32"]), cases=100)

Four ways to call the kernel (--path), each a real caller's:
  * legacy: every chunk of a step is one run at batch 1; past_key/past_value hold exactly
    the sequence's cached tokens, present_key/present_value (past + new) become the next past.
  * batched: one run per step for all its chunks, batch = chunks: the query right-padded to
    the longest chunk (query_seqlens = each row's tokens), the past right-padded to the
    longest cache, seqlens_k = each row's total minus one, total_sequence_length = longest
    past + padded chunk (the present's capacity, which must hold every row's past plus the
    padded chunk). Padding holds the scenario's poison.
  * shared: past_present_share_buffer: per sequence one preallocated buffer, bound through
    IOBinding as both past_key and present_key (the kernel writes the new tokens into it
    at seqlens_k), total_sequence_length = the capacity (a static cache); rows past the
    sequence's length hold poison.
  * window (layouts with a window; others run the legacy path): sliding_window_cache = 1,
    a window-sized buffer per sequence (W + 4 rows) that ORT evicts from itself; a
    truncate ORT's schema calls exact leaves it untouched, another is re-materialized
    from the keys the adapter passed (so it needs --rope adapter).
ORT numbers a chunk's tokens from its row's past length, so a token's position is its
index in the cache, which is kvfuzz's position: reset, truncate and fork are exact.

What maps to what (README.md in this folder has the reasoning and the measurements):
  * GQA: num_heads = q_heads, kv_num_heads = kv_heads (q head h reads kv head h / group).
  * scale: passed explicitly (ORT's default is 1/sqrt of the padded head size).
  * window W (keys p-W+1 .. p): local_window_size = W (ORT 1.32 counts the current key).
  * RoPE, --rope ort (the f32 default): do_rotary = 1 with cos/sin caches computed here in
    float64; --rotary-style half (rotary_interleaved = 0) puts kvfuzz's pair (i, i + d/2) on
    ORT's lanes (i, i + R/2), interleaved (rotary_interleaved = 1) on (2i, 2i + 1): a fixed
    permutation of the q and k lanes, which leaves q.k unchanged. --position-ids passes the
    positions explicitly (position_ids) instead of letting ORT derive them.
    --rope adapter (the f16 default): the adapter rotates q and k in float64 and rounds
    them once to the kernel's dtype; do_rotary = 0 (ORT's f16 rotary rounds cos/sin to f16).
  * head sizes: one head size for q, k and v, a multiple of 8 (16 with do_rotary), zero-padded.
  * attention features: softcap = the layout's soft cap (ORT caps the scaled score before
    the mask, as kvfuzz defines it); head_sink = the sinks, one per q head, in the kernel's
    dtype (kvfuzz hands f16 layouts their sinks rounded to f16); --sinks smooth gives a
    layout whose sinks are all 0 smooth_softmax = 1 instead (ORT's softmax with one more
    e^0 term). No ALiBi or chunked local attention in GQA: not declared.

--bug window|scale|rope|numerics|positions|softcap|sinks|smooth breaks one mapping on
purpose (negative controls): window W + 1, ORT's default scale, the other rotary style, no
numerics declared, position_ids of a chunk after a past one late (which shows ORT reads
them), the soft cap doubled, the sinks of the q heads reversed, smooth_softmax set on a
layout without sinks.
"""

import argparse

import numpy as np
import onnxruntime as ort

import ort_common as common
from ort_common import proto

# ORT's CPU kernel: "head_size must be a multiple of 8"; with do_rotary "head_size shall be
# a multiple of 16" and "cos_cache dimension 1 must be <= head_size / 2 and a multiple of 8".
HEAD_SIZE_MULTIPLE = 8
ROTARY_MULTIPLE = 16
PATHS = ("legacy", "batched", "shared", "window")
BUGS = ("window", "scale", "rope", "numerics", "positions", "softcap", "sinks", "smooth")
SINK_INPUTS = ("head_sink", "smooth")
ROPE_MODES = ("ort", "adapter")
ROTARY_STYLES = ("half", "interleaved")
DEFAULT_ROPE = {"f32": "ort", "f16": "adapter"}
# The kernel's inputs in their schema order (an unused optional input is an empty name).
INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
          "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale",
          "v_scale", "q_norm_weight", "k_norm_weight", "query_seqlens"]  # fmt: skip
INTEGER_INPUTS = {"seqlens_k": proto.INT32, "total_sequence_length": proto.INT32,
                  "query_seqlens": proto.INT32, "position_ids": proto.INT64}  # fmt: skip
SHARED_CAPACITY = 32  # a shared buffer's first capacity; it doubles when a chunk needs more
WINDOW_SLACK = 4  # a window cache holds W + 4 tokens, so ORT evicts 5 at a time


def smooth_softmax(config, options):
    """Whether the kernel gets smooth_softmax = 1: every sink 0 under --sinks smooth, or (the
    negative control --bug smooth) a layout without sinks."""
    if options.bug == "smooth":
        return config.sinks is None  # a sink of 0 the layout does not have
    return options.sinks == "smooth" and config.sinks is not None and not any(config.sinks)


class Lanes:
    """Where kvfuzz's head_dim and value_dim lanes sit in ORT's one padded head size."""

    def __init__(self, config, ort_rotary, style):
        rope = config.rope_theta is not None and ort_rotary
        multiple = ROTARY_MULTIPLE if rope else HEAD_SIZE_MULTIPLE
        # The rotated part, R lanes: kvfuzz's head_dim rounded up to 16.
        self.rotary = common.round_up(config.head_dim, ROTARY_MULTIPLE) if rope else 0
        self.head_size = common.round_up(max(self.rotary, config.head_dim, config.value_dim), multiple)
        half = np.arange(config.head_dim // 2)
        if not rope:
            self.qk = np.arange(config.head_dim)
        elif style == "half":  # ORT's pairs (j, j + R/2)
            self.qk = np.r_[half, self.rotary // 2 + half]
        else:  # ORT's pairs (2j, 2j + 1)
            self.qk = np.r_[2 * half, 2 * half + 1]
        self.v = np.arange(config.value_dim)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(common.NUMPY_DTYPES), default="f16")
    parser.add_argument("--path", choices=PATHS, default="legacy", help="how the kernel is called")
    parser.add_argument("--rope", choices=ROPE_MODES, help="who rotates q and k (default: by dtype)")
    parser.add_argument("--rotary-style", choices=ROTARY_STYLES, default="half",
                        help="ORT's rotary_interleaved 0 (half) or 1, with --rope ort")  # fmt: skip
    parser.add_argument("--position-ids", action="store_true", help="pass position_ids, with --rope ort")
    parser.add_argument("--bug", choices=BUGS, help="break one mapping on purpose")
    parser.add_argument("--sinks", choices=SINK_INPUTS, default="head_sink",
                        help="how sinks reach the kernel: the head_sink input, or smooth_softmax "
                        "where every sink is 0 (head_sink otherwise)")
    options = parser.parse_args(argv)
    options.rope = options.rope or DEFAULT_ROPE[options.dtype]
    if options.rope != "ort" and (options.position_ids or options.rotary_style != "half"):
        parser.error("--position-ids and --rotary-style interleaved need --rope ort (ORT rotates)")
    if options.bug == "positions" and not options.position_ids:
        parser.error("--bug positions needs --position-ids")
    if options.path == "window" and options.rope != "adapter":
        # A truncate may need evicted keys again; the adapter keeps them as it passed them.
        parser.error("--path window needs --rope adapter (the adapter keeps the keys it passed)")
    return options


def factory(argv=None):
    """An engine factory for kvfuzz.check / kvfuzz.replay, with the command line's flags."""
    options = parse(argv)
    return lambda config: OrtGqaEngine(config, options)


def model(config, options, lanes):
    """One GroupQueryAttention node for this layout and path (symbolic batch and lengths)."""
    element = common.ONNX_DTYPES[options.dtype]
    rope, head_size = lanes.rotary > 0, lanes.head_size
    window = config.window or -1
    if options.bug == "window" and config.window:
        window = config.window + 1  # the other convention: W keys before the current one
    interleaved = options.rotary_style == "interleaved"
    attributes = {
        "num_heads": config.q_heads,
        "kv_num_heads": config.kv_heads,
        "local_window_size": window,
        "do_rotary": int(rope),
        "rotary_interleaved": int(interleaved != (options.bug == "rope")),
    }
    if options.bug != "scale":
        attributes["scale"] = float(config.scale)
    if options.path == "window" and config.window:
        attributes["sliding_window_cache"] = 1
    # The attention features the kernel has (kvfuzz's definitions: docs/fixture-format.md):
    # softcap, scores capped before the mask; head_sink, one logit per q head joined to the
    # softmax. ORT's smooth_softmax is a sink of 0 on every head: with --sinks smooth, such a
    # layout's sinks take it instead of head_sink.
    if smooth_softmax(config, options):
        attributes["smooth_softmax"] = 1
    if config.softcap is not None:
        attributes["softcap"] = float(config.softcap) * (2 if options.bug == "softcap" else 1)
    q_width, kv_width = config.q_heads * head_size, config.kv_heads * head_size
    shapes = {
        "query": [element, ["batch", "new", q_width]],
        "key": [element, ["batch", "new", kv_width]],
        "value": [element, ["batch", "new", kv_width]],
        "past_key": [element, ["batch", config.kv_heads, "past", head_size]],
        "past_value": [element, ["batch", config.kv_heads, "past", head_size]],
        "seqlens_k": [None, ["batch"]],
        "total_sequence_length": [None, []],
        "cos_cache": [element, ["positions", "half"]],
        "sin_cache": [element, ["positions", "half"]],
        "position_ids": [None, ["batch", "new"]],
        "query_seqlens": [None, ["batch"]],
        "head_sink": [element, [config.q_heads]],
    }
    used = set(INPUTS[:7])
    if rope:
        used |= {"cos_cache", "sin_cache"}
        if options.position_ids:
            used.add("position_ids")
    if options.path == "batched":
        used.add("query_seqlens")
    if config.sinks is not None and not smooth_softmax(config, options):
        used.add("head_sink")
    names = [name if name in used else "" for name in INPUTS]
    while not names[-1]:
        names.pop()
    inputs = [proto.value_info(n, shapes[n][0] or INTEGER_INPUTS[n], shapes[n][1]) for n in names if n]
    present = ["batch", config.kv_heads, "total", head_size]
    outputs = [
        proto.value_info("output", element, ["batch", "new", q_width]),
        proto.value_info("present_key", element, present),
        proto.value_info("present_value", element, present),
    ]
    outs = ["output", "present_key", "present_value"]
    node = proto.node("GroupQueryAttention", names, outs, "com.microsoft", attributes)
    return proto.model(node, inputs, outputs, {"": 21, "com.microsoft": 1})


class OrtGqaEngine(common.CacheHistory):
    def __init__(self, config, options):
        self.config, self.options = config, options
        self.dtype = options.dtype
        self.np_dtype = common.NUMPY_DTYPES[self.dtype]
        self.poison = common.poison_value(config.poison, self.np_dtype)
        self.adapter_rotary = config.rope_theta is not None and options.rope == "adapter"
        rotary = f"rope by {options.rope}" + (f" {options.rotary_style}" if options.rope == "ort" else "")
        rotary += ", position_ids" if options.position_ids else ""
        self.name = f"onnxruntime-{ort.__version__}-gqa-{self.dtype}-{options.path}, {rotary}"
        self.name += f" (bug: {options.bug})" if options.bug else ""
        # What the kernel does, measured in README.md: f32 scores and values, P kept in
        # f32, one rounding of each output to the kernel's dtype; rotated keys cached in it.
        self.numerics = {
            "output": self.dtype,
            "p": "none",
            "score_accumulation": "f32",
            "value_accumulation": "f32",
            "rotated_keys_in_storage": True,
            # The kernel is handed q rotated and rounded to its dtype (--rope adapter), or
            # rotates it itself in f32 (--rope ort). Said of every layout (it matters only
            # with RoPE): declarations must not depend on the case.
            "rotated_queries_in_storage": options.rope == "adapter",
            "rope_angles_exact": True,  # angles (and ORT's cos/sin caches) computed in float64
        }
        if options.bug == "numerics":  # declares nothing: judged as an f32 kernel, which it is not
            self.numerics = {}
        # No limit on head_dim, q heads or context turned up (tried up to 512 / 64 / 8192).
        self.supports = {
            "dtypes": [self.dtype],
            "head_dim_multiple": ROTARY_MULTIPLE,  # one for every layout, RoPE or not
            "value_dim_is_head_dim": True,  # ORT takes one head size for q, k and v
            # GQA's softcap attribute and head_sink input.
            "softcap": True,
            "sinks": True,
        }
        self.lanes = Lanes(config, options.rope == "ort", options.rotary_style)
        self.head_size = self.lanes.head_size
        self.session = common.session(model(config, options, self.lanes))
        self.caches = common.caches(config, self.np_dtype, self.head_size, self.head_size)
        if options.path == "shared":
            self.caches = SharedBuffers(config, self.np_dtype, self.head_size, self.poison)
        self.windowed = options.path == "window" and bool(config.window)
        if self.windowed:
            self.caches = WindowCaches(config, self.np_dtype, self.head_size, self.poison)

    # The protocol's operations ---------------------------------------------------------

    def step(self, chunks):
        common.check_step(chunks, self.caches, self.config, self.dtype)
        if self.options.path == "batched":
            return self._batched(chunks)
        if self.options.path == "shared":
            return [self._shared(chunk) for chunk in chunks]
        if self.windowed:
            return [self._windowed(chunk) for chunk in chunks]
        return [self._legacy(chunk) for chunk in chunks]  # and --path window without a window

    # Inputs ----------------------------------------------------------------------------

    def _padded(self, rows, heads, lanes, tokens, rotate_from=None):
        """rows[token][head][lane] as (tokens, heads * head_size) in the kernel's dtype: zero
        lanes beyond kvfuzz's, poison rows beyond the chunk's; rotated by the adapter from
        position rotate_from when that is given."""
        array = np.asarray(rows, dtype=np.float64).reshape(len(rows), heads, len(lanes))
        if rotate_from is not None:
            array = common.rotate(self.config, array, rotate_from, self.options.bug == "rope")
        out = np.zeros((tokens, heads, self.head_size), self.np_dtype)
        out[len(rows) :] = self.poison
        out[: len(rows), :, lanes] = array  # exact: kvfuzz's values are already in the layout's dtype
        return out.reshape(tokens, heads * self.head_size)

    def _chunk_feeds(self, chunks, firsts, tokens):
        """query, key, value of the chunks as a batch (len(chunks), tokens, width)."""
        c, qk, v = self.config, self.lanes.qk, self.lanes.v
        rotated = [p if self.adapter_rotary else None for p in firsts]
        feeds = {
            "query": np.stack([self._padded(ch.q, c.q_heads, qk, tokens, r) for ch, r in zip(chunks, rotated)]),
            "key": np.stack([self._padded(ch.k, c.kv_heads, qk, tokens, r) for ch, r in zip(chunks, rotated)]),
            "value": np.stack([self._padded(ch.v, c.kv_heads, v, tokens) for ch in chunks]),
        }
        if c.sinks is not None and not smooth_softmax(c, self.options):
            sinks = np.asarray(c.sinks, np.float64)
            if self.options.bug == "sinks":
                sinks = sinks[::-1]  # another head's sink
            feeds["head_sink"] = sinks.astype(self.np_dtype)
        return feeds

    def _rotary_feeds(self, firsts, tokens, positions):
        """cos/sin caches for positions 0 .. positions-1 (the padded pairs' cos 1 and sin 0),
        and position_ids when asked for."""
        if not self.lanes.rotary:
            return {}
        positions += int(self.options.bug == "positions")  # room for the late position
        angles = np.zeros((positions, self.lanes.rotary // 2))
        angles[:, : self.config.head_dim // 2] = common.rope_angles(self.config, np.arange(positions))
        feeds = {"cos_cache": np.cos(angles).astype(self.np_dtype), "sin_cache": np.sin(angles).astype(self.np_dtype)}
        if self.options.position_ids:
            # --bug positions: a chunk after a past one position late (a gap, as after a
            # skipped token). A shift of every position would not do: RoPE scores depend
            # only on the distance between q and k.
            late = [int(self.options.bug == "positions" and p > 0) for p in firsts]
            feeds["position_ids"] = np.array([np.arange(p, p + tokens) + d for p, d in zip(firsts, late)], np.int64)
        return feeds

    def _rows(self, out, tokens):
        c = self.config
        return out.reshape(tokens, c.q_heads, self.head_size)[:, :, : c.value_dim]

    # The three paths -------------------------------------------------------------------

    def _legacy(self, chunk):
        past_keys, past_values = self.caches.entries[chunk.seq]
        past, new = past_keys.shape[2], len(chunk.q)
        total = past + new
        feeds = self._chunk_feeds([chunk], [past], new)
        feeds |= {
            "past_key": past_keys,
            "past_value": past_values,
            "seqlens_k": np.array([total - 1], np.int32),
            "total_sequence_length": np.array(total, np.int32),
        }
        feeds |= self._rotary_feeds([past], new, total)
        out, present_keys, present_values = self.session.run(None, feeds)
        self.caches.entries[chunk.seq] = (present_keys, present_values)
        return range(past, total), self._rows(out[0], new)

    def _batched(self, chunks):
        pasts = [self.caches.length(chunk.seq) for chunk in chunks]
        news = [len(chunk.q) for chunk in chunks]
        longest_past, tokens = max(pasts), max(news)
        capacity = longest_past + tokens  # present's length: every row's past + the padded chunk
        shape = (len(chunks), self.config.kv_heads, longest_past, self.head_size)
        past_keys, past_values = np.full(shape, self.poison, self.np_dtype), np.full(shape, self.poison, self.np_dtype)
        for row, (chunk, past) in enumerate(zip(chunks, pasts)):
            keys, values = self.caches.entries[chunk.seq]
            past_keys[row, :, :past], past_values[row, :, :past] = keys[0], values[0]
        feeds = self._chunk_feeds(chunks, pasts, tokens)
        feeds |= {
            "past_key": past_keys,
            "past_value": past_values,
            "seqlens_k": np.array([p + n - 1 for p, n in zip(pasts, news)], np.int32),
            "total_sequence_length": np.array(capacity, np.int32),
            "query_seqlens": np.array(news, np.int32),
        }
        feeds |= self._rotary_feeds(pasts, tokens, capacity)
        out, present_keys, present_values = self.session.run(None, feeds)
        results = []
        for row, (chunk, past, new) in enumerate(zip(chunks, pasts, news)):
            total = past + new
            cache = (present_keys[row : row + 1, :, :total].copy(), present_values[row : row + 1, :, :total].copy())
            self.caches.entries[chunk.seq] = cache
            results.append((range(past, total), self._rows(out[row, :new], new)))
        return results

    def _shared(self, chunk):
        past, new = self.caches.length(chunk.seq), len(chunk.q)
        total = past + new
        keys, values = self.caches.reserve(chunk.seq, total)
        binding = self.session.io_binding()
        feeds = self._chunk_feeds([chunk], [past], new)
        feeds |= {
            "seqlens_k": np.array([total - 1], np.int32),
            "total_sequence_length": np.array(keys.shape[2], np.int32),  # static cache: its capacity
        }
        feeds |= self._rotary_feeds([past], new, keys.shape[2])
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        binding.bind_output("output")  # first: get_outputs() lists the outputs in binding order
        # One OrtValue over each numpy buffer, bound as past and as present: the kernel
        # writes the new tokens into the buffer itself (past_present_share_buffer).
        for cache, array in (("key", keys), ("value", values)):
            buffer = ort.OrtValue.ortvalue_from_numpy(array)
            binding.bind_ortvalue_input(f"past_{cache}", buffer)
            binding.bind_ortvalue_output(f"present_{cache}", buffer)
        self.session.run_with_iobinding(binding)
        out = binding.get_outputs()[0].numpy()
        self.caches.lengths[chunk.seq] = total
        return range(past, total), self._rows(out[0], new)


    def _windowed(self, chunk):
        caches = self.caches
        past, new = caches.length(chunk.seq), len(chunk.q)
        total = past + new
        keys, values = caches.buffers[chunk.seq]
        feeds = self._chunk_feeds([chunk], [past], new)
        feeds |= {
            "past_key": keys,
            "past_value": values,
            "seqlens_k": np.array([total - 1], np.int32),
            "total_sequence_length": np.array(total, np.int32),
        }
        out, present_keys, present_values = self.session.run(None, feeds)
        caches.buffers[chunk.seq] = (present_keys, present_values)
        caches.appended(chunk.seq, feeds["key"], feeds["value"])
        return range(past, total), self._rows(out[0], new)


class SharedBuffers:
    """Per sequence, a preallocated buffer (1, kv_heads, capacity, head_size) for keys and
    one for values, and the sequence's length; rows at or past the length hold poison
    (reset and truncate poison what they release). The capacity doubles when a chunk needs
    more: the kernel itself never reallocates, it writes into the buffer."""

    def __init__(self, config, np_dtype, head_size, poison):
        self.shape = (1, config.kv_heads, SHARED_CAPACITY, head_size)
        self.np_dtype, self.poison = np_dtype, poison
        self.buffers = [self._fresh(SHARED_CAPACITY) for _ in range(config.sequences)]
        self.lengths = [0] * config.sequences

    def _fresh(self, capacity):
        shape = self.shape[:2] + (capacity,) + self.shape[3:]
        return np.full(shape, self.poison, self.np_dtype), np.full(shape, self.poison, self.np_dtype)

    def check(self, seq):
        if not 0 <= seq < len(self.buffers):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.buffers)})")

    def length(self, seq):
        return self.lengths[seq]

    def reserve(self, seq, total):
        """The sequence's buffers, grown (contents kept) to hold total tokens."""
        keys, values = self.buffers[seq]
        if total > keys.shape[2]:
            capacity = keys.shape[2]
            while capacity < total:
                capacity *= 2
            grown = self._fresh(capacity)
            for old, new in zip((keys, values), grown):
                new[:, :, : self.lengths[seq]] = old[:, :, : self.lengths[seq]]
            self.buffers[seq] = grown
        return self.buffers[seq]

    def reset(self, seq):
        self.truncate(seq, 0)

    def truncate(self, seq, keep):
        self.check(seq)
        if not 0 <= keep <= self.lengths[seq]:
            raise ValueError(f"sequence {seq} holds {self.lengths[seq]} tokens, cannot keep {keep}")
        for buffer in self.buffers[seq]:
            buffer[:, :, keep:] = self.poison
        self.lengths[seq] = keep

    def fork(self, src, dst):
        common.check_fork(self.check, src, dst)
        self.buffers[dst] = tuple(buffer.copy() for buffer in self.buffers[src])
        self.lengths[dst] = self.lengths[src]


class WindowCaches:
    """sliding_window_cache = 1: per sequence a window-sized buffer (1, kv_heads, C,
    head_size), C = W + WINDOW_SLACK, that ORT itself evicts from: after T tokens its rows
    [0, L(T)) hold the L(T) most recent positions (the schema's formula, resident()), the
    rest poison or stale rows. Beside it the adapter keeps every key and value it passed
    (already rotated: --rope adapter), for what ORT cannot do: a truncate to a length whose
    window was evicted is re-materialized from them; one the schema says is exact
    (L(T - k) == L(T) - k) leaves the buffer untouched, as it prescribes."""

    def __init__(self, config, np_dtype, head_size, poison):
        self.window, self.capacity = config.window, config.window + WINDOW_SLACK
        self.kv_heads, self.head_size = config.kv_heads, head_size
        self.np_dtype, self.poison = np_dtype, poison
        self.passed = common.caches(config, np_dtype, head_size, head_size)
        self.buffers = [self._fresh() for _ in range(config.sequences)]

    def _fresh(self):
        shape = (1, self.kv_heads, self.capacity, self.head_size)
        return np.full(shape, self.poison, self.np_dtype), np.full(shape, self.poison, self.np_dtype)

    def resident(self, total):
        """L(T): how many of the most recent positions ORT keeps after T tokens."""
        if total <= self.capacity:
            return total
        evicted_at_once = self.capacity - self.window + 1
        return total - evicted_at_once * -(-(total - self.capacity) // evicted_at_once)

    def check(self, seq):
        self.passed.check(seq)

    def length(self, seq):
        return self.passed.length(seq)

    def appended(self, seq, keys, values):
        """The chunk's key and value inputs (1, tokens, kv_heads * head_size), as passed."""
        entry = self.passed.entries[seq]
        new = [a.reshape(a.shape[1], self.kv_heads, self.head_size).transpose(1, 0, 2)[None] for a in (keys, values)]
        self.passed.entries[seq] = tuple(np.concatenate([old, n], axis=2) for old, n in zip(entry, new))

    def reset(self, seq):
        self.passed.reset(seq)
        self.buffers[seq] = self._fresh()

    def truncate(self, seq, keep):
        total = self.length(seq)
        self.passed.truncate(seq, keep)
        if self.resident(keep) == self.resident(total) - (total - keep):
            return  # ORT's rollback: rerun with the shorter length, the buffer untouched
        resident = self.resident(keep)
        self.buffers[seq] = self._fresh()
        for buffer, passed in zip(self.buffers[seq], self.passed.entries[seq]):
            buffer[:, :, :resident] = passed[:, :, keep - resident : keep]

    def fork(self, src, dst):
        self.passed.fork(src, dst)
        self.buffers[dst] = tuple(buffer.copy() for buffer in self.buffers[src])


def main():
    common.serve_exec(factory())


if __name__ == "__main__":
    main()

