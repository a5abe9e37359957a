"""kvfuzz.exec_server: the exec engine protocol, versions 1 and 2, as a loop to import
(docs/engine-protocol.md). For an engine that kvfuzz runs as a process of its own
(`kvfuzz check --engine "exec:python3 my_engine.py"`), in Python; the in-process way, with
numpy arrays and no protocol, is the rest of this package (`kvfuzz.check`, docs/python.md).

kvfuzz starts your program, writes one JSON request per line to its stdin and reads one
JSON reply per line from its stdout. This module does the reading, the writing and the
error handling; you write the engine:

    from kvfuzz.exec_server import serve

    class MyEngine:
        name = "my-engine"
        def __init__(self, config): ...        # a Config: the layout and the sequences
        def step(self, chunks): ...            # -> [(positions, out), ...], one per chunk
        def reset(self, seq): ...
        def truncate(self, seq, keep): ...     # optional: announced when defined
        def fork(self, src, dst): ...          # optional: announced when defined
        numerics = {...}                       # optional: hello's "numerics" and "supports"
        supports = {...}

    if __name__ == "__main__":
        serve(MyEngine)

and run `kvfuzz check --engine "exec:python3 my_engine.py"`.

A whole model (ids in, logits out; docs/engine-protocol.md, "Whole models") is a class that
says `whole_model = True`: it is made with a ModelEngineConfig (engine: the layout, model:
the sizes, weights(): the weights kvfuzz wrote, as numpy arrays), its step is given
ModelChunks (seq, ids) and returns (positions, logits) pairs.

Without the package. This file is standard library only (orjson when present) and imports
nothing of kvfuzz, on purpose: an exec engine is a separate process, often run by a plain
python3 in which kvfuzz is not installed, or from a checkout whose compiled extension
(kvfuzz._kvfuzz) is not built. `import kvfuzz.exec_server` runs the package's __init__,
which loads that extension; so where the package is not installed, load this file by
itself: put its folder on sys.path and `from exec_server import serve` (what
examples/python-engine/honest_engine.py, the ONNX Runtime adapter and the exec door's test
engines do from the checkout: python/kvfuzz/), or copy the one file beside your engine.
Keep it that way: no import of kvfuzz here, no relative import.

The loop speaks version 2 when kvfuzz offers it: one process serves many cases, and each
new case (hello, then every new_case) gets an engine object of its own, made by
make_engine(config), so nothing of one case can leak into the next through the engine.
State outside it (a model loaded at import, a compiled kernel) is kept, which is the
point: it is paid for once per process, not once per case. With a kvfuzz that offers only
version 1 (KVFUZZ_EXEC_PROTOCOL=1), every case is a process of its own.

An exception raised by the engine becomes {"ok": false, "error": "Type: message"}, which
kvfuzz reports as an engine error of the case at hand (and saves as a fixture). print()
goes to stderr while serve() runs: stdout belongs to the protocol. With orjson installed
(pip install orjson) requests and replies are read and written by it, 10 to 20 times
faster than the json module, which is most of a Python engine's cost per step
(docs/BENCHMARKS.md, "The test command").
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

try:
    import orjson
except ImportError:  # the standard library's json: the same text, slower
    orjson = None


def _loads(line):
    if orjson is not None:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass  # NaN or Infinity, which orjson does not read: json says what is wrong
    return json.loads(line)


def _dumps(reply) -> str:
    if orjson is not None:
        try:
            text = orjson.dumps(reply)
            # orjson writes NaN and +-Infinity as null, which kvfuzz would read as NaN: a
            # reply with a null goes through json, which keeps Infinity apart from NaN.
            if b"null" not in text:
                return text.decode()
        except TypeError:
            pass  # a value orjson does not write (numpy): json's message names it
    return json.dumps(reply, separators=(",", ":"))


PROTOCOLS = (1, 2)  # the versions this loop speaks; 2 adds new_case


@dataclass
class Config:
    """What hello tells the engine: the scenario's layout, sequences and placement."""

    q_heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    page_size: int
    dtype: str  # "f32", "f16" or "bf16": q, k, v are already rounded to it
    scale: float  # the softmax scale (1/sqrt(head_dim) unless the scenario sets one)
    rope_theta: float | None  # RoPE (half-split pairs unless rope_style says otherwise) when set
    window: int | None  # the query at position p sees keys p - window + 1 .. p
    sequences: int  # sequence ids are 0 .. sequences - 1
    page_order: list  # the order a paged engine hands out its physical pages
    poison: str  # "nan", "+inf", "-inf" or "huge": what unused cache slots should hold
    # The attention features, sent only to an engine that declares them (supports):
    softcap: float | None = None  # logit -> softcap * tanh(logit / softcap), before ALiBi
    sinks: list | None = None  # one sink logit per q head: a softmax term with no value
    alibi: list | None = None  # one slope per q head: logit += slope * (key pos - query pos)
    chunked_local: int | None = None  # the query at p sees keys from p // C * C on
    # The quantized KV caches, sent only to an engine that declares them (kv_fp8,
    # kv_ggml_blocks, kv_affine, kv_channel): {"type": "fp8_e4m3fn" | ... | "q5_1" | "affine2" |
    # "affine4" | "affine8" | "channel_u8" | "channel_u4", "scales": one per kv head for fp8,
    # else None, and "group" for an affine or per-channel format} (kvfuzz.quantize_row gives the bytes), or None: the dtype.
    k_format: dict | None = None
    v_format: dict | None = None
    # MLA, sent only to an engine that declares it (value_from_key): each value is its key's
    # first value_dim elements (the steps' v holds them), so the cache may keep keys alone.
    value_from_key: bool = False
    # RoPE's pairs: "half_split" ((x_i, x_{i+d/2}), NeoX's), or "interleaved" ((x_2i, x_2i+1),
    # GPT-J's), sent only to an engine that declares it (rope_interleaved).
    rope_style: str = "half_split"
    # RoPE on the head's last rope_dims elements only (MLA's decoupled RoPE part; pair i turns
    # by pos * theta^(-2i / rope_dims)), sent only to an engine that declares rope_dims. None:
    # the whole head.
    rope_dims: int | None = None

    @property
    def group(self):
        """Query heads per kv head: q head h reads kv head h // group."""
        return self.q_heads // self.kv_heads


