"""What every Python adapter shares, whatever library runs its kernel: poison, kvfuzz's
RoPE in float64, the per-sequence cache of an engine that concatenates past and new keys,
the step's checks, and the exec door (kvfuzz.exec_server, with rows as JSON lists).

An adapter's engine class takes (config, options) and returns rows as arrays (numpy, or
anything numpy can read); the exec door (`serve_exec`) turns them into JSON lists, the
in-process door (`kvfuzz.check(factory)`) reads them as they are. Both doors make one
engine per case. Standard library and numpy only: the ONNX Runtime and torch adapters
import it from their folders (adapters/onnxruntime, adapters/torch).
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def round_up(n, multiple):
    return -(-n // multiple) * multiple


def poison_value(poison, np_dtype):
    """What kvfuzz asks unused cache slots to hold, in the kernel's dtype: padding rows and
    the unused tail of a preallocated buffer get it, so a kernel that reads them is seen."""
    if poison == "huge":
        return np.finfo(np_dtype).max
    return {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}[poison]


def rope_angles(config, positions):
    """pos * theta^(-2i/head_dim) for i < head_dim/2, float64: (len(positions), head_dim/2)."""
    half = np.arange(config.head_dim // 2, dtype=np.float64)
    inv_freq = config.rope_theta ** (-2.0 * half / config.head_dim)
    return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]


def rotate(config, x, first_position, interleaved=False):
    """x[token][head][head_dim] turned by kvfuzz's RoPE (NeoX half-split pairs (i, i + d/2))
    at first_position + token, in float64 (the caller rounds it once to the kernel's dtype).
    interleaved: GPT-J pairs (2i, 2i + 1) instead, the wrong style for negative controls."""
    angles = rope_angles(config, first_position + np.arange(x.shape[0]))[:, None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def per_dtype(chosen, dtypes, numerics_of):
    """What an engine that computes in the dtype `chosen` declares: (numerics, supported
    dtypes). "layout": each case's own dtype among `dtypes`, so its numerics are keyed by
    dtype (kvfuzz.exec_server.layout_numerics gives each case its dtype's) and it supports
    them all; otherwise `numerics_of(chosen)` and that dtype alone."""
    if chosen == "layout":
        return {dtype: numerics_of(dtype) for dtype in dtypes}, list(dtypes)
    return numerics_of(chosen), [chosen]


def _copy(array):
    """A copy of a numpy array or a torch tensor (which has clone, not copy)."""
    clone = getattr(array, "clone", None)
    return clone() if clone is not None else array.copy()


def check_fork(check, src, dst):
    """A fork's sequences are in range (check(seq) raises otherwise) and distinct."""
    check(src)
    check(dst)
    if src == dst:
        raise ValueError(f"fork of sequence {src} into itself")


class Caches:
    """Per sequence, the cache as a concatenating engine keeps it: keys and values
    (1, kv_heads, length, width) in the kernel's dtype, exactly the valid tokens. The keys
    are what the kernel cached (rotated, for RoPE), so reset, truncate and fork are exact
    operations on these arrays. zeros(shape) makes an empty one (numpy or torch)."""

    def __init__(self, config, zeros, key_width, value_width):
        self.shapes = (key_width, value_width)
        self.kv_heads, self.zeros = config.kv_heads, zeros
        self.entries = [self.empty() for _ in range(config.sequences)]

    def empty(self):
        return tuple(self.zeros((1, self.kv_heads, 0, w)) for w in self.shapes)

    def check(self, seq):
        if not 0 <= seq < len(self.entries):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.entries)})")

    def length(self, seq):
        return self.entries[seq][0].shape[2]

    def reset(self, seq):
        self.check(seq)
        self.entries[seq] = self.empty()

    def truncate(self, seq, keep):
        self.check(seq)
        if not 0 <= keep <= self.length(seq):
            raise ValueError(f"sequence {seq} holds {self.length(seq)} tokens, cannot keep {keep}")
        self.entries[seq] = tuple(_copy(a[:, :, :keep]) for a in self.entries[seq])

    def fork(self, src, dst):
        check_fork(self.check, src, dst)
        self.entries[dst] = tuple(_copy(a) for a in self.entries[src])


