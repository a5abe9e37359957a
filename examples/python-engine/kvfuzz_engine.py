"""The kvfuzz engine protocol, version 1, as a loop to import (docs/engine-protocol.md).

kvfuzz starts your program, writes one JSON request per line to its stdin and reads one
JSON reply per line from its stdout. This module does the reading, the writing and the
error handling; you write the engine:

    from kvfuzz_engine import serve

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

An exception raised by the engine becomes {"ok": false, "error": "Type: message"}, which
kvfuzz reports as an engine error of the case at hand (and saves as a fixture). print()
goes to stderr while serve() runs: stdout belongs to the protocol. Standard library only.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

PROTOCOL = 1


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
    rope_theta: float | None  # RoPE (NeoX half-split) when set
    window: int | None  # the query at position p sees keys p - window + 1 .. p
    sequences: int  # sequence ids are 0 .. sequences - 1
    page_order: list  # the order a paged engine hands out its physical pages
    poison: str  # "nan", "+inf", "-inf" or "huge": what unused cache slots should hold

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


def config_from_hello(request):
    """The Config a hello request describes."""
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
    )


def answer(engine, make_engine, request):
    """(engine, reply) for one parsed request; hello makes the engine. Raises on failure."""
    op = request.get("op")
    if op == "hello":
        wanted = request.get("protocol")
        if wanted != PROTOCOL:
            raise ValueError(f"this engine speaks protocol {PROTOCOL}, not {wanted}")
        engine = make_engine(config_from_hello(request))
        capabilities = {"truncate": hasattr(engine, "truncate"), "fork": hasattr(engine, "fork")}
        name = getattr(engine, "name", type(engine).__name__)
        reply = {"ok": True, "protocol": PROTOCOL, "name": name, "capabilities": capabilities}
        # Optional declarations, dicts on the class (docs/engine-protocol.md, hello).
        for field in ("bitwise", "numerics", "supports"):
            if hasattr(engine, field):
                reply[field] = getattr(engine, field)
        return engine, reply
    if engine is None:
        raise RuntimeError(f"'{op}' before hello")
    if op == "step":
        chunks = [Chunk(c["seq"], c["q"], c["k"], c["v"]) for c in request["chunks"]]
        results = engine.step(chunks)
        return engine, {
            "ok": True,
            "chunks": [{"positions": list(p), "out": out} for p, out in results],
        }
    if op == "reset":
        engine.reset(request["seq"])
    elif op == "truncate":
        engine.truncate(request["seq"], request["keep"])
    elif op == "fork":
        engine.fork(request["src"], request["dst"])
    else:
        raise ValueError(f"unknown op {op!r}")
    return engine, {"ok": True}


def serve(make_engine, requests=None, replies=None):
    """Answers requests until end of input. make_engine(config) is called at hello."""
    requests = requests or sys.stdin
    replies = replies or sys.stdout
    sys.stdout = sys.stderr  # a stray print() must not corrupt the protocol
    engine = None
    for line in requests:
        try:
            engine, reply = answer(engine, make_engine, json.loads(line))
            text = json.dumps(reply, separators=(",", ":"))  # fails on numpy values: .tolist()
        except Exception as error:  # every failure is the engine's answer, not a crash
            text = json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"})
        replies.write(text + "\n")
        replies.flush()