@dataclass
class Chunk:
    """One sequence's new tokens in a step: q[token][q_head][head_dim],
    k[token][kv_head][head_dim], v[token][kv_head][value_dim]."""

    seq: int
    q: list
    k: list
    v: list


@dataclass
class ModelConfig:
    """A whole model's sizes and its weights' seed (docs/fixture-format.md, "model")."""

    vocab: int  # token ids and logits per row
    width: int  # the residual stream
    layers: int
    ffn: int  # SwiGLU's hidden width
    seed: int


@dataclass
class ModelEngineConfig:
    """What hello tells a whole-model engine: every layer's attention (engine: a Config) and
    the model, whose weights kvfuzz wrote to a safetensors file (weights_file)."""

    engine: Config
    model: ModelConfig
    weights_file: str

    def weights(self):
        """The weights as float32 numpy arrays, [in][out] (x @ w), as the in-process
        kvfuzz.ModelEngineConfig.weights() gives them: embedding, layers (a list of dicts:
        attention_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down), final_norm, lm_head.
        Needs numpy (imported here, so that an attention engine never needs it)."""
        import numpy

        with open(self.weights_file, "rb") as file:
            data = file.read()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size])
        header.pop("__metadata__", None)
        body = memoryview(data)[8 + size :]
        weights = {"layers": [{} for _ in range(self.model.layers)]}
        for name, tensor in header.items():
            begin, end = tensor["data_offsets"]
            array = numpy.frombuffer(body[begin:end], dtype="<f4").reshape(tensor["shape"]).copy()
            parts = name.split(".")
            if parts[0] == "layers":
                weights["layers"][int(parts[1])][parts[2]] = array
            else:
                weights[name] = array
        return weights


@dataclass
class ModelChunk:
    """One sequence's new tokens in a whole model's step: ids[token], vocabulary ids."""

    seq: int
    ids: list

    @property
    def tokens(self):
        return len(self.ids)


def _plain(values):
    """A numpy array (or scalar) as the lists and numbers JSON writes; anything else as it is."""
    return values.tolist() if hasattr(values, "tolist") else values


def config_from_hello(request):
    """The Config a hello (or new_case) request describes."""
    layout = request["layout"]
    return Config(
        q_heads=layout["q_heads"],
        kv_heads=layout["kv_heads"],
        head_dim=layout["head_dim"],
        value_dim=layout["value_dim"],
        page_size=layout["page_size"],
        dtype=layout["dtype"],
        scale=layout["scale"],
        rope_theta=layout["rope_theta"],
        window=layout["window"],
        sequences=request["sequences"],
        page_order=request["page_order"],
        poison=request["poison"],
        softcap=layout.get("softcap"),
        sinks=layout.get("sinks"),
        alibi=layout.get("alibi"),
        chunked_local=layout.get("chunked_local"),
        k_format=layout.get("k_format"),
        v_format=layout.get("v_format"),
        value_from_key=bool(layout.get("value_from_key", False)),
        rope_style=layout.get("rope_style", "half_split"),
        rope_dims=layout.get("rope_dims"),
    )


DTYPES = ("f32", "f16", "bf16")