def check_step(chunks, caches, config, dtype, kernel):
    """The step's sequences are distinct and in range, and the layout's values fit the
    kernel (named in the message: "ORT's", "torch's")."""
    seqs = [chunk.seq for chunk in chunks]
    for seq in seqs:
        caches.check(seq)
    if len(set(seqs)) != len(seqs):
        raise ValueError(f"a sequence appears in two chunks of one step: {seqs}")
    if config.dtype != dtype and dtype != "f32":  # f32 holds every dtype's values
        raise ValueError(
            f"layout.dtype {config.dtype}: this engine runs {kernel} {dtype} kernel (supports.dtypes [{dtype}])"
        )


def paged_step(chunks, caches, config, dtypes, attend):
    """A paged engine's step around its kernel (block_tables.BlockTables as `caches`): the
    step's sequences distinct and in range, the layout's dtype one of `dtypes`, then
    attend(chunks that have tokens) -> {seq: (positions, rows)}, and no rows, at the
    sequence's length, for a chunk without tokens. Returns the rows in the chunks' order."""
    seqs = [chunk.seq for chunk in chunks]
    for seq in seqs:
        caches.check(seq)
    if len(set(seqs)) != len(seqs):
        raise ValueError(f"a sequence appears in two chunks of one step: {seqs}")
    if config.dtype not in dtypes:
        raise ValueError(f"layout.dtype {config.dtype}: this engine takes {dtypes}")
    live = [chunk for chunk in chunks if len(chunk.q)]
    rows = attend(live) if live else {}
    empty = np.zeros((0, config.q_heads, config.value_dim))
    at = caches.lengths
    return [rows[c.seq] if len(c.q) else (range(at[c.seq], at[c.seq]), empty) for c in chunks]


class CacheHistory:
    """reset, truncate and fork of an engine whose per-sequence caches are `self.caches`
    (Caches here, or block_tables.BlockTables over a paged pool)."""

    def reset(self, seq):
        self.caches.reset(seq)

    def truncate(self, seq, keep):
        self.caches.truncate(seq, keep)

    def fork(self, src, dst):
        self.caches.fork(src, dst)


class JsonRows:
    """The exec door's view of an engine: the same engine, its rows as JSON lists. It has
    reset, truncate and fork exactly where the engine has them (the exec door declares its
    capabilities by them)."""

    def __init__(self, engine):
        self.engine = engine
        for field in ("name", "numerics", "supports", "reset", "truncate", "fork"):
            if hasattr(engine, field):
                setattr(self, field, getattr(engine, field))

    def step(self, chunks):
        return [(list(positions), np.asarray(out, np.float64).tolist()) for positions, out in self.engine.step(chunks)]


def llama_weights(weights):
    """kvfuzz's tiny transformer's weights (config.weights(): Linear weights [in][out]) under
    the names Llama checkpoints give them, transformers' and mlx-lm's alike, Linear weights
    transposed to [out][in]: {name: numpy array}."""
    named = {
        "model.embed_tokens.weight": weights["embedding"],
        "model.norm.weight": weights["final_norm"],
        "lm_head.weight": weights["lm_head"].T,
    }
    for i, layer in enumerate(weights["layers"]):
        at = f"model.layers.{i}."
        named[at + "input_layernorm.weight"] = layer["attention_norm"]
        named[at + "post_attention_layernorm.weight"] = layer["mlp_norm"]
        for name, key in (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv"), ("o_proj", "wo")):
            named[at + f"self_attn.{name}.weight"] = layer[key].T
        for name, key in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down")):
            named[at + f"mlp.{name}.weight"] = layer[key].T
    return {name: np.ascontiguousarray(array) for name, array in named.items()}


def _serve():
    """kvfuzz.exec_server.serve: the checkout's python/kvfuzz/exec_server.py by itself when it
    is there, else the installed package's. The module is standard library only, so the exec
    door needs no kvfuzz package in the interpreter (.venv has the kernels' libraries from
    scripts/setup.sh; the package only once tests/python's python_install ran), and a check
    runs this checkout's loop, not whichever version was installed last (nor one that pip is
    replacing)."""
    sys.path.insert(1, os.path.join(HERE, "..", "..", "python", "kvfuzz"))
    try:
        from exec_server import serve
    except ImportError:
        from kvfuzz.exec_server import serve
    return serve


def serve_exec(factory):
    """Serves kvfuzz's exec protocol (version 2: one process for every case) with
    factory(config), an attention engine whose rows become JSON lists (JsonRows)."""
    _serve()(lambda config: JsonRows(factory(config)))


def serve_model_exec(engine_class):
    """Serves kvfuzz's exec protocol with a whole-model engine class (one with whole_model,
    which kvfuzz reads off the class, and new_case)."""
    _serve()(engine_class)