def layout_numerics(numerics, dtype):
    """An engine's `numerics` for a layout of `dtype`: the dict itself; or, for one keyed by
    dtype ({"bf16": {...}, "f16": {...}}: an engine that computes in the layout's dtype),
    the dtype's entry ({} when it has none: the defaults); or, for a method, what it
    returns for the dtype. The in-process door (kvfuzz.check) asks this function too."""
    if callable(numerics):
        numerics = numerics(dtype)
    if isinstance(numerics, dict) and numerics and all(key in DTYPES for key in numerics):
        return numerics.get(dtype, {})
    return numerics


def whole_model(engine):
    """Whether the engine (or its class) says `whole_model = True`: ids in, logits out."""
    return getattr(engine, "whole_model", False) is True


def declarations(engine, protocol, dtype="f32"):
    """The reply to hello and to new_case: the version, the name and what the engine declares
    (its numerics for the case's dtype: layout_numerics). `engine` may be the class itself
    (a whole model's first hello, which has no model to make one for)."""
    capabilities = {"truncate": hasattr(engine, "truncate"), "fork": hasattr(engine, "fork")}
    name = getattr(engine, "name", getattr(engine, "__name__", type(engine).__name__))
    reply = {"ok": True, "protocol": protocol, "name": name, "capabilities": capabilities}
    if whole_model(engine):
        reply["whole_model"] = True
    # Optional declarations, dicts on the class (docs/engine-protocol.md, hello).
    for field in ("bitwise", "numerics", "supports"):
        if hasattr(engine, field):
            reply[field] = getattr(engine, field)
    if "numerics" in reply:
        reply["numerics"] = layout_numerics(reply["numerics"], dtype)
    return reply


class Session:
    """One engine process's side of the protocol: answer(request) -> reply, raising on failure."""

    def __init__(self, make_engine, protocols=PROTOCOLS):
        self.make_engine = make_engine
        self.protocols = protocols  # what this side speaks
        self.protocol = None  # the version hello chose
        self.engine = None
        self.model = False  # the case is a whole model's (its hello carried "model")

    def answer(self, request):
        op = request.get("op")
        if op == "hello":
            # kvfuzz lists what it speaks in "protocols"; one of version 1 sends only "protocol".
            offered = request.get("protocols", [request.get("protocol")])
            common = [v for v in offered if v in self.protocols]
            if not common:
                ours = " or ".join(str(v) for v in self.protocols)
                raise ValueError(f"this engine speaks protocol {ours}; kvfuzz offered {offered}")
            self.protocol = max(common)
            return self.start_case(request)
        if self.protocol is None:
            raise RuntimeError(f"'{op}' before hello")
        if op == "new_case" and self.protocol >= 2:
            self.engine = None  # the last case's engine is gone even if the next one fails
            return self.start_case(request)
        if self.engine is None:
            raise RuntimeError(f"'{op}' without a case: making its engine failed")
        if op == "step" and self.model:
            results = self.engine.step([ModelChunk(c["seq"], c["ids"]) for c in request["chunks"]])
            return {"ok": True, "chunks": [{"positions": [int(x) for x in p], "logits": _plain(logits)} for p, logits in results]}  # fmt: skip
        if op == "step":
            chunks = [Chunk(c["seq"], c["q"], c["k"], c["v"]) for c in request["chunks"]]
            results = self.engine.step(chunks)
            return {"ok": True, "chunks": [{"positions": list(p), "out": out} for p, out in results]}
        if op == "reset":
            self.engine.reset(request["seq"])
        elif op == "truncate":
            self.engine.truncate(request["seq"], request["keep"])
        elif op == "fork":
            self.engine.fork(request["src"], request["dst"])
        else:
            raise ValueError(f"unknown op {op!r} (protocol {self.protocol})")
        return {"ok": True}


    def start_case(self, request):
        """hello or new_case: the case's engine, made for its config, and its declarations. A
        whole model's first hello carries no model (kvfuzz does not know yet that it is one):
        it is answered from the class, and no engine is made."""
        config = config_from_hello(request)
        self.model = "model" in request
        if self.model:
            m = request["model"]
            model = ModelConfig(m["vocab"], m["width"], m["layers"], m["ffn"], m["seed"])
            self.engine = self.make_engine(ModelEngineConfig(config, model, m["weights"]))
        elif whole_model(self.make_engine):
            return declarations(self.make_engine, self.protocol, config.dtype)
        else:
            self.engine = self.make_engine(config)
        return declarations(self.engine, self.protocol, config.dtype)


def serve(make_engine, requests=None, replies=None, protocols=PROTOCOLS):
    """Answers requests until end of input. make_engine(config) is called at hello and at
    every new_case."""
    requests = requests or sys.stdin
    replies = replies or sys.stdout
    sys.stdout = sys.stderr  # a stray print() must not corrupt the protocol
    session = Session(make_engine, protocols)
    for line in requests:
        try:
            reply = session.answer(_loads(line))
            text = _dumps(reply)  # fails on numpy values: .tolist()
        except Exception as error:  # every failure is the engine's answer, not a crash
            text = json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"})
        replies.write(text + "\n")
        replies.flush()
